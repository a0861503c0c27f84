"""Making DiskArrays: from an existing Zarr array, or from values in memory."""
from __future__ import annotations

import os

import numpy as np

from jask.base.config import Config, get_config
from jask.core._jax_internals import is_tracer
from jask.core.array import DiskArray, check_storable
from jask.core.lifetime import collect_if_idle
from jask.engine import work
from jask.store import registry

__all__ = ["open", "from_numpy"]


def open(path: str | os.PathLike) -> DiskArray:  # noqa: A001 - jask.open, like zarr.open
    """Wrap an existing Zarr array as a DiskArray, without loading it.

    jask never deletes or modifies an opened store, except through
    :meth:`DiskArray.update_` on it.

    Args:
      path: folder of a Zarr (v2 or v3) array.

    Returns:
      A DiskArray whose ``filename`` is ``path``.

    Raises:
      FileNotFoundError: if there is no Zarr array at ``path``.

    Example:
      >>> import numpy as np, zarr, jask
      >>> z = zarr.create_array(store="/tmp/jask-open-example.zarr", shape=(3,),
      ...                       dtype="float32", overwrite=True)
      >>> z[:] = [1, 2, 3]
      >>> float(jask.sum(jask.open("/tmp/jask-open-example.zarr")))
      6.0
    """
    return DiskArray._from_store(registry.register_external(path))


def from_numpy(arr, *, config: Config | None = None) -> DiskArray:
    """Write an in-memory array to a new store (see :meth:`DiskArray.from_numpy`).

    Example:
      >>> import numpy as np, jask
      >>> jask.from_numpy(np.zeros((2, 3))).shape
      (2, 3)
    """
    if isinstance(arr, DiskArray) or is_tracer(arr):
        raise TypeError("jask.from_numpy: expected an in-memory array, got a "
                        f"{type(arr).__name__}")
    value = np.asarray(arr)
    if value.dtype == object:
        raise TypeError("jask.from_numpy: cannot store an object array")
    check_storable(value.dtype, "jask.from_numpy")
    # A numpy array is a constant: write it now, in its own dtype, even
    # inside a trace (it then enters the program as a constant DiskArray).
    collect_if_idle()
    return DiskArray._from_store(work.write_value(op="from_numpy")([], [value],
                                                                   config or get_config()))
