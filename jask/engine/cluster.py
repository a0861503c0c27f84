"""What jask needs from a ``dask.distributed`` cluster it runs on."""
from __future__ import annotations

import os
import uuid

from jask.base import counters, forks
from jask.base.memory import BudgetError, TileCost
from jask.base.sizes import exact_bytes
from jask.store.buffers import scope as buffer_scope


def distributed_client(scheduler):
    """The ``distributed.Client`` behind a scheduler function, or None."""
    owner = getattr(scheduler, "__self__", None)
    if owner is None or type(owner).__module__.split(".")[0] != "distributed":
        return None
    return owner


def submitted(graph: dict):
    """``graph`` as :meth:`distributed.Client.get` should take it: named
    by a fresh token rather than by tokenizing every task.

    Given a dict, the client wraps it in an expression whose name is a
    deterministic hash of every task's content, pickling each object dask
    cannot hash otherwise (3 times, to check the pickle is stable). A band
    group repeats its nodes in every band task, and the VJP kernels are
    bound methods, so a jitted logistic step's 57 tasks took 30 s to name on
    a loaded 2-core machine against 0.1 s to run in-process. jask's keys
    already carry a fresh token per graph (``builders.key_name``), and a
    graph is submitted once, so content hashing buys nothing here.
    (Older dask, without expressions, never hashed a dict graph: it is
    passed as it is.)

    Example:
      >>> type(submitted({("x", 0): 1})).__name__
      'LLGExpr'
    """
    try:  # dask's private expression type: any change to it falls back to the dict
        from dask._expr import LLGExpr
        return LLGExpr(graph, _determ_token=uuid.uuid4().hex)
    except (ImportError, TypeError):
        return graph


# --- a graph's run on the workers ------------------------------------------------------

#: the tile-buffer scope (jask.store.buffers) this process holds while
#: graphs of a client run on it as a worker, ended by :func:`after_graph`
_held: list = []
_held_lock = forks.lock()


class ReusingBuffers:
    """A graph task's function, run on a worker with the tile buffers its
    thread's earlier tasks of the graph left reused, as a local run reuses
    them (:func:`jask.store.buffers.scope`).

    Fresh pages fault in at 0.5-0.8 GB/s here: a logistic step's band tasks
    (1 MiB chunk rows) took 2x as long on a worker as in-process, all of it
    in faulting in new tiles (the graph run whole in one worker: 0.15 s
    fresh, 0.085 s reusing). A worker holds one task's tiles per thread
    until the graph ends, as a local run does."""

    __slots__ = ("func",)

    def __init__(self, func):
        self.func = func

    def __call__(self, *args, **kwargs):
        if not _held:
            with _held_lock:
                if not _held:
                    scope = buffer_scope()
                    scope.__enter__()
                    _held.append(scope)
        return self.func(*args, **kwargs)

    def __reduce__(self):
        return (ReusingBuffers, (self.func,))


def reusing_buffers(graph: dict) -> dict:
    """``graph`` with every task's function a :class:`ReusingBuffers`."""
    return {key: (ReusingBuffers(task[0]), *task[1:])
            if type(task) is tuple and task and callable(task[0]) else task
            for key, task in graph.items()}


def _after_graph(client_pid: int):
    """In a worker: end the buffer scope its tasks held; hand over the counts."""
    with _held_lock:
        while _held:
            _held.pop().__exit__(None, None, None)
    return counters.drain(client_pid)


def after_graph(client) -> None:
    """After a graph ran on ``client``'s workers: each frees the tile
    buffers its tasks kept, and what they counted comes back here
    (``jask.stats``), in one round trip (10-15 ms on a LocalCluster)."""
    try:
        results = client.run(_after_graph, os.getpid())
    except Exception:  # noqa: BLE001 - counters must never fail an op
        return
    counters.merge_drained(results)


def worker_info(client) -> dict:
    """``address -> info`` of every worker of ``client``, asked of the
    scheduler (a round trip, 2-10 ms on a LocalCluster): what
    :func:`threads_per_worker` and :func:`check_workers` read."""
    return dict(client.scheduler_info(n_workers=-1)["workers"])


def check_workers(workers: dict, cost: TileCost) -> None:
    """Refuse to run when a worker's memory per thread is below what one of
    the op's tasks holds: its tasks would be killed or spilled mid-op.
    ``workers``: :func:`worker_info`.

    Workers without a memory limit (``memory_limit=0``) are not checked.
    """
    for address, worker in workers.items():
        limit, threads = worker.get("memory_limit") or 0, max(worker.get("nthreads") or 1, 1)
        if limit and limit / threads < cost.task_bytes:
            raise BudgetError(
                f"jask.{cost.op}: a task holds {exact_bytes(cost.task_bytes)} (tiles of shape "
                f"{cost.tile}), but dask worker {address} has a memory limit of "
                f"{exact_bytes(limit)} for {threads} threads = {exact_bytes(limit // threads)} "
                "per thread. Give the workers more memory or fewer threads, or lower jask's "
                "memory budget.")


def threads_per_worker(workers: dict) -> int:
    """The most threads any of ``workers`` (:func:`worker_info`) runs tasks
    on: the tasks that run at once within one worker process, under its own
    budget (:func:`use_private_scratch` gives each worker the client's)."""
    return max((w.get("nthreads") or 1 for w in workers.values()), default=1)


def all_threads(workers: dict) -> int:
    """The threads of all ``workers`` (:func:`worker_info`) together: the
    tasks the cluster runs at once."""
    return sum(max(w.get("nthreads") or 1, 1) for w in workers.values())


# --- a cluster whose workers share no disk ----------------------------------------------

def use_private_scratch(client, budget: int | None = None) -> dict:
    """Install :class:`jask.engine.worker_scratch.PrivateScratch` on every
    worker of ``client`` (now and those that join later), with this
    process's budget and storage options; return ``address -> {"pid", "scratch_dir"}``.

    Example:
      >>> from distributed import Client, LocalCluster  # doctest: +SKIP
      >>> with LocalCluster(n_workers=2) as c, Client(c) as client:  # doctest: +SKIP
      ...     folders = use_private_scratch(client)
      ...     len({f["scratch_dir"] for f in folders.values()})
      2
    """
    from jask.base.config import get_config
    from jask.engine.worker_scratch import PrivateScratch  # imports distributed
    from jask.store import worker_options

    config = get_config()
    budget = budget if budget is not None else config.requested_memory
    options = worker_options(config.scratch_dir, config.storage_options)
    client.register_plugin(PrivateScratch(budget, options))
    return client.run(lambda dask_worker: dask_worker.jask_scratch)


def _memory() -> dict:
    from jask.base import rss

    return {"rss": rss.current_rss(), "peak": rss.peak_rss()}


def worker_memory(client) -> dict:
    """``address -> {"rss", "peak"}`` of every worker process (bytes; the
    peak since :func:`reset_worker_peaks` or the worker started).

    Example:
      >>> worker_memory(client)  # doctest: +SKIP
      {'tcp://127.0.0.1:40001': {'rss': 301989888, 'peak': 310378496}, ...}
    """
    return client.run(_memory)


def _reset_peak() -> bool:
    from jask.base import rss

    return rss.reset_peak_rss()


def reset_worker_peaks(client) -> dict:
    """Start measuring every worker's peak RSS afresh (``address -> bool``:
    False where the kernel does not allow it)."""
    return client.run(_reset_peak)
