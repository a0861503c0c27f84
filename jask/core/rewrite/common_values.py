"""One value however often it is written: a pure op of ours met again on the
same operands is computed once (``X * w - mean(X * w)`` traces ``X * w``
twice), so the later passes see one value where the user wrote one value
twice."""
from __future__ import annotations

import numpy as np

from jask.core._jax_internals import hi_primitive
from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.equations import programs
from jask.core.rewrite.rules import Rules

__all__ = ["common_values"]


def common_values(jaxpr, rules: Rules):
    """The jaxpr with each equation of a ``rules.pure`` primitive that
    repeats an earlier one (an equal primitive on the same operands, no op
    that ``rules.mutates`` nor nested program between them: either may
    change a store between the two) read through the earlier one's
    outputs, or ``jaxpr`` itself. The copies are left to dead-code
    elimination."""
    seen: dict = {}
    same: dict = {}  # a later copy's output -> the first's
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [same.get(v, v) if isinstance(v, core.Var) else v for v in eqn.invars]
        if invars != list(eqn.invars):
            eqn = eqn.replace(invars=invars)
        eqns.append(eqn)
        prim = hi_primitive(eqn)
        if (prim is not None and rules.mutates(prim)) or (prim is None and programs(eqn)):
            seen.clear()
            continue
        if prim is None or not rules.pure(prim):
            continue
        key = (prim, tuple(v if isinstance(v, core.Var) else _literal_key(v) for v in invars))
        first = seen.setdefault(key, eqn)
        if first is eqn:
            continue
        if any(isinstance(v, core.DropVar) for v in first.outvars):
            seen[key] = eqn  # (an output of the first left unread: the copy's is read)
        else:
            same.update(zip(eqn.outvars, first.outvars))
    if not same:
        return jaxpr
    outvars = [same.get(v, v) if isinstance(v, core.Var) else v for v in jaxpr.outvars]
    return jaxpr.replace(eqns=eqns, outvars=outvars)


def _literal_key(literal) -> tuple:
    """A jaxpr literal (``2 * Y``'s 2) by its type and bytes."""
    value = np.asarray(literal.val)
    return ("literal", value.dtype.str, value.shape, value.tobytes())
