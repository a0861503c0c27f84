"""Waiting scalars taken out of the ops that read them linearly.

A backward pass whose cotangent is a scalar still waiting for its pass
(``c = g / (2 * sqrt(m))`` for ``sqrt(mean(r * r))``) is linear in it: an op
of ours reading such scalars linearly runs with 1 in their place, once per
scalar it carries (:func:`distributed`; a store it makes is then a sum of
terms, scalar times store, and a sum of stores just joins its operands'
terms), and each in-memory result comes back as the sum of its terms
(``c * (X.T @ v)`` for ``X.T @ (c * v)``), so the backward reductions wait
with the forward ones (:mod:`.defer`): one pass. Should a term reach a
reader that is not linear in it, :class:`NotLinear` says which ops made it.
"""
from __future__ import annotations

import numpy as np

from jask.core._jax_internals import hi_primitive
from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.equations import is_high

__all__ = ["NotLinear", "distributed", "linear_terms", "unit_copy"]


def _unit(v, waiting, unit_of):
    """(``v`` with 1 for its scalar, the scalar) for a waiting value: a
    waiting float scalar is its own, with unit 1; None if it has none."""
    if v in unit_of:
        return unit_of[v]
    if (v in waiting and not is_high(v)
            and getattr(v.aval, "shape", None) == ()
            and np.issubdtype(v.aval.dtype, np.floating)):
        return core.Literal(np.ones((), v.aval.dtype), v.aval), v
    return None


def linear_terms(eqn, groups, waiting, scale_of, unit_of, broadcast_of=lambda k: None):
    """(the linear group, the terms of each of its operands) for an op of
    ours whose waiting operands all carry scalars linearly, or None.

    An operand carries scalars when it is a waiting value made linearly
    from one (:func:`_unit`) or a store that is a sum of scalars times
    stores computed with 1 in their place (``scale_of``). Those operands
    must be exactly one of the op's linear ``groups`` (a dict position ->
    sign: ``None`` for an op linear in that operand alone, signs for a
    signed sum of same-shaped operands), and the op reads no other waiting
    value."""
    terms: dict = {}
    for k, v in enumerate(eqn.invars):
        if not isinstance(v, core.Var):
            continue
        if v in scale_of:
            terms[k] = scale_of[v]
        elif v in waiting:
            unit = _unit(v, waiting, unit_of)
            if unit is None:
                return None
            terms[k] = [unit]
    group = next((g for g in groups if set(g) == set(terms)
                  or len(g) > 1 and set(terms) <= set(g)), None)
    if not terms or group is None:
        return None
    if len(group) > 1:
        out = eqn.outvars[0]
        for k in group:
            if _same_type(eqn.invars[k], out):
                continue
            # a sum that broadcasts: only an in-memory operand carrying one scalar,
            # as that scalar times its unit broadcast to the result (a store of ours)
            if k not in terms or k in {j for j, v in enumerate(eqn.invars)
                                        if isinstance(v, core.Var) and v in scale_of}:
                return None
            made = broadcast_of(k)
            if made is None or len(terms[k]) != 1:
                return None
            terms[k] = [(_Broadcast(made, terms[k][0][0]), terms[k][0][1])]
        for k in set(group) - set(terms):  # a store of the result's type, as it is
            terms[k] = [(eqn.invars[k], core.Literal(np.ones((), out.aval.dtype),
                                                     core.ShapedArray((), out.aval.dtype)))]
    return group, terms


class _Broadcast:
    """A term's unit still to be made: ``prim`` (an op of ours) of ``unit``."""

    def __init__(self, prim, unit):
        self.prim, self.unit = prim, unit


def _same_type(a, b) -> bool:
    return (is_high(b) and a.aval.shape == b.aval.shape
            and a.aval.dtype == b.aval.dtype)


#: JAX's primitives linear in the operand positions given (None: in all of
#: them together), the others fixed.
_LINEAR = {"mul": 1, "dot_general": 1, "div": (0,), "add": None, "sub": None, "add_any": None,
           "neg": None, "convert_element_type": None, "broadcast_in_dim": None,
           "reshape": None, "reduce_sum": None, "transpose": None, "squeeze": None,
           "expand_dims": None, "copy": None, "copy_p": None}


def unit_copy(eqn, waiting, unit_of):
    """For pure arithmetic linear in the waiting values it reads, all made
    from one scalar (``w * c`` for the cotangent ``c`` of ``sum(X * v, 0) @
    w``): the same equation on their units, whose outputs become the units
    of its own (``unit_of``); None for any other."""
    rule = _LINEAR.get(eqn.primitive.name, False)
    if rule is False:
        return None
    carried = {k for k, v in enumerate(eqn.invars) if isinstance(v, core.Var) and v in waiting}
    if rule is None:
        linear = carried == {k for k, v in enumerate(eqn.invars) if isinstance(v, core.Var)}
    elif rule == 1:
        linear = len(carried) == 1
    else:
        linear = carried == set(rule)
    units = {k: _unit(eqn.invars[k], waiting, unit_of) for k in carried}
    if not linear or any(u is None for u in units.values()):
        return None
    scalars = {u[1] for u in units.values()}
    if len(scalars) != 1:
        return None
    scalar = scalars.pop()
    outvars = [core.Var(v.aval) for v in eqn.outvars]
    for v, unit in zip(eqn.outvars, outvars):
        unit_of[v] = (unit, scalar)
    return eqn.replace(invars=[units[k][0] if k in units else v
                               for k, v in enumerate(eqn.invars)], outvars=outvars)


class NotLinear(Exception):
    """A store made as terms (:func:`distributed`) reaches a reader that is
    not linear in it, or the program's outputs: :func:`.defer.defer` starts again
    with the ops that made those terms (``origins``, positions in the jaxpr)
    left as they are (``r - m`` before a square runs once ``m`` is known),
    or without taking scalars out at all."""

    def __init__(self, origins: frozenset):
        super().__init__(sorted(origins))
        self.origins = origins


def distributed(eqn, group, terms, scale_of, widen=lambda prim: prim):
    """The op distributed over its operands' terms: ``(copies, restore)``.

    A signed sum of stores runs nothing: its result's terms are its
    operands' (a negated scalar for a minus). An op linear in one operand
    runs once per term of it, with the term's unit in its place; each copy's
    store is a term of the result (``scale_of``), and an in-memory result is
    the sum of each copy's times its scalar (``restore``, equations to run
    after the copies). A copy of several is ``widen``'s: its terms may
    cancel (``X.T @ e - m * (X.T @ 1)``), so it keeps float64 partials, and
    the sum is finished in float64 too (``merge``'s ``post``)."""
    from jax import lax

    restore: list = []
    if len(group) > 1:
        summed = []
        made: list = []  # the equations making broadcast units, run in place
        for k, sign in group.items():
            for unit, scalar in terms[k]:
                if isinstance(unit, _Broadcast):
                    store = core.Var(unit.prim.out_aval)
                    made.append(eqn.replace(invars=[unit.unit], outvars=[store],
                                            params=dict(_prim=unit.prim)))
                    unit = store
                if sign < 0:
                    negated = core.Var(scalar.aval)
                    restore.append(core.new_jaxpr_eqn([scalar], [negated], lax.neg_p, {},
                                                      set(), eqn.source_info, eqn.ctx))
                    scalar = negated
                summed.append((unit, scalar))
        scale_of[eqn.outvars[0]] = summed
        return made, restore
    (k,) = group
    copies, outs = [], [[] for _ in eqn.outvars]
    for n, (unit, scalar) in enumerate(terms[k]):
        invars = list(eqn.invars)
        invars[k] = unit
        outvars = [v if n == 0 and len(terms[k]) == 1 and is_high(v)
                   else core.Var(v.aval) for v in eqn.outvars]
        prim = hi_primitive(eqn) if len(terms[k]) == 1 else widen(hi_primitive(eqn))
        copies.append(eqn.replace(invars=invars, outvars=outvars, params=dict(_prim=prim)))
        for j, v in enumerate(outvars):
            outs[j].append((v, scalar))
    for v, pieces in zip(eqn.outvars, outs):
        if isinstance(v, core.DropVar):
            continue
        if is_high(v):
            scale_of[v] = pieces
            continue
        total = None
        for unit, scalar in pieces:
            factor = scalar
            if v.aval.dtype != scalar.aval.dtype:  # a gradient of another float width
                factor = core.Var(core.ShapedArray((), v.aval.dtype))
                restore.append(core.new_jaxpr_eqn(
                    [scalar], [factor], lax.convert_element_type_p,
                    dict(new_dtype=v.aval.dtype, weak_type=False, sharding=None),
                    set(), eqn.source_info, eqn.ctx))
            scaled = core.Var(v.aval)
            restore.append(core.new_jaxpr_eqn([unit, factor], [scaled], lax.mul_p,
                                              _mul_params(), set(), eqn.source_info, eqn.ctx))
            if total is not None:
                added = core.Var(v.aval)
                restore.append(core.new_jaxpr_eqn([total, scaled], [added], lax.add_p,
                                                  _mul_params(), set(), eqn.source_info,
                                                  eqn.ctx))
                scaled = added
            total = scaled
        restore[-1] = restore[-1].replace(outvars=[v])
    return copies, restore


def _mul_params() -> dict:
    """The parameters JAX's own ``a * b`` gives its ``mul`` equation."""
    import jax

    return dict(jax.make_jaxpr(jax.lax.mul)(1.0, 1.0).eqns[0].params)
