"""Every use of JAX internals (``jax._src``) in jask, kept in one place.

hijax is experimental; jask is tested against jax 0.10.x. An upgrade that
moves these names should touch only this module.
"""
from __future__ import annotations

from jax._src import core
from jax._src.interpreters import ad

#: JAX's jaxpr data types (``Var``, ``Literal``, ``DropVar``, ``Jaxpr``,
#: ``ClosedJaxpr``, ``new_jaxpr_eqn``, ``jaxpr_as_fun``...), for the rewrite
#: passes in :mod:`jask.core.rewrite` that read, cut and rebuild jaxprs.
jaxpr_core = core


def jit_primitive():
    """JAX's ``jit`` primitive (``pjit.jit_p``), whose hi-to-lo step the
    device split takes over (:func:`jask.core.rewrite.pieces.take_over_jit`)."""
    from jax._src import pjit
    return pjit.jit_p


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


def is_differentiated(x) -> bool:
    """True for a value being differentiated: a tracer of ``jax.grad``,
    ``jax.vjp``, ``jax.jvp`` or ``jax.linearize`` (their functions' values
    must be jax values, not objects holding them)."""
    return isinstance(x, (ad.JVPTracer, ad.LinearizeTracer))


def numpy_caller() -> str | None:
    """The public ``jax.numpy`` function the current call came through
    (``"mean"`` inside ``jnp.mean``), read from the call stack; None if none."""
    import sys
    from types import FrameType

    frame: FrameType | None = sys._getframe(1)
    name = None
    while frame is not None:  # the outermost one wins: jnp.var calls jnp.mean
        code = frame.f_code
        if ("jax/_src/numpy/" in code.co_filename.replace("\\", "/")
                and not code.co_name.startswith("_") and code.co_name.isidentifier()):
            name = code.co_name
        frame = frame.f_back
    return name


def is_accumulator(x) -> bool:
    """Whether ``x``, an input handed to a primitive's ``transpose``, is an
    accumulator (the input is linear and undefined: its cotangent is asked
    for), not a value."""
    return isinstance(x, ad.GradAccum)


def ignoring_cotangent(aval):
    """An accumulator that asks for no cotangent (``wants_cotangent`` is
    False), for an input of ``aval`` that is a value, not a linear input."""
    return ad.NullAccum(aval)


def wants_cotangent(accum) -> bool:
    """Whether a VJP accumulator collects a cotangent (its input needs one)."""
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


def dead_code_removed(jaxpr):
    """``jaxpr`` (a ``Jaxpr``) without the equations none of its outputs
    needs, each primitive's own ``dce`` deciding (``update_`` keeps itself)."""
    from jax._src.interpreters import partial_eval as pe

    return pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)[0]


def lower_rewritten(rewrite, check=lambda jaxpr: None) -> None:
    """Have JAX lower ``rewrite(hi_jaxpr, whole)`` in place of each hi jaxpr
    it lowers (``whole``: a program of its own, lowered outside any trace,
    not one nested in another's lowering), after ``check(jaxpr)`` (which
    raises for a jaxpr JAX cannot lower). Installed once: a second call
    changes nothing."""
    from jax._src.interpreters import partial_eval as pe

    original = pe.lower_jaxpr
    if getattr(original, "_rewrite", None) is not None:
        return

    def lower_jaxpr(hi_jaxpr, lo_avals):
        lean = rewrite(hi_jaxpr, is_eager())
        check(lean.jaxpr)
        return original(lean, lo_avals)

    lower_jaxpr._rewrite = rewrite  # type: ignore[attr-defined]
    pe.lower_jaxpr = lower_jaxpr  # type: ignore[assignment]


def lowering_rewrite():
    """The ``rewrite`` :func:`lower_rewritten` installed, or None."""
    from jax._src.interpreters import partial_eval as pe

    return getattr(pe.lower_jaxpr, "_rewrite", None)


def refuse_scans_over(hi_type, message: str) -> None:
    """Make ``lax.scan`` (and ``lax.map``) over a value of ``hi_type`` raise
    ``NotImplementedError(message)`` at trace time: JAX's own check asks
    for a ``length`` first (jax 0.10), and with one given fails on the type."""
    from jax._src.lax.control_flow import loops

    original = loops._infer_scan_length
    if getattr(original, "_refuses", None) is hi_type:
        return

    def infer(xs_flat, xs_avals, length):
        if any(isinstance(a, hi_type) for a in xs_avals):
            raise NotImplementedError(message)
        return original(xs_flat, xs_avals, length)

    setattr(infer, "_refuses", hi_type)
    loops._infer_scan_length = infer
