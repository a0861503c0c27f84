"""Elementwise ops, broadcasts and reductions: one primitive,
:class:`Blockwise`, parameterised by a kernel from the op table
(:mod:`jask.core.ufuncs`), with its forward (its work, in
:mod:`jask.engine.ops.elementwise`), its VJP, its tangent, its transpose
(``jax.checkpoint``), its batching rule and the operands it is linear in
(:meth:`Blockwise.linear_operands`, for the band-group rewrite); the kernels
of its derivatives (:class:`VJP`, :class:`JVP`), and the functions that bind
it (arguments already checked by the public layer), with what the products'
rules build of it (:func:`outer`, ``_reshaped``).

A reduction's own derivative rules (a max's, a variance's) are rows in
:mod:`~jask.core.primitives.reductions`; a map's come from its row in the op
table. A derivative with no rule raises, naming the op.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import numpy as np
from jax.dtypes import canonicalize_dtype
from jax.experimental.hijax import ShapedArray, Zero

from jask.base.config import Config
from jask.core import dispatch, ufuncs
from jask.core._jax_internals import is_eager, is_tracer
from jask.core.array import VMAP_UNSUPPORTED, DiskArrayType
from jask.core.primitives.base import (
    CHECKPOINT_UNSUPPORTED,
    UNDEFINED,
    DiskPrimitive,
    _accum,
    _aval,
    _no_elements,
    _on_disk,
    _out_type,
)
from jask.core.primitives.layout import _batch_last, reshape
from jask.core.primitives.reductions import is_linear, rule_of
from jask.engine.blockwise import Operand, reduce_partial
from jask.engine.ops import elementwise as ops
from jask.engine.ops.reductions import REDUCERS

__all__ = ["Blockwise", "VJP", "JVP", "full", "fill", "add", "reduce", "mapped", "outer"]


@dataclass(frozen=True)
class _Fill:
    """The kernel of a store holding one value everywhere (it ignores its
    placeholder operand); hashable, as a compiled call keys on it. It holds
    the value's bytes: 0.0 and -0.0 are equal as numbers (one would reuse the
    other's kernel), a NaN is not equal to itself."""

    bits: bytes
    dtype: str

    def __call__(self, _):
        return np.frombuffer(self.bits, self.dtype).reshape(())


@functools.lru_cache(maxsize=256)
def _fill_row(fill: _Fill) -> ufuncs.Ufunc:
    # reads nothing, so nothing to differentiate (PASS: its placeholder is a constant)
    return ufuncs.Ufunc("full", fill, lambda _: None, (ufuncs.PASS,), public=False)


def full(shape: tuple, value, dtype, config: Config | None = None):
    """A new store of ``shape`` holding ``value`` everywhere, written tile by
    tile (``jask.full``, and an op's result from operands with no elements);
    a 0-d one is an in-memory ``jax.Array`` (jask makes no 0-d store)."""
    dtype = np.dtype(dtype)
    if tuple(shape) == ():
        return jax.numpy.asarray(value, dtype)
    fill = _fill_row(_Fill(np.asarray(value).astype(dtype).tobytes(), dtype.name))
    placeholder = jax.numpy.zeros((), jax.numpy.int32)
    return Blockwise(fill, (ShapedArray((), placeholder.dtype),), ((),), (None,), tuple(shape),
                     tuple(range(len(shape))), dtype, config=config)(placeholder)


def _filled(value, out, config: Config | None):
    """``value`` everywhere in ``out``'s shape, in memory or on disk as ``out`` is."""
    if not _on_disk(out):
        return jax.numpy.full(out.shape, value, out.dtype)
    return full(tuple(out.shape), value, out.dtype, config)


DiskPrimitive.filled = staticmethod(_filled)  # (see DiskPrimitive.filled)


class Blockwise(DiskPrimitive):
    """``ufunc(*operands)`` over a full ``shape``, kept along ``out_axes``.

    Each operand follows the full shape through its axes map (numpy
    broadcasting written out, see :mod:`jask.engine.blockwise`); the output
    keeps the full axes in ``out_axes`` (``None``: a length-1 axis) and is
    reduced over the others with ``reducer`` ("sum", "max", "min"). A plain
    elementwise op keeps every axis. ``dtypes`` are what the kernel computes
    in, per operand (``None``: as stored). The output is a DiskArray unless
    ``to_memory``.
    """

    def __init__(self, ufunc, in_avals, axes: tuple, dtypes: tuple, shape: tuple,
                 out_axes: tuple, out_dtype, *, reducer: str | None = None,
                 to_memory: bool = False, grad: bool = False, config: Config | None = None,
                 name: str | None = None):
        out_shape = tuple(1 if a is None else shape[a] for a in out_axes)
        super().__init__(in_avals, _out_type(out_shape, out_dtype, not to_memory),
                         op=name or ufunc.name, ufunc=ufunc, axes=tuple(axes), dtypes=tuple(dtypes),
                         shape=tuple(shape), out_axes=tuple(out_axes), reducer=reducer,
                         grad=grad, config=config)

    def disk_work(self):
        out = self.out_aval
        return ops.blockwise(
            self.op, self.ufunc.numpy, self.shape, self.axes, self.dtypes,
            tuple(_on_disk(a) for a in self.in_avals), self.out_axes, out.shape, out.dtype,
            reducer=self.reducer, to_memory=not _on_disk(out), grad=self.grad)

    def fusion(self):
        return (self.disk_work(),
                self._describe("map", at_call=self.ufunc.at_call, kernel=self.ufunc.numpy,
                               axes=self.axes, dtypes=self.dtypes,
                               full_shape=self.shape, out_axes=self.out_axes,
                               reducer=self.reducer, linear=self.kernel_linear()))

    def linear_operands(self) -> tuple:
        """The groups of operands the result is linear in (the others fixed),
        each a dict position -> sign: ``{0: None}`` for an op linear in
        operand 0 alone (a VJP in its cotangent, ``a * b`` in each), signs for
        a signed sum (``a + b``: ``{0: 1, 1: 1}``, ``a - b``: ``{0: 1, 1: -1}``);
        none for anything else (a max, a kernel not known linear)."""
        reducer, ufunc = self.params["reducer"], self.params["ufunc"]
        if reducer not in (None, "sum"):
            return ()
        if isinstance(ufunc, VJP) and ufunc.ufunc is ufuncs.TABLE["square"]:
            return ({0: None}, {1: None})  # 2 * x * g: linear in g, and in x
        if isinstance(ufunc, VJP) or ufunc is ufuncs.IDENTITY:
            return ({0: None},)
        if ufunc is ufuncs.ADD and reducer is None:
            return ({0: 1, 1: 1},)
        if ufunc is ufuncs.SUB and reducer is None:
            return ({0: 1, 1: -1},)
        if ufunc is ufuncs.MUL:
            return ({0: None}, {1: None})
        return ()

    def kernel_linear(self) -> tuple:
        """The groups of operand positions the kernel is linear in, jointly,
        the others fixed (for :mod:`jask.engine.gram`): those of
        :meth:`linear_operands`, and a tangent kernel's tangents (:class:`JVP`:
        its operands after the primals it reads)."""
        ufunc = self.params["ufunc"]
        if isinstance(ufunc, JVP):
            n = len(self.in_avals)
            return (tuple(range(n - len(ufunc.nz), n)),)
        return tuple(tuple(sorted(group)) for group in self.linear_operands())

    def expand(self, *args):
        work_fn, fuse = self.fusion()
        return self._run(work_fn, args, fuse)

    def of_nothing(self):
        """A reduction of no elements: the reducer's own answer (0 for a sum,
        1 for a product, NaN for a variance; ValueError for a max, as numpy
        and jax.numpy raise), from the kernel on one element per kept axis."""
        if self.reducer is None:
            return None
        small = tuple(min(n, 1) for n in self.shape)
        operands = tuple(
            Operand(np.zeros(tuple(1 if a is None else small[a] for a in axes), dt or aval.dtype),
                    axes, dt)
            for axes, dt, aval in zip(self.axes, self.dtypes, self.in_avals))
        kept = {a for a in self.out_axes if a is not None}
        reduced = tuple(d for d in range(len(small)) if d not in kept)
        region = tuple(slice(0, n) for n in small)
        partial = reduce_partial(self.ufunc.numpy, self.reducer, operands, reduced, (region,),
                                 small)
        finish = REDUCERS[self.reducer].finish
        value = partial if finish is None else finish(partial)
        return np.asarray(value).astype(self.out_aval.dtype).reshape(-1)[0]

    def vjp_fwd(self, nzs_in, *args):
        self.check_real(nzs_in)
        out = self(*args)
        return out, (args, out)

    def transpose_residuals(self, values):
        return values, None

    def transpose(self, g, *args):
        mean = REDUCERS[self.reducer].mean_count if self.reducer is not None else None
        if isinstance(self.ufunc, JVP) and mean is not None and not isinstance(g, Zero):
            # a mean's tangent: the sum's, its cotangent divided by the count
            inverse = jax.numpy.asarray(1.0 / mean if mean else np.nan, _aval(g).dtype)
            as_sum = Blockwise(self.ufunc, self.in_avals, self.axes, self.dtypes, self.shape,
                               self.out_axes, self.out_aval.dtype, reducer="sum",
                               to_memory=not _on_disk(self.out_aval), grad=self.grad,
                               config=self.config, name=self.op)
            return as_sum.transpose(g * inverse, *args)
        return super().transpose(g, *args)

    def backward(self, res, g, *accums):
        # (Also reverse over reverse: a backward pass's maps are Blockwise ops too, whose
        # rows carry their own rules, VJP kernels' from the row's second derivatives.)
        args, out = res
        rule = None if self.reducer is None else rule_of(self.op, self.reducer)
        if rule is not None and rule.vjp is not None:  # the reduction's own rule
            if self.grad and self.ufunc.vjps != (ufuncs.PASS,):
                # the rule differentiates what is reduced as if it were the operand
                _accum(accums[0], lambda: _refuse(
                    f"jask.{self.op}: reverse mode through a {self.reducer} reduction of "
                    f"{self.ufunc.name} (a piece of a gradient) is not supported"))
            _accum(accums[0], lambda: rule.vjp(self, args[0], out, g))
            return
        if self.ufunc.vjps is None:
            super().backward(res, g, *accums)
        for j, accum in enumerate(accums):
            rule = self.ufunc.vjps[j]
            if rule is None:
                continue  # not differentiable in this operand (a condition, a stop)
            if ufuncs.is_unknown(rule):  # a derivative jask has no rule for: refused, by name
                _accum(accum, lambda rule=rule: _refuse(rule.unknown))
            _accum(accum, lambda j=j, rule=rule: self._cotangent(j, rule, args, g))

    def _cotangent(self, j, rule, args, g):
        """The cotangent of operand ``j``: the rule's kernel over the full
        shape, summed back to the operand's own shape."""
        aval = self.in_avals[j]
        to_memory = not _on_disk(aval)
        if (rule is ufuncs.PASS and self.axes[j] == self.out_axes
                and to_memory == (not _on_disk(self.out_aval))
                and aval.dtype == self.out_aval.dtype):
            return g  # d(a + b)/da: the cotangent itself, no pass over the data
        kept = {a for a in self.axes[j] if a is not None}
        reduces = any(n > 1 and d not in kept for d, n in enumerate(self.shape))
        # the operands the rule reads: none (it reads only g), a tangent's kernel's
        # operands before the tangents (JVP.reads), or all of them
        n = 0 if getattr(rule, "g_only", False) else getattr(self.ufunc, "reads", len(args))
        if any(x is UNDEFINED for x in args[:n]):
            raise NotImplementedError(CHECKPOINT_UNSUPPORTED.format(op=self.op))
        return Blockwise(VJP(self.ufunc, j), (_aval(g),) + self.in_avals[:n],
                         (self.out_axes,) + self.axes[:n],
                         (self.out_aval.dtype,) + self.dtypes[:n],
                         self.shape, self.axes[j], aval.dtype,
                         reducer="sum" if reduces or to_memory else None, to_memory=to_memory,
                         grad=True, config=self.config,
                         name=f"{self.op}_vjp")(g, *args[:n])


    # --- forward mode --------------------------------------------------------------
    def tangent_nonzero(self, nzs) -> bool:
        if not super().tangent_nonzero(nzs):
            return False
        rules = getattr(self.params["ufunc"], "vjps")
        if rules is None or not is_linear(self.params["op"], self.params["reducer"]):
            return True  # (refused, or a reducer's own rule)
        return any(nz and rule is not None for nz, rule in zip(nzs, rules))

    def tangent(self, primals, out, tangents):
        reducer = self.reducer
        if is_linear(self.op, reducer):  # a map, a sum or a mean: linear in the map
            return self._jvp_map(primals, tangents)
        x, t = primals[0], tangents[0]
        if self.ufunc.vjps != (ufuncs.PASS,) or isinstance(t, Zero):
            raise NotImplementedError(
                f"jask.{self.op}: forward-mode differentiation of a {reducer} reduction of "
                f"{self.ufunc.name} is not supported (only of the array itself)")
        rule = rule_of(self.op, reducer)
        if rule.jvp is None:
            return super().tangent(primals, out, tangents)
        return rule.jvp(self, x, out, t)

    def batched(self, size, args, dims):
        return _batch_blockwise(self, size, args, dims)

    def derived(self, ufunc, in_avals, axes, dtypes, out_axes, out_dtype, **params):
        """A Blockwise over this op's full shape and config: a map or a
        reduction of its derivative (see :mod:`jask.core.primitives.reductions`)."""
        return Blockwise(ufunc, in_avals, axes, dtypes, self.shape, out_axes, out_dtype,
                         config=self.config, **params)

    def _jvp_map(self, primals, tangents):
        """The tangent of a map (reduced by a sum or a mean, which are linear):
        one Blockwise of the same shape and reduction whose kernel is the sum
        of each operand's rule applied to its tangent (:class:`JVP`)."""
        rules = self.ufunc.vjps
        if rules is None:
            raise NotImplementedError(
                f"jask.{self.op}: forward-mode differentiation of this op is not supported "
                "(it is the derivative kernel of another op: third derivatives)")
        nz = tuple(j for j, (t, rule) in enumerate(zip(tangents, rules))
                   if not isinstance(t, Zero) and rule is not None
                   and np.dtype(_aval(t).dtype) != jax.dtypes.float0)
        for j in nz:
            if ufuncs.is_unknown(rules[j]):
                raise NotImplementedError(rules[j].unknown)
        if not nz:
            return Zero(self.out_aval.to_tangent_aval())
        tangent_op, operands = self._jvp_map_op(primals, tangents, nz)
        return tangent_op(*operands)

    def _jvp_map_op(self, primals, tangents, nz):
        """(the Blockwise computing a map's tangent, its operands), for the
        operands at ``nz`` (nonzero tangents): see :meth:`_jvp_map`."""
        kernel = JVP(self.ufunc, nz)
        reads = kernel.reads
        operands = (tuple(primals) if reads else ()) + tuple(tangents[j] for j in nz)
        op = Blockwise(kernel, tuple(_aval(x) for x in operands),
                       (self.axes if reads else ()) + tuple(self.axes[j] for j in nz),
                       (self.dtypes if reads else ()) + tuple(self.dtypes[j] for j in nz),
                       self.shape, self.out_axes, self.out_aval.dtype, reducer=self.reducer,
                       to_memory=not _on_disk(self.out_aval), grad=self.grad,
                       config=self.config, name=f"{self.op}_jvp")
        return op, operands

    def jvp(self, primals, tangents):
        together = self._value_and_tangent_now(tuple(primals), tuple(tangents))
        if together is not None:
            return together
        return super().jvp(primals, tangents)

    def _value_and_tangent_now(self, primals, tangents):
        """Eagerly, a sum or mean answering an in-memory value, and its tangent:
        (value, tangent) computed by one band group, so a loss's ``jax.jvp``
        reads its data once (bound one after the other, the tangent's group
        would read again the pending ops the value's group just read). None
        where the op is not such a reduction or has no tangent to compute."""
        if (not is_eager() or _on_disk(self.out_aval)
                or not is_linear(self.params["op"], self.params["reducer"])):
            return None
        if any(_no_elements(a) for a in (*self.in_avals, self.out_aval)):
            return None  # answered from shapes alone (DiskPrimitive._run)
        nzs = tuple(not isinstance(t, Zero) for t in tangents)
        self.check_real(nzs)
        rules = getattr(self.params["ufunc"], "vjps")
        if rules is None or not self.tangent_nonzero(nzs):
            return None
        nz = tuple(j for j, (t, rule) in enumerate(zip(tangents, rules))
                   if not isinstance(t, Zero) and rule is not None
                   and np.dtype(_aval(t).dtype) != jax.dtypes.float0)
        if not nz or any(ufuncs.is_unknown(rules[j]) for j in nz):
            return None  # (refused as bound one by one, naming the op)
        tangent_op, operands = self._jvp_map_op(primals, tangents, nz)
        if any(is_tracer(x) for x in (*primals, *operands)):
            return None
        value, tangent = dispatch.to_values([self.value_op(primals),
                                             tangent_op.value_op(operands)])
        return value, tangent


def _batch_blockwise(prim, size: int, args: tuple, dims: tuple):
    """A Blockwise over batched operands: the batch is one more full axis
    (the last), kept by the output, each batched operand's batch axis moved
    last (free: an in-memory array, or a transposed view of a store) and
    mapped to it; ``X * w`` for 16 vectors ``w`` is one pass over ``X``."""
    if getattr(prim.ufunc.numpy, "positional", False):
        raise NotImplementedError(VMAP_UNSUPPORTED.format(op=f"jask.{prim.op}"))
    last = len(prim.shape)
    operands, axes = [], []
    for x, ax, d in zip(args, prim.axes, dims):
        if d is not None:
            x = _batch_last(x, d)
            ax = tuple(ax) + (last,)
        operands.append(x)
        axes.append(ax)
    out = Blockwise(prim.ufunc, tuple(_aval(a) for a in operands), tuple(axes), prim.dtypes,
                    tuple(prim.shape) + (size,), tuple(prim.out_axes) + (last,),
                    prim.out_aval.dtype, reducer=prim.reducer,
                    to_memory=not _on_disk(prim.out_aval), grad=prim.grad, config=prim.config,
                    name=prim.op)(*operands)
    return out, len(prim.out_axes)


def _refuse(what: str):
    """Refuse a derivative jask has no rule for, at trace time, naming the op."""
    raise NotImplementedError(what)


def mapped(row, arrays, dtype, out_dtype, config, name):
    """``row`` elementwise over same-shape DiskArrays (a gradient's piece)."""
    avals = tuple(_aval(a) for a in arrays)
    full = tuple(range(avals[0].ndim))
    return Blockwise(row, avals, (full,) * len(avals), (dtype,) * len(avals), avals[0].shape,
                     full, out_dtype, grad=True, config=config, name=name)(*arrays)


class VJP:
    """The kernel of operand ``j``'s cotangent: ``vjps[j](g, *blocks)``.

    Its own rules (:attr:`vjps`) serve forward mode over reverse (a
    Hessian-vector product, ``jax.hessian``): it is linear in ``g``, and its
    derivative in operand ``k`` is ``g`` times the row's ``second[(j, k)]``."""

    def __init__(self, ufunc, j: int):
        self.ufunc, self.j = ufunc, j
        self.nin = 1 + ufunc.nin  # (g, *operands)
        self.name = f"{ufunc.name}_vjp"
        self.at_call = ufunc.at_call  # (a user's function runs in its cotangent too)

    def numpy(self, g, *blocks):
        return self.ufunc.vjps[self.j](g, *blocks)

    @functools.cached_property
    def vjps(self) -> tuple:
        rule = self.ufunc.vjps[self.j]
        if getattr(rule, "g_only", False):  # its Blockwise reads only g
            return (ufuncs.g_only(lambda t, *g: rule(t)),)
        second = self.ufunc.second
        rules: list = [lambda t, g, *x: rule(t, *x)]
        for k in range(self.ufunc.nin):
            if second is None:
                rules.append(ufuncs.unknown(
                    f"jask.{self.ufunc.name}: second derivatives (jax.hessian, jax.jvp of "
                    "jax.grad) are not supported through this op: its row has no second "
                    "derivatives"))
            elif (self.j, k) in second:
                # g * f'' first: the tangent may carry a batch (jax.hessian), the rest not
                rules.append(lambda t, g, *x, d=second[(self.j, k)]: t * (g * d(*x)))
            else:
                rules.append(None)
        return tuple(rules)

    def __hash__(self):
        return hash((VJP, self.ufunc, self.j))

    def __eq__(self, other):
        return isinstance(other, VJP) and (self.ufunc, self.j) == (other.ufunc, other.j)


class JVP:
    """The kernel of a map's tangent: ``sum(rules[j](t_j, *blocks))`` over
    the operands ``nz`` whose tangent is nonzero, the rules being the row's
    VJP rules (an elementwise Jacobian is diagonal: the cotangent times the
    partial derivative is also the tangent's term). It reads the ``reads``
    operands (``ufunc.nin``, before the tangents) unless every rule reads
    only its tangent (``reads`` 0: ``a + b``'s tangent is ``ta + tb``).

    Its own rules (:attr:`vjps`) are its transpose (``jax.checkpoint``'s
    reverse mode): linear in each tangent ``t_j``, whose cotangent is the
    row's rule ``rules[j](g, *blocks)`` again, reading the operands only;
    its derivative in the operands (reverse over forward) is refused."""

    def __init__(self, ufunc, nz: tuple):
        self.ufunc, self.nz = ufunc, tuple(nz)
        rules = ufunc.vjps
        reads = not all(getattr(rules[j], "g_only", False) for j in self.nz)
        self.reads = ufunc.nin if reads else 0
        self.nin = self.reads + len(self.nz)
        self.name = f"{ufunc.name}_jvp"
        # jax.grad of a tangent in its operands: reverse over forward (jax.checkpoint's
        # transpose only ever asks for the tangents' rules)
        in_operands = ufuncs.unknown(
            f"jask.{ufunc.name}: the derivative of a tangent in the operands it is taken "
            "at is not supported: reverse over forward (jax.grad of jax.jvp, jax.jacrev of "
            "jax.jacfwd) is not differentiable in reverse mode. Take second derivatives "
            "forward over reverse: jax.jvp(jax.grad(f), (w,), (v,)), or jax.hessian(f)")
        self.vjps = (in_operands,) * self.reads + tuple(rules[j] for j in self.nz)
        self.second = None  # (a tangent's second derivatives: fourth ones)
        self.at_call = ufunc.at_call

    def numpy(self, *blocks):
        rules = self.ufunc.vjps
        n = len(blocks) - len(self.nz)
        x, ts = blocks[:n], blocks[n:]
        out = None
        for j, t in zip(self.nz, ts):
            term = rules[j](t, *x)
            if out is None:
                out = term
            elif (isinstance(out, np.ndarray) and out.flags.writeable and out.base is None
                  and not any(out is b for b in blocks)  # (a rule may return its tangent)
                  and out.shape == np.broadcast_shapes(out.shape, np.shape(term))
                  and out.dtype == np.result_type(out, term)):
                np.add(out, term, out=out)  # in place: one tile fewer held
            else:
                out = out + term
        return out

    def __hash__(self):
        return hash((JVP, self.ufunc, self.nz))

    def __eq__(self, other):
        return isinstance(other, JVP) and (self.ufunc, self.nz) == (other.ufunc, other.nz)


def fill(value, aval: DiskArrayType, *, config=None, grad=False):
    """A DiskArray of ``aval`` with every element ``value`` (zeros of a vspace)."""
    scalar = jax.numpy.asarray(value, canonicalize_dtype(aval.dtype))
    return Blockwise(ufuncs.IDENTITY, (ShapedArray((), scalar.dtype),), ((),), (aval.dtype,),
                     aval.shape, tuple(range(aval.ndim)), aval.dtype, grad=grad,
                     config=config)(scalar)


def add(a, b, *, config=None, grad=False):
    """a + b of two DiskArrays of one type (cotangents being summed)."""
    aval = _aval(a)
    axes = tuple(range(aval.ndim))
    return Blockwise(ufuncs.ADD, (aval, _aval(b)), (axes, axes), (aval.dtype, aval.dtype),
                     aval.shape, axes, aval.dtype, grad=grad, config=config)(a, b)


def reduce(name, ufunc, operands, axes, dtypes, shape, out_axes, out_dtype, *, reducer,
           to_memory, config=None):
    """Bind a reduction of ``ufunc(*operands)`` (see :class:`Blockwise`)."""
    avals = tuple(_aval(x) for x in operands)
    return Blockwise(ufunc, avals, tuple(axes), tuple(dtypes), tuple(shape), tuple(out_axes),
                     out_dtype, reducer=reducer, to_memory=to_memory, config=config,
                     name=name)(*operands)


# --- what the products' rules build as elementwise ops ---------------------------------

def outer(x, y, like, config):
    """x[..., None] * y: the cotangent of a vector product's operand."""
    X, Y = _aval(x), _aval(y)
    shape = tuple(X.shape) + tuple(Y.shape)
    axes = (tuple(range(X.ndim)), tuple(range(X.ndim, len(shape))))
    return Blockwise(ufuncs.MUL, (X, Y), axes, (like.dtype, like.dtype), shape,
                     tuple(range(len(shape))), like.dtype, to_memory=not _on_disk(like),
                     grad=True, config=config)(x, y)


def _reshaped(x, shape: tuple, config: Config | None = None):
    """``x`` in ``shape`` (in memory, or a store: a view when only length-1
    axes come or go)."""
    source = tuple(_aval(x).shape)
    if source == tuple(shape):
        return x
    if not _on_disk(_aval(x)):
        return jax.numpy.reshape(x, shape)
    full = tuple(n for n in source if n != 1)
    if full and full == tuple(n for n in shape if n != 1):
        return _squeezed(x, tuple(shape), full, config)
    return reshape(x, shape, config=config)


def _squeezed(x, shape: tuple, full: tuple, config: Config | None):
    """``x`` with length-1 axes removed or added, as an elementwise copy (one
    a band group holds, so a batch of one stays in the pass; a reshape, a view
    elsewhere, would end the group)."""
    def axes_of(s):
        out, i = [], 0
        for n in s:
            out.append(None if n == 1 else i)
            i += n != 1
        return tuple(out)

    aval = _aval(x)
    return Blockwise(ufuncs.IDENTITY, (aval,), (axes_of(aval.shape),), (None,), full,
                     axes_of(shape), aval.dtype, config=config, name="reshape")(x)
