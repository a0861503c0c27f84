"""Layout, the engine half: transposes, basic slices (and the scatter that is
a slice's gradient), C-order reshapes and joins; for each op its planner,
its work (:class:`~jask.engine.work.Work`), its graph and its block task.
The primitives that bind them are in :mod:`jask.core.primitives.layout`.

A transpose, a slice and a reshape that only adds or drops length-1 axes
are first answered by a view of the same store (:mod:`jask.store.views`): no
task, nothing read or written (:func:`jask.engine.plan.ops.view`). Only
when the view cannot stand (its input has no handle, or a reshape mixes
elements across rows) is a copy planned and run. A reshape's copy writes
bands of whole output rows, each read from the source rows that hold its
elements; a join writes default chunks (one along a stacked axis), each
task reading only the inputs its tile overlaps. A transposed copy is the
same copy a view's own copy or ``update_`` makes (``transpose_chunks``,
``transpose_graph``), so those stay in :mod:`jask.engine.plan.ops` and
:mod:`jask.engine.builders`. Nothing here knows of JAX.
"""
from __future__ import annotations

import math

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.engine import builders
from jask.engine.builders import chunk_graph, key_name
from jask.engine.plan import ops as planner
from jask.engine.plan.ops import n_tiles
from jask.engine.plan.tiles import Plan, plan_slice
from jask.engine.work import Work, as_view, decoded_first, produce
from jask.store.spec import StoreSpec
from jask.store.tiles import read, read_model, write
from jask.store.views import reshape as reshape_view
from jask.store.views import take as slice_view
from jask.store.views import transpose as transpose_view

__all__ = ["transpose", "take_slice", "scatter_slice", "reshape", "concatenate",
           "plan_take_slice", "plan_scatter_slice", "plan_reshape", "plan_concatenate",
           "slice_graph", "scatter_graph", "reshape_graph", "concatenate_graph"]


# --- transpose: a view, or a permuted copy ----------------------------------------------

def transpose(axes: tuple, *, grad: bool = False) -> Work:
    """Work for the input's axes permuted: a view of the same store
    (:mod:`jask.store.views`), or a permuted copy of one that has no handle."""
    def plan_of(stores, values, config: Config) -> Plan:
        return planner.view("transpose", transpose_view(stores[0], axes))

    def work(stores, scalars, config: Config):
        (source,) = stores
        view = as_view(transpose_view(source, axes), config)
        if view is not None:
            return view
        planned = planner.transpose(source, axes, config)
        shape = tuple(source.shape[a] for a in axes)
        return produce(config, "transpose", shape, source.dtype, planned,
                       lambda out: builders.transpose_graph(out, source, axes), grad=grad)
    return Work("transpose", work, plan_of)


# --- planners ------------------------------------------------------------------------

def _first_fit(op: str, shape: tuple, candidates, cost_of, config: Config) -> Plan:
    tile, cost = memory.first_fit(candidates, cost_of, config.max_memory)
    tile = tuple(tile)
    return Plan(op, tile, tile, n_tiles(shape, tile), cost)


def plan_take_slice(source: StoreSpec, sizes: tuple, config: Config) -> Plan:
    """``a[index]``: per axis (size, step) or None for an integer index;
    tiles whose read windows decode few chunks (:func:`plan_slice`)."""
    shape = tuple(size for size, _ in (x for x in sizes if x is not None))
    tile, cost = plan_slice(source, sizes, budget=config.max_memory, workers=config.workers)
    return Plan("slice", tuple(tile), tuple(tile), n_tiles(shape, tile), cost)


def plan_scatter_slice(g: StoreSpec, shape: tuple, config: Config) -> Plan:
    """The gradient of a slice (zeros with ``g`` placed where it was taken):
    default chunks of ``shape``."""
    chunks = memory.default_chunks(shape, g.dtype, config.max_memory, config.workers)
    cost = memory.task_cost("slice_vjp", chunks, [(read_model(g), chunks)],
                            memory.nbytes(chunks, g.dtype), 2, config.workers)
    memory.check_fits(cost, config.max_memory)
    return Plan("slice_vjp", tuple(chunks), tuple(chunks), n_tiles(shape, chunks), cost)


def plan_reshape(source: StoreSpec, shape: tuple, config: Config) -> Plan:
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


def plan_concatenate(stores, axis: int, stack: bool, shape: tuple, config: Config) -> Plan:
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


# --- works ---------------------------------------------------------------------------

def take_slice(sizes: tuple, *, grad: bool = False) -> Work:
    """Work for ``a[index]``: per axis (size, step) or None for an integer
    index; the starts are the in-memory operands."""
    def plan_of(stores, values, config: Config) -> Plan:
        view = slice_view(stores[0], sizes, (0,) * len(sizes))  # starts may be traced
        if view is not None:
            return planner.view("slice", view)
        return plan_take_slice(stores[0], sizes, config)

    def work(stores, values, config: Config):
        (source,) = stores
        starts = tuple(int(v) for v in values)
        view = as_view(slice_view(source, sizes, starts), config)
        if view is not None:
            return view
        shape = tuple(size for size, _ in (x for x in sizes if x is not None))
        return produce(config, "slice", shape, source.dtype,
                       plan_take_slice(source, sizes, config),
                       lambda out: slice_graph(out, source, sizes, starts), grad=grad)
    return Work("slice", work, plan_of)


def scatter_slice(sizes: tuple, shape: tuple) -> Work:
    """Work for the gradient of a slice: zeros with ``g`` where it was taken."""
    def plan_of(stores, values, config: Config) -> Plan:
        return plan_scatter_slice(stores[0], shape, config)

    def work(stores, values, config: Config):
        (g,) = stores
        starts = tuple(int(v) for v in values)
        return produce(config, "slice_vjp", shape, g.dtype, plan_of(stores, values, config),
                       lambda out: scatter_graph(out, g, sizes, starts), grad=True)
    return Work("slice_vjp", work, plan_of)


def reshape(shape: tuple, *, grad: bool = False) -> Work:
    """Work for a C-order reshape: a view when only length-1 axes come or
    go, else bands of whole output rows, each read from the source rows
    that hold its elements."""
    def plan_of(stores, values, config: Config) -> Plan:
        view = reshape_view(stores[0], shape)
        if view is not None:
            return planner.view("reshape", view)
        return plan_reshape(stores[0], shape, config)

    def work(stores, values, config: Config):
        (source,) = stores
        view = as_view(reshape_view(source, shape), config)
        if view is not None:
            return view
        return produce(config, "reshape", shape, source.dtype,
                       plan_reshape(source, shape, config),
                       lambda out: reshape_graph(out, source), grad=grad)
    return decoded_first(Work("reshape", work, plan_of))


def concatenate(axis: int, stack: bool, shape: tuple, *, grad: bool = False) -> Work:
    """Work for joining stores along ``axis`` (a new axis when ``stack``)
    into an array of ``shape``."""
    def plan_of(stores, values, config: Config) -> Plan:
        return plan_concatenate(stores, axis, stack, shape, config)

    def work(stores, values, config: Config):
        first = stores[0]
        return produce(config, "concatenate", shape, first.dtype,
                       plan_of(stores, values, config),
                       lambda out: concatenate_graph(out, tuple(stores), axis, stack),
                       grad=grad)
    return decoded_first(Work("concatenate", work, plan_of))


# --- graphs --------------------------------------------------------------------------

def slice_graph(out: StoreSpec, source: StoreSpec, sizes: tuple, starts: tuple):
    """out = source[index], one task per output chunk (see :func:`slice_block`)."""
    return chunk_graph("slice", out, slice_block, source, sizes, starts)


def scatter_graph(out: StoreSpec, g: StoreSpec, sizes: tuple, starts: tuple):
    """out = zeros with g placed where a slice took it, one task per chunk."""
    return chunk_graph("slice_vjp", out, scatter_block, g, sizes, starts)


def reshape_graph(out: StoreSpec, source: StoreSpec, op: str = "reshape"):
    """out = source reshaped (C order), one task per band of out's rows."""
    name = key_name(op, out.path)
    rows = out.chunks[0]
    graph = {(name, i): (reshape_block, out, slice(s, min(s + rows, out.shape[0])), source)
             for i, s in enumerate(range(0, out.shape[0], rows))}
    return graph, list(graph)


def concatenate_graph(out: StoreSpec, inputs: tuple, axis: int, stack: bool):
    """out = inputs joined along axis, one task per output chunk."""
    return chunk_graph("concatenate", out, concatenate_block, inputs, axis, stack)


# --- block tasks: each writes one whole output chunk ----------------------------------

def _extent(region: tuple) -> tuple:
    return tuple(r.stop - r.start for r in region)


def slice_block(out: StoreSpec, region: tuple, source: StoreSpec, sizes: tuple,
                starts: tuple) -> None:
    """out[region] = source[index][region]; ``sizes`` per source axis is
    (size, step) of a slice or None for an integer index."""
    window, steps, i = [], [], 0
    for start, x in zip(starts, sizes):
        if x is None:
            window.append(slice(start, start + 1))
            steps.append(slice(None))
            continue
        r, step = region[i], x[1]
        window.append(slice(start + r.start * step, start + (r.stop - 1) * step + 1))
        steps.append(slice(None, None, step))
        i += 1
    block = read(source, tuple(window))[tuple(steps)]
    write(out, region, np.ascontiguousarray(block).reshape(_extent(region)))


def scatter_block(out: StoreSpec, region: tuple, g: StoreSpec, sizes: tuple,
                  starts: tuple) -> None:
    """out[region] = the slice's cotangent g where the slice took elements, else 0."""
    block = np.zeros(_extent(region), dtype=out.dtype)
    dst, src = [], []
    for r, start, x in zip(region, starts, sizes):
        if x is None:  # an integer index: the cotangent has no such axis
            if not r.start <= start < r.stop:
                return write(out, region, block)
            dst.append(slice(start - r.start, start - r.start + 1))
            continue
        size, step = x
        lo = max(0, -(-(r.start - start) // step))
        hi = min(size, -(-(r.stop - start) // step))
        if lo >= hi:
            return write(out, region, block)
        first = start + lo * step - r.start
        dst.append(slice(first, first + (hi - lo - 1) * step + 1, step))
        src.append(slice(lo, hi))
    part = read(g, tuple(src))
    block[tuple(dst)] = part.reshape(block[tuple(dst)].shape)
    write(out, region, block)


def concatenate_block(out: StoreSpec, region: tuple, inputs: tuple, axis: int,
                      stack: bool) -> None:
    """out[region] from the inputs it overlaps along ``axis``."""
    block = np.empty(_extent(region), dtype=out.dtype)
    r, offset = region[axis], 0
    for x in inputs:
        length = 1 if stack else x.shape[axis]
        lo, hi = max(r.start, offset), min(r.stop, offset + length)
        if lo < hi:
            dst = region[:axis] + (slice(lo - r.start, hi - r.start),) + region[axis + 1:]
            dst = tuple(slice(0, s.stop - s.start) if i != axis else s
                        for i, s in enumerate(dst))
            if stack:
                part = read(x, region[:axis] + region[axis + 1:])
                block[dst] = np.expand_dims(part, axis)
            else:
                src = region[:axis] + (slice(lo - offset, hi - offset),) + region[axis + 1:]
                block[dst] = read(x, src)
        offset += length
    write(out, region, block)


def reshape_block(out: StoreSpec, rows: slice, source: StoreSpec) -> None:
    """out[rows] from the C-order elements of source it holds: the source
    rows that cover that flat range, read whole and cut."""
    out_row = int(np.prod(out.shape[1:], dtype=np.int64))
    src_row = int(np.prod(source.shape[1:], dtype=np.int64))
    first, last = rows.start * out_row, rows.stop * out_row
    r0, r1 = first // src_row, -(-last // src_row)
    block = read(source, (slice(r0, r1),) + tuple(slice(0, n) for n in source.shape[1:]))
    flat = block.reshape(-1)[first - r0 * src_row:last - r0 * src_row]
    write(out, (rows,) + tuple(slice(0, n) for n in out.shape[1:]),
          flat.reshape((rows.stop - rows.start,) + tuple(out.shape[1:])))
