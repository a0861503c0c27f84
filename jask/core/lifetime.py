"""When unreachable stores are deleted.

A store made inside a compiled call and not returned by it, or one whose
last DiskArray was garbage collected, is deleted at the next safe point:
the start of a compiled call with DiskArray arguments, any eager jask op,
``to_memmap``, or :func:`collect`. A safe point first waits for running
programs (``jax.effects_barrier``) so nothing still reading a store loses it.
"""
from __future__ import annotations

import gc

import jax

from jask.base.interrupts import clear_caller_hook
from jask.store import registry
from jask.store.recycle import clear as clear_recycled
from jask.store.trash import wait as wait_for_trash

__all__ = ["collect", "collect_if_idle"]


def collect_if_idle() -> int:
    """Delete unreachable stores unless called from inside a running program."""
    if registry.in_callback():
        return 0
    clear_caller_hook()  # an interrupted compiled call is over by now
    if not registry.has_garbage():
        return 0
    jax.effects_barrier()
    return registry.sweep()


def collect() -> int:
    """Delete every store no DiskArray can reach; return how many went.

    jask does this on its own at its next op; call it to free disk now,
    for example after dropping a large result.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> a = jask.DiskArray.from_numpy(np.ones(3))
      >>> del a
      >>> jask.collect() >= 1
      True
    """
    gc.collect()  # run the finalizers of DiskArrays caught in reference cycles
    removed = collect_if_idle()
    clear_recycled()  # folders kept for reuse, and garbage deleted in the background:
    wait_for_trash()  # free their disk now
    return removed
