"""Run a graph on the scheduler in effect.

A ``dask.distributed.Client`` that is the default client runs jask's graphs
(its dashboard then shows every tile); otherwise the scheduler set with
``dask.config.set(scheduler=...)``; otherwise Dask's threaded scheduler with
as many threads as the memory model assumed.

Interrupts. A graph runs with Ctrl-C deferred (:mod:`jask.base.interrupts`):
the main thread, which waits for the graph, raises ``KeyboardInterrupt`` at
the next task that ends (never inside a finalizer, where Python would drop
it); tasks not started are dropped, tasks running finish (a tile takes
milliseconds), and the caller removes the partial output.
Inside a compiled call on CPU the callback runs in the main thread too, so
it stops the same way; but JAX turns every exception a callback raises into
a ``JaxRuntimeError``, so the callback (``jask.core.dispatch``) has the
compiled call raise ``KeyboardInterrupt`` where it returns to its caller
(``interrupts.raise_at_caller``).
"""
from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import dask
import dask.order
import dask.threaded
from dask.base import get_scheduler
from threadpoolctl import ThreadpoolController

from jask.base import counters, forks, interrupts
from jask.base.memory import TileCost
from jask.engine import cluster, progress
from jask.store.buffers import scope as buffer_scope

_blas = ThreadpoolController()


def _fix_mmap_threshold() -> int:
    """Give tile-sized buffers back to the system as soon as they are freed.

    glibc serves allocations above its mmap threshold with fresh pages and
    returns them on free, but raises that threshold to the size of every
    such block freed (up to 32 MB): after one large tile, tiles come from a
    per-thread heap arena and stay in the process once freed. Each worker
    thread then keeps its own, and a chain of ops (a training step) peaked
    at 1.4-2.3x the budget. Pinning the threshold stops the drift.
    """
    import ctypes
    threshold = int(os.environ.get("JASK_MMAP_THRESHOLD", 1 << 20))
    if threshold <= 0:
        return 0
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, threshold)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to pin
        return 0
    return threshold


#: The size from which every allocation is fresh memory, given back when freed
#: (0: glibc's own threshold, which reuses what was freed).
MMAP_THRESHOLD = _fix_mmap_threshold()


def _trim_heap() -> None:
    """Give the heap's free pages back to the system after a graph.

    Codecs decode into buffers below the mmap threshold, and what they free
    stays in the threads' malloc arenas: a chain of ops on zstd or v2 chunks
    (no band fits, so op by op) peaked at 19.8-21.4 MB under a 16 MB budget,
    15.8 MB with this trim after each graph. It takes about 0.05 ms.
    """
    if _libc is not None:
        _libc.malloc_trim(0)


def _load_libc():
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only
        return libc
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_libc = _load_libc()
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = forks.lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One long-lived pool per size: fresh threads per op would each get a
    fresh malloc arena, and the process's memory crept up op after op."""
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="jask")
        return pool


class _TrackedPool(Executor):
    """The shared pool, remembering the unfinished tasks of one run so that
    after a failure we can wait for those still running before the caller
    removes the half-written output.

    A finished task is forgotten at once: its future holds the task's result,
    so keeping every future kept every band's partial alive to the end of the
    graph (a Hessian's 128 x 128 float64 partials, 13 MB over 97 bands under
    a 16 MB budget) where Dask had long released them.
    """

    def __init__(self, pool: ThreadPoolExecutor, limit: int):
        self._pool = pool
        self._lock = threading.Lock()
        self.futures: set[Future] = set()
        # what dask.threaded.get reads as the most tasks to run at once
        self._max_workers = max(1, min(limit, pool._max_workers))

    def submit(self, fn, /, *args, **kwargs):
        future = self._pool.submit(fn, *args, **kwargs)
        with self._lock:
            self.futures.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future) -> None:
        with self._lock:
            self.futures.discard(future)

    def wait(self) -> None:
        """Drop the tasks not started yet; wait for those running."""
        with self._lock:
            unfinished = list(self.futures)
        for future in unfinished:
            future.cancel()
        wait(unfinished)


def run(graph: dict, keys: list, workers: int, cost: TileCost | None = None,
        where: Placement | None = None) -> list:
    """Compute ``keys`` of ``graph``; return their values in order.

    ``cost``, what one task holds, is checked against the memory limits of
    a distributed cluster's workers before anything runs; locally, at most
    ``cost.tasks_at_once`` tasks run at once (the plan may need fewer than
    ``workers`` to fit the budget). ``where``: the scheduler as
    :func:`placement` found it, when the caller planned for it already
    (asked here otherwise). A progress bar is drawn when
    :func:`jask.show_progress` is on.

    Example:
      >>> run({("x", 0): 1, ("y", 0): (sum, [("x", 0), 2])}, [("y", 0)], workers=2)
      [3]
    """
    graph = counters.label(graph)  # each task's I/O counted for its op (jask.stats)
    if where is None:
        where = placement(workers, with_workers=cost is not None)
    scheduler, client = where.scheduler, where.client
    if client is not None and cost is not None:
        cluster.check_workers(where.workers, cost)
    at_once = workers
    if cost is not None and cost.tasks_at_once >= 1:
        at_once = min(workers, cost.tasks_at_once)
    bar = progress.bar(graph, keys)  # None unless progress bars are on
    # Tasks already run in parallel, one per worker thread; BLAS threads on
    # top of them only contend (a tile's matvec ran 100x slower with two).
    try:
        with interrupts.deferred(), _blas.limit(limits=1, user_api="blas"):
            if client is not None:
                sent = cluster.reusing_buffers(graph)
                with interrupts.immediate():  # the client's wait has no stops of ours
                    if bar is not None:
                        return progress.run_distributed(bar, client, sent, keys)
                    return list(client.get(cluster.submitted(sent), keys))
            try:
                with buffer_scope():  # tiles reused from task to task (jask.store.buffers)
                    return _run_local(scheduler, graph, keys, workers, at_once,
                                      progress.local_callbacks(bar) if bar is not None else None)
            finally:
                _trim_heap()
    finally:
        if client is not None:
            cluster.after_graph(client)  # workers' buffers freed, their counts here
        if bar is not None:
            progress.close(bar)


@dataclass(frozen=True)
class Placement:
    """Where a graph's tasks run, as the scheduler in effect says: asked
    once for a graph (:func:`placement`), then read by its planning and its
    run alike."""

    scheduler: Any  #: the scheduler function; None: Dask's threaded default
    client: Any  #: the ``distributed.Client`` behind it, or None
    workers: dict  #: its workers (:func:`jask.engine.cluster.worker_info`); {} locally
    per_process: int  #: tasks that run at once in one process (:func:`tasks_per_process`)

    @property
    def on_a_cluster(self) -> bool:
        return self.client is not None

    @property
    def threads(self) -> int:
        """Tasks that run at once on all its workers (on a cluster) or here."""
        return cluster.all_threads(self.workers) if self.workers else self.per_process


def placement(workers: int, with_workers: bool = True) -> Placement:
    """The scheduler in effect, and on a cluster its workers (one round
    trip to its scheduler; skipped when not ``with_workers``, for a graph
    that needs neither their threads nor their memory limits).

    Example:
      >>> placement(4).per_process, placement(4).on_a_cluster
      (4, False)
    """
    scheduler = _scheduler()
    client = cluster.distributed_client(scheduler)
    if client is None or not with_workers:
        return Placement(scheduler, client, {}, workers)
    found = cluster.worker_info(client)
    return Placement(scheduler, client, found, cluster.threads_per_worker(found))


def on_a_cluster() -> bool:
    """Whether ops run on a ``dask.distributed`` client now (the default client).

    Example:
      >>> on_a_cluster()
      False
    """
    return cluster.distributed_client(_scheduler()) is not None


def tasks_per_process(workers: int) -> int:
    """How many of a graph's tasks run at once in one process, sharing its
    budget: ``workers`` threads here, or on a cluster the most threads of
    one worker (each worker process holds a budget of its own, so a
    2-worker cluster of 1 thread each may run tasks twice as large as two
    threads here: half as many, each costing the cluster a round of
    scheduling).

    Example:
      >>> tasks_per_process(4)
      4
    """
    return placement(workers).per_process


def _scheduler():
    """The scheduler in effect (None: Dask's threaded default).

    Dask looks for a default ``distributed.Client`` by importing
    ``distributed``: on the first op of a process that took 0.3-3 s and
    12 MB, counted against the op. No Client exists unless ``distributed``
    was imported, so jask asks Dask only then, or when a scheduler is set.
    """
    if ("distributed" not in sys.modules and not dask.config.get("scheduler", None)
            and not dask.config.get("get", None)):
        return None
    return get_scheduler()


def _run_local(scheduler, graph, keys, workers, at_once, callbacks) -> list:
    threaded = scheduler is None or scheduler is dask.threaded.get
    if threaded and callbacks is None:
        order = _serial_order(graph, at_once)
        if order is not None:  # nothing to run in parallel: no scheduler needed
            return _run_inline(graph, order, keys)
    if threaded and len(graph) == 1:
        return list(dask.get(graph, keys, callbacks=callbacks))  # nothing to parallelize
    if threaded:
        # The same threads whatever the plan's concurrency: each thread's
        # malloc arena keeps its last tiles, and a pool per concurrency
        # would add up those leftovers op after op.
        pool = _TrackedPool(_pool(workers), at_once)
        try:
            return list(dask.threaded.get(graph, keys, num_workers=at_once, pool=pool,
                                          callbacks=[*(callbacks or ()), _STOP_AFTER_TASK]))
        except BaseException:
            pool.wait()
            raise
    if callbacks is not None and getattr(scheduler, "__module__", "").startswith("dask."):
        return list(scheduler(graph, keys, callbacks=callbacks))
    return list(scheduler(graph, keys))


#: Dask callbacks (start, start_state, pretask, posttask, finish): a Ctrl-C
#: stops the run when a task ends (posttask runs in the waiting main thread).
_STOP_AFTER_TASK = (None, None, None, lambda *_: interrupts.check(), None)


def _is_key(arg, graph: dict) -> bool:
    if type(arg) is not tuple or not arg or type(arg[0]) is not str:
        return False
    try:
        return arg in graph
    except TypeError:  # holds slices: a region, not a key
        return False


def run_order(graph: dict, at_once: int, where: Placement) -> list:
    """The keys of ``graph`` in the order :func:`run` starts its tasks here,
    ``at_once`` at a time: as listed when they run one by one in this thread
    (:func:`_serial_order`), else by Dask's priorities (:func:`dask.order.order`),
    which its threaded scheduler starts ready tasks by, as distributed's
    workers do (a progress bar's run is Dask's too: the order may then
    differ, and only what is asked for ahead with it)."""
    if where.client is None and where.scheduler in (None, dask.threaded.get):
        listed = _serial_order(graph, at_once)
        if listed is not None:
            return listed
    priority = dask.order.order(graph)
    return sorted(graph, key=priority.__getitem__)


def _serial_order(graph: dict, at_once: int) -> list | None:
    """The keys of ``graph`` in an order that runs each task after its
    inputs, when running them one by one in the calling thread loses
    nothing: at most one task may run at a time, or only one task needs no
    other (a chain, like a small reduction). None otherwise, or for a task
    of a form jask's builders do not make (left to Dask)."""
    deps: dict = {}
    for key, task in graph.items():
        if type(task) is not tuple or not task or not callable(task[0]):
            return None
        found = []
        for arg in task[1:]:
            if _is_key(arg, graph):
                found.append(arg)
            elif (type(arg) is tuple and arg and callable(arg[0])) or (
                    type(arg) is list and any(_is_key(a, graph) for a in arg)):
                return None  # a nested task or a list of keys: Dask's job
        deps[key] = found
    if at_once > 1 and sum(1 for found in deps.values() if not found) > 1:
        return None
    order, seen = [], set()
    for key in graph:  # builders list inputs before the tasks that read them
        if any(d not in seen for d in deps[key]):
            return None
        seen.add(key)
        order.append(key)
    return order


def _run_inline(graph: dict, order: list, keys: list) -> list:
    """Run the tasks in ``order`` in this thread; drop each value once its
    last reader has run, as Dask would."""
    readers: dict = {}
    for key in order:
        for arg in graph[key][1:]:
            if _is_key(arg, graph):
                readers[arg] = readers.get(arg, 0) + 1
    wanted = set(keys)
    values: dict = {}
    for key in order:
        interrupts.check()
        func, *args = graph[key]
        inputs = [values[a] if _is_key(a, graph) else a for a in args]
        for a in args:
            if _is_key(a, graph):
                readers[a] -= 1
                if readers[a] == 0 and a not in wanted:
                    del values[a]
        values[key] = func(*inputs)
        del inputs
    return [values[k] for k in keys]
