"""One planner per kind of op: its tiles, output chunks and what a task holds.

Each function here takes the op's input stores (:class:`~jask.store.spec.StoreSpec`),
its in-memory operands as anything with ``shape`` and ``dtype`` (numpy
arrays when the op runs, JAX avals when :func:`jask.visualize` asks), the
op's own parameters and a :class:`~jask.base.config.Config`, and returns a
:class:`~jask.engine.plan.tiles.Plan`, or raises
:class:`~jask.base.memory.BudgetError` when no plan fits. Nothing is read
(but store metadata) or written: the op's work (:mod:`jask.engine.work`)
calls the same function and then builds and runs its graph.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.base.sizes import exact_bytes
from jask.engine.plan.tiles import Plan, plan_blockwise
from jask.store.spec import StoreSpec
from jask.store.tiles import read_model

__all__ = ["view", "transpose", "transpose_chunks", "copy_chunks", "save",
           "n_tiles", "held_bytes"]


def n_tiles(shape: tuple, tile: tuple) -> int:
    """How many tiles of ``tile`` cover ``shape``."""
    return math.prod(-(-n // max(t, 1)) for n, t in zip(shape, tile))


def held_bytes(values) -> int:
    """Bytes of in-memory operands (numpy arrays or avals)."""
    return sum(memory.nbytes(x.shape, x.dtype) for x in values)


# --- copies: transpose, update_ ------------------------------------------------------

def transpose_chunks(source: StoreSpec, axes: tuple, budget: int, workers: int,
                     op: str = "transpose", out_unit: tuple | None = None,
                     out_copies: int = 2) -> tuple[tuple, memory.TileCost]:
    """Output tiles for a permuted copy (see :func:`jask.engine.plan.plan_blockwise`):
    a task holds the tile read, its transposed copy and what writing it
    takes. ``out_unit``: tiles of whole write units of an existing output.

    Example:
      >>> x = StoreSpec("", (1000, 2000), np.dtype("float32"), (1000, 250))
      >>> tile, cost = transpose_chunks(x, (1, 0), 10**8, 2)
      >>> tile, cost.total <= 10**8  # (two tasks: one per worker)
      ((2000, 500), True)
    """
    shape = tuple(source.shape[a] for a in axes)
    follows = tuple(int(i) for i in np.argsort(axes))  # source axis i is output axis follows[i]
    return plan_blockwise(op, shape, source.dtype, [(source, follows)], budget=budget,
                          workers=workers, out_copies=out_copies, out_unit=out_unit)


def copy_chunks(target: StoreSpec, source: StoreSpec, budget: int, workers: int,
                op: str = "update_") -> tuple[tuple, memory.TileCost]:
    """Tiles for copying ``source`` into the existing layout of ``target``:
    whole shards (or chunks) of the target per task, so no two tasks write
    one shard; writing through Zarr holds the encoded bytes (and a shard's
    assembly) besides the tile.

    Example:
      >>> x = StoreSpec("", (1000, 1000), np.dtype("float32"), (250, 1000))
      >>> copy_chunks(x, x, 10**8, 2)[0][0] % 250
      0
    """
    model = read_model(target)
    return transpose_chunks(source, tuple(range(len(source.shape))), budget, workers, op=op,
                            out_unit=model.write_unit or tuple(target.chunks),
                            out_copies=model.write_copies)


def view(op: str, store: StoreSpec) -> Plan:
    """The plan of an op answered by a view of its input (:mod:`jask.store.views`):
    no task, nothing held, nothing read or written.

    Example:
      >>> x = StoreSpec("x", (4, 2), np.dtype("f4"), (4, 2))
      >>> view("transpose", x).tasks
      0
    """
    tile = tuple(store.chunks)
    return Plan(op, tile, tile, 0, memory.TileCost(op, tile, 0, 0))


def transpose(source: StoreSpec, axes: tuple, config: Config) -> Plan:
    """A permuted copy: a new store chunked by the tile."""
    tile, cost = transpose_chunks(source, axes, config.max_memory, config.workers)
    return Plan("transpose", tuple(tile), tuple(tile), cost.tasks, cost)


#: Output-chunk buffers of a save task: the tile read, the whole chunk and
#: its encoded bytes; a compressor adds its output and working memory.
SAVE_OUT_COPIES = 3
COMPRESSOR_COPIES = 2


def save(source: StoreSpec, chunks: tuple | None, compressed: bool, config: Config) -> Plan:
    """``jask.save``: the output chunks (the asked ones, else the source's if
    they fit, else smaller) and what one task writing a chunk holds;
    BudgetError if none fits."""
    copies = SAVE_OUT_COPIES + (COMPRESSOR_COPIES if compressed else 0)

    def cost(tile):
        return memory.task_cost("save", tile, [(read_model(source), tile)],
                                memory.nbytes(tile, source.dtype), copies, config.workers)
    shape = tuple(source.shape)
    if chunks is not None:
        # what every op holds besides its tasks, as plan_blockwise counts it
        memory.check_fits(cost(chunks), config.max_memory - memory.op_overhead(config.max_memory))
        chunks = tuple(chunks)
        return Plan("save", chunks, chunks, n_tiles(shape, chunks), cost(chunks))
    # the planner every op uses: whole source chunks where they fit, never
    # tiles so small that the graph runs away
    axes = tuple(range(len(shape)))
    tile, planned = plan_blockwise("save", shape, source.dtype, [(source, axes)],
                                   budget=config.max_memory, workers=config.workers,
                                   out_copies=copies)
    tile = tuple(tile)
    return Plan("save", tile, tile, planned.tasks, planned)


# --- sorting: whole lanes per tile -------------------------------------------------------

__all__ += ["lanes"]


def lanes(op: str, stores: list, axis: int, out_length: int, out_dtype, temporary_bytes: int,
          config: Config, *, holds: str, shorter: str) -> Plan:
    """An op on whole lanes along ``axis`` (a sort, an FFT): output tiles span
    the whole axis (``out_length``; the inputs' tiles span theirs), the other
    axes halved from the default chunks until a task fits (one task at a time
    if need be). A task holds its input tiles, the result and
    ``temporary_bytes`` per element of the longer lane. Refused, naming the
    op, the lane and the budget (``holds``: why a lane is whole; ``shorter``:
    the way around), when one lane does not fit."""
    shape = tuple(stores[0].shape)
    n = shape[axis]
    longest = max(n, out_length)
    models = [read_model(s) for s in stores]

    def cost_of(tile, at_once):
        in_tile = tuple(n if d == axis else t for d, t in enumerate(tile))
        cost = memory.task_cost(op, tile, [(m, in_tile) for m in models],
                                memory.nbytes(tile, out_dtype), memory.ELEMENTWISE_OUT_COPIES,
                                at_once)
        across = math.prod(t for d, t in enumerate(tile) if d != axis)
        return dataclasses.replace(cost, task_bytes=cost.task_bytes
                                   + across * longest * temporary_bytes)

    out_shape = tuple(out_length if d == axis else s for d, s in enumerate(shape))
    others = tuple(1 if d == axis else s for d, s in enumerate(shape))
    start = memory.default_chunks(others, out_dtype, config.max_memory, config.workers)
    tiles = [tuple(max(out_length, 1) if d == axis else t for d, t in enumerate(tile))
             for tile in memory.shrinking(start)]  # (an empty axis: chunks of one)
    # a lane of a compressed store decodes every chunk it crosses, whole: those decode
    # buffers ran 1.14-1.25x the model with two tasks at once (zstd, the memory grid)
    compressed = any(not m.raw and m.codec != "none" for m in models)
    for at_once in sorted({1 if compressed else config.workers, 1}, reverse=True):
        for tile in tiles:
            cost = cost_of(tile, at_once)
            if cost.total <= config.max_memory:
                return Plan(op, tile, tile, n_tiles(out_shape, tile), cost)
    need = cost_of(tiles[-1], 1).total
    raise memory.BudgetError(
        f"jask.{op}: one lane along axis {axis} of shape {shape} ({n} elements, a tile of "
        f"shape {tiles[-1]}) needs {exact_bytes(need)} in one task, over the memory budget of "
        f"{exact_bytes(config.max_memory)}: {holds}. Raise the budget "
        f"to at least {exact_bytes(need)}, or {shorter}")
