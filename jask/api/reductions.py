"""Reductions over axes: sum, mean, max, min, var, std, logsumexp, argmax and argmin.

Each is one pass over the data (``var`` and ``std`` carry each tile's
count, mean and squared deviations, ``logsumexp`` its max and sum of
``exp(x - max)``, combined stably in float64). With
``axis=None`` the result is an in-memory scalar ``jax.Array``. Over some
axes the result is an in-memory ``jax.Array`` when it is small, at most
:data:`IN_MEMORY_SHARE` of the memory budget, and a DiskArray otherwise;
jask's functions accept either, so the next line of code need not care.
Every reduction is differentiable but ``argmax`` and ``argmin`` (an index
has no gradient: as through ``jnp.argmax``, none flows back). With no
DiskArray operand each is its ``jax.numpy`` counterpart.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import dtypes as jax_dtypes

from jask.api import elementwise
from jask.base import memory
from jask.base.config import Config
from jask.core import primitives, ufuncs
from jask.core.array import disk_type
from jask.engine.ops.reductions import mean_of, nan_variance, variance

__all__ = ["sum", "mean", "max", "min", "var", "std", "logsumexp", "argmax", "argmin",
           "IN_MEMORY_SHARE"]

#: A reduction over some axes stays in memory when its result takes at most
#: this share of the memory budget (the rule is :func:`jask.base.memory.fits_in_memory`).
IN_MEMORY_SHARE = memory.IN_MEMORY_SHARE


def _axes(op: str, axis, ndim: int, shape) -> tuple:
    """``axis`` (None, an int or a tuple) as a sorted tuple of axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or not -ndim <= a < ndim:
            raise ValueError(f"jask.{op}: axis {axis!r} is out of range for an array of shape "
                             f"{tuple(shape)}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"jask.{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def _disk(x):
    """The DiskArrayType of x (the callers checked that it has one)."""
    aval = disk_type(x)
    assert aval is not None
    return aval


def _layout(op, x, axis, keepdims):
    """(reduced axes, output axes map, output shape) of a reduction of x."""
    aval = _disk(x)
    reduced = _axes(op, axis, aval.ndim, aval.shape)
    if keepdims:
        out_axes = tuple(None if d in reduced else d for d in range(aval.ndim))
    else:
        out_axes = tuple(d for d in range(aval.ndim) if d not in reduced)
    out_shape = tuple(1 if a is None else aval.shape[a] for a in out_axes)
    return reduced, out_axes, out_shape


def _in_memory(axis, out_shape, dtype, config: Config | None) -> bool:
    if axis is None:
        return True
    return memory.fits_in_memory(out_shape, dtype, config)


def _result_dtype(reference, x, **kwargs):
    """The dtype jax.numpy gives for ``x`` as a jax.Array of its dtype, in
    the current x64 mode (with x64 off a float64 store gives float32, as
    ``jnp.sum(np.float64 array)`` does)."""
    aval = _disk(x)
    try:  # two traces per call took most of an eager sum on a small array
        return _cached_dtype(reference, aval.shape, np.dtype(aval.dtype),
                             bool(jax.config.read("jax_enable_x64")), tuple(kwargs.items()))
    except TypeError:  # an unhashable keyword
        return _traced_dtype(reference, aval, **kwargs)


@functools.lru_cache(maxsize=512)
def _cached_dtype(reference, shape, dtype, x64, kwargs):
    return _traced_dtype(reference, jax.ShapeDtypeStruct(shape, dtype), **dict(kwargs))


def _traced_dtype(reference, aval, **kwargs):
    # the dtype never depends on the lengths; a max of no elements would raise here
    shape = tuple(int(n) or 1 for n in aval.shape)  # (this module defines its own max)
    return np.dtype(jax.eval_shape(lambda v: reference(v, **kwargs),
                                   jax.ShapeDtypeStruct(shape, aval.dtype)).dtype)


def accumulation_dtype(dtype) -> np.dtype:
    """The dtype a sum of ``dtype`` values accumulates in: float32 for
    float16 and bfloat16, as jax.numpy's reductions upcast them (summing in
    16 bits loses most digits: a variance came out 60% low), else ``dtype``.

    Example:
      >>> import numpy as np
      >>> accumulation_dtype(np.float16), accumulation_dtype(np.int32)
      (dtype('float32'), dtype('int32'))
    """
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
        return np.dtype(np.float32)
    return dtype


def _reduce(op, ufunc, x, extra, axis, keepdims, reducer, dtype, config, compute=None):
    """``ufunc(x, *extra)`` reduced over ``axis``, computed in ``compute``
    (default ``dtype``) and stored as ``dtype``; ``extra`` are
    (operand, axes map) pairs lined up with x."""
    aval = _disk(x)
    reduced, out_axes, out_shape = _layout(op, x, axis, keepdims)
    operands = [x] + [v for v, _ in extra]
    axes = [tuple(range(aval.ndim))] + [a for _, a in extra]
    dtypes = [dtype if compute is None else compute] * len(operands)
    return primitives.reduce(op, ufunc, operands, axes, dtypes, aval.shape, out_axes, dtype,
                             reducer=reducer,
                             to_memory=_in_memory(axis, out_shape, dtype, config),
                             config=config)


def _scalar(value, dtype):
    return jnp.asarray(value, dtype)


def sum(x, axis=None, keepdims: bool = False, *, config: Config | None = None):  # noqa: A001
    """Sum of the elements of ``x`` over ``axis`` (all axes by default).

    Reduces tile by tile with a tree of partial sums. With ``axis=None`` the
    result is an in-memory scalar ``jax.Array``; over some axes it is in
    memory when small (see :data:`IN_MEMORY_SHARE`), else a DiskArray.

    Args:
      x: a DiskArray (or an in-memory array: then ``jax.numpy.sum``).
      axis: None, an int or a tuple of ints.
      keepdims: keep reduced axes as length 1.
      config: a :class:`~jask.Config` to use instead of the active one.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> float(jask.sum(a))
      16.0
      >>> jask.sum(a, axis=0)
      Array([4., 4., 4., 4.], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.sum(x, axis=axis, keepdims=keepdims)
    dtype = _result_dtype(jnp.sum, x)
    return _reduce("sum", ufuncs.IDENTITY, x, [], axis, keepdims, "sum", dtype, config,
                   accumulation_dtype(dtype))


def mean(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Mean of the elements of ``x`` over ``axis`` (see :func:`sum`).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0], [3.0, 6.0]], np.float32))
      >>> jask.mean(x, axis=0)
      Array([2., 4.], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.mean(x, axis=axis, keepdims=keepdims)
    dtype = _result_dtype(jnp.mean, x)
    return _mean(x, axis, keepdims, dtype, accumulation_dtype(dtype), config)


def _real_only(op: str, x) -> None:
    """Refuse a complex DiskArray where the Array API standard takes real
    values only (it does not order complex numbers: max, argmax, ...), or
    where jask's one-pass partials are real (NaN-skipping moments, logsumexp)."""
    dtype = np.dtype(_disk(x).dtype)
    if dtype.kind == "c":
        raise TypeError(f"jask.{op}: a complex array ({dtype.name}) is refused: {op} is "
                        "defined for real-valued data types only. Take jask.real, jask.imag "
                        "or jask.abs first.")


def _moments_dtype(dtype) -> np.dtype:
    """What a variance's tiles are read in: float64, complex128 for complex
    (deviations are complex, their moduli squared real)."""
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def _mean(x, axis, keepdims, dtype, compute, config):
    """The mean of a DiskArray, summed from ``compute`` tiles into float64
    partials and divided once, stored as ``dtype``."""
    aval = _disk(x)
    count = math.prod(aval.shape[d] for d in _axes("mean", axis, aval.ndim, aval.shape))
    return _reduce("mean", ufuncs.IDENTITY, x, [], axis, keepdims, mean_of(count),
                   dtype, config, compute)


def max(x, axis=None, keepdims: bool = False, *, config: Config | None = None):  # noqa: A001
    """Largest element of ``x`` over ``axis`` (see :func:`sum`). Its
    gradient goes to the largest elements, shared evenly among ties.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 5.0], [3.0, 2.0]], np.float32))
      >>> jask.max(x, axis=1)
      Array([5., 3.], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.max(x, axis=axis, keepdims=keepdims)
    _real_only("max", x)
    return _reduce("max", ufuncs.IDENTITY, x, [], axis, keepdims, "max",
                   _result_dtype(jnp.max, x), config)


def min(x, axis=None, keepdims: bool = False, *, config: Config | None = None):  # noqa: A001
    """Smallest element of ``x`` over ``axis`` (see :func:`max`).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 5.0], [3.0, 2.0]], np.float32))
      >>> float(jask.min(x))
      1.0
    """
    if disk_type(x) is None:
        return jnp.min(x, axis=axis, keepdims=keepdims)
    _real_only("min", x)
    return _reduce("min", ufuncs.IDENTITY, x, [], axis, keepdims, "min",
                   _result_dtype(jnp.min, x), config)


def var(x, axis=None, keepdims: bool = False, *, ddof: float = 0,
        correction: float | None = None, config: Config | None = None):
    """Variance of ``x`` over ``axis``: the mean of squared deviations from
    the mean, divided by ``N - ddof`` (``correction`` is the array API's
    name for ``ddof``). One pass over the data: each tile gives its count,
    mean and sum of squared deviations in float64, and the partials are
    combined by Chan et al.'s parallel formula, so a large offset (1e6 plus
    noise in float32) loses nothing. The result has jax.numpy's dtype; see
    :func:`sum` for where it lives. Its gradient, ``2 (x - mean) / (N -
    ddof)`` times the cotangent, reads ``x`` twice more (the mean, then the
    map).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0], [3.0, 6.0]], np.float32))
      >>> jask.var(x, axis=0)
      Array([1., 4.], dtype=float32)
      >>> jask.var(x, axis=0, ddof=1)
      Array([2., 8.], dtype=float32)
    """
    ddof = _ddof("var", ddof, correction)
    if disk_type(x) is None:
        return jnp.var(x, axis=axis, keepdims=keepdims, correction=ddof)
    aval = _disk(x)
    reduced, _, _ = _layout("var", x, axis, keepdims)
    dtype = _result_dtype(jnp.var, x)
    result = _reduce("var", ufuncs.IDENTITY, x, [], axis, keepdims, variance(ddof), dtype,
                     config, _moments_dtype(aval.dtype))
    if 0 in (aval.shape[d] for d in reduced) and disk_type(result) is None:
        result = jnp.full_like(result, np.nan)  # no tile was reduced at all
    return result


def skipping_nan(op: str, x, axis, keepdims: bool, config: Config | None, ddof: float = 0):
    """``nanmean`` or ``nanvar`` of a floating DiskArray ``x`` in one pass:
    the reducer leaves NaNs out and carries each kept position's count in its
    partials, in float64 (a float16 count is inexact beyond 2048). The result
    has jax.numpy's dtype; see :func:`sum` for where it lives."""
    _real_only(op, x)
    reduced, _, _ = _layout(op, x, axis, keepdims)
    reference = jnp.nanmean if op == "nanmean" else jnp.nanvar
    reducer = "nanmean" if op == "nanmean" else nan_variance(ddof)
    # nanmean's reducer sums floats in float64 itself: its tiles stay as stored (a
    # float64 copy of each doubled the bytes touched); integers widen exactly first
    aval = _disk(x)
    compute = (aval.dtype if op == "nanmean" and jnp.issubdtype(aval.dtype, jnp.floating)
               else np.dtype(np.float64))
    result = _reduce(op, ufuncs.IDENTITY, x, [], axis, keepdims, reducer,
                     _result_dtype(reference, x), config, np.dtype(compute))
    if 0 in (aval.shape[d] for d in reduced) and disk_type(result) is None:
        result = jnp.full_like(result, np.nan)  # no tile was reduced at all
    return result


def _ddof(op: str, ddof, correction):
    """``ddof``, or the array API's ``correction`` when given (not both)."""
    if correction is None:
        return ddof
    if ddof != 0:
        raise ValueError(f"jask.{op}: give ddof or correction, not both "
                         f"(ddof={ddof!r}, correction={correction!r})")
    return correction


def std(x, axis=None, keepdims: bool = False, *, ddof: float = 0,
        correction: float | None = None, config: Config | None = None):
    """Standard deviation of ``x`` over ``axis``: ``sqrt(var(x, ...))``, one
    pass over the data (see :func:`var`).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0], [3.0, 6.0]], np.float32))
      >>> jask.std(x, axis=0)
      Array([1., 2.], dtype=float32)
    """
    ddof = _ddof("std", ddof, correction)
    if disk_type(x) is None:
        return jnp.std(x, axis=axis, keepdims=keepdims, correction=ddof)
    v = var(x, axis=axis, keepdims=keepdims, ddof=ddof, config=config)
    return elementwise.apply(ufuncs.TABLE["sqrt"], v, config=config)


def logsumexp(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """``log(sum(exp(x)))`` over ``axis``, computed without overflow in one
    pass: each tile's partial is its max and the sum of ``exp(x - max)``, in
    float64, rescaled to the larger max when two partials meet. Its gradient
    is the softmax; over axes that leave the rows (``axis=1`` of a matrix),
    each row's softmax is recomputed from that row, so under ``jax.jit`` the
    backward pass joins the forward one.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.log(np.array([[1.0, 3.0], [2.0, 2.0]], np.float32)))
      >>> jask.logsumexp(x, axis=1)
      Array([1.3862944, 1.3862944], dtype=float32)
    """
    aval = disk_type(x)
    if aval is None:
        return jax.nn.logsumexp(x, axis=axis, keepdims=keepdims)
    _real_only("logsumexp", x)
    if 0 in aval.shape:  # no elements, no max to subtract: log(0) = -inf
        return elementwise.log(sum(elementwise.exp(x, config=config), axis=axis,
                                   keepdims=keepdims, config=config), config=config)
    dtype = _result_dtype(jnp.exp, x)
    return _reduce("logsumexp", ufuncs.IDENTITY, x, [], axis, keepdims, "logsumexp", dtype,
                   config, np.dtype(np.float64))


def argmax(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Index of the largest element of ``x`` along ``axis``; with
    ``axis=None``, into the flattened array (C order), as ``jax.numpy.argmax``.

    The first occurrence wins a tie, and a NaN counts as the largest (its
    first index is returned), as in jax.numpy; the dtype is int32 (int64 in
    JAX's x64 mode). Each tile's kernel gets its place in the whole array and
    the tree reduction carries (value, index) pairs. The result lives where
    :func:`sum`'s would. Not differentiable (no gradient flows through it).

    Args:
      x: a DiskArray (or an in-memory array: then ``jax.numpy.argmax``).
      axis: None or an int.
      keepdims: keep the reduced axes as length 1.
      config: a :class:`~jask.Config` to use instead of the active one.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]], np.float32))
      >>> jask.argmax(x, axis=1)
      Array([1, 0], dtype=int32)
      >>> int(jask.argmax(x))
      3
    """
    if disk_type(x) is None:
        return jnp.argmax(x, axis=axis, keepdims=keepdims)
    return _arg("argmax", x, axis, keepdims, config)


def argmin(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Index of the smallest element of ``x`` along ``axis`` (see :func:`argmax`:
    the first occurrence wins, a NaN counts as the smallest).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[3.0, 1.0, 1.0], [np.nan, 0.0, np.nan]], np.float32))
      >>> jask.argmin(x, axis=1, keepdims=True)
      Array([[1],
             [0]], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.argmin(x, axis=axis, keepdims=keepdims)
    return _arg("argmin", x, axis, keepdims, config)


def _arg(op, x, axis, keepdims, config):
    """argmax or argmin (``op``, also the reducer) of a DiskArray."""
    _real_only(op, x)
    aval = _disk(x)
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise TypeError(f"jask.{op}: axis must be None or an int, as in jax.numpy, "
                        f"got {axis!r}")
    reduced, out_axes, out_shape = _layout(op, x, axis, keepdims)
    if any(aval.shape[d] == 0 for d in reduced):
        raise ValueError(f"jask.{op}: attempt to get {op} of an empty sequence "
                         f"(shape {tuple(aval.shape)}, axis {axis})")
    dtype = np.dtype(jax_dtypes.canonicalize_dtype(np.int64))
    return primitives.reduce(op, ufuncs.flat_index(reduced), [x], [tuple(range(aval.ndim))],
                             [None], aval.shape, out_axes, dtype, reducer=op,
                             to_memory=_in_memory(axis, out_shape, dtype, config),
                             config=config)


def sum_of_squares(x, *, config: Config | None = None):
    """``sum(x * x)`` of a DiskArray over all axes, in memory, in one pass
    (no squared copy is written): the norm behind ``clip_by_global_norm``.

    Example:
      >>> import numpy as np, jask
      >>> from jask.api.reductions import sum_of_squares
      >>> float(sum_of_squares(jask.from_numpy(np.arange(4.0))))
      14.0
    """
    aval = _disk(x)
    dtype = _result_dtype(jnp.sum, x)
    full = tuple(range(aval.ndim))
    compute = accumulation_dtype(dtype)
    return primitives.reduce("sum_squares", ufuncs.TABLE["square"], [x], [full], [compute],
                             aval.shape, (), dtype, reducer="sum", to_memory=True,
                             config=config)


# --- prod --------------------------------------------------------------------------------

__all__ += ["prod"]


def prod(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """Product of the elements of ``x`` over ``axis`` (see :func:`sum` for
    where the result lives), with jax.numpy's dtype (a bool or small int
    ``x`` gives int32). Differentiable as ``jnp.prod``, zeros included: each
    element's gradient is the product of the others (two more reductions and
    one map: the product of the nonzero elements and the count of zeros).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
      >>> jask.prod(x, axis=0)
      Array([3., 8.], dtype=float32)
      >>> float(jask.prod(x))
      24.0
    """
    if disk_type(x) is None:
        return jnp.prod(x, axis=axis, keepdims=keepdims)
    dtype = _result_dtype(jnp.prod, x)
    return _reduce("prod", ufuncs.IDENTITY, x, [], axis, keepdims, "prod", dtype, config)

