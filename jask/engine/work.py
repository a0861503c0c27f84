"""What each op does to stores: plan tiles, create the output, run a graph.

Each function here makes a :class:`Work`: called with input
:class:`~jask.store.spec.StoreSpec` s, scalar operands as numpy values and a
:class:`~jask.base.config.Config`, it returns the output store (or an
in-memory value). Its plan comes from the op's planner in
:mod:`jask.engine.plan` (nothing is planned here), checked against the budget
before the output store exists, and :meth:`Work.plan` answers that same plan
without running anything. An output whose graph fails is removed, so a
half-written store is never returned.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.base.memory import BudgetError
from jask.engine import builders, execute
from jask.engine.plan import ops as planner
from jask.engine.plan.tiles import Plan, as_decoded
from jask.store import DiskFullError, location_of, registry, session_dir
from jask.store.space import check_space, snapshot, space_errors
from jask.store.spec import GRAD_SUFFIX, StoreSpec, stored_nbytes
from jask.store.tiles import read_model
from jask.store.views import base_of
from jask.store.views import key as view_key


class Work:
    """An op's disk work: ``work(stores, values, config)`` runs it, and
    ``work.plan(stores, values, config)`` is the :class:`Plan` it runs with
    (in-memory operands as anything with ``shape`` and ``dtype``: numpy
    arrays, or JAX avals when nothing runs)."""

    def __init__(self, op: str, run: Callable, plan: Callable | None = None):
        self.op, self._run, self._plan = op, run, plan

    def __call__(self, stores, values, config: Config):
        return self._run(stores, values, config)

    def plan(self, stores, values, config: Config) -> Plan:
        if self._plan is None:
            raise NotImplementedError(f"jask.{self.op}: this op has no tile plan")
        return self._plan(list(stores), list(values), config)


def in_order(on_disk: tuple, stores, values) -> list:
    """Operands in the op's order, from its stores and its in-memory values."""
    stores, values = iter(stores), iter(values)
    return [next(stores) if disk else next(values) for disk in on_disk]


def produce(config: Config, op: str, shape, dtype, planned: Plan, build, *, grad: bool):
    """A new store of ``shape`` and ``dtype`` in ``planned``'s chunks, filled by
    the graph ``build(out)`` returns (run under the plan's cost); removed if
    the graph fails."""
    chunks, cost = planned.chunks, planned.cost
    with room(config, op, shape, dtype, chunks), registry.new_store(
            config.scratch_dir, op, shape, dtype, chunks, grad=grad) as out:
        dsk, keys = build(out)
        execute.run(dsk, keys, config.workers, cost)
    return out


def empty(op: str, shape: tuple, dtype) -> Work:
    """Work making a store of ``shape`` with no elements: nothing to plan,
    read or run, whatever the op (its chunks are a valid Zarr grid, none 0)."""
    def work(stores, values, config: Config) -> StoreSpec:
        chunks = memory.default_chunks(shape, dtype, config.max_memory, config.workers)
        return registry.create(config.scratch_dir, op, shape, dtype, chunks)
    return Work(op, work)


def room(config: Config, op: str, shape, dtype, chunks, *, extra: int = 0):
    """Refuse an output the scratch disk cannot hold, before writing it; the
    context it returns names the folder and sizes if the disk fills anyway.
    ``extra``: bytes promised to other outputs, to be written first."""
    folder = session_dir(config.scratch_dir)
    needed = stored_nbytes(StoreSpec(folder, tuple(shape), np.dtype(dtype),
                                                     tuple(chunks))) + extra
    check_space(folder, needed, op)
    return space_errors(folder, needed, op)


class _ViewCopy(registry.Deferred):
    """A view's own copy, made when its base is about to change or when
    something needs a store of its own (``filename``, ``update_``)."""

    def __init__(self, view: StoreSpec, config: Config):
        self.view, self.config = view, config

    def reads(self, path: str) -> bool:
        return registry.canonical(self.view.path) == registry.canonical(path)

    def compute(self) -> StoreSpec:
        with snapshot([self.view], "jask (a view's copy)"):  # one version, as opened
            return copy_of(self.view, self.config)


def copy_of(source: StoreSpec, config: Config, op: str = "view_copy") -> StoreSpec:
    """A new store holding ``source``'s values (a view's, read through it);
    a gradient's view copies to a gradient (``.grad``)."""
    identity = tuple(range(len(source.shape)))
    planned = planner.transpose(source, identity, config)
    return produce(config, op, source.shape, source.dtype, planned,
                   lambda out: builders.transpose_graph(out, source, identity, op=op),
                   grad=source.path.endswith(GRAD_SUFFIX))


def as_view(view: StoreSpec | None, config: Config) -> StoreSpec | None:
    """Register a view of a registered store (None: not a view, copy instead)."""
    if view is None or view.view is None or not view.view.base.handle:
        return None
    return registry.register_view(view, _ViewCopy(view, config))


def writable(target: StoreSpec) -> StoreSpec:
    """A store an op may write into: a view is first copied into its own
    (its values are those of the array written, not of its base)."""
    return registry.own_store(target.handle) if target.view is not None else target


@contextlib.contextmanager
def decoded_copies(stores, values, on_disk: tuple, which: tuple, config: Config,
                   op: str = "dot", *, reserve: int = 0):
    """``stores`` with the operands ``which`` (indexes among the op's operands)
    replaced by uncompressed scratch copies, each chunk decoded once, by
    tiles of whole chunks spread over the task threads; removed after the
    block. Yields (stores, False) unchanged when the scratch disk has no room."""
    order = [i for i, disk in enumerate(on_disk) if disk]  # operand index of each store
    original, stores = list(stores), list(stores)
    copies: list = []
    try:
        done: dict = {}  # one copy per store or view (a @ a, concatenate([a, a]))
        for i in which:
            source = stores[order.index(i)]
            if view_key(source) in done:
                stores[order.index(i)] = done[view_key(source)]
                continue
            unit = read_model(source).unit
            try:
                tile, cost = planner.transpose_chunks(
                    source, tuple(range(len(source.shape))), config.max_memory, config.workers,
                    op=op, out_unit=unit)
                errors = room(config, op, source.shape, source.dtype, unit, extra=reserve)
            except (DiskFullError, BudgetError):  # no room for the copy, or for whole
                for copy in copies:                       # chunks of it: decode as it reads,
                    registry.discard(copy, later=True)    # the copies made so far let go
                copies = []
                yield original, False
                return
            with errors, registry.new_store(config.scratch_dir, "decoded", source.shape,
                                            source.dtype, unit) as copy:
                dsk, keys = builders.copy_graph(copy, source, op=op, tile=tile)
                execute.run(dsk, keys, config.workers, cost)
            copies.append(copy)
            stores[order.index(i)] = done[view_key(source)] = copy
        yield stores, True
    finally:
        for copy in copies:
            registry.discard(copy, later=True)


def _fetched(store: StoreSpec, config: Config) -> bool:
    """Whether ``store`` is read by requests (object storage) while scratch is local:
    then a copy in scratch is read faster than the same pieces fetched many times."""
    return (location_of(store).reads_by_request
            and not location_of(config.scratch_dir).reads_by_request)


def decoded_first(work: Work, whole: Callable[[StoreSpec], bool] = lambda store: True) -> Work:
    """``work`` over uncompressed copies of its compressed inputs, each chunk
    decoded once first (:func:`decoded_copies`), for ops whose tiles read an input's
    chunks several times (lanes of a sort, a gather's windows, a reshape's
    rows, the inputs of a join, the two passes of a scan: 2-9 decodes per
    chunk on 512x512 zstd chunks). An input in object storage is copied to a
    local scratch first too (a gather of rows in a random order made one
    request per row and chunk: 11,111 requests for 4 MiB). ``whole(store)``:
    whether the op reads all of that input (a gather of a few rows does not:
    it decodes what it reads).
    """
    def staged(stores, config: Config) -> tuple:
        return tuple(i for i, s in enumerate(stores)
                     if whole(s) and (not read_model(base_of(s)).raw
                                      or _fetched(base_of(s), config)))

    def plan_of(stores, values, config: Config) -> Plan:
        which = staged(stores, config)
        return work.plan([as_decoded(s) if i in which else s for i, s in enumerate(stores)],
                         values, config)

    def run(stores, values, config: Config):
        which = staged(stores, config)
        if not which:
            return work(stores, values, config)
        with decoded_copies(stores, values, (True,) * len(stores), which, config,
                            work.op) as (copies, _):
            return work(copies, values, config)
    return Work(work.op, run, plan_of)


def replace_store(target: StoreSpec, make_staging, fill, config: Config) -> StoreSpec:
    """Replace ``target``'s data atomically, after computing the deferred results
    that read its old values; return the store now behind ``target``'s handle.
    How is its location's (:meth:`jask.store.Location.replace`: one exchange of
    folders, a new version in object storage, one icechunk commit)."""
    registry.before_mutation(target.path)
    where = location_of(target)
    if where.replaces_in_this_process:  # (an icechunk session lives in one process)
        fill = _on_this_process(fill)
    return where.replace(target, make_staging, fill, config.scratch_dir)


def _on_this_process(fill):
    """``fill`` with its tiles written by this process's threads, even with a
    distributed client in effect."""
    import dask

    def fill_here(staging: str) -> None:
        with dask.config.set(scheduler="threads"):
            fill(staging)

    return fill_here
