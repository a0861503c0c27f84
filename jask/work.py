"""What each op does to stores: plan tiles, create the output, run a graph.

Each function here takes input :class:`~jask.storage.StoreSpec` s, scalar
operands as numpy values and a :class:`~jask.config.Config`, and returns the
output store (or an in-memory value). The plan is checked against the budget
before the output store exists; an output whose graph fails is removed, so a
half-written store is never returned.
"""
from __future__ import annotations

import os

import numpy as np
import zarr

from jask import chunkio, durability, graph, memory, storage
from jask.config import Config
from jask.graph import builders


def _produce(config: Config, op: str, shape, dtype, plan, build, *, grad: bool):
    chunks, cost = plan
    with _room(config, op, shape, dtype, chunks):
        out = storage.create(config.scratch_dir, op, shape, dtype, chunks, grad=grad)
        try:
            dsk, keys = build(out)
            graph.run(dsk, keys, config.workers, cost)
        except BaseException:
            storage.discard(out)
            raise
    return out


def _room(config: Config, op: str, shape, dtype, chunks):
    """Refuse an output the scratch disk cannot hold, before writing it; the
    context it returns names the folder and sizes if the disk fills anyway."""
    folder = storage.session_dir(config.scratch_dir)
    needed = storage.stored_nbytes(storage.StoreSpec(folder, tuple(shape), np.dtype(dtype),
                                                     tuple(chunks)))
    storage.check_space(folder, needed, op)
    return storage.space_errors(folder, needed, op)


def elementwise(kernel: str, *, grad: bool = False):
    """Work for ``out = kernel(*inputs, *scalars)`` on same-shaped inputs
    (``kernel`` names one of :data:`jask.graph.tasks.KERNELS`, and the op)."""
    def work(stores, scalars, config: Config):
        first = stores[0]
        plan = builders.elementwise_chunks(kernel, first.shape, first.dtype, stores,
                                           config.max_memory, config.workers)
        return _produce(config, kernel, first.shape, first.dtype, plan,
                        lambda out: builders.elementwise_graph(kernel, out, tuple(stores),
                                                               tuple(s.item() for s in scalars)),
                        grad=grad)
    return work


def fill(shape, dtype, *, grad: bool = False):
    """Work for an array of ``shape`` with every element the scalar operand."""
    def work(stores, scalars, config: Config):
        chunks = builders.default_chunks(shape, dtype, config.max_memory, config.workers)
        cost = memory.task_cost("fill", chunks, [], memory.nbytes(chunks, dtype), 2,
                                config.workers)
        value = scalars[0].item()
        return _produce(config, "fill", shape, dtype, (chunks, cost),
                        lambda out: builders.fill_graph(out, value), grad=grad)
    return work


def transpose(axes: tuple, *, grad: bool = False):
    """Work for a permuted copy of the input."""
    def work(stores, scalars, config: Config):
        (source,) = stores
        plan = builders.transpose_chunks(source, axes, config.max_memory, config.workers)
        shape = tuple(source.shape[a] for a in axes)
        return _produce(config, "transpose", shape, source.dtype, plan,
                        lambda out: builders.transpose_graph(out, source, axes), grad=grad)
    return work


def dot(ta: bool, tb: bool, *, grad: bool = False):
    """Work for ``op(a) @ op(b)``, where op transposes the last two axes
    of an operand whose flag is set (the backward products)."""
    def work(stores, scalars, config: Config):
        a, b = stores
        chunks, tk, splits, cost = builders.dot_plan(a, b, ta, tb, a.dtype,
                                                     config.max_memory, config.workers)
        m = a.shape[-1] if ta else a.shape[-2]
        n = b.shape[-2] if tb else b.shape[-1]
        shape = a.shape[:-2] + (m, n)
        return _produce(config, "dot", shape, a.dtype, (chunks, cost),
                        lambda out: builders.dot_graph(out, a, b, ta, tb, tk, splits),
                        grad=grad)
    return work


def total(stores, scalars, config: Config) -> np.ndarray:
    """Work for the sum of every element."""
    cost = builders.reduction_cost("sum", stores, config.workers)
    memory.check_fits(cost, config.max_memory)
    dsk, keys = builders.sum_graph(stores[0])
    return graph.run(dsk, keys, config.workers, cost)[0]


def vdot(stores, scalars, config: Config) -> np.ndarray:
    """Work for ``sum(a * b)``."""
    cost = builders.reduction_cost("vdot", stores, config.workers)
    memory.check_fits(cost, config.max_memory)
    dsk, keys = builders.vdot_graph(*stores)
    return graph.run(dsk, keys, config.workers, cost)[0]


def read_all(stores, scalars, config: Config) -> np.ndarray:
    """Work for loading a whole store into memory."""
    (store,) = stores
    return chunkio.read(store, _whole(store.shape))


def write_value(*, grad: bool = False, op: str = "from_value"):
    """Work for writing an in-memory array (the scalar operand) to a new store."""
    def work(stores, scalars, config: Config):
        (value,) = scalars
        chunks = builders.default_chunks(value.shape, value.dtype, config.max_memory,
                                         config.workers)
        with _room(config, op, value.shape, value.dtype, chunks):
            out = storage.create(config.scratch_dir, op, value.shape, value.dtype, chunks,
                                 grad=grad)
            try:
                chunkio.write(out, _whole(value.shape), value)
            except BaseException:
                storage.discard(out)
                raise
        return out
    return work


def _whole(shape) -> tuple:
    return tuple(slice(0, n) for n in shape)


def update(stores, scalars, config: Config) -> storage.StoreSpec:
    """Work for ``target.update_(source)``: copy, then swap the copy in.

    The copy goes to a staging folder beside the target with the target's own
    layout; only once it is complete (and synced) does it replace the target,
    in one atomic exchange (:mod:`jask.durability`), so a failed, interrupted
    or killed copy leaves the target as it was, and a reader never finds it
    torn or missing.
    """
    target, source = stores
    if target.path == source.path:
        return target
    cost = _copy_cost(target, source, config)
    memory.check_fits(cost, config.max_memory)
    folder = os.path.dirname(target.path)
    original = None if target.managed else zarr.open_array(target.path, mode="r")
    needed = storage.stored_nbytes(target)  # exact when uncompressed, else an upper bound
    if original is None or not (original.compressors or original.filters):
        storage.check_space(folder, needed, "update_")
    stamps = storage.stamp([source])

    def make_staging(path):
        with storage.space_errors(folder, needed, "update_"):
            if original is None:  # jask's own layout: no need to ask Zarr what it is
                storage.create_at(path, target.shape, target.dtype, target.chunks)
            else:
                _create_like(original, path)

    def fill(path):
        tmp = storage.StoreSpec(path, target.shape, target.dtype, target.chunks)
        try:
            with storage.space_errors(folder, needed, "update_"):
                dsk, keys = builders.copy_graph(tmp, source)
                graph.run(dsk, keys, config.workers, cost)
            storage.check_unchanged(stamps, "update_")
        finally:
            storage.forget_array(path)

    durability.replace(target.path, make_staging, fill, durable=not target.managed)
    storage.forget_array(target.path)
    return target


def _create_like(original: zarr.Array, path: str) -> None:
    """An empty array at ``path`` laid out exactly as ``original`` (format,
    chunks, shards, codecs, fill value, attributes, dimension names)."""
    meta = original.metadata
    if meta.zarr_format == 3:
        extra = dict(shards=original.shards, dimension_names=meta.dimension_names,
                     serializer=original.serializer, chunk_key_encoding=meta.chunk_key_encoding)
    else:
        extra = dict(order=original.order, chunk_key_encoding={
            "name": "v2", "separator": meta.dimension_separator})
    zarr.create_array(store=path, shape=original.shape, chunks=original.chunks,
                      dtype=original.dtype, compressors=original.compressors,
                      filters=original.filters, fill_value=original.fill_value,
                      attributes=dict(original.attrs), zarr_format=meta.zarr_format, **extra)


def _copy_cost(target, source, config: Config) -> memory.TileCost:
    return memory.task_cost("update_", target.chunks, [(source, target.chunks)],
                            memory.nbytes(target.chunks, target.dtype), 2, config.workers)
