"""Run a graph on the scheduler in effect.

A ``dask.distributed.Client`` that is the default client runs jask's graphs
(its dashboard then shows every tile); otherwise the scheduler set with
``dask.config.set(scheduler=...)``; otherwise Dask's threaded scheduler with
as many threads as the memory model assumed.
"""
from __future__ import annotations

import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait

import dask
import dask.threaded
from dask.base import get_scheduler
from threadpoolctl import ThreadpoolController

from jask import progress
from jask.graph import cluster
from jask.memory import TileCost

_blas = ThreadpoolController()


def _fix_mmap_threshold() -> None:
    """Give tile-sized buffers back to the system as soon as they are freed.

    glibc serves allocations above its mmap threshold with fresh pages and
    returns them on free, but raises that threshold to the size of every
    such block freed (up to 32 MB): after one large tile, tiles come from a
    per-thread heap arena and stay in the process once freed. Each worker
    thread then keeps its own, and a chain of ops (a training step) peaked
    at 1.4-2.3x the budget. Pinning the threshold stops the drift.
    """
    import ctypes
    import os
    threshold = int(os.environ.get("JASK_MMAP_THRESHOLD", 1 << 20))
    if threshold <= 0:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, threshold)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to pin
        pass


_fix_mmap_threshold()
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One long-lived pool per size: fresh threads per op would each get a
    fresh malloc arena, and the process's memory crept up op after op."""
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="jask")
        return pool


class _TrackedPool(Executor):
    """The shared pool, remembering the tasks of one run so that after a
    failure we can wait for those still running before the caller removes
    the half-written output."""

    def __init__(self, pool: ThreadPoolExecutor, limit: int):
        self._pool = pool
        self.futures: list[Future] = []
        # what dask.threaded.get reads as the most tasks to run at once
        self._max_workers = max(1, min(limit, pool._max_workers))

    def submit(self, fn, /, *args, **kwargs):
        future = self._pool.submit(fn, *args, **kwargs)
        self.futures.append(future)
        return future

    def wait(self) -> None:
        wait(self.futures)


def run(graph: dict, keys: list, workers: int, cost: TileCost | None = None) -> list:
    """Compute ``keys`` of ``graph``; return their values in order.

    ``cost``, what one task holds, is checked against the memory limits of
    a distributed cluster's workers before anything runs; locally, at most
    ``cost.tasks_at_once`` tasks run at once (the plan may need fewer than
    ``workers`` to fit the budget). A progress bar is
    drawn when :func:`jask.show_progress` is on.

    Example:
      >>> run({("x", 0): 1, ("y", 0): (sum, [("x", 0), 2])}, [("y", 0)], workers=2)
      [3]
    """
    scheduler = get_scheduler()
    client = cluster.distributed_client(scheduler)
    if client is not None and cost is not None:
        cluster.check_workers(client, cost)
    at_once = workers
    if cost is not None and cost.tasks_at_once >= 1:
        at_once = min(workers, cost.tasks_at_once)
    bar = progress.bar(graph, keys)  # None unless progress bars are on
    # Tasks already run in parallel, one per worker thread; BLAS threads on
    # top of them only contend (a tile's matvec ran 100x slower with two).
    try:
        with _blas.limit(limits=1, user_api="blas"):
            if client is not None:
                if bar is not None:
                    return progress.run_distributed(bar, client, graph, keys)
                return list(client.get(graph, keys))
            return _run_local(scheduler, graph, keys, workers, at_once,
                              progress.local_callbacks(bar) if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()


def _run_local(scheduler, graph, keys, workers, at_once, callbacks) -> list:
    threaded = scheduler is None or scheduler is dask.threaded.get
    if threaded and len(graph) == 1:
        return list(dask.get(graph, keys, callbacks=callbacks))  # nothing to parallelize
    if threaded:
        # The same threads whatever the plan's concurrency: each thread's
        # malloc arena keeps its last tiles, and a pool per concurrency
        # would add up those leftovers op after op.
        pool = _TrackedPool(_pool(workers), at_once)
        try:
            return list(dask.threaded.get(graph, keys, num_workers=at_once, pool=pool,
                                          callbacks=callbacks))
        except BaseException:
            pool.wait()
            raise
    if callbacks is not None and getattr(scheduler, "__module__", "").startswith("dask."):
        return list(scheduler(graph, keys, callbacks=callbacks))
    return list(scheduler(graph, keys))
