"""Layout: the ops that move elements without computing any, each with its
forward (its work, in :mod:`jask.engine.ops.layout`), its tangent and its
VJP, and the functions that bind them (arguments already checked by the
public layer): :class:`Transpose`, a basic :class:`Slice` and its
gradient :class:`Scatter`, :class:`Reshape`, :class:`Concatenate`; and what
a batching rule uses to move a batch axis (:func:`moved`, first or last).
(The reshape a product's batching rule uses is in
:mod:`~jask.core.primitives.elementwise`: a batch of one is added or dropped
as an elementwise copy, and elementwise imports this module.)

Each is linear in its array operands, its tangent the op itself on theirs.
A transpose, slice, reshape and the scatter declare it
(:meth:`~jask.core.primitives.base.DiskPrimitive.linear_operands`: operand 0,
a slice's starts fixed), so the jaxpr rewrite may take waiting scalars out
of them (:mod:`jask.core.rewrite.linear`). A join is linear only in all its
operands together, each placed apart: not a group the rewrite can read (it
reads a group of several operands as a signed sum), so it declares none.
None has a batching rule (``jax.vmap`` is refused, naming the op, by
:meth:`DiskPrimitive.batched`).
"""
from __future__ import annotations

import jax
import numpy as np
from jax.experimental.hijax import ShapedArray

from jask.base.config import Config
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _accum, _aval, _on_disk
from jask.engine.ops import layout as ops

__all__ = ["Transpose", "Slice", "Scatter", "Reshape", "Concatenate", "transpose",
           "take_slice", "reshape", "concatenate", "moved"]


class Transpose(DiskPrimitive):
    """Axes permuted by ``axes`` (a view of the same store)."""

    def __init__(self, aval: DiskArrayType, axes: tuple, grad: bool, config: Config | None):
        out = DiskArrayType(tuple(aval.shape[i] for i in axes), aval.dtype)
        super().__init__((aval,), out, axes=tuple(axes), grad=grad, config=config)

    def disk_work(self):
        return ops.transpose(self.axes, grad=self.grad)

    def expand(self, a):
        # eagerly, the transpose of a pending matrix is pending too (jask.engine.lazy):
        # Z.T @ Z of a pending Z is then one Gram band group over what Z reads
        return self._run(self.disk_work(), [a], self._describe("transpose", axes=self.axes))

    def linear_operands(self) -> tuple:
        return ({0: None},)

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, ca):
        inverse = tuple(int(i) for i in np.argsort(self.axes))
        _accum(ca, lambda: transpose(g, inverse, config=self.config, grad=True))


def _slice_avals(aval: DiskArrayType, sizes: tuple) -> tuple:
    """The part of ``aval`` a basic index of ``sizes`` takes (see :class:`Slice`),
    and the avals of its start operands (int32 scalars)."""
    out_shape = tuple(size for size, _ in (x for x in sizes if x is not None))
    return (DiskArrayType(out_shape, aval.dtype),
            tuple(ShapedArray((), np.dtype(np.int32)) for _ in sizes))

class Slice(DiskPrimitive):
    """``a[index]`` for a basic index: per axis ``(size, step)`` of a slice
    or ``None`` for an integer (the axis is dropped). The starts are operands
    (int32 scalars), so one compiled program serves every start."""

    def __init__(self, aval: DiskArrayType, sizes: tuple, grad: bool, config: Config | None):
        part, starts = _slice_avals(aval, sizes)
        super().__init__((aval,) + starts, part, sizes=tuple(sizes), grad=grad, config=config)

    def disk_work(self):
        return ops.take_slice(self.sizes, grad=self.grad)

    def expand(self, a, *starts):
        return self._run(self.disk_work(), [a, *starts])

    def linear_operands(self) -> tuple:
        return ({0: None},)  # (the starts fixed)

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, ca, *cstarts):
        a, *starts = res
        _accum(ca, lambda: Scatter(self.in_avals[0], self.sizes, self.config)(g, *starts))


class Scatter(DiskPrimitive):
    """Zeros of ``aval``'s shape with ``g`` placed where :class:`Slice` took it."""

    def __init__(self, aval: DiskArrayType, sizes: tuple, config: Config | None):
        part, starts = _slice_avals(aval, sizes)
        super().__init__((part,) + starts, aval, op="slice_vjp", sizes=tuple(sizes),
                         config=config)

    def disk_work(self):
        return ops.scatter_slice(self.sizes, self.out_aval.shape)

    def expand(self, g, *starts):
        return self._run(self.disk_work(), [g, *starts])

    def linear_operands(self) -> tuple:
        return ({0: None},)  # (the starts fixed)

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, cg, *cstarts):
        _, *starts = res  # (a gradient's gradient: the slice again)
        _accum(cg, lambda: take_slice(g, self.sizes, starts, config=self.config, grad=True))


class Concatenate(DiskPrimitive):
    """Operands joined along ``axis`` (``stack``: along a new axis)."""

    def __init__(self, avals: tuple, axis: int, stack: bool, grad: bool, config: Config | None):
        first = avals[0]
        shape = list(first.shape)
        if stack:
            shape.insert(axis, len(avals))
        else:
            shape[axis] = sum(a.shape[axis] for a in avals)
        super().__init__(avals, DiskArrayType(shape, first.dtype), axis=axis, stack=stack,
                         grad=grad, config=config)

    def disk_work(self):
        return ops.concatenate(self.axis, self.stack, self.out_aval.shape, grad=self.grad)

    def expand(self, *arrays):
        return self._run(self.disk_work(), list(arrays))

    # (no linear_operands: linear in all operands together, not in one alone
    # nor as a sum of them; see the module's docstring)

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, tuple(range(len(primals))))

    def backward(self, res, g, *accums):
        start = 0
        for aval, accum in zip(self.in_avals, accums):
            size = 1 if self.stack else aval.shape[self.axis]
            sizes = [(n, 1) for n in self.out_aval.shape]
            sizes[self.axis] = None if self.stack else (size, 1)
            starts = [0] * len(sizes)
            starts[self.axis] = start
            _accum(accum, lambda sizes=tuple(sizes), starts=tuple(starts): take_slice(
                g, sizes, starts, config=self.config, grad=True))
            start += size


class Reshape(DiskPrimitive):
    """The same elements in C order under another shape (a view when only
    length-1 axes come or go, else a copy)."""

    def __init__(self, aval: DiskArrayType, shape: tuple, grad: bool, config: Config | None):
        super().__init__((aval,), DiskArrayType(shape, aval.dtype), shape=tuple(shape),
                         grad=grad, config=config)

    def disk_work(self):
        return ops.reshape(self.shape, grad=self.grad)

    def expand(self, a):
        return self._run(self.disk_work(), [a])

    def linear_operands(self) -> tuple:
        return ({0: None},)

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, ca):
        _accum(ca, lambda: Reshape(self.out_aval, self.in_avals[0].shape, True,
                                   self.config)(g))


# --- binding helpers ------------------------------------------------------------------

def transpose(a, axes, *, config=None, grad=False):
    return Transpose(_aval(a), tuple(axes), grad, config)(a)


def take_slice(a, sizes, starts, *, config=None, grad=False):
    # a concrete start as numpy's int32 (jax.numpy.asarray costs ~0.1 ms each, and
    # a slice's per-call cost is what minibatch loops pay)
    starts = [np.int32(s) if isinstance(s, (int, np.integer)) else jax.numpy.asarray(s, np.int32)
              for s in starts]
    return Slice(_aval(a), tuple(sizes), grad, config)(a, *starts)


def concatenate(arrays, axis, *, stack=False, config=None):
    return Concatenate(tuple(_aval(x) for x in arrays), axis, stack, False, config)(*arrays)


def reshape(a, shape, *, config=None):
    return Reshape(_aval(a), tuple(shape), False, config)(a)


# --- a batch laid out (the batching rules of elementwise ops and products) ------------

def moved(x, order: tuple):
    """``x`` with its axes in ``order`` (a view of a store)."""
    if order == tuple(range(len(order))):
        return x
    if not _on_disk(_aval(x)):
        return jax.numpy.transpose(x, order)
    return transpose(x, order)


def _moved_axis(x, d: int, last: bool):
    """``x`` with its batch axis ``d`` moved first or ``last``."""
    rest = tuple(i for i in range(len(_aval(x).shape)) if i != d)
    return moved(x, rest + (d,) if last else (d,) + rest)


def _batch_first(x, d: int):
    return _moved_axis(x, d, last=False)


def _batch_last(x, d: int):
    return _moved_axis(x, d, last=True)


def _swap_first(x):
    n = len(_aval(x).shape)
    return moved(x, (1, 0) + tuple(range(2, n)))


def _swap_last(x):
    n = len(_aval(x).shape)
    return moved(x, tuple(range(n - 2)) + (n - 1, n - 2))
