"""Run a graph on the scheduler in effect.

A ``dask.distributed.Client`` that is the default client runs jask's graphs
(its dashboard then shows every tile); otherwise the scheduler set with
``dask.config.set(scheduler=...)``; otherwise Dask's threaded scheduler with
as many threads as the memory model assumed.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import dask
import dask.threaded
from dask.base import get_scheduler
from threadpoolctl import ThreadpoolController

from jask import progress
from jask.graph import cluster
from jask.memory import TileCost


_blas = ThreadpoolController()


def run(graph: dict, keys: list, workers: int, cost: TileCost | None = None) -> list:
    """Compute ``keys`` of ``graph``; return their values in order.

    ``cost``, what one task holds, is checked against the memory limits of
    a distributed cluster's workers before anything runs.

    Example:
      >>> run({("x", 0): 1, ("y", 0): (sum, [("x", 0), 2])}, [("y", 0)], workers=2)
      [3]
    """
    scheduler = get_scheduler()
    client = cluster.distributed_client(scheduler)
    if client is not None and cost is not None:
        cluster.check_workers(client, cost)
    # Tasks already run in parallel, one per worker thread; BLAS threads on
    # top of them only contend (a tile's matvec ran 100x slower with two).
    with _blas.limit(limits=1, user_api="blas"):
        return _run(scheduler, graph, keys, workers)


def _run(scheduler, graph: dict, keys: list, workers: int) -> list:
    progress_bar = progress.bar(graph, keys)  # None unless jask.show_progress is on
    if progress_bar is not None:
        return progress.run_with_bar(progress_bar, scheduler, graph, keys, workers)
    if (scheduler is None or scheduler is dask.threaded.get) and len(graph) == 1:
        return list(dask.get(graph, keys))  # nothing to run in parallel: skip the pool
    if scheduler is None or scheduler is dask.threaded.get:
        # Our own pool, so that after a failed task we wait for the tasks
        # still running before the caller removes the half-written output.
        with ThreadPoolExecutor(workers, thread_name_prefix="jask") as pool:
            return list(dask.threaded.get(graph, keys, num_workers=workers, pool=pool))
    return list(scheduler(graph, keys))
