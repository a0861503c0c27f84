"""Products: a matrix product (:class:`Dot`, ``@``, ``dot``, ``matmul``)
and one pass with several outputs (:class:`Fused`, ``jask.api.fused``: an
optimizer's step), each with its forward (its work, in
:mod:`jask.engine.ops.products`) and its derivative rules, and the function
binding a product (arguments already checked by the public layer).

A product is linear in each operand, the other fixed
(:meth:`Dot.linear_operands`): its tangent is the product on each tangent,
summed, its transpose (``jax.checkpoint``) its VJP, two products that never
read the operand being transposed. ``jax.vmap`` batches a product of one
operand not batched with a batch of vectors or matrices as one product.
:class:`Fused` runs a user's kernel: it has no derivative nor batching rule,
refused naming the op by :class:`~jask.core.primitives.base.DiskPrimitive`.
What the rules build of other families (a sum of tangents, an outer
product, a batch laid out) they import from them
(:mod:`~jask.core.primitives.elementwise`, :mod:`~jask.core.primitives.layout`).
"""
from __future__ import annotations

import numpy as np
from jax.experimental.hijax import Zero

from jask.base.config import Config
from jask.core.array import VMAP_UNSUPPORTED, DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _accum, _aval, _on_disk, _out_type
from jask.core.primitives.elementwise import _reshaped, add, outer
from jask.core.primitives.layout import _batch_first, _batch_last, _swap_first, _swap_last
from jask.engine.ops import products as ops

__all__ = ["Dot", "Fused", "dot", "widened"]


def _tangent_sum(a, b):
    """The sum of two tangents of one output (either may be ``Zero``)."""
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    if _on_disk(_aval(a)):
        return add(a, b)
    return a + b




def _check_laid_out(x, n: int, size: int) -> None:
    """Refuse a batch of matrices in a store that only a copy lays side by
    side (a reshape merging two axes): stacked as one product, it is one."""
    if _on_disk(_aval(x)) and n != 1 and size != 1:
        raise NotImplementedError(VMAP_UNSUPPORTED.format(op="jask.dot") + (
            " (here a batch of matrices in a store, which a product takes only as one "
            "matrix: write the batch into the rows or columns, X @ W.T)"))


def _matmul_shape(a_shape, b_shape, ta, tb):
    """Shape of op(a) @ op(b), 1-D operands promoted and squeezed as numpy does."""
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    m = a2[-1] if ta else a2[-2]
    n = b2[-2] if tb else b2[-1]
    batch = a2[:-2] if len(a2) >= len(b2) else b2[:-2]
    out = batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
    return out


class Dot(DiskPrimitive):
    """op(a) @ op(b) with batch dimensions; ``ta``/``tb`` transpose the last
    two axes of an operand as it is read (no transposed copy is made). An
    operand may be in memory, and a 1-D one is a row (left) or column
    (right) vector, as in numpy; the result is in memory with ``to_memory``
    (the gradient of an in-memory operand)."""

    def __init__(self, a, b, ta: bool, tb: bool, dtype, *, to_memory: bool = False,
                 grad: bool = False, config: Config | None = None, wide: bool = False):
        shape = _matmul_shape(a.shape, b.shape, ta, tb)
        super().__init__((a, b), _out_type(shape, dtype, not to_memory), op="dot", ta=ta,
                         tb=tb, dtype=np.dtype(dtype), grad=grad, config=config,
                         **({"wide": True} if wide else {}))

    def _vectors(self) -> tuple:
        A, B = self.in_avals
        return ("row" if A.ndim == 1 else None, "col" if B.ndim == 1 else None)

    def disk_work(self):
        A, B = self.in_avals
        return ops.dot(self.ta, self.tb, (_on_disk(A), _on_disk(B)), self._vectors(),
                        self.dtype, to_memory=not _on_disk(self.out_aval), grad=self.grad)

    def fusion(self):
        return (self.disk_work(),
                self._describe("dot", ta=self.ta, tb=self.tb, vectors=self._vectors(),
                               **({"wide": True} if self.params.get("wide") else {})))

    def expand(self, a, b):
        work_fn, fuse = self.fusion()
        return self._run(work_fn, [a, b], fuse)

    def of_nothing(self):
        return 0  # the contraction has length 0: a sum of no products

    def linear_operands(self) -> tuple:
        """``a @ b`` is linear in ``a``, and in ``b``, the other fixed."""
        return ({0: None}, {1: None})

    def tangent(self, primals, out, tangents):
        """d(a @ b) = da @ b + a @ db: the same product on each tangent."""
        (a, b), (da, db) = primals, tangents
        left = Zero(self.out_aval) if isinstance(da, Zero) else self(da, b)
        right = Zero(self.out_aval) if isinstance(db, Zero) else self(a, db)
        return _tangent_sum(left, right)

    def batched(self, size, args, dims):
        """An operand not batched and a batch of vectors or matrices (``X @ w``
        for 16 ``w``, ``X.T @ g`` for 16 cotangents ``g``): one product, the
        batch laid side by side as the other operand's columns (on the
        right) or rows (on the left), read transposed where the batch comes
        first; one pass over the operand that is not batched. A batch of
        matrices is laid out by a reshape: a view when the matrices are
        vectors (a length-1 axis), else a copy."""
        (a, b), (da, db) = args, dims
        A, B = self.in_avals
        place = dict(to_memory=not _on_disk(self.out_aval), grad=self.grad, config=self.config)
        if da is None and db is not None and A.ndim <= 2 and B.ndim <= 2:
            if B.ndim == 1:  # columns (or one row of values, for a 1-D a)
                return Dot(A, _aval(b), self.ta, db == 0, self.dtype, **place)(a, b), A.ndim - 1
            cols = _batch_last(b, db)  # (r, c, size): op(b_i) side by side
            if self.tb:
                cols = _swap_first(cols)
            k, n = _aval(cols).shape[:2]
            _check_laid_out(cols, n, size)
            cols = _reshaped(cols, (k, n * size), self.config)
            out = Dot(A, _aval(cols), self.ta, False, self.dtype, **place)(a, cols)
            return _reshaped(out, tuple(_aval(out).shape[:-1]) + (n, size), self.config), A.ndim
        if db is None and da is not None and A.ndim <= 2 and B.ndim <= 2:
            if A.ndim == 1:  # rows
                return Dot(_aval(a), B, da == 1, self.tb, self.dtype, **place)(a, b), 0
            rows = _batch_first(a, da)  # (size, r, c)
            if self.ta:
                rows = _swap_last(rows)
            m, k = _aval(rows).shape[1:]
            _check_laid_out(rows, m, size)
            rows = _reshaped(rows, (size * m, k), self.config)
            out = Dot(_aval(rows), B, False, self.tb, self.dtype, **place)(rows, b)
            return _reshaped(out, (size, m) + tuple(_aval(out).shape[1:]), self.config), 0
        raise NotImplementedError(VMAP_UNSUPPORTED.format(op="jask.dot") + (
            " (a product batches when one operand is not batched, with at most 2 axes, and "
            "the other a batch of vectors or matrices)"))

    def backward(self, res, g, ca, cb):
        # C = A @ B with A = op(a), B = op(b): dA = G @ B.T and dB = A.T @ G.
        a, b = res
        A, B = self.in_avals
        ta, tb, cfg = self.ta, self.tb, self.config
        if A.ndim == 1 or B.ndim == 1:
            self._vector_backward(a, b, g, ca, cb)
        elif ta:  # da = dA.T = B @ G.T
            _accum(ca, lambda: _dot_vjp(b, g, tb, True, A, cfg))
        else:
            _accum(ca, lambda: _dot_vjp(g, b, False, not tb, A, cfg))
        if A.ndim == 1 or B.ndim == 1:
            return
        if tb:  # db = dB.T = G.T @ A
            _accum(cb, lambda: _dot_vjp(g, a, True, ta, B, cfg))
        else:
            _accum(cb, lambda: _dot_vjp(a, g, not ta, False, B, cfg))

    def _vector_backward(self, a, b, g, ca, cb):
        """A 1-D operand (never read transposed; the matrix may be, as in a
        gradient's ``X.T @ g``, whose own gradient this is then): the other
        cotangent is an outer product, which is elementwise."""
        A, B = self.in_avals
        ta, tb, cfg = self.ta, self.tb, self.config
        if A.ndim == 1 and B.ndim == 1:  # a . b: g is a scalar
            _accum(ca, lambda: outer(g, b, A, cfg))
            _accum(cb, lambda: outer(g, a, B, cfg))
        elif A.ndim == 1:  # (k,) @ op(b): da = op(b) @ g, dB = outer(a, g)
            _accum(ca, lambda: _dot_vjp(b, g, tb, False, A, cfg))
            _accum(cb, lambda: outer(g, a, B, cfg) if tb else outer(a, g, B, cfg))
        else:  # op(a) @ (k,): dA = outer(g, b), db = op(a).T @ g
            _accum(ca, lambda: outer(b, g, A, cfg) if ta else outer(g, b, A, cfg))
            _accum(cb, lambda: _dot_vjp(a, g, not ta, False, B, cfg))


def _dot_vjp(a, b, ta, tb, like, config):
    """One VJP product, placed (disk or memory) and typed as ``like``."""
    return Dot(_aval(a), _aval(b), ta, tb, like.dtype, to_memory=not _on_disk(like), grad=True,
               config=config)(a, b)


class Fused(DiskPrimitive):
    """``kernel(*operands)`` -> one DiskArray per output dtype, in one pass.

    Operands are DiskArrays of ``shape`` and in-memory scalars; all are read
    in ``dtype``. With ``into`` (an operand's index) the first output is
    written into that operand's store and returned as it (never dead-code
    eliminated: the write is the point).
    """

    def __init__(self, kernel, in_avals, shape: tuple, dtype, out_dtypes: tuple, *,
                 into: int | None = None, align: int | None = None, unread: tuple = (),
                 temporaries: int | None = None, name: str = "fused",
                 config: Config | None = None):
        outs = tuple(DiskArrayType(shape, dt) for dt in out_dtypes)
        super().__init__(in_avals, outs, op=name, kernel=kernel, shape=tuple(shape),
                         dtype=np.dtype(dtype), out_dtypes=tuple(np.dtype(d) for d in out_dtypes),
                         into=into, align=align, unread=tuple(unread),
                         temporaries=temporaries, config=config)

    def disk_work(self):
        on_disk = tuple(isinstance(a, DiskArrayType) for a in self.in_avals)
        return ops.fused(self.op, self.kernel, self.shape, on_disk, self.dtype,
                         self.out_dtypes, self.into, self.align, self.unread, self.temporaries)

    def expand(self, *args):
        return self._run(self.disk_work(), args)

    def mutates(self) -> bool:
        return self.params["into"] is not None

    def dce(self, used_outs):
        if self.into is not None:
            return True, True, self
        return super().dce(used_outs)


def widened(prim):
    """A product contracting the rows as one whose partials are taken in
    float64 throughout (``Dot``'s ``wide``), for a term of a sum that cancels
    (``X.T @ e - m * (X.T @ 1)``, ``m`` the mean of ``e``: see
    :func:`jask.core.rewrite.prune_before_lowering`): float32 products of 1,024-row strips lost
    three digits there on data of mean 100. Any other op as it is."""
    if not isinstance(prim, Dot) or prim.params.get("wide"):
        return prim
    a, b = prim.in_avals
    return Dot(a, b, prim.ta, prim.tb, prim.dtype, to_memory=not _on_disk(prim.out_aval),
               grad=prim.grad, config=prim.config, wide=True)


def dot(a, b, dtype, *, config=None):
    A, B = _aval(a), _aval(b)
    to_memory = A.ndim == 1 and B.ndim == 1  # a scalar
    return Dot(A, B, False, False, dtype, to_memory=to_memory, config=config)(a, b)
