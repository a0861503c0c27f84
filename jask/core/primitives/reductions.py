"""The reductions' derivatives: one row per kind of reducer, its VJP and its JVP.

A reduction is a :class:`jask.core.primitives.Blockwise` with a ``reducer``;
how it reduces (partial, combine, finish) is the reducer's row in
:data:`jask.engine.ops.reductions.REDUCERS`, and how it is differentiated is the
row of :data:`REDUCTION_RULES` for that reducer's ``kind``. A kind with no row
here raises when differentiated, naming the op (as JAX's "Differentiation
rule for '...' not implemented"): no reduction silently takes another's rules.

The rules build their maps and reductions with ``prim.derived`` (a
Blockwise over the differentiated op's full shape and config), so this
module needs nothing from the package that imports it.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import numpy as np
from jax.experimental.hijax import Zero

from jask.core import ufuncs
from jask.core.array import DiskArrayType
from jask.engine.ops.reductions import REDUCERS

__all__ = ["REDUCTION_RULES", "ReductionRule", "is_linear", "rule_of"]


def _on_disk(aval) -> bool:
    return isinstance(aval, DiskArrayType)


def _aval(x):
    return jax.typeof(x)


def _last(prim, row, operands, axes: tuple, dtype, forward: bool, name: str | None = None):
    """The last map of a reduction's derivative, ``row(g, *operands)``: its
    VJP (``g`` along the result's axes, the cotangent along the input's) or,
    ``forward``, its JVP (``g`` a tangent along the input's axes, the
    result's tangent summed back to the result's axes)."""
    out_axes, x_axes = prim.out_axes, prim.axes[0]
    if not forward:
        return prim.derived(row, tuple(_aval(a) for a in operands), (out_axes,) + tuple(axes),
                            (dtype,) * len(operands), x_axes, dtype, grad=True,
                            name=name)(*operands)
    return prim.derived(row, tuple(_aval(a) for a in operands), (x_axes,) + tuple(axes),
                           (dtype,) * len(operands), out_axes, prim.out_aval.dtype,
                           reducer="sum", to_memory=not _on_disk(prim.out_aval), grad=prim.grad,
                           name=f"{prim.op}_jvp")(*operands)


def _chooser_vjp(prim, x, out, g, forward: bool = False):
    """d max/min: the cotangent goes to the elements equal to the result,
    split evenly among ties (as jax.numpy does); ``forward``: the tangent is
    the mean of the tangents at the chosen elements (jax's rule)."""
    x_aval, out_aval = prim.in_avals[0], prim.out_aval
    dtype = x_aval.dtype
    axes, out_axes = prim.axes[0], prim.out_axes
    counts = prim.derived(ufuncs.TIES, (x_aval, out_aval), (axes, out_axes), (dtype, dtype),
                          out_axes, dtype, reducer="sum",
                          to_memory=not _on_disk(out_aval), grad=True)(x, out)
    return _last(prim, ufuncs.CHOSEN, (g, x, out, counts), (axes, out_axes, out_axes), dtype,
                 forward)


def _prod_vjp(prim, x, out, g, forward: bool = False):
    """d prod: each element gets the product of the others (zeros included,
    as jax.numpy): from the product of the nonzero elements and the count of
    zeros, two reductions, then one map (``forward``: the tangents times
    those products, summed)."""
    x_aval, out_aval = prim.in_avals[0], prim.out_aval
    dtype = x_aval.dtype
    axes, out_axes = prim.axes[0], prim.out_axes
    to_memory = not _on_disk(out_aval)
    parts = [prim.derived(row, (x_aval,), (axes,), (dtype,), out_axes, dtype,
                          reducer=reducer, to_memory=to_memory, grad=True)(x)
             for row, reducer in ((ufuncs.NONZERO_OR_ONE, "prod"), (ufuncs.IS_ZERO, "sum"))]
    return _last(prim, ufuncs.PROD_VJP, (g, x, *parts), (axes, out_axes, out_axes), dtype,
                 forward)


def _mean_vjp(prim, x, out, g, forward: bool = False):
    """d mean: the cotangent divided by the count, broadcast back to ``x``:
    the cotangent of the sum of ``x * (1 / count)``, whose rule it is (a
    mean is linear: its tangent is the map's, never asked here)."""
    assert not forward
    x_aval = prim.in_avals[0]
    count = REDUCERS[prim.reducer].mean_count
    inverse = jax.numpy.asarray(1.0 / count if count else np.nan, prim.dtypes[0])
    scaled = prim.derived(ufuncs.MUL, (x_aval, _aval(inverse)), (prim.axes[0], ()),
                          (prim.dtypes[0],) * 2, prim.out_axes, prim.out_aval.dtype,
                          reducer="sum", to_memory=not _on_disk(prim.out_aval), name=prim.op)
    return scaled._cotangent(0, ufuncs.MUL.vjps[0], (x, inverse), g)


def _var_vjp(prim, x, out, g, forward: bool = False):
    """d var: ``2 (x - mean) / (N - ddof)`` times the cotangent, as the
    cotangent of the squared deviations ``(x - mean)**2 / (N - ddof)`` (the
    two-pass formula, whose mean carries no gradient): the mean, then one map."""
    x_aval, out_aval = prim.in_avals[0], prim.out_aval
    dtype = x_aval.dtype
    axes, out_axes = prim.axes[0], prim.out_axes
    to_memory = not _on_disk(out_aval)
    count = int(np.prod([n for d, n in enumerate(prim.shape) if d not in set(out_axes)]))
    ddof = REDUCERS[prim.reducer].ddof
    assert ddof is not None  # (a variance's reducer)
    inverse = jax.numpy.asarray(1.0 / count if count else np.nan, dtype)
    mean = prim.derived(ufuncs.MUL, (x_aval, _aval(inverse)), (axes, ()), (dtype, dtype),
                        out_axes, dtype, reducer="sum", to_memory=to_memory,
                        grad=True, name="mean")(x, inverse)
    scale = jax.numpy.asarray(1.0 / (count - ddof) if count > ddof else np.nan, dtype)
    deviations = prim.derived(ufuncs.SQDIFF, (x_aval, _aval(mean), _aval(scale)),
                              (axes, out_axes, ()), (dtype,) * 3, out_axes,
                              out_aval.dtype, reducer="sum", to_memory=to_memory, name="var")
    if forward:  # the mean carries no tangent (its derivative's term is zero)
        return deviations._jvp_map((x, mean, scale), (g, Zero(_aval(mean)), Zero(_aval(scale))))
    return deviations._cotangent(0, ufuncs.SQDIFF.vjps[0], (x, mean, scale), g)


def _logsumexp_vjp(prim, x, out, g, forward: bool = False):
    """d logsumexp: the softmax ``exp(x - logsumexp)`` times the cotangent.
    Reduced over axes that keep the rows, the logsumexp is taken again as a
    store (a row-wise reduction), never the forward value: inside a band
    group each band recomputes its own rows' and the backward pass needs
    nothing from the forward one (one pass under ``jit(value_and_grad)``);
    eagerly it is a small store. Over the rows, the forward value is read."""
    x_aval, out_aval = prim.in_avals[0], prim.out_aval
    axes, out_axes = prim.axes[0], prim.out_axes
    if forward:  # the softmax-weighted sum of the tangents
        return _last(prim, ufuncs.SOFTMAX_TANGENT, (g, x, out), (axes, out_axes),
                     x.aval.dtype if hasattr(x, "aval") else _aval(x).dtype, True)
    lse = out
    if 0 in out_axes:
        lse = prim.derived(prim.ufunc, (x_aval,), (axes,), prim.dtypes, out_axes,
                           out_aval.dtype, reducer="logsumexp", grad=True,
                           name="logsumexp")(x)
    dtype = x_aval.dtype
    softmax = prim.derived(ufuncs.EXP_SUB, (x_aval, _aval(lse)), (axes, out_axes), (dtype, dtype),
                           out_axes, out_aval.dtype, reducer="sum",
                           to_memory=not _on_disk(out_aval),
                           name="logsumexp")
    return softmax._cotangent(0, ufuncs.EXP_SUB.vjps[0], (x, lse), g)


def _nan_vjp(prim, x, out, g, forward: bool = False):
    """d nanmean, d nanvar: zero at a NaN; elsewhere the cotangent over the
    position's count (nanmean), or ``2 (x - mean) / (count - ddof)`` times
    it (nanvar). The counts (and means) are reductions of their own, read in
    one pass with the map under a compiled program."""
    x_aval, out_aval = prim.in_avals[0], prim.out_aval
    dtype = x_aval.dtype
    axes, out_axes = prim.axes[0], prim.out_axes
    to_memory = not _on_disk(out_aval)

    def reduction(ufunc, reducer, name):
        return prim.derived(ufunc, (x_aval,), (axes,), (dtype,), out_axes, dtype,
                            reducer=reducer, to_memory=to_memory, grad=True,
                            name=name)(x)

    count = reduction(ufuncs.IS_NUMBER, "sum", "nan_count")
    ddof = REDUCERS[prim.reducer].ddof
    name = f"{prim.op}_vjp"
    if ddof is None:
        return _last(prim, ufuncs.NAN_MEAN_VJP, (g, x, count), (axes, out_axes), dtype,
                     forward, name)
    mean = reduction(ufuncs.IDENTITY, "nanmean", "nanmean")
    offset = jax.numpy.asarray(ddof, dtype)
    return _last(prim, ufuncs.NAN_VAR_VJP, (g, x, mean, count, offset),
                 (axes, out_axes, out_axes, ()), dtype, forward, name)


class ReductionRule(NamedTuple):
    """How a reduction is differentiated, by its reducer's kind
    (``jask.engine.ops.reductions.Reducer.kind``).

    ``vjp(prim, x, out, g)``: the cotangent of ``x``; ``None``: the map's own
    rules, reduced by a sum (a sum's derivative, and the no-rules of a map
    whose result is an index or a truth value). ``jvp(prim, x, out, t)``: the
    tangent of the output, ``t`` being ``x``'s. ``linear``: the tangent is the
    map's tangent, reduced the same way (no ``jvp`` is then needed)."""

    vjp: Callable | None = None
    jvp: Callable | None = None
    linear: bool = False


def _both(rule: Callable) -> ReductionRule:
    """A row from a rule written for both modes (``forward=True``: the JVP)."""
    return ReductionRule(rule, functools.partial(rule, forward=True))


#: The derivative rules of the reductions, one row per reducer kind. ``arg``,
#: ``all`` and ``any`` give integers and truth values, which JAX never asks a
#: derivative of; the internal kinds (``m2``, ``statistics``) are made after
#: differentiation (:func:`jask.core.primitives.prune_before_lowering`) and
#: have no row, so they raise if ever differentiated.
REDUCTION_RULES: dict[str, ReductionRule] = {
    "sum": ReductionRule(linear=True),
    "mean": ReductionRule(_mean_vjp, linear=True),
    "max": _both(_chooser_vjp),
    "min": _both(_chooser_vjp),
    "prod": _both(_prod_vjp),
    "logsumexp": _both(_logsumexp_vjp),
    "variance": _both(_var_vjp),
    "nanmean": _both(_nan_vjp),
    "nanvariance": _both(_nan_vjp),
    "arg": ReductionRule(),
    "all": ReductionRule(),
    "any": ReductionRule(),
}


def rule_of(op: str, reducer: str) -> ReductionRule:
    """The derivative row of the reduction ``op`` by ``reducer``; raises
    naming the op where its reducer's kind has none."""
    kind = REDUCERS[reducer].kind
    rule = REDUCTION_RULES.get(kind)
    if rule is None:
        raise NotImplementedError(
            f"Differentiation rule for 'jask.{op}' not implemented: its reducer {reducer!r} "
            f"(kind {kind!r}) has no row in jask.core.primitives.reductions.REDUCTION_RULES")
    return rule


def is_linear(op, reducer) -> bool:
    """None (a map), a sum or a mean: reductions linear in what they reduce."""
    return reducer is None or rule_of(op, reducer).linear
