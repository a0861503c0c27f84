"""The base every primitive shares: :class:`DiskPrimitive` and the small
helpers of avals, zeros, accumulators and batch axes its families use.

An op family's module (``gathers.py``, ...) imports this and nothing of the
package's ``__init__``, which imports the families: the package's imports
form no cycle.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar

import jax
import numpy as np
from jax.dtypes import canonicalize_dtype
from jax.experimental.hijax import ShapedArray, VJPHiPrimitive, Zero

from jask.base.config import Config, get_config
from jask.core import dispatch
from jask.core._jax_internals import ignoring_cotangent, is_accumulator, wants_cotangent
from jask.core.array import VMAP_UNSUPPORTED, DiskArrayType
from jask.engine import lazy, work
from jask.engine.plan import Plan


def _accum(accum, make) -> None:
    """Add a cotangent to an input's accumulator, computing it only if wanted."""
    if wants_cotangent(accum):
        accum.accum(make())


def _on_disk(aval) -> bool:
    return isinstance(aval, DiskArrayType)


def _aval(x):
    return jax.typeof(x)


CHECKPOINT_UNSUPPORTED = (
    "jask.{op}: differentiating this op inside jax.checkpoint (jax.remat, flax's nn.remat) "
    "is not supported: JAX then transposes its tangent, and jask has no transpose for it. "
    "Call the function without jax.checkpoint: jask keeps a gradient's residuals over "
    "DiskArrays on disk, not in memory, so checkpointing them saves no memory")


class _Undefined:
    """An input a transposition leaves undefined (the op is linear in it):
    its value is never read, only its cotangent computed."""

    def __repr__(self):
        return "<undefined: a linear input being transposed>"


UNDEFINED = _Undefined()


COMPLEX_DERIVATIVES = (
    "jask.{op}: derivatives through complex values are not supported (jax.grad, jax.jvp and "
    "their kin of an op with a complex operand or result): jask's derivative rules are "
    "written for real numbers. Take the derivative in the real and imaginary parts as two "
    "real arrays, or in jax.numpy on data that fits in memory")


class DiskPrimitive(VJPHiPrimitive):
    """Base: set the avals and hashable params, then let hijax check them.

    An op's family module subclasses it with its forward (``expand``, its
    ``disk_work``), ``tangent``, ``backward`` and ``batched``; what it does
    not define is refused here, naming the op (never a silent fallback)."""

    #: ``filled(value, out, config)``: ``value`` everywhere in a result of
    #: type ``out`` (a store of it is :func:`jask.core.primitives.elementwise.full`,
    #: a Blockwise): set by :mod:`~jask.core.primitives.elementwise`, which
    #: builds on this module, for every op's result over operands with no
    #: elements (:meth:`_run`); the families import elementwise directly.
    filled: ClassVar[Callable[[Any, Any, Config | None], Any]]

    def __init__(self, in_avals, out_aval, **params):
        self.in_avals = tuple(in_avals)
        self.out_aval = out_aval
        self.params = params
        super().__init__()

    def vjp_fwd(self, nzs_in, *args):
        self.check_real(nzs_in)
        return self(*args), args

    def check_real(self, nzs) -> None:
        """Refuse a derivative through complex values: jask's rules are written
        for real numbers (no conjugates, no real parts of cotangents), and an
        answer of the wrong sign or part is worse than none."""
        if not any(bool(nz) for nz in jax.tree.leaves(nzs)):
            return
        outs = self.out_aval if isinstance(self.out_aval, tuple) else (self.out_aval,)
        kinds = [np.dtype(a.dtype).kind for a in self.in_avals + outs if hasattr(a, "dtype")]
        if "c" in kinds:
            raise NotImplementedError(COMPLEX_DERIVATIVES.format(
                op=self.params.get("op", type(self).__name__)))

    # --- forward mode: jax.jvp, jax.linearize (and jvp(grad): forward over reverse) ----
    def jvp(self, primals, tangents):
        self.check_real(tuple(not isinstance(t, Zero) for t in tangents))
        out = self(*primals)
        return out, self._tangent_or_zeros(primals, out, tangents)

    def lin(self, nzs_in, *primals):
        self.check_real(nzs_in)
        out = self(*primals)
        return out, (primals, out), self.tangent_nonzero(nzs_in)

    def linearized(self, residuals, *tangents):
        primals, out = residuals
        return self._tangent_or_zeros(primals, out, tangents)

    def _tangent_or_zeros(self, primals, out, tangents):
        nzs = tuple(not isinstance(x, Zero) for x in tangents)
        if not isinstance(self.out_aval, tuple) and not self.tangent_nonzero(nzs):
            return Zero(self.out_aval.to_tangent_aval())  # an integer result, ...
        t = self.tangent(tuple(primals), out, tuple(tangents))
        if isinstance(t, Zero) and self.tangent_nonzero(nzs):
            return _zeros(self.out_aval)  # lin promised a tangent
        return t

    def tangent_nonzero(self, nzs) -> bool:
        """Whether the output's tangent can be nonzero given which inputs'
        are (a float output reached by a nonzero tangent)."""
        return _inexact(self.out_aval) and any(nzs)

    def tangent(self, primals, out, tangents):
        """The output's tangent (``Zero`` for none) from the inputs' tangents
        (each a value or ``Zero``), computed with jask's primitives."""
        raise NotImplementedError(
            f"jask.{self.params.get('op', type(self).__name__)}: forward-mode differentiation "
            "(jax.jvp, jax.jacfwd, jax.hessian, jax.linearize) through this op is not "
            "supported; reverse mode is (jax.grad, jax.vjp, jax.jacrev)")

    def linear_operands(self) -> tuple:
        """The groups of operands the result is linear in (the others fixed),
        each a dict position -> sign: ``{0: None}`` for an op linear in operand
        0 alone, signs for a signed sum (``a - b``: ``{0: 1, 1: -1}``). The
        jaxpr rewrite takes waiting scalars out of an op only through these
        (:mod:`jask.core.rewrite.linear`), so an op is never read as linear
        unless it says so: none here."""
        return ()

    def _linear(self, primals, tangents, linear: tuple):
        """The tangent of an op linear in the operands at ``linear`` (the
        others, positions or indices, fixed): the op itself on their tangents,
        zeros in place of a zero one."""
        if all(isinstance(tangents[i], Zero) for i in linear) or not _inexact(self.out_aval):
            return Zero(self.out_aval.to_tangent_aval())
        args = [(_instantiate(tangents[i], self.in_avals[i]) if i in linear else x)
                for i, x in enumerate(primals)]
        return self(*args)

    def vjp_bwd(self, res, g, *accums):
        if isinstance(g, Zero):  # nothing flows back
            return
        self.backward(res, g, *accums)

    # --- transposition: jax.checkpoint ------------------------------------------------
    def transpose(self, g, *args):
        """The cotangents of the inputs handed as accumulators, in which this op
        is linear (a tangent :meth:`tangent` computed), added to them.

        JAX asks for it where it differentiates by linearizing and transposing
        a program, not by the primitives' VJPs: inside ``jax.checkpoint``. A
        linear op's transpose is its VJP in those inputs, whose rules never
        read the inputs themselves (the Jacobian of a linear map does not
        depend on where it is taken): :meth:`backward`, with the other inputs
        as residuals and no cotangent asked for them."""
        if isinstance(g, Zero):
            return
        values = tuple(UNDEFINED if is_accumulator(x) else x for x in args)
        accums = tuple(x if is_accumulator(x) else ignoring_cotangent(jax.typeof(x))
                       for x in args)
        self.backward(self.transpose_residuals(values), g, *accums)

    def transpose_residuals(self, values):
        """What :meth:`vjp_fwd` would have kept, from the inputs' ``values``
        (``UNDEFINED`` for those being transposed) and without computing the
        output, which a linear op's VJP does not read."""
        return values

    def backward(self, res, g, *accums):
        """Add each input's cotangent to its accumulator (see :func:`_accum`)."""
        raise NotImplementedError(
            f"jask: {self.params.get('op', type(self).__name__)} is not differentiable in "
            "reverse mode: it computes a derivative (a tangent, or a cotangent with no "
            "backward rule of its own), and jax.grad of it is not supported. Take second "
            "derivatives forward over reverse: jax.jvp(jax.grad(f), (w,), (v,)), or "
            "jax.hessian(f) (not jax.jacrev of jax.jacfwd)")

    # --- jax.vmap: a batched op is the same kind of op over one more axis ------------
    def batch(self, axis_data, args, dims):
        if all(d is None for d in dims):
            return self(*args), None
        return self.batched(int(axis_data.size), tuple(args), tuple(dims))

    def batched(self, size: int, args: tuple, dims: tuple):
        """(the op over operands carrying a batch axis at ``dims``, None for
        none; the output's batch axis)."""
        op = self.params.get("op", type(self).__name__.lower())
        raise NotImplementedError(VMAP_UNSUPPORTED.format(op=f"jask.{op}"))

    def _run(self, work_fn, args, fuse: lazy.Description | None = None):
        """Run ``work_fn`` on the disk and in-memory operands of ``args``
        (``fuse``: how the op joins a band group inside a compiled program).

        Arrays with no elements are answered here, for every op, from shapes
        alone: tiles, chunks and bands are planned from extents, and none of
        that can be asked of a length-0 axis."""
        disk = [x for x, a in zip(args, self.in_avals) if _on_disk(a)]
        mem = [x for x, a in zip(args, self.in_avals) if not _on_disk(a)]
        out = self.out_aval
        config: Config | None = self.params.get("config")  # type: ignore[assignment]
        outs = out if isinstance(out, tuple) else (out,)
        if not self.mutates() and all(_no_elements(o) for o in outs):
            made = tuple(_nothing(o, str(self.params.get("op", "empty")), config) for o in outs)
            return made if isinstance(out, tuple) else made[0]
        if any(_no_elements(a) for a in self.in_avals):
            fuse = None  # no band group: its bands are rows of the inputs
            value = self.of_nothing()
            if value is not None:
                return type(self).filled(value, out, config)
        if isinstance(out, tuple):
            return dispatch.to_stores(work_fn, disk, mem, out, config)
        if _on_disk(out):
            return dispatch.to_store(work_fn, disk, mem, out, config, fuse)
        return dispatch.to_value(work_fn, disk, mem, jax.ShapeDtypeStruct(out.shape, out.dtype),
                                 config, fuse)

    def mutates(self) -> bool:
        """Whether the op writes into an existing store (``update_``): other
        ops are never moved across it."""
        return False

    def of_nothing(self):
        """The op's result, the same scalar everywhere, when an operand has no
        elements but the result has some (a sum over a length-0 axis is 0, a
        product with a length-0 contraction is zeros); None for an op whose
        result still depends on its other operands."""
        return None

    def fusion(self):
        """(work, fusion description) for ops that can join a band group."""
        return None

    def disk_work(self) -> work.Work:
        """The op's disk work (:class:`jask.engine.work.Work`)."""
        raise NotImplementedError(
            f"jask.{self.params.get('op', type(self).__name__)}: {type(self).__name__} has no "
            "disk work to plan (give it a disk_work() returning a jask.engine.work.Work)")

    def plan(self, stores, config: Config | None = None) -> Plan:
        """The tiles, chunks, tasks and bytes this op runs with, for its input
        ``stores`` (its in-memory operands are its avals): what its work's own
        planner answers, running nothing. NotImplementedError, naming the
        op, when it has none."""
        mem = [a for a in self.in_avals if not _on_disk(a)]
        if config is None:
            config = self.params.get("config") or get_config()  # type: ignore[assignment]
        return self.disk_work().plan(stores, mem, config)  # type: ignore[arg-type]

    def value_op(self, args) -> tuple:
        """This op's part of :func:`dispatch.to_values` (a value op only)."""
        work_fn, fuse = self.fusion()
        disk = [x for x, a in zip(args, self.in_avals) if _on_disk(a)]
        mem = [x for x, a in zip(args, self.in_avals) if not _on_disk(a)]
        out = self.out_aval
        return (work_fn, disk, mem, jax.ShapeDtypeStruct(out.shape, out.dtype),
                self.params.get("config"), fuse)

    def _describe(self, kind: str, *, at_call: bool = False, **params) -> lazy.Description:
        out = self.out_aval
        return lazy.Description(str(self.params.get("op", kind)), kind,
                                tuple(_on_disk(a) for a in self.in_avals), tuple(out.shape),
                                np.dtype(out.dtype), params, bool(self.params.get("grad")),
                                at_call)

    # Equal primitives must agree on types too, not only on params.
    def __hash__(self):
        return hash((type(self), self.in_avals, self.out_aval, tuple(self.params.items())))

    def __eq__(self, other):
        return (type(self) is type(other) and self.in_avals == other.in_avals
                and self.out_aval == other.out_aval and self.params == other.params)


def _inexact(aval) -> bool:
    return np.issubdtype(np.dtype(aval.dtype), np.inexact)


def _zeros(aval):
    """Zeros of ``aval`` (a DiskArray of zeros for a DiskArrayType)."""
    if _on_disk(aval):
        return aval.vspace_zero()
    return jax.numpy.zeros(aval.shape, aval.dtype)


def _instantiate(t, aval):
    return _zeros(aval.to_tangent_aval()) if isinstance(t, Zero) else t


def _no_elements(aval) -> bool:
    return 0 in tuple(aval.shape)


def _nothing(out, op: str, config: Config | None):
    """A result with no elements: nothing to read, plan or run."""
    if not _on_disk(out):
        return jax.numpy.zeros(out.shape, out.dtype)
    return dispatch.to_store(work.empty(op, tuple(out.shape), out.dtype), [], [], out, config)


def _out_type(shape, dtype, on_disk: bool):
    if on_disk:
        return DiskArrayType(shape, dtype)
    return ShapedArray(tuple(shape), canonicalize_dtype(dtype))  # follows JAX's x64 mode
