"""The memory model: how large a tile may be, given the budget.

One plain formula governs every op::

    footprint(task) = sum(copies * bytes of each tile the task holds)
    footprint(task) * tasks_at_once <= budget

A tile read from Zarr is held twice (the chunk bytes Zarr reads and the
array it decodes them into), a tile written is held twice (the array and the
bytes Zarr encodes), and a computed result once more for numpy's
temporaries. The constants below count those copies per op; ``chunk_bytes``
turns the worst of them into one chunk size for the stores jask creates, so
that a task of any op over jask-made stores fits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BudgetError", "TileCost", "chunk_bytes", "chunk_shape", "check_fits", "nbytes"]

#: Copies of a tile held while it is read (raw chunk bytes + decoded array).
READ_COPIES = 2
#: Copies held while a result tile is computed and written (result, a numpy
#: temporary, the encoded bytes).
WRITE_COPIES = 3
#: The most tile-sized buffers any op's task holds: dot reads two tiles and
#: keeps an accumulator and the product of the current pair.
MAX_TILES_PER_TASK = 2 * READ_COPIES + WRITE_COPIES + 1
#: Upper bound on a chunk, so that even huge budgets keep tasks many and
#: parallel.
MAX_CHUNK_BYTES = 128 * 2**20


class BudgetError(MemoryError):
    """An op's smallest plan does not fit in the memory budget."""


def nbytes(shape, dtype) -> int:
    """Bytes of an array of this shape and dtype.

    Example:
      >>> nbytes((3, 4), "float32")
      48
    """
    return math.prod(shape) * np.dtype(dtype).itemsize


def chunk_bytes(budget: int, workers: int) -> int:
    """Chunk size for jask-made stores: a task of any op holds at most
    ``MAX_TILES_PER_TASK`` chunks, and ``workers`` tasks run at once.

    Example:
      >>> chunk_bytes(512 * 2**20, 2) == 512 * 2**20 // (2 * MAX_TILES_PER_TASK)
      True
    """
    return max(1, min(MAX_CHUNK_BYTES, budget // (workers * MAX_TILES_PER_TASK)))


def chunk_shape(shape: tuple[int, ...], itemsize: int, max_bytes: int) -> tuple[int, ...]:
    """A chunk of at most ``max_bytes``, square-ish in the last two axes.

    Square tiles in the trailing plane keep transposes and matrix products
    reading whole chunks; leading axes are filled only once the trailing
    plane fits whole.

    Example:
      >>> chunk_shape((1000, 1000), 4, 4 * 100 * 100)
      (100, 100)
      >>> chunk_shape((100000, 3), 4, 4 * 900)
      (300, 3)
      >>> chunk_shape((7, 5, 3), 8, 8 * 30)
      (2, 5, 3)
    """
    if not shape:
        return ()
    budget = max(1, max_bytes // itemsize)
    if len(shape) == 1:
        return (max(1, min(shape[0], budget)),)
    rows, cols = shape[-2], shape[-1]
    side = max(1, math.isqrt(budget))
    if rows * cols <= budget:
        tail = (max(rows, 1), max(cols, 1))
    elif cols < side:
        tail = (min(rows, budget // cols), cols)
    elif rows < side:
        tail = (rows, min(cols, budget // rows))
    else:
        tail = (side, side)
    lead = []
    room = budget // (tail[0] * tail[1]) if rows * cols <= budget else 1
    for dim in reversed(shape[:-2]):
        take = max(1, min(dim, room))
        lead.append(take)
        room = room // take if take == dim else 1
    return tuple(reversed(lead)) + tail


@dataclass(frozen=True)
class TileCost:
    """The bytes one task of an op holds, and how many tasks run at once."""

    op: str
    tile: tuple
    task_bytes: int
    tasks_at_once: int

    @property
    def total(self) -> int:
        return self.task_bytes * self.tasks_at_once


def check_fits(cost: TileCost, budget: int) -> None:
    """Refuse a plan whose concurrent tasks would hold more than the budget.

    Example:
      >>> check_fits(TileCost("add", (10, 10), 800, 2), 10_000)
      >>> check_fits(TileCost("add", (10, 10), 800, 2), 1_000)
      Traceback (most recent call last):
      ...
      jask.memory.BudgetError: jask.add: tiles of shape (10, 10) need 800 bytes per task x 2 tasks at once = 1600 bytes, over the memory budget of 1000 bytes
    """
    if cost.total > budget:
        raise BudgetError(
            f"jask.{cost.op}: tiles of shape {cost.tile} need {cost.task_bytes} bytes per "
            f"task x {cost.tasks_at_once} tasks at once = {cost.total} bytes, over the "
            f"memory budget of {budget} bytes")
