"""What the rewrite passes ask of one jaxpr equation: the programs it
holds, whether it is JAX's own pure arithmetic, whether ops may move
across it."""
from __future__ import annotations

from jask.core._jax_internals import hi_primitive
from jask.core._jax_internals import jaxpr_core as core

__all__ = ["is_barrier", "is_high", "is_pure_arithmetic", "programs"]


def is_high(v) -> bool:
    """Whether a jaxpr variable (or literal) is hi-typed: a store of ours."""
    return getattr(v.aval, "is_high", False)


def programs(eqn) -> list:
    """The jaxprs an equation holds (jit, cond, scan, custom derivatives)."""
    found: list = []
    for v in eqn.params.values():
        for item in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(item, core.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, core.Jaxpr):
                found.append(item)
    return found


def is_pure_arithmetic(eqn) -> bool:
    """Whether an equation is JAX's own computation on in-memory values:
    no effects, no hi-typed value in or out, and no hijax primitive in the
    programs it holds (``jnp.mean`` of an array in memory, ``jax.nn``'s
    custom derivatives), so moving it later in program order changes
    nothing but when it runs."""
    if eqn.effects or hi_primitive(eqn) is not None:
        return False
    if any(is_high(v) for v in (*eqn.invars, *eqn.outvars)):
        return False
    return all(is_pure_arithmetic(e) for sub in programs(eqn) for e in sub.eqns)


def is_barrier(eqn, mutates) -> bool:
    """Whether no value op may move across an equation: it has effects,
    is an op that ``mutates`` a store, or holds a program that is not pure
    arithmetic (jask's ops inside it may read or change a store)."""
    prim = hi_primitive(eqn)
    return bool(eqn.effects or (prim is not None and mutates(prim))
                or (prim is None and programs(eqn) and not is_pure_arithmetic(eqn)))
