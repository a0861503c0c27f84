"""Every use of JAX internals (``jax._src``) in jask, kept in one place.

hijax is experimental; jask is tested against jax 0.10.x. An upgrade that
moves these names should touch only this module.
"""
from __future__ import annotations

from jax._src import core


def is_eager() -> bool:
    """True when ops run now, on concrete values (no trace is active).

    Decided from the trace context, not from whether operands are tracers:
    an op whose operands are all constants can still be inside a trace (a
    cotangent seed under ``jit(grad(f))``) and must be staged, not run.
    """
    return core.trace_ctx.trace is core.eval_trace


def is_tracer(x) -> bool:
    """True for a JAX tracer (an abstract value inside a transformation)."""
    return isinstance(x, core.Tracer)


def wants_cotangent(accum) -> bool:
    """Whether a VJP accumulator collects a cotangent (its input needs one)."""
    from jax._src.interpreters import ad
    return not isinstance(accum, ad.NullAccum)


#: The operator Python tries when the left operand gives up: x < y is y > x.
_MIRRORED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def defer_scalar_operators_to(hi_type, binary, compare) -> None:
    """Let a traced in-memory value on the left of an operator defer to a
    traced hi value on the right.

    ``lr * a`` with both traced calls the in-memory tracer's ``__mul__``;
    JAX's array operators do not know ``hi_type`` and give up, and Python
    never tries ``a.__rmul__`` for two tracers of the same class. Route those
    cases to ``hi_type``'s reflected (or mirrored) operator instead; every
    other case is JAX's.
    """
    pairs = [(name, f"r{name}") for name in binary]
    pairs += [(name, _MIRRORED[name]) for name in compare]
    for name, reflected in pairs:
        original = getattr(core.ShapedArray, f"_{name}")
        if getattr(original, "_defers_to", None) is hi_type:
            continue

        def op(self, other, _original=original, _reflected=f"_{reflected}"):
            if isinstance(other, core.Tracer) and isinstance(other.aval, hi_type):
                return getattr(other.aval, _reflected)(other, self)
            return _original(self, other)

        setattr(op, "_defers_to", hi_type)  # marks the patch, so it is applied once
        setattr(core.ShapedArray, f"_{name}", staticmethod(op))


def hi_primitive(eqn):
    """The hijax primitive a jaxpr equation binds, or None for any other.

    hijax binds every ``VJPHiPrimitive`` through one ``call_hi_primitive``
    whose ``_prim`` parameter is the instance (jax 0.10).
    """
    return eqn.params.get("_prim") if eqn.primitive.name == "call_hi_primitive" else None
