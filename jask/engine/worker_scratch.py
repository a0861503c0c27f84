"""A ``distributed`` worker plugin for clusters whose workers share no disk.

Imported only by :func:`jask.engine.cluster.use_private_scratch` (importing
``distributed`` costs 0.3-3 s, which no op without a cluster should pay).
"""
from __future__ import annotations

import os

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["PrivateScratch"]


def set_up_worker(budget: int, folder: str, options: dict) -> dict:
    """In a worker process: jask's budget, a private local scratch folder
    (``folder``, inside the worker's own ``local_directory``) and the object
    stores' options; returns where it is, for the client to check."""
    from jask.base import config, rss
    from jask.store import register_options

    config.set_memory_budget(budget, scratch_dir=folder)
    for url, found in options.items():
        register_options(url, found)
    rss.reset_peak_rss()
    return {"pid": os.getpid(), "scratch_dir": folder}


class PrivateScratch(WorkerPlugin):
    """Each worker gets jask's memory budget, its local scratch in its own
    ``local_directory`` (never another worker's nor the client's) and the
    storage options the client registered for object-storage URLs. Stores
    shared between processes then live only in object storage
    (``set_memory_budget(B, scratch_dir="s3://...")`` on the client).

    Example:
      >>> PrivateScratch(2**20).name
      'jask-private-scratch'
    """

    name = "jask-private-scratch"

    def __init__(self, budget: int, options: dict | None = None):
        self.budget = budget
        self.options = dict(options or {})

    def setup(self, worker) -> None:
        folder = os.path.join(worker.local_directory, "jask-scratch")
        worker.jask_scratch = set_up_worker(self.budget, folder, self.options)
