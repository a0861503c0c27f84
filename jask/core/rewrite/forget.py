"""A mutating op (``update_``) handed the values of jask's ops made before it
and never read again, so that it need not compute them from the values it
is about to overwrite."""
from __future__ import annotations

from jask.core._jax_internals import hi_primitive
from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.rules import Rules

__all__ = ["forget_before_mutations"]


def forget_before_mutations(jaxpr, rules: Rules):
    """The jaxpr with each op that ``rules.mutates`` given the values made by
    ``rules.is_ours``'s ops before it that nothing reads after it
    (``rules.forgetting(prim, avals)``: the op with those as extra
    operands); ``jaxpr`` itself when nothing mutates."""
    mutates = rules.mutates
    if not any((p := hi_primitive(e)) is not None and mutates(p) for e in jaxpr.eqns):
        return jaxpr
    last: dict = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if isinstance(v, core.Var):
                last[v] = i
    returned = {v for v in jaxpr.outvars if isinstance(v, core.Var)}
    made: list = []  # (var, index) of values made by our ops
    eqns = []
    for i, eqn in enumerate(jaxpr.eqns):
        prim = hi_primitive(eqn)
        if prim is not None and mutates(prim):
            dead = [v for v, j in made if last.get(v, j) < i and v not in returned]
            if dead:
                eqn = eqn.replace(invars=list(eqn.invars) + dead,
                                  params=dict(_prim=rules.forgetting(prim,
                                                                     [v.aval for v in dead])))
                made = [(v, j) for v, j in made if v not in set(dead)]
        eqns.append(eqn)
        if rules.is_ours(prim):
            made += [(v, i) for v in eqn.outvars  # hi-typed: stores, maybe pending
                     if isinstance(v, core.Var) and not isinstance(v, core.DropVar)
                     and v.aval.is_high]
    return jaxpr.replace(eqns=eqns)
