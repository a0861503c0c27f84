"""A centred second moment written out, ``sum(square(x - mean(x)))``, computed
from ``x`` in one pass (Chan's (count, mean, M2) partials), so it need not
wait for the mean; its gradient reads ``x - mean(x)`` linearly (``2 g (x -
m)``), which :mod:`.defer` takes the mean out of."""
from __future__ import annotations

from jask.core._jax_internals import hi_primitive
from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.rules import Rules

__all__ = ["centred_moments"]


def centred_moments(jaxpr, rules: Rules):
    """The jaxpr with each ``reduce(square(x - mean(x)))`` equation whose
    four ops ``rules.centred`` recognises made the op it names, reading
    ``x``; or ``jaxpr`` itself. The square and the difference stay for
    their other readers (the backward pass), or go with the dead code; an
    op reading the square only for its type (``rules.unread(prim)``: the
    positions of such operands; a mean's VJP) is given ``x`` instead, which
    is of the same type and ready sooner."""
    centred, unread = rules.centred, rules.unread
    maker = {v: e for e in jaxpr.eqns for v in e.outvars}

    def made(v, arity):
        eqn = maker.get(v) if isinstance(v, core.Var) else None
        if eqn is None or hi_primitive(eqn) is None or len(eqn.invars) != arity:
            return None
        return eqn

    eqns = list(jaxpr.eqns)
    for j, other in enumerate(eqns):  # jit(grad): no moment left, only the mean's VJP
        positions = set(unread(hi_primitive(other))) if hi_primitive(other) else set()
        invars = list(other.invars)
        for k in positions:
            square = made(invars[k], 1)
            sub = square and made(square.invars[0], 2)
            mean = sub and made(sub.invars[1], 1)
            if (mean is not None and mean.invars[0] is sub.invars[0]
                    and sub.invars[0].aval == invars[k].aval
                    and centred(None, *(hi_primitive(e) for e in (square, sub, mean)))):
                invars[k] = sub.invars[0]  # x: ready before the mean
        if invars != list(other.invars):
            eqns[j] = other.replace(invars=invars)
    for i, eqn in enumerate(eqns):
        if hi_primitive(eqn) is None or len(eqn.invars) != 1:
            continue
        square = made(eqn.invars[0], 1)
        sub = square and made(square.invars[0], 2)
        mean = sub and made(sub.invars[1], 1)
        if mean is None or mean.invars[0] is not sub.invars[0]:
            continue
        prim = centred(*(hi_primitive(e) for e in (eqn, square, sub, mean)))
        if prim is None:
            continue
        x, squares = sub.invars[0], square.outvars[0]
        eqns[i] = eqn.replace(invars=[x], params=dict(_prim=prim))
        if x.aval != squares.aval:
            continue
        for j, other in enumerate(eqns):
            positions = set(unread(hi_primitive(other))) if hi_primitive(other) else set()
            if any(k in positions for k, v in enumerate(other.invars) if v is squares):
                eqns[j] = other.replace(invars=[x if v is squares and k in positions else v
                                                for k, v in enumerate(other.invars)])
    if all(a is b for a, b in zip(eqns, jaxpr.eqns)):
        return jaxpr
    return jaxpr.replace(eqns=eqns)
