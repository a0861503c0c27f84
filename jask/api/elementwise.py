"""Elementwise ops on DiskArrays and in-memory values, one per table row.

Every public row of :data:`jask.core.ufuncs.TABLE` becomes a function here
(``jask.exp``, ``jask.maximum``, ...) through :func:`apply`, which follows
numpy's broadcasting and JAX's type promotion. An in-memory operand (a
``jax.Array``, a numpy array, a scalar) is sent to every tile as it is,
never written to disk, and its gradient is an in-memory array of its own
shape. With no DiskArray operand the row's ``jax.numpy`` function runs
instead, so the caller need not know which kind it holds.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jask.api.creation import from_numpy
from jask.base.config import Config, get_config
from jask.base.memory import BudgetError
from jask.base.sizes import exact_bytes
from jask.core import primitives, ufuncs
from jask.core._jax_internals import is_tracer
from jask.core.array import disk_type
from jask.engine.blockwise import broadcast_axes

__all__ = ["apply", "apply_in", "astype"]

#: An in-memory operand may take at most this share of the budget: every
#: task reads it, and a compiled call holds a host copy of it while it runs.
MAX_IN_MEMORY_SHARE = 0.25


def _signature(x, kind) -> tuple:
    """What fixes an operand's part in an op's result type: its shape,
    dtype and weak type (a Python scalar's value does not matter)."""
    if kind is not None:
        return (tuple(kind.shape), np.dtype(kind.dtype), False)
    if _is_python_scalar(x):
        return ((), type(x), True)
    return (tuple(x.shape), np.dtype(x.dtype), bool(getattr(x, "weak_type", False)))


def _abstract(signature: tuple):
    shape, dtype, weak = signature
    if any(dtype is t for t in (int, float, complex)):  # a Python scalar: weakly typed
        return dtype(0)
    return jax.ShapeDtypeStruct(shape, dtype, weak_type=weak)


@functools.lru_cache(maxsize=4096)
def _result(ufunc: ufuncs.Ufunc, signature: tuple, x64: bool) -> tuple:
    """(shape, dtype, compute dtype) of ``ufunc`` on operands of ``signature``,
    by jax.eval_shape of its reference: numpy broadcasting, JAX promotion
    (weak Python scalars included) in the current x64 mode.

    A store is typed as a jax.Array of its dtype would be: with x64 off a
    float64 (int64) store gives float32 (int32) results, as
    ``jnp.asarray(np.float64 array)`` does. The compute dtype is JAX's
    promotion of the non-bool operands, the dtype jax.numpy computes in; a
    cast computes in its input's own dtype, so it loses nothing on the way
    to the dtype asked for. Cached (``x64`` is part of the key): the same
    op on the same types is traced once.
    """
    structs = [_abstract(sig) for sig in signature]
    try:
        out = jax.eval_shape(ufunc.jnp, *structs)
    except TypeError as err:
        if "dtype" in str(err):  # a dtype jax.numpy refuses (a float to bitwise_and, ...)
            raise TypeError(f"jask.{ufunc.name}: operands of dtypes {_dtype_names(signature)} "
                            f"are refused, as in jax.numpy: {err}") from None
        raise ValueError(f"jask.{ufunc.name}: operands of shapes {_shape_names(structs)} "
                         f"cannot be combined: {err}") from None
    except ValueError as err:
        raise ValueError(f"jask.{ufunc.name}: operands of shapes {_shape_names(structs)} "
                         f"cannot be combined: {err}") from None
    if ufunc.dtype is not None:  # a cast stores what was asked for
        return tuple(out.shape), ufunc.dtype, np.dtype(signature[0][1])
    numeric = [x for x, sig in zip(structs, signature) if sig[1] != np.dtype(np.bool_)]
    compute = np.dtype(jnp.result_type(*numeric)) if numeric else np.dtype(np.bool_)
    return tuple(out.shape), np.dtype(out.dtype), compute


def _dtype_names(signature) -> str:
    return " and ".join(getattr(dtype, "__name__", str(dtype)) for _, dtype, _ in signature)


def _refuse_complex(ufunc: ufuncs.Ufunc, signature: tuple) -> None:
    """A complex operand of a row the standard defines for real numbers only
    (``ufuncs.REAL_ONLY``: an ordering, a rounding, ...) is refused before
    anything runs, as the standard and array-api-strict refuse it."""
    if ufunc.name not in ufuncs.REAL_ONLY:
        return
    complex_ = [getattr(d, "__name__", str(d)) for _, d, _ in signature
                if d is complex or (d not in (int, float) and np.dtype(d).kind == "c")]
    if complex_:
        raise TypeError(f"jask.{ufunc.name}: complex operands ({', '.join(complex_)}) are "
                        f"refused: the Array API standard defines {ufunc.name} for real-valued "
                        "data types only. Take jask.real, jask.imag or jask.abs first.")


def _shape_names(args) -> str:
    return " and ".join(str(tuple(np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape))
                        for x in args)


def check_in_memory(op: str, value, config: Config) -> None:
    """Refuse an in-memory operand too large to send to every tile."""
    nbytes = int(np.prod(np.shape(value))) * np.dtype(value.dtype).itemsize
    limit = int(config.max_memory * MAX_IN_MEMORY_SHARE)
    if nbytes > limit:
        raise BudgetError(
            f"jask.{op}: the in-memory operand of shape {tuple(np.shape(value))} "
            f"({value.dtype}) holds {exact_bytes(nbytes)}, over {MAX_IN_MEMORY_SHARE:.0%} of "
            f"the memory budget ({exact_bytes(limit)} of {exact_bytes(config.max_memory)}): "
            "every task reads it. Write it to disk with jask.from_numpy, or raise the budget.")


def apply(ufunc: ufuncs.Ufunc, *args, config: Config | None = None):
    """``ufunc(*args)`` for any mix of DiskArrays and in-memory values.

    Example:
      >>> import numpy as np, jask
      >>> from jask.core import ufuncs
      >>> x = jask.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
      >>> apply(ufuncs.TABLE["add"], x, np.array([10.0, 20.0], np.float32)).to_numpy()
      array([[11., 22.],
             [13., 24.]], dtype=float32)
    """
    kinds = [disk_type(x) for x in args]
    if not any(k is not None for k in kinds):
        return ufunc.jnp(*args)
    cfg = config or get_config()
    if any(k is None and _is_large_dask(x, cfg) for x, k in zip(args, kinds)):
        from jask.api.interop import dask_operand
        args = tuple(dask_operand(x, config=cfg) if k is None and _is_large_dask(x, cfg)
                     else x for x, k in zip(args, kinds))
        kinds = [disk_type(x) for x in args]
    # in-memory operands as JAX arrays, canonical for the current x64 mode
    values = [x if k is not None else (x if _is_python_scalar(x) else jnp.asarray(x))
              for x, k in zip(args, kinds)]
    signature = tuple(_signature(x, k) for x, k in zip(values, kinds))
    _refuse_complex(ufunc, signature)
    shape, out_dtype, compute = _result(ufunc, signature, bool(jax.config.read("jax_enable_x64")))
    operands: list = []
    avals: list = []
    dtypes: list = []
    for x, k in zip(values, kinds):
        if k is not None:
            operands.append(x)
            avals.append(k)
            dtypes.append(None if k.dtype == np.bool_ else compute)
            continue
        v = jnp.asarray(x)
        if v.dtype != np.bool_:
            v = v.astype(compute)
        check_in_memory(ufunc.name, v, cfg)
        operands.append(v)
        avals.append(jax.core.ShapedArray(v.shape, v.dtype))
        dtypes.append(None if v.dtype == np.bool_ else compute)
    axes = tuple(broadcast_axes(tuple(a.shape), shape) for a in avals)
    return primitives.Blockwise(ufunc, avals, axes, tuple(dtypes), shape,
                                tuple(range(len(shape))), out_dtype, config=config)(*operands)


def apply_in(ufunc: ufuncs.Ufunc, dtype, *args, config: Config | None = None):
    """``ufunc(*args)`` computed and stored in ``dtype``, with no JAX
    promotion: each tile of a non-bool operand is cast to ``dtype`` by numpy
    and the kernel runs in it. The write path (``x[key] = v``, ``x.at[...]``)
    combines a store with a value this way, so elements the key does not name
    are copied in the store's own dtype: with x64 off, an int64 or float64
    store would otherwise pass through 32 bits (JAX's canonical dtype). At
    least one operand is a DiskArray; an in-memory one that JAX's canonical
    dtype cannot hold exactly (a float64 0.1 with x64 off) is written to a
    small store of its own dtype first (outside ``jit``; a traced one is
    JAX's already).

    Example:
      >>> import numpy as np, jask
      >>> from jask.core import ufuncs
      >>> x = jask.from_numpy(np.array([1, 2**40 + 1]))
      >>> apply_in(ufuncs.TABLE["where"], x.dtype, np.array([True, False]), 5, x).to_numpy()
      array([            5, 1099511627777])
    """
    dtype = np.dtype(dtype)
    kinds = [disk_type(x) for x in args]
    if not any(k is not None for k in kinds):
        raise TypeError(f"jask.{ufunc.name}: apply_in needs a DiskArray operand")
    cfg = config or get_config()
    operands: list = []
    avals: list = []
    for x, k in zip(args, kinds):
        if k is None:
            x = x if is_tracer(x) else _exact_in_jax(np.asarray(x), cfg)
            k = disk_type(x)
        if k is None:
            x = jnp.asarray(x)
            check_in_memory(ufunc.name, x, cfg)
            avals.append(jax.core.ShapedArray(x.shape, x.dtype))
        else:
            avals.append(k)
        operands.append(x)
    shape = np.broadcast_shapes(*(tuple(a.shape) for a in avals))
    axes = tuple(broadcast_axes(tuple(a.shape), shape) for a in avals)
    dtypes = tuple(None if np.dtype(a.dtype) == np.bool_ else dtype for a in avals)
    return primitives.Blockwise(ufunc, avals, axes, dtypes, shape,
                                tuple(range(len(shape))), dtype, config=config)(*operands)


def _exact_in_jax(value: np.ndarray, config: Config):
    """``value`` as an operand that keeps every bit: itself where JAX's
    canonical dtype holds it exactly (5 as int32 for an int64 store), else a
    small store in its own dtype."""
    canonical = np.dtype(jax.dtypes.canonicalize_dtype(value.dtype))
    if canonical == value.dtype:
        return value
    with np.errstate(all="ignore"):
        back = value.astype(canonical).astype(value.dtype)
    if back.tobytes() == np.ascontiguousarray(value).tobytes():
        return value
    return from_numpy(value.reshape(value.shape or (1,)), config=config)  # no 0-d stores


def _is_large_dask(x, config: Config) -> bool:
    """A Dask array too large to be an in-memory operand (xarray makes one of
    a groupby's climatology, ``clim.isel(month=codes)``, for ``anomalies =
    X.groupby("time.month") - clim``): its tiles computed where they are
    read (:func:`jask.api.interop.dask_operand`), never whole in memory."""
    if not type(x).__module__.startswith("dask."):
        return False
    nbytes = int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
    return nbytes > config.max_memory * MAX_IN_MEMORY_SHARE


def _is_python_scalar(x) -> bool:
    return isinstance(x, (int, float, complex)) and not isinstance(x, bool)


_DOC = """Elementwise {doc}, computed one tile at a time.

Operands may be DiskArrays, in-memory arrays (``jax.Array``, numpy) or
scalars, broadcast against each other as in numpy; the result is a new
DiskArray. With no DiskArray operand this is ``{ref}``. Differentiable in
every floating operand: an in-memory operand's gradient is an in-memory
array of its shape.
"""

#: The doc example of a row (its ``example`` field), appended to its docstring.
_EXAMPLE = """
Example:
  >>> import numpy as np, jask
  >>> x = jask.from_numpy(np.array([0.0, 1.0, 2.0], np.float32))
  >>> jask.{prefix}{name}({args}).to_numpy()
  {expected}
"""


def _public(ufunc: ufuncs.Ufunc, prefix: str = ""):
    def op(*args, config: Config | None = None):
        if len(args) != ufunc.nin:
            raise TypeError(f"jask.{prefix}{ufunc.name} takes {ufunc.nin} operand(s), got "
                            f"{len(args)}")
        return apply(ufunc, *args, config=config)

    ref = f"jax.nn.{ufunc.name}" if prefix else f"jax.numpy.{ufunc.name}"
    op.__name__ = op.__qualname__ = ufunc.name
    op.__doc__ = _DOC.format(doc=ufunc.doc, ref=ref)
    if ufunc.example is not None:  # the row's own example (a test wants one per public row)
        args, expected = ufunc.example
        op.__doc__ += _EXAMPLE.format(prefix=prefix, name=ufunc.name, args=args,
                                      expected=expected)
    op.__module__ = "jask.nn" if prefix else "jask"
    return op


_NN = ("sigmoid", "relu", "softplus")
#: The public elementwise functions, by name (``jask.nn`` has the activations).
FUNCTIONS = {name: _public(u) for name, u in ufuncs.TABLE.items()
             if u.public and name not in _NN}
NN_FUNCTIONS = {name: _public(ufuncs.TABLE[name], prefix="nn.") for name in _NN}

# The public functions by name, spelled out for readers and type checkers.
add = FUNCTIONS["add"]
subtract = FUNCTIONS["subtract"]
multiply = FUNCTIONS["multiply"]
divide = FUNCTIONS["divide"]
power = FUNCTIONS["power"]
negative = FUNCTIONS["negative"]
square = FUNCTIONS["square"]
maximum = FUNCTIONS["maximum"]
minimum = FUNCTIONS["minimum"]
clip = FUNCTIONS["clip"]
abs = FUNCTIONS["abs"]
exp = FUNCTIONS["exp"]
log = FUNCTIONS["log"]
log1p = FUNCTIONS["log1p"]
sqrt = FUNCTIONS["sqrt"]
tanh = FUNCTIONS["tanh"]
arctan = FUNCTIONS["arctan"]
where = FUNCTIONS["where"]
less = FUNCTIONS["less"]
less_equal = FUNCTIONS["less_equal"]
greater = FUNCTIONS["greater"]
greater_equal = FUNCTIONS["greater_equal"]
equal = FUNCTIONS["equal"]
not_equal = FUNCTIONS["not_equal"]
sin = FUNCTIONS["sin"]
cos = FUNCTIONS["cos"]
tan = FUNCTIONS["tan"]
arcsin = FUNCTIONS["arcsin"]
arccos = FUNCTIONS["arccos"]
sinh = FUNCTIONS["sinh"]
cosh = FUNCTIONS["cosh"]
arcsinh = FUNCTIONS["arcsinh"]
arccosh = FUNCTIONS["arccosh"]
arctanh = FUNCTIONS["arctanh"]
expm1 = FUNCTIONS["expm1"]
log2 = FUNCTIONS["log2"]
log10 = FUNCTIONS["log10"]
reciprocal = FUNCTIONS["reciprocal"]
positive = FUNCTIONS["positive"]
conj = FUNCTIONS["conj"]
real = FUNCTIONS["real"]
imag = FUNCTIONS["imag"]
angle = FUNCTIONS["angle"]
floor = FUNCTIONS["floor"]
ceil = FUNCTIONS["ceil"]
trunc = FUNCTIONS["trunc"]
round = FUNCTIONS["round"]
sign = FUNCTIONS["sign"]
isfinite = FUNCTIONS["isfinite"]
isinf = FUNCTIONS["isinf"]
isnan = FUNCTIONS["isnan"]
signbit = FUNCTIONS["signbit"]
logical_not = FUNCTIONS["logical_not"]
invert = FUNCTIONS["invert"]
arctan2 = FUNCTIONS["arctan2"]
hypot = FUNCTIONS["hypot"]
logaddexp = FUNCTIONS["logaddexp"]
copysign = FUNCTIONS["copysign"]
nextafter = FUNCTIONS["nextafter"]
remainder = FUNCTIONS["remainder"]
floor_divide = FUNCTIONS["floor_divide"]
bitwise_and = FUNCTIONS["bitwise_and"]
bitwise_or = FUNCTIONS["bitwise_or"]
bitwise_xor = FUNCTIONS["bitwise_xor"]
left_shift = FUNCTIONS["left_shift"]
right_shift = FUNCTIONS["right_shift"]
logical_and = FUNCTIONS["logical_and"]
logical_or = FUNCTIONS["logical_or"]
logical_xor = FUNCTIONS["logical_xor"]

#: The Array API standard's names that jax.numpy also has, for the same functions.
ALIASES = {"acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh",
           "atan": "arctan", "atan2": "arctan2", "atanh": "arctanh",
           "bitwise_invert": "invert", "bitwise_left_shift": "left_shift",
           "bitwise_right_shift": "right_shift", "pow": "power"}
acos, acosh, asin, asinh = arccos, arccosh, arcsin, arcsinh
atan, atan2, atanh = arctan, arctan2, arctanh
bitwise_invert, bitwise_left_shift, bitwise_right_shift = invert, left_shift, right_shift
pow = power


def astype(x, dtype, *, config: Config | None = None):
    """``x`` converted to ``dtype``, one tile at a time (a new DiskArray).

    Its gradient is cast back to ``x``'s dtype. An in-memory ``x`` gives
    ``jax.numpy.asarray(x).astype(dtype)``.

    Example:
      >>> import numpy as np, jask
      >>> jask.astype(jask.from_numpy(np.array([1.5, 2.5])), np.float32).to_numpy()
      array([1.5, 2.5], dtype=float32)
    """
    kind = disk_type(x)
    if kind is not None and np.dtype(kind.dtype).kind == "c" and np.dtype(dtype).kind != "c":
        raise TypeError(f"jask.astype: a complex array ({np.dtype(kind.dtype).name}) is not "
                        f"cast to {np.dtype(dtype).name}: the standard refuses complex to real "
                        "casts (jax.numpy deprecates them). Take jask.real, jask.imag or "
                        "jask.abs first.")
    return apply(ufuncs.astype(np.dtype(dtype)), x, config=config)
