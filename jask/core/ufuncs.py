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

from jask.core import kernels
from jask.core.kernels import keep_integers
from jask.core.special_values import follow_standard
from jask.engine.blockwise import positional, unchanged

__all__ = ["Ufunc", "TABLE", "PASS", "REAL_ONLY"]


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


def unknown(what: str):
    """A derivative rule jask does not have (the operand's derivative is not
    zero, but no rule computes it): forward mode through it is refused at
    trace time, naming ``what``, never answered with zeros."""
    def rule(*blocks):
        raise NotImplementedError(what)
    rule.unknown = what  # type: ignore[attr-defined]
    return rule


def is_unknown(rule) -> bool:
    return getattr(rule, "unknown", None) is not None


@dataclass(frozen=True, eq=False)
class Ufunc:
    """One elementwise op: kernel, reference, VJP rules and second derivatives.

    An elementwise op's Jacobian is diagonal, so its JVP in operand ``j`` is
    its VJP rule applied to the tangent (``vjps[j](t, *blocks)``: every rule
    is the cotangent times the partial derivative), as ``jax.linear_transpose``
    of a diagonal map is the map itself. ``second`` holds what the JVP of a
    VJP rule needs (forward over reverse: Hessian-vector products,
    ``jax.hessian``): ``second[(j, k)](*blocks)`` is the derivative of rule
    ``j``'s factor ``vjps[j](g, *blocks) / g`` in operand ``k`` (zero where
    absent); ``None`` for a row with no second derivatives (refused).
    """

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
    #: eagerly, run at the call, never deferred: the kernel calls a user's
    #: function, whose closure the caller may change after the call (jask.map)
    at_call: bool = False
    #: (j, k) -> the derivative of operand j's VJP factor in operand k (see above)
    second: dict | None = field(default=None, repr=False)

    @property
    def nin(self) -> int:
        return len(self.vjps) if self.vjps is not None else 1

    def __reduce_ex__(self, protocol):
        # A row of the table is pickled by name: its rules are lambdas, which
        # cloudpickle copies by value, scanning every loaded module for each
        # (10-20 ms a band task of a logistic step, on every task a cluster
        # is sent); a user's function (jask.map) is pickled as it is.
        if TABLE.get(self.name) is self:
            return _table_row, (self.name,)
        return object.__reduce_ex__(self, protocol)


TABLE: dict[str, Ufunc] = {}


def _table_row(name: str) -> Ufunc:
    """The row ``name`` of :data:`TABLE` (how a pickled row is found again)."""
    return TABLE[name]


#: The rows whose numpy float32 (complex64) loops are less accurate than
#: jax.numpy's: their kernels, VJP rules and second derivatives compute
#: 32-bit tiles in float64 and round once (:func:`jask.core.kernels.widened`;
#: measured in benchmarks/RESULTS.md, checked by tests/test_float32_accuracy.py).
#: The other float rows are correctly rounded in float32 already (+, *, /,
#: sqrt, hypot) or exact (abs, floor, maximum, ...).
#: The row's 32-bit dtypes so computed: complex64 only for a division (float32's
#: is correctly rounded; numpy's complex64 one measured 1.4 ulp against 1.1).
WIDENED: dict[str, tuple] = {name: (np.float32, np.complex64) for name in (
    "exp", "expm1", "log", "log1p", "log2", "log10", "power", "tanh", "arctan", "sin", "cos",
    "tan", "arcsin", "arccos", "sinh", "cosh", "arcsinh", "arccosh", "arctanh", "arctan2",
    "logaddexp", "sigmoid", "softplus", "exp_sub", "softmax_tangent")}
WIDENED["divide"] = (np.complex64,)


def _widened(rule, dtypes):
    """A rule of a :data:`WIDENED` row, computed in float64 (not PASS and the
    like, which do no arithmetic, nor a marker of a rule jask lacks)."""
    if not callable(rule) or getattr(rule, "g_only", False) or is_unknown(rule):
        return rule
    return kernels.widened(rule, dtypes)


def _row(name, numpy, jnp_fn, *vjps, public=True, doc="", example=None, second=None):
    # complex arguments with NaN or infinite parts: the standard's values, on tiles and in memory
    numpy, jnp_fn = follow_standard(name, numpy), follow_standard(name, jnp_fn)
    if name in WIDENED:
        wide = WIDENED[name]
        numpy, vjps = _widened(numpy, wide), tuple(_widened(rule, wide) for rule in vjps)
        second = second if not callable(second) else _widened(second, wide)
        second = second if not isinstance(second, dict) else {
            key: _widened(rule, wide) for key, rule in second.items()}
    ufunc = Ufunc(name, numpy, jnp_fn, tuple(vjps), public, doc, example=example,
                  second=_second(second, len(vjps)))
    TABLE[name] = ufunc
    return ufunc


def _second(second, nin: int) -> dict | None:
    """A row's second derivatives: a dict as given; one function, the unary
    row's f''; ``LINEAR`` (all zero: the rules do not depend on the operands,
    or only piecewise, as max, floor or a comparison)."""
    if second is None:
        return None
    if callable(second):
        return {(0, 0): second}
    return dict(second)


#: ``second=`` of a row whose VJP factors are constant wherever they are differentiable
LINEAR: dict = {}


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


def _sign_or_one(a):
    # d|a|/da as jax.numpy computes it: 1 at 0 (and at -0.0), where np.sign gives 0
    return np.where(a >= 0, 1, -1).astype(a.dtype)


def _one(*blocks):
    return 1


def _pow_base_base(a, b):
    return np.where(b == 0, 0, b * (b - 1) * np.power(a, b - 2))


def _log_or_zero(a):
    return np.log(np.where(a == 0, 1, a))  # jax's log(_replace_zero(a))


def _pow_base_exponent(a, b):
    return np.where(b == 0, 0, np.power(a, b - 1) * (1 + b * _log_or_zero(a)))


def _pow_exponent_base(a, b):
    return np.where(a == 0, 0, np.power(a, b - 1)) + _log_or_zero(a) * b * np.power(a, b - 1)


def _pow_exponent_exponent(a, b):
    return np.square(_log_or_zero(a)) * np.power(a, b)


def _r4(a, b):
    return np.square(np.square(a) + np.square(b))


def _arctan2_mixed(a, b):
    return (np.square(a) - np.square(b)) / _r4(a, b)


def _softmax_pair(a, b):
    # exp(a - out) * exp(b - out): the derivative of either logaddexp factor
    return _logaddexp_vjp(1, a, b) * _logaddexp_vjp(1, b, a)


def _clip_ref(a, lo, hi):
    return jnp.minimum(jnp.maximum(a, lo), hi)


# --- arithmetic ---------------------------------------------------------------
# Each public row carries its doc example: (arguments, expected ``.to_numpy()``)
# with ``x = jask.from_numpy(np.array([0.0, 1.0, 2.0], np.float32))``.
ADD = _row("add", np.add, jnp.add, PASS, PASS, doc="a + b", second=LINEAR,
           example=("x, 1.0", "array([1., 2., 3.], dtype=float32)"))
SUB = _row("subtract", np.subtract, jnp.subtract, PASS, NEGATE, doc="a - b", second=LINEAR,
           example=("x, 1.0", "array([-1.,  0.,  1.], dtype=float32)"))
MUL = _row("multiply", np.multiply, jnp.multiply,
           lambda g, a, b: g * b, lambda g, a, b: g * a, doc="a * b",
           second={(0, 1): _one, (1, 0): _one},
           example=("x, x", "array([0., 1., 4.], dtype=float32)"))
DIV = _row("divide", np.true_divide, jnp.true_divide,
           lambda g, a, b: g / b, lambda g, a, b: -g * a / (b * b), doc="a / b",
           second={(0, 1): lambda a, b: -1 / (b * b), (1, 0): lambda a, b: -1 / (b * b),
                   (1, 1): lambda a, b: 2 * a / (b * b * b)},
           example=("x, 2.0", "array([0. , 0.5, 1. ], dtype=float32)"))
POW = _row("power", kernels.power, jnp.power, _pow_base, _pow_exponent, doc="a ** b",
           second={(0, 0): _pow_base_base, (0, 1): _pow_base_exponent,
                   (1, 0): _pow_exponent_base, (1, 1): _pow_exponent_exponent},
           example=("x, 3", "array([0., 1., 8.], dtype=float32)"))
_row("negative", np.negative, jnp.negative, NEGATE, doc="-a", second=LINEAR,
     example=("x", "array([-0., -1., -2.], dtype=float32)"))
_row("square", np.square, jnp.square, lambda g, a: 2 * a * g, doc="a ** 2",
     second=lambda a: 2,
     example=("x", "array([0., 1., 4.], dtype=float32)"))
_row("maximum", np.maximum, jnp.maximum,
     lambda g, a, b: g * _balanced(a, b), lambda g, a, b: g * _balanced(b, a),
     doc="the larger of a and b (ties share the gradient, as in jax.numpy)", second=LINEAR,
     example=("x, 1.0", "array([1., 1., 2.], dtype=float32)"))
_row("minimum", np.minimum, jnp.minimum,
     lambda g, a, b: g * _balanced(-a, -b), lambda g, a, b: g * _balanced(-b, -a),
     doc="the smaller of a and b (ties share the gradient, as in jax.numpy)", second=LINEAR,
     example=("x, 1.0", "array([0., 1., 1.], dtype=float32)"))
_row("clip", np.clip, _clip_ref, _clip_base, _clip_lo,
     lambda g, a, lo, hi: g * _balanced(-hi, -np.maximum(a, lo)),
     doc="a limited to [lo, hi], as minimum(maximum(a, lo), hi)", second=LINEAR,
     example=("x, 0.5, 1.5", "array([0.5, 1. , 1.5], dtype=float32)"))
_row("abs", np.abs, jnp.abs, lambda g, a: g * _sign_or_one(a), doc="absolute value",
     second=LINEAR,
     example=("-x", "array([0., 1., 2.], dtype=float32)"))

# --- transcendental -------------------------------------------------------------
_row("exp", np.exp, jnp.exp, lambda g, a: g * np.exp(a), doc="e ** a", second=np.exp,
     example=("x", "array([1.       , 2.7182817, 7.389056 ], dtype=float32)"))
_row("log", np.log, jnp.log, lambda g, a: g / a, doc="the natural logarithm",
     second=lambda a: -1 / np.square(a),
     example=("x + 1", "array([0.       , 0.6931472, 1.0986123], dtype=float32)"))
_row("log1p", np.log1p, jnp.log1p, lambda g, a: g / (1 + a), doc="log(1 + a), accurate near 0",
     second=lambda a: -1 / np.square(1 + a),
     example=("x", "array([0.       , 0.6931472, 1.0986123], dtype=float32)"))
_row("sqrt", np.sqrt, jnp.sqrt, lambda g, a: g * 0.5 / np.sqrt(a), doc="the square root",
     second=lambda a: -0.25 / (a * np.sqrt(a)),
     example=("x", "array([0.       , 1.       , 1.4142135], dtype=float32)"))
_row("tanh", np.tanh, jnp.tanh, lambda g, a: g * (1 - np.square(np.tanh(a))),
     doc="the hyperbolic tangent", second=lambda a: -2 * np.tanh(a) * (1 - np.square(np.tanh(a))),
     example=("x", "array([0.       , 0.7615942, 0.9640276], dtype=float32)"))
_row("arctan", np.arctan, jnp.arctan, lambda g, a: g / (1 + np.square(a)),
     doc="the inverse tangent", second=lambda a: -2 * a / np.square(1 + np.square(a)),
     example=("x", "array([0.       , 0.7853982, 1.1071488], dtype=float32)"))

# --- selection and comparison ------------------------------------------------------
_row("where", np.where, jnp.where, None,
     lambda g, c, a, b: np.where(c, g, 0), lambda g, c, a, b: np.where(c, 0, g),
     doc="a where the condition holds, else b", second=LINEAR,
     example=("x > 0.5, x, -1.0", "array([-1.,  1.,  2.], dtype=float32)"))
for _name, _np, _jnp, _doc, _out in [
        ("less", np.less, jnp.less, "a < b", "array([ True, False, False])"),
        ("less_equal", np.less_equal, jnp.less_equal, "a <= b", "array([ True,  True, False])"),
        ("greater", np.greater, jnp.greater, "a > b", "array([False, False,  True])"),
        ("greater_equal", np.greater_equal, jnp.greater_equal, "a >= b",
         "array([False,  True,  True])"),
        ("equal", np.equal, jnp.equal, "a == b", "array([False,  True, False])"),
        ("not_equal", np.not_equal, jnp.not_equal, "a != b", "array([ True, False,  True])")]:
    _row(_name, _np, _jnp, None, None, doc=_doc + ", as a bool array", example=("x, 1.0", _out),
         second=LINEAR)

# --- the rest of the Array API's elementwise functions (jax.numpy's names) ----------
# Ops whose derivative is 0 wherever it exists (floor, sign, imag, ...) have
# no rule (None): jax.grad gives zeros there, and so does jask, without a pass.
_zero = None


def _replace_inf(a):
    return np.where(a == np.inf, 0, a)  # +inf only, as jax's _replace_inf


def _logaddexp_vjp(g, a, b):
    # jax's custom JVP: exp(a - out), +inf replaced by 0 first
    return g * np.exp(_replace_inf(a) - _replace_inf(np.logaddexp(a, b)))


def _remainder_divisor(g, a, b):
    # jax differentiates its remainder formula: -trunc(a / b), plus 1 where b was added
    mod = np.fmod(a, b)
    plus = (mod != 0) & ((mod < 0) != (b < 0))
    return g * (plus - np.trunc(a / b))


def _minus_three_halves(x):
    return 1 / (x * np.sqrt(x))  # x ** -1.5


#: f'' of the unary rows below whose derivative is not piecewise constant
_UNARY_SECOND = {
    "sin": lambda a: -np.sin(a), "cos": lambda a: -np.cos(a),
    "tan": lambda a: 2 * np.tan(a) * (1 + np.square(np.tan(a))),
    "arcsin": lambda a: a * _minus_three_halves(1 - np.square(a)),
    "arccos": lambda a: -a * _minus_three_halves(1 - np.square(a)),
    "sinh": np.sinh, "cosh": np.cosh,
    "arcsinh": lambda a: -a * _minus_three_halves(np.square(a) + 1),
    "arccosh": lambda a: -a * _minus_three_halves((a - 1) * (a + 1)),
    "arctanh": lambda a: 2 * a / np.square(1 - np.square(a)),
    "expm1": np.exp,
    "log2": lambda a: -1 / (np.square(a) * np.log(2)),
    "log10": lambda a: -1 / (np.square(a) * np.log(10)),
    "reciprocal": lambda a: 2 / (a * a * a),
}

for _name, _kernel, _rule, _doc, _args, _out in [
        ("sin", np.sin, lambda g, a: g * np.cos(a), "the sine", "x",
         "array([0.        , 0.84147096, 0.9092974 ], dtype=float32)"),
        ("cos", np.cos, lambda g, a: -g * np.sin(a), "the cosine", "x",
         "array([ 1.        ,  0.5403023 , -0.41614684], dtype=float32)"),
        ("tan", np.tan, lambda g, a: g * (1 + np.square(np.tan(a))), "the tangent", "x",
         "array([ 0.       ,  1.5574077, -2.1850...], dtype=float32)"),
        ("arcsin", np.arcsin, lambda g, a: g / np.sqrt(1 - np.square(a)), "the inverse sine",
         "x / 2", "array([0.       , 0.5235988, 1.5707964], dtype=float32)"),
        ("arccos", np.arccos, lambda g, a: -g / np.sqrt(1 - np.square(a)),
         "the inverse cosine", "x / 2",
         "array([1.5707964, 1.0471976, 0.       ], dtype=float32)"),
        ("sinh", np.sinh, lambda g, a: g * np.cosh(a), "the hyperbolic sine", "x",
         "array([0.       , 1.1752012, 3.6268604], dtype=float32)"),
        ("cosh", np.cosh, lambda g, a: g * np.sinh(a), "the hyperbolic cosine", "x",
         "array([1.       , 1.543080..., 3.762195...], dtype=float32)"),
        ("arcsinh", np.arcsinh, lambda g, a: g / np.sqrt(np.square(a) + 1),
         "the inverse hyperbolic sine", "x",
         "array([0.       , 0.8813736, 1.4436355], dtype=float32)"),
        ("arccosh", np.arccosh, lambda g, a: g / (np.sqrt(a - 1) * np.sqrt(a + 1)),
         "the inverse hyperbolic cosine", "x + 1",
         "array([0.       , 1.316958 , 1.7627472], dtype=float32)"),
        ("arctanh", np.arctanh, lambda g, a: g / (1 - np.square(a)),
         "the inverse hyperbolic tangent", "x / 4",
         "array([0.        , 0.25541282, 0.54930615], dtype=float32)"),
        ("expm1", kernels.expm1, lambda g, a: g * np.exp(a), "exp(a) - 1, accurate near 0", "x",
         "array([0.       , 1.71828..., 6.389056...], dtype=float32)"),
        ("log2", np.log2, lambda g, a: g / (a * np.log(2)), "the base-2 logarithm", "x + 1",
         "array([0.       , 1.       , 1.5849625], dtype=float32)"),
        ("log10", np.log10, lambda g, a: g / (a * np.log(10)), "the base-10 logarithm",
         "x + 1", "array([0. ..., 0.30103..., 0.477121...], dtype=float32)"),
        ("reciprocal", lambda a: 1.0 / a, lambda g, a: -g / np.square(a), "1 / a", "x + 1",
         "array([1.        , 0.5       , 0.33333334], dtype=float32)"),
        ("positive", np.positive, PASS, "+a", "x", "array([0., 1., 2.], dtype=float32)"),
        ("conj", np.conjugate, PASS, "the complex conjugate (a real a itself)", "x",
         "array([0., 1., 2.], dtype=float32)"),
        ("real", np.real, PASS, "the real part (a real a itself), of a real dtype", "x",
         "array([0., 1., 2.], dtype=float32)"),
        ("imag", np.imag, _zero, "the imaginary part (zeros for a real a), of a real dtype",
         "x", "array([0., 0., 0.], dtype=float32)"),
        ("floor", keep_integers(np.floor), _zero, "the largest integer <= a (ints as they are)",
         "x - 0.5", "array([-1.,  0.,  1.], dtype=float32)"),
        ("ceil", keep_integers(np.ceil), _zero, "the smallest integer >= a (ints as they are)",
         "x - 0.5", "array([-0.,  1.,  2.], dtype=float32)"),
        ("trunc", keep_integers(np.trunc), _zero, "a rounded toward zero (ints as they are)",
         "x - 0.5", "array([-0.,  0.,  1.], dtype=float32)"),
        ("round", keep_integers(np.round), _zero, "a rounded to the nearest integer, "
         "halves to even (ints as they are)", "x - 0.5", "array([-0.,  0.,  2.], dtype=float32)"),
        ("sign", kernels.sign, _zero, "-1, 0 or 1 by the sign of a (nan stays nan)", "x - 1",
         "array([-1.,  0.,  1.], dtype=float32)")]:
    # a rule that is g itself or none has no second derivative; every other is in the dict
    _row(_name, _kernel, getattr(jnp, _name), _rule, doc=_doc, example=(_args, _out),
         second=_UNARY_SECOND[_name] if _rule not in (PASS, _zero) else LINEAR)

for _name, _doc, _args, _out in [
        ("isfinite", "a is neither infinite nor nan", "jask.log(x)",
         "array([False,  True,  True])"),
        ("isinf", "a is +inf or -inf", "jask.log(x)", "array([ True, False, False])"),
        ("isnan", "a is nan", "jask.log(x - 1)", "array([ True, False, False])"),
        ("signbit", "a's sign bit is set (-0.0 and negative numbers)", "x - 1",
         "array([ True, False, False])"),
        ("logical_not", "not a (a nonzero number is true)", "x",
         "array([ True, False, False])")]:
    _row(_name, getattr(np, _name), getattr(jnp, _name), None, doc=_doc + ", as a bool array",
         example=(_args, _out), second=LINEAR)
_row("invert", np.invert, jnp.invert, None, second=LINEAR,
     doc="``~a``: the bitwise not of an integer, the logical not of a bool",
     example=("x.astype(np.int32)", "array([-1, -2, -3], dtype=int32)"))

_row("arctan2", np.arctan2, jnp.arctan2,
     lambda g, a, b: g * b / (np.square(a) + np.square(b)),
     lambda g, a, b: -g * a / (np.square(a) + np.square(b)),
     doc="the angle of the point (b, a): arctan(a / b) in the right quadrant",
     second={(0, 0): lambda a, b: -2 * a * b / _r4(a, b), (0, 1): _arctan2_mixed,
             (1, 0): _arctan2_mixed, (1, 1): lambda a, b: 2 * a * b / _r4(a, b)},
     example=("x, 1.0", "array([0.       , 0.785398..., 1.1071488], dtype=float32)"))
_row("hypot", np.hypot, jnp.hypot,
     lambda g, a, b: g * a / np.hypot(a, b), lambda g, a, b: g * b / np.hypot(a, b),
     doc="sqrt(a ** 2 + b ** 2), without overflow",
     second={(0, 0): lambda a, b: np.square(b) / np.hypot(a, b) ** 3,
             (0, 1): lambda a, b: -a * b / np.hypot(a, b) ** 3,
             (1, 0): lambda a, b: -a * b / np.hypot(a, b) ** 3,
             (1, 1): lambda a, b: np.square(a) / np.hypot(a, b) ** 3},
     example=("x, 1.0", "array([1.       , 1.4142135, 2.236068 ], dtype=float32)"))
_row("logaddexp", np.logaddexp, jnp.logaddexp,
     _logaddexp_vjp, lambda g, a, b: _logaddexp_vjp(g, b, a),
     doc="log(exp(a) + exp(b)), computed stably",
     second={(0, 0): _softmax_pair, (0, 1): lambda a, b: -_softmax_pair(a, b),
             (1, 0): lambda a, b: -_softmax_pair(a, b), (1, 1): _softmax_pair},
     example=("x, x", "array([0.6931472, 1.6931472, 2.6931472], dtype=float32)"))
_row("copysign", np.copysign, jnp.copysign,
     lambda g, a, b: g * np.where(np.signbit(b), -1, 1) * _sign_or_one(a), _zero,
     doc="``|a|`` with the sign of b", second=LINEAR,
     example=("1.0, x - 1", "array([-1.,  1.,  1.], dtype=float32)"))
_row("nextafter", np.nextafter, jnp.nextafter, None, None,
     doc="the next representable number after a toward b (jax.grad refuses it; jask's "
         "gradient is zero)", second=LINEAR,
     example=("x, 3.0", "array([1.4012985e-45, 1.0000001e+00, 2.0000002e+00], dtype=float32)"))
_row("remainder", kernels.remainder, jnp.remainder, PASS, _remainder_divisor,
     doc="``a % b``, with the sign of b; an integer a % 0 is 0, as in jax.numpy", second=LINEAR,
     example=("x, -1.5", "array([ 0. , -0.5, -1. ], dtype=float32)"))
_row("floor_divide", kernels.floor_divide, jnp.floor_divide, _zero, _zero,
     doc="``a // b``, rounded down; an integer a // 0 is -1 (or -2 for a > 0, the largest value "
         "unsigned), as in jax.numpy", second=LINEAR,
     example=("x - 1, 2.0", "array([-1.,  0.,  0.], dtype=float32)"))

# integers and bools only (floats are refused as jax.numpy refuses them); no gradients
for _name, _kernel, _doc, _args, _out in [
        ("bitwise_and", np.bitwise_and, "``a & b``", "x.astype(np.int32), 1",
         "array([0, 1, 0], dtype=int32)"),
        ("bitwise_or", np.bitwise_or, "``a | b``", "x.astype(np.int32), 1",
         "array([1, 1, 3], dtype=int32)"),
        ("bitwise_xor", np.bitwise_xor, "``a ^ b``", "x.astype(np.int32), 1",
         "array([1, 0, 3], dtype=int32)"),
        ("left_shift", kernels.left_shift,
         "``a << b``; by a negative amount or the width or more: 0",
         "x.astype(np.int32), 3", "array([ 0,  8, 16], dtype=int32)"),
        ("right_shift", kernels.right_shift, "``a >> b``, arithmetic for signed types; by a "
         "negative amount or the width or more: -1 or 0 by a's sign",
         "x.astype(np.int32) * 4, 1", "array([0, 2, 4], dtype=int32)")]:
    _row(_name, _kernel, getattr(jnp, _name), None, None, doc=_doc, example=(_args, _out),
         second=LINEAR)
for _name, _doc, _out in [("logical_and", "a and b", "array([False, False,  True])"),
                          ("logical_or", "a or b", "array([ True,  True,  True])"),
                          ("logical_xor", "a xor b", "array([ True,  True, False])")]:
    _row(_name, getattr(np, _name), getattr(jnp, _name), None, None,
         doc=_doc + " (a nonzero number is true), as a bool array", example=("x, x - 1", _out),
         second=LINEAR)

# --- activations (jask.nn) ---------------------------------------------------------
_row("sigmoid", expit, jax.nn.sigmoid, lambda g, a: g * expit(a) * (1 - expit(a)),
     doc="1 / (1 + exp(-a)), computed stably",
     second=lambda a: expit(a) * (1 - expit(a)) * (1 - 2 * expit(a)),
     example=("x", "array([0.5      , 0.7310586, 0.8807971], dtype=float32)"))
_row("relu", lambda a: np.maximum(a, 0), jax.nn.relu, lambda g, a: g * (a > 0),
     doc="max(a, 0); its gradient at 0 is 0, as in jax.nn.relu", second=LINEAR,
     example=("x - 1", "array([0., 0., 1.], dtype=float32)"))
_row("softplus", lambda a: np.logaddexp(a, 0), jax.nn.softplus, lambda g, a: g * expit(a),
     doc="log(1 + exp(a)), computed stably",
     second=lambda a: expit(a) * (1 - expit(a)),
     example=("x", "array([0.6931472, 1.3132616, 2.126928 ], dtype=float32)"))

_row("angle", np.angle, jnp.angle, _zero, second=LINEAR,
     doc="the argument of a complex number, in radians (0 or pi for a real a), of a real dtype",
     example=("x - 1", "array([3.1415927, 0.       , 0.       ], dtype=float32)"))

#: The public rows the Array API standard defines for real-valued operands
#: only (it does not order complex numbers, nor round or divide them by
#: floors), and jax.nn's activations, whose kernels are real: a complex
#: operand is refused before anything runs. jax.numpy orders complex numbers
#: lexicographically in some of them; jask follows the standard there.
REAL_ONLY = frozenset({
    "maximum", "minimum", "clip", "less", "less_equal", "greater", "greater_equal",
    "floor", "ceil", "trunc", "signbit", "hypot", "copysign", "nextafter", "remainder",
    "floor_divide", "arctan2", "logaddexp", "sigmoid", "relu", "softplus"})


# --- internal rows: the pieces of reductions and their gradients --------------------
# vecdot's terms for complex vectors: the standard's (and jax.numpy's) vecdot
# conjugates its first argument. (Complex gradients are refused before a rule runs.)
CONJ_MUL = _row("conj_multiply", lambda a, b: np.conjugate(a) * b,
                lambda a, b: jnp.conj(a) * b, lambda g, a, b: g * b, lambda g, a, b: g * a,
                public=False, second={(0, 1): _one, (1, 0): _one})
IDENTITY = _row("copy", unchanged, lambda a: a, PASS, public=False, second=LINEAR)
TIES = _row("ties", lambda x, m: x == m, lambda x, m: x == m, None, None, public=False,
            second=LINEAR)
# The rows of gradients (max's, prod's, ...) carry rules too, for forward mode
# over them (Hessian-vector products): linear in the cotangent g; a count ``n``
# or a condition has no tangent. ``unknown`` marks what jask cannot differentiate.
CHOSEN = _row("chosen", lambda g, x, m, n: np.where(x == m, g / n, 0),
              lambda g, x, m, n: jnp.where(x == m, g / n, 0),
              lambda t, g, x, m, n: np.where(x == m, t / n, 0), None, None, None,
              public=False)
# exp(x - lse) of logsumexp's gradient (the softmax): its VJP in x is g times it;
# lse only says where the result was, so no gradient flows to it.
EXP_SUB = _row("exp_sub", lambda x, m: np.exp(x - m),
               lambda x, m: jnp.exp(x - jax.lax.stop_gradient(m)),
               lambda g, x, m: g * np.exp(x - m), None, public=False,
               # m is the row's logsumexp: the softmax depends on it, so forward mode over
               # this rule (Hessian-vector products) takes m's tangent too
               second={(0, 0): lambda x, m: np.exp(x - m),
                       (0, 1): lambda x, m: -np.exp(x - m)})
# t * exp(x - lse), summed along the reduced axes: logsumexp's tangent (the
# softmax-weighted mean of the tangents); linear in t, its rule in x unknown
SOFTMAX_TANGENT = _row("softmax_tangent", lambda t, x, m: t * np.exp(x - m),
                       lambda t, x, m: t * jnp.exp(x - jax.lax.stop_gradient(m)),
                       lambda g, t, x, m: g * np.exp(x - m),
                       unknown("jask.logsumexp: derivatives of its tangent in x "
                               "(reverse mode over forward: take them forward over reverse)"),
                       None, public=False)
# (x - mu)^2 * scale of var: mu is x's mean, where d var / d mu = 0.
SQDIFF = _row("squared_deviation", lambda x, mu, s: np.square(x - mu) * s,
              lambda x, mu, s: jnp.square(x - jax.lax.stop_gradient(mu)) * s,
              lambda g, x, mu, s: 2 * s * g * (x - mu), None, None, public=False,
              second={(0, 0): lambda x, mu, s: 2 * s, (0, 1): lambda x, mu, s: -2 * s,
                      (0, 2): lambda x, mu, s: 2 * (x - mu)})


# The gradients of nanmean and nanvar (zero at a NaN, as jax.numpy's): ``n`` is
# the count of elements that are not NaN at the result's position, ``mu`` their mean.
def _nan_mean_vjp(g, x, n):
    with np.errstate(all="ignore"):  # an all-NaN position has no element to receive it
        return np.where(x == x, g / n, 0).astype(x.dtype, copy=False)


def _nan_var_vjp(g, x, mu, n, ddof):
    with np.errstate(all="ignore"):
        return np.where(x == x, 2 * g * (x - mu) / (n - ddof), 0).astype(x.dtype, copy=False)


def _nan_var_factor(tg, x, n, ddof):
    with np.errstate(all="ignore"):
        return np.where(x == x, 2 * tg / (n - ddof), 0).astype(x.dtype, copy=False)


IS_NUMBER = _row("is_number", lambda a: (a == a).astype(a.dtype),
                 lambda a: (a == a).astype(a.dtype), None, public=False, second=LINEAR)
NAN_MEAN_VJP = _row("nan_mean_vjp", _nan_mean_vjp, lambda g, x, n: g * x / n,
                    lambda t, g, x, n: _nan_mean_vjp(t, x, n), None, None, public=False)
NAN_VAR_VJP = _row("nan_var_vjp", _nan_var_vjp,
                   lambda g, x, mu, n, ddof: g * (x - mu) / (n - ddof),
                   lambda t, g, x, mu, n, ddof: _nan_var_vjp(t, x, mu, n, ddof),
                   lambda t, g, x, mu, n, ddof: _nan_var_factor(t * g, x, n, ddof),
                   lambda t, g, x, mu, n, ddof: -_nan_var_factor(t * g, x, n, ddof),
                   None, None, public=False)

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
                 (PASS,), public=False, dtype=dtype, second=LINEAR)



# --- internal rows of all, any, count_nonzero and prod's gradient --------------------
NONZERO = _row("nonzero", lambda a: a != 0, lambda a: a != 0, None, public=False,
               second=LINEAR)
# prod's VJP (zeros included, as jax.numpy): the product of the nonzero
# elements p, the count of zeros z, then each element's product of the others.
NONZERO_OR_ONE = _row("nonzero_or_one", lambda a: np.where(a == 0, np.ones_like(a), a),
                      lambda a: jnp.where(a == 0, 1, a), lambda g, a: np.where(a == 0, 0, g),
                      public=False, second=LINEAR)
IS_ZERO = _row("is_zero", lambda a: a == 0, lambda a: a == 0, None, public=False,
               second=LINEAR)


def _others_product(g, x, p, z):
    """g times the product of the elements other than x (p: the product of
    the nonzero elements, z: how many are zero)."""
    safe = np.where(x == 0, np.ones_like(x), x)
    return g * np.where(x == 0, np.where(z == 1, p, 0), np.where(z == 0, p / safe, 0))


_PROD_SECOND = unknown("jask.prod: second derivatives (jax.hessian, jax.jvp or jax.grad of "
                       "its gradient) are not supported: its gradient's rule at a zero "
                       "element has no derivative jask computes")
PROD_VJP = _row("prod_vjp", _others_product, lambda g, x, p, z: g,
                lambda t, g, x, p, z: _others_product(t, x, p, z), _PROD_SECOND, _PROD_SECOND,
                None, public=False)

# cumprod's VJP (zeros included): ``c`` is the running count of zeros along the axis.
# Its pieces have no rules of their own: read at a zero as constants, their
# derivatives would miss the zero's own terms (a wrong value), so reverse mode over
# them (jax.grad of cumprod's gradient) is refused naming cumprod; forward mode
# through cumprod is refused before any of these is reached.
_CUMPROD_SECOND = unknown("jask.cumprod: second derivatives (jax.grad or jax.jacrev of its "
                          "gradient; forward mode through it) are not supported")
FIRST_ZERO_AS_ONE = _row("first_zero_as_one",
                         lambda x, c: np.where((x == 0) & (c == 1), np.ones_like(x), x),
                         lambda x, c: x, _CUMPROD_SECOND, None, public=False)
BEFORE_ZERO = _row("before_zero", lambda g, y, c: g * y * (c == 0), lambda g, y, c: g,
                   _CUMPROD_SECOND, _CUMPROD_SECOND, None, public=False)
CUMPROD_VJP = _row("cumprod_vjp",
                   lambda b, s, x, c: np.where(c == 0, b / np.where(x == 0, np.ones_like(x), x),
                                               np.where((x == 0) & (c == 1), s, 0)),
                   lambda b, s, x, c: b, _CUMPROD_SECOND, _CUMPROD_SECOND, _CUMPROD_SECOND,
                   None, public=False)
