"""Reductions that skip NaNs (``jask.nansum``, ``nanmean``, ...), as jax.numpy's.

``nanmean``, ``nanvar`` and ``nanstd`` are one reduction each, whose partials
carry each position's count of numbers (one pass, eager or compiled); the
others are the plain reduction of ``x`` with its NaNs replaced by the
reduction's identity, streamed as any other chain of ops. All have
jax.numpy's gradients (zero at a NaN). They are also what ``np.nanmean(X)`` and friends run on a
DiskArray (see :func:`array_function`): xarray's reductions call them by
default on floating data (``skipna=None``), so ``da.mean("sample")`` streams
rather than loading ``X``.
"""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np

from jask.api import elementwise as ew
from jask.api import quantiles, reductions, scans
from jask.base.config import Config
from jask.core.array import DiskArray, disk_type

__all__ = ["nansum", "nanmean", "nanvar", "nanstd", "nanmax", "nanmin", "nanargmax",
           "nanargmin", "nanprod", "nancumsum", "nancumprod", "NUMPY_FUNCTIONS",
           "array_function"]


def _is_nan(x):
    return ew.not_equal(x, x)  # NaN is the one value unequal to itself


def _floating(x) -> bool:
    return np.issubdtype(np.dtype(x.dtype), np.inexact)


def _filled(x, value):
    """``x`` with NaNs replaced by ``value`` (``x`` itself if it cannot hold NaN)."""
    return ew.where(_is_nan(x), value, x) if _floating(x) else x


def _count(x, axis, keepdims, config):
    """How many elements along ``axis`` are not NaN, in ``x``'s float dtype."""
    return reductions.sum(ew.astype(ew.equal(x, x), x.dtype), axis, keepdims, config=config)


def nansum(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Sum over ``axis`` treating NaNs as zero (``jnp.nansum``).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 2.0], np.float32))
      >>> float(jask.nansum(x))
      3.0
    """
    return reductions.sum(_filled(x, 0), axis, keepdims, config=config)


def nanmean(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Mean over ``axis`` of the elements that are not NaN (``jnp.nanmean``);
    NaN where all are. One pass: each tile gives the count and the float64
    sum of its numbers at each kept position.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 2.0], np.float32))
      >>> float(jask.nanmean(x))
      1.5
    """
    if disk_type(x) is None:
        return jnp.nanmean(x, axis=axis, keepdims=keepdims)
    if not _floating(x):
        return reductions.mean(x, axis, keepdims, config=config)
    return reductions.skipping_nan("nanmean", x, axis, keepdims, config)


def nanvar(x, axis=None, keepdims: bool = False, *, ddof: int = 0,
           config: Config | None = None):
    """Variance over ``axis`` of the elements that are not NaN (``jnp.nanvar``),
    divided by the count minus ``ddof``. One pass: each tile gives (count,
    mean, M2) of its numbers at each kept position, combined as
    :func:`jask.var` combines its moments.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 3.0], np.float32))
      >>> float(jask.nanvar(x))
      1.0
    """
    if disk_type(x) is None:
        return jnp.nanvar(x, axis=axis, keepdims=keepdims, ddof=ddof)
    if not _floating(x):
        return reductions.var(x, axis, keepdims, ddof=ddof, config=config)
    return reductions.skipping_nan("nanvar", x, axis, keepdims, config, ddof=ddof)


def nanstd(x, axis=None, keepdims: bool = False, *, ddof: int = 0,
           config: Config | None = None):
    """Standard deviation over ``axis`` ignoring NaNs (``jnp.nanstd``).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 3.0], np.float32))
      >>> float(jask.nanstd(x))
      1.0
    """
    return ew.sqrt(nanvar(x, axis, keepdims, ddof=ddof, config=config))


def _nan_extreme(reduce: Callable, fill: float, x, axis, keepdims, config):
    if not _floating(x):
        return reduce(x, axis, keepdims, config=config)
    result = reduce(_filled(x, fill), axis, keepdims, config=config)
    all_nan = ew.equal(_count(x, axis, keepdims, config), 0)
    return ew.where(all_nan, np.nan, result)


def nanmax(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Largest element over ``axis`` ignoring NaNs (``jnp.nanmax``); NaN where
    all are.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 2.0], np.float32))
      >>> float(jask.nanmax(x))
      2.0
    """
    return _nan_extreme(reductions.max, -np.inf, x, axis, keepdims, config)


def nanmin(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Smallest element over ``axis`` ignoring NaNs (``jnp.nanmin``); NaN where
    all are.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 2.0], np.float32))
      >>> float(jask.nanmin(x))
      1.0
    """
    return _nan_extreme(reductions.min, np.inf, x, axis, keepdims, config)


def nanargmax(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Index of the largest element along ``axis`` ignoring NaNs
    (``jnp.nanargmax``: -1 where all are NaN).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 2.0], np.float32))
      >>> int(jask.nanargmax(x))
      2
    """
    return _nan_arg(reductions.argmax, -np.inf, x, axis, keepdims, config)


def nanargmin(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Index of the smallest element along ``axis`` ignoring NaNs
    (``jnp.nanargmin``: -1 where all are NaN).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([3.0, np.nan, 2.0], np.float32))
      >>> int(jask.nanargmin(x))
      2
    """
    return _nan_arg(reductions.argmin, np.inf, x, axis, keepdims, config)


def _nan_arg(reduce: Callable, fill: float, x, axis, keepdims, config):
    if not _floating(x):
        return reduce(x, axis, keepdims, config=config)
    index = reduce(_filled(x, fill), axis, keepdims, config=config)
    return ew.where(ew.equal(_count(x, axis, keepdims, config), 0), -1, index)


def nanprod(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Product over ``axis`` treating NaNs as one (``jnp.nanprod``).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([2.0, np.nan, 3.0], np.float32))
      >>> float(jask.nanprod(x))
      6.0
    """
    prod = getattr(reductions, "prod", None)
    if prod is None:
        raise NotImplementedError("jask.nanprod needs jask.prod, which this version lacks")
    return prod(_filled(x, 1), axis, keepdims, config=config)


def nancumsum(x, axis=None, dtype=None, *, config: Config | None = None):
    """Cumulative sum along ``axis`` treating NaNs as zero (``jnp.nancumsum``).

    Example:
      >>> import numpy as np, jask
      >>> jask.nancumsum(jask.from_numpy(np.array([1.0, np.nan, 2.0]))).to_numpy()
      array([1., 1., 3.], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.nancumsum(x, axis=axis, dtype=dtype)
    return scans.cumsum(_filled(x, 0), axis=axis, dtype=dtype, config=config)


def nancumprod(x, axis=None, dtype=None, *, config: Config | None = None):
    """Cumulative product along ``axis`` treating NaNs as one (``jnp.nancumprod``).

    Example:
      >>> import numpy as np, jask
      >>> jask.nancumprod(jask.from_numpy(np.array([2.0, np.nan, 3.0]))).to_numpy()
      array([2., 2., 6.], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.nancumprod(x, axis=axis, dtype=dtype)
    return scans.cumprod(_filled(x, 1), axis=axis, dtype=dtype, config=config)


#: numpy function -> the jask function ``np.<fn>(X)`` runs on a DiskArray
#: (NEP 18). The NaN-skipping reductions, scans and order statistics: xarray calls them
#: through numpy.
NUMPY_FUNCTIONS: dict[Callable, Callable] = {
    np.nansum: nansum, np.nanmean: nanmean, np.nanvar: nanvar, np.nanstd: nanstd,
    np.nanmax: nanmax, np.nanmin: nanmin, np.nanargmax: nanargmax,
    np.nanargmin: nanargmin, np.nanprod: nanprod, np.nancumsum: nancumsum,
    np.nancumprod: nancumprod, np.nanmedian: quantiles.nanmedian,
    np.nanquantile: quantiles.nanquantile, np.median: quantiles.median,
    np.quantile: quantiles.quantile,
}


#: numpy functions of a DiskArray's type alone (JAX's vmap asks np.ndim of a result)
_SHAPE_FUNCTIONS = {np.ndim: lambda x: x.ndim, np.shape: lambda x: x.shape,
                    np.size: lambda x: x.size}


def _in_memory(values) -> list:
    """``values`` with each DiskArray (also inside lists and tuples) read into
    memory through ``__array__``, which refuses one over the budget."""
    out: list = []
    for v in values:
        if isinstance(v, (list, tuple)):
            v = type(v)(_in_memory(v))
        elif isinstance(v, DiskArray):
            v = np.asarray(v)
        out.append(v)
    return out


def array_function(self, func, types, args, kwargs):
    """``DiskArray.__array_function__``: the NaN-skipping reductions stream
    through jask; any other numpy function gets the array in memory through
    ``__array__`` (refused, naming the budget, when it is too large).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1.0, np.nan, 2.0], np.float32))
      >>> float(np.nanmean(x))
      1.5
    """
    if func in _SHAPE_FUNCTIONS and len(args) == 1 and not kwargs:  # read nothing
        return _SHAPE_FUNCTIONS[func](args[0])
    jask_function = NUMPY_FUNCTIONS.get(func)
    if jask_function is None:  # numpy's own function on the values in memory
        return func(*_in_memory(args), **dict(zip(kwargs, _in_memory(kwargs.values()))))
    kwargs = dict(kwargs)
    for unused in ("out", "dtype", "where", "initial"):
        if kwargs.get(unused) is not None:
            raise TypeError(f"np.{func.__name__} on a DiskArray: jask.{jask_function.__name__} "
                            f"takes no {unused}= (call it without, or cast with .astype)")
        kwargs.pop(unused, None)
    kwargs.pop("overwrite_input", None)
    return jask_function(*args, **kwargs)
