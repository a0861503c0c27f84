"""Cumulative sums and products along an axis: ``cumsum``, ``cumprod``, and
the Array API's ``cumulative_sum`` and ``cumulative_prod``.

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
from jask.api.indexing import concatenate, reshape
from jask.base.config import Config
from jask.core import primitives
from jask.core.array import DiskArrayType, disk_type
from jask.core.primitives import scans as scan_primitives

__all__ = ["cumsum", "cumprod", "cumulative_sum", "cumulative_prod"]


@functools.lru_cache(maxsize=256)
def _dtype(shape: tuple, dtype: np.dtype, axis, wanted, x64: bool,
           op: str = "cumsum") -> np.dtype:
    """jax.numpy.cumsum's dtype (or op's: cumprod) in the current x64 mode
    (``x64`` keys the cache): bool and small ints as jax.numpy sums them, a
    float64 store gives float32 with x64 off, as a float64 numpy array does."""
    def ref(v):
        return getattr(jnp, op)(v, axis=axis, dtype=wanted)

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
    if disk_type(x) is None:
        return jnp.cumsum(x, axis=axis, dtype=dtype)
    return _scan("cumsum", x, axis, dtype, config)


def _scan(op, x, axis, dtype, config):
    """cumsum or cumprod (``op``) of a DiskArray."""
    aval = disk_type(x)
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise TypeError(f"jask.{op}: axis must be None or an int, as in jax.numpy, "
                        f"got {axis!r}")
    if axis is not None and not -aval.ndim <= axis < aval.ndim:
        raise ValueError(f"jask.{op}: axis {axis} is out of range for an array of shape "
                         f"{tuple(aval.shape)}")
    wanted = None if dtype is None else np.dtype(dtype)
    out = _dtype(tuple(aval.shape), np.dtype(aval.dtype), axis, wanted,
                 bool(jax.config.read("jax_enable_x64")), op)
    ndim = aval.ndim
    if axis is None:
        if aval.size == 0:  # nothing to scan (and jask.reshape makes no empty store)
            return from_numpy(np.zeros((0,), out), config=config)
        if ndim != 1:
            x = reshape(x, (-1,), config=config)
        axis, ndim = 0, 1
    return getattr(scan_primitives, op)(x, int(axis) % ndim, out, config=config)


def cumprod(x, axis=None, dtype=None, *, config: Config | None = None):
    """Cumulative product of the elements of ``x`` along ``axis``, as
    ``jax.numpy.cumprod`` (``axis=None``: of the flattened array).

    Computed as :func:`cumsum` is, with products: two passes over ``x``.
    Differentiable as jax.numpy, zeros included (element ``i`` gets the sum
    over later outputs of the cotangent times the product of the other
    factors): three more scans and four maps.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0, 3.0], [4.0, 0.0, 6.0]], np.float32))
      >>> jask.cumprod(x, axis=1).to_numpy()
      array([[1., 2., 6.],
             [4., 0., 0.]], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.cumprod(x, axis=axis, dtype=dtype)
    return _scan("cumprod", x, axis, dtype, config)


def _cumulative(op, x, axis, dtype, include_initial, config):
    """The Array API's cumulative_sum / cumulative_prod of a DiskArray."""
    aval = disk_type(x)
    if axis is None:
        if aval.ndim > 1:
            raise ValueError(f"jask.{op}: axis must be given for an array of shape "
                             f"{tuple(aval.shape)} (more than one axis), as in the Array API")
        axis = 0
    scan = cumsum if op == "cumulative_sum" else cumprod
    out = scan(x, axis=axis, dtype=dtype, config=config)
    if not include_initial:
        return out
    out_aval = disk_type(out)
    axis = int(axis) % aval.ndim
    first = DiskArrayType(tuple(1 if d == axis else n for d, n in enumerate(aval.shape)),
                          out_aval.dtype)
    initial = primitives.fill(0 if op == "cumulative_sum" else 1, first, config=config)
    return concatenate([initial, out], axis=axis, config=config)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial: bool = False,
                   config: Config | None = None):
    """The Array API's cumulative sum: :func:`cumsum` along ``axis`` (which
    a 1-D ``x`` may leave out), with ``include_initial`` a zero first along it.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, 2.0, 3.0], np.float32))
      >>> jask.cumulative_sum(x, include_initial=True).to_numpy()
      array([0., 1., 3., 6.], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.cumulative_sum(x, axis=axis, dtype=dtype, include_initial=include_initial)
    return _cumulative("cumulative_sum", x, axis, dtype, include_initial, config)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial: bool = False,
                    config: Config | None = None):
    """The Array API's cumulative product: :func:`cumprod` along ``axis``,
    with ``include_initial`` a one first along it.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
      >>> jask.cumulative_prod(x, axis=0, include_initial=True).to_numpy()
      array([[1., 1.],
             [1., 2.],
             [3., 8.]], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.cumulative_prod(x, axis=axis, dtype=dtype, include_initial=include_initial)
    return _cumulative("cumulative_prod", x, axis, dtype, include_initial, config)
