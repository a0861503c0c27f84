"""Gathers and sorts: an outer gather and its scatter-add, sorting along an
axis, searchsorted; each primitive with its forward (its work, in
:mod:`jask.engine.ops.gathers`), its tangent and its VJP, and the functions
that bind them (arguments already checked by the public layer).

Gathers, scatter-adds and the sort's ``unsort`` are linear in their operand
0 (the positions fixed): their tangent is the op itself on its tangent. None
has a batching rule (``jax.vmap`` is refused, naming the op, by
:meth:`DiskPrimitive.batched`), and an index (argsort, searchsorted) has no
derivative.
"""
from __future__ import annotations

import jax
import numpy as np

from jask.base.config import Config
from jask.core._jax_internals import is_tracer
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _accum, _aval, _on_disk, _out_type
from jask.engine.ops import gathers as ops

__all__ = ["Gather", "ScatterAdd", "Sort", "Search", "gather", "sort", "searchsorted"]


# --- outer gathers: flip, roll, take, repeat, tile, pad -------------------------------

class Gather(DiskPrimitive):
    """``a[np.ix_(...)]``: the axes ``indexed`` take their positions from
    in-memory int vectors (the operands after ``a``), the others keep them
    (flip, roll, take, repeat, tile); ``fill`` where an index is out of
    range. Its VJP is the same gather by the inverse positions when every
    vector is a ``permutation`` (flip, roll), else a :class:`ScatterAdd`.
    ``local``: a run of outputs reads a run of sources of at most its length
    (flip, roll, repeat, tile), which lets the planner read smaller windows."""

    def __init__(self, aval: DiskArrayType, index_avals: tuple, indexed: tuple, fill=None, *,
                 permutation: bool = False, local: bool = False, grad: bool = False,
                 config: Config | None = None, name: str = "gather"):
        shape = list(aval.shape)
        for d, v in zip(indexed, index_avals):
            shape[d] = v.shape[0]
        super().__init__((aval,) + tuple(index_avals), DiskArrayType(tuple(shape), aval.dtype),
                         op=name, indexed=tuple(indexed), fill=fill,
                         permutation=bool(permutation), local=bool(local), grad=grad,
                         config=config)

    def disk_work(self):
        return ops.gather(self.op, self.indexed, self.out_aval.shape, self.fill,
                          local=self.local, grad=self.grad)

    def expand(self, a, *index):
        return self._run(self.disk_work(), [a, *index])

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, ca, *cindex):
        a, *index = res
        name = f"{self.op}_vjp"
        if self.permutation:
            _accum(ca, lambda: gather(g, [jax.numpy.argsort(i) for i in index], self.indexed,
                                      permutation=True, local=self.local, grad=True,
                                      config=self.config, name=name))
        else:
            _accum(ca, lambda: ScatterAdd(self.in_avals[0], _aval(g), self.in_avals[1:],
                                          self.indexed, config=self.config, name=name)(
                                              g, *index))


class ScatterAdd(DiskPrimitive):
    """Zeros of ``aval`` with ``g`` added where a :class:`Gather` by the
    same index vectors took its elements (repeated positions add up)."""

    def __init__(self, aval: DiskArrayType, g_aval, index_avals: tuple, indexed: tuple, *,
                 config: Config | None = None, name: str = "gather_vjp"):
        super().__init__((g_aval,) + tuple(index_avals), aval, op=name, indexed=tuple(indexed),
                         config=config)

    def disk_work(self):
        return ops.scatter_add(self.op, self.indexed, self.out_aval.shape,
                               self.out_aval.dtype)

    def expand(self, g, *index):
        return self._run(self.disk_work(), [g, *index])

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, cg, *cindex):
        # (a gradient's gradient) the gather again, by the same positions; out of
        # range the scatter dropped its element, so the gather fills zero there
        _, *index = res
        _accum(cg, lambda: gather(g, index, self.indexed, 0, grad=True, config=self.config,
                                  name=f"{self.op}_vjp"))



# --- sorting along an axis, searching a sorted array ------------------------------

class Sort(DiskPrimitive):
    """Sorting along ``axis`` (whole lanes per tile): ``kind`` "sort" (the
    values), "argsort" (jnp.argsort's indices), "perm" (the order jnp.sort
    puts elements in) or "unsort" (sort's VJP: the cotangent ``g`` put back
    by that order; two inputs, ``g`` and the order). Its VJP gathers back by
    the order, as jax's sort does."""

    def __init__(self, avals: tuple, axis: int, kind: str, dtype, *, descending: bool = False,
                 grad: bool = False, config: Config | None = None, name: str | None = None):
        super().__init__(tuple(avals), DiskArrayType(avals[0].shape, dtype), op=name or kind,
                         axis=int(axis), kind=kind, descending=bool(descending),
                         dtype=np.dtype(dtype), grad=grad, config=config)

    def disk_work(self):
        return ops.sort(self.op, self.kind, self.axis, self.descending, self.dtype,
                        grad=self.grad)

    def expand(self, *args):
        return self._run(self.disk_work(), list(args))

    def tangent(self, primals, out, tangents):
        if self.kind == "unsort":  # linear in g (the order is an index)
            return self._linear(primals, tangents, (0,))
        if self.kind != "sort":
            return super().tangent(primals, out, tangents)
        (x,), (t,) = primals, tangents
        aval = self.in_avals[0]
        n = aval.shape[self.axis]
        index = np.dtype(np.int32 if n < 2**31 else np.int64)
        # the sorted tangent is t taken in sort's order: t put back by the inverse order
        perm = Sort((aval,), self.axis, "perm", index, descending=self.descending,
                    grad=self.grad, config=self.config, name="sort_perm")(x)
        inverse = Sort((_aval(perm),), self.axis, "argsort", index, grad=self.grad,
                       config=self.config, name="sort_inverse")(perm)
        return Sort((_aval(t), _aval(inverse)), self.axis, "unsort", aval.dtype,
                    grad=self.grad, config=self.config, name="sort_jvp")(t, inverse)

    def backward(self, res, g, *accums):
        if self.kind == "unsort":  # sort's VJP (a gradient's gradient): linear in g
            _accum(accums[0], lambda: self._unsort_transposed(res[1], g))
            return
        if self.kind != "sort":
            super().backward(res, g, *accums)
        (x,) = res
        aval = self.in_avals[0]

        def cotangent():
            n = aval.shape[self.axis]
            index = np.dtype(np.int32 if n < 2**31 else np.int64)
            perm = Sort((aval,), self.axis, "perm", index, descending=self.descending,
                        grad=True, config=self.config, name="sort_perm")(x)
            return Sort((_aval(g), _aval(perm)), self.axis, "unsort", aval.dtype, grad=True,
                        config=self.config, name="sort_vjp")(g, perm)
        _accum(accums[0], cotangent)

    def _unsort_transposed(self, order, g):
        """The transpose of putting ``g`` back by ``order`` (out[order[i]] = g[i]):
        g taken in that order (g[order[i]]), which is g put back by the
        inverse order."""
        index = self.in_avals[1]
        inverse = Sort((index,), self.axis, "argsort", index.dtype, grad=True,
                       config=self.config, name="sort_inverse")(order)
        return Sort((_aval(g), _aval(inverse)), self.axis, "unsort", self.dtype, grad=True,
                    config=self.config, name=f"{self.op}_vjp")(g, inverse)



class Search(DiskPrimitive):
    """searchsorted: where each of ``values`` goes in the sorted 1-D
    ``sorted_`` (either on disk or in memory), compared in ``dtype``; the
    result has the values' shape, in memory when the values are. An index
    has no gradient."""

    def __init__(self, values, sorted_, side: str, dtype, out_dtype, *,
                 config: Config | None = None):
        to_memory = not _on_disk(values)
        super().__init__((values, sorted_), _out_type(values.shape, out_dtype, not to_memory),
                         op="searchsorted", side=side, dtype=np.dtype(dtype),
                         out_dtype=np.dtype(out_dtype), config=config)

    def disk_work(self):
        return ops.search(self.side, tuple(_on_disk(a) for a in self.in_avals), self.dtype,
                          self.out_dtype, to_memory=not _on_disk(self.out_aval))

    def expand(self, v, a):
        return self._run(self.disk_work(), [v, a])

    def of_nothing(self):
        return 0  # every value goes before the first element of an empty array



# --- binding ---------------------------------------------------------------------

def _int32_positions(i):
    """Gather positions as int32, as the gather takes them: wider ones clipped
    to int32's range first, so a position past it stays out of range (a
    fill, or an IndexError) and never wraps around onto one inside."""
    xp = jax.numpy if is_tracer(i) else np
    i = xp.asarray(i)
    dtype, info = np.dtype(i.dtype), np.iinfo(np.int32)
    if dtype.kind == "u" and dtype.itemsize >= 4:
        i = xp.minimum(i, info.max)
    elif dtype.kind == "i" and dtype.itemsize > 4:
        i = xp.clip(i, info.min, info.max)
    return jax.numpy.asarray(i, np.int32)


def gather(a, index, indexed, fill=None, *, permutation=False, local=False, config=None,
           grad=False, name="gather"):
    index = [_int32_positions(i) for i in index]
    return Gather(_aval(a), tuple(_aval(i) for i in index), tuple(indexed), fill,
                  permutation=permutation, local=local, grad=grad, config=config,
                  name=name)(a, *index)



def sort(a, axis, kind, dtype, *, descending=False, config=None):
    return Sort((_aval(a),), axis, kind, dtype, descending=descending, config=config)(a)



def searchsorted(values, sorted_, side, dtype, out_dtype, *, config=None):
    return Search(_aval(values), _aval(sorted_), side, dtype, out_dtype,
                  config=config)(values, sorted_)
