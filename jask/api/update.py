"""Writing into an existing store: ``update_``, the one op that mutates."""
from __future__ import annotations

from jask.base.config import Config
from jask.core import primitives
from jask.core.array import DiskArrayType, disk_type

__all__ = ["update_"]


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
    """
    t = _require(target, "update_", "the array to update")
    n = _require(new_value, "update_", "new_value")
    if t.shape != n.shape or t.dtype != n.dtype:
        raise ValueError(
            f"update_: new_value has shape {n.shape} and dtype {n.dtype.name}, but the "
            f"array it replaces has shape {t.shape} and dtype {t.dtype.name}")
    return primitives.update(target, new_value, config=config)
