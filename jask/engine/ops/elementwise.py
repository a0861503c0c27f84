"""Elementwise ops, broadcasts and reductions, the engine half: the planner
and the work (:class:`~jask.engine.work.Work`) of one blockwise op. The
primitive that binds them is :class:`jask.core.primitives.elementwise.Blockwise`.

A blockwise op runs ``kernel`` over tiles of its full shape, each operand
following that shape through its axes map; its tile kernels and graphs
(:func:`~jask.engine.blockwise.map_graph`, :func:`~jask.engine.blockwise.reduce_graph`)
live in :mod:`jask.engine.blockwise`, which the band groups (:mod:`jask.engine.fusion`)
and the device's groups read too. Nothing here knows of JAX.
"""
from __future__ import annotations

import uuid

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.engine import execute
from jask.engine.blockwise import Operand, map_graph, partial_bytes, reduce_graph
from jask.engine.builders import FAN_IN
from jask.engine.plan.ops import held_bytes
from jask.engine.plan.tiles import Plan, plan_blockwise
from jask.engine.work import Work, in_order, produce
from jask.store.spec import StoreSpec

__all__ = ["plan_elementwise", "blockwise_tile", "blockwise"]


# --- planner ---------------------------------------------------------------------------

def plan_elementwise(op: str, shape: tuple, operands, dtypes: tuple, out_axes: tuple,
                     out_shape: tuple, out_dtype, *, reducer: str | None, to_memory: bool,
                     config: Config) -> Plan:
    """The plan of a blockwise op (:func:`blockwise`): ``operands`` are
    (store or in-memory value, axes map) in the op's order. The tile is of
    the full ``shape``; a new output store is chunked by the tile along the
    axes it keeps."""
    held = held_bytes(src for src, _ in operands if not isinstance(src, StoreSpec))
    compute = np.result_type(*[d for d in dtypes if d is not None] or [out_dtype])
    if reducer is not None and to_memory:
        held += memory.nbytes(out_shape, out_dtype)
    disk = [(src, axes) for src, axes in operands if isinstance(src, StoreSpec)]
    tile, cost = blockwise_tile(op, shape, compute, disk, out_axes, reducer, held, config)
    chunks = None
    if not to_memory:
        # the output's own axes (a map may add length-1 axes: a VJP of squeeze)
        chunks = tuple(1 if a is None else tile[a] for a in out_axes)
    return Plan(op, tuple(tile), chunks, cost.tasks, cost)


def blockwise_tile(op, shape, dtype, disk, out_axes, reducer, held, config):
    """Plan a blockwise op's tiles. A reduction's partial results wait for
    their combine task: if they do not fit beside the tiles, plan again
    with room for them (the smaller tile then has smaller partials)."""
    def plan_with(fixed):
        return plan_blockwise(op, shape, dtype, disk, budget=config.max_memory,
                              workers=config.workers, fixed_bytes=fixed)

    def waiting(tile) -> int:
        return FAN_IN * partial_bytes(tile, out_axes, dtype, reducer)

    tile, cost = plan_with(held)
    if reducer is None or cost.total + waiting(tile) <= config.max_memory:
        return tile, cost  # (total counts the fixed bytes)
    try:
        return plan_with(held + waiting(tile))
    except memory.BudgetError as refusal:
        # room for the first tile's partials leaves no tile that fits, but a
        # smaller tile has smaller partials: the least room whose tile's
        # partials fit in it (fewer bytes of room, larger tiles)
        fits, low, high = None, 0, waiting(tile)
        for _ in range(40):
            if high - low <= 1:
                break
            room = (low + high) // 2
            try:
                planned = plan_with(held + room)
            except memory.BudgetError:
                high = room
                continue
            if waiting(planned[0]) <= room:
                fits, high = planned, room
            else:
                low = room
        if fits is None:
            raise refusal
        return fits


# --- work ------------------------------------------------------------------------------

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
    def plan_of(stores, values, config: Config) -> Plan:
        return plan_elementwise(op, shape, list(zip(in_order(on_disk, stores, values), axes)),
                                dtypes, out_axes, out_shape, out_dtype, reducer=reducer,
                                to_memory=to_memory, config=config)

    def work(stores, values, config: Config):
        values = [np.asarray(v) for v in values]
        planned = plan_of(stores, values, config)
        tile, cost = planned.tile, planned.cost
        operands = tuple(Operand(src, ax, dt) for src, ax, dt
                         in zip(in_order(on_disk, stores, values), axes, dtypes))
        token = uuid.uuid4().hex
        if reducer is None:
            return produce(config, op, out_shape, out_dtype, planned,
                           lambda out: map_graph(op, kernel, out, out_axes, shape, tile,
                                                 operands, token), grad=grad)
        if to_memory:
            dsk, keys = reduce_graph(op, kernel, reducer, shape, tile, operands, out_axes,
                                     token, out=None, out_shape=out_shape,
                                     out_dtype=out_dtype, workers=config.workers)
            return execute.run(dsk, keys, config.workers, cost)[0]
        return produce(config, op, out_shape, out_dtype, planned,
                       lambda out: reduce_graph(op, kernel, reducer, shape, tile, operands,
                                                out_axes, token, out=out,
                                                out_shape=out_shape, out_dtype=out_dtype,
                                                workers=config.workers), grad=grad)
    return Work(op, work, plan_of)
