"""The Array API standard's values of complex functions at NaN and infinite parts.

The standard (C99's Annex G) fixes what ``exp``, ``log``, ``sqrt``, the
hyperbolic functions and their inverses give when a part of ``a + bj`` is
infinite or NaN, and, for a few, at zeros: ``exp(-inf + inf j)`` is ``0 + 0j``,
``log(inf + nan j)`` is ``inf + nan j``, ``acos(0 + nan j)`` is
``pi/2 + nan j``. jax.numpy computes most of those as ``nan + nan j``, and
numpy's ``expm1`` too. Each table row's kernel and reference are wrapped
(:func:`follow_standard`) so that both, on tiles and in memory, give the
standard's values: the rules below, as the standard lists them (for ``b``
of either sign: ``f(conj(z)) = conj(f(z))`` for every function here), set
the parts they name and leave every other element as computed.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["RULES", "follow_standard"]

_PI = math.pi
_INF, _NAN = math.inf, math.nan

#: Per function: (condition on a, condition on b, real part, imaginary part)
#: of the result, for ``a + bj`` (conditions: see :func:`_holds`). Rules
#: whose value depends on ``b`` (``+infinity * cis(b)``) are left to the
#: function, which computes them.
RULES: dict[str, tuple] = {
    "arccos": (("0", "nan", _PI / 2, _NAN), ("finite", "+inf", _PI / 2, -_INF),
               ("nonzero finite", "nan", _NAN, _NAN),
               ("-inf", "positive finite", _PI, -_INF), ("+inf", "positive finite", 0.0, -_INF),
               ("-inf", "+inf", 3 * _PI / 4, -_INF), ("+inf", "+inf", _PI / 4, -_INF),
               ("inf", "nan", _NAN, _INF), ("nan", "finite", _NAN, _NAN),
               ("nan", "+inf", _NAN, -_INF), ("nan", "nan", _NAN, _NAN)),
    "arccosh": (("finite", "+inf", _INF, _PI / 2), ("nonzero finite", "nan", _NAN, _NAN),
                ("+0", "nan", _NAN, _PI / 2), ("-inf", "positive finite", _INF, _PI),
                ("+inf", "positive finite", _INF, 0.0), ("-inf", "+inf", _INF, 3 * _PI / 4),
                ("+inf", "+inf", _INF, _PI / 4), ("inf", "nan", _INF, _NAN),
                ("nan", "finite", _NAN, _NAN), ("nan", "+inf", _INF, _NAN),
                ("nan", "nan", _NAN, _NAN)),
    "arcsinh": (("positive finite", "+inf", _INF, _PI / 2), ("finite", "nan", _NAN, _NAN),
                ("+inf", "positive finite", _INF, 0.0), ("+inf", "+inf", _INF, _PI / 4),
                ("nan", "+0", _NAN, 0.0), ("nan", "nonzero finite", _NAN, _NAN),
                ("nan", "+inf", _INF, _NAN), ("nan", "nan", _NAN, _NAN)),
    "arctanh": (("+0", "nan", 0.0, _NAN), ("positive finite", "+inf", 0.0, _PI / 2),
                ("nonzero finite", "nan", _NAN, _NAN),
                ("+inf", "positive finite", 0.0, _PI / 2), ("+inf", "+inf", 0.0, _PI / 2),
                ("+inf", "nan", 0.0, _NAN), ("nan", "finite", _NAN, _NAN),
                ("nan", "+inf", 0.0, _PI / 2), ("nan", "nan", _NAN, _NAN)),
    "cosh": (("+0", "+inf", _NAN, 0.0), ("+0", "nan", _NAN, 0.0),
             ("nonzero finite", "+inf", _NAN, _NAN), ("nonzero finite", "nan", _NAN, _NAN),
             ("+inf", "+inf", _INF, _NAN), ("+inf", "nan", _INF, _NAN),
             ("nan", "0", _NAN, 0.0), ("nan", "nonzero finite", _NAN, _NAN),
             ("nan", "nan", _NAN, _NAN)),
    "sinh": (("+0", "+inf", 0.0, _NAN), ("+0", "nan", 0.0, _NAN),
             ("positive finite", "+inf", _NAN, _NAN), ("positive finite", "nan", _NAN, _NAN),
             ("+inf", "+inf", _INF, _NAN), ("+inf", "nan", _INF, _NAN),
             ("nan", "+0", _NAN, 0.0), ("nan", "nonzero finite", _NAN, _NAN),
             ("nan", "nan", _NAN, _NAN)),
    "tanh": (("nonzero finite", "+inf", _NAN, _NAN), ("+0", "+inf", 0.0, _NAN),
             ("nonzero finite", "nan", _NAN, _NAN), ("+0", "nan", 0.0, _NAN),
             ("+inf", "positive finite", 1.0, 0.0), ("+inf", "+inf", 1.0, 0.0),
             ("+inf", "nan", 1.0, 0.0), ("nan", "+0", _NAN, 0.0),
             ("nan", "nonzero", _NAN, _NAN)),
    "exp": (("finite", "+inf", _NAN, _NAN), ("finite", "nan", _NAN, _NAN),
            ("-inf", "+inf", 0.0, 0.0), ("+inf", "+inf", _INF, _NAN),
            ("-inf", "nan", 0.0, 0.0), ("+inf", "nan", _INF, _NAN),
            ("nan", "+0", _NAN, 0.0), ("nan", "nonzero", _NAN, _NAN)),
    "expm1": (("finite", "+inf", _NAN, _NAN), ("finite", "nan", _NAN, _NAN),
              ("-inf", "+inf", -1.0, 0.0), ("+inf", "+inf", _INF, _NAN),
              ("-inf", "nan", -1.0, 0.0), ("+inf", "nan", _INF, _NAN),
              ("nan", "+0", _NAN, 0.0), ("nan", "nonzero", _NAN, _NAN)),
    "log": (("finite", "+inf", _INF, _PI / 2), ("finite", "nan", _NAN, _NAN),
            ("-inf", "positive finite", _INF, _PI), ("+inf", "positive finite", _INF, 0.0),
            ("-inf", "+inf", _INF, 3 * _PI / 4), ("+inf", "+inf", _INF, _PI / 4),
            ("inf", "nan", _INF, _NAN), ("nan", "finite", _NAN, _NAN),
            ("nan", "+inf", _INF, _NAN), ("nan", "nan", _NAN, _NAN)),
    "log1p": (("finite", "+inf", _INF, _PI / 2), ("finite", "nan", _NAN, _NAN),
              ("-inf", "positive finite", _INF, _PI), ("+inf", "positive finite", _INF, 0.0),
              ("-inf", "+inf", _INF, 3 * _PI / 4), ("+inf", "+inf", _INF, _PI / 4),
              ("inf", "nan", _INF, _NAN), ("nan", "finite", _NAN, _NAN),
              ("nan", "+inf", _INF, _NAN), ("nan", "nan", _NAN, _NAN)),
    "sqrt": (("any", "+inf", _INF, _INF), ("finite", "nan", _NAN, _NAN),
             ("-inf", "positive finite", 0.0, _INF), ("+inf", "positive finite", _INF, 0.0),
             ("-inf", "nan", _NAN, _INF), ("+inf", "nan", _INF, _NAN),
             ("nan", "finite", _NAN, _NAN), ("nan", "nan", _NAN, _NAN)),
}

#: A condition on b, and the one on -b: the standard lists rules for b >= 0,
#: the others follow from f(conj(z)) = conj(f(z)) (conditions absent here
#: hold for b and -b alike).
_MIRROR = {"+inf": "-inf", "+0": "-0", "positive finite": "negative finite"}


def _holds(xp, condition: str, v):
    """Where ``v`` (a real array) meets ``condition``."""
    if condition == "any":
        return xp.ones(v.shape, bool)
    if condition == "nan":
        return xp.isnan(v)
    if condition in ("inf", "+inf", "-inf"):
        return xp.isinf(v) if condition == "inf" else v == (_INF if condition == "+inf" else -_INF)
    if condition == "0":
        return v == 0
    if condition == "+0":
        return (v == 0) & ~xp.signbit(v)
    if condition == "-0":
        return (v == 0) & xp.signbit(v)
    if condition == "nonzero":
        return v != 0
    finite = xp.isfinite(v)
    if condition == "finite":
        return finite
    if condition == "nonzero finite":
        return finite & (v != 0)
    if condition == "negative finite":
        return finite & (v < 0)
    assert condition == "positive finite", condition
    return finite & (v > 0)


def _complex(xp, re, im, dtype):
    """``re + im j`` part by part (``im * 1j`` would turn an infinite part into NaNs)."""
    if xp is np:
        out = np.empty(np.shape(re), dtype)
        out.real, out.imag = re, im
        return out
    return jax.lax.complex(re, im).astype(dtype)


def standard_values(name: str, z, result):
    """``result`` (= f(z), complex) with the standard's values where a rule holds.

    Example:
      >>> z = np.array([complex(-np.inf, np.inf), complex(1.0, 2.0)])
      >>> standard_values("exp", z, np.exp(z)) == np.array([0j, np.exp(1 + 2j)])
      array([ True,  True])
    """
    xp = np if isinstance(z, (np.ndarray, np.generic)) else jnp
    a, b = xp.real(z), xp.imag(z)
    re, im = xp.real(result), xp.imag(result)
    part = re.dtype
    for ca, cb, value_re, value_im in RULES[name]:
        mirrors = [(cb, value_im)]
        if cb in _MIRROR:
            mirrors.append((_MIRROR[cb], -value_im))
        for condition, value in mirrors:
            hit = _holds(xp, ca, a) & _holds(xp, condition, b)
            re = xp.where(hit, xp.asarray(value_re, part), re)
            im = xp.where(hit, xp.asarray(value, part), im)
    return _complex(xp, re, im, result.dtype)


def follow_standard(name: str, f):
    """``f`` (numpy's or jax.numpy's ``name``) giving the standard's values
    at NaN and infinite parts of complex arguments (real ones untouched: ``f``
    itself, its ``out=`` included, so the engine still lets a numpy ufunc write
    into the tile it read, seeing it through ``__wrapped__``)."""
    if name not in RULES:
        return f

    @functools.wraps(f)
    def function(z, *args, **kwargs):
        if not np.iscomplexobj(z):
            return f(z, *args, **kwargs)
        kwargs.pop("out", None)  # the rules read z after f: it must not be overwritten
        return standard_values(name, z, f(z, *args, **kwargs))
    return function
