"""The standard's functions as thin wrappers over jask's own.

Elementwise functions are one row each in :data:`ELEMENTWISE`: the
standard's name, its number of operands, and the jask function(s) it calls
(jax.numpy's names; the first that :data:`jask.api.elementwise.FUNCTIONS`
has is used, looked up when first called, so a name jask does not have yet
raises a ``NotImplementedError`` naming it). The others are short functions
with the standard's signature below, each calling its jask function through
the imports at the top of this module.

Results are returned as :func:`~jask.array_api._memory.own` says: DiskArrays,
and :class:`~jask.array_api.InMemoryArray` s where jask answers in memory (0-d
values, small reductions); every function takes both (and jax and numpy arrays).
"""
from __future__ import annotations

import builtins
import math
import operator
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import (
    DiskArray,
    creation,
    disk_type,
    elementwise,
    indexing,
    interop,
    linalg,
    manipulation,
    nan_functions,
    quantiles,
    reductions,
    scans,
    sorting,
    truth,
)
from jask.array_api._creation import check_device, full
from jask.array_api._dtypes import check_dtype, default_float
from jask.array_api._memory import namespace_function, own, unwrap, wrap_module

__all__ = ["ELEMENTWISE", "jask_function"]

#: Besides the elementwise table, the jask functions :func:`jask_function`
#: answers by name (the ones this namespace is built on).
_NAMED: dict[str, Callable] = {
    "all": truth.all, "any": truth.any, "count_nonzero": truth.count_nonzero,
    "argsort": sorting.argsort, "searchsorted": sorting.searchsorted, "sort": sorting.sort,
    "broadcast_arrays": manipulation.broadcast_arrays,
    "broadcast_to": manipulation.broadcast_to, "diff": manipulation.diff,
    "expand_dims": manipulation.expand_dims, "flip": manipulation.flip,
    "repeat": manipulation.repeat, "roll": manipulation.roll, "squeeze": manipulation.squeeze,
    "tile": manipulation.tile, "unstack": manipulation.unstack,
    "nonzero": indexing.nonzero, "take": indexing.take,
    "take_along_axis": indexing.take_along_axis,
    "tensordot": linalg.tensordot, "transpose": linalg.transpose, "vecdot": linalg.vecdot,
    "cumprod": scans.cumprod, "cumsum": scans.cumsum, "prod": reductions.prod,
}


def _find(name: str) -> Callable | None:
    return elementwise.FUNCTIONS.get(name) or _NAMED.get(name)


def jask_function(standard: str, *names: str) -> Callable:
    """The jask function behind the standard's ``standard``: the first of
    ``names`` in :data:`jask.api.elementwise.FUNCTIONS` or among the functions
    this namespace imports, else a ``NotImplementedError`` naming it.

    Example:
      >>> from jask.array_api import jask_function
      >>> jask_function("permute_dims", "transpose").__name__
      'transpose'
    """
    for name in names:
        f = _find(name)
        if f is not None:
            return f
    raise NotImplementedError(
        f"jask.array_api.{standard}: jask has no {' / '.join(names)} yet, so this function of "
        "the Array API standard is not available")


def _refuse(name: str, instead: str) -> Callable:
    def refused(*args, **kwargs):
        raise NotImplementedError(
            f"jask.array_api.{name}: the shape of its result depends on the data, which jask "
            f"cannot plan out of core (its tiles are planned from shapes before reading); "
            f"{instead}")
    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = f"""Refused: its result's shape depends on the data ({instead}).

    Example:
      >>> import jask.array_api as xp
      >>> xp.{name}(xp.ones(3))  # doctest: +IGNORE_EXCEPTION_DETAIL
      Traceback (most recent call last):
      NotImplementedError: ...
    """
    return refused


# --- elementwise: one row each --------------------------------------------------------

#: the standard's name -> (operands, jask name(s) to call, the first that exists)
ELEMENTWISE: dict[str, tuple] = {
    "abs": (1, "abs"), "acos": (1, "arccos", "acos"), "acosh": (1, "arccosh", "acosh"),
    "add": (2, "add"), "asin": (1, "arcsin", "asin"), "asinh": (1, "arcsinh", "asinh"),
    "atan": (1, "arctan", "atan"), "atan2": (2, "arctan2", "atan2"),
    "atanh": (1, "arctanh", "atanh"), "bitwise_and": (2, "bitwise_and"),
    "bitwise_left_shift": (2, "left_shift", "bitwise_left_shift"),
    "bitwise_invert": (1, "invert", "bitwise_invert", "bitwise_not"),
    "bitwise_or": (2, "bitwise_or"),
    "bitwise_right_shift": (2, "right_shift", "bitwise_right_shift"),
    "bitwise_xor": (2, "bitwise_xor"), "ceil": (1, "ceil"), "conj": (1, "conj", "conjugate"),
    "copysign": (2, "copysign"), "cos": (1, "cos"), "cosh": (1, "cosh"),
    "divide": (2, "divide", "true_divide"), "equal": (2, "equal"), "exp": (1, "exp"),
    "expm1": (1, "expm1"), "floor": (1, "floor"), "floor_divide": (2, "floor_divide"),
    "greater": (2, "greater"), "greater_equal": (2, "greater_equal"), "hypot": (2, "hypot"),
    "imag": (1, "imag"), "isfinite": (1, "isfinite"), "isinf": (1, "isinf"),
    "isnan": (1, "isnan"), "less": (2, "less"), "less_equal": (2, "less_equal"),
    "log": (1, "log"), "log1p": (1, "log1p"), "log2": (1, "log2"), "log10": (1, "log10"),
    "logaddexp": (2, "logaddexp"), "logical_and": (2, "logical_and"),
    "logical_not": (1, "logical_not"), "logical_or": (2, "logical_or"),
    "logical_xor": (2, "logical_xor"), "maximum": (2, "maximum"), "minimum": (2, "minimum"),
    "multiply": (2, "multiply"), "negative": (1, "negative"), "nextafter": (2, "nextafter"),
    "not_equal": (2, "not_equal"), "positive": (1, "positive"), "pow": (2, "power", "pow"),
    "real": (1, "real"), "reciprocal": (1, "reciprocal"),
    "remainder": (2, "remainder", "mod"), "round": (1, "round"), "sign": (1, "sign"),
    "signbit": (1, "signbit"), "sin": (1, "sin"), "sinh": (1, "sinh"),
    "sqrt": (1, "sqrt"), "square": (1, "square"), "subtract": (2, "subtract"),
    "tan": (1, "tan"), "tanh": (1, "tanh"), "trunc": (1, "trunc"),
}

_INTEGER_ONLY = {"bitwise_and", "bitwise_left_shift", "bitwise_invert", "bitwise_or",
                 "bitwise_right_shift", "bitwise_xor"}
_BOOL_ONLY = {"logical_and", "logical_not", "logical_or", "logical_xor"}


def _example(name: str, nin: int, names: tuple) -> str:
    """A doctest comparing the wrapper with jax.numpy's function of the same
    name (skipped while jask lacks the function)."""
    data = ("[1, 6, 3]" if name in _INTEGER_ONLY else "[True, False, True]"
            if name in _BOOL_ONLY else "[0.25, 0.5, 2.0]")
    args = ", ".join(["x"] * nin)
    skip = "" if any(_find(n) for n in names) else "  # doctest: +SKIP"
    ref = f"jnp.{name}({args.replace('x', 'x.to_numpy()')})"
    return f"""
    Example:
      >>> import numpy as np, jax.numpy as jnp, jask.array_api as xp
      >>> x = xp.asarray({data})
      >>> bool(np.allclose(np.asarray(xp.{name}({args})), {ref},
      ...                  equal_nan=True)){skip}
      True
    """


def _elementwise(name: str, nin: int, names: tuple) -> Callable:
    if nin == 1:
        def op(x, /):
            return own(jask_function(name, *names)(x))
    else:
        def op(x1, x2, /):  # type: ignore[misc]
            return own(jask_function(name, *names)(x1, x2))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"The standard's ``{name}``: :func:`jask.{names[0]}`, elementwise, one tile "
                  f"at a time.\n" + _example(name, nin, names))
    return op


FUNCTIONS: dict[str, Callable] = {name: namespace_function(_elementwise(name, nin,
                                                                         tuple(names)))
                                  for name, (nin, *names) in ELEMENTWISE.items()}


def clip(x, /, min=None, max=None):  # noqa: A002 - the standard's names
    """``x`` limited to ``[min, max]`` (either may be None), in ``x``'s dtype.

    Example:
      >>> import jask.array_api as xp
      >>> xp.clip(xp.asarray([1.0, 5.0, 9.0]), 2.0, 6.0).to_numpy()
      array([2., 5., 6.], dtype=float32)
    """
    out = x
    if min is not None:
        out = elementwise.maximum(out, min)
    if max is not None:
        out = elementwise.minimum(out, max)
    if out is x:
        return own(elementwise.astype(x, x.dtype))  # a copy, as the standard returns
    return own(out if out.dtype == x.dtype else elementwise.astype(out, x.dtype))


# --- data types -------------------------------------------------------------------

def astype(x, dtype, /, *, copy=True, device=None):
    """``x`` converted to ``dtype``, one tile at a time; ``copy=False`` returns
    ``x`` itself when it has that dtype already.

    Example:
      >>> import jask.array_api as xp
      >>> xp.astype(xp.asarray([1.7, -2.2]), xp.int8).to_numpy()
      array([ 1, -2], dtype=int8)
    """
    check_device("astype", device)
    dtype = check_dtype("astype", dtype)
    if dtype == x.dtype and not copy:
        return x
    return own(elementwise.astype(x, dtype))


def _cast(x, dtype):
    return x if dtype is None or np.dtype(dtype) == x.dtype else astype(x, dtype)


# --- statistics ---------------------------------------------------------------------

def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (in ``dtype`` if given), a tree of partial sums over tiles.

    Example:
      >>> import jask.array_api as xp
      >>> xp.sum(xp.ones((3, 4)), axis=0).to_numpy()
      array([3., 3., 3., 3.], dtype=float32)
    """
    return _result_in(reductions.sum(_cast(x, dtype), axis=axis, keepdims=keepdims), dtype)


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    """Product over ``axis`` (in ``dtype`` if given).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.prod(xp.full((3,), 2.0)))
      8.0
    """
    return _result_in(reductions.prod(_cast(x, dtype), axis=axis, keepdims=keepdims), dtype)


def _result_in(out, dtype):
    """A sum's or product's result in the ``dtype`` asked for: small integers
    accumulate in 64 bits (as numpy's), and a sum taken modulo 2**64 then cast
    wraps as one taken in ``dtype`` does (``sum([200, 100], dtype=uint8)`` is 44)."""
    return own(out if dtype is None or np.dtype(dtype) == out.dtype
               else elementwise.astype(out, np.dtype(dtype)))


def mean(x, /, *, axis=None, keepdims=False):
    """Mean over ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.mean(xp.arange(4.0)))
      1.5
    """
    return own(reductions.mean(x, axis=axis, keepdims=keepdims))


def _correction(name, correction, ddof):
    """The standard's ``correction``, or numpy's and jax.numpy's ``ddof`` for
    it (xarray's ``std``/``var`` pass ``ddof``), as jax.numpy takes them:
    either, not both."""
    if correction is not None and ddof is not None:
        raise ValueError(f"jask.array_api.{name}: give correction or ddof, not both "
                         f"(correction={correction}, ddof={ddof})")
    return correction if correction is not None else (ddof if ddof is not None else 0)


def var(x, /, *, axis=None, correction=None, keepdims=False, ddof=None):
    """Variance over ``axis``, divided by ``n - correction`` (``ddof``: the
    same, by numpy's name).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.var(xp.arange(4.0), correction=1))
      1.6666666...
    """
    return own(reductions.var(x, axis=axis, keepdims=keepdims,
                              ddof=_correction("var", correction, ddof)))


def std(x, /, *, axis=None, correction=None, keepdims=False, ddof=None):
    """Standard deviation over ``axis``, with ``n - correction`` degrees of
    freedom (``ddof``: the same, by numpy's name).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.std(xp.asarray([1.0, 3.0])))
      1.0
    """
    return own(reductions.std(x, axis=axis, keepdims=keepdims,
                              ddof=_correction("std", correction, ddof)))


def max(x, /, *, axis=None, keepdims=False):  # noqa: A001
    """Largest element over ``axis`` (NaN wins, as in jax.numpy).

    Example:
      >>> import jask.array_api as xp
      >>> int(xp.max(xp.asarray([3, 9, 2])))
      9
    """
    return own(reductions.max(x, axis=axis, keepdims=keepdims))


def min(x, /, *, axis=None, keepdims=False):  # noqa: A001
    """Smallest element over ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> int(xp.min(xp.asarray([3, 9, 2])))
      2
    """
    return own(reductions.min(x, axis=axis, keepdims=keepdims))


def _scan_axis(op: str, x, axis):
    if axis is None:
        if len(x.shape) != 1:
            raise ValueError(f"jask.array_api.{op}: axis is required for an array of "
                             f"{len(x.shape)} dimensions")
        return 0
    return axis


def _accumulation_dtype(x, axis: int, dtype):
    """The standard's dtype of a cumulative sum or product: jax.numpy's
    ``cumulative_sum``'s (small integers and bool widen to the default
    integer, as ``jax.numpy.prod`` does too; ``jax.numpy.cumulative_prod``
    keeps uint8, against the standard), a 64-bit store's width kept when x64
    is off."""
    if dtype is not None:
        return check_dtype("cumulative_sum", dtype)
    struct = jax.ShapeDtypeStruct(tuple(x.shape), x.dtype)
    out = np.dtype(jax.eval_shape(lambda v: jnp.cumulative_sum(v, axis=axis), struct).dtype)
    wide = np.dtype(x.dtype)
    return wide if wide.kind == out.kind and wide.itemsize > out.itemsize else out


def _with_initial(out, axis: int, value):
    shape = list(out.shape)
    shape[axis] = 1
    return concat([full(tuple(shape), value, dtype=out.dtype), out], axis=axis)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Cumulative sum along ``axis`` (two passes over the tiles); with
    ``include_initial`` a zero leads.

    Example:
      >>> import jask.array_api as xp
      >>> xp.cumulative_sum(xp.asarray([1, 2, 3]), include_initial=True).to_numpy()
      array([0, 1, 3, 6], dtype=int32)
    """
    axis = _scan_axis("cumulative_sum", x, axis)
    dtype = _accumulation_dtype(x, axis, dtype)
    out = own(scans.cumsum(x, axis=axis, dtype=dtype))
    return _with_initial(out, axis % len(x.shape), 0) if include_initial else out


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Cumulative product along ``axis``; with ``include_initial`` a one leads.

    Example:
      >>> import jask.array_api as xp
      >>> xp.cumulative_prod(xp.asarray([1, 2, 3])).to_numpy()
      array([1, 2, 6], dtype=int32)
    """
    axis = _scan_axis("cumulative_prod", x, axis)
    dtype = _accumulation_dtype(x, axis, dtype)
    out = own(scans.cumprod(x, axis=axis, dtype=dtype))
    return _with_initial(out, axis % len(x.shape), 1) if include_initial else out


# --- searching and utility ---------------------------------------------------------

def argmax(x, /, *, axis=None, keepdims=False):
    """Index of the largest element over ``axis`` (the first of ties).

    Example:
      >>> import jask.array_api as xp
      >>> int(xp.argmax(xp.asarray([3, 9, 9])))
      1
    """
    return own(reductions.argmax(x, axis=axis, keepdims=keepdims))


def argmin(x, /, *, axis=None, keepdims=False):
    """Index of the smallest element over ``axis`` (the first of ties).

    Example:
      >>> import jask.array_api as xp
      >>> int(xp.argmin(xp.asarray([3, 1, 1])))
      1
    """
    return own(reductions.argmin(x, axis=axis, keepdims=keepdims))


def where(condition, x1, x2, /):
    """``x1`` where ``condition`` holds, else ``x2`` (broadcast together).

    Example:
      >>> import jask.array_api as xp
      >>> x = xp.asarray([1.0, -2.0])
      >>> xp.where(x > 0, x, 0.0).to_numpy()
      array([1., 0.], dtype=float32)
    """
    return own(elementwise.where(condition, x1, x2))


def count_nonzero(x, /, *, axis=None, keepdims=False):
    """Number of non-zero elements over ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> int(xp.count_nonzero(xp.asarray([0, 3, 4])))
      2
    """
    return own(truth.count_nonzero(x, axis=axis, keepdims=keepdims))


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Indices where ``x2``'s elements would go in the sorted 1-D ``x1``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.searchsorted(xp.asarray([1, 3, 5]), xp.asarray([2, 5])).to_numpy()
      array([1, 2], dtype=int32)
    """
    extra = {} if sorter is None else {"sorter": sorter}
    return own(sorting.searchsorted(x1, x2, side=side, **extra))


def all(x, /, *, axis=None, keepdims=False):  # noqa: A001
    """Whether every element over ``axis`` is true.

    Example:
      >>> import jask.array_api as xp
      >>> bool(xp.all(xp.asarray([True, False])))
      False
    """
    return own(truth.all(x, axis=axis, keepdims=keepdims))


def any(x, /, *, axis=None, keepdims=False):  # noqa: A001
    """Whether some element over ``axis`` is true.

    Example:
      >>> import jask.array_api as xp
      >>> bool(xp.any(xp.asarray([True, False])))
      True
    """
    return own(truth.any(x, axis=axis, keepdims=keepdims))


def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    """``n``-th differences along ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.diff(xp.asarray([1, 4, 9])).to_numpy()
      array([3, 5], dtype=int32)
    """
    extra = {k: v for k, v in (("prepend", prepend), ("append", append)) if v is not None}
    return own(manipulation.diff(x, n=n, axis=axis, **extra))


def nonzero(x, /):
    """Indices of the non-zero elements, one array per axis (:func:`jask.nonzero`:
    arrays small enough for memory, values known outside ``jax.jit``; its
    result's shape depends on the data, so larger ones are refused, naming
    ``where`` and ``count_nonzero``).

    Example:
      >>> import jask.array_api as xp
      >>> [i.to_numpy().tolist() for i in xp.nonzero(xp.asarray([0, 3, 4]))]
      [[1, 2]]
    """
    return tuple(own(tuple(indexing.nonzero(x))))


def unique_values(x, /):
    """The unique elements of ``x``, sorted (:func:`jask.unique_values`: out of
    core, a sort then one read of the sorted array; NaNs each their own).

    Example:
      >>> import jask.array_api as xp
      >>> xp.unique_values(xp.asarray([3, 1, 3])).to_numpy()
      array([1, 3], dtype=int32)
    """
    return own(sorting.unique_values(x))


def unique_counts(x, /):
    """``(values, counts)`` of ``x``'s unique elements (:func:`jask.unique_counts`).

    Example:
      >>> import jask.array_api as xp
      >>> xp.unique_counts(xp.asarray([3, 1, 3])).counts.to_numpy()
      array([1, 2], dtype=int32)
    """
    return own(sorting.unique_counts(x))


def unique_inverse(x, /):
    """``(values, inverse_indices)``, ``inverse_indices`` of ``x``'s shape
    (:func:`jask.unique_inverse`).

    Example:
      >>> import jask.array_api as xp
      >>> xp.unique_inverse(xp.asarray([3, 1, 3])).inverse_indices.to_numpy()
      array([1, 0, 1], dtype=int32)
    """
    return own(sorting.unique_inverse(x))


def unique_all(x, /):
    """``(values, indices, inverse_indices, counts)`` (:func:`jask.unique_all`).

    Example:
      >>> import jask.array_api as xp
      >>> xp.unique_all(xp.asarray([3, 1, 3])).indices.to_numpy()
      array([1, 0], dtype=int32)
    """
    return own(sorting.unique_all(x))


# --- manipulation -------------------------------------------------------------------

def concat(arrays, /, *, axis=0):
    """The arrays joined along ``axis`` (``None``: flattened first).

    Example:
      >>> import jask.array_api as xp
      >>> xp.concat([xp.ones(2), xp.zeros(1)]).to_numpy()
      array([1., 1., 0.], dtype=float32)
    """
    arrays = list(arrays)
    if axis is None:
        arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
    return own(indexing.concatenate(arrays, axis=axis))


def stack(arrays, /, *, axis=0):
    """The arrays joined along a new ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.stack([xp.ones(2), xp.zeros(2)]).shape
      (2, 2)
    """
    return own(indexing.stack(list(arrays), axis=axis))


def reshape(x, /, shape, *, copy=None):
    """``x`` with a new shape (C order); ``copy=False`` only when nothing
    changes (a DiskArray of a new shape is a new store).

    Example:
      >>> import jask.array_api as xp
      >>> xp.reshape(xp.arange(6), (2, 3)).shape
      (2, 3)
    """
    shape = tuple(shape)
    same = shape == tuple(x.shape)
    if copy is False and not same:
        raise ValueError("jask.array_api.reshape: a DiskArray of a new shape is a copy, and "
                         "copy=False was given")
    if same and copy:
        return astype(x, x.dtype)
    if math.prod(x.shape) == 0 or 0 in shape or shape == () or len(x.shape) == 0:
        return own(jnp.reshape(jnp.asarray(x), shape))  # empty and 0-d: nothing to stream
    return own(indexing.reshape(x, shape))


def meshgrid(*arrays, indexing="xy"):
    """Coordinate grids from 1-D arrays (``indexing`` "xy" or "ij"), each a
    DiskArray broadcast from its (reshaped) input.

    Example:
      >>> import jask.array_api as xp
      >>> [g.shape for g in xp.meshgrid(xp.arange(3), xp.arange(2))]
      [(2, 3), (2, 3)]
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"jask.array_api.meshgrid: indexing must be 'xy' or 'ij', got "
                         f"{indexing!r}")
    if builtins.any(len(a.shape) != 1 for a in arrays):
        raise ValueError("jask.array_api.meshgrid: every array must be 1-D, got shapes "
                         f"{[tuple(a.shape) for a in arrays]}")
    sizes = [a.shape[0] for a in arrays]
    if indexing == "xy" and len(arrays) > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    grids = []
    for i, a in enumerate(arrays):
        axis = {0: 1, 1: 0}.get(i, i) if indexing == "xy" and len(arrays) > 1 else i
        view = [1] * len(arrays)
        view[axis] = a.shape[0]
        grids.append(broadcast_to(reshape(a, tuple(view)), tuple(sizes)))
    return grids


def permute_dims(x, /, axes):
    """``x`` with its axes permuted (a tiled copy).

    Example:
      >>> import jask.array_api as xp
      >>> xp.permute_dims(xp.ones((2, 3, 4)), (2, 0, 1)).shape
      (4, 2, 3)
    """
    return own(linalg.transpose(x, tuple(axes)))


def matrix_transpose(x, /):
    """``x`` with its last two axes swapped.

    Example:
      >>> import jask.array_api as xp
      >>> xp.matrix_transpose(xp.ones((5, 2, 3))).shape
      (5, 3, 2)
    """
    ndim = len(x.shape)
    if ndim < 2:
        raise ValueError(f"jask.array_api.matrix_transpose: x must have at least 2 dimensions, "
                         f"got shape {tuple(x.shape)}")
    return permute_dims(x, tuple(range(ndim - 2)) + (ndim - 1, ndim - 2))


def expand_dims(x, /, axis=0):
    """``x`` with a new axis of length 1 at ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.expand_dims(xp.ones((2, 3)), axis=-1).shape
      (2, 3, 1)
    """
    return own(manipulation.expand_dims(x, axis))


def squeeze(x, /, axis):
    """``x`` without the length-1 axes ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.squeeze(xp.ones((2, 1, 3)), axis=1).shape
      (2, 3)
    """
    return own(manipulation.squeeze(x, axis=axis))


def moveaxis(x, source, destination, /):
    """``x`` with axes ``source`` moved to ``destination`` (a tiled transpose).

    Example:
      >>> import jask.array_api as xp
      >>> xp.moveaxis(xp.ones((2, 3, 4)), 0, -1).shape
      (3, 4, 2)
    """
    ndim = len(x.shape)
    src, dst = (list((a,) if isinstance(a, int) else a) for a in (source, destination))
    for a in src + dst:  # (wrapped modulo ndim unchecked, an axis too far moved another)
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(f"jask.moveaxis: axis {a!r} is out of range for an "
                                          f"array of shape {tuple(x.shape)}")
    src, dst = [a % ndim for a in src], [a % ndim for a in dst]
    if len(src) != len(dst):
        raise ValueError("jask.array_api.moveaxis: source and destination differ in length")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"jask.moveaxis: repeated axis in {source!r} or {destination!r}")
    order = [d for d in range(ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, tuple(order))


def broadcast_to(x, /, shape):
    """``x`` broadcast to ``shape``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.broadcast_to(xp.ones((1, 3)), (2, 3)).shape
      (2, 3)
    """
    return own(manipulation.broadcast_to(x, tuple(shape)))


def broadcast_arrays(*arrays):
    """The arrays broadcast against each other.

    Example:
      >>> import jask.array_api as xp
      >>> [a.shape for a in xp.broadcast_arrays(xp.ones((2, 1)), xp.ones(3))]
      [(2, 3), (2, 3)]
    """
    return list(own(tuple(manipulation.broadcast_arrays(*arrays))))


def flip(x, /, *, axis=None):
    """``x`` with the order of elements reversed along ``axis`` (all by default).

    Example:
      >>> import jask.array_api as xp
      >>> xp.flip(xp.asarray([1, 2, 3])).to_numpy()
      array([3, 2, 1], dtype=int32)
    """
    return own(manipulation.flip(x, axis=axis))


def roll(x, /, shift, *, axis=None):
    """``x`` with elements shifted by ``shift`` along ``axis`` (flattened by default).

    Example:
      >>> import jask.array_api as xp
      >>> xp.roll(xp.asarray([1, 2, 3]), 1).to_numpy()
      array([3, 1, 2], dtype=int32)
    """
    return own(manipulation.roll(x, shift, axis=axis))


def repeat(x, repeats, /, *, axis=None):
    """Each element repeated ``repeats`` times along ``axis`` (flattened by default).

    Example:
      >>> import jask.array_api as xp
      >>> xp.repeat(xp.asarray([1, 2]), 2).to_numpy()
      array([1, 1, 2, 2], dtype=int32)
    """
    return own(manipulation.repeat(x, repeats, axis=axis))


def tile(x, repetitions, /):
    """``x`` repeated ``repetitions`` times per axis.

    Example:
      >>> import jask.array_api as xp
      >>> xp.tile(xp.asarray([1, 2]), (2,)).to_numpy()
      array([1, 2, 1, 2], dtype=int32)
    """
    return own(manipulation.tile(x, tuple(repetitions)))


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple.

    Example:
      >>> import jask.array_api as xp
      >>> len(xp.unstack(xp.ones((3, 2))))
      3
    """
    return tuple(own(tuple(manipulation.unstack(x, axis=axis))))


# --- linear algebra and indexing ----------------------------------------------------

def matmul(x1, x2, /):
    """Matrix product (``@``), streaming the contraction axis.

    Example:
      >>> import jask.array_api as xp
      >>> xp.matmul(xp.ones((2, 3)), xp.ones((3, 4))).shape
      (2, 4)
    """
    return own(linalg.matmul(x1, x2))


def tensordot(x1, x2, /, *, axes=2):
    """Sum of products over ``axes`` (as ``numpy.tensordot``).

    Example:
      >>> import jask.array_api as xp
      >>> xp.tensordot(xp.ones((2, 3)), xp.ones((3, 4)), axes=1).shape
      (2, 4)
    """
    return own(linalg.tensordot(x1, x2, axes=axes))


def vecdot(x1, x2, /, *, axis=-1):
    """Dot products of vectors along ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.vecdot(xp.ones(3), xp.ones(3)))
      3.0
    """
    return own(linalg.vecdot(x1, x2, axis=axis))


def take(x, indices, /, *, axis=None):
    """Elements of ``x`` at ``indices`` along ``axis`` (:func:`jask.take`: an
    index out of range raises IndexError; indices on disk larger than memory
    look up a small 1-D ``x`` tile by tile).

    Example:
      >>> import jask.array_api as xp
      >>> xp.take(xp.asarray([5, 6, 7]), xp.asarray([2, 0])).to_numpy()
      array([7, 5], dtype=int32)
    """
    return own(indexing.take(x, indices, axis=axis))


def take_along_axis(x, indices, /, *, axis=-1):
    """Elements of ``x`` at ``indices`` matched along ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> x = xp.asarray([[5, 6], [7, 8]])
      >>> xp.take_along_axis(x, xp.asarray([[1], [0]]), axis=1).to_numpy()
      array([[6],
             [7]], dtype=int32)
    """
    return own(indexing.take_along_axis(x, _indices(indices),
                                                                   axis=axis))


def _indices(indices):
    """Index arrays in memory, as jask's gathers take them (the namespace's own
    arrays are DiskArrays: an index array larger than memory is refused there)."""
    return interop.materialize(indices) if isinstance(indices, DiskArray) \
        else indices


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """``x`` sorted along ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.sort(xp.asarray([3, 1, 2])).to_numpy()
      array([1, 2, 3], dtype=int32)
    """
    return own(sorting.sort(x, axis=axis, descending=descending,
                                                stable=stable))


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """Indices that sort ``x`` along ``axis``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.argsort(xp.asarray([3, 1, 2])).to_numpy()
      array([1, 2, 0], dtype=int32)
    """
    return own(sorting.argsort(x, axis=axis, descending=descending,
                                                      stable=stable))



# --- beyond the standard: jax.numpy's functions that xarray calls on its arrays ----------

def pad(x, pad_width, mode="constant", *, constant_values=0, reflect_type="even"):
    """``x`` padded, as ``jax.numpy.pad`` (:func:`jask.pad`: one gather, tile by
    tile; modes constant, edge, reflect, symmetric, wrap). xarray's ``pad``,
    ``shift``, ``rolling`` and ``coarsen`` call it.

    Example:
      >>> import jask.array_api as xp
      >>> xp.pad(xp.asarray([1, 2]), (1, 2), mode="edge").to_numpy()
      array([1, 1, 2, 2, 2], dtype=int32)
    """
    return own(manipulation.pad(x, pad_width, mode, constant_values=constant_values,
                                reflect_type=reflect_type))


def isin(element, test_elements, /, *, assume_unique=False, invert=False):
    """Whether each element is in the (small, in-memory) ``test_elements``, as
    ``jax.numpy.isin`` (:func:`jask.isin`).

    Example:
      >>> import jask.array_api as xp
      >>> xp.isin(xp.asarray([1, 2, 3]), xp.asarray([2])).to_numpy()
      array([False,  True, False])
    """
    return own(truth.isin(element, test_elements, assume_unique=assume_unique, invert=invert))


def quantile(x, /, q, axis=None, *, method="linear", keepdims=False):
    """The ``q``-th quantiles along ``axis``, as ``jax.numpy.quantile``
    (:func:`jask.quantile`: a sort, then a gather; out of core).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.quantile(xp.asarray([1.0, 2.0, 4.0]), 0.5))
      2.0
    """
    return own(quantiles.quantile(x, q, axis, method=method, keepdims=keepdims))


def nanquantile(x, /, q, axis=None, *, method="linear", keepdims=False):
    """The ``q``-th quantiles of the numbers along ``axis``, as
    ``jax.numpy.nanquantile`` (:func:`jask.nanquantile`).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanquantile(xp.asarray([1.0, xp.nan, 4.0]), 0.5))
      2.5
    """
    return own(quantiles.nanquantile(x, q, axis, method=method, keepdims=keepdims))


def median(x, /, axis=None, *, keepdims=False):
    """The median along ``axis``, as ``jax.numpy.median`` (:func:`jask.median`).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.median(xp.asarray([3.0, 1.0, 2.0, 8.0])))
      2.5
    """
    return own(quantiles.median(x, axis, keepdims=keepdims))


def nanmedian(x, /, axis=None, *, keepdims=False):
    """The median of the numbers along ``axis``, as ``jax.numpy.nanmedian``.

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanmedian(xp.asarray([3.0, xp.nan, 1.0])))
      2.0
    """
    return own(quantiles.nanmedian(x, axis, keepdims=keepdims))


def einsum(subscripts, /, *operands, **options):
    """Einstein summation, as ``jax.numpy.einsum``, for the contractions
    :func:`jask.einsum` streams (xarray's ``dot`` and ``weighted`` call it).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.einsum("i,i->", xp.ones(3), xp.ones(3)))
      3.0
    """
    return own(linalg.einsum(subscripts, *operands, **options))


def cumsum(x, /, axis=None, dtype=None):
    """numpy's name of the cumulative sum (``axis=None``: flattened), as
    ``jax.numpy.cumsum`` (:func:`jask.cumsum`); xarray's ``cumsum`` calls it.

    Example:
      >>> import jask.array_api as xp
      >>> xp.cumsum(xp.asarray([1, 2, 3])).to_numpy()
      array([1, 3, 6], dtype=int32)
    """
    return own(scans.cumsum(x, axis=axis, dtype=dtype))


def cumprod(x, /, axis=None, dtype=None):
    """numpy's name of the cumulative product, as ``jax.numpy.cumprod``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.cumprod(xp.asarray([1, 2, 3])).to_numpy()
      array([1, 2, 6], dtype=int32)
    """
    return own(scans.cumprod(x, axis=axis, dtype=dtype))


def nancumsum(x, /, axis=None, dtype=None):
    """The cumulative sum with NaNs as zeros, as ``jax.numpy.nancumsum``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.nancumsum(xp.asarray([1.0, xp.nan, 3.0])).to_numpy()
      array([1., 1., 4.], dtype=float32)
    """
    return own(nan_functions.nancumsum(x, axis=axis, dtype=dtype))


def nancumprod(x, /, axis=None, dtype=None):
    """The cumulative product with NaNs as ones, as ``jax.numpy.nancumprod``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.nancumprod(xp.asarray([2.0, xp.nan, 3.0])).to_numpy()
      array([2., 2., 6.], dtype=float32)
    """
    return own(nan_functions.nancumprod(x, axis=axis, dtype=dtype))


# NaN-skipping reductions: xarray's skipna=True (its default for floating data) finds
# them on the namespace (xarray.core.nputils), so their results are the namespace's


def nansum(x, /, axis=None, dtype=None, *, keepdims=False):
    """Sum treating NaNs as zero, as ``jax.numpy.nansum`` (:func:`jask.nansum`).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nansum(xp.asarray([1.0, xp.nan, 3.0])))
      4.0
    """
    return own(nan_functions.nansum(_cast(x, dtype), axis, keepdims))


def nanprod(x, /, axis=None, dtype=None, *, keepdims=False):
    """Product treating NaNs as one, as ``jax.numpy.nanprod`` (:func:`jask.nanprod`).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanprod(xp.asarray([2.0, xp.nan, 3.0])))
      6.0
    """
    return own(nan_functions.nanprod(_cast(x, dtype), axis, keepdims))


def nanmean(x, /, axis=None, dtype=None, *, keepdims=False):
    """Mean of the numbers along ``axis`` (NaN where there are none), as
    ``jax.numpy.nanmean`` (:func:`jask.nanmean`: one pass).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanmean(xp.asarray([1.0, xp.nan, 2.0])))
      1.5
    """
    return own(nan_functions.nanmean(_cast(x, dtype), axis, keepdims))


def nanvar(x, /, axis=None, dtype=None, *, ddof=0, keepdims=False):
    """Variance of the numbers along ``axis``, divided by their count minus
    ``ddof``, as ``jax.numpy.nanvar`` (:func:`jask.nanvar`: one pass).

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanvar(xp.asarray([1.0, xp.nan, 3.0])))
      1.0
    """
    return own(nan_functions.nanvar(_cast(x, dtype), axis, keepdims, ddof=ddof))


def nanstd(x, /, axis=None, dtype=None, *, ddof=0, keepdims=False):
    """Standard deviation of the numbers along ``axis``, as ``jax.numpy.nanstd``.

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanstd(xp.asarray([1.0, xp.nan, 3.0])))
      1.0
    """
    return own(nan_functions.nanstd(_cast(x, dtype), axis, keepdims, ddof=ddof))


def nanmax(x, /, axis=None, *, keepdims=False):
    """Largest number along ``axis`` (NaN where there are none), as ``jax.numpy.nanmax``.

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanmax(xp.asarray([1.0, xp.nan, 2.0])))
      2.0
    """
    return own(nan_functions.nanmax(x, axis, keepdims))


def nanmin(x, /, axis=None, *, keepdims=False):
    """Smallest number along ``axis`` (NaN where there are none), as ``jax.numpy.nanmin``.

    Example:
      >>> import jask.array_api as xp
      >>> float(xp.nanmin(xp.asarray([1.0, xp.nan, 2.0])))
      1.0
    """
    return own(nan_functions.nanmin(x, axis, keepdims))


def nanargmax(x, /, axis=None, *, keepdims=False):
    """Index of the largest number along ``axis`` (-1 where there are none), as
    ``jax.numpy.nanargmax``.

    Example:
      >>> import jask.array_api as xp
      >>> int(xp.nanargmax(xp.asarray([1.0, xp.nan, 2.0])))
      2
    """
    return own(nan_functions.nanargmax(x, axis, keepdims))


def nanargmin(x, /, axis=None, *, keepdims=False):
    """Index of the smallest number along ``axis`` (-1 where there are none), as
    ``jax.numpy.nanargmin``.

    Example:
      >>> import jask.array_api as xp
      >>> int(xp.nanargmin(xp.asarray([3.0, xp.nan, 2.0])))
      2
    """
    return own(nan_functions.nanargmin(x, axis, keepdims))



def gradient(f, /, *varargs, axis=None, edge_order=1):
    """The gradient of ``f`` by finite differences, as ``numpy.gradient``
    (xarray's ``differentiate`` calls it): second-order central differences
    inside, ``edge_order`` (1 or 2; ``None``: 1, as jax.numpy) one-sided ones
    at the ends; spacing 1 by default, one scalar for all axes, or one scalar
    or 1-D coordinate array (in memory) per axis. Streamed: slices of ``f``
    shifted along the axis, combined elementwise, then joined. One array for
    one axis, else a tuple of them.

    Example:
      >>> import jask.array_api as xp
      >>> f, x = xp.asarray([1.0, 4.0, 9.0, 16.0]), xp.asarray([1.0, 2.0, 3.0, 4.0])
      >>> xp.gradient(f, x).to_numpy()
      array([3., 4., 6., 7.], dtype=float32)
    """
    ndim = len(f.shape)
    axes = tuple(range(ndim)) if axis is None else (axis,) if np.ndim(axis) == 0 else tuple(axis)
    if not builtins.all(-ndim <= operator.index(a) < ndim for a in axes):
        raise ValueError(f"jask.array_api.gradient: axis {axis} is out of range for an array "
                         f"of {ndim} dimensions")
    axes = tuple(operator.index(a) % ndim for a in axes)
    if not varargs:
        spacings: tuple = (1.0,) * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = varargs * len(axes)
    elif len(varargs) == len(axes):
        spacings = varargs
    else:
        raise TypeError(f"jask.array_api.gradient: give no spacing, one scalar, or one per axis "
                        f"({len(axes)}), not {len(varargs)}")
    edge_order = 1 if edge_order is None else edge_order
    if edge_order not in (1, 2):
        raise ValueError(f"jask.array_api.gradient: edge_order must be 1 or 2, not {edge_order!r}")
    if not np.issubdtype(np.dtype(f.dtype), np.inexact):
        f = astype(f, default_float())
    out = tuple(_gradient_along(f, h, a, edge_order) for h, a in zip(spacings, axes))
    return out[0] if len(out) == 1 else out


def _gradient_along(f, spacing, axis: int, edge_order: int):
    """numpy.gradient's formulas along one ``axis`` (unequal spacing included)."""
    n = f.shape[axis]
    if n < edge_order + 1:
        raise ValueError(f"jask.array_api.gradient: axis {axis} has {n} elements; edge_order="
                         f"{edge_order} needs at least {edge_order + 1}")
    if np.ndim(spacing) == 0:
        dx = np.full(n - 1, float(spacing))
    else:
        coordinates = np.asarray(spacing, dtype=np.float64)
        if coordinates.shape != (n,):
            raise ValueError(f"jask.array_api.gradient: the coordinates of axis {axis} must be "
                             f"1-D of length {n}, got shape {coordinates.shape}")
        dx = np.diff(coordinates)
    trailing = (1,) * (len(f.shape) - axis - 1)
    dtype = np.dtype(f.dtype)

    def part(start, stop):
        key = (slice(None),) * axis + (slice(start, stop),)
        return unwrap(f[key])

    def weight(values):
        """Coefficients broadcast along ``axis``: one number for equal spacing, else one
        per position, written to disk when over an eighth of the budget (every tile
        would read them whole)."""
        values = np.asarray(values, dtype)
        if np.all(values == values[0]):
            return values[0]
        values = values.reshape((-1,) + trailing)
        if disk_type(f) is not None and not interop.fits_in_memory(values.shape, values.dtype):
            return creation.from_numpy(values)
        return values

    add, mul = elementwise.add, elementwise.multiply
    parts = []
    if n == 2 or edge_order == 1:
        parts.append(mul(elementwise.subtract(part(1, 2), part(0, 1)), weight([1 / dx[0]])))
    else:
        d1, d2 = dx[0], dx[1]
        a, b, c = (-(2 * d1 + d2) / (d1 * (d1 + d2)), (d1 + d2) / (d1 * d2),
                   -d1 / (d2 * (d1 + d2)))
        parts.append(add(add(mul(part(0, 1), weight([a])), mul(part(1, 2), weight([b]))),
                         mul(part(2, 3), weight([c]))))
    if n > 2 and np.all(dx == dx[0]):  # numpy's formula, which leaves out the middle value
        parts.append(mul(elementwise.subtract(part(2, n), part(0, n - 2)),
                         weight([0.5 / dx[0]])))
    elif n > 2:
        hd, hs = dx[:-1], dx[1:]
        parts.append(add(add(mul(part(0, n - 2), weight(-hs / (hd * (hd + hs)))),
                             mul(part(1, n - 1), weight((hs - hd) / (hd * hs)))),
                         mul(part(2, n), weight(hd / (hs * (hd + hs))))))
    if n == 2 or edge_order == 1:
        parts.append(mul(elementwise.subtract(part(n - 1, n), part(n - 2, n - 1)),
                         weight([1 / dx[-1]])))
    else:
        d1, d2 = dx[-2], dx[-1]
        a, b, c = (d2 / (d1 * (d1 + d2)), -(d2 + d1) / (d1 * d2),
                   (2 * d2 + d1) / (d2 * (d1 + d2)))
        parts.append(add(add(mul(part(n - 3, n - 2), weight([a])),
                             mul(part(n - 2, n - 1), weight([b]))),
                         mul(part(n - 1, n), weight([c]))))
    return concat(parts, axis=axis)


def transpose(x, /, axes=None):
    """numpy's name of :func:`permute_dims` (``axes=None``: reversed); xarray's
    ``transpose`` calls it.

    Example:
      >>> import jask.array_api as xp
      >>> xp.transpose(xp.ones((2, 3, 4))).shape
      (4, 3, 2)
    """
    ndim = len(x.shape)
    return permute_dims(x, tuple(range(ndim))[::-1] if axes is None else tuple(axes))


def sliding_window_view(x, window_shape, axis=None):
    """numpy's ``lib.stride_tricks.sliding_window_view`` (also as
    ``xp.lib.stride_tricks.sliding_window_view``, where xarray's ``rolling``
    looks for it): :func:`jask.sliding_window_view`, a new DiskArray.

    Example:
      >>> import jask.array_api as xp
      >>> xp.lib.stride_tricks.sliding_window_view(xp.arange(4), 2).shape
      (3, 2)
    """
    return own(manipulation.sliding_window_view(x, window_shape, axis))


# every function takes the namespace's arrays (unwrapped) and answers them
wrap_module(globals(), [n for n, v in list(globals().items())
                        if callable(v) and not n.startswith("_") and n not in __all__
                        and getattr(v, "__module__", None) == __name__])
