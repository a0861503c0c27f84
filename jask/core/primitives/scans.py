"""Scans: cumulative sums and products along an axis (``cumsum``,
``cumprod``), one primitive, :class:`Cumsum`, with its forward (its work, in
:mod:`jask.engine.ops.scans`), its tangent and its VJP, and the functions
that bind it (arguments already checked by the public layer).

A cumulative sum is linear in its operand: its tangent is the op on the
tangent, its VJP the reverse cumulative sum of the cotangent. A cumulative
product has a VJP (three scans and four maps, zeros included, as
jax.numpy's) and no forward-mode rule (refused, naming the op). Neither has
a batching rule (``jax.vmap`` is refused, naming the op, by
:meth:`DiskPrimitive.batched`).
"""
from __future__ import annotations

import numpy as np

from jask.base.config import Config
from jask.core import ufuncs
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _accum, _aval
from jask.core.primitives.elementwise import mapped
from jask.engine.ops import scans as ops

__all__ = ["Cumsum", "cumsum", "cumprod"]


class Cumsum(DiskPrimitive):
    """The cumulative sum of a DiskArray along ``axis`` in ``dtype``
    (``reverse``: summed from the end). Its VJP is the reverse cumulative
    sum of the cotangent along the same axis."""

    def __init__(self, aval: DiskArrayType, axis: int, dtype, *, reverse: bool = False,
                 grad: bool = False, config: Config | None = None, name: str = "cumsum",
                 kind: str = "sum"):
        super().__init__((aval,), DiskArrayType(aval.shape, dtype), op=name, axis=int(axis),
                         dtype=np.dtype(dtype), reverse=bool(reverse), grad=grad,
                         config=config, kind=kind)

    def disk_work(self):
        return ops.scan(self.op, self.axis, self.reverse, self.dtype, grad=self.grad,
                        kind=self.kind)

    def expand(self, a):
        return self._run(self.disk_work(), [a])

    def tangent(self, primals, out, tangents):
        if self.kind == "prod":
            raise NotImplementedError(
                "jask.cumprod: forward-mode differentiation (jax.jvp, jax.hessian, jax.jvp of "
                "jax.grad) is not supported; reverse mode is (jax.grad)")
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, ca):
        aval = self.in_avals[0]
        if self.kind == "prod":  # (``kind="prod"``: a cumulative product, cumprod)
            _accum(ca, lambda: _cumprod_vjp(self, res[0], g))
            return
        _accum(ca, lambda: Cumsum(_aval(g), self.axis, aval.dtype, reverse=not self.reverse,
                                  grad=True, config=self.config, name="cumsum_vjp")(g))


def _cumprod_vjp(prim, x, g):
    """d cumprod, zeros included (as jax.numpy): with z a lane's first zero
    and y' the cumulative product of x with that zero read as one, element
    i < z gets sum_{i<=j<z} g_j y'_j / x_i, element z gets sum_{j>=z} g_j y'_j
    and those after z nothing. Three scans and four maps (the zeros' running
    count says which case an element is)."""
    aval, axis, cfg = prim.in_avals[0], prim.axis, prim.config
    dtype = aval.dtype
    count = np.dtype(np.int32 if aval.shape[axis] < 2**31 else np.int64)

    def scan(a, out, reverse, kind):
        return Cumsum(_aval(a), axis, out, reverse=reverse, grad=True, config=cfg,
                      name=f"cumprod_vjp_{kind}", kind=kind)(a)

    def map_(row, arrays, out):  # a Blockwise
        return mapped(row, arrays, dtype, out, cfg, "cumprod_vjp")

    zeros = scan(map_(ufuncs.IS_ZERO, (x,), count), count, False, "sum")
    y = scan(map_(ufuncs.FIRST_ZERO_AS_ONE, (x, zeros), dtype), dtype, False, "prod")
    before = scan(map_(ufuncs.BEFORE_ZERO, (g, y, zeros), dtype), dtype, True, "sum")
    total = scan(map_(ufuncs.MUL, (g, y), dtype), dtype, True, "sum")
    return map_(ufuncs.CUMPROD_VJP, (before, total, x, zeros), dtype)


def cumsum(a, axis, dtype, *, config=None):
    return Cumsum(_aval(a), axis, dtype, config=config)(a)


def cumprod(a, axis, dtype, *, config=None):
    return Cumsum(_aval(a), axis, dtype, config=config, name="cumprod", kind="prod")(a)
