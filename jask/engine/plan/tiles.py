"""The plan type, and tile planning for blockwise ops: which output tile each task computes.

Every op's planner (:mod:`jask.engine.plan.ops`, :mod:`jask.engine.plan.bands`)
returns a :class:`Plan`.

A blockwise task computes one tile of an output of ``shape`` from one tile
of each operand store. An operand follows the output's axes through its
``axes`` map: ``axes[i]`` is the output axis that operand axis ``i`` runs
along, or ``None`` for a broadcast axis of length 1.

The planner weighs a few hundred candidate tiles built from the operands'
own chunks (their multiples and halves, per axis), the default chunking and
the whole array, each with 1 to ``workers`` tasks at once, and keeps the
plan expected to run fastest that fits the budget (:mod:`jask.base.memory`):

* no tile below :func:`jask.base.memory.min_tile_bytes` (unless the whole array
  is smaller) and no more tasks than :func:`jask.base.memory.task_bound`, so a
  plan never degenerates into millions of tiny tasks;
* reads that decode a chunk more than once (a tile cutting a compressed
  chunk) count against a plan, and so do the padding of a new output's
  edge chunks (stored whole) and fewer tasks at once; a
  tile far below the default chunk size counts a little against it;
* when nothing fits, :class:`jask.base.memory.BudgetError` names the input whose
  chunks are too large, their shape, bytes and codec, the smallest budget
  that would run the op and a chunking that would run under this one.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from jask.base import memory
from jask.base.sizes import exact_bytes
from jask.store.spec import StoreSpec
from jask.store.tiles import read_model

__all__ = ["Operand", "Plan", "as_decoded", "operand_tile", "plan_blockwise", "plan_slice",
           "MAX_TASKS"]

#: Most tasks one op may run. Its graph is built before any task runs and
#: costs memory and time per task (a few KB and tens of microseconds in
#: Dask), so an absurd shape (10**12 rows) is refused before, naming its
#: shape, instead of filling memory while building it.
MAX_TASKS = 100_000


@dataclass(frozen=True)
class Plan:
    """What an op will run, planned before anything is read or written.

    ``tile`` is what one task computes (a blockwise op's tile of its full
    shape, a product's output tile, a band group's ``(rows,)``); ``chunks``
    the chunks of the store the op writes (``None``: the result is in
    memory, or the op writes several stores chunked as ``tile``); ``into``
    the input store (index among the stores planned with) that the op
    writes into instead of a new one (``update_``). ``tasks`` counts the
    tasks that compute tiles (not a reduction's combine tasks) and ``cost``
    is what one task holds and how many run at once (:mod:`jask.base.memory`).
    A product also streams its contraction in ``k_tile`` runs, split
    ``splits`` ways. A band group whose band is computed in strips of rows
    has ``strip`` (0: the whole band at once).
    """

    op: str
    tile: tuple
    chunks: tuple | None
    tasks: int
    cost: memory.TileCost
    into: int | None = None
    k_tile: int = 0
    splits: int = 1
    decoded: tuple = ()
    passes: tuple = ()  # a product: how many times it reads each operand (dot_passes)
    strip: int = 0

    def __post_init__(self):
        if self.tasks > MAX_TASKS:  # every planner's plan: refused before a graph exists
            raise memory.BudgetError(
                f"jask.{self.op}: its plan has {self.tasks} tasks (tiles of shape {self.tile}), "
                f"more than the {MAX_TASKS} one op may run (jask.engine.plan.tiles.MAX_TASKS): "
                "building its graph alone would fill memory. Reduce or slice the array "
                "first, or raise the memory budget")

    @property
    def held(self) -> int:
        """Bytes the op holds at once: its concurrent tasks and fixed bytes."""
        return self.cost.total

    @property
    def rows(self) -> int:
        """A band group's band height."""
        return self.tile[0]


#: (store, axes): see the module docstring.
Operand = tuple[StoreSpec, tuple]

#: Most candidate tiles weighed (the per-axis lists are thinned beyond it),
#: so that planning stays far below a second for any input.
MAX_CANDIDATES = 6000


def operand_tile(axes: tuple, tile: tuple) -> tuple:
    """The tile of an operand read for one output tile.

    Example:
      >>> operand_tile((None, 1), (8, 4))
      (1, 4)
    """
    return tuple(1 if a is None else tile[a] for a in axes)


def _powers(base: int, limit: int) -> set[int]:
    """base times and divided by powers of two, within 1..limit."""
    out, v = set(), base
    while v < limit:
        out.add(v)
        v *= 2
    out.add(limit)
    v = base
    while v > 1:
        v = -(-v // 2)
        out.add(v)
    return {x for x in out if 1 <= x <= limit}


def _axis_values(n: int, units: list[int], default: int, step: int) -> list[int]:
    """Candidate tile extents along one axis of length n."""
    units = [max(1, u) for u in units]  # (a chunk of 0 is refused when a store is opened)
    bases = {min(u, n) for u in units} | {n, min(default, n)}
    if len(set(units)) > 1:
        lcm = math.lcm(*units)
        if lcm <= n:
            bases.add(lcm)
    values = set()
    for b in bases:
        values |= _powers(b, n)
    if step > 1:  # whole write units only (shards of a store written in place)
        values = {min(n, -(-v // step) * step) for v in values}
    return sorted(values)


def _thin(values: list[int], keep: set[int]) -> list[int]:
    """Every other value, always keeping ``keep`` and both ends."""
    return [v for i, v in enumerate(values)
            if i % 2 == 0 or v in keep or i == len(values) - 1]


def _candidates(shape, operands, models, out_unit, default) -> list[list[int]]:
    per_axis = []
    for a, n in enumerate(shape):
        units = [m.unit[i] for (store, axes), m in zip(operands, models)
                 for i, ax in enumerate(axes) if ax == a]
        step = out_unit[a] if out_unit else 1
        per_axis.append(_axis_values(n, units, default[a], min(step, n)))
    keep = [set(min(u, n) for u in ([default[a]] + ([out_unit[a]] if out_unit else [])))
            for a, n in enumerate(shape)]
    while math.prod(len(v) for v in per_axis) > MAX_CANDIDATES:
        a = max(range(len(shape)), key=lambda k: len(per_axis[k]))
        thinner = _thin(per_axis[a], keep[a])
        if len(thinner) == len(per_axis[a]):
            break
        per_axis[a] = thinner
    return per_axis


def plan_blockwise(op: str, shape: tuple, dtype, operands, *, budget: int, workers: int,
                   out_copies: int = memory.ELEMENTWISE_OUT_COPIES,
                   fixed_bytes: int = 0, out_unit: tuple | None = None,
                   ) -> tuple[tuple, memory.TileCost]:
    """The output tile of a blockwise op and what one of its tasks holds.

    ``fixed_bytes`` are held once whatever the tiles (in-memory operands).
    ``out_unit``, when given, is the write unit of an existing output store
    (its shard or chunk): tiles are then whole multiples of it, so that no
    two tasks ever write into one shard. The returned cost's
    ``tasks_at_once`` may be below ``workers``: run at most that many.

    Example:
      >>> from jask.store.spec import StoreSpec
      >>> x = StoreSpec("x", (1000, 1000), np.dtype("float32"), (100, 1000))
      >>> tile, cost = plan_blockwise("add", (1000, 1000), "float32", [(x, (0, 1))],
      ...                             budget=10**7, workers=2)
      >>> tile, cost.tasks_at_once, cost.tasks
      ((250, 1000), 2, 4)
    """
    shape = tuple(int(n) for n in shape)
    models = [read_model(store) for store, _ in operands]
    # Weighing the candidates took a third of an eager op on a small array;
    # ops in a loop ask the same question each time. (Refusals are not kept:
    # their message names the store.)
    key = (op, shape, np.dtype(dtype).str, tuple((_layout(m), tuple(axes)) for m, (_, axes)
                                                  in zip(models, operands)),
           budget, workers, out_copies, fixed_bytes, out_unit)
    found = _plans.get(key)
    if found is None:
        found = _plan(op, shape, dtype, operands, models, budget, workers, out_copies,
                      fixed_bytes, out_unit)
        if len(_plans) >= MAX_CACHED_PLANS:
            _plans.clear()
        _plans[key] = found
    return found


#: Plans kept (see :func:`plan_blockwise`).
MAX_CACHED_PLANS = 1024
_plans: dict = {}


def _layout(model: memory.ReadModel) -> tuple:
    """What a plan depends on in a read model: all but the store's path."""
    return (model.shape, model.unit, model.itemsize, model.raw, model.copies, model.group,
            model.write_unit, model.write_copies, model.codec, model.direct)


def _plan(op, shape, dtype, operands, models, budget, workers, out_copies, fixed_bytes,
          out_unit):
    itemsize = np.dtype(dtype).itemsize
    if not shape or 0 in shape:  # nothing to tile
        tile = tuple(max(1, n) for n in shape)
        return tile, memory.TileCost(op, tile, 0, 1, 0, 1, 1.0, fixed_bytes)
    default = memory.default_chunks(shape, dtype, budget, workers)
    data = math.prod(shape) * itemsize
    smallest = min(memory.min_tile_bytes(budget), data)
    bound = memory.task_bound(data, budget)
    target = max(smallest, memory.chunk_bytes(budget, workers))
    fixed = fixed_bytes + memory.op_overhead(budget)
    room = budget - fixed
    best = cheapest = None
    fewest = None  # the fewest tasks of a plan that fits the budget but has too many
    for tile in itertools.product(*_candidates(shape, operands, models, out_unit, default)):
        size = math.prod(tile) * itemsize
        if size < smallest:
            continue
        counts = [-(-n // t) for n, t in zip(shape, tile)]
        tasks = math.prod(counts)
        if tasks > bound:
            continue
        kept = held = decoded = 0
        for (store, axes), model in zip(operands, models):
            part = operand_tile(axes, tile)
            part_bytes = math.prod(part) * model.itemsize
            extra, factor = memory.read_cost(model, part)
            kept += part_bytes
            held = max(held, extra)
            decoded += part_bytes * factor
        task = kept + held + out_copies * size
        factor = decoded / kept if kept else 1.0
        if cheapest is None or task < cheapest[1]:
            cheapest = (tile, task, held)
        at_once = min(workers, room // task)
        if at_once < 1:
            continue
        if tasks > MAX_TASKS:
            fewest = tasks if fewest is None else min(fewest, tasks)
            continue
        waves = -(-tasks // at_once)
        speed = tasks / waves * min(1.0, size / target) ** 0.25 / factor
        if out_unit is None:  # a new output is chunked by the tile: its edge chunks
            speed /= math.prod(c * t for c, t in zip(counts, tile)) / data * itemsize
            # are stored (and written) whole, padding included
        key = (round(speed, 6), min(size, target), -size, -task)  # (less held: chunks
        if best is None or key > best[0]:  # decoded straight into the tile)
            best = (key, memory.TileCost(op, tile, task, at_once, held, tasks, factor, fixed))
    if best is None and fewest is not None:
        raise _too_many_tasks(op, shape, dtype, operands, budget, fewest)
    if best is None:
        raise _refusal(op, cheapest, operands, models, budget, fixed, workers, shape)
    return best[1].tile, best[1]


def _too_many_tasks(op, shape, dtype, operands, budget, fewest) -> memory.BudgetError:
    """The refusal of an op on an array too large to plan under this budget."""
    chunks = ", ".join(f"{tuple(store.chunks)} of {store.path!r}" for store, _ in operands)
    return memory.BudgetError(
        f"jask.{op}: an array of shape {shape} and dtype {np.dtype(dtype)}"
        f"{f' (input chunks {chunks})' if chunks else ''} needs at least "
        f"{fewest} tasks under the memory budget of {exact_bytes(budget)}, more than the "
        f"{MAX_TASKS} one op may run (jask.engine.plan.tiles.MAX_TASKS): "
        "building its graph alone would fill memory. Reduce or slice the array first, or "
        "raise the memory budget")


def _refusal(op, cheapest, operands, models, budget, fixed_bytes, workers, shape):
    """The BudgetError for a plan that cannot fit: what needs how much, and
    what would work instead."""
    tile, task, held = cheapest
    need = task + fixed_bytes
    msg = (f"jask.{op}: tiles of shape {tile} need {exact_bytes(task)} per task x 1 task at once "
           f"= {exact_bytes(task)}")
    if fixed_bytes:
        msg += f" (+ {exact_bytes(fixed_bytes)} held once per op)"
    msg += f", over the memory budget of {exact_bytes(budget)}"
    worst = max(zip(operands, models),
                key=lambda om: memory.read_cost(om[1], operand_tile(om[0][1], tile))[0])
    (store, axes), model = worst
    if store.view is not None:  # what to rechunk is the stored array, not the view of it
        store = store.view.base
        model = read_model(store)
    if held * 2 > task:  # reading the input's chunks is what does not fit
        size = memory.chunk_bytes(budget, workers)
        suggestion = memory.chunk_shape(tuple(store.shape), model.itemsize, size)
        msg += (f". Input {store.path!r} has chunks of shape {model.unit} "
                f"({exact_bytes(model.unit_bytes)} decoded, codec {model.codec}); reading one "
                f"holds {exact_bytes(held)}. Rechunk it to chunks of at most {exact_bytes(size)} "
                f"(e.g. {suggestion}) or raise the budget to at least {exact_bytes(need)}")
    else:
        msg += f". The smallest budget that runs it is {exact_bytes(need)}"
    return memory.BudgetError(msg)


def as_decoded(store: StoreSpec) -> StoreSpec:
    """The uncompressed scratch copy an op reads instead of ``store`` when
    it decodes ``store`` once first (:attr:`Plan.decoded`), as the planner
    sees it: jask's own raw chunk files, chunked as ``store`` is decoded
    (its inner chunks).

    Example:
      >>> x = StoreSpec("", (10, 10), np.dtype("float32"), (5, 5))
      >>> as_decoded(x).chunks
      (5, 5)
    """
    unit = read_model(store).unit
    return StoreSpec("", tuple(store.shape), store.dtype, tuple(unit), managed=True)


# --- slices: output tiles whose source windows decode few chunks -------------------------

def _window(t: int, step: int) -> int:
    """Source elements an output tile of ``t`` spans along an axis of ``step``."""
    return (t - 1) * step + 1


def _slice_axis_values(size: int, step: int, chunk: int, default: int) -> list[int]:
    """Candidate output extents along one sliced axis: those whose window is
    a whole number (a power of two) of source chunks, the whole slice, and
    the default chunk halved."""
    values = {size, min(size, default)}
    k = 1
    while True:
        t = max(1, (k * chunk - 1) // step + 1)
        if t >= size:
            break
        values.add(t)
        k *= 2
    v = min(size, default)
    while v > 1:
        v = -(-v // 2)
        values.add(v)
    return sorted(values)


def plan_slice(source: StoreSpec, sizes: tuple, *, budget: int, workers: int,
               out_copies: int = memory.ELEMENTWISE_OUT_COPIES) -> tuple[tuple, memory.TileCost]:
    """Output tiles of ``source[index]`` (``sizes``: per source axis (size,
    step), or None for an integer index) and what one task holds.

    The slice's starts are operands (one compiled program serves every
    minibatch), so a window may start anywhere in a chunk: reading it
    decodes every chunk it touches, one more per axis than a window of whole
    chunks. Candidates are windows of whole chunks (1, 2, 4, ... per axis),
    the whole slice and the default chunk halved; the plan kept is the
    fastest that fits, as :func:`plan_blockwise` weighs them (chunks
    decoded per chunk of the slice count against a plan), never tiles
    below :func:`jask.base.memory.min_tile_bytes` unless the slice is smaller.

    Example:
      >>> x = StoreSpec("", (40000, 64), np.dtype("float32"), (512, 64))
      >>> tile, cost = plan_slice(x, ((30000, 1), (64, 1)), budget=32 * 2**20, workers=2)
      >>> tile[0] * 64 * 4 >= 32 * 2**20 // 64, cost.total <= 32 * 2**20
      (True, True)
    """
    # a window starting inside a chunk cuts it: no chunk decoded straight into the tile
    model = dataclasses.replace(read_model(source), direct=False)
    dtype = np.dtype(source.dtype)
    axes = [(i, x) for i, x in enumerate(sizes) if x is not None]
    shape = tuple(x[0] for _, x in axes)
    if not shape or 0 in shape:
        tile = tuple(max(1, n) for n in shape)
        return tile, memory.TileCost("slice", tile, 0, 1, 0, 1, 1.0, 0)
    itemsize = dtype.itemsize
    default = memory.default_chunks(shape, dtype, budget, workers)
    per_axis = [_slice_axis_values(n, x[1], model.unit[i], d)
                for (i, x), n, d in zip(axes, shape, default)]
    data = math.prod(shape) * itemsize
    smallest = min(memory.min_tile_bytes(budget), data)
    bound = memory.task_bound(data, budget)
    target = max(smallest, memory.chunk_bytes(budget, workers))
    fixed = memory.op_overhead(budget)
    room = budget - fixed
    # the fewest chunks any plan decodes along each axis: those the slice spans
    spans = [-(-(_window(n, x[1]) - 1) // model.unit[i]) + 1 for (i, x), n in zip(axes, shape)]
    best = cheapest = None
    for tile in itertools.product(*per_axis):
        size = math.prod(tile) * itemsize
        if size < smallest:
            continue
        counts = [-(-n // t) for n, t in zip(shape, tile)]
        tasks = math.prod(counts)
        if tasks > bound or tasks > MAX_TASKS:
            continue
        window = [1] * len(sizes)
        padded = [1] * len(sizes)
        decoded = 1.0
        for (i, x), t, count, span in zip(axes, tile, counts, spans):
            w = min(source.shape[i], _window(t, x[1]))
            window[i] = w
            # a window starting anywhere touches one chunk more than it fills
            touched = min(-(-(w - 1) // model.unit[i]) + 1, span)
            padded[i] = min(source.shape[i], touched * model.unit[i])
            if not model.raw or i > 0:  # raw reads take only the rows they need
                decoded *= count * touched / span
        kept = math.prod(window) * itemsize
        held = memory.read_cost(model, tuple(padded))[0] if not model.raw else \
            memory.read_cost(model, tuple(window))[0]
        task = kept + held + out_copies * size
        if cheapest is None or task < cheapest[1]:
            cheapest = (tuple(tile), task, held)
        at_once = min(workers, room // task)
        if at_once < 1:
            continue
        waves = -(-tasks // at_once)
        speed = tasks / waves * min(1.0, size / target) ** 0.25 / max(1.0, decoded)
        speed /= math.prod(c * t for c, t in zip(counts, tile)) / data * itemsize  # edge padding
        key = (round(speed, 6), min(size, target), -size)
        if best is None or key > best[0]:
            best = (key, memory.TileCost("slice", tuple(tile), task, at_once, held, tasks,
                                         max(1.0, decoded), fixed))
    if best is None:
        if cheapest is None:
            raise memory.BudgetError(
                f"jask.slice: a slice of shape {shape} of {source.path!r} needs more than "
                f"{MAX_TASKS} tasks under the memory budget of {budget} bytes")
        tile, task, held = cheapest
        memory.check_fits(memory.TileCost("slice", tile, task, 1, held, 0, 1.0, fixed), budget)
        raise AssertionError("unreachable: check_fits raised")
    return best[1].tile, best[1]
