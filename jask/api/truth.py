"""Truth reductions: ``all``, ``any`` and ``count_nonzero`` over axes.

Each is one pass: ``x != 0`` tile by tile, reduced by a logical and, a
logical or or a sum; the result lives where :func:`jask.sum`'s would (in
memory when small). Not differentiable (bool and int results). With no
DiskArray operand each is its ``jax.numpy`` counterpart. ``isin`` tests each
element against a small set held in memory, tile by tile. (A module of their
own: inside it ``all`` and ``any`` are jask's, not Python's builtins.)
"""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import elementwise
from jask.api.reductions import _disk, _in_memory, _layout, _result_dtype
from jask.base import memory
from jask.base.config import Config
from jask.base.sizes import exact_bytes
from jask.core import primitives, ufuncs
from jask.core._jax_internals import is_tracer
from jask.core.array import disk_type

__all__ = ["all", "any", "count_nonzero", "isin"]


def _truth(op, reducer, x, axis, keepdims, config):
    """all, any or count_nonzero: ``x != 0`` reduced by ``reducer``."""
    aval = _disk(x)
    reduced, out_axes, out_shape = _layout(op, x, axis, keepdims)
    dtype = _result_dtype({"all": jnp.all, "any": jnp.any,
                           "count_nonzero": jnp.count_nonzero}[op], x)
    return primitives.reduce(op, ufuncs.NONZERO, [x], [tuple(range(aval.ndim))], [None],
                             aval.shape, out_axes, dtype, reducer=reducer,
                             to_memory=_in_memory(axis, out_shape, dtype, config),
                             config=config)


def all(x, axis=None, keepdims: bool = False, *, config: Config | None = None):  # noqa: A001
    """Whether every element of ``x`` over ``axis`` is nonzero (True),
    as ``jax.numpy.all``; see :func:`sum` for where the result lives.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 0.0], [3.0, 4.0]], np.float32))
      >>> jask.all(x, axis=1)
      Array([False,  True], dtype=bool)
    """
    if disk_type(x) is None:
        return jnp.all(x, axis=axis, keepdims=keepdims)
    return _truth("all", "all", x, axis, keepdims, config)


def any(x, axis=None, keepdims: bool = False, *, config: Config | None = None):  # noqa: A001
    """Whether some element of ``x`` over ``axis`` is nonzero (True),
    as ``jax.numpy.any``.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[0.0, 0.0], [0.0, 4.0]], np.float32))
      >>> jask.any(x, axis=1)
      Array([False,  True], dtype=bool)
    """
    if disk_type(x) is None:
        return jnp.any(x, axis=axis, keepdims=keepdims)
    return _truth("any", "any", x, axis, keepdims, config)


def count_nonzero(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """How many elements of ``x`` over ``axis`` are nonzero, as
    ``jax.numpy.count_nonzero`` (int32; int64 in JAX's x64 mode).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 4.0]], np.float32))
      >>> jask.count_nonzero(x, axis=1)
      Array([2, 1], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.count_nonzero(x, axis=axis, keepdims=keepdims)
    return _truth("count_nonzero", "sum", x, axis, keepdims, config)


def _exactly_in(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The test values an integer (or bool) ``dtype`` holds exactly, in it:
    integral and within its range (NaN and fractions hold no integer)."""
    low, high = (0, 1) if dtype.kind == "b" else (int(np.iinfo(dtype).min),
                                                   int(np.iinfo(dtype).max))
    if values.dtype.kind == "c":
        values = values[values.imag == 0].real
    if values.dtype.kind == "f":  # (high + 1 a power of two: exact as a float)
        values = values[(values == np.floor(values)) & (values >= low) & (values < high + 1)]
    elif values.dtype.kind in "iub":  # numpy compares out-of-range Python ints exactly
        values = values[(values >= low) & (values <= high)]
    elif values.dtype == object:  # Python ints past 64 bits
        values = np.asarray([v for v in values
                             if isinstance(v, numbers.Integral) and low <= int(v) <= high],
                            dtype=object)
    else:
        raise TypeError(f"jask.isin: test elements of dtype {values.dtype} cannot be "
                        f"compared with {dtype}")
    return values.astype(dtype)


class _IsIn:
    """The kernel of :func:`isin`: a tile's elements tested against the set,
    both in the dtype jax.numpy compares them in."""

    def __init__(self, test: np.ndarray, dtype: np.dtype, invert: bool):
        self.test, self.dtype, self.invert = test.astype(dtype), dtype, invert

    #: elements tested at a time: np.isin sorts the tile with the set (indices
    #: of 8 bytes and copies: five tiles of float32 measured), so a strip at a time
    STRIP = 1 << 15

    def __call__(self, tile):
        flat = tile.reshape(-1)
        out = np.empty(flat.shape, bool)
        for start in range(0, flat.size, self.STRIP):
            part = flat[start:start + self.STRIP].astype(self.dtype, copy=False)
            out[start:start + self.STRIP] = np.isin(part, self.test, invert=self.invert)
        return out.reshape(tile.shape)


def isin(element, test_elements, assume_unique: bool = False, invert: bool = False, *,
         config: Config | None = None):
    """Whether each element of ``element`` is in ``test_elements``, as
    ``jax.numpy.isin`` (both promoted to one dtype; NaN is in no set): a bool
    DiskArray of ``element``'s shape, one pass. ``test_elements`` is held in
    memory and sent to every tile: a set over the in-memory share of the
    budget is refused (as is one traced inside ``jit``: its values are the
    kernel's); ``assume_unique`` changes nothing here.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([1, 5, 3, 7], np.int32))
      >>> jask.isin(x, [3, 7]).to_numpy()
      array([False, False,  True,  True])
    """
    del assume_unique  # a hint for jax.numpy's algorithm; the answer is the same
    aval = disk_type(element)
    if aval is None:
        return jnp.isin(element, test_elements, invert=invert)
    if is_tracer(test_elements) or is_tracer(element) and disk_type(test_elements) is not None:
        raise TypeError("jask.isin: test_elements must be known outside jit (the set is "
                        "held by every tile's kernel); use jask.any(x[..., None] == test, -1) "
                        "for a traced set")
    test_type = disk_type(test_elements)
    shape = tuple(test_type.shape) if test_type is not None else np.shape(test_elements)
    dtype = np.dtype(test_type.dtype if test_type is not None else np.asarray(
        test_elements).dtype)
    if not memory.fits_in_memory(shape, dtype, config):
        raise memory.BudgetError(
            f"jask.isin: the set of {int(np.prod(shape))} test elements "
            f"({exact_bytes(memory.nbytes(shape, dtype))}) is over the in-memory share of the "
            f"budget ({exact_bytes(memory.in_memory_limit(config))}); every tile is tested "
            "against all of it in memory. Use a smaller set, or raise the budget")
    values = np.asarray(primitives.materialize(test_elements, config=config)
                        if test_type is not None else test_elements)
    if np.dtype(aval.dtype).kind in "biu":
        # integers compared exactly, in x's dtype (as a jax.Array of it: int32 for an
        # int64 store with x64 off): a test value it cannot hold (2**40 for uint8, -1
        # for uint32, 1.5 for int32) matches nothing, where a cast would wrap it onto one
        compute = np.dtype(jax.dtypes.canonicalize_dtype(aval.dtype))
        values = _exactly_in(values.reshape(-1), compute)
    else:
        like = test_elements if isinstance(test_elements, (bool, int, float)) \
            else jax.ShapeDtypeStruct((), values.dtype)  # a Python number promotes weakly
        compute = np.dtype(jnp.result_type(jax.ShapeDtypeStruct((), aval.dtype), like))
        if values.dtype.kind in "iufc":  # a finite value past the range is no infinity
            with np.errstate(over="ignore", invalid="ignore"):
                values = values[~(np.isinf(values.astype(compute)) & np.isfinite(values))]
    test = np.unique(values)
    ref = jax.tree_util.Partial(jnp.isin, test_elements=jnp.asarray(test), invert=invert)
    row = ufuncs.Ufunc("isin", _IsIn(test, compute, invert), ref, (None,), public=False)
    return elementwise.apply(row, element, config=config)
