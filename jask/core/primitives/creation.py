"""Creation: a store made from an in-memory array (:class:`FromValue`) and
its transpose, a store read whole into memory (:class:`Materialize`), each
the other's VJP; their forwards (their works, in
:mod:`jask.engine.ops.creation`), tangents and the functions that bind them.
A constant store (``full``, ``zeros``, ``arange``) is a map of no operand,
:func:`jask.core.primitives.elementwise.full`.

Both are linear in their operand (their tangent is the op on its tangent)
but declare no ``linear_operands``: taking waiting scalars out of one would
read or write the whole array once per scalar. None has a batching rule
(``jax.vmap`` is refused, naming the op, by :meth:`DiskPrimitive.batched`).
"""
from __future__ import annotations

import jax
from jax.experimental.hijax import ShapedArray

from jask.base.config import Config
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _accum, _aval
from jask.engine.ops import creation as ops

__all__ = ["FromValue", "Materialize", "from_value", "materialize"]


class Materialize(DiskPrimitive):
    """The whole array as an in-memory jax.Array."""

    def __init__(self, aval: DiskArrayType, config: Config | None):
        super().__init__((aval,), ShapedArray(aval.shape, aval.dtype), config=config)

    def disk_work(self):
        return ops.read_all

    def expand(self, a):
        return self._run(self.disk_work(), [a])

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, ca):
        _accum(ca, lambda: FromValue(self.in_avals[0], True, self.config)(g))


class FromValue(DiskPrimitive):
    """An in-memory array written to a new store."""

    def __init__(self, aval: DiskArrayType, grad: bool, config: Config | None):
        super().__init__((ShapedArray(aval.shape, aval.dtype),), aval, grad=grad, config=config)

    def disk_work(self):
        return ops.write_value(grad=self.grad)

    def expand(self, x):
        return self._run(self.disk_work(), [x])

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, cx):
        _accum(cx, lambda: Materialize(self.out_aval, self.config)(g))


def materialize(a, *, config=None):
    return Materialize(_aval(a), config)(a)


def from_value(x, *, config=None, grad=False):
    x = jax.numpy.asarray(x)
    return FromValue(DiskArrayType(x.shape, x.dtype), grad, config)(x)
