"""The memory model: how large a tile may be, given the budget.

One plain formula governs every op::

    task_bytes = sum(bytes of the input tiles it keeps)
               + (the most any one read holds besides its tile: read_cost)
               + out_copies * (bytes of its output tile)
    task_bytes * tasks_at_once <= budget

Reading a tile decodes every chunk the tile touches (its *span*): through
zarr-python a chunk's raw bytes and the decoded chunk are both held while it
is read, and the tile is then copied out. (jask's raw path for uncompressed
chunks reads into one buffer, so there the formula is conservative.)
Writing holds the result and its encoded bytes; numpy temporaries or a
matmul accumulator add copies of the output tile.
``chunk_bytes`` sizes the chunks of the stores jask creates so that a task
of any op over them fits.

What a read holds depends on the store's layout, described by a
:class:`ReadModel` (made by :func:`jask.store.tiles.read_model`): an uncompressed
C-order chunk file is read by byte ranges (a row range of a chunk is
contiguous), so a tile can be a slice of a chunk; any other store is decoded
a whole chunk (or a small group of chunks) at a time by Zarr, holding the
encoded bytes, the decoded chunk and the codec's own buffers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from jask.base.config import Config, get_config
from jask.base.sizes import exact_bytes

__all__ = ["BudgetError", "ReadModel", "TileCost", "chunk_bytes", "chunk_shape", "check_fits",
           "nbytes", "read_cost", "span_bytes", "task_cost", "first_fit", "min_tile_bytes",
           "task_bound", "IN_MEMORY_SHARE", "in_memory_limit", "fits_in_memory"]

#: Buffers of a chunk's size held while it is read: raw bytes + decoded chunk.
IN_FLIGHT_COPIES = 2
#: Output-tile buffers of an elementwise task: the result and a numpy
#: temporary (or, for an edge chunk, the full-size chunk written).
ELEMENTWISE_OUT_COPIES = 2
#: Contraction depth of the panels OpenBLAS packs a product's operands into
#: (its GEMM_Q on Haswell-class cores): a product task also holds
#: ``min(tk, BLAS_PANEL_K) * (tm + tn)`` elements of packed panels, first
#: touched by the op's first large product (measured 1.45 MB for a 577^3
#: float32 product, 2.0 MB for 1000^3; this counts 1.8 and 3.1 MB).
BLAS_PANEL_K = 384
#: The most chunk-sized buffers a task over jask-made stores holds: two input
#: tiles, one chunk in flight (twice), and three output-tile buffers.
MAX_TILES_PER_TASK = 2 + IN_FLIGHT_COPIES + ELEMENTWISE_OUT_COPIES
#: Upper bound on a chunk, so that even huge budgets keep tasks many and
#: parallel.
MAX_CHUNK_BYTES = 128 * 2**20
#: Chunk-sized buffers held per chunk decoded by Zarr: the encoded bytes and
#: the decoded chunk, and what Zarr's codec threads keep (calibrated on the
#: grid of tests/test_memory_bound.py: a plain zstd chunk read peaks at 2x
#: its size, but ops over compressed stores measured 1.5x a 2-copy model).
ZARR_COPIES = 3
COMPRESSED_COPIES = 4
#: Chunk-sized buffers held while jask decodes a compressed chunk file itself:
#: its encoded bytes and the decoded chunk.
DECODED_COPIES = 2
#: Chunk-sized buffers one task holds besides those of each chunk in flight
#: when it fetches chunks whole from object storage (jask.store.kinds.objects.remote): each
#: response body is also copied to Python bytes before it is decoded, one
#: chunk at a time, so a read holds two encoded copies per chunk in flight and
#: the decoded chunk. Measured on the grid's zstd B/8 cell at URLs: a read of
#: one 2 MB chunk held 3.1-3.2 chunks besides its tile (the model said 2), and
#: the lazy chain there peaked at 20.8 MB against 16 MB.
FETCHED_EXTRA_COPIES = 1
#: Tile-sized buffers held while Zarr writes a tile that jask cannot encode
#: itself (a whole shard, blosc): encoded chunks on Zarr's threads, the
#: assembled shard. Measured: a 4 MB zstd shard write peaked at ~7 shards.
ZARR_WRITE_COPIES = 7
#: No tile is planned smaller than this (or budget / MIN_TILE_FRACTION when
#: that is smaller, or the whole array): below it per-task overhead, not the
#: disk, sets the speed, and the graph grows without bound.
MIN_TILE_BYTES = 2**20
MIN_TILE_FRACTION = 64
#: Held by any op whatever its tiles (its graph, task bookkeeping, Zarr's
#: and Dask's per-call objects): measured 3-5 MB per op on this machine.
OP_OVERHEAD_BYTES = 4 * 2**20


def op_overhead(budget: int) -> int:
    """Bytes an op holds besides its tasks (at most a quarter of the budget).

    Example:
      >>> op_overhead(10**9), op_overhead(64_000)
      (4194304, 16000)
    """
    return min(OP_OVERHEAD_BYTES, budget // 4)


def min_tile_bytes(budget: int) -> int:
    """The smallest tile a plan may use under ``budget``.

    Example:
      >>> min_tile_bytes(10**9), min_tile_bytes(64_000)
      (1048576, 1000)
    """
    return max(1, min(MIN_TILE_BYTES, budget // MIN_TILE_FRACTION))


def task_bound(data_bytes: int, budget: int) -> int:
    """The most tasks one op's graph may have: twice the data divided by
    the smallest tile (ragged edges add partial tiles).

    Example:
      >>> task_bound(2**30, 10**9)
      2048
    """
    return max(1, 2 * -(-data_bytes // min_tile_bytes(budget)))


class BudgetError(MemoryError):
    """An op's smallest plan does not fit in the memory budget."""


def nbytes(shape, dtype) -> int:
    """Bytes of an array of this shape and dtype.

    Example:
      >>> nbytes((3, 4), "float32")
      48
    """
    return math.prod(shape) * np.dtype(dtype).itemsize


#: A result small enough to live in memory takes at most this share of the
#: budget (see :func:`fits_in_memory`).
IN_MEMORY_SHARE = 1 / 8


def in_memory_limit(config: Config | None = None) -> int:
    """The most bytes a result placed in memory may take: an eighth of the
    budget of ``config`` (the active configuration when None); see
    :func:`fits_in_memory`.

    Example:
      >>> from jask.base.config import Config
      >>> in_memory_limit(Config(max_memory=2**20, requested_memory=2**20, scratch_dir="."))
      131072
    """
    return int((config or get_config()).max_memory * IN_MEMORY_SHARE)


def fits_in_memory(shape, dtype, config: Config | None = None) -> bool:
    """Whether a result of this shape and dtype goes in memory (a
    ``jax.Array`` or numpy array) rather than to a store: the one placement
    rule, used by reductions over some axes, ``vecdot``, integer indexing,
    ``nonzero`` and the non-numeric arrays of ``open_group``.

    Why an eighth of the budget: such a result is held whole, and it is
    usually the next op's in-memory operand (``(X - X.mean(0)) / X.std(0)``),
    which every task of that op reads and a compiled call copies to the host;
    an operand may take at most a quarter of the budget
    (``jask.api.elementwise.MAX_IN_MEMORY_SHARE``), so an eighth leaves room
    for two of them, or one and its copy. It is decided from shapes only, so
    a compiled function has one output type whatever the data.

    Example:
      >>> from jask.base.config import Config
      >>> cfg = Config(max_memory=2**20, requested_memory=2**20, scratch_dir=".")
      >>> fits_in_memory((128, 256), "float32", cfg), fits_in_memory((129, 256), "float32", cfg)
      (True, False)
    """
    return nbytes(shape, dtype) <= in_memory_limit(config)


def span_bytes(store, tile: tuple) -> int:
    """Bytes of the whole chunks that reading one tile of ``store`` decodes.

    Tiles start at multiples of their own size, so a tile that is a whole
    number of chunks touches exactly those, one that divides a chunk touches
    that chunk, and any other may straddle one more chunk per axis. ``store``
    needs ``shape``, ``chunks`` and ``dtype``.

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


@dataclass(frozen=True)
class ReadModel:
    """How a store's tiles are read (see the module docstring).

    ``unit`` is the chunk a read decodes (the inner chunk of a sharded
    store), ``raw`` whether byte-range reads of C-order chunk files work,
    ``copies`` the unit-sized buffers held per chunk decoded by Zarr and
    ``group`` how many chunks one Zarr read decodes at once.
    """

    shape: tuple
    unit: tuple
    itemsize: int
    raw: bool = False
    copies: int = ZARR_COPIES
    group: int = 1
    fetched: int = 0  # object storage: bytes of ranged GETs a raw read holds at once (at most)
    write_unit: tuple = ()  # the shard (or chunk): the smallest whole write
    write_copies: int = 1  # tile-sized buffers held while writing a tile
    codec: str = "none"
    # jask decodes whole C-order chunks itself, straight into a tile that
    # holds them whole in one run: then only the encoded bytes are held
    direct: bool = False
    # object storage: a chunk decoded is first fetched whole, its body held
    # as bytes too (the store's location says so: jask.store.kinds.objects.remote)
    whole_objects: bool = False

    @property
    def unit_bytes(self) -> int:
        return math.prod(self.unit) * self.itemsize


def _touched(t: int, c: int, s: int) -> int:
    """Chunks of size c a tile of size t (starting at a multiple of t) meets."""
    if c >= s or t % c == 0 or t >= s:  # (a tile of the whole axis starts at 0)
        return max(1, -(-min(t, s) // c))
    if c % t == 0:
        return 1
    return -(-max(t - 1, 0) // c) + 1


def _into_tile(model: ReadModel, tile: tuple) -> bool:
    """Whether every chunk a tile of a ``direct`` store touches is decoded
    straight into it: whole chunks, each one contiguous run of the tile
    (the tile's trailing extents are the chunk's), none cut by the array's edge."""
    unit, shape = model.unit, model.shape
    return (all(s % c == 0 for s, c in zip(shape, unit))
            and tile[0] % unit[0] == 0 and tuple(tile[1:]) == tuple(unit[1:]))


def read_cost(model: ReadModel, tile: tuple) -> tuple[int, float]:
    """(bytes held besides the tile while reading it, decoded bytes per tile
    byte) for one tile of a store.

    Raw reads pread row ranges of chunk files straight into the tile when
    the tile spans whole chunk rows, else through one row-range buffer;
    Zarr decodes whole chunks, ``group`` at a time.

    Example:
      >>> raw = ReadModel((4096, 4096), (1024, 1024), 4, raw=True)
      >>> read_cost(raw, (256, 1024)), read_cost(raw, (256, 512))
      ((0, 1.0), (1048576, 2.0))
      >>> z = ReadModel((4096, 4096), (1024, 1024), 4, copies=3)
      >>> read_cost(z, (256, 1024))
      (12582912, 4.0)
      >>> read_cost(ReadModel((4096, 4096), (1024, 1024), 4, copies=2, direct=True), (2048, 1024))
      (4194304, 1.0)
      >>> read_cost(ReadModel((4096, 4096), (1024, 1024), 4, copies=2, whole_objects=True),
      ...           (256, 1024))
      (12582912, 4.0)
      >>> read_cost(ReadModel((4096, 4096), (1024, 1024), 4, copies=1, whole_objects=True),
      ...           (256, 1024))
      (4194304, 4.0)
    """
    tile = tuple(max(1, min(t, s)) for t, s in zip(tile, model.shape))
    if not tile:
        return 0, 1.0
    size = math.prod(tile) * model.itemsize
    if model.raw:
        rows = min(tile[0], model.unit[0])
        trailing = zip(tile[1:], model.unit[1:], model.shape[1:])
        direct = all(t == c and s % c == 0 for t, c, s in trailing)
        spans = [_touched(t, c, s) * c
                 for t, c, s in zip(tile[1:], model.unit[1:], model.shape[1:])]
        read = tile[0] * math.prod(spans) * model.itemsize
        piece = rows * math.prod(model.unit[1:]) * model.itemsize
        fetched = min(read, max(model.fetched, piece)) if model.fetched else 0
        if direct:
            return fetched, 1.0
        return max(piece, fetched), max(1.0, read / size)
    counts = [_touched(t, c, s) for t, c, s in zip(tile, model.unit, model.shape)]
    decoded = math.prod(counts) * model.unit_bytes
    if model.direct and _into_tile(model, tile):  # only a chunk's encoded bytes besides
        return model.unit_bytes, max(1.0, decoded / size)
    at_once = min(math.prod(counts), model.group)
    # a tile of several groups is read group by group, each copied into it
    copies = model.copies + (1 if math.prod(counts) > model.group else 0)
    held = at_once * model.unit_bytes * copies
    if model.whole_objects and model.copies > 1:  # each body copied as bytes too
        # (copies 1: a view of an uncompressed store, read by ranges through one buffer)
        held += FETCHED_EXTRA_COPIES * model.unit_bytes
    return held, max(1.0, decoded / size)


def task_cost(op: str, tile: tuple, reads, out_bytes: int, out_copies: int,
              tasks_at_once: int) -> "TileCost":
    """The formula above for one task reading ``reads`` = [(read model, tile), ...]
    (a store's read model: :func:`jask.store.tiles.read_model`).

    Example:
      >>> x = ReadModel((100, 100), (10, 100), 4)
      >>> task_cost("add", (10, 100), [(x, (10, 100))] * 2, 4000, 3, 2).task_bytes
      32000
    """
    kept = sum(math.prod(t) * m.itemsize for m, t in reads)
    costs = [read_cost(m, t)[0] for m, t in reads]
    in_flight = max(costs, default=0)
    held = kept + in_flight + out_copies * out_bytes
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
    assert cost is not None, "first_fit: no candidate tiles"
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


def default_chunks(shape, dtype, budget: int, workers: int) -> tuple:
    """Chunks of a new store under this budget: :func:`chunk_shape` of
    :func:`chunk_bytes`.

    Example:
      >>> default_chunks((10**6, 1000), "float32", 2**30, 2)
      (22369, 1000)
    """
    return chunk_shape(tuple(shape), np.dtype(dtype).itemsize, chunk_bytes(budget, workers))


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
    chunk_read_bytes: int = 0  # bytes held besides the tiles while reading one
    tasks: int = 0  # tasks in the graph (0: not counted)
    read_factor: float = 1.0  # bytes decoded per byte of input tile
    fixed: int = 0  # held once per op: in-memory operands, the op's overhead

    @property
    def total(self) -> int:
        return self.task_bytes * self.tasks_at_once + self.fixed


def check_fits(cost: TileCost, budget: int) -> None:
    """Refuse a plan whose concurrent tasks would hold more than the budget.

    Example:
      >>> check_fits(TileCost("add", (10, 10), 800, 2), 10_000)
      >>> check_fits(TileCost("add", (10, 10), 800, 2), 1_000)
      Traceback (most recent call last):
      ...
      jask.base.memory.BudgetError: jask.add: tiles of shape (10, 10) need 800 bytes per task
      x 2 tasks at once = 1600 bytes (1.56 kiB), over the memory budget of 1000 bytes (0.98 kiB)
    """
    if cost.total > budget:
        hint = ""
        if cost.chunk_read_bytes * cost.tasks_at_once > budget // 2:
            hint = (f" (most of it is reading whole input chunks of "
                    f"{exact_bytes(cost.chunk_read_bytes)}: rechunk the input store smaller or "
                    "raise the budget)")
        fixed = f" + {cost.fixed} fixed" if cost.fixed else ""
        raise BudgetError(
            f"jask.{cost.op}: tiles of shape {cost.tile} need {exact_bytes(cost.task_bytes)} "
            f"per task x {cost.tasks_at_once} tasks at once{fixed} = {exact_bytes(cost.total)}, "
            f"over the memory budget of {exact_bytes(budget)}{hint}")
