"""Every use of JAX internals (``jax._src``) in jask, kept in one place.

hijax is experimental; jask is tested against jax 0.10.x. An upgrade that
moves these names should touch only this module.
"""
from __future__ import annotations

import numpy as np
from jax._src import core
from jax._src.interpreters import ad

#: JAX's jaxpr data types (``Var``, ``Literal``, ``DropVar``, ``Jaxpr``,
#: ``ClosedJaxpr``, ``jaxpr_as_fun``...), for the rewrite passes in
#: :mod:`jask.core.rewrite` that cut and rebuild jaxprs.
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


def prune_before_lowering(is_ours, *, movable, mutates, merge, forgetting,
                          linear=lambda prim: (), as_store=lambda prim: None,
                          reading_store=lambda prim, k: None,
                          broadcast=lambda prim, k: None,
                          lift=lambda name, params, avals, out: None,
                          centred=lambda reduce, square, sub, mean: None,
                          widen=lambda prim: prim, unread=lambda prim: (),
                          pure=lambda prim: False, refused=None) -> None:
    """Rewrite a jaxpr holding ``is_ours``'s primitives before JAX lowers it.

    * Dead code goes first. ``jax.jit`` lowers the jaxpr it traced as is,
      and each hijax primitive becomes an ordered callback there, which XLA
      never removes: the forward ``sum`` of ``jax.jit(jax.grad(loss))``
      would run although nothing reads it. Each primitive's own ``dce``
      decides (``update_`` keeps itself).
    * Then each ``movable`` op (one returning an in-memory value) waits
      until its value is first read by one of ``is_ours``'s ops, a
      ``mutates`` op or a nested program holding our ops comes, or the
      program ends, and the ops waiting together become one (``merge``): a
      value's computation reads the disk, never changes it, so running it
      later in program order gives the same value. JAX's own pure
      arithmetic on a waiting value (``sum(r * r) / n``) waits with it. That
      lets the gradients of ``w`` and ``b`` (and ``value_and_grad``'s loss,
      however it is scaled or combined) share one pass over the data.
    * A backward pass whose cotangent is a waiting scalar (``c = g / (2 *
      sqrt(m))`` for ``sqrt(mean(r * r))``: the forward value is needed
      first) is linear in it: ``linear(prim)`` names the groups of operands
      an op is jointly linear in (a VJP in its cotangent, ``+`` in both,
      ``X @ m`` in each; ``r - m`` with ``m`` a waiting scalar broadcast is
      ``r`` plus ``-m`` times ``broadcast(prim, k)``, the unit of ``m``
      broadcast to ``r``'s shape). An op reading such scalars linearly runs with 1 in
      their place, once per scalar it carries (a store it makes is then a sum
      of terms, scalar times store, and a sum of stores just joins its
      operands' terms), and each in-memory result comes back as the sum of
      its terms (``c * (X.T @ v)`` for ``X.T @ (c * v)``), so the backward
      reductions wait with the forward ones: one pass. Should a term reach a
      reader that is not linear in it, or the program's outputs, the jaxpr
      is rewritten again with the ops that made those terms left as they
      are, and without this step when that is not enough.
    * A waiting value that runs along the rows (a row's ``logsumexp`` or
      max: ``as_store(prim)`` is the op making it as a store instead, None
      for any other) read by an op of ours along its rows
      (``reading_store(prim, k)``: that op taking a store as operand ``k``)
      is read as that store, made again where it is read: inside a band
      group each band computes its own rows of it, so the reader need not
      wait for the value, which still waits for its own readers. JAX's own
      elementwise arithmetic between them (``g / s`` for the VJP of
      ``log(sum(e, 1))``) follows as ops of ours on those stores
      (``lift(name, params, avals, out)``: the op and the order it takes
      the equation's operands in, or None).
    * In a whole program (lowered outside any trace: its outputs go back
      to Python, which claims them), the value ops still waiting at the end
      also take the stores of ``is_ours``'s ops that the program returns
      (``merge(prims, avals)``: extra operands; with no value op waiting,
      ``merge([], avals)`` is an op of no outputs), so that they are computed
      in one pass with the values, not each on its own when claimed: the
      forward program of ``jax.grad(jax.jit(loss))`` returns its residuals
      (``X @ w``, ...) beside the loss. A program lowered inside another's
      lowering returns its stores to that program, which may still fuse
      them: they stay as they are.
    * First of all, an op that ``pure(prim)`` says computes its outputs from
      its operands alone, met again with an equal primitive on the same
      operands, is computed once (``X * w - mean(X * w)`` traces ``X * w``
      twice): its later copies' readers read the first's outputs. Not
      across an op that ``mutates`` or a nested program (either may change
      a store between the two). Then the other rewrites see one value where
      the user wrote one value twice.
    * Then a centred second moment written out, ``sum(square(x -
      mean(x)))`` (``centred(reduce, square, sub, mean)``, the four ops'
      primitives: the op computing it from ``x`` alone, or None), is computed
      from ``x`` in one pass (Chan's (count, mean, M2) partials), so it need
      not wait for the mean; its gradient reads ``x - mean(x)`` linearly
      (``2 g (x - m)``), which the step above takes the mean out of.
    * Last, a ``mutates`` op is given the values of ``is_ours``'s ops made
      earlier in this jaxpr and never read again (``forgetting(prim,
      avals)``: the op with those as extra operands), so that it need not
      compute them from the values it is about to overwrite.

    Results are cached per jaxpr, so a jaxpr is lowered (and its ops
    planned) once, as before.
    """
    import weakref

    from jax._src.interpreters import partial_eval as pe

    original = pe.lower_jaxpr
    if getattr(original, "_rewrites_for", None) is not None:
        return
    done: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def rewrite(hi_jaxpr, whole: bool):
        if not any(is_ours(hi_primitive(e)) for e in hi_jaxpr.jaxpr.eqns):
            return hi_jaxpr
        jaxpr, _ = pe.dce_jaxpr(hi_jaxpr.jaxpr, [True] * len(hi_jaxpr.jaxpr.outvars),
                                instantiate=True)
        jaxpr = _common_values(jaxpr, pure, mutates)
        moments = _centred_moments(jaxpr, centred, unread)
        if moments is not jaxpr:
            jaxpr, _ = pe.dce_jaxpr(moments, [True] * len(moments.outvars), instantiate=True)
        returned = _returned_stores(jaxpr, is_ours) if whole else []
        excluded: frozenset = frozenset()
        while True:
            try:
                jaxpr = _defer(jaxpr, movable, mutates, merge, returned, linear,
                               (as_store, reading_store, lift), broadcast, excluded, widen)
                break
            except _NotLinear as err:  # a term reached a reader that is not linear in it:
                if not err.origins or err.origins <= excluded:  # again without its makers
                    jaxpr = _defer(jaxpr, movable, mutates, merge, returned,
                                   row_stores=(as_store, reading_store, lift))
                    break
                excluded |= err.origins
        jaxpr = _forget_before_mutations(jaxpr, is_ours, mutates, forgetting)
        return core.ClosedJaxpr(jaxpr, hi_jaxpr.consts)

    def rewritten(hi_jaxpr, whole: bool):
        try:
            return done[hi_jaxpr][whole]
        except (KeyError, TypeError):
            lean = rewrite(hi_jaxpr, whole)
            try:
                done.setdefault(hi_jaxpr, {})[whole] = lean
            except TypeError:  # not weakly referenceable: rewrite again next time
                pass
            return lean

    def lower_jaxpr(hi_jaxpr, lo_avals):
        whole = is_eager()  # a program of its own, not one nested in another's lowering
        lean = rewritten(hi_jaxpr, whole)
        if refused is not None:
            _refuse_hi_operands_of_lo_primitives(lean.jaxpr, refused)
        return original(lean, lo_avals)

    lower_jaxpr._rewrites_for = is_ours  # type: ignore[attr-defined]
    lower_jaxpr._rewritten = rewritten  # type: ignore[attr-defined]
    pe.lower_jaxpr = lower_jaxpr  # type: ignore[assignment]


def rewritten_jaxpr(hi_jaxpr, whole: bool = True):
    """``hi_jaxpr`` as :func:`prune_before_lowering`'s rewrite leaves it before
    lowering (cached with the lowering's own), ``whole``: a program of its
    own; ``hi_jaxpr`` itself before any rewrite was installed."""
    from jax._src.interpreters import partial_eval as pe

    rewritten = getattr(pe.lower_jaxpr, "_rewritten", None)
    return hi_jaxpr if rewritten is None else rewritten(hi_jaxpr, whole)


def _common_values(jaxpr, pure, mutates):
    """The jaxpr with each equation of a ``pure`` primitive that repeats an
    earlier one (an equal primitive on the same operands, no op that
    ``mutates`` nor nested program between them) read through the earlier
    one's outputs, or ``jaxpr`` itself (see :func:`prune_before_lowering`;
    the copies are left to dead-code elimination)."""
    seen: dict = {}
    same: dict = {}  # a later copy's output -> the first's
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [same.get(v, v) if isinstance(v, core.Var) else v for v in eqn.invars]
        if invars != list(eqn.invars):
            eqn = eqn.replace(invars=invars)
        eqns.append(eqn)
        prim = hi_primitive(eqn)
        if (prim is not None and mutates(prim)) or (prim is None and _holds_program(eqn)):
            seen.clear()
            continue
        if prim is None or not pure(prim):
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


def _centred_moments(jaxpr, centred, unread=lambda prim: ()):
    """The jaxpr with each ``reduce(square(x - mean(x)))`` equation whose
    four ops ``centred`` recognises by the op it names reading ``x`` (see
    :func:`prune_before_lowering`), or ``jaxpr`` itself. The square and the
    difference stay for their other readers (the backward pass), or go with
    the dead code; an op reading the square only for its type (``unread(prim)``:
    the positions of such operands; a mean's VJP) is given ``x`` instead,
    which is of the same type and ready sooner."""
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


def _refuse_hi_operands_of_lo_primitives(jaxpr, refused) -> None:
    """Raise ``NotImplementedError(refused(name))`` for a primitive JAX
    lowers without hi types that takes a hi-typed operand (jax 0.10's
    ``lower_jaxpr`` fails on it with ``AttributeError: ... 'val'``): a
    ``custom_linear_solve`` (``jax.scipy.sparse.linalg.cg``) whose matrix
    closes over a DiskArray, for one."""
    for eqn in jaxpr.eqns:
        if not any(isinstance(v, core.Var) and v.aval.is_high for v in eqn.invars):
            continue
        if not eqn.primitive.is_high(*[v.aval for v in eqn.invars], **eqn.params):
            raise NotImplementedError(refused(eqn.primitive.name))


def _holds_program(eqn) -> bool:
    """Whether an equation runs a jaxpr of its own (jit, cond, scan, ...)."""
    return bool(_programs(eqn))


def _returned_stores(jaxpr, is_ours) -> list:
    """The hi-typed outputs of a jaxpr that ``is_ours``'s ops made (stores
    the caller will claim), each once."""
    made = {v for e in jaxpr.eqns if is_ours(hi_primitive(e)) for v in e.outvars}
    out: list = []
    for v in jaxpr.outvars:
        if isinstance(v, core.Var) and v in made and v.aval.is_high and v not in out:
            out.append(v)
    return out


def _defer(jaxpr, movable, mutates, merge, returned=(), linear=lambda prim: (),
           row_stores=(lambda prim: None, lambda prim, k: None,
                       lambda name, params, avals, out: None),
           broadcast=lambda prim, k: None, excluded=frozenset(), widen=lambda prim: prim):
    """See :func:`prune_before_lowering`: move value ops to their first
    reader; those waiting at the end also take the ``returned`` stores.

    In-memory arithmetic on a waiting value (``sum(r * r) * (1 / n)``, the
    sum of two reductions, a penalty added to one) waits with it: it is pure
    and XLA's own, so it can run after the merged op as well as before, and
    only an op of ours that reads its result (or a barrier) needs it now.
    Left in place it would be the value's first reader, and the forward
    reductions of ``value_and_grad`` would run before the backward ones
    exist: two passes over the data where one suffices. A waiting scalar
    read linearly is taken out of the ops reading it (:func:`_linear_terms`).
    """
    eqns: list = []
    held: list = []
    after: list = []  # pure in-memory equations reading held values, in order
    restoring: set = set()  # those of after restoring a result from its terms (their ids)
    waiting: set = set()  # outputs of held and after equations
    scale_of: dict = {}  # a store -> [(unit, scalar)]: it is the sum of scalar * unit
    unit_of: dict = {}  # a waiting in-memory value -> (it with 1 for its scalar, the scalar)
    made_by: dict = {}  # a held op's one output -> its equation
    made_after: dict = {}  # a waiting value of JAX's arithmetic -> its equation
    store_of: dict = {}  # a waiting row-wise value -> the store made again for its readers
    as_store, reading_store, lift = row_stores

    def store_version(v, template):
        """The store a waiting row-wise value is made again as (its op's, or
        JAX's arithmetic on such values lifted to ours), or None."""
        if v in store_of:
            return store_of[v]
        if v in made_by:
            made = made_by[v]
            maker = as_store(hi_primitive(made))
            if maker is None:
                return None
            store_of[v] = core.Var(maker.out_aval)
            eqns.append(made.replace(outvars=[store_of[v]], params=dict(_prim=maker)))
            return store_of[v]
        made = made_after.get(v)
        if made is None:
            return None
        invars = []
        for u in made.invars:
            if isinstance(u, core.Var) and u in waiting:
                u = store_version(u, template)
                if u is None:
                    return None
            invars.append(u)
        lifted = lift(made.primitive.name, made.params, [u.aval for u in invars], v.aval)
        if lifted is None:
            return None
        maker, order = lifted
        store_of[v] = core.Var(maker.out_aval)
        eqns.append(template.replace(invars=[invars[k] for k in order], outvars=[store_of[v]],
                                     params=dict(_prim=maker)))
        return store_of[v]

    def as_read_from_stores(eqn, prim):
        """The equation reading the waiting row-wise values it can as stores."""
        invars = list(eqn.invars)
        for k, v in enumerate(invars):
            if not (isinstance(v, core.Var) and v in waiting
                    and (v in made_by or v in made_after)):
                continue
            reader = reading_store(prim, k)
            if reader is None:
                continue
            store = store_version(v, eqn)
            if store is None:
                continue
            invars[k], prim = store, reader
        if prim is hi_primitive(eqn):
            return eqn, prim
        return eqn.replace(invars=invars, params=dict(_prim=prim)), prim

    hoisted: set = set()  # positions of later value ops moved into an earlier group
    at = [0]  # the position being placed

    def hoist() -> None:
        """Later value ops reading only stores the held ops read, and nothing
        made since (``X.std(0)`` after ``X - X.mean(0)``), join the group run
        now: the same pass gives their values. Up to a barrier; never one
        that reads a waiting value or a store made of terms."""
        stores = {v for e in held for v in e.invars
                  if isinstance(v, core.Var) and getattr(v.aval, "is_high", False)}
        if not stores:
            return
        ready = set(jaxpr.invars) | set(jaxpr.constvars) | {
            v for e in eqns for v in e.outvars}
        for j in range(at[0] + 1, len(jaxpr.eqns)):
            later = jaxpr.eqns[j]
            prim = hi_primitive(later)
            if (later.effects or (prim is not None and mutates(prim))
                    or (prim is None and _holds_program(later)
                        and not _is_pure_arithmetic(later))):
                break
            if prim is None or j in excluded or j in hoisted or not movable(prim):
                continue
            operands = [v for v in later.invars if isinstance(v, core.Var)]
            high = [v for v in operands if getattr(v.aval, "is_high", False)]
            if (high and all(v in stores for v in high)
                    and all(v in ready and v not in scale_of for v in operands)):
                held.append(later)
                hoisted.add(j)

    def flush(keep=()):
        if held and not keep:
            hoist()
        outs = [v for e in held for v in e.outvars]
        post, rest = _host_arithmetic(outs, after, restoring)
        if len(held) == 1 and not keep and not post:
            eqns.append(held[0])
        elif held:
            extra = (post[0],) if post else ()
            prim = merge([hi_primitive(e) for e in held], [v.aval for v in keep], *extra)
            eqns.append(held[-1].replace(invars=[v for e in held for v in e.invars] + list(keep),
                                         outvars=outs + (post[1] if post else []),
                                         params=dict(_prim=prim)))
            after[:] = rest
        elif keep:  # no value op waits: the stores alone, one op of no outputs
            made = next(e for e in reversed(eqns) if hi_primitive(e) is not None)
            eqns.append(made.replace(invars=list(keep), outvars=[],
                                     params=dict(_prim=merge([], [v.aval for v in keep]))))
        eqns.extend(after)
        held.clear()
        after.clear()
        restoring.clear()
        waiting.clear()
        made_by.clear()
        made_after.clear()
        store_of.clear()

    def place(eqn, prim):
        reads = any(isinstance(v, core.Var) and v in waiting for v in eqn.invars)
        if prim is not None and movable(prim):
            if reads:  # it needs a waiting value: those run first
                flush()
            held.append(eqn)
            waiting.update(eqn.outvars)
            if len(eqn.outvars) == 1:
                made_by[eqn.outvars[0]] = eqn
            return
        if reads and prim is None and _is_pure_arithmetic(eqn):
            unit = _unit_copy(eqn, waiting, unit_of)
            if unit is not None:  # it with 1 for the scalar reads nothing waiting: now
                eqns.append(unit)
            after.append(eqn)
            waiting.update(eqn.outvars)
            if len(eqn.outvars) == 1:
                made_after[eqn.outvars[0]] = eqn
            return
        barrier = (eqn.effects or (prim is not None and mutates(prim))
                   or (prim is None and _holds_program(eqn) and not _is_pure_arithmetic(eqn)))
        if reads or barrier:
            flush()
        eqns.append(eqn)

    origins: dict = {}  # a store made as terms -> the positions of the ops that made them

    def made_them(vs) -> frozenset:
        return frozenset().union(*(origins.get(v, ()) for v in vs if isinstance(v, core.Var)))

    for i, eqn in enumerate(jaxpr.eqns):
        if i in hoisted:
            continue  # placed already, in an earlier group
        at[0] = i
        prim = hi_primitive(eqn)
        if prim is not None and (made_by or made_after):
            eqn, prim = as_read_from_stores(eqn, prim)
        if prim is not None and i not in excluded:
            terms = _linear_terms(eqn, linear(prim), waiting, scale_of, unit_of,
                                  lambda k, prim=prim: broadcast(prim, k))
            if terms is not None:
                copies, restore = _distributed(eqn, *terms, scale_of, widen)
                for v in eqn.outvars:
                    if v in scale_of:
                        origins[v] = made_them(eqn.invars) | {i}
                for copy in copies:
                    place(copy, hi_primitive(copy))
                after.extend(restore)
                restoring.update(id(e) for e in restore)
                waiting.update(v for e in restore for v in e.outvars)
                continue
        if any(isinstance(v, core.Var) and v in scale_of for v in eqn.invars):
            raise _NotLinear(made_them(eqn.invars))  # it would read one term of a store
        place(eqn, prim)
    if any(isinstance(v, core.Var) and v in scale_of for v in jaxpr.outvars):
        raise _NotLinear(made_them(jaxpr.outvars))
    flush(returned)
    if len(eqns) == len(jaxpr.eqns) and all(a is b for a, b in zip(eqns, jaxpr.eqns)):
        return jaxpr
    return jaxpr.replace(eqns=eqns)


#: JAX's arithmetic a merged op finishes on the host, in float64 (``merge``'s
#: ``post``): the sums of terms that restore a result whose scalars were taken
#: out (:func:`_distributed`), which cancel when a scalar is a mean.
_HOST = ("mul", "add", "add_any", "sub", "neg", "convert_element_type")


def _host_arithmetic(outs, after, restoring=frozenset()):
    """The equations of ``after`` that restore a result from its terms
    (``restoring``: their ids) or compute what those read, computable from
    the merged op's ``outs`` and numbers alone by :data:`_HOST`'s
    arithmetic, as ``((description, outvars), the others)`` (``((), [])``
    and ``after`` when there are none): each description ``(name, operands,
    shape, dtype)``, an operand ``("value", k)`` (``outs`` first, then the
    descriptions' results) or ``("number", x)``. Any other arithmetic on
    the values (``sum(r * r) * (1 / n)``) stays JAX's, in the values' own
    dtype, as written."""
    needed: set = set()  # the restoring equations and those computing what they read
    for eqn in reversed(after):
        if id(eqn) in restoring or any(v in needed for v in eqn.outvars):
            needed.update(v for v in (*eqn.outvars, *eqn.invars) if isinstance(v, core.Var))
    index = {v: k for k, v in enumerate(outs)}
    described: list = []
    outvars: list = []
    rest: list = []
    for eqn in after:
        operands: list | None = []
        out = eqn.outvars[0] if len(eqn.outvars) == 1 else None
        if (eqn.primitive.name not in _HOST or out is None or out not in needed
                or isinstance(out, core.DropVar)
                or getattr(out.aval, "is_high", False)
                or not np.issubdtype(out.aval.dtype, np.floating)
                or not any(isinstance(v, core.Var) and v in index for v in eqn.invars)):
            operands = None
        for v in eqn.invars if operands is not None else ():
            if isinstance(v, core.Literal) and np.shape(v.val) == ():
                operands.append(("number", float(np.asarray(v.val))))
            elif isinstance(v, core.Var) and v in index:
                operands.append(("value", index[v]))
            else:
                operands = None
                break
        if operands is None:
            rest.append(eqn)
            continue
        index[out] = len(outs) + len(described)
        described.append((eqn.primitive.name, tuple(operands), tuple(out.aval.shape),
                          np.dtype(out.aval.dtype)))
        outvars.append(out)
    if not described:
        return (), after
    return (tuple(described), outvars), rest


def _unit(v, waiting, unit_of):
    """(``v`` with 1 for its scalar, the scalar) for a waiting value: a
    waiting float scalar is its own, with unit 1; None if it has none."""
    if v in unit_of:
        return unit_of[v]
    if (v in waiting and not getattr(v.aval, "is_high", False)
            and getattr(v.aval, "shape", None) == ()
            and np.issubdtype(v.aval.dtype, np.floating)):
        return core.Literal(np.ones((), v.aval.dtype), v.aval), v
    return None


def _linear_terms(eqn, groups, waiting, scale_of, unit_of, broadcast_of=lambda k: None):
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
    return (getattr(b.aval, "is_high", False) and a.aval.shape == b.aval.shape
            and a.aval.dtype == b.aval.dtype)


#: JAX's primitives linear in the operand positions given (None: in all of
#: them together), the others fixed.
_LINEAR = {"mul": 1, "dot_general": 1, "div": (0,), "add": None, "sub": None, "add_any": None,
           "neg": None, "convert_element_type": None, "broadcast_in_dim": None,
           "reshape": None, "reduce_sum": None, "transpose": None, "squeeze": None,
           "expand_dims": None, "copy": None, "copy_p": None}


def _unit_copy(eqn, waiting, unit_of):
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


class _NotLinear(Exception):
    """A store made as terms (:func:`_distributed`) reaches a reader that is
    not linear in it, or the program's outputs: :func:`_defer` starts again
    with the ops that made those terms (``origins``, positions in the jaxpr)
    left as they are (``r - m`` before a square runs once ``m`` is known),
    or without taking scalars out at all."""

    def __init__(self, origins: frozenset):
        super().__init__(sorted(origins))
        self.origins = origins


def _distributed(eqn, group, terms, scale_of, widen=lambda prim: prim):
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
        outvars = [v if n == 0 and len(terms[k]) == 1 and getattr(v.aval, "is_high", False)
                   else core.Var(v.aval) for v in eqn.outvars]
        prim = hi_primitive(eqn) if len(terms[k]) == 1 else widen(hi_primitive(eqn))
        copies.append(eqn.replace(invars=invars, outvars=outvars, params=dict(_prim=prim)))
        for j, v in enumerate(outvars):
            outs[j].append((v, scalar))
    for v, pieces in zip(eqn.outvars, outs):
        if isinstance(v, core.DropVar):
            continue
        if getattr(v.aval, "is_high", False):
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


def _is_pure_arithmetic(eqn) -> bool:
    """Whether an equation is JAX's own computation on in-memory values:
    no effects, no hi-typed value in or out, and no hijax primitive in the
    programs it holds (``jnp.mean`` of an array in memory, ``jax.nn``'s
    custom derivatives), so moving it later in program order changes
    nothing but when it runs."""
    if eqn.effects or hi_primitive(eqn) is not None:
        return False
    if any(getattr(v.aval, "is_high", False) for v in (*eqn.invars, *eqn.outvars)):
        return False
    return all(_is_pure_arithmetic(e) for sub in _programs(eqn) for e in sub.eqns)


def _programs(eqn) -> list:
    """The jaxprs an equation holds (jit, cond, scan, custom derivatives)."""
    found: list = []
    for v in eqn.params.values():
        for item in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(item, core.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, core.Jaxpr):
                found.append(item)
    return found


def _forget_before_mutations(jaxpr, is_ours, mutates, forgetting):
    """See :func:`prune_before_lowering`: hand each mutating op the values
    made by ``is_ours``'s ops before it that nothing reads after it."""
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
                                  params=dict(_prim=forgetting(prim, [v.aval for v in dead])))
                made = [(v, j) for v, j in made if v not in set(dead)]
        eqns.append(eqn)
        if is_ours(prim):
            made += [(v, i) for v in eqn.outvars  # hi-typed: stores, maybe pending
                     if isinstance(v, core.Var) and not isinstance(v, core.DropVar)
                     and v.aval.is_high]
    return jaxpr.replace(eqns=eqns)


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
