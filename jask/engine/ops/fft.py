"""The FFT, the engine half: discrete Fourier transforms along one axis, tile
by tile, each tile holding whole lanes; its planner, its work
(:class:`~jask.engine.work.Work`), its graph and block task. The primitive
that binds it is :class:`jask.core.primitives.fft.FFT`.

A tile spans the whole transformed axis (its input length in the input, the
transform's output length in the output) for a block of the other axes, so
every lane is transformed in one task by ``numpy.fft`` (pocketfft, in double
precision whatever the input's, then rounded to the result's dtype: no less
accurate than jax.numpy's single-precision transforms) and written as one
whole output chunk; a lane that does not fit in the budget is refused by the
planner (:func:`jask.engine.plan.ops.lanes`, which a sort's lanes share). Multi-axis transforms are
these, one axis after another. Nothing here knows of JAX.
"""
from __future__ import annotations

import uuid

import numpy as np

from jask.base.config import Config
from jask.engine.builders import key_name, regions
from jask.engine.plan import ops as planner
from jask.engine.plan.tiles import Plan
from jask.engine.work import Work, decoded_first, produce
from jask.store.spec import StoreSpec
from jask.store.tiles import read, write

__all__ = ["KINDS", "TEMPORARY_BYTES", "out_length", "transform", "fft", "fft_graph"]

#: The one-axis transforms, numpy.fft's names (the standard's too).
KINDS = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")

#: Bytes per element of the longer lane (input or output) an FFT task holds
#: besides its input and output tiles: the lanes in double precision
#: (complex128), pocketfft's result before rounding and its scratch.
TEMPORARY_BYTES = 48


def out_length(kind: str, n: int) -> int:
    """The output's length along the axis for a transform of length ``n``.

    Example:
      >>> out_length("fft", 8), out_length("rfft", 8), out_length("irfft", 8)
      (8, 5, 8)
    """
    return n // 2 + 1 if kind in ("rfft", "ihfft") else n


def transform(kind: str, tile: np.ndarray, n: int, axis: int, norm: str, dtype) -> np.ndarray:
    """One tile's transform along ``axis`` (every lane whole), in ``dtype``.

    Example:
      >>> transform("rfft", np.array([[1.0, 2.0, 3.0, 4.0]], np.float32), 4, 1, "backward",
      ...           np.complex64)
      array([[10.+0.j, -2.+2.j, -2.+0.j]], dtype=complex64)
    """
    wide = np.complex128 if np.iscomplexobj(tile) else np.float64
    result = getattr(np.fft, kind)(tile.astype(wide, copy=False), n=n, axis=axis, norm=norm)
    return np.ascontiguousarray(result.astype(dtype, copy=False))


def _fft_block(kind: str, source: StoreSpec, out: StoreSpec, region: tuple, axis: int, n: int,
               norm: str) -> None:
    within = list(region)
    within[axis] = slice(0, source.shape[axis])
    tile = read(source, tuple(within))
    write(out, region, transform(kind, tile, n, axis, norm, out.dtype))


def fft_graph(op: str, kind: str, source: StoreSpec, out: StoreSpec, tile: tuple, axis: int,
              n: int, norm: str, token: str):
    """One task per tile of whole lanes (a whole output chunk)."""
    name = key_name(op, token)
    graph = {(name, i): (_fft_block, kind, source, out, region, axis, n, norm)
             for i, region in enumerate(regions(tuple(out.shape), tile))}
    return graph, list(graph)


def fft(op: str, kind: str, axis: int, n: int, norm: str, dtype):
    """Work for a one-axis discrete Fourier transform (``kind``: see
    :data:`KINDS`) of length ``n`` along ``axis``, whole lanes per tile,
    written to a new store of ``dtype``."""
    def plan_of(stores, values, config: Config) -> Plan:
        return planner.lanes(op, stores, axis, out_length(kind, n), dtype,
                             TEMPORARY_BYTES, config,
                             holds="a Fourier transform holds a whole lane in memory",
                             shorter="transform shorter lanes (n=)")

    def work(stores, values, config: Config):
        planned = plan_of(stores, values, config)
        shape = list(stores[0].shape)
        shape[axis] = out_length(kind, n)
        token = uuid.uuid4().hex
        return produce(config, op, tuple(shape), dtype, planned,
                       lambda out: fft_graph(op, kind, stores[0], out, planned.tile, axis, n,
                                             norm, token),
                       grad=False)
    return decoded_first(Work(op, work, plan_of))
