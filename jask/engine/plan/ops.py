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
from typing import NamedTuple

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.base.sizes import exact_bytes
from jask.engine.builders import FAN_IN
from jask.engine.plan.tiles import Plan, as_decoded, plan_blockwise, plan_slice
from jask.engine.tasks import partial_dtype
from jask.store.spec import StoreSpec
from jask.store.tiles import read_model
from jask.store.views import base_of
from jask.store.views import same as same_elements

__all__ = ["view", "transpose", "transpose_chunks", "copy_chunks", "update", "dot",
           "dot_plan", "dot_geometry", "take_slice", "scatter_slice", "reshape",
           "concatenate", "read_all", "from_value", "save", "fused", "n_tiles",
           "held_bytes"]


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


def update(target: StoreSpec, source: StoreSpec, config: Config) -> Plan:
    """``target.update_(source)``: a copy in whole write units of the
    target, into the target's own store (input 0)."""
    tile, cost = copy_chunks(target, source, config.max_memory, config.workers)
    return Plan("update_", tuple(tile), tuple(target.chunks), cost.tasks, cost, into=0)


# --- dot -------------------------------------------------------------------------------

def _as_matrix(x, vector: str | None) -> StoreSpec:
    """A product operand's 2-D (or batched) form, for the planner: a vector
    as a row or column, an in-memory array with chunks set below."""
    if isinstance(x, StoreSpec):
        if vector is None:
            return x
        shape = (1, x.shape[0]) if vector == "row" else (x.shape[0], 1)
        chunks = (1, x.chunks[0]) if vector == "row" else (x.chunks[0], 1)
        if x.view is not None:  # a view's model has the view's axes: modelled as jask's own
            return StoreSpec(x.path + "#vector", shape, x.dtype, chunks)
        return StoreSpec(x.path, shape, x.dtype, chunks)
    own = tuple(x.shape)
    own = (1,) + own if vector == "row" else (own + (1,) if vector == "col" else own)
    return StoreSpec("<in-memory>", own, np.dtype(x.dtype), own)


def _memory_chunks(mem: StoreSpec, other: StoreSpec, transposed: bool, left: bool,
                   other_transposed: bool) -> StoreSpec:
    """Chunks for an in-memory operand: whole along its free axis and, along
    the contraction, the disk operand's chunks (a tile of it is a view)."""
    k_axis = (-2 if transposed else -1) if left else (-1 if transposed else -2)
    other_k = (-1 if other_transposed else -2) if left else (-2 if other_transposed else -1)
    chunks = list(mem.shape)
    chunks[k_axis] = min(mem.shape[k_axis], other.chunks[other_k])
    return StoreSpec(mem.path, mem.shape, mem.dtype, tuple(chunks))


class DotGeometry(NamedTuple):
    """A product's shapes: ``view_shape`` keeps a vector operand's missing
    axes (``squeeze``), ``shape`` is the result's, ``k`` the contraction."""

    view_shape: tuple
    squeeze: tuple
    shape: tuple
    k: int


def _matrices(a, b, ta: bool, tb: bool, on_disk: tuple, vectors: tuple):
    pa, pb = _as_matrix(a, vectors[0]), _as_matrix(b, vectors[1])
    if not on_disk[0]:
        pa = _memory_chunks(pa, pb, ta, True, tb)
    if not on_disk[1]:
        pb = _memory_chunks(pb, pa, tb, False, ta)
    return pa, pb


def dot_geometry(a, b, ta: bool, tb: bool, vectors: tuple) -> DotGeometry:
    """The shapes of ``op(a) @ op(b)`` (see :class:`DotGeometry`)."""
    pa, pb = _as_matrix(a, vectors[0]), _as_matrix(b, vectors[1])
    m = pa.shape[-1] if ta else pa.shape[-2]
    n = pb.shape[-2] if tb else pb.shape[-1]
    k = pa.shape[-2] if ta else pa.shape[-1]
    view_shape = pa.shape[:-2] + (m, n)
    squeeze = tuple(i for i, v in ((len(view_shape) - 2, vectors[0] == "row"),
                                   (len(view_shape) - 1, vectors[1] == "col")) if v)
    shape = tuple(d for i, d in enumerate(view_shape) if i not in squeeze)
    return DotGeometry(view_shape, squeeze, shape, k)


def dot(a, b, ta: bool, tb: bool, on_disk: tuple, vectors: tuple, dtype, *, to_memory: bool,
        config: Config, decode: bool = True) -> Plan:
    """``op(a) @ op(b)`` (see :func:`jask.engine.work.dot`): either operand a
    store or in memory (its bytes taken from the budget), or a vector.
    A compressed (or sharded) operand whose chunks the plan would decode more
    than once is first decoded once into an uncompressed copy (``decoded``;
    not with ``decode=False``), and the product is planned over the copy."""
    pa, pb = _matrices(a, b, ta, tb, on_disk, vectors)
    held = held_bytes(x for x, disk in zip((a, b), on_disk) if not disk)
    chunks, tk, splits, cost = dot_plan(pa, pb, ta, tb, dtype, config.max_memory - held,
                                        config.workers)
    decoded = _decoded_first(pa, pb, ta, tb, on_disk, vectors, chunks, tk) if decode else ()
    if decoded:
        pa, pb = (as_decoded(p) if i in decoded else p for i, p in enumerate((pa, pb)))
        chunks, tk, splits, cost = dot_plan(pa, pb, ta, tb, dtype, config.max_memory - held,
                                            config.workers)
    squeeze = dot_geometry(a, b, ta, tb, vectors).squeeze
    out_chunks = None if to_memory else tuple(c for i, c in enumerate(chunks)
                                              if i not in squeeze)
    return Plan("dot", tuple(chunks), out_chunks, cost.tasks, cost, k_tile=tk, splits=splits,
                decoded=decoded, passes=dot_passes(pa, pb, ta, tb, chunks))


def _decoded_first(pa, pb, ta, tb, on_disk, vectors, chunks, tk) -> tuple:
    """The operands (0: a, 1: b) a product over output tiles ``chunks``
    would decode more than once per chunk: read once per output tile along
    the other operand's free axis, each read decoding the chunks its tile
    touches (whole)."""
    if _gram(pa, pb, ta, tb) and dot_passes(pa, pb, ta, tb, chunks)[0] <= 1:
        return ()  # X.T @ X in one pass over row bands: each chunk is decoded once already
    m, k = _matrix(pa, ta)[:2]
    n = _matrix(pb, tb)[1]
    tm, tn = chunks[-2:]
    reuse = (math.ceil(n / tn), math.ceil(m / tm))
    tiles = ((tk, tm) if ta else (tm, tk), (tn, tk) if tb else (tk, tn))
    decoded = []
    for i, (p, disk, vector) in enumerate(zip((pa, pb), on_disk, vectors)):
        if not disk or vector is not None:
            continue
        model = read_model(p)
        if read_model(base_of(p)).raw:  # (a view reads raw chunks through a buffer)
            continue
        factor = memory.read_cost(model, (1,) * (len(p.shape) - 2) + tiles[i])[1]
        if reuse[i] * factor > 1:
            decoded.append(i)
    return tuple(decoded)


def _gram(a: StoreSpec, b: StoreSpec, ta: bool, tb: bool) -> bool:
    """Whether a product is ``X.T @ X`` (one store read on both sides)."""
    return ta and not tb and same_elements(a, b) and len(a.shape) == 2


def dot_passes(a: StoreSpec, b: StoreSpec, ta: bool, tb: bool, tile: tuple) -> tuple:
    """How many times a product with output tiles ``tile`` reads each
    operand: ``a`` once per column of output tiles, ``b`` once per row; the
    Gram matrix ``X.T @ X`` reads X once per column of output tiles as wide
    as X, and narrower tiles read the columns they span (as ``(passes, 0)``).

    Example:
      >>> x = StoreSpec("x", (100, 8), np.dtype("f4"), (10, 8))
      >>> dot_passes(x, x, True, False, (8, 8)), dot_passes(x, x, True, False, (4, 4))
      ((1.0, 0), (3.0, 0))
    """
    m, n = _matrix(a, ta)[0], _matrix(b, tb)[1]
    tm, tn = max(tile[-2], 1), max(tile[-1], 1)
    across, down = math.ceil(n / tn), math.ceil(m / tm)
    if not _gram(a, b, ta, tb):
        return (across, down)
    columns = 0  # of X read by all tiles: one read of the span of rows and cols
    for i in range(0, m, tm):  # when they overlap or touch (tasks._gram_pair)
        for j in range(0, n, tn):
            rows, cols = min(tm, m - i), min(tn, n - j)
            span = max(i + rows, j + cols) - min(i, j)
            columns += span if span <= rows + cols else rows + cols
    return (columns / m, 0)


def _matrix(store: StoreSpec, transposed: bool) -> tuple[int, int, int, int]:
    """(rows, cols, row_chunk, col_chunk) of a matrix operand as used."""
    r, c = store.shape[-2:]
    cr, cc = store.chunks[-2:]
    return (c, r, cc, cr) if transposed else (r, c, cr, cc)


def _dot_tiles(a, b, ta, tb, itemsize, budget, workers):
    """Candidate (tm, tn, tk) tiles, best first: the operands' own chunks
    (chunk-aligned reads), square tiles of the default chunk size, then the
    chunk-based tile halved (halves of a chunk still read one chunk each)."""
    m, k, cm, ck = _matrix(a, ta)
    _, n, ck2, cn = _matrix(b, tb)
    aligned = (cm, cn, min(k, min(ck, ck2)))
    if ta and not tb and len(a.shape) == 2:  # a.T @ b: bands as wide as a, each read once
        yield from _band_tiles(m, n, k, cn, min(ck, ck2), itemsize, budget, workers)
    yield aligned
    yield cm, cn, min(k, max(ck, ck2))
    side = max(1, math.isqrt(memory.chunk_bytes(budget, workers) // itemsize))
    yield min(m, side), min(n, side), min(k, side)
    yield from memory.shrinking(aligned)
    # then the square halved: chunks that cross the square leave the aligned
    # tiles too many tasks before their reads fit (the mixed-grids cell)
    yield from memory.shrinking((min(m, side), min(n, side), min(k, side)))
    # then bands of several chunk rows: a narrow operand's chunks (k of a few
    # columns) can be too small to be worth a read, every tile above with them,
    # and the whole product over the budget (X @ w, a batch of w under vmap)
    rows = 2 * cm
    while rows < m:
        yield rows, cn, aligned[2]
        rows *= 2
    yield m, n, k  # one task per batch entry: always within the task bound


def _band_tiles(m: int, n: int, k: int, cn: int, ck: int, itemsize: int, budget: int,
                workers: int):
    """Tiles of ``a.T @ b`` as wide as ``a`` (so each row band of ``a`` is read
    once per column block of the output), widest output blocks first (fewest
    passes over ``a``), for each the tallest bands of whole chunk rows."""
    widths, tn = [], n
    while True:
        widths.append(tn)
        if tn <= cn:
            break
        tn = max(cn, -(-tn // 2) // cn * cn)  # whole chunks of b's columns
    for tn in widths:
        for times in (8, 4, 2, 1):
            yield m, tn, min(k, ck * times)


def dot_plan(a: StoreSpec, b: StoreSpec, ta: bool, tb: bool, out_dtype,
             budget: int, workers: int) -> tuple[tuple, int, int, memory.TileCost]:
    """Output chunks, the contraction tile, how many ways to split K, and
    the cost of one task.

    A task holds one tile of each operand (as read: twice), the running sum
    and the product of the current pair. A product with fewer output tiles
    than twice the workers splits the contraction among several tasks whose
    partial sums a bounded fan-in tree adds before writing.
    """
    m, k = _matrix(a, ta)[:2]
    n = _matrix(b, tb)[1]
    batch = a.shape[:-2]
    ones = (1,) * len(batch)
    itemsize = np.dtype(out_dtype).itemsize
    wide = partial_dtype(out_dtype).itemsize  # the running sum's (float64 for float32)
    smallest = memory.min_tile_bytes(budget)
    # the output counts too: an outer product (small k) writes far more than it reads
    bound = memory.task_bound(math.prod(batch) * (m * k + k * n + m * n) * itemsize, budget)
    k_chunk = min(_matrix(a, ta)[3], _matrix(b, tb)[2])
    cost = None
    for tm, tn, tk in _dot_tiles(a, b, ta, tb, itemsize, budget, workers):
        tm, tn, tk = min(tm, m), min(tn, n), min(tk, k)
        a_tile = ones + ((tk, tm) if ta else (tm, tk))
        b_tile = ones + ((tn, tk) if tb else (tk, tn))
        out_bytes = tm * tn * itemsize
        sum_bytes = tm * tn * wide
        n_out = math.prod(batch) * math.ceil(m / tm) * math.ceil(n / tn)
        # tiles too small to be worth a read, or graphs too large: never planned. A
        # task's data is its tile of a (as read: twice) and the output it writes,
        # which is most of it for a narrow a (X @ W.T for a batch of 16 w)
        whole = (tm, tn, tk) == (m, n, k)
        if not whole and ((2 * tm * tk + tm * tn) * itemsize
                          < min(smallest, (m * k + m * n) * itemsize)
                          or n_out * math.ceil(k / tk) > bound):
            continue
        splits = 1
        if n_out < 2 * workers:
            splits = max(1, min(math.ceil(k / tk), (2 * workers) // max(n_out, 1)))
        reads = [(read_model(a), a_tile), (read_model(b), b_tile)]
        if _gram(a, b, ta, tb) and tm >= m:  # b's tile is part of a's band, read once
            reads = reads[:1]
        # the running sum, the product of the current pair, the output cast and encoded
        cost = memory.task_cost("dot", (tm, tn, tk), reads, out_bytes, 2, 1)
        cost = dataclasses.replace(cost, task_bytes=cost.task_bytes + sum_bytes)
        # both raw operands' row buffers, not the larger: the thread's buffer cache
        # (jask.store.buffers) keeps a's while b is read, and the next tiles take
        # them (measured on the mixed-grids cell: 10.5 MB of buffers for 6.9 modelled)
        rows = [memory.read_cost(m, t)[0] for m, t in reads if m.raw]
        extra = sum(rows) - max(rows, default=0)
        panels = min(tk, memory.BLAS_PANEL_K) * (tm + tn) * itemsize  # BLAS's packed panels
        cost = dataclasses.replace(cost, chunk_read_bytes=cost.chunk_read_bytes + extra,
                                   task_bytes=cost.task_bytes + extra + panels)
        # partial sums waiting for their combine task, and the op's own overhead
        waiting = (FAN_IN * sum_bytes if splits > 1 else 0) + memory.op_overhead(budget)
        at_once = min(workers, (budget - waiting) // max(cost.task_bytes, 1))
        banded = ta and not tb and not batch and tm == m
        if at_once < 1 and splits > 1 and banded and tk <= k_chunk:  # no partials waiting
            splits, waiting = 1, memory.op_overhead(budget)
            at_once = min(workers, (budget - waiting) // max(cost.task_bytes, 1))
        if at_once >= 1:  # fewer tasks at once before smaller tiles
            return ones + (tm, tn), tk, splits, dataclasses.replace(
                cost, fixed=waiting, tasks_at_once=at_once, tasks=n_out * splits)
    # the last candidate, the whole product, is never skipped
    assert cost is not None, "dot_plan: no tile planned"
    memory.check_fits(cost, budget - waiting)
    raise memory.BudgetError(
        f"jask.dot: partial sums of {FAN_IN} x {exact_bytes(sum_bytes)} do not fit the budget "
        f"of {exact_bytes(budget)}")


# --- slicing, reshaping and joining --------------------------------------------------

def _first_fit(op: str, shape: tuple, candidates, cost_of, config: Config) -> Plan:
    tile, cost = memory.first_fit(candidates, cost_of, config.max_memory)
    tile = tuple(tile)
    return Plan(op, tile, tile, n_tiles(shape, tile), cost)


def take_slice(source: StoreSpec, sizes: tuple, config: Config) -> Plan:
    """``a[index]``: per axis (size, step) or None for an integer index;
    tiles whose read windows decode few chunks (:func:`plan_slice`)."""
    shape = tuple(size for size, _ in (x for x in sizes if x is not None))
    tile, cost = plan_slice(source, sizes, budget=config.max_memory, workers=config.workers)
    return Plan("slice", tuple(tile), tuple(tile), n_tiles(shape, tile), cost)


def scatter_slice(g: StoreSpec, shape: tuple, config: Config) -> Plan:
    """The gradient of a slice (zeros with ``g`` placed where it was taken):
    default chunks of ``shape``."""
    chunks = memory.default_chunks(shape, g.dtype, config.max_memory, config.workers)
    cost = memory.task_cost("slice_vjp", chunks, [(read_model(g), chunks)],
                            memory.nbytes(chunks, g.dtype), 2, config.workers)
    memory.check_fits(cost, config.max_memory)
    return Plan("slice_vjp", tuple(chunks), tuple(chunks), n_tiles(shape, chunks), cost)


def reshape(source: StoreSpec, shape: tuple, config: Config) -> Plan:
    """A C-order reshape: bands of whole output rows, each read from the
    source rows that hold its elements."""
    out_row = math.prod(shape[1:])
    src_row = math.prod(source.shape[1:])

    def cost_of(tile):
        rows = tile[0]
        covered = min(source.shape[0], -(-(rows * out_row) // src_row) + 1)
        src_tile = (covered,) + tuple(source.shape[1:])
        return memory.task_cost("reshape", tile, [(read_model(source), src_tile)],
                                memory.nbytes(tile, source.dtype), 2, config.workers)

    start = memory.default_chunks(shape, source.dtype, config.max_memory, config.workers)
    candidates = [(r,) + tuple(shape[1:]) for r in _halvings(start[0])]
    return _first_fit("reshape", shape, candidates, cost_of, config)


def _halvings(n: int):
    while n > 1:
        yield n
        n //= 2
    yield 1


def concatenate(stores, axis: int, stack: bool, shape: tuple, config: Config) -> Plan:
    """Stores joined along ``axis`` (a new axis when ``stack``) into ``shape``:
    default chunks (one along a stacked axis), halved until a task fits. A
    task reads only the inputs its tile overlaps along ``axis`` (one, when
    stacking), so the cost counts the most any tile overlaps, not every input."""
    first = stores[0]
    lengths = [1 if stack else x.shape[axis] for x in stores]
    ends = np.cumsum(lengths)

    def overlapping(extent: int) -> list:
        """The inputs of the tile along ``axis`` that overlaps the most of them."""
        most: list = []
        for start in range(0, shape[axis], extent):
            stop = min(start + extent, shape[axis])
            hit = [x for x, end, n in zip(stores, ends, lengths) if end > start
                   and end - n < stop]
            most = hit if len(hit) > len(most) else most
        return most

    def cost_of(tile):
        part = tuple(c for i, c in enumerate(tile) if not (stack and i == axis))
        reads = [(read_model(x), part) for x in overlapping(tile[axis])]
        return memory.task_cost("concatenate", tile, reads,
                                memory.nbytes(tile, first.dtype), 2, config.workers)

    chunks = memory.default_chunks(shape, first.dtype, config.max_memory, config.workers)
    if stack:
        chunks = chunks[:axis] + (1,) + chunks[axis + 1:]
    return _first_fit("concatenate", shape, memory.shrinking(chunks), cost_of, config)


# --- between disk and memory ----------------------------------------------------------

def read_all(store: StoreSpec, config: Config) -> Plan:
    """Loading a whole store into memory: one read of the whole array in
    the calling thread (never refused: the caller asked for the array)."""
    shape = tuple(max(1, n) for n in store.shape)
    cost = memory.task_cost("materialize", shape, [(read_model(store), shape)], 0, 0, 1)
    return Plan("materialize", shape, None, 1, dataclasses.replace(cost, tasks=1))


def from_value(op: str, shape: tuple, dtype, config: Config) -> Plan:
    """Writing an in-memory array to a new store of default chunks: one
    write of the whole value in the calling thread."""
    chunks = memory.default_chunks(shape, dtype, config.max_memory, config.workers)
    whole = tuple(max(1, n) for n in shape)
    cost = memory.task_cost(op, whole, [], memory.nbytes(shape, dtype), 1, 1)
    return Plan(op, whole, tuple(chunks), 1, dataclasses.replace(cost, tasks=1))


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


# --- one pass, several outputs ----------------------------------------------------------

def fused(op: str, shape: tuple, dtype, sources: list, out_dtypes: tuple, into: int | None,
          align: int | None, temporaries: int | None, config: Config) -> Plan:
    """``Fused`` (``jask.api.fused``): ``sources`` are the operands in order,
    stores or in-memory values. Tiles are whole write units of operand
    ``align`` (of ``into`` by default); each new output is chunked by the
    tile (``chunks`` is None: several stores)."""
    full = tuple(range(len(shape)))
    disk = [(src, full) for src in sources if isinstance(src, StoreSpec)]
    held = held_bytes(src for src in sources if not isinstance(src, StoreSpec))
    unit = None
    like = into if align is None else align
    if like is not None:
        if not isinstance(sources[like], StoreSpec):
            raise TypeError(f"jask.fused: operand {like} must be a DiskArray")
        unit = read_model(sources[like]).write_unit or tuple(sources[like].chunks)
    tile, cost = plan_blockwise(
        op, shape, dtype, disk, budget=config.max_memory, workers=config.workers,
        fixed_bytes=held, out_copies=len(out_dtypes) + 1 if temporaries is None else temporaries,
        out_unit=unit)
    return Plan(op, tuple(tile), None, cost.tasks, cost)


# --- sorting: whole lanes per tile -------------------------------------------------------

__all__ += ["lanes", "FFT_TEMPORARY_BYTES"]

#: Bytes per element of the longer lane (input or output) an FFT task holds
#: besides its input and output tiles: the lanes in double precision
#: (complex128), pocketfft's result before rounding and its scratch.
FFT_TEMPORARY_BYTES = 48


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
