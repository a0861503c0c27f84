"""Products, the engine half: a matrix product (``Dot``) and one pass with
several outputs (``Fused``, ``jask.api.fused``); for each its planner, its
work (:class:`~jask.engine.work.Work`) and its graph with the tasks it runs.
The primitives that bind them are in :mod:`jask.core.primitives.products`.

**Products** ``op(a) @ op(b)`` (op transposes the last two axes of an operand
as it is read; either operand a store, in memory or a 1-D vector): output
tiles planned with the contraction streamed through each task in strips of
:data:`~jask.engine.tasks.STRIP` rows added in float64
(:func:`~jask.engine.tasks.strip_product`, which band groups share); with few
output tiles the contraction is split among tasks whose partials a bounded
fan-in tree adds. ``X.T @ X`` reads X once per column of output tiles
(:func:`dot_passes`); a compressed operand that the plan would decode more
than once is decoded once first, into a scratch copy.

**Fused** ops: ``kernel(*operand tiles)`` returns one tile per output, and
each task writes them all, so every input is read once and every output
written once (an optimizer's step: a gradient and its moments in, new
moments and an update out); with ``into`` the first output replaces an
operand's data, atomically. Operands line up with the full shape as in
:mod:`jask.engine.blockwise`. Nothing here knows of JAX.
"""
from __future__ import annotations

import dataclasses
import math
import os
import uuid
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.base.sizes import exact_bytes
from jask.engine import execute, tasks
from jask.engine.blockwise import Operand
from jask.engine.builders import FAN_IN, key_name, regions
from jask.engine.plan.ops import held_bytes
from jask.engine.plan.tiles import Plan, as_decoded, plan_blockwise
from jask.engine.tasks import partial_dtype, strip_product
from jask.engine.work import Work, decoded_copies, in_order, produce, replace_store, writable
from jask.store import location_of, registry, session_dir
from jask.store.layout import compressed, maker_like
from jask.store.space import check_space, raise_if_full
from jask.store.spec import StoreSpec, stored_nbytes
from jask.store.tiles import forget as forget_cached
from jask.store.tiles import prefetch, read, read_model, write
from jask.store.views import as_transposed, base_of
from jask.store.views import same as same_elements

__all__ = ["dot", "plan_dot", "dot_tiles", "dot_geometry", "DotGeometry", "dot_passes",
           "dot_graph", "Matrix", "fused", "plan_fused", "fused_graph", "fused_block"]


# --- products: planner ------------------------------------------------------------------

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


def plan_dot(a, b, ta: bool, tb: bool, on_disk: tuple, vectors: tuple, dtype, *, to_memory: bool,
        config: Config, decode: bool = True) -> Plan:
    """The plan of ``op(a) @ op(b)`` (see :func:`dot`): either operand a
    store or in memory (its bytes taken from the budget), or a vector.
    A compressed (or sharded) operand whose chunks the plan would decode more
    than once is first decoded once into an uncompressed copy (``decoded``;
    not with ``decode=False``), and the product is planned over the copy."""
    pa, pb = _matrices(a, b, ta, tb, on_disk, vectors)
    held = held_bytes(x for x, disk in zip((a, b), on_disk) if not disk)
    chunks, tk, splits, cost = dot_tiles(pa, pb, ta, tb, dtype, config.max_memory - held,
                                         config.workers)
    decoded = _decoded_first(pa, pb, ta, tb, on_disk, vectors, chunks, tk) if decode else ()
    if decoded:
        pa, pb = (as_decoded(p) if i in decoded else p for i, p in enumerate((pa, pb)))
        chunks, tk, splits, cost = dot_tiles(pa, pb, ta, tb, dtype, config.max_memory - held,
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
    for i in range(0, m, tm):  # when they overlap or touch (_gram_pair)
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


def _candidate_tiles(a, b, ta, tb, itemsize, budget, workers):
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


def dot_tiles(a: StoreSpec, b: StoreSpec, ta: bool, tb: bool, out_dtype,
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
    for tm, tn, tk in _candidate_tiles(a, b, ta, tb, itemsize, budget, workers):
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
    assert cost is not None, "dot_tiles: no tile planned"
    memory.check_fits(cost, budget - waiting)
    raise memory.BudgetError(
        f"jask.dot: partial sums of {FAN_IN} x {exact_bytes(sum_bytes)} do not fit the budget "
        f"of {exact_bytes(budget)}")


# --- products: the tasks --------------------------------------------------------------

@dataclass(frozen=True)
class Matrix:
    """An operand of a product as the product sees it: a (batch of)
    matrices, from a store or an in-memory array, maybe read transposed,
    maybe a 1-D vector standing as a row (1, k) or a column (k, 1)."""

    source: StoreSpec | np.ndarray
    transposed: bool = False
    vector: str | None = None  # "row" or "col"

    def tile(self, batch: tuple, rows: slice, cols: slice) -> np.ndarray:
        """The (rows, cols) tile of op(operand)."""
        if self.transposed:
            rows, cols = cols, rows
        if self.vector == "row":
            block = self._read((cols,))[None, :]
        elif self.vector == "col":
            block = self._read((rows,))[:, None]
        else:
            block = self._read(batch + (rows, cols))
        return np.swapaxes(block, -1, -2) if self.transposed else block

    @property
    def length(self) -> int:
        """The contraction's length: op(operand)'s columns."""
        shape = self.source.shape
        if self.vector is not None:
            return shape[-1] if self.vector == "row" else 1
        return shape[-2] if self.transposed else shape[-1]

    def _read(self, region: tuple) -> np.ndarray:
        if isinstance(self.source, StoreSpec):
            return read(self.source, region)
        return self.source[region]


def _gram_pair(a: Matrix, b: Matrix, batch: tuple, rows: slice, k: slice,
               cols: slice) -> tuple | None:
    """The tiles of a.T @ b when both read the same rows of one store
    (``X.T @ X``): one read of the columns they span, when these overlap."""
    if not (isinstance(a.source, StoreSpec) and same_elements(a.source, b.source) and a.transposed
            and not b.transposed and a.vector is None and b.vector is None):
        return None
    lo, hi = min(rows.start, cols.start), max(rows.stop, cols.stop)
    if hi - lo > (rows.stop - rows.start) + (cols.stop - cols.start):
        return None  # apart: two reads hold less
    band = read(a.source, batch + (k, slice(lo, hi)))
    return (np.swapaxes(band[..., rows.start - lo:rows.stop - lo], -1, -2),
            band[..., cols.start - lo:cols.stop - lo])


def dot_partial(a: Matrix, b: Matrix, batch: tuple, rows: slice, cols: slice,
                ks: tuple) -> np.ndarray:
    """Sum over the contraction tiles ``ks`` of op(a)[rows, k] @ op(b)[k, cols],
    in :func:`partial_dtype` (see :data:`STRIP`)."""
    acc = None
    for k in ks:
        pair = _gram_pair(a, b, batch, rows, k, cols)
        left, right = pair if pair is not None else (a.tile(batch, rows, k),
                                                     b.tile(batch, k, cols))
        prod = strip_product(left, right, k, a.length)
        del pair, left, right
        if acc is None:
            acc = prod
        else:
            acc += prod
            del prod
    assert acc is not None, "dot_partial: no contraction tiles"
    return acc


def _write_product(out: StoreSpec, squeeze: tuple, region: tuple, value) -> None:
    """Write a product tile, dropping the axes a vector operand does not have."""
    kept = tuple(s for i, s in enumerate(region) if i not in squeeze)
    value = value.astype(out.dtype, copy=False).reshape(tuple(s.stop - s.start for s in kept))
    write(out, kept, value)


def dot_block(out: StoreSpec | None, squeeze: tuple, a: Matrix, b: Matrix, batch: tuple,
              rows: slice, cols: slice, ks: tuple):
    acc = dot_partial(a, b, batch, rows, cols, ks)
    if out is None:
        return acc
    _write_product(out, squeeze, batch + (rows, cols), acc)


def dot_combine(out: StoreSpec | None, squeeze: tuple, region: tuple, *partials):
    acc = tasks.combine(*partials)
    if out is None:
        return acc
    _write_product(out, squeeze, region, acc)


def dot_assemble(view_shape: tuple, shape: tuple, dtype, regions: list, *tiles) -> np.ndarray:
    """A (small) product assembled in memory from its output tiles."""
    result = np.zeros(view_shape, dtype=dtype)
    for region, tile in zip(regions, tiles):
        result[region] = tile
    return result.reshape(shape)


# --- products: graph and work ----------------------------------------------------------

def dot_graph(out: StoreSpec | None, a: Matrix, b: Matrix, view_shape: tuple,
              chunks: tuple, k: int, tk: int, splits: int, token: str, *, squeeze: tuple = (),
              shape: tuple = (), dtype=None, op: str = "dot") -> tuple[dict, list]:
    """op(a) @ op(b) over output tiles ``chunks`` of ``view_shape``, streaming k.

    Each task holds one tile of a, one of b and an accumulator; with
    ``splits > 1`` the k tiles are shared among tasks whose partial products
    a bounded fan-in tree adds before writing. The product's view has the
    vector operands' missing axes (``squeeze``), dropped as tiles are
    written. With ``out=None`` the (small) product of ``shape`` is
    assembled in memory.
    """
    name = key_name(op, token)
    partial = key_name(op, token, stage="partial")
    combine = key_name(op, token, stage="combine")
    ks = [slice(s, min(s + tk, k)) for s in range(0, k, tk)]
    size = math.ceil(len(ks) / max(splits, 1))  # contiguous runs of k: sequential reads
    groups = [tuple(ks[i:i + size]) for i in range(0, len(ks), size)]
    graph: dict[tuple, tuple] = {}
    keys: list[tuple] = []
    out_regions = list(regions(view_shape, chunks))
    for t, region in enumerate(out_regions):
        batch, rows, cols = region[:-2], region[-2], region[-1]
        if len(groups) == 1:
            key = (name, t)
            graph[key] = (dot_block, out, squeeze, a, b, batch, rows, cols, groups[0])
            keys.append(key)
            continue
        parts = []
        for g, group in enumerate(groups):
            part = (partial, t, g)
            graph[part] = (dot_partial, a, b, batch, rows, cols, group)
            parts.append(part)
        while len(parts) > FAN_IN:
            parts = [_combine_key(graph, combine, t, parts[i:i + FAN_IN], i)
                     for i in range(0, len(parts), FAN_IN)]
        key = (name, t)
        graph[key] = (dot_combine, out, squeeze, region, *parts)
        keys.append(key)
    if out is not None:
        return graph, keys
    root = (key_name(op, token, stage="result"),)
    graph[root] = (dot_assemble, view_shape, shape, dtype, out_regions, *keys)
    return graph, [root]


def _combine_key(graph, combine, t, parts, i):
    key = (combine, t, len(graph), i)
    graph[key] = (tasks.combine, *parts)
    return key


def dot(ta: bool, tb: bool, on_disk: tuple, vectors: tuple, dtype, *, to_memory: bool = False,
        grad: bool = False):
    """Work for ``op(a) @ op(b)``, where op transposes the last two axes of
    an operand whose flag is set (the backward products). Either operand may
    be in memory or a 1-D vector (``vectors``: "row", "col" or None)."""
    def operands(stores, values) -> tuple:
        """(a, ta, b, tb), a transposed view read as its base transposed."""
        a, b = in_order(on_disk, stores, values)
        (a, fa), (b, fb) = (as_transposed(x) if isinstance(x, StoreSpec) else (x, False)
                            for x in (a, b))
        return a, ta != fa, b, tb != fb

    def plan_of(stores, values, config: Config) -> Plan:
        a, ta_, b, tb_ = operands(stores, values)
        return plan_dot(a, b, ta_, tb_, on_disk, vectors, dtype, to_memory=to_memory,
                        config=config)

    def work(stores, values, config: Config):
        values = [np.asarray(v) for v in values]
        planned = plan_of(stores, values, config)
        if planned.decoded:  # compressed operands decoded once, first (plan_dot)
            reserve = 0  # the copies leave room for the product's output
            if not to_memory and planned.chunks is not None:
                a, ta_, b, tb_ = operands(stores, values)
                shape = dot_geometry(a, b, ta_, tb_, vectors)[2]
                reserve = stored_nbytes(StoreSpec("", shape, np.dtype(dtype),
                                                  tuple(planned.chunks)))
            with decoded_copies(stores, values, on_disk, planned.decoded, config,
                                reserve=reserve) as (stores, fits):
                if not fits:  # no room for the copies: decode as the product reads
                    a, ta_, b, tb_ = operands(stores, values)
                    planned = plan_dot(a, b, ta_, tb_, on_disk, vectors, dtype,
                                       to_memory=to_memory, config=config, decode=False)
                return run(stores, values, planned, config)
        return run(stores, values, planned, config)

    def run(stores, values, planned: Plan, config: Config):
        a, ta, b, tb = operands(stores, values)
        chunks, tk, splits, cost = planned.tile, planned.k_tile, planned.splits, planned.cost
        view_shape, squeeze, shape, k = dot_geometry(a, b, ta, tb, vectors)
        ma = Matrix(a, ta, vectors[0])
        mb = Matrix(b, tb, vectors[1])
        token = uuid.uuid4().hex
        if to_memory:
            dsk, keys = dot_graph(None, ma, mb, view_shape, chunks, k, tk, splits, token,
                                  squeeze=squeeze, shape=shape, dtype=dtype)
            return execute.run(dsk, keys, config.workers, cost)[0]
        return produce(config, "dot", shape, dtype, planned,
                       lambda out: dot_graph(out, ma, mb, view_shape, chunks, k, tk, splits,
                                             token, squeeze=squeeze),
                       grad=grad)
    return Work("dot", work, plan_of)


# --- one pass, several outputs: planner, graph and work -------------------------------

def plan_fused(op: str, shape: tuple, dtype, sources: list, out_dtypes: tuple,
               into: int | None, align: int | None, temporaries: int | None,
               config: Config) -> Plan:
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


def fused(op: str, kernel: Callable, shape: tuple, on_disk: tuple, dtype,
          out_dtypes: tuple, into: int | None, align: int | None = None,
          unread: tuple = (), temporaries: int | None = None):
    """Work for ``Fused`` (``jask.api.fused``): plan tiles, create the outputs, run one graph.

    Tiles are whole chunks of operand ``align`` (of ``into`` by default);
    operands in ``unread`` only lend their layout and are never read.
    ``temporaries``: tiles the kernel allocates besides its inputs (default:
    one per output and one more), what the plan counts for its outputs."""
    def plan_of(stores, values, config: Config) -> Plan:
        return plan_fused(op, shape, dtype, in_order(on_disk, stores, values), out_dtypes,
                          into, align, temporaries, config)

    def run(stores, values, config: Config):
        values = [np.asarray(v) for v in values]
        sources = in_order(on_disk, stores, values)
        full = tuple(range(len(shape)))
        operands = tuple(Operand(src, full if disk else (), dtype)
                         for src, disk in zip(sources, on_disk))
        target = _store(sources, into)
        if target is not None:  # no atomic replace of a plain store at a URL
            location_of(target).check_in_place(op)
        planned = plan_of(stores, values, config)
        tile, cost = planned.tile, planned.cost
        first = 0 if target is None else 1
        needs = _fused_room(config, op, shape, out_dtypes[first:], tile, target)
        outs: list = []
        try:
            for dt in out_dtypes[first:]:
                outs.append(registry.create(config.scratch_dir, op, shape, dt, tile))
            read = tuple(x for i, x in enumerate(operands) if i not in unread)

            def fill(staging: str | None) -> None:
                written = list(outs)
                if staging is not None and target is not None:
                    written.insert(0, StoreSpec(staging, target.shape, target.dtype,
                                                target.chunks))
                dsk, keys = fused_graph(op, kernel, tuple(written), shape, tile, read,
                                        uuid.uuid4().hex)
                execute.run(dsk, keys, config.workers, cost)
                if staging is not None:
                    forget_cached(staging)

            if target is None:
                fill(None)
            else:  # the first output replaces target's data, atomically (as update_)
                target = replace_store(target, maker_like(target), fill, config)
        except BaseException as err:
            for out in outs:
                registry.discard(out)
            raise_if_full(err, needs, op)  # naming the folder and the sizes
            raise
        return ([target] if target is not None else []) + outs
    return Work(op, run, plan_of)


def _fused_room(config: Config, op: str, shape, dtypes, tile, target) -> dict[str, int]:
    """Bytes each folder must take of a fused op's outputs (the scratch
    folder, and the folder of a ``target`` replaced), refused now if short."""
    folder = session_dir(config.scratch_dir)
    needs = {folder: sum(stored_nbytes(StoreSpec(folder, tuple(shape), np.dtype(dt), tile))
                         for dt in dtypes)}
    if target is not None and location_of(target).checks_free_space:  # (a folder beside it)
        beside = os.path.dirname(target.path)
        needs[beside] = needs.get(beside, 0) + stored_nbytes(target)
    for where, needed in needs.items():
        if needed and not (target is not None and where == os.path.dirname(target.path)
                           and compressed(target)):  # then only an upper bound
            check_space(where, needed, op)
    return needs


def _store(sources: list, i: int | None) -> StoreSpec | None:
    if i is None:
        return None
    source = sources[i]
    if not isinstance(source, StoreSpec):
        raise TypeError(f"jask.fused: operand {i} must be a DiskArray")
    return writable(source)
