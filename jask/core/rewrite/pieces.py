"""A jitted step run as compiled pieces with its band groups streamed between them.

Under ``jax.jit`` each band group of a step (the value ops that
``prune_before_lowering`` merged into one ``Together``) runs inside an
ordered ``io_callback`` of the compiled program. Tiles must not reach the
chip from there: pulled through callback results they moved at 0.73 GB/s,
and device work launched from inside a callback moved at 0.87 GB/s and is
forbidden by JAX's docs (hangs are reported, jax#24720), where a host loop
of ``device_put`` and compiled partials reached 13.8 GB/s
(``shared/design.md``).

So when a device is configured, a jitted call made outside any trace
(``jax.jit(step)(w, X, y)`` as users write it) whose rewritten jaxpr holds
a band group at its top level is taken over here (:func:`take_over_jit`,
at JAX's hi-to-lo step of ``jit``): :func:`split` cuts the jaxpr at each of
jask's equations, each run of JAX's own equations between them becomes one
compiled program (cached with the split), and :func:`run_split` runs the
pieces in order on the host: a program piece as a compiled call, jask's
equations as eager calls (an op making a store is recorded, a band group
runs as one group streamed to the device by
:class:`jask.core.device_groups.OnDevice`, its values left as ``jax.Array``).
The values are those of the compiled program: the same rewritten jaxpr,
its ops in program order.

A loop of the step (``lax.scan``, ``lax.while_loop``; ``lax.fori_loop``
is one of them) whose body holds a band group is one piece of its own, run
on the host as a Python loop (:class:`Loop`): its body rewritten as JAX
lowers a nested program and split the same way, once, its condition (a
``while``'s) a split of its own whose boolean comes back once an
iteration, the carry passed along as ``jax.Array`` values; a ``scan``'s
``xs`` sliced and its ``ys`` stacked. A loop inside such a body is split
in turn.

A ``cond`` (``lax.cond``, ``lax.switch``) any of whose branches holds a
band group is one piece too (:class:`Choice`): its index, computed by the
pieces before it, comes back and the chosen branch's split runs. A nested
call holding jask's ops (a jitted helper, ``jax.checkpoint``) is written
out in place first (:mod:`.inline`), so its band group merges with the
step's and is cut like one written in it. A jitted call under an eager
transformation (``jax.grad(jax.jit(f))``, ``jax.vmap(jax.jit(f))``) reaches
the hook as eager jitted calls (grad's forward program, then its backward
one), each split the same way.

Anything else keeps the compiled program: a step without a band group (at
its top level, in a loop's body or a branch), a scan over a store's rows,
or no device configured.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from jask.base.config import get_config
from jask.core import device as on_device
from jask.core._jax_internals import hi_primitive, is_eager, jit_primitive
from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.inline import inlined
from jask.core.rewrite.prune import rewritten_jaxpr

__all__ = ["Choice", "Loop", "Piece", "Split", "prepared", "split", "run_split", "take_over_jit"]


#: What :func:`take_over_jit` was told: ``ours(prim)`` (a primitive of jask's)
#: and ``group(prim)`` (one that is a band group: value ops run together).
_rules: dict = {"ours": lambda prim: False, "group": lambda prim: False}


def _holds_ours(eqn) -> bool:
    """Whether an equation is one of jask's or holds one (a nested program)."""
    if _rules["ours"](hi_primitive(eqn)):
        return True
    return any(_holds_ours(e) for sub in core.jaxprs_in_params(eqn.params) for e in sub.eqns)


def _is_group(eqn) -> bool:
    return bool(_rules["group"](hi_primitive(eqn)))


def _holds_ours_in(jaxpr) -> bool:
    return any(_holds_ours(e) for e in jaxpr.eqns)


def prepared(closed, whole: bool):
    """``closed`` ready to split: its nested calls holding jask's ops
    written out in place (:func:`.inline.inlined`: a jitted helper's band
    group then merges with the step's and is cut like one written in it),
    then rewritten as JAX lowers it (``whole``: a program of its own)."""
    if not isinstance(closed, core.ClosedJaxpr):  # a loop's open body
        closed = core.ClosedJaxpr(closed, [])
    return rewritten_jaxpr(inlined(closed, _holds_ours_in), whole)


@dataclass(frozen=True)
class Piece:
    """One piece of a split step: ``kind`` "program" (JAX's own equations,
    compiled as one: ``call`` takes ``reads``' values, returns ``writes``'),
    "loop" (a :class:`Loop`, called the same way), "cond" (a :class:`Choice`,
    likewise) or "eqn" (one of jask's equations, or one holding them, called
    eagerly)."""

    kind: str
    reads: tuple
    writes: tuple
    call: object


@dataclass(frozen=True)
class Split:
    """A jaxpr as pieces run in order; ``groups``: how many of them are band groups."""

    jaxpr: core.ClosedJaxpr
    pieces: tuple
    groups: int


def _program(eqns: list, later: set) -> Piece:
    """JAX's own equations as one compiled program reading what they do not
    define and returning what ``later`` (equations after them and the
    outputs) reads."""
    defined = {v for e in eqns for v in e.outvars}
    reads: list = []
    for e in eqns:
        for v in e.invars:
            if isinstance(v, core.Var) and v not in defined and v not in reads:
                reads.append(v)
    writes = [v for e in eqns for v in e.outvars
              if v in later and not isinstance(v, core.DropVar)]
    effects = core.join_effects(*(e.effects for e in eqns))
    jaxpr = core.Jaxpr([], reads, writes, eqns, effects)
    return Piece("program", tuple(reads), tuple(writes),
                 jax.jit(core.jaxpr_as_fun(core.ClosedJaxpr(jaxpr, []))))


def _reads_after(eqns: list, outvars: list) -> list:
    """For each position i, the variables read by equations from i on or by the outputs."""
    after: list = [None] * (len(eqns) + 1)
    seen = {v for v in outvars if isinstance(v, core.Var)}
    after[len(eqns)] = set(seen)
    for i in range(len(eqns) - 1, -1, -1):
        seen |= {v for v in eqns[i].invars if isinstance(v, core.Var)}
        after[i] = set(seen)
    return after


@dataclass(frozen=True)
class Loop:
    """A ``scan`` or ``while`` equation run on the host as a Python loop of
    split pieces: ``body`` its body's :class:`Split`, ``cond`` a ``while``'s
    condition's (None for a ``scan``), ``params`` the equation's."""

    kind: str
    body: Split
    cond: Split | None
    params: dict

    def __call__(self, *args):
        return self._scan(args) if self.kind == "scan" else self._while(args)

    def _scan(self, args) -> list:
        p = self.params
        consts = list(args[:p["num_consts"]])
        carry = list(args[p["num_consts"]:p["num_consts"] + p["num_carry"]])
        xs = args[p["num_consts"] + p["num_carry"]:]
        length = p["length"]
        order = range(length - 1, -1, -1) if p["reverse"] else range(length)
        ys: list = []
        for i in order:
            outs = _run(self.body, consts + carry + [x[i] for x in xs])
            carry, y = list(outs[:p["num_carry"]]), outs[p["num_carry"]:]
            ys.append(y)
        if p["reverse"]:
            ys.reverse()
        avals = [v.aval for v in self.body.jaxpr.jaxpr.outvars[p["num_carry"]:]]
        stacked = [jnp.stack([y[k] for y in ys]) if ys
                   else jnp.zeros((0, *a.shape), a.dtype) for k, a in enumerate(avals)]
        return carry + stacked

    def _while(self, args) -> list:
        p = self.params
        cond_consts = list(args[:p["cond_nconsts"]])
        start = p["cond_nconsts"] + p["body_nconsts"]
        body_consts = list(args[p["cond_nconsts"]:start])
        carry = list(args[start:])
        assert self.cond is not None
        while bool(_run(self.cond, cond_consts + carry)[0]):  # one boolean back
            carry = list(_run(self.body, body_consts + carry))
        return carry


@dataclass(frozen=True)
class Choice:
    """A ``cond`` equation decided on the host: its index (computed before,
    by an earlier piece) brought back, then the chosen branch's
    :class:`Split` run on the operands. ``lax.cond`` runs one branch, so
    running only that one computes what the compiled program would,
    effects included; a ``cond`` batched by ``vmap`` on its predicate is
    a ``select`` of both branches by then, and never reaches here."""

    branches: tuple

    def __call__(self, index, *operands):
        chosen = min(max(int(index), 0), len(self.branches) - 1)  # clamped as lax.switch's
        return _run(self.branches[chosen], list(operands))


def _choice(eqn) -> Choice | None:
    """A ``cond`` equation any of whose branches (each rewritten as JAX
    lowers a nested program) holds a band group, as a :class:`Choice`;
    None for any other equation."""
    if eqn.primitive.name != "cond":
        return None
    branches = tuple(split(prepared(b, False)) for b in eqn.params["branches"])
    return Choice(branches) if any(b.groups for b in branches) else None


def _loop(eqn) -> Loop | None:
    """A loop equation whose body (rewritten as JAX lowers a nested program)
    holds a band group, as a :class:`Loop`; None for any other equation, and
    for a scan over a store's rows (its ``xs`` are not in memory)."""
    params = dict(eqn.params)
    if eqn.primitive.name == "scan":
        xs = eqn.invars[params["num_consts"] + params["num_carry"]:]
        if not all(isinstance(v.aval, core.ShapedArray) for v in xs):
            return None
        body, cond = split(prepared(params["jaxpr"], False)), None
    elif eqn.primitive.name == "while":
        body = split(prepared(params["body_jaxpr"], False))
        cond = split(prepared(params["cond_jaxpr"], False))
    else:
        return None
    if not body.groups:
        return None
    return Loop(eqn.primitive.name, body, cond, params)


def split(closed: core.ClosedJaxpr) -> Split:
    """``closed`` (a rewritten step) cut at each of jask's equations: the runs
    of JAX's equations between them each one compiled :class:`Piece`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> s = split(jax.make_jaxpr(lambda x: jnp.sin(x) * 2)(1.0))
      >>> [p.kind for p in s.pieces], s.groups
      (['program'], 0)
    """
    eqns = list(closed.jaxpr.eqns)
    after = _reads_after(eqns, closed.jaxpr.outvars)
    pieces: list = []
    run: list = []
    start = 0
    groups = 0
    for i, eqn in enumerate(eqns):
        if not _holds_ours(eqn):
            if not run:
                start = i
            run.append(eqn)
            continue
        if run:
            pieces.append(_program(run, after[start + len(run)]))
            run = []
        nested = hi_primitive(eqn) is None
        loop = _loop(eqn) if nested else None
        if loop is not None:
            groups += loop.body.groups + (loop.cond.groups if loop.cond else 0)
            pieces.append(Piece("loop", tuple(eqn.invars), tuple(eqn.outvars), loop))
            continue
        choice = _choice(eqn) if nested else None
        if choice is not None:
            groups += sum(b.groups for b in choice.branches)
            pieces.append(Piece("cond", tuple(eqn.invars), tuple(eqn.outvars), choice))
            continue
        groups += _is_group(eqn)
        pieces.append(Piece("eqn", tuple(eqn.invars), tuple(eqn.outvars), eqn))
    if run:
        pieces.append(_program(run, after[start + len(run)]))
    return Split(closed, tuple(pieces), groups)


def _value(env: dict, v):
    return v.val if isinstance(v, core.Literal) else env[v]


def run_split(done: Split, args) -> list:
    """The step's outputs: its pieces run in order on ``args`` (eagerly:
    jask's equations as eager calls, loops as Python loops, the rest as
    compiled programs)."""
    return _run(done, args)


def _run(done: Split, args) -> list:
    jaxpr = done.jaxpr.jaxpr
    env: dict = dict(zip(jaxpr.constvars, done.jaxpr.consts))
    env.update(zip(jaxpr.invars, args))
    for piece in done.pieces:
        ins = [_value(env, v) for v in piece.reads]
        if piece.kind != "eqn":
            outs = piece.call(*ins)
        else:
            eqn = piece.call
            outs = eqn.primitive.bind(*ins, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, x in zip(piece.writes, outs):
            if not isinstance(v, core.DropVar):
                env[v] = x
    return [_value(env, v) for v in jaxpr.outvars]


#: Splits by the jaxpr a jitted call traced (a jitted step called again
#: finds its pieces compiled).
_splits: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _split_of(hi_jaxpr) -> Split | None:
    try:
        return _splits[hi_jaxpr]
    except KeyError:
        pass
    except TypeError:  # not weakly referenceable: not cached
        return _worth(split(prepared(hi_jaxpr, True)))
    done = _worth(split(prepared(hi_jaxpr, True)))
    _splits[hi_jaxpr] = done
    return done


def _worth(done: Split) -> Split | None:
    return done if done.groups else None


def take_over_jit(ours, group) -> None:
    """Have an eager jitted call holding a band group at its top level run
    as :func:`split` pieces when a device is configured (see the module's
    docstring); every other call as JAX compiles it. ``ours(prim)``: a
    primitive of jask's; ``group(prim)``: one that is a band group.
    Installed once."""
    _rules.update(ours=ours, group=group)
    original = jit_primitive().to_lojax
    if getattr(original, "_splits_for_device", False):
        return

    def to_lojax(*hi_args, jaxpr, **params):
        if (is_eager() and on_device.target(get_config()) is not None
                and not any(getattr(a, "has_qdd", False) for a in jaxpr.in_aval_qdds)):
            done = _split_of(jaxpr)
            if done is not None:
                return run_split(done, hi_args)
        return original(*hi_args, jaxpr=jaxpr, **params)

    to_lojax._splits_for_device = True  # type: ignore[attr-defined]
    jit_primitive().to_lojax = to_lojax
