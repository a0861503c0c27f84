"""What each op does to stores: plan tiles, create the output, run a graph.

Each function here takes input :class:`~jask.store.spec.StoreSpec` s, scalar
operands as numpy values and a :class:`~jask.base.config.Config`, and returns the
output store (or an in-memory value). The plan is checked against the budget
before the output store exists; an output whose graph fails is removed, so a
half-written store is never returned.
"""
from __future__ import annotations

import dataclasses
import math
import os
import uuid
from typing import Callable

import numpy as np

from jask.base import counters, memory
from jask.base.config import Config
from jask.engine import blockwise as bw
from jask.engine import builders, execute, plan, scan, tasks
from jask.engine.fused import fused_graph
from jask.store import chunkio, durability, layout, registry, sessions, space
from jask.store.spec import StoreSpec, stored_nbytes


def _produce(config: Config, op: str, shape, dtype, plan, build, *, grad: bool):
    chunks, cost = plan
    with room(config, op, shape, dtype, chunks), registry.new_store(
            config.scratch_dir, op, shape, dtype, chunks, grad=grad) as out:
        dsk, keys = build(out)
        execute.run(dsk, keys, config.workers, cost)
    return out


def room(config: Config, op: str, shape, dtype, chunks):
    """Refuse an output the scratch disk cannot hold, before writing it; the
    context it returns names the folder and sizes if the disk fills anyway."""
    folder = sessions.session_dir(config.scratch_dir)
    needed = stored_nbytes(StoreSpec(folder, tuple(shape), np.dtype(dtype), tuple(chunks)))
    space.check_space(folder, needed, op)
    return space.space_errors(folder, needed, op)


def blockwise(op: str, kernel, shape: tuple, axes: tuple, dtypes: tuple, on_disk: tuple,
              out_axes: tuple, out_shape: tuple, out_dtype, *, reducer: str | None = None,
              to_memory: bool = False, grad: bool = False):
    """Work for ``kernel`` over tiles of ``shape``, written to a new store or
    reduced (``reducer``) over the axes ``out_axes`` leaves out.

    Operands come as stores (those flagged ``on_disk``) and in-memory values,
    in their own order; ``axes`` and ``dtypes`` describe each (see
    :mod:`jask.engine.blockwise`). With ``to_memory`` the (small) result is
    returned as a numpy array instead of a store.
    """
    def work(stores, values, config: Config):
        stores, values = iter(stores), iter(values)
        operands = tuple(bw.Operand(next(stores) if disk else np.asarray(next(values)), ax, dt)
                         for disk, ax, dt in zip(on_disk, axes, dtypes))
        held = sum(x.source.nbytes for x in operands if isinstance(x.source, np.ndarray))
        compute = np.result_type(*[d for d in dtypes if d is not None] or [out_dtype])
        if reducer is not None and to_memory:
            held += memory.nbytes(out_shape, out_dtype)
        tile, cost = blockwise_tile(op, shape, compute, operands, out_axes, reducer, held,
                                     config)
        token = uuid.uuid4().hex
        if reducer is None:
            return _produce(config, op, out_shape, out_dtype, (tile, cost),
                            lambda out: bw.map_graph(op, kernel, out, out_axes, shape, tile,
                                                     operands, token), grad=grad)
        if to_memory:
            dsk, keys = bw.reduce_graph(op, kernel, reducer, shape, tile, operands, out_axes,
                                        token, out=None, out_shape=out_shape,
                                        out_dtype=out_dtype, workers=config.workers)
            return execute.run(dsk, keys, config.workers, cost)[0]
        chunks = tuple(1 if a is None else tile[a] for a in out_axes)
        return _produce(config, op, out_shape, out_dtype, (chunks, cost),
                        lambda out: bw.reduce_graph(op, kernel, reducer, shape, tile, operands,
                                                    out_axes, token, out=out,
                                                    out_shape=out_shape, out_dtype=out_dtype,
                                                    workers=config.workers), grad=grad)
    return work


def blockwise_tile(op, shape, dtype, operands, out_axes, reducer, held, config):
    """Plan a blockwise op's tiles. A reduction's partial results wait for
    their combine task: if they do not fit beside the tiles, plan again
    with room for them (the smaller tile then has smaller partials)."""
    disk = [(x.source, x.axes) for x in operands if x.on_disk]

    def plan_with(fixed):
        return plan.plan_blockwise(op, shape, dtype, disk, budget=config.max_memory,
                                   workers=config.workers, fixed_bytes=fixed)

    tile, cost = plan_with(held)
    if reducer is not None:
        waiting = builders.FAN_IN * bw.partial_bytes(tile, out_axes, dtype, reducer)
        if cost.total + waiting > config.max_memory:  # total counts the fixed bytes
            tile, cost = plan_with(held + waiting)
    return tile, cost


def cumsum(op: str, axis: int, reverse: bool, dtype, *, grad: bool = False):
    """Work for the cumulative sum of a store along ``axis`` in ``dtype``
    (``reverse``: summed from the end, the VJP of a cumulative sum), in two
    passes over the same tiles (:mod:`jask.engine.scan`): the tiles' totals,
    then each tile's own cumulative sum plus the carry of the tiles before it.
    The totals and carries of every tile are held between the passes, and
    planned for as bytes held once."""
    def work(stores, values, config: Config):
        (source,) = stores
        shape = tuple(source.shape)
        disk = [(source, tuple(range(len(shape))))]
        tile, cost = _scan_tile(op, shape, axis, dtype, disk, config)
        token = uuid.uuid4().hex
        tiles: list = []
        totals: list = []
        if 0 not in shape:
            dsk, keys, tiles = scan.totals_graph(op, source, tile, axis, dtype, token)
            totals = execute.run(dsk, keys, config.workers, cost)
        carry = scan.carries(shape, tile, axis, tiles, totals, reverse) if tiles else []
        del totals
        return _produce(config, op, shape, dtype, (tile, cost),
                        lambda out: scan.scan_graph(op, source, out, tiles, axis, reverse, carry,
                                                    token), grad=grad)
    return work


def _scan_tile(op, shape, axis, dtype, disk, config):
    """A scan's tile and cost, counting the totals of every tile (one row per
    tile, held between the passes) as bytes held once. The fastest map plan
    is kept if the totals fit beside it, with fewer tasks at once if need
    be; else smaller tiles are planned with room for the totals (which then
    grow: planned again until they fit, or refused)."""
    def plan_with(fixed):
        tile, cost = plan.plan_blockwise(op, shape, dtype, disk, budget=config.max_memory,
                                         workers=config.workers, fixed_bytes=fixed)
        return tile, cost, SCAN_CARRY_COPIES * scan.carry_bytes(shape, tile, axis, dtype)

    held = 0
    for _ in range(8):
        tile, cost, need = plan_with(held)
        room = config.max_memory - (cost.fixed - held) - need
        at_once = min(cost.tasks_at_once, room // max(cost.task_bytes, 1))
        if at_once >= 1:
            return tile, dataclasses.replace(cost, tasks_at_once=int(at_once),
                                             fixed=cost.fixed - held + need)
        held = max(need, held * 2)
    raise memory.BudgetError(
        f"jask.{op}: the totals of the tiles along axis {axis} of shape {shape} "
        f"({need} bytes for tiles of shape {tile}) do not fit beside the tiles in the memory "
        f"budget of {config.max_memory} bytes")


#: Arrays of every tile's totals a scan holds between its passes: the
#: totals as they come, and the table they are moved into (whose prefix
#: sums are taken in place, and whose rows are the carries).
SCAN_CARRY_COPIES = 2


def transpose(axes: tuple, *, grad: bool = False):
    """Work for a permuted copy of the input."""
    def work(stores, scalars, config: Config):
        (source,) = stores
        plan = builders.transpose_chunks(source, axes, config.max_memory, config.workers)
        shape = tuple(source.shape[a] for a in axes)
        return _produce(config, "transpose", shape, source.dtype, plan,
                        lambda out: builders.transpose_graph(out, source, axes), grad=grad)
    return work


def _as_matrix(x, vector: str | None) -> StoreSpec:
    """A product operand's 2-D (or batched) form, for the planner: a vector
    as a row or column, an in-memory array with chunks set below."""
    if isinstance(x, StoreSpec):
        if vector is None:
            return x
        shape = (1, x.shape[0]) if vector == "row" else (x.shape[0], 1)
        chunks = (1, x.chunks[0]) if vector == "row" else (x.chunks[0], 1)
        return StoreSpec(x.path, shape, x.dtype, chunks)
    shape = (1,) + x.shape if vector == "row" else (x.shape + (1,) if vector == "col" else x.shape)
    return StoreSpec("<in-memory>", shape, x.dtype, shape)


def _memory_chunks(mem: StoreSpec, other: StoreSpec, transposed: bool, left: bool,
                   other_transposed: bool) -> StoreSpec:
    """Chunks for an in-memory operand: whole along its free axis and, along
    the contraction, the disk operand's chunks (a tile of it is a view)."""
    k_axis = (-2 if transposed else -1) if left else (-1 if transposed else -2)
    other_k = (-1 if other_transposed else -2) if left else (-2 if other_transposed else -1)
    chunks = list(mem.shape)
    chunks[k_axis] = min(mem.shape[k_axis], other.chunks[other_k])
    return StoreSpec(mem.path, mem.shape, mem.dtype, tuple(chunks))


def dot(ta: bool, tb: bool, on_disk: tuple, vectors: tuple, dtype, *, to_memory: bool = False,
        grad: bool = False):
    """Work for ``op(a) @ op(b)``, where op transposes the last two axes of
    an operand whose flag is set (the backward products). Either operand may
    be in memory or a 1-D vector (``vectors``: "row", "col" or None)."""
    def work(stores, values, config: Config):
        stores, values = iter(stores), iter(values)
        a, b = (next(stores) if disk else np.asarray(next(values)) for disk in on_disk)
        pa, pb = _as_matrix(a, vectors[0]), _as_matrix(b, vectors[1])
        if not on_disk[0]:
            pa = _memory_chunks(pa, pb, ta, True, tb)
        if not on_disk[1]:
            pb = _memory_chunks(pb, pa, tb, False, ta)
        held = sum(x.nbytes for x, disk in zip((a, b), on_disk) if not disk)
        chunks, tk, splits, cost = builders.dot_plan(pa, pb, ta, tb, dtype,
                                                     config.max_memory - held, config.workers)
        m = pa.shape[-1] if ta else pa.shape[-2]
        n = pb.shape[-2] if tb else pb.shape[-1]
        k = pa.shape[-2] if ta else pa.shape[-1]
        view_shape = pa.shape[:-2] + (m, n)
        squeeze = tuple(i for i, v in ((len(view_shape) - 2, vectors[0] == "row"),
                                       (len(view_shape) - 1, vectors[1] == "col")) if v)
        shape = tuple(d for i, d in enumerate(view_shape) if i not in squeeze)
        ma = tasks.Matrix(a, ta, vectors[0])
        mb = tasks.Matrix(b, tb, vectors[1])
        token = uuid.uuid4().hex
        if to_memory:
            dsk, keys = builders.dot_graph(None, ma, mb, view_shape, chunks, k, tk, splits, token,
                                           squeeze=squeeze, shape=shape, dtype=dtype)
            return execute.run(dsk, keys, config.workers, cost)[0]
        out_chunks = tuple(c for i, c in enumerate(chunks) if i not in squeeze)
        return _produce(config, "dot", shape, dtype, (out_chunks, cost),
                        lambda out: builders.dot_graph(out, ma, mb, view_shape, chunks, k, tk,
                                                       splits, token, squeeze=squeeze),
                        grad=grad)
    return work


def take_slice(sizes: tuple, *, grad: bool = False):
    """Work for ``a[index]``: per axis (size, step) or None for an integer
    index; the starts are the in-memory operands."""
    def work(stores, values, config: Config):
        (source,) = stores
        starts = tuple(int(v) for v in values)
        shape = tuple(size for size, _ in (x for x in sizes if x is not None))
        def cost_of(tile):
            window = _slice_window(source, sizes, starts, tile)
            return memory.task_cost("slice", tile, [(chunkio.read_model(source), window)],
                                    memory.nbytes(tile, source.dtype), 2, config.workers)
        candidates = memory.shrinking(memory.default_chunks(shape, source.dtype,
                                                              config.max_memory, config.workers))
        tile, cost = memory.first_fit(candidates, cost_of, config.max_memory)
        return _produce(config, "slice", shape, source.dtype, (tile, cost),
                        lambda out: builders.slice_graph(out, source, sizes, starts),
                        grad=grad)
    return work


def _slice_window(source, sizes, starts, tile) -> tuple:
    """The part of ``source`` one output tile of a slice spans."""
    window, i = [], 0
    for n, x in zip(source.shape, sizes):
        if x is None:
            window.append(1)
            continue
        window.append(min(n, (tile[i] - 1) * x[1] + 1))
        i += 1
    return tuple(window)


def scatter_slice(sizes: tuple, shape: tuple):
    """Work for the gradient of a slice: zeros with ``g`` where it was taken."""
    def work(stores, values, config: Config):
        (g,) = stores
        starts = tuple(int(v) for v in values)
        chunks = memory.default_chunks(shape, g.dtype, config.max_memory, config.workers)
        cost = memory.task_cost("slice_vjp", chunks, [(chunkio.read_model(g), chunks)],
                                memory.nbytes(chunks, g.dtype), 2, config.workers)
        memory.check_fits(cost, config.max_memory)
        return _produce(config, "slice_vjp", shape, g.dtype, (chunks, cost),
                        lambda out: builders.scatter_graph(out, g, sizes, starts), grad=True)
    return work


def reshape(shape: tuple, *, grad: bool = False):
    """Work for a C-order reshape: bands of whole output rows, each read
    from the source rows that hold its elements."""
    def work(stores, values, config: Config):
        (source,) = stores
        out_row = math.prod(shape[1:])
        src_row = math.prod(source.shape[1:])

        def cost_of(tile):
            rows = tile[0]
            covered = min(source.shape[0], -(-(rows * out_row) // src_row) + 1)
            src_tile = (covered,) + tuple(source.shape[1:])
            return memory.task_cost("reshape", tile, [(chunkio.read_model(source), src_tile)],
                                    memory.nbytes(tile, source.dtype), 2, config.workers)

        start = memory.default_chunks(shape, source.dtype, config.max_memory, config.workers)
        candidates = [(r,) + tuple(shape[1:]) for r in _halvings(start[0])]
        tile, cost = memory.first_fit(candidates, cost_of, config.max_memory)
        return _produce(config, "reshape", shape, source.dtype, (tile, cost),
                        lambda out: builders.reshape_graph(out, source), grad=grad)
    return work


def _halvings(n: int):
    while n > 1:
        yield n
        n //= 2
    yield 1


def concatenate(axis: int, stack: bool, shape: tuple, *, grad: bool = False):
    """Work for joining stores along ``axis`` (a new axis when ``stack``)
    into an array of ``shape``."""
    def work(stores, values, config: Config):
        first = stores[0]
        chunks = memory.default_chunks(shape, first.dtype, config.max_memory, config.workers)
        if stack:
            chunks = chunks[:axis] + (1,) + chunks[axis + 1:]
        part = tuple(c for i, c in enumerate(chunks) if not (stack and i == axis))
        reads = [(chunkio.read_model(x), part) for x in stores]
        cost = memory.task_cost("concatenate", chunks, reads,
                                memory.nbytes(chunks, first.dtype), 2, config.workers)
        memory.check_fits(cost, config.max_memory)
        return _produce(config, "concatenate", shape, first.dtype, (chunks, cost),
                        lambda out: builders.concatenate_graph(out, tuple(stores), axis, stack),
                        grad=grad)
    return work


def read_all(stores, scalars, config: Config) -> np.ndarray:
    """Work for loading a whole store into memory."""
    (store,) = stores
    with counters.op("materialize"):
        return chunkio.read(store, _whole(store.shape))


def write_value(*, grad: bool = False, op: str = "from_value"):
    """Work for writing an in-memory array (the scalar operand) to a new store."""
    def work(stores, scalars, config: Config):
        (value,) = scalars
        chunks = memory.default_chunks(value.shape, value.dtype, config.max_memory,
                                         config.workers)
        with room(config, op, value.shape, value.dtype, chunks), registry.new_store(
                config.scratch_dir, op, value.shape, value.dtype, chunks, grad=grad) as out, \
                counters.op(op):
            chunkio.write(out, _whole(value.shape), value)
        return out
    return work


def _whole(shape) -> tuple:
    return tuple(slice(0, n) for n in shape)


def update(stores, scalars, config: Config) -> StoreSpec:
    """Work for ``target.update_(source)``: copy, then swap the copy in.

    The copy goes to a staging folder beside the target with the target's own
    layout; only once it is complete (and synced) does it replace the target,
    in one atomic exchange (:mod:`jask.store.durability`), so a failed, interrupted
    or killed copy leaves the target as it was, and a reader never finds it
    torn or missing.
    """
    target, source = stores
    if target.path == source.path:
        return target
    tile, cost = builders.copy_chunks(target, source, config.max_memory, config.workers)
    folder = os.path.dirname(target.path)
    needed = stored_nbytes(target)  # exact when uncompressed, else an upper bound
    if not layout.compressed(target):
        space.check_space(folder, needed, "update_")
    stamps = space.stamp([source])
    make_like = layout.maker_like(target)

    def make_staging(path):
        with space.space_errors(folder, needed, "update_"):
            make_like(path)

    def fill(path):
        tmp = StoreSpec(path, target.shape, target.dtype, target.chunks)
        try:
            with space.space_errors(folder, needed, "update_"):
                dsk, keys = builders.copy_graph(tmp, source, tile=tile)
                execute.run(dsk, keys, config.workers, cost)
            space.check_unchanged(stamps, "update_")
        finally:
            chunkio.forget(path)

    replace_store(target, make_staging, fill)
    return target


def replace_store(target: StoreSpec, make_staging, fill) -> None:
    """Replace ``target``'s data atomically (:func:`jask.store.durability.replace`),
    after computing the deferred results that read its old values."""
    registry.before_mutation(target.path)
    durability.replace(target.path, make_staging, fill, durable=not target.managed)
    chunkio.forget(target.path)


def fused(op: str, kernel: Callable, shape: tuple, on_disk: tuple, dtype,
               out_dtypes: tuple, into: int | None, align: int | None = None,
               unread: tuple = (), temporaries: int | None = None):
    """Work for ``Fused`` (``jask.api.fused``): plan tiles, create the outputs, run one graph.

    Tiles are whole chunks of operand ``align`` (of ``into`` by default);
    operands in ``unread`` only lend their layout and are never read.
    ``temporaries``: tiles the kernel allocates besides its inputs (default:
    one per output and one more), what the plan counts for its outputs."""
    def run(stores, values, config: Config):
        stores, values = iter(stores), iter(values)
        sources = [next(stores) if disk else np.asarray(next(values)) for disk in on_disk]
        full = tuple(range(len(shape)))
        operands = tuple(bw.Operand(src, full if disk else (), dtype)
                         for src, disk in zip(sources, on_disk))
        held = sum(int(src.nbytes) for src in sources if isinstance(src, np.ndarray))
        target = _store(sources, into)
        like = _store(sources, into if align is None else align)
        unit = None
        if like is not None:
            unit = chunkio.read_model(like).write_unit or tuple(like.chunks)
        tile, cost = plan.plan_blockwise(
            op, shape, dtype, [(x.source, x.axes) for x in operands if x.on_disk],
            budget=config.max_memory, workers=config.workers, fixed_bytes=held,
            out_copies=len(out_dtypes) + 1 if temporaries is None else temporaries,
            out_unit=unit)
        first = 0 if target is None else 1
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
                    chunkio.forget(staging)

            if target is None:
                fill(None)
            else:  # the first output replaces target's data, atomically (as update_)
                replace_store(target, layout.maker_like(target), fill)
        except BaseException:
            for out in outs:
                registry.discard(out)
            raise
        return ([target] if target is not None else []) + outs
    return run


def _store(sources: list, i: int | None) -> StoreSpec | None:
    if i is None:
        return None
    source = sources[i]
    if not isinstance(source, StoreSpec):
        raise TypeError(f"jask.fused: operand {i} must be a DiskArray")
    return source
