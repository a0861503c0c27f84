"""Cumulative sums along an axis: ``cumsum``.

A DiskArray's cumulative sum is a new DiskArray of its shape, computed in
two passes over tiles planned as an elementwise op's are (the totals of each
tile along the axis, then each tile's cumulative sum plus the carry of the
tiles before it), so arrays larger than memory scan within the budget. Its
gradient is the reverse cumulative sum of the cotangent, also two passes.
With no DiskArray operand this is ``jax.numpy.cumsum``.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jask.api.creation import from_numpy
from jask.api.indexing import reshape
from jask.base.config import Config
from jask.core import primitives
from jask.core.array import disk_type

__all__ = ["cumsum"]


@functools.lru_cache(maxsize=256)
def _dtype(shape: tuple, dtype: np.dtype, axis, wanted, x64: bool) -> np.dtype:
    """jax.numpy.cumsum's dtype in the current x64 mode (``x64`` keys the
    cache): bool and small ints as jax.numpy sums them, a float64 store
    gives float32 with x64 off, as a float64 numpy array does."""
    def ref(v):
        return jnp.cumsum(v, axis=axis, dtype=wanted)

    return np.dtype(jax.eval_shape(ref, jax.ShapeDtypeStruct(shape, dtype)).dtype)


def cumsum(x, axis=None, dtype=None, *, config: Config | None = None):
    """Cumulative sum of the elements of ``x`` along ``axis``, as
    ``jax.numpy.cumsum``: ``axis=None`` sums the flattened array (C order).

    The result is a new DiskArray of ``x``'s shape (1-D with ``axis=None``),
    with jax.numpy's dtype (a bool or int32 ``x`` gives int32, int64 in JAX's
    x64 mode; float16 accumulates in float32). Two passes over ``x``, tile by
    tile within the memory budget: each tile's totals along the axis, then
    each tile's own cumulative sum plus the totals of the tiles before it.
    Differentiable: the gradient is the cotangent's cumulative sum taken
    from the end, also two passes.

    Args:
      x: a DiskArray (or an in-memory array: then ``jax.numpy.cumsum``).
      axis: None or an int.
      dtype: the dtype to sum in (default: as jax.numpy).
      config: a :class:`~jask.Config` to use instead of the active one.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32))
      >>> jask.cumsum(x, axis=1).to_numpy()
      array([[ 1.,  3.,  6.],
             [ 4.,  9., 15.]], dtype=float32)
      >>> jask.cumsum(x).to_numpy()
      array([ 1.,  3.,  6., 10., 15., 21.], dtype=float32)
    """
    aval = disk_type(x)
    if aval is None:
        return jnp.cumsum(x, axis=axis, dtype=dtype)
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise TypeError(f"jask.cumsum: axis must be None or an int, as in jax.numpy, "
                        f"got {axis!r}")
    if axis is not None and not -aval.ndim <= axis < aval.ndim:
        raise ValueError(f"jask.cumsum: axis {axis} is out of range for an array of shape "
                         f"{tuple(aval.shape)}")
    wanted = None if dtype is None else np.dtype(dtype)
    out = _dtype(tuple(aval.shape), np.dtype(aval.dtype), axis, wanted,
                 bool(jax.config.read("jax_enable_x64")))
    ndim = aval.ndim
    if axis is None:
        if aval.size == 0:  # nothing to scan (and jask.reshape makes no empty store)
            return from_numpy(np.zeros((0,), out), config=config)
        if ndim != 1:
            x = reshape(x, (-1,), config=config)
        axis, ndim = 0, 1
    return primitives.cumsum(x, int(axis) % ndim, out, config=config)
