"""Scans, the engine half: cumulative sums and products along one axis, tile
by tile, in two passes; the planner, the work
(:class:`~jask.engine.work.Work`) and the graphs. The primitive that binds
them is :class:`jask.core.primitives.scans.Cumsum`.

A scan needs the carry of every earlier tile along its axis. Pass one reads
each tile and returns its totals along the axis (one row of the tile's
cross-section, widened: float64 for floats, int64 for integers and bools).
In memory, the totals of each lane of tiles along the axis become the
carries, their exclusive prefix sums (from the end for a ``reverse`` scan,
the VJP of a scan). Pass two reads each tile again, writes its local
cumulative sum plus its carry (in float64 for floats, rounded once) as one
whole output chunk. Both passes run every tile in parallel; what stays in
memory between them is one row per tile (:func:`carry_bytes`). Integers
wrap as in numpy and jax.numpy: the carries are exact in int64 and wrap
once, when cast to the output dtype.
A ``kind="prod"`` scan is the same with products (``cumprod``): totals are
tile products, carries exclusive prefix products, and each tile's own
cumulative product is multiplied by its carry.
Nothing here knows of JAX.
"""
from __future__ import annotations

import dataclasses
import math
import uuid

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.base.sizes import exact_bytes
from jask.engine import execute
from jask.engine.builders import key_name, regions
from jask.engine.plan.tiles import Plan, plan_blockwise
from jask.engine.work import Work, decoded_first, produce
from jask.store.spec import StoreSpec
from jask.store.tiles import read, write

__all__ = ["carry_bytes", "carries", "totals_graph", "scan_graph", "wide_dtype",
           "accumulation_dtype", "plan_scan", "scan"]


# --- the two passes: graphs ----------------------------------------------------------

def wide_dtype(dtype) -> np.dtype:
    """The dtype tile totals and carries are kept in."""
    kind = np.dtype(dtype).kind
    return np.dtype({"f": np.float64, "c": np.complex128, "u": np.uint64}.get(kind, np.int64))


def carry_bytes(shape: tuple, tile: tuple, axis: int, dtype) -> int:
    """Bytes of the totals (or carries) of every tile: one row per tile.

    Example:
      >>> carry_bytes((1000, 300), (100, 300), 0, np.float32)  # 10 tiles of 300 float64s
      24000
    """
    lanes = math.prod(n for d, n in enumerate(shape) if d != axis)
    return lanes * -(-shape[axis] // max(tile[axis], 1)) * wide_dtype(dtype).itemsize


#: kind -> (reduce, cumulative, combine, identity) of a scan
KINDS: dict[str, tuple] = {"sum": (np.sum, np.cumsum, np.add, 0),
                           "prod": (np.prod, np.cumprod, np.multiply, 1)}


def _total(source: StoreSpec, region: tuple, axis: int, wide, kind: str = "sum") -> np.ndarray:
    return KINDS[kind][0](read(source, region), axis=axis, keepdims=True, dtype=wide)


def totals_graph(op: str, source: StoreSpec, tile: tuple, axis: int, dtype, token: str,
                 kind: str = "sum"):
    """Pass one: each tile's totals along ``axis`` (widened from the output
    ``dtype``); (graph, keys, regions)."""
    name = key_name(op, token, stage="totals")
    tiles = list(regions(source.shape, tile))
    wide = wide_dtype(dtype)
    graph = {(name, i): (_total, source, region, axis, wide, kind)
             for i, region in enumerate(tiles)}
    return graph, list(graph), tiles


def carries(shape: tuple, tile: tuple, axis: int, tiles: list, totals: list,
            reverse: bool, kind: str = "sum") -> list:
    """Each tile's carry: the sum of the totals of the tiles before it along
    ``axis`` (after it, when ``reverse``), in the order of ``tiles``. The
    entries of ``totals`` are dropped as they are used (set to ``None``), so
    that the totals and the table of their prefix sums are never both whole.

    Example:
      >>> tiles = [(slice(0, 2),), (slice(2, 4),), (slice(4, 5),)]
      >>> totals = [np.array([3.0]), np.array([7.0]), np.array([5.0])]
      >>> [float(c[0]) for c in carries((5,), (2,), 0, tiles, list(totals), False)]
      [0.0, 3.0, 10.0]
      >>> [float(c[0]) for c in carries((5,), (2,), 0, tiles, list(totals), True)]
      [12.0, 5.0, 0.0]
    """
    k = -(-shape[axis] // tile[axis])
    _, cumulative, _, identity = KINDS[kind]
    table = np.full(tuple(k if d == axis else n for d, n in enumerate(shape)), identity,
                    totals[0].dtype if totals else np.float64)
    places = []
    for i, region in enumerate(tiles):
        start = region[axis].start // tile[axis]
        place = list(region)
        place[axis] = slice(start, start + 1)
        table[tuple(place)] = totals[i]
        totals[i] = None  # the caller's list: each total is dropped once placed
        place[axis] = slice(start - 1, start) if not reverse else slice(start + 1, start + 2)
        places.append(tuple(place))
    # inclusive prefix sums in place; a tile's carry is its predecessor's (none for the first)
    view = np.flip(table, axis) if reverse else table
    with np.errstate(all="ignore"):  # products overflow to inf (floats) or wrap (ints)
        cumulative(view, axis=axis, out=view)
    zero = np.full((1,) * len(shape), identity, table.dtype)
    return [zero if p[axis].start < 0 or p[axis].start >= k else table[p] for p in places]


def _scan_block(source: StoreSpec, out: StoreSpec, region: tuple, axis: int, reverse: bool,
                carry: np.ndarray, kind: str = "sum") -> None:
    """out[region] = the tile's cumulative sum along ``axis`` plus its carry
    (``kind="prod"``: its cumulative product times its carry)."""
    _, cumulative, combine, _ = KINDS[kind]
    tile = read(source, region)
    acc = accumulation_dtype(out.dtype)
    result = np.empty(tile.shape, acc)
    with np.errstate(all="ignore"):  # integers wrap, as in numpy and jax.numpy
        if reverse:  # accumulate from the end, straight into a flipped view of the result
            cumulative(np.flip(tile, axis), axis=axis, dtype=acc, out=np.flip(result, axis))
        else:
            cumulative(tile, axis=axis, dtype=acc, out=result)
        del tile
        combine(result, carry.astype(acc), out=result)
    write(out, region, result.astype(out.dtype, copy=False))


def accumulation_dtype(dtype) -> np.dtype:
    """What a tile's own cumulative sum or product runs in: float64 for
    floats (complex128 for complex), rounded once when written. A running
    float32 sum along the axis drifts (800,000 times 0.1 ended 40 off), and
    XLA's scan stays within a few ulps; integers keep their dtype (they wrap
    as in jax.numpy either way).

    Example:
      >>> accumulation_dtype(np.float16), accumulation_dtype(np.int32)
      (dtype('float64'), dtype('int32'))
    """
    dtype = np.dtype(dtype)
    return np.dtype({"f": np.float64, "c": np.complex128}.get(dtype.kind, dtype))


def scan_graph(op: str, source: StoreSpec, out: StoreSpec, tiles: list, axis: int,
               reverse: bool, carry: list, token: str, kind: str = "sum"):
    """Pass two: one task per tile (a whole output chunk)."""
    name = key_name(op, token)
    graph = {(name, i): (_scan_block, source, out, region, axis, reverse, c, kind)
             for i, (region, c) in enumerate(zip(tiles, carry))}
    return graph, list(graph)


# --- planner and work ----------------------------------------------------------------

#: Arrays of every tile's totals a scan holds between its passes: the
#: totals as they come, and the table they are moved into (whose prefix
#: sums are taken in place, and whose rows are the carries).
SCAN_CARRY_COPIES = 2


def plan_scan(op: str, source: StoreSpec, axis: int, dtype, config: Config) -> Plan:
    """A scan along ``axis`` (:func:`scan`): tiles as for a map, counting the
    totals of every tile (one row per tile, held between the passes) as
    bytes held once. The fastest map plan is kept if the totals
    fit beside it, with fewer tasks at once if need be; else smaller tiles are
    planned with room for the totals (which then grow: planned again until
    they fit, or refused)."""
    shape = tuple(source.shape)
    disk = [(source, tuple(range(len(shape))))]

    def plan_with(fixed):
        # tiles as wide as the sum accumulates in (float32 for float16)
        tile, cost = plan_blockwise(op, shape, accumulation_dtype(dtype), disk,
                                    budget=config.max_memory, workers=config.workers,
                                    fixed_bytes=fixed)
        return tile, cost, SCAN_CARRY_COPIES * carry_bytes(shape, tile, axis, dtype)

    held = 0
    for _ in range(8):
        tile, cost, need = plan_with(held)
        room = config.max_memory - (cost.fixed - held) - need
        at_once = min(cost.tasks_at_once, room // max(cost.task_bytes, 1))
        if at_once >= 1:
            cost = dataclasses.replace(cost, tasks_at_once=int(at_once),
                                       fixed=cost.fixed - held + need)
            return Plan(op, tuple(tile), tuple(tile), cost.tasks, cost)
        held = max(need, held * 2)
    raise memory.BudgetError(
        f"jask.{op}: the totals of the tiles along axis {axis} of shape {shape} "
        f"({exact_bytes(need)} for tiles of shape {tile}) do not fit beside the tiles in the "
        f"memory budget of {exact_bytes(config.max_memory)}")


def scan(op: str, axis: int, reverse: bool, dtype, *, grad: bool = False, kind: str = "sum"):
    """Work for the cumulative sum of a store along ``axis`` in ``dtype``
    (``reverse``: summed from the end, the VJP of a cumulative sum), in two
    passes over the same tiles (:func:`totals_graph`, then :func:`scan_graph`):
    the tiles' totals, then each tile's own cumulative sum plus the carry of
    the tiles before it.
    The totals and carries of every tile are held between the passes.
    ``kind="prod"``: cumulative products, the same way."""
    def plan_of(stores, values, config: Config) -> Plan:
        return plan_scan(op, stores[0], axis, dtype, config)

    def work(stores, values, config: Config):
        (source,) = stores
        shape = tuple(source.shape)
        planned = plan_of(stores, values, config)
        tile = planned.tile
        token = uuid.uuid4().hex
        tiles: list = []
        totals: list = []
        if 0 not in shape:
            dsk, keys, tiles = totals_graph(op, source, tile, axis, dtype, token, kind)
            totals = execute.run(dsk, keys, config.workers, planned.cost)
        carry = carries(shape, tile, axis, tiles, totals, reverse, kind) if tiles else []
        del totals
        return produce(config, op, shape, dtype, planned,
                       lambda out: scan_graph(op, source, out, tiles, axis, reverse, carry, token,
                                              kind), grad=grad)
    return decoded_first(Work(op, work, plan_of))
