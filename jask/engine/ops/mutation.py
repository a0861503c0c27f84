"""Mutation, the engine half: writes in place, ``target.update_(new)`` and
``x[key] = v`` of a basic key (:class:`~jask.core.primitives.mutation.Update`),
each a planner, a :class:`~jask.engine.work.Work`, and for a key its graph
and block task. Both stage the new data beside the target and swap it in
atomically (:func:`jask.engine.work.replace_store`, which a fused op's
write in place shares), so a failed write leaves the target as it was.
``update_``'s copy is the same copy a view's own copy makes
(``builders.copy_graph``, its tiles from ``plan.ops.copy_chunks``): those stay
shared in :mod:`jask.engine.builders` and :mod:`jask.engine.plan.ops`. Nothing here
knows of JAX.
"""
from __future__ import annotations

import itertools
import os

import numpy as np

from jask.base.config import Config
from jask.engine import execute
from jask.engine.builders import copy_graph, key_name, regions
from jask.engine.plan import ops as planner
from jask.engine.plan.tiles import Plan
from jask.engine.work import Work, replace_store, writable
from jask.store import location_of
from jask.store.layout import compressed, maker_like
from jask.store.space import check_space, check_unchanged, space_errors, stamp
from jask.store.spec import StoreSpec, stored_nbytes
from jask.store.tiles import forget as forget_cached
from jask.store.tiles import read, write

__all__ = ["update", "set_region", "plan_update", "set_region_graph", "set_region_block",
           "selected"]


# --- update_: the whole target replaced by a copy of new --------------------------------

def plan_update(target: StoreSpec, source: StoreSpec, config: Config) -> Plan:
    """``target.update_(source)``: a copy in whole write units of the
    target, into the target's own store (input 0)."""
    tile, cost = planner.copy_chunks(target, source, config.max_memory, config.workers)
    return Plan("update_", tuple(tile), tuple(target.chunks), cost.tasks, cost, into=0)


def _update(stores, scalars, config: Config) -> StoreSpec:
    """Work for ``target.update_(source)``: copy, then swap the copy in.

    The copy goes to a staging folder beside the target with the target's own
    layout; only once it is complete (and synced) does it replace the target,
    in one atomic exchange (:mod:`jask.store.kinds.local.durability`), so a failed, interrupted
    or killed copy leaves the target as it was, and a reader never finds it
    torn or missing.
    """
    target, source = stores
    target = writable(target)  # update_ of a view writes its own copy, never its base
    if target.path == source.path and source.view is None:
        return target
    location_of(target).check_in_place("update_")  # no atomic replace of a user's store at a URL
    planned = plan_update(target, source, config)
    tile, cost = planned.tile, planned.cost
    folder = os.path.dirname(target.path)
    needed = stored_nbytes(target)  # exact when uncompressed, else an upper bound
    if location_of(target).checks_free_space and not compressed(target):
        check_space(folder, needed, "update_")
    stamps = stamp([source])
    make_like = maker_like(target)

    def make_staging(path):
        with space_errors(folder, needed, "update_"):
            make_like(path)

    def fill(path):
        tmp = StoreSpec(path, target.shape, target.dtype, target.chunks)
        try:
            with space_errors(folder, needed, "update_"):
                dsk, keys = copy_graph(tmp, source, tile=tile)
                execute.run(dsk, keys, config.workers, cost)
            check_unchanged(stamps, "update_")
        finally:
            forget_cached(path)

    return replace_store(target, make_staging, fill, config)


update = Work("update_", _update,
              lambda stores, values, config: plan_update(stores[0], stores[1], config))


# --- x[key] = v: only the chunks the key meets rewritten ---------------------------

def _runs(indices: list) -> list[list]:
    """Sorted chunk indices split into runs of consecutive ones."""
    runs: list[list] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def set_region(sel: tuple) -> Work:
    """Work for ``x[key] = v`` of a basic key (``sel``: per axis ``(start,
    stop, step)`` of the positions picked, ``stop`` past the last): the same
    atomic replacement as ``update_``, in one pass, writing only the chunks
    the selection meets. The staging store gets the target's other chunks as
    links to their files (:meth:`jask.store.Location.link_chunks_outside`;
    copied where the kind cannot link), and each chunk the selection meets
    is read, set where selected from ``v`` (a store of the selection's
    shape with length-1 axes broadcast, in the target's dtype) and written
    there."""
    def plan_of(stores, values, config: Config) -> Plan:
        # a copy of the target, each task holding a piece of v beside its tile
        return plan_update(stores[0], stores[0], config)

    def run(stores, values, config: Config) -> StoreSpec:
        target = writable(stores[0])
        value = stores[1]
        where = location_of(target)
        where.check_in_place("update_")
        planned = plan_of([target], (), config)
        tile, cost = planned.tile, planned.cost
        # per axis the chunks the selection meets, and the runs of them: tiles of whole chunks
        # counted from each run's corner write only those
        met = tuple(sorted({p // c for p in range(*s)})
                    for s, c in zip(sel, target.chunks))
        boxes = [tuple(slice(r[0] * c, min((r[-1] + 1) * c, n))
                       for r, c, n in zip(runs, target.chunks, target.shape))
                 for runs in itertools.product(*(_runs(m) for m in met))]
        folder = os.path.dirname(target.path)
        needed = stored_nbytes(target)  # an upper bound: links take no blocks
        stamps = stamp([target, value])
        make_like = maker_like(target)
        linked = []

        def make_staging(path):
            with space_errors(folder, needed, "update_"):
                make_like(path)
                linked.append(where.link_chunks_except(path, met))

        def fill(path):
            out = StoreSpec(path, target.shape, target.dtype, target.chunks)
            try:
                with space_errors(folder, needed, "update_"):
                    dsk, keys = set_region_graph(out, target, value, sel, tile,
                                                          boxes if linked[0] else None)
                    execute.run(dsk, keys, config.workers, cost)
                check_unchanged(stamps, "update_")
            finally:
                forget_cached(path)

        return replace_store(target, make_staging, fill, config)
    return Work("update_", run, plan_of)


def set_region_graph(out: StoreSpec, target: StoreSpec, value: StoreSpec, sel: tuple,
                     tile: tuple, within: list | None = None):
    """out = target with the positions ``sel`` picks set to ``value``, one
    task per tile of each region of ``within`` (regions of whole chunks of
    out, the rest already in out; default: all of out), tiles counted from
    the region's corner."""
    name = key_name("update", out.path)
    graph = {}
    for j, box in enumerate(within or [tuple(slice(0, n) for n in out.shape)]):
        corner = tuple(b.start for b in box)
        for i, region in enumerate(regions(tuple(b.stop - b.start for b in box), tile)):
            placed = tuple(slice(r.start + c, r.stop + c) for r, c in zip(region, corner))
            graph[(name, j, i)] = (set_region_block, out, placed, target, value, sel)
    return graph, list(graph)


def selected(sel: tuple, tile: tuple) -> tuple | None:
    """Where the selection ``sel`` (per axis ``(start, stop, step)`` of the
    positions picked, ``stop`` past the last) meets ``tile``: per axis the
    slice of the tile and the range ``(k0, k1)`` of picked positions there,
    or None where they do not meet.

    Example:
      >>> selected(((1, 10, 3),), (slice(3, 8),))
      ((slice(1, 5, 3),), ((1, 3),))
    """
    local, ranks = [], []
    for (start, stop, step), t in zip(sel, tile):
        k0 = max(0, -(-(t.start - start) // step))
        k1 = min(-(-(stop - start) // step), -(-(t.stop - start) // step))
        if k1 <= k0:
            return None
        first, last = start + k0 * step, start + (k1 - 1) * step
        local.append(slice(first - t.start, last + 1 - t.start, step))
        ranks.append((k0, k1))
    return tuple(local), tuple(ranks)


def set_region_block(out: StoreSpec, region: tuple, target: StoreSpec, value: StoreSpec,
                     sel: tuple) -> None:
    """out[region] = target[region] with the positions ``sel`` picks set to
    ``value`` (a store of the selection's shape, length-1 axes broadcast, in
    the target's dtype): ``x[key] = v`` for one tile."""
    block = np.array(read(target, region), copy=True)
    met = selected(sel, region)
    if met is not None:
        local, ranks = met
        part = tuple(slice(0, 1) if n == 1 else slice(k0, k1)
                     for n, (k0, k1) in zip(value.shape, ranks))
        block[local] = read(value, part)
    write(out, region, block)
