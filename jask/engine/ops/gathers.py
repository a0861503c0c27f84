"""Gathers and sorts, the engine half: for each op its planner, its work
(:class:`~jask.engine.work.Work`) and its graph. The primitives that bind
them are in :mod:`jask.core.primitives.gathers`.

**Outer gathers**: ``out = source[np.ix_(index_0, index_1, ...)]`` over
tiles. Each axis either keeps the source's positions (``None``) or takes
them from an index vector (flip, roll, take, repeat, tile). A task writes
one output tile: it groups the tile's source positions by source chunk along
every axis and reads one chunk's part at a time, so it holds its output tile
and one chunk's window, whatever the indices. An index outside ``[0, n)``
gives ``fill`` (jax.numpy's ``take(mode="fill")``; negative ones wrap
first); without a ``fill`` it raises IndexError (:func:`check_in_bounds`),
as numpy. The scatter-add is the gather's transpose (its VJP when indices
repeat): ``out[np.ix_(index...)] += g``, each task writing one tile of
``out`` from the positions of ``g`` that land in it, grouped by ``g``'s
chunks.

**Sorting along one axis**, tile by tile: each tile holds whole lanes, so
every lane is sorted in one task and written as one whole output chunk; a
lane that does not fit in the budget is refused by the planner
(:func:`plan_sort`). The kernels follow jax.numpy exactly: a stable sort in
which NaNs (of either sign) come last and ``-0.0`` ties with ``0.0``
(numpy's order, which is ``lax.sort``'s), a descending sort being the
ascending one reversed, and ``argsort(descending=True)`` keeping equal
elements in their original order, as ``jnp.argsort`` does.

**searchsorted**: each tile of values searched in the sorted array, one
chunk of it at a time. Nothing here knows of JAX.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import uuid

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.engine import execute
from jask.engine.builders import chunk_graph, key_name, regions
from jask.engine.plan import ops as planner
from jask.engine.plan.ops import held_bytes, n_tiles
from jask.engine.plan.tiles import Plan
from jask.engine.work import Work, as_view, decoded_first, in_order, produce
from jask.store.spec import StoreSpec
from jask.store.tiles import read, read_model, write
from jask.store.views import gather as gather_view

__all__ = ["gather", "scatter_add", "sort", "search", "plan_gather", "plan_sort", "plan_search",
           "gather_graph", "scatter_add_graph", "sort_graph", "search_graph", "normalized",
           "check_in_bounds", "sorted_lanes", "KINDS", "GATHER_SHARE", "SORT_TEMPORARY_BYTES"]


# --- outer gathers and their scatter-add: graphs ----------------------------------------

def normalized(index: np.ndarray, n: int) -> np.ndarray:
    """Index positions as int64 in ``[0, n)``, negative ones wrapped, the
    rest out of range (-1).

    Example:
      >>> normalized(np.array([0, -1, 3, -5]), 3)
      array([ 0,  2, -1, -1])
    """
    index = np.asarray(index, np.int64).reshape(-1)
    index = np.where(index < 0, index + n, index)
    return np.where((index < 0) | (index >= n), -1, index)


def check_in_bounds(index, n: int, axis: int, shape: tuple) -> None:
    """Raise IndexError, as numpy does, naming the first of ``index``'s
    positions outside ``[-n, n)`` and the axis; nothing when all are in.

    Example:
      >>> check_in_bounds(np.array([0, -3, 3]), 3, 1, (4, 3))
      Traceback (most recent call last):
      IndexError: index 3 is out of bounds for axis 1 with size 3 (shape (4, 3))
    """
    index = np.asarray(index).reshape(-1)
    if not index.size:
        return
    outside = (index < -n) | (index >= n)
    if outside.any():
        bad = index[np.argmax(outside)]
        raise IndexError(f"index {int(bad)} is out of bounds for axis {axis} with size {n} "
                         f"(shape {tuple(shape)})")


def _groups(want: np.ndarray, positions: np.ndarray, chunk: int) -> list:
    """(positions in the written tile, positions read) grouped by the chunk
    of the read array they fall in."""
    valid = want >= 0
    want, positions = want[valid], positions[valid]
    if not want.size:  # the whole tile is fill along this axis: nothing to read
        return []
    ids = want // chunk
    order = np.argsort(ids, kind="stable")
    want, positions, ids = want[order], positions[order], ids[order]
    cuts = np.flatnonzero(np.diff(ids)) + 1
    return list(zip(np.split(positions, cuts), np.split(want, cuts)))


def _contiguous(positions: np.ndarray):
    """A slice when ``positions`` are consecutive, increasing or decreasing
    (a view, not a copy), else None."""
    first, last, n = int(positions[0]), int(positions[-1]), len(positions)
    if n > 1 and first - last == n - 1 and np.all(np.diff(positions) == -1):
        return slice(first, last - 1 if last > 0 else None, -1)
    if last - first == n - 1 and (n < 3 or np.all(np.diff(positions) == 1)):
        return slice(first, last + 1)
    return None


#: A gap between two picked positions that one read spans rather than cut
#: into two (bytes of the source): less than what a read costs besides them.
SPAN_GAP_BYTES = 64 * 1024


def _spans(w: np.ndarray, gap: int):
    """(order, ordered, cuts): ``w``'s positions in increasing order
    (``ordered = w[order]``), cut where two are more than ``gap`` apart and
    where they pass into the next stretch of ``len(w)`` positions, so a span
    read whole holds no more than the part picked from all of them, and
    positions a few apart (every k-th, as scikit-learn's ``y + arange(n) *
    k``) share one read rather than one each."""
    order = np.argsort(w, kind="stable")
    ordered = w[order]
    apart = np.flatnonzero(np.diff(ordered) > gap) + 1
    piece = np.zeros(len(w), np.int64)
    piece[apart] = 1
    piece = np.cumsum(piece)
    starts = ordered[np.r_[0, apart]][piece]
    stretch = (ordered - starts) // len(w)
    new = (np.diff(piece) != 0) | (np.diff(stretch) != 0)
    return order, ordered, [0, *(np.flatnonzero(new) + 1), len(w)]


def _read_part(source: StoreSpec, wanted: tuple, runs: bool = False) -> np.ndarray:
    """source[np.ix_(*wanted)]: the bounding window, then picked with one
    view (runs, forwards or backwards) or one copy (any other positions).
    With ``runs`` (chunks that are plain files: reading part of one costs
    only that part) positions scattered along one axis are read span by
    span (:func:`_spans`), so no read is longer than the picked part along
    that axis, and positions close together share one read (a gap of up to
    :data:`SPAN_GAP_BYTES` read and dropped)."""
    window = tuple(slice(int(w.min()), int(w.max()) + 1) for w in wanted)
    picks = [_contiguous(w - s.start) for w, s in zip(wanted, window)]
    scattered = [d for d, p in enumerate(picks) if p is None]
    if runs and len(scattered) == 1:
        (d,) = scattered
        row = source.dtype.itemsize * math.prod(len(x) for k, x in enumerate(wanted) if k != d)
        order, ordered, cuts = _spans(wanted[d], max(1, SPAN_GAP_BYTES // row))
        part = np.empty(tuple(len(x) for x in wanted), source.dtype)
        for start, stop in zip(cuts[:-1], cuts[1:]):
            first = int(ordered[start])
            span = window[:d] + (slice(first, int(ordered[stop - 1]) + 1),) + window[d + 1:]
            block = read(source, span)
            pick = tuple(p if k != d else ordered[start:stop] - first
                         for k, p in enumerate(picks))
            part[(slice(None),) * d + (order[start:stop],)] = block[pick]
        return part
    block = read(source, window)
    if all(p is not None for p in picks):
        return block[tuple(picks)]
    return block[np.ix_(*[w - s.start for w, s in zip(wanted, window)])]


def _target(local: tuple):
    """An index of the written tile: slices when every axis is contiguous."""
    slices = [_contiguous(p) for p in local]
    if all(s is not None for s in slices):
        return tuple(slices)
    return np.ix_(*local)


def gather_block(out: StoreSpec, region: tuple, source: StoreSpec, index: tuple,
                 fill, runs: bool = False) -> None:
    """out[region] = source[np.ix_(index...)][region] (``fill`` where out of range)."""
    extent = tuple(r.stop - r.start for r in region)
    block = np.empty(extent, out.dtype)
    per_axis = []
    for d, r in enumerate(region):
        positions = np.arange(extent[d])
        want = positions + r.start if index[d] is None else index[d][r]
        if fill is not None and np.any(want < 0):
            block.fill(fill)
        per_axis.append(_groups(want, positions, source.chunks[d]))
    for parts in itertools.product(*per_axis):
        local = tuple(p for p, _ in parts)
        block[_target(local)] = _read_part(source, tuple(w for _, w in parts), runs)
    write(out, region, block)


def scatter_add_block(out: StoreSpec, region: tuple, g: StoreSpec, index: tuple,
                      runs: bool = False) -> None:
    """out[region] = the sum of g at the positions the gather took from it."""
    extent = tuple(r.stop - r.start for r in region)
    block = np.zeros(extent, out.dtype)
    per_axis = []
    for d, r in enumerate(region):
        if index[d] is None:
            taken = np.arange(r.start, r.stop)
            local = taken - r.start
        else:
            taken = np.flatnonzero((index[d] >= r.start) & (index[d] < r.stop))
            local = index[d][taken] - r.start
        if len(taken) == 0:
            return write(out, region, block)
        per_axis.append(_groups(taken, local, g.chunks[d]))
    for parts in itertools.product(*per_axis):
        local = tuple(p for p, _ in parts)
        part = _read_part(g, tuple(w for _, w in parts), runs).astype(out.dtype, copy=False)
        target = _target(local)
        if isinstance(target, tuple) and all(isinstance(t, slice) for t in target):
            block[target] += part  # positions distinct along every axis
        else:
            np.add.at(block, target, part)
    write(out, region, block)


def gather_graph(op: str, out: StoreSpec, source: StoreSpec, index: tuple, fill):
    """out = source gathered by ``index`` (per axis a vector or None), one
    task per output chunk."""
    return chunk_graph(op, out, gather_block, source, index, fill, read_model(source).raw)


def scatter_add_graph(op: str, out: StoreSpec, g: StoreSpec, index: tuple):
    """out = zeros with ``g`` added where the gather took it, one task per chunk."""
    return chunk_graph(op, out, scatter_add_block, g, index, read_model(g).raw)


# --- outer gathers: planner and work -------------------------------------------------

#: The share of the budget gathers plan against: their measured peaks ran up
#: to 1.04x the model on zstd chunks (decode buffers) in the memory-bound grid.
GATHER_SHARE = 0.9


def plan_gather(op: str, read: StoreSpec, indexed: tuple, shape: tuple, values,
                config: Config, dtype=None, local: bool = False) -> Plan:
    """An outer gather writing an array of ``shape`` from ``read`` (its
    scatter-add too, reading the cotangent): default chunks, halved until a
    task fits, with fewer tasks at once last. A task holds its tile and one
    window of ``read``: at most a chunk along the ``indexed`` axes (no longer
    than the tile's extent when the indices are ``local``: a run of outputs
    reads a run of sources, as in flip, roll, repeat and tile; or when
    ``read``'s chunks are plain files, read run by run), the tile's own
    extent along the others; the index
    vectors (``values``) are held once."""
    dtype = np.dtype(dtype or read.dtype)
    held = held_bytes(values)
    model = read_model(read)

    def cost_of(tile, at_once):
        # plain chunk files are read run by run (_read_part)
        bounded = local or model.raw
        window = tuple(min(c, n) if d in indexed and not bounded else min(c, t, n)
                       for d, (c, n, t) in enumerate(zip(read.chunks, read.shape, tile)))
        # the tile, what writing it takes, the pieces of up to four windows
        # a tile straddles, and the part picked from a window (a copy when
        # the positions are not runs); 3 for local gathers measured flip at
        # 1.2-1.3x its model on the memory-bound grid (16.2 MB of 16)
        copies = 4
        cost = memory.task_cost(op, tile, [(model, window)], memory.nbytes(tile, dtype),
                                copies, at_once)
        # held once: the index vectors and what every op holds besides its tasks
        return dataclasses.replace(cost, fixed=held + memory.op_overhead(config.max_memory))

    chunks = memory.default_chunks(shape, dtype, config.max_memory, config.workers)
    # never tiles below the minimum (a chunk's decoding does not shrink with
    # them: a compressed source made a million tasks of 4 x 4); fewer tasks
    # at once before smaller tiles
    smallest = memory.min_tile_bytes(config.max_memory)
    tiles = [t for i, t in enumerate(memory.shrinking(chunks))
             if i == 0 or memory.nbytes(t, dtype) >= smallest]
    candidates = [(tile, k) for tile in tiles for k in sorted({config.workers, 1}, reverse=True)]
    (tile, _), cost = memory.first_fit(candidates, lambda c: cost_of(*c),
                                       int(config.max_memory * GATHER_SHARE))
    return Plan(op, tuple(tile), tuple(tile), n_tiles(shape, tile), cost)


def _index(indexed: tuple, values, shape: tuple) -> tuple:
    """Per axis of ``shape``: its index vector (normalized) or None."""
    vectors = dict(zip(indexed, values))
    return tuple(normalized(vectors[d], n) if d in vectors else None
                 for d, n in enumerate(shape))


def gather(op: str, indexed: tuple, shape: tuple, fill=None, *, local: bool = False,
           grad: bool = False):
    """Work for an outer gather of a store into ``shape``: the axes
    ``indexed`` take their positions from the in-memory index vectors (in
    order), the others keep them; ``fill`` where an index is out of range,
    IndexError without one, raised before anything is written (``local``:
    see :func:`plan_gather`)."""
    def plan_of(stores, values, config: Config) -> Plan:
        view = _runs_view(stores[0], values)
        if view is not None:
            return planner.view(op, view)
        return plan_gather(op, stores[0], indexed, shape, values, config, local=local)

    def work(stores, values, config: Config):
        (source,) = stores
        if fill is None:  # no fill asked for: a position out of range is an error
            for d, vector in zip(indexed, values):
                check_in_bounds(vector, source.shape[d], d, source.shape)
        index = _index(indexed, values, source.shape)
        return produce(config, op, shape, source.dtype, plan_of(stores, values, config),
                       lambda out: gather_graph(op, out, source, index, fill),
                       grad=grad)

    def _runs_view(source: StoreSpec, values) -> StoreSpec | None:
        """One axis taken by runs of consecutive positions, all in range: a view."""
        if len(indexed) != 1 or not isinstance(values[0], np.ndarray):
            return None  # (traced positions: known only when the program runs)
        (d,) = indexed
        positions = normalized(values[0], source.shape[d])
        if positions.size and positions.min() < 0:
            return None  # out of range: filled
        return gather_view(source, d, positions)

    # flip, roll, a permutation: every chunk read, by windows that cut them
    copying = decoded_first(Work(op, work, plan_of),
                            lambda store: math.prod(shape) >= math.prod(store.shape))

    def run(stores, values, config: Config):
        view = as_view(_runs_view(stores[0], values), config)
        return view if view is not None else copying(stores, values, config)
    return Work(op, run, copying.plan)


def scatter_add(op: str, indexed: tuple, shape: tuple, dtype):
    """Work for a gather's transpose: zeros of ``shape`` with the cotangent
    (the store) added where the gather took its elements."""
    def plan_of(stores, values, config: Config) -> Plan:
        return plan_gather(op, stores[0], indexed, shape, values, config, dtype=dtype)

    def work(stores, values, config: Config):
        (g,) = stores
        index = _index(indexed, values, shape)
        return produce(config, op, shape, dtype, plan_of(stores, values, config),
                       lambda out: scatter_add_graph(op, out, g, index), grad=True)
    return Work(op, work, plan_of)


# --- sorting along an axis: graph, planner, work ------------------------------------

def _ascending(x, axis):
    return np.argsort(x, axis=axis, kind="stable")


def _argsort(x, axis, descending):
    """jnp.argsort: descending sorts the reversed lane and reverses back, so
    that ties keep their original order."""
    if not descending:
        return _ascending(x, axis)
    n = x.shape[axis]
    return np.flip(n - 1 - _ascending(np.flip(x, axis), axis), axis)


def _perm(x, axis, descending):
    """The order jnp.sort puts elements in (its VJP gathers by it): the
    stable ascending order, reversed when descending."""
    order = _ascending(x, axis)
    return np.flip(order, axis) if descending else order


def sorted_lanes(kind: str, tiles: list, axis: int, descending: bool) -> np.ndarray:
    """One tile's result (``tiles``: the tiles of the op's inputs).

    Example:
      >>> x = np.array([[3.0, np.nan, 1.0, 3.0]])
      >>> sorted_lanes("sort", [x], 1, False), sorted_lanes("argsort", [x], 1, True)
      (array([[ 1.,  3.,  3., nan]]), array([[1, 0, 3, 2]]))
      >>> sorted_lanes("unsort", [np.array([[10.0, 20.0, 30.0]]), np.array([[2, 0, 1]])], 1, False)
      array([[20., 30., 10.]])
    """
    if kind == "unsort":  # sort's VJP: the cotangent put back where each element came from
        g, perm = tiles
        out = np.empty_like(g)
        np.put_along_axis(out, perm.astype(np.intp, copy=False), g, axis)
        return out
    (x,) = tiles
    if kind == "argsort":
        return _argsort(x, axis, descending)
    order = _perm(x, axis, descending)
    return order if kind == "perm" else np.take_along_axis(x, order, axis)


#: What a task computes: sorted values, jnp.argsort's indices, the order
#: jnp.sort's VJP gathers by, and that VJP itself (inputs: cotangent, order).
KINDS = ("sort", "argsort", "perm", "unsort")


def _sort_block(kind: str, sources: tuple, out: StoreSpec, region: tuple, axis: int,
                descending: bool) -> None:
    tiles = [read(s, region) for s in sources]
    result = sorted_lanes(kind, tiles, axis, descending)
    del tiles
    write(out, region, np.ascontiguousarray(result.astype(out.dtype, copy=False)))


def sort_graph(op: str, kind: str, sources: tuple, out: StoreSpec, tile: tuple, axis: int,
               descending: bool, token: str):
    """One task per tile of whole lanes (a whole output chunk)."""
    name = key_name(op, token)
    graph = {(name, i): (_sort_block, kind, tuple(sources), out, region, axis, descending)
             for i, region in enumerate(regions(tuple(out.shape), tile))}
    return graph, list(graph)


#: Bytes per element a sort task holds besides its input and output tiles:
#: the lanes' order (int64), a stable sort's merge buffer (half as many
#: int64s) and numpy's copy of each strided lane. The memory-bound grid
#: measured peaks 1.3-1.6x a model without the buffer and with one output
#: copy, and up to 1.17x the budget with 12 bytes (after other ops had run
#: in the same process); 20 keeps every cell under it.
SORT_TEMPORARY_BYTES = 20


def plan_sort(op: str, stores: list, axis: int, out_dtype, config: Config) -> Plan:
    """A sort along ``axis``: tiles span the whole
    axis, the other axes halved from the default chunks until a task fits
    (one task at a time if need be). A task holds its input tiles, the lanes'
    order (int64) and the result. Refused, naming the budget, when one lane
    does not fit."""
    shape = tuple(stores[0].shape)
    return planner.lanes(op, stores, axis, shape[axis], out_dtype, SORT_TEMPORARY_BYTES, config,
                         holds="a sort holds a whole lane in memory", shorter="sort shorter lanes")


def sort(op: str, kind: str, axis: int, descending: bool, dtype, *, grad: bool = False):
    """Work for a sort along ``axis`` (``kind``: see :data:`KINDS`),
    whole lanes per tile, written to a new store of ``dtype``."""
    def plan_of(stores, values, config: Config) -> Plan:
        return plan_sort(op, stores, axis, dtype, config)

    def work(stores, values, config: Config):
        planned = plan_of(stores, values, config)
        shape = tuple(stores[0].shape)
        token = uuid.uuid4().hex
        return produce(config, op, shape, dtype, planned,
                       lambda out: sort_graph(op, kind, tuple(stores), out,
                                                      planned.tile, axis, descending, token),
                       grad=grad)
    return decoded_first(Work(op, work, plan_of))


# --- searchsorted: graph, planner, work ----------------------------------------------

def _read(source, region: tuple) -> np.ndarray:
    return read(source, region) if isinstance(source, StoreSpec) else source[region]


def search_block(side: str, values, sorted_, region: tuple, step: int, dtype) -> np.ndarray:
    """Insertion indices of one tile of ``values`` into ``sorted_`` (a store
    or an array), read ``step`` elements at a time: the counts of each piece
    (numpy's order, NaNs last, as jax.numpy's) add up to the index.

    Example:
      >>> search_block("left", np.array([2.0, 9.0, 0.0]), np.array([1.0, 2.0, 2.0, 5.0]),
      ...              (slice(0, 3),), 3, np.float64)
      array([1, 4, 0])
    """
    v = _read(values, region).astype(dtype, copy=False)
    counts = np.zeros(v.shape, np.int64)
    n = sorted_.shape[0]
    for start in range(0, n, max(step, 1)):
        piece = _read(sorted_, (slice(start, min(start + step, n)),)).astype(dtype, copy=False)
        counts += np.searchsorted(piece, v, side=side)  # type: ignore[call-overload]
    return counts


def _search_write(out: StoreSpec, side, values, sorted_, region, step, dtype) -> None:
    counts = search_block(side, values, sorted_, region, step, dtype)
    write(out, region, counts.astype(out.dtype))


def _search_assemble(shape, dtype, regions_, *pieces) -> np.ndarray:
    result = np.empty(shape, dtype)
    for region, piece in zip(regions_, pieces):
        result[region] = piece
    return result


def search_graph(op: str, side: str, values, sorted_, out: StoreSpec | None, shape: tuple,
                 out_dtype, tile: tuple, step: int, dtype, token: str):
    """One task per tile of ``values`` (a whole output chunk, or a piece of
    the in-memory result assembled by one more task)."""
    name = key_name(op, token)
    tiles = list(regions(shape, tile))
    graph: dict
    if out is not None:
        graph = {(name, i): (_search_write, out, side, values, sorted_, region, step, dtype)
                 for i, region in enumerate(tiles)}
        return graph, list(graph)
    graph = {(name, i): (search_block, side, values, sorted_, region, step, dtype)
             for i, region in enumerate(tiles)}
    root = (key_name(op, token, stage="result"),)
    graph[root] = (_search_assemble, shape, np.dtype(out_dtype), tiles, *list(graph))
    return graph, [root]


def plan_search(op: str, values, sorted_, dtype, to_memory: bool, config: Config) -> Plan:
    """searchsorted: tiles of the
    values (a store or an array), each searched in the sorted array one
    chunk at a time (the whole array when it is in memory). A task holds its
    values in ``dtype``, their int64 counts and one piece of the sorted array;
    an in-memory operand or result is held once."""
    shape = tuple(values.shape)
    itemsize = np.dtype(dtype).itemsize
    disk_sorted = isinstance(sorted_, StoreSpec)
    step = int(sorted_.chunks[0]) if disk_sorted else max(int(sorted_.shape[0]), 1)
    held = held_bytes(x for x in (values, sorted_) if not isinstance(x, StoreSpec))
    if to_memory:
        held += memory.nbytes(shape, np.int64) * 2  # the pieces and the assembled result
    reads = [(read_model(sorted_), (step,))] if disk_sorted else []

    def cost_of(tile, at_once):
        tile_reads = reads + ([(read_model(values), tile)]
                              if isinstance(values, StoreSpec) else [])
        cost = memory.task_cost(op, tile, tile_reads,
                                math.prod(tile) * (8 + itemsize) + step * itemsize, 1, at_once)
        return dataclasses.replace(cost, fixed=held)

    start = memory.default_chunks(shape, np.int64, config.max_memory, config.workers)
    tiles = list(memory.shrinking(start))
    for at_once in sorted({config.workers, 1}, reverse=True):  # one at a time if need be
        for tile in tiles:
            cost = cost_of(tile, at_once)
            if cost.total <= config.max_memory:
                return Plan(op, tile, None if to_memory else tile, n_tiles(shape, tile), cost)
    memory.check_fits(cost_of(tiles[-1], 1), config.max_memory)
    raise AssertionError("unreachable: check_fits raised")


def search(side: str, on_disk: tuple, dtype, out_dtype, *, to_memory: bool):
    """Work for searchsorted of ``values`` in ``sorted_`` (each a store or
    an in-memory value, flagged by ``on_disk``), compared in ``dtype``."""
    def plan_of(stores, values, config: Config) -> Plan:
        v, a = in_order(on_disk, stores, values)
        return plan_search("searchsorted", v, a, dtype, to_memory, config)

    def work(stores, values, config: Config):
        values = [np.asarray(x) for x in values]
        planned = plan_of(stores, values, config)
        v, a = in_order(on_disk, stores, values)
        shape = tuple(v.shape)
        token = uuid.uuid4().hex
        if to_memory:
            dsk, keys = search_graph("searchsorted", side, v, a, None, shape, out_dtype,
                                             planned.tile, _step(a), dtype, token)
            return execute.run(dsk, keys, config.workers, planned.cost)[0]
        return produce(config, "searchsorted", shape, out_dtype, planned,
                       lambda out: search_graph("searchsorted", side, v, a, out, shape,
                                                        out_dtype, planned.tile, _step(a),
                                                        dtype, token), grad=False)
    return Work("searchsorted", work, plan_of)


def _step(sorted_) -> int:
    """How much of the sorted array a search task reads at once."""
    if isinstance(sorted_, StoreSpec):
        return int(sorted_.chunks[0])
    return max(int(sorted_.shape[0]), 1)
