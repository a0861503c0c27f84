"""The memory model: how large a tile may be, given the budget.

One plain formula governs every op::

    task_bytes = sum(bytes of the input tiles it keeps)
               + IN_FLIGHT_COPIES * (bytes of the largest chunk span it reads)
               + out_copies * (bytes of its output tile)
    task_bytes * tasks_at_once <= budget

Reading a tile decodes every chunk the tile touches (its *span*): through
zarr-python a chunk's raw bytes and the decoded chunk are both held while it
is read, and the tile is then copied out. (jask's raw path for uncompressed
chunks reads into one buffer, so there the formula is conservative.) Writing holds the result and its encoded bytes;
numpy temporaries or a matmul accumulator add copies of the output tile.
``chunk_bytes`` sizes the chunks of the stores jask creates so that a task
of any op over them fits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["BudgetError", "TileCost", "chunk_bytes", "chunk_shape", "check_fits", "nbytes",
           "span_bytes", "task_cost", "first_fit"]

#: Buffers of a chunk's size held while it is read: raw bytes + decoded chunk.
IN_FLIGHT_COPIES = 2
#: Output-tile buffers of an elementwise task: result, a numpy temporary,
#: encoded bytes.
ELEMENTWISE_OUT_COPIES = 3
#: The most chunk-sized buffers a task over jask-made stores holds: two input
#: tiles, one chunk in flight (twice), and three output-tile buffers.
MAX_TILES_PER_TASK = 2 + IN_FLIGHT_COPIES + ELEMENTWISE_OUT_COPIES
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


def span_bytes(store, tile: tuple) -> int:
    """Bytes of the whole chunks that reading one tile of ``store`` decodes.

    Tiles start at multiples of their own size, so a tile that is a whole
    number of chunks touches exactly those, one that divides a chunk touches
    that chunk, and any other may straddle one more chunk per axis. ``store`` needs ``shape``, ``chunks`` and ``dtype``.

    Example:
      >>> from types import SimpleNamespace as S
      >>> x = S(shape=(100, 100), chunks=(10, 100), dtype=np.dtype("float32"))
      >>> span_bytes(x, (20, 100)), span_bytes(x, (5, 50)), span_bytes(x, (15, 100))
      (8000, 4000, 12000)
    """
    elems = 1
    for t, c, s in zip(tile, store.chunks, store.shape):
        if c >= s:
            touched = s
        elif t % c == 0:
            touched = t
        elif c % t == 0:
            touched = c
        else:
            touched = (math.ceil(max(t - 1, 0) / c) + 1) * c
        elems *= min(max(touched, t), s)
    return elems * np.dtype(store.dtype).itemsize


def task_cost(op: str, tile: tuple, reads, out_bytes: int, out_copies: int,
              tasks_at_once: int) -> "TileCost":
    """The formula above for one task reading ``reads`` = [(store, tile), ...].

    Example:
      >>> from types import SimpleNamespace as S
      >>> x = S(shape=(100, 100), chunks=(10, 100), dtype=np.dtype("float32"))
      >>> task_cost("add", (10, 100), [(x, (10, 100))] * 2, 4000, 3, 2).task_bytes
      28000
    """
    kept = sum(nbytes(t, s.dtype) for s, t in reads)
    in_flight = max((span_bytes(s, t) for s, t in reads), default=0)
    held = kept + IN_FLIGHT_COPIES * in_flight + out_copies * out_bytes
    return TileCost(op, tuple(tile), held, tasks_at_once, in_flight)


def first_fit(candidates, cost_of, budget: int) -> tuple[tuple, "TileCost"]:
    """The first candidate tile whose cost fits the budget, and its cost.

    Raises BudgetError, naming the smallest plan tried, when none fits.
    """
    cost = None
    for tile in candidates:
        cost = cost_of(tile)
        if cost.total <= budget:
            return tile, cost
    check_fits(cost, budget)
    raise AssertionError("unreachable: check_fits raised")


def shrinking(tile: tuple):
    """``tile``, then halved along its largest axis until every axis is 1.

    Example:
      >>> list(shrinking((4, 2)))
      [(4, 2), (2, 2), (1, 2), (1, 1)]
    """
    tile = tuple(max(1, t) for t in tile)
    yield tile
    while any(t > 1 for t in tile):
        i = max(range(len(tile)), key=lambda k: tile[k])
        tile = tile[:i] + (max(1, tile[i] // 2),) + tile[i + 1:]
        yield tile


def chunk_bytes(budget: int, workers: int) -> int:
    """Chunk size for jask-made stores: a task of any op over them holds at
    most ``MAX_TILES_PER_TASK`` chunk-sized buffers, and ``workers`` tasks
    run at once.

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
    chunk_read_bytes: int = 0  # the largest chunk span one read decodes

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
        hint = ""
        if IN_FLIGHT_COPIES * cost.chunk_read_bytes * cost.tasks_at_once > budget // 2:
            hint = (f" (most of it is reading whole input chunks of {cost.chunk_read_bytes} "
                    "bytes: rechunk the input store smaller or raise the budget)")
        raise BudgetError(
            f"jask.{cost.op}: tiles of shape {cost.tile} need {cost.task_bytes} bytes per "
            f"task x {cost.tasks_at_once} tasks at once = {cost.total} bytes, over the "
            f"memory budget of {budget} bytes{hint}")
