"""What jask needs from a ``dask.distributed`` cluster it runs on."""
from __future__ import annotations

from jask.base.memory import BudgetError, TileCost
from jask.base.sizes import exact_bytes


def distributed_client(scheduler):
    """The ``distributed.Client`` behind a scheduler function, or None."""
    owner = getattr(scheduler, "__self__", None)
    if owner is None or type(owner).__module__.split(".")[0] != "distributed":
        return None
    return owner


def check_workers(client, cost: TileCost) -> None:
    """Refuse to run when a worker's memory per thread is below what one of
    the op's tasks holds: its tasks would be killed or spilled mid-op.

    Workers without a memory limit (``memory_limit=0``) are not checked.
    """
    for address, worker in client.scheduler_info(n_workers=-1)["workers"].items():
        limit, threads = worker.get("memory_limit") or 0, max(worker.get("nthreads") or 1, 1)
        if limit and limit / threads < cost.task_bytes:
            raise BudgetError(
                f"jask.{cost.op}: a task holds {exact_bytes(cost.task_bytes)} (tiles of shape "
                f"{cost.tile}), but dask worker {address} has a memory limit of "
                f"{exact_bytes(limit)} for {threads} threads = {exact_bytes(limit // threads)} "
                "per thread. Give the workers more memory or fewer threads, or lower jask's "
                "memory budget.")
