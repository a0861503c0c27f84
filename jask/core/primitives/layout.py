"""Layout: the transposed view of a store (:class:`Transpose`) and the
function that binds it; what a batching rule uses to move a batch axis.
The other layout ops (slices, joins, reshapes) are still in the package's
``__init__``, re-exporting this.
"""
from __future__ import annotations

import numpy as np

from jask.base.config import Config
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _accum, _aval
from jask.engine import work

__all__ = ["Transpose", "transpose"]


class Transpose(DiskPrimitive):
    """Axes permuted by ``axes`` (a view of the same store)."""

    def __init__(self, aval: DiskArrayType, axes: tuple, grad: bool, config: Config | None):
        out = DiskArrayType(tuple(aval.shape[i] for i in axes), aval.dtype)
        super().__init__((aval,), out, axes=tuple(axes), grad=grad, config=config)

    def disk_work(self):
        return work.transpose(self.axes, grad=self.grad)

    def expand(self, a):
        # eagerly, the transpose of a pending matrix is pending too (jask.engine.lazy):
        # Z.T @ Z of a pending Z is then one Gram band group over what Z reads
        return self._run(self.disk_work(), [a], self._describe("transpose", axes=self.axes))

    def tangent(self, primals, out, tangents):
        return self._linear(primals, tangents, (0,))

    def backward(self, res, g, ca):
        inverse = tuple(int(i) for i in np.argsort(self.axes))
        _accum(ca, lambda: transpose(g, inverse, config=self.config, grad=True))


def transpose(a, axes, *, config=None, grad=False):
    return Transpose(_aval(a), tuple(axes), grad, config)(a)
