"""The op table: every elementwise op as one row.

A row (:class:`Ufunc`) holds the numpy kernel that runs on tiles, the
``jax.numpy`` function that is its reference (it fixes the result's shape
and dtype under broadcasting, and computes the op when no operand is on
disk), and one VJP rule per operand: a numpy function of the cotangent
tile and the operand tiles, or ``None`` where the op is not
differentiable in that operand. The public functions, the operators and the
gradients all follow from the row (see :mod:`jask.api.elementwise`), as
``standard_unop`` + ``defjvp`` do in ``jax/_src/lax/lax.py``.

Kernels receive tiles already cast to the op's compute dtype; their results
are cast to the output dtype as they are written.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit

from jask.engine.blockwise import positional

__all__ = ["Ufunc", "TABLE", "PASS"]


def g_only(rule):
    """Mark a VJP rule that reads only the cotangent (its operands are not read)."""
    rule.g_only = True
    return rule


@g_only
def PASS(g, *blocks):
    """The VJP rule "the cotangent is g itself" (a sum, a copy, a broadcast)."""
    return g


@g_only
def NEGATE(g, *blocks):
    """The VJP rule "minus the cotangent"."""
    return -g


@dataclass(frozen=True, eq=False)
class Ufunc:
    """One elementwise op: kernel, reference and VJP rules."""

    name: str
    numpy: Callable
    jnp: Callable
    vjps: tuple | None
    public: bool = True
    doc: str = field(default="", repr=False)
    dtype: np.dtype | None = None  # a fixed result dtype (a cast)
    #: the doc example of a public row: (arguments, expected ``.to_numpy()``),
    #: with ``x = jask.from_numpy(np.array([0.0, 1.0, 2.0], np.float32))``
    example: tuple[str, str] | None = field(default=None, repr=False)

    @property
    def nin(self) -> int:
        return len(self.vjps) if self.vjps is not None else 1


TABLE: dict[str, Ufunc] = {}


def _row(name, numpy, jnp_fn, *vjps, public=True, doc="", example=None):
    ufunc = Ufunc(name, numpy, jnp_fn, tuple(vjps), public, doc, example=example)
    TABLE[name] = ufunc
    return ufunc


def _balanced(x, y):
    """d max(x, y)/dx as jax.numpy computes it: ties share the cotangent."""
    return np.where(x == y, 0.5, (x > y).astype(x.dtype)).astype(x.dtype)


def _pow_base(g, a, b):
    # jax: the derivative in the base is 0 where the exponent is 0
    return g * np.where(b == 0, 0, b * np.power(a, b - 1))


def _pow_exponent(g, a, b):
    # jax: log(0) is replaced by 0 (the derivative in the exponent at a == 0)
    return g * np.log(np.where(a == 0, 1, a)) * np.power(a, b)


def _clip_base(g, a, lo, hi):
    low = np.maximum(a, lo)
    return g * _balanced(hi, low) * _balanced(a, lo)


def _clip_lo(g, a, lo, hi):
    low = np.maximum(a, lo)
    return g * _balanced(hi, low) * _balanced(lo, a)


def _clip_ref(a, lo, hi):
    return jnp.minimum(jnp.maximum(a, lo), hi)


# --- arithmetic ---------------------------------------------------------------
# Each public row carries its doc example: (arguments, expected ``.to_numpy()``)
# with ``x = jask.from_numpy(np.array([0.0, 1.0, 2.0], np.float32))``.
ADD = _row("add", np.add, jnp.add, PASS, PASS, doc="a + b",
           example=("x, 1.0", "array([1., 2., 3.], dtype=float32)"))
SUB = _row("subtract", np.subtract, jnp.subtract, PASS, NEGATE, doc="a - b",
           example=("x, 1.0", "array([-1.,  0.,  1.], dtype=float32)"))
MUL = _row("multiply", np.multiply, jnp.multiply,
           lambda g, a, b: g * b, lambda g, a, b: g * a, doc="a * b",
           example=("x, x", "array([0., 1., 4.], dtype=float32)"))
DIV = _row("divide", np.true_divide, jnp.true_divide,
           lambda g, a, b: g / b, lambda g, a, b: -g * a / (b * b), doc="a / b",
           example=("x, 2.0", "array([0. , 0.5, 1. ], dtype=float32)"))
POW = _row("power", np.power, jnp.power, _pow_base, _pow_exponent, doc="a ** b",
           example=("x, 3", "array([0., 1., 8.], dtype=float32)"))
_row("negative", np.negative, jnp.negative, NEGATE, doc="-a",
     example=("x", "array([-0., -1., -2.], dtype=float32)"))
_row("square", np.square, jnp.square, lambda g, a: 2 * a * g, doc="a ** 2",
     example=("x", "array([0., 1., 4.], dtype=float32)"))
_row("maximum", np.maximum, jnp.maximum,
     lambda g, a, b: g * _balanced(a, b), lambda g, a, b: g * _balanced(b, a),
     doc="the larger of a and b (ties share the gradient, as in jax.numpy)",
     example=("x, 1.0", "array([1., 1., 2.], dtype=float32)"))
_row("minimum", np.minimum, jnp.minimum,
     lambda g, a, b: g * _balanced(-a, -b), lambda g, a, b: g * _balanced(-b, -a),
     doc="the smaller of a and b (ties share the gradient, as in jax.numpy)",
     example=("x, 1.0", "array([0., 1., 1.], dtype=float32)"))
_row("clip", np.clip, _clip_ref, _clip_base, _clip_lo,
     lambda g, a, lo, hi: g * _balanced(-hi, -np.maximum(a, lo)),
     doc="a limited to [lo, hi], as minimum(maximum(a, lo), hi)",
     example=("x, 0.5, 1.5", "array([0.5, 1. , 1.5], dtype=float32)"))
_row("abs", np.abs, jnp.abs, lambda g, a: g * np.sign(a), doc="absolute value",
     example=("-x", "array([0., 1., 2.], dtype=float32)"))

# --- transcendental -------------------------------------------------------------
_row("exp", np.exp, jnp.exp, lambda g, a: g * np.exp(a), doc="e ** a",
     example=("x", "array([1.       , 2.718282 , 7.3890557], dtype=float32)"))
_row("log", np.log, jnp.log, lambda g, a: g / a, doc="the natural logarithm",
     example=("x + 1", "array([0.       , 0.6931472, 1.0986123], dtype=float32)"))
_row("log1p", np.log1p, jnp.log1p, lambda g, a: g / (1 + a), doc="log(1 + a), accurate near 0",
     example=("x", "array([0.       , 0.6931472, 1.0986123], dtype=float32)"))
_row("sqrt", np.sqrt, jnp.sqrt, lambda g, a: g * 0.5 / np.sqrt(a), doc="the square root",
     example=("x", "array([0.       , 1.       , 1.4142135], dtype=float32)"))
_row("tanh", np.tanh, jnp.tanh, lambda g, a: g * (1 - np.square(np.tanh(a))),
     doc="the hyperbolic tangent",
     example=("x", "array([0.       , 0.7615942, 0.9640276], dtype=float32)"))
_row("arctan", np.arctan, jnp.arctan, lambda g, a: g / (1 + np.square(a)),
     doc="the inverse tangent",
     example=("x", "array([0.       , 0.7853982, 1.1071488], dtype=float32)"))

# --- selection and comparison ------------------------------------------------------
_row("where", np.where, jnp.where, None,
     lambda g, c, a, b: np.where(c, g, 0), lambda g, c, a, b: np.where(c, 0, g),
     doc="a where the condition holds, else b",
     example=("x > 0.5, x, -1.0", "array([-1.,  1.,  2.], dtype=float32)"))
for _name, _np, _jnp, _doc, _out in [
        ("less", np.less, jnp.less, "a < b", "array([ True, False, False])"),
        ("less_equal", np.less_equal, jnp.less_equal, "a <= b", "array([ True,  True, False])"),
        ("greater", np.greater, jnp.greater, "a > b", "array([False, False,  True])"),
        ("greater_equal", np.greater_equal, jnp.greater_equal, "a >= b",
         "array([False,  True,  True])"),
        ("equal", np.equal, jnp.equal, "a == b", "array([False,  True, False])"),
        ("not_equal", np.not_equal, jnp.not_equal, "a != b", "array([ True, False,  True])")]:
    _row(_name, _np, _jnp, None, None, doc=_doc + ", as a bool array", example=("x, 1.0", _out))

# --- activations (jask.nn) ---------------------------------------------------------
_row("sigmoid", expit, jax.nn.sigmoid, lambda g, a: g * expit(a) * (1 - expit(a)),
     doc="1 / (1 + exp(-a)), computed stably",
     example=("x", "array([0.5      , 0.7310586, 0.880797 ], dtype=float32)"))
_row("relu", lambda a: np.maximum(a, 0), jax.nn.relu, lambda g, a: g * (a > 0),
     doc="max(a, 0); its gradient at 0 is 0, as in jax.nn.relu",
     example=("x - 1", "array([0., 0., 1.], dtype=float32)"))
_row("softplus", lambda a: np.logaddexp(a, 0), jax.nn.softplus, lambda g, a: g * expit(a),
     doc="log(1 + exp(a)), computed stably",
     example=("x", "array([0.6931472, 1.3132617, 2.126928 ], dtype=float32)"))

# --- internal rows: the pieces of reductions and their gradients --------------------
IDENTITY = _row("copy", lambda a: a, lambda a: a, PASS, public=False)
TIES = _row("ties", lambda x, m: x == m, lambda x, m: x == m, None, None, public=False)
CHOSEN = _row("chosen", lambda g, x, m, n: np.where(x == m, g / n, 0),
              lambda g, x, m, n: jnp.where(x == m, g / n, 0), None, None, None, None,
              public=False)
# exp(x - m) and log(s) + m of logsumexp: m (the max) only keeps exp from
# overflowing; the result does not depend on it, so no gradient flows to it.
EXP_SUB = _row("exp_sub", lambda x, m: np.exp(x - m),
               lambda x, m: jnp.exp(x - jax.lax.stop_gradient(m)),
               lambda g, x, m: g * np.exp(x - m), None, public=False)
LOG_ADD = _row("log_add", lambda s, m: np.log(s) + m,
               lambda s, m: jnp.log(s) + jax.lax.stop_gradient(m),
               lambda g, s, m: g / s, None, public=False)
# (x - mu)^2 * scale of var: mu is x's mean, where d var / d mu = 0.
SQDIFF = _row("squared_deviation", lambda x, mu, s: np.square(x - mu) * s,
              lambda x, mu, s: jnp.square(x - jax.lax.stop_gradient(mu)) * s,
              lambda g, x, mu, s: 2 * s * g * (x - mu), None, None, public=False)


class FlatIndex:
    """The kernel of ``argmax`` and ``argmin`` over ``axes``: a tile, and the
    flat index (C order over ``axes`` of the full shape, as jax.numpy counts
    with ``axis=None``) of each of its elements, given as broadcastable int64
    pieces that add up to it, one per axis (no index tile is made). It takes
    its tile's position (:func:`jask.engine.blockwise.positional`); the
    ``"argmax"``/``"argmin"`` reducers pick from the pieces.

    Example:
      >>> x, pieces = FlatIndex((0, 1))(np.zeros((2, 2)), region=(slice(2, 4), slice(1, 3)),
      ...                                shape=(4, 5))
      >>> sum(pieces)
      array([[11, 12],
             [16, 17]])
    """

    def __init__(self, axes: tuple):
        self.axes = tuple(axes)

    def __call__(self, x, *, region, shape):
        pieces, stride = [], 1
        for d in reversed(self.axes):
            dims = [1] * len(shape)
            dims[d] = -1
            where = np.arange(region[d].start, region[d].stop, dtype=np.int64)
            pieces.append((where * stride).reshape(dims))
            stride *= shape[d]
        return x, tuple(pieces)

    def __eq__(self, other):
        return isinstance(other, FlatIndex) and other.axes == self.axes

    def __hash__(self):
        return hash((FlatIndex, self.axes))


@lru_cache(maxsize=None)
def flat_index(axes: tuple) -> Ufunc:
    """The row reduced by ``argmax``/``argmin`` over ``axes`` (see
    :class:`FlatIndex`). Not differentiable: an index has no gradient, and
    jax.grad through ``jnp.argmax`` gives zeros, as jask does (no rule)."""
    return Ufunc("flat_index", positional(FlatIndex(axes)), lambda a: a, (None,), public=False)


@lru_cache(maxsize=None)
def astype(dtype) -> Ufunc:
    """The row of a cast to ``dtype`` (its gradient casts back)."""
    dtype = np.dtype(dtype)
    return Ufunc(f"astype_{dtype.name}", IDENTITY.numpy, lambda a: jnp.asarray(a).astype(dtype),
                 (PASS,), public=False, dtype=dtype)



# --- internal rows of all, any, count_nonzero and prod's gradient --------------------
NONZERO = _row("nonzero", lambda a: a != 0, lambda a: a != 0, None, public=False)
# prod's VJP (zeros included, as jax.numpy): the product of the nonzero
# elements p, the count of zeros z, then each element's product of the others.
NONZERO_OR_ONE = _row("nonzero_or_one", lambda a: np.where(a == 0, np.ones_like(a), a),
                      lambda a: jnp.where(a == 0, 1, a), None, public=False)
IS_ZERO = _row("is_zero", lambda a: a == 0, lambda a: a == 0, None, public=False)


def _others_product(g, x, p, z):
    """g times the product of the elements other than x (p: the product of
    the nonzero elements, z: how many are zero)."""
    safe = np.where(x == 0, np.ones_like(x), x)
    return g * np.where(x == 0, np.where(z == 1, p, 0), np.where(z == 0, p / safe, 0))


PROD_VJP = _row("prod_vjp", _others_product, lambda g, x, p, z: g, None, None, None, None,
                public=False)

# cumprod's VJP (zeros included): ``c`` is the running count of zeros along the axis.
FIRST_ZERO_AS_ONE = _row("first_zero_as_one",
                         lambda x, c: np.where((x == 0) & (c == 1), np.ones_like(x), x),
                         lambda x, c: x, None, None, public=False)
BEFORE_ZERO = _row("before_zero", lambda g, y, c: g * y * (c == 0), lambda g, y, c: g,
                   None, None, None, public=False)
CUMPROD_VJP = _row("cumprod_vjp",
                   lambda b, s, x, c: np.where(c == 0, b / np.where(x == 0, np.ones_like(x), x),
                                               np.where((x == 0) & (c == 1), s, 0)),
                   lambda b, s, x, c: b, None, None, None, None, public=False)
