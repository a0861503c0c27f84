"""Fused graphs: one kernel, several outputs, one pass over the tiles.

An optimizer step reads a gradient and its moments and writes new moments
and an update: ``kernel(*operand tiles)`` returns one tile per output, and
each task writes them all, so every input is read once and every output
written once. Operands line up with the full shape as in
:mod:`jask.engine.blockwise`. Nothing here knows of JAX.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from jask.engine.blockwise import Operand
from jask.engine.builders import key_name, regions
from jask.store.tiles import prefetch, write

__all__ = ["fused_block", "fused_graph"]


def fused_block(kernel: Callable, outs: tuple, region: tuple, operands: tuple) -> None:
    """outs[k][region] = kernel(*operand tiles)[k], whole output chunks.

    The tiles are this task's own arrays: the kernel may overwrite them (an
    optimizer step holds no more than one temporary tile that way).

    Example:
      >>> import tempfile, os
      >>> from jask.store.layout import create_at
      >>> from jask.store.tiles import read
      >>> d = tempfile.mkdtemp()
      >>> out = create_at(os.path.join(d, "o"), (3,), "f4", (3,))
      >>> x = Operand(np.arange(3.0, dtype="f4"), (0,))
      >>> fused_block(lambda a: (a * 2,), (out,), (slice(0, 3),), (x,))
      >>> read(out, (slice(0, 3),))
      array([0., 2., 4.], dtype=float32)
    """
    for x in operands:
        if x.on_disk:
            prefetch(x.source, tuple(slice(0, 1) if a is None else region[a]
                                             for a in x.axes))
    shape = tuple(s.stop - s.start for s in region)
    tiles = [x.tile(region) for x in operands]
    # the kernel may work in place: every tile is this task's own, writable array
    tiles = [t if t.flags.writeable else t.copy() for t in tiles]
    with np.errstate(all="ignore"):  # nan and inf follow IEEE, as in jax.numpy
        results = list(kernel(*tiles))
    del tiles  # input tiles the kernel did not return are freed before the writes
    for i, out in enumerate(outs):
        tile = np.broadcast_to(np.asarray(results[i]).astype(out.dtype, copy=False), shape)
        results[i] = None  # each output tile is freed once written
        write(out, region, np.ascontiguousarray(tile))
        del tile


def fused_graph(op: str, kernel: Callable, outs: tuple, shape: tuple, tile: tuple,
                operands: tuple[Operand, ...], token: str) -> tuple[dict, list]:
    """One :func:`fused_block` task per tile of ``shape``; ``tile`` is a
    whole number of every output's chunks along each axis.

    Example:
      >>> from jask.store.spec import StoreSpec
      >>> out = StoreSpec("o", (5,), np.dtype("f4"), (2,))
      >>> graph, keys = fused_graph("adam", abs, (out,), (5,), (2,), (), "t")
      >>> len(keys)
      3
    """
    name = key_name(op, token)
    graph = {(name, i): (fused_block, kernel, tuple(outs), region, tuple(operands))
             for i, region in enumerate(regions(shape, tile))}
    return graph, list(graph)
