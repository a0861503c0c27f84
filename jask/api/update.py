"""Writing into an existing store: ``update_``, the one op that mutates."""
from __future__ import annotations

import numpy as np

from jask.api import elementwise
from jask.base.config import Config
from jask.core import primitives
from jask.core.array import DiskArray, DiskArrayType, disk_type
from jask.store import location_of

__all__ = ["update_", "check_in_place"]


def check_in_place(x, op: str) -> None:
    """Refuse, before anything runs, to write ``x``'s store in place when it is
    a user's plain Zarr store in object storage (no rename, so no atomic
    replace; an array in an icechunk repository is replaced by one commit, one
    of jask's own arrays there by a new version). A traced
    ``x`` is checked when the compiled call runs.

    Example:
      >>> import numpy as np, jask
      >>> check_in_place(jask.from_numpy(np.zeros(2)), "update_")  # a local store: fine
    """
    if isinstance(x, DiskArray):
        location_of(x.filename).check_in_place(op)


def _require(x, op: str, name: str) -> DiskArrayType:
    aval = disk_type(x)
    if aval is None:
        raise TypeError(f"jask.{op}: {name} must be a DiskArray, got {type(x).__name__}")
    return aval


def update_(target, new_value, *, config: Config | None = None):
    """Functional spelling of :meth:`DiskArray.update_`.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.zeros(3))
      >>> b = jask.update_(a, jask.from_numpy(np.ones(3)))
      >>> b.filename == a.filename, float(jask.sum(a))
      (True, 3.0)

    ``new_value`` must have the target's shape and a dtype that casts to the
    target's without loss (float32 into a float64 store); it is written in
    the target's dtype.

    In object storage, an array in an icechunk repository
    (:func:`jask.open_icechunk`) is updated by one commit: readers see the
    old snapshot or the new one. jask's own arrays in a scratch prefix in
    object storage get a new version: a new store, handed the array's handle
    in one step (its ``filename`` changes). A user's plain Zarr store at a URL
    cannot be replaced atomically, and ``update_`` of it raises
    NotImplementedError, naming the URL, before anything runs.
    """
    t = _require(target, "update_", "the array to update")
    n = _require(new_value, "update_", "new_value")
    if t.shape != n.shape or not np.can_cast(n.dtype, t.dtype, "safe"):
        raise ValueError(
            f"update_: new_value has shape {n.shape} and dtype {n.dtype.name}, but the "
            f"array it replaces has shape {t.shape} and dtype {t.dtype.name}")
    check_in_place(target, "update_")
    if n.dtype != t.dtype:
        # a value JAX computed in fewer bits (float64 stores give float32 results with x64
        # off) is written in the store's own dtype: w.update_(w - lr * g) keeps working
        new_value = elementwise.astype(new_value, t.dtype, config=config)
    return primitives.update(target, new_value, config=config)
