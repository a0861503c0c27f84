"""Nested calls holding jask's ops inlined into the program that calls them.

A jitted helper called from a jitted step (``@jax.jit def loss`` inside
``@jax.jit def step``) reaches the step's jaxpr as one ``jit`` equation
holding its own jaxpr; ``jax.checkpoint`` and ``closed_call`` nest the same
way. The rewrite and the device split see such an equation as one opaque
op: the forward ops of ``jax.value_and_grad(loss)`` and its backward ones
sit in two nested programs, so they cannot merge into one band group, and
the split cannot cut inside them. The program a jitted call finally runs
computes the same values with the nested equations written out in place
(a call is the function it calls; ``checkpoint`` only tells differentiation
what to save, and the jaxpr being run is past differentiation), so
:func:`inlined` writes them out before the rewrite and the split.
"""
from __future__ import annotations

from jask.core._jax_internals import jaxpr_core as core

__all__ = ["inlined"]

#: The call equations written out, by primitive name, and the parameter
#: holding the program each calls.
CALLS = {"jit": "jaxpr", "closed_call": "call_jaxpr", "call": "call_jaxpr",
         "remat2": "jaxpr"}


def _called(eqn, holds):
    """The program a call equation calls, as (jaxpr, consts), when it
    ``holds`` (a test of a jaxpr) what is worth inlining; else None."""
    key = CALLS.get(eqn.primitive.name)
    program = eqn.params.get(key) if key else None
    if isinstance(program, core.ClosedJaxpr):
        jaxpr, consts = program.jaxpr, list(program.consts)
    elif isinstance(program, core.Jaxpr):
        jaxpr, consts = program, []
    else:
        return None
    return (jaxpr, consts) if holds(jaxpr) else None


def inlined(closed: core.ClosedJaxpr, holds) -> core.ClosedJaxpr:
    """``closed`` with each call equation whose program ``holds`` jask's
    ops written out in place, recursively (a call inside a call too);
    ``closed`` itself when there is none. The nested programs' constants
    become constants of the result; each written-out equation gets fresh
    output variables, so a program called twice defines distinct ones.

    Example:
      >>> import jax
      >>> inner = jax.jit(lambda x: x * 2.0)
      >>> closed = jax.make_jaxpr(lambda x: inner(x) + 1.0)(1.0)
      >>> flat = inlined(closed, lambda jaxpr: True)
      >>> [e.primitive.name for e in flat.jaxpr.eqns]
      ['mul', 'add']
    """
    jaxpr = closed.jaxpr
    if not any(_called(e, holds) for e in jaxpr.eqns):
        return closed
    constvars = list(jaxpr.constvars)
    consts = list(closed.consts)
    eqns: list = []

    def write_out(eqns_in, env: dict) -> None:
        for eqn in eqns_in:
            invars = [env.get(v, v) if isinstance(v, core.Var) else v for v in eqn.invars]
            called = _called(eqn, holds)
            if called is None:
                outvars = [v if isinstance(v, core.DropVar) else env.setdefault(v, v)
                           for v in eqn.outvars]
                eqns.append(eqn.replace(invars=invars, outvars=outvars))
                continue
            inner, inner_consts = called
            fresh = [core.Var(v.aval) for v in inner.constvars]
            constvars.extend(fresh)
            consts.extend(inner_consts)
            inner_env = dict(zip(inner.constvars, fresh))
            inner_env.update(zip(inner.invars, invars))
            for v in inner.eqns:
                for out in v.outvars:
                    if not isinstance(out, core.DropVar):
                        inner_env[out] = core.Var(out.aval)
            write_out(inner.eqns, inner_env)
            for outer, result in zip(eqn.outvars, inner.outvars):
                if isinstance(outer, core.DropVar):
                    continue
                value = inner_env.get(result, result) if isinstance(result, core.Var) else result
                env[outer] = value

    env: dict = {}
    write_out(jaxpr.eqns, env)
    outvars = [env.get(v, v) if isinstance(v, core.Var) else v for v in jaxpr.outvars]
    return core.ClosedJaxpr(jaxpr.replace(constvars=constvars, eqns=eqns, outvars=outvars),
                            consts)
