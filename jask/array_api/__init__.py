"""The Array API standard (2024.12) over DiskArrays: ``x.__array_namespace__()``.

A namespace of its own, beside jask's top level, because the two answer
differently: its creation functions make DiskArrays whatever their size (as
Cubed's do), so code written for the standard runs out of core, and its
signatures are the standard's (``concat``, ``permute_dims``, ``pow``,
``astype(x, dtype, copy=, device=)``, ``sum(x, axis=, dtype=, keepdims=)``),
while ``jask.*`` keeps jax.numpy's names and answers small results in memory.
A closed namespace: every result is an array of it (``isinstance(r, xp.Array)``),
a DiskArray, or where jask answers in memory (0-d values, reductions and
products within an eighth of the budget, ``x[i]`` of a small row, small
``linalg`` results) an :class:`InMemoryArray`: a ``jax.Array`` behind the
namespace's type, never a bare one, so ``array_namespace(result, X)`` is this
namespace and devices agree (``DISK``). The standard's operators of a DiskArray
(``x[key]``, ``x @ y``, ``iter(x)``) answer the same way. Every function takes
the namespace's arrays, ``jax.Array`` s and numpy arrays alike; under
``jax.jit`` an InMemoryArray holds a tracer and passes the jit boundary (a
pytree). jask's top level (``jask.sum``, ``jask.unique_values``, ...) and the
jax-style methods (``x.sum()``) keep jax.numpy's habit of answering small
results as ``jax.Array`` s. Inside ``jax.grad`` (``vjp``, ``jvp``) a 0-d
result is the differentiated tracer itself: JAX needs its function's value as
a jax value.

Every function is a thin wrapper over a jask function, looked up by name when
called: a function whose jask counterpart does not exist yet raises a
``NotImplementedError`` naming it. What depends on the data's values
(``unique_*``, boolean masks on disk, iteration, ``x[key] = v``) runs on
concrete arrays outside ``jax.jit``, and is refused inside it with what to do
instead. ``linalg`` and ``fft`` are the standard's extensions (:mod:`jask.array_api.linalg`,
:mod:`jask.array_api.fft`).
complex64 and complex128 are offered, with the standard's promotion (a real
floating type and a complex one mix); derivatives through complex values are
refused, naming the op.

Example:
  >>> import numpy as np, jask, jask.array_api as xp
  >>> x = jask.from_numpy(np.arange(6.0).reshape(2, 3))
  >>> x.__array_namespace__() is xp
  True
  >>> xp.permute_dims(xp.concat([x, xp.ones((1, 3), dtype=xp.float64)]), (1, 0)).shape
  (3, 3)
"""
from __future__ import annotations

import math as _math
import types as _types

from jask.array_api import _array, fft, linalg
from jask.array_api._creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from jask.array_api._dtypes import (
    DISK,
    Device,
    __array_namespace_info__,
    bool,
    can_cast,
    check_dtype,
    complex64,
    complex128,
    default_complex,
    default_float,
    default_int,
    finfo,
    float16,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    isdtype,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from jask.array_api._functions import (
    ELEMENTWISE,
    FUNCTIONS,
    all,
    any,
    argmax,
    argmin,
    argsort,
    astype,
    broadcast_arrays,
    broadcast_to,
    clip,
    concat,
    count_nonzero,
    cumprod,
    cumsum,
    cumulative_prod,
    cumulative_sum,
    diff,
    einsum,
    expand_dims,
    flip,
    gradient,
    isin,
    jask_function,
    matmul,
    matrix_transpose,
    max,
    mean,
    median,
    meshgrid,
    min,
    moveaxis,
    nanargmax,
    nanargmin,
    nancumprod,
    nancumsum,
    nanmax,
    nanmean,
    nanmedian,
    nanmin,
    nanprod,
    nanquantile,
    nanstd,
    nansum,
    nanvar,
    nonzero,
    pad,
    permute_dims,
    prod,
    quantile,
    repeat,
    reshape,
    roll,
    searchsorted,
    sliding_window_view,
    sort,
    squeeze,
    stack,
    std,
    sum,
    take,
    take_along_axis,
    tensordot,
    tile,
    transpose,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
    unstack,
    var,
    vecdot,
    where,
)
from jask.array_api._memory import Array, InMemoryArray

__array_api_version__ = "2024.12"

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None

# The elementwise functions, one per row of ELEMENTWISE (acos, add, bitwise_and, ...).
globals().update(FUNCTIONS)

#: numpy's ``lib.stride_tricks.sliding_window_view``, where xarray's ``rolling`` finds it
#: numpy's and jax.numpy's name of the cross product (``axis=``), which xarray's ``cross`` calls
cross = linalg.cross

lib = _types.SimpleNamespace(stride_tricks=_types.SimpleNamespace(
    sliding_window_view=sliding_window_view))

_array.install()


def _register_opt_einsum_backend() -> None:
    """opt_einsum (which xarray's ``dot`` and ``weighted`` call when it is
    installed) takes an array's backend from its class's top module, ``jask``,
    whose ``einsum`` answers small results as ``jax.Array`` s; name this
    namespace instead, as ``x.__array_namespace__()`` does."""
    try:
        from opt_einsum.backends import dispatch
    except ImportError:
        return
    aliases = getattr(dispatch, "_aliases", None)
    if isinstance(aliases, dict):
        aliases.setdefault("jask", __name__)


_register_opt_einsum_backend()

__all__ = [
    "__array_namespace_info__", "Array", "InMemoryArray", "DISK", "Device", "e", "inf", "nan",
     "pi", "newaxis",
     "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "float16", "float32", "float64", "complex64", "complex128", "can_cast", "finfo", "iinfo",
     "isdtype", "result_type", "check_dtype", "default_float", "default_int", "default_complex",
     "jask_function", "ELEMENTWISE",
     "arange", "asarray", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like",
     "linspace", "meshgrid", "ones", "ones_like", "tril", "triu", "zeros", "zeros_like",
     "all", "any", "argmax", "argmin", "argsort", "astype", "broadcast_arrays",
     "broadcast_to", "clip", "concat", "count_nonzero", "cumulative_prod", "cumulative_sum",
     "diff", "expand_dims", "flip", "matmul", "matrix_transpose", "max", "mean", "min",
     "moveaxis", "nonzero", "permute_dims", "prod", "repeat", "reshape", "roll",
     "searchsorted", "sort", "squeeze", "stack", "std", "sum", "take", "take_along_axis",
     "tensordot", "tile", "unique_all", "unique_counts", "unique_inverse", "unique_values",
     "unstack", "var", "vecdot", "where", "fft", "linalg",
     # beyond the standard: jax.numpy's functions xarray calls
     "cross", "cumprod", "cumsum", "einsum", "gradient", "isin", "median", "nanargmax",
     "nanargmin", "nancumprod", "nancumsum", "nanmax", "nanmean", "nanmedian", "nanmin",
     "nanprod", "nanquantile", "nanstd", "nansum", "nanvar", "pad", "quantile",
     "sliding_window_view", "transpose", "lib"]
__all__ += sorted(FUNCTIONS)
