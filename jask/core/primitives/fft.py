"""The FFT: :class:`FFT`, a discrete Fourier transform along one axis (whole
lanes per tile), with its forward (its work, in :mod:`jask.engine.ops.fft`)
and the function that binds it (arguments already checked by
:mod:`jask.api.fft`; a multi-axis transform is these, one axis after
another).

Its values are complex (or a real transform's inverse, of complex input):
it has no derivative rules, nor a batching rule; each is refused, naming the
op, by :class:`~jask.core.primitives.base.DiskPrimitive`'s defaults. It
declares no ``linear_operands``.
"""
from __future__ import annotations

import numpy as np

from jask.base.config import Config
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _aval
from jask.engine.ops import fft as ops

__all__ = ["FFT", "fft"]


class FFT(DiskPrimitive):
    """A discrete Fourier transform along ``axis`` (whole lanes per tile):
    ``kind`` one of :data:`jask.engine.ops.fft.KINDS`, of length ``n``, the
    result ``shape`` and ``dtype``. Complex values: no derivative rules
    (refused, naming the op)."""

    def __init__(self, aval, axis: int, kind: str, n: int, norm: str, shape: tuple, dtype, *,
                 config: Config | None = None):
        super().__init__((aval,), DiskArrayType(tuple(shape), dtype), op=kind, axis=int(axis),
                         kind=kind, n=int(n), norm=norm, dtype=np.dtype(dtype), config=config)

    def disk_work(self):
        return ops.fft(self.op, self.kind, self.axis, self.n, self.norm, self.dtype)

    def expand(self, x):
        return self._run(self.disk_work(), [x])


def fft(a, axis, kind, n, norm, shape, dtype, *, config=None):
    return FFT(_aval(a), axis, kind, n, norm, shape, dtype, config=config)(a)
