"""numpy kernels of the op table where numpy's answer differs from jax.numpy's.

jax.numpy lowers to XLA, which defines every integer case numpy leaves to
the C compiler or warns about: an integer divided by zero gives -1 (all
bits set; the largest value of an unsigned type) and its remainder is the
dividend; ``INT_MIN // -1`` wraps to ``INT_MIN``; a shift by a negative
amount or by the type's width or more gives 0 (or -1 for an arithmetic
right shift of a negative value). These kernels reproduce jax.numpy's
results bit for bit on tiles, following the code of
``jax/_src/numpy/ufuncs.py`` step by step; each docstring says where numpy
would differ. Operands arrive already promoted to one dtype (bool operands
as they are).
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

__all__ = ["floor_divide", "remainder", "left_shift", "right_shift", "sign", "keep_integers",
           "integer_power", "power", "widened", "WIDE_STRIP", "WIDE_STRIP_MIN"]


def _is_integer(x) -> bool:
    return np.asarray(x).dtype.kind in "iu"


def _xla_div(a, b):
    """Integer division truncated toward zero, as XLA: ``a / 0`` is -1 (all
    bits set) and ``INT_MIN / -1`` wraps to ``INT_MIN``."""
    safe = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        q = (a - np.fmod(a, safe)) // safe  # exact: a - fmod(a, b) is a multiple of b
    return np.where(b == 0, np.array(-1).astype(q.dtype), q)


def _xla_rem(a, b):
    """Integer remainder with the dividend's sign, as XLA: ``a % 0`` is ``a``."""
    with np.errstate(all="ignore"):
        return np.where(b == 0, a, np.fmod(a, np.where(b == 0, 1, b)))


def floor_divide(a, b):
    """``a // b`` as ``jnp.floor_divide``.

    Integers: by zero gives -1 for signed types before the floor correction
    (so ``5 // 0`` is -2 and ``0 // 0`` is -1) and the largest value for
    unsigned ones; numpy gives 0. Floats: CPython's divmod as jax.numpy
    follows it (``x // 0.0`` is +-inf or nan), rounded half away from zero.

    Example:
      >>> floor_divide(np.array([7, -7, 5, 0], np.int32), np.array([2, 2, 0, 0], np.int32))
      array([ 3, -4, -2, -1], dtype=int32)
    """
    if _is_integer(a) or _is_integer(b):
        a, b = np.broadcast_arrays(*_promoted(a, b))
        q = _xla_div(a, b)
        if a.dtype.kind == "u":
            return q
        fix = (np.sign(a) != np.sign(b)) & (_xla_rem(a, b) != 0)
        return np.where(fix, q - 1, q).astype(q.dtype)
    with np.errstate(all="ignore"):
        mod = np.fmod(a, b)
        div = np.where(b == 0, a, a - mod) / b
        fix = (mod != 0) & (np.sign(b) != np.sign(mod))
        div = np.where(fix, div - 1, div)
        rounded = np.trunc(div)  # lax.round: half away from zero
        return np.where(np.abs(div - rounded) >= 0.5, rounded + np.sign(div), rounded)


def remainder(a, b):
    """``a % b`` as ``jnp.remainder``: the sign of ``b``.

    Integers: ``a % 0`` is 0 (numpy agrees, with a warning). Floats: as
    numpy except that a zero result keeps ``a``'s sign (``-0.0 % 2.0`` is
    ``-0.0``; numpy gives ``0.0``).

    Example:
      >>> remainder(np.array([7, -7, 7, 5], np.int32), np.array([2, 2, -2, 0], np.int32))
      array([ 1,  1, -1,  0], dtype=int32)
    """
    if _is_integer(a) or _is_integer(b):
        a, b = _promoted(a, b)
        b = np.where(b == 0, np.ones_like(b), b)
    with np.errstate(all="ignore"):
        mod = np.fmod(a, b)
        plus = (mod != 0) & ((mod < 0) != (b < 0))
        return np.where(plus, mod + b, mod)


def _promoted(a, b):
    """Both operands in their common dtype (a bool one is not cast upstream)."""
    dtype = np.result_type(a, b)
    return np.asarray(a).astype(dtype, copy=False), np.asarray(b).astype(dtype, copy=False)


def left_shift(a, b):
    """``a << b`` as ``jnp.left_shift``: a shift by a negative amount or by
    the width of the type or more gives 0 (numpy's is undefined there).

    Example:
      >>> left_shift(np.array([1, 1, 1, 5], np.int32), np.array([3, 31, 40, -1], np.int32))
      array([          8, -2147483648,           0,           0], dtype=int32)
    """
    a, b = _promoted(a, b)
    bits = a.dtype.itemsize * 8
    inside = (b >= 0) & (b < bits)
    with np.errstate(all="ignore"):
        return np.where(inside, np.left_shift(a, np.where(inside, b, 0)), 0).astype(a.dtype)


def right_shift(a, b):
    """``a >> b`` as ``jnp.right_shift``: arithmetic for signed types, logical
    for unsigned; a shift by a negative amount or by the width or more gives
    the sign fill (-1 or 0) for signed types and 0 for unsigned ones.

    Example:
      >>> right_shift(np.array([-8, -8, 8, 8], np.int32), np.array([2, 40, 40, -1], np.int32))
      array([-2, -1,  0,  0], dtype=int32)
    """
    a, b = _promoted(a, b)
    bits = a.dtype.itemsize * 8
    inside = (b >= 0) & (b < bits)
    fill = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    with np.errstate(all="ignore"):
        return np.where(inside, np.right_shift(a, np.where(inside, b, 0)), fill).astype(a.dtype)


def sign(a):
    """``jnp.sign``: as numpy, but -0.0 keeps its sign (numpy gives 0.0).

    Example:
      >>> sign(np.array([-2.0, -0.0, 3.0, np.nan]))
      array([-1., -0.,  1., nan])
    """
    return np.where(a == 0, a, np.sign(a))


def expm1(a):
    """``jnp.expm1``: numpy's, but a complex number on the real axis keeps
    its imaginary zero (numpy gives ``expm1(inf + 0j) = inf + nan j``; the
    standard and jax.numpy ``inf + 0j``).

    Example:
      >>> complex(expm1(np.array([complex(np.inf, 0.0)]))[0])
      (inf+0j)
    """
    if np.asarray(a).dtype.kind != "c":
        return np.expm1(a)
    with np.errstate(invalid="ignore"):  # inf's nan imaginary part, replaced below
        out = np.expm1(a)
    on_axis = np.empty_like(out)
    on_axis.real, on_axis.imag = np.expm1(a.real), a.imag
    return np.where(a.imag == 0, on_axis, out)


def keep_integers(f):
    """A rounding kernel (floor, ceil, trunc, round) that returns integer
    and bool tiles as they are, as jax.numpy does (numpy's ``floor`` makes
    floats of them, which would lose int64 precision)."""
    def kernel(a):
        return a if np.asarray(a).dtype.kind in "iub" else f(a)
    kernel.__name__ = f.__name__
    return kernel


def integer_power(a, b):
    """``a ** b`` for integers as jax.numpy: six steps of binary
    exponentiation that wrap on overflow, and a negative exponent goes
    through the same steps on its two's-complement bits (numpy refuses it).

    Example:
      >>> integer_power(np.array([2, 3, 0, -2], np.int32), np.array([3, 2, 0, 31], np.int32))
      array([          8,           9,           1, -2147483648], dtype=int32)
    """
    a, b = _promoted(a, b)
    a, b = np.broadcast_arrays(a, b)
    acc = np.where((a == 0) & (b != 0), 0, 1).astype(a.dtype)
    unsigned = b.view(b.dtype.str.replace("i", "u")) if b.dtype.kind == "i" else b
    with np.errstate(all="ignore"):
        for _ in range(6):
            acc = np.where(unsigned & 1, acc * a, acc)
            a = a * a
            unsigned = unsigned >> 1
    return acc


def power(a, b):
    """``a ** b`` as ``jnp.power``: :func:`integer_power` for integers, else numpy's."""
    if _is_integer(a) and _is_integer(b):
        return integer_power(a, b)
    return np.power(a, b)


#: Elements a widened kernel (:func:`widened`) computes at a time: at most
#: WIDE_STRIP (float64 temporaries of 256 KiB, whatever the tile) and at most
#: a sixteenth of the tile, so that its 64-bit temporaries together stay within
#: the one temporary tile the memory model counts per elementwise task
#: (``jask.base.memory.ELEMENTWISE_OUT_COPIES``; measured: logaddexp's VJP
#: rule, the most, peaks at its result and 0.9 tile); not below WIDE_STRIP_MIN.
WIDE_STRIP = 2**15
WIDE_STRIP_MIN = 2**10
_WIDE = {np.dtype(np.float32): np.dtype(np.float64),
         np.dtype(np.complex64): np.dtype(np.complex128)}
_NARROW = {wide: narrow for narrow, wide in _WIDE.items()}


def widened(f, dtypes=tuple(_WIDE)):
    """``f`` computed on float32 (complex64) tiles in float64 (complex128) and
    rounded once to the 32-bit dtype, a strip of :data:`WIDE_STRIP` elements
    at a time (into ``out=`` when given); ``dtypes``: those of the two
    widened (complex64 only: a division, correctly rounded in float32).

    numpy's float32 transcendental loops are less accurate than XLA's (exp:
    2 ulp, 26% of results not correctly rounded, against 1 ulp, 5%); its
    float64 ones are within an ulp of float64, so the result rounded to
    float32 is within half an ulp and a bit. Other dtypes, and traced values
    (a band computed on the device), go to ``f`` as they are.

    Example:
      >>> x = np.linspace(-80, 80, 10**5, dtype=np.float32)
      >>> bool(np.all(widened(np.exp)(x) == np.exp(x.astype(np.float64)).astype(np.float32)))
      True
    """
    widen = frozenset(np.dtype(d) for d in dtypes)

    @functools.wraps(f)
    def kernel(*args, out=None):
        dtypes = [np.result_type(a) for a in args
                  if isinstance(a, (np.ndarray, np.generic, int, float, complex))]
        if (len(dtypes) < len(args) or not any(d in widen for d in dtypes)
                or any(d in _NARROW for d in dtypes)):
            return f(*args) if out is None else f(*args, out=out)
        shape = np.broadcast_shapes(*(np.shape(a) for a in args))
        views = [np.broadcast_to(a, shape) for a in args]
        strip = min(WIDE_STRIP, max(WIDE_STRIP_MIN, math.prod(shape) // 16))
        for index in _strips(shape, strip):
            part = f(*(v[index].astype(_WIDE.get(v.dtype, v.dtype)) for v in views))
            if out is None:
                out = np.empty(shape, _NARROW.get(part.dtype, part.dtype))
            out[index] = part
        return out if out is not None else f(*args)  # an empty tile
    # the engine lets a numpy ufunc write into the tile it read (``out=``)
    kernel.__wrapped__ = getattr(f, "__wrapped__", f)
    return kernel


def _strips(shape: tuple, strip: int):
    """Index tuples that cut ``shape`` into C-order pieces of at most
    ``strip`` elements (or one row of the last axis where that is longer).

    Example:
      >>> list(_strips((3, 4), 8))
      [(slice(0, 2, None),), (slice(2, 4, None),)]
    """
    if 0 in shape:
        return
    k, inner = len(shape), 1
    while k > 0 and inner * shape[k - 1] <= strip:
        k -= 1
        inner *= shape[k]
    if k == 0:
        yield ()
        return
    step = max(1, strip // inner)
    for outer in itertools.product(*(range(n) for n in shape[:k - 1])):
        for start in range(0, shape[k - 1], step):
            yield outer + (slice(start, start + step),)
