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
