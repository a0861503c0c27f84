"""Creation, the engine half: a new store written from an in-memory array
(``from_numpy``, :class:`~jask.core.primitives.creation.FromValue`), and its
transpose, a whole store read into memory
(:class:`~jask.core.primitives.creation.Materialize`); for each its planner
and its work (:class:`~jask.engine.work.Work`). Both run as one read or one
write of the whole array in the calling thread: no graph. Constants
(``full``, ``zeros``, ``arange``) are maps of no operand
(:mod:`jask.engine.ops.elementwise`). Nothing here knows of JAX.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from jask.base import counters, memory
from jask.base.config import Config
from jask.engine.plan.tiles import Plan
from jask.engine.work import Work, room
from jask.store import registry
from jask.store.spec import StoreSpec
from jask.store.tiles import read, read_model, write

__all__ = ["read_all", "write_value", "plan_read_all", "plan_from_value"]


def plan_read_all(store: StoreSpec, config: Config) -> Plan:
    """Loading a whole store into memory: one read of the whole array in
    the calling thread (never refused: the caller asked for the array)."""
    shape = tuple(max(1, n) for n in store.shape)
    cost = memory.task_cost("materialize", shape, [(read_model(store), shape)], 0, 0, 1)
    return Plan("materialize", shape, None, 1, dataclasses.replace(cost, tasks=1))


def plan_from_value(op: str, shape: tuple, dtype, config: Config) -> Plan:
    """Writing an in-memory array to a new store of default chunks: one
    write of the whole value in the calling thread."""
    chunks = memory.default_chunks(shape, dtype, config.max_memory, config.workers)
    whole = tuple(max(1, n) for n in shape)
    cost = memory.task_cost(op, whole, [], memory.nbytes(shape, dtype), 1, 1)
    return Plan(op, whole, tuple(chunks), 1, dataclasses.replace(cost, tasks=1))


def _whole(shape) -> tuple:
    return tuple(slice(0, n) for n in shape)


def _read_all(stores, scalars, config: Config) -> np.ndarray:
    (store,) = stores
    with counters.op("materialize"):
        return read(store, _whole(store.shape))


#: Work for loading a whole store into memory: one read in the calling
#: thread, never refused (its plan only describes it).
read_all = Work("materialize", _read_all,
                lambda stores, values, config: plan_read_all(stores[0], config))


def write_value(*, grad: bool = False, op: str = "from_value") -> Work:
    """Work for writing an in-memory array (the scalar operand) to a new store."""
    def plan_of(stores, values, config: Config) -> Plan:
        (value,) = values
        return plan_from_value(op, tuple(value.shape), value.dtype, config)

    def work(stores, scalars, config: Config):
        (value,) = scalars
        chunks = plan_of(stores, scalars, config).chunks
        with room(config, op, value.shape, value.dtype, chunks), registry.new_store(
                config.scratch_dir, op, value.shape, value.dtype, chunks, grad=grad) as out, \
                counters.op(op):
            write(out, _whole(value.shape), value)
        return out
    return Work(op, work, plan_of)
