"""Tile planning for blockwise ops: which output tile each task computes.

A blockwise task computes one tile of an output of ``shape`` from one tile
of each operand store. An operand follows the output's axes through its
``axes`` map: ``axes[i]`` is the output axis that operand axis ``i`` runs
along, or ``None`` for a broadcast axis of length 1. The planner picks a
tile whose task, times the tasks that run at once, fits the budget
(:mod:`jask.memory`), preferring tiles aligned with the operands' chunks.
"""
from __future__ import annotations

import numpy as np

from jask import memory
from jask.storage import StoreSpec

__all__ = ["Operand", "operand_tile", "plan_blockwise"]

#: (store, axes): see the module docstring.
Operand = tuple[StoreSpec, tuple]


def operand_tile(axes: tuple, tile: tuple) -> tuple:
    """The tile of an operand read for one output tile.

    Example:
      >>> operand_tile((None, 1), (8, 4))
      (1, 4)
    """
    return tuple(1 if a is None else tile[a] for a in axes)


def _aligned(shape: tuple, operands) -> list[tuple]:
    """Output tiles equal to each operand's chunks along the axes it follows."""
    tiles = []
    for store, axes in operands:
        tile = list(shape)
        for i, a in enumerate(axes):
            if a is not None:
                tile[a] = min(store.chunks[i], shape[a])
        tiles.append(tuple(max(1, t) for t in tile))
    if len(tiles) > 1:
        tiles.append(tuple(min(ts) for ts in zip(*tiles)))
    return tiles


def plan_blockwise(op: str, shape: tuple, dtype, operands, *, budget: int, workers: int,
                   out_copies: int = memory.ELEMENTWISE_OUT_COPIES,
                   fixed_bytes: int = 0) -> tuple[tuple, memory.TileCost]:
    """The output tile of a blockwise op and what one of its tasks holds.

    ``fixed_bytes`` are held once whatever the tiles (in-memory operands).

    Example:
      >>> from jask.storage import StoreSpec
      >>> x = StoreSpec("x", (100, 100), np.dtype("float32"), (10, 100))
      >>> plan_blockwise("add", (100, 100), "float32", [(x, (0, 1))], budget=10**6, workers=2)[0]
      (10, 100)
    """
    shape = tuple(shape)
    candidates = _aligned(shape, operands)
    from jask.graph.builders import default_chunks  # the default chunking of new stores
    candidates.extend(memory.shrinking(default_chunks(shape, dtype, budget, workers)))

    def cost(tile):
        reads = [(store, operand_tile(axes, tile)) for store, axes in operands]
        return memory.task_cost(op, tile, reads, memory.nbytes(tile, dtype), out_copies, workers)

    try:
        return memory.first_fit(candidates, cost, budget - fixed_bytes)
    except memory.BudgetError as err:
        if not fixed_bytes:
            raise
        raise memory.BudgetError(f"{err}: the memory budget of {budget} bytes less the "
                                 f"{fixed_bytes} bytes of in-memory operands") from None
