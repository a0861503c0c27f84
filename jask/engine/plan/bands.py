"""The band planner of band groups (:mod:`jask.engine.fusion`): how many rows
one band task computes, under the memory budget.

:func:`group` is the entry point: it finds a group's input stores and the
bytes it holds whatever the band (in-memory operands, stores read whole,
values assembled whole), then :func:`plan_bands` picks the band height.
"""
from __future__ import annotations

import math

import numpy as np

from jask.base import memory
from jask.base.config import Config
from jask.engine.builders import FAN_IN
from jask.engine.fusion import WEIGHTS, Node, band_length, last_uses, partial_shape, whole_inputs
from jask.engine.ops.reductions import MOMENTS, REDUCERS, SLAB
from jask.engine.plan.tiles import Plan
from jask.engine.tasks import STRIP
from jask.store.spec import StoreSpec
from jask.store.tiles import read_model
from jask.store.views import key as view_key

__all__ = ["BAND_SHARE", "fits_one_row", "group", "plan_bands", "waiting_partials"]


def group(name: str, order: list, keep: set, returned: list, config: Config) -> Plan | None:
    """The band plan of a group of nodes (inputs before their readers), or
    ``None`` when its nodes run along different lengths or no band fits.

    ``keep``: ids of the nodes written or returned (alive to the end of a
    band task); ``returned``: the value roots, a value keeping the rows
    being assembled whole in memory beside its parts.
    """
    n = band_length(order[-1])
    leaves: dict = {}
    held = 0
    for node in order:
        whole = whole_inputs(node)
        # read whole by every band task: once per task at once
        held += config.workers * sum(memory.nbytes(x.shape, x.dtype) for x in whole)
        for x in node.inputs:
            if isinstance(x, StoreSpec) and not any(x is y for y in whole):
                leaves.setdefault(view_key(x), x)
            elif isinstance(x, np.ndarray):
                held += x.nbytes
        then = node.params.get("then") if node.kind == "dot" else None
        if then is not None:  # a weighted Gram product's tangents, for its finish
            held += then[0].nbytes
    held += sum(2 * memory.nbytes(top.shape, top.dtype) for top in returned if top.rows)
    if not all(band_length(x) == n for x in order):
        return None
    return plan_bands(name, order, list(leaves.values()), held, n, config.max_memory,
                      config.workers, keep)


#: Share of the budget a band group's tasks plan for. A group's kernels are
#: many numpy calls whose temporaries the model counts only roughly, and a
#: compiled step keeps its XLA program beside them: measured peaks ran up to
#: 1.3x the model with the whole budget planned.
BAND_SHARE = 0.75


def _row_bytes(shape: tuple, dtype) -> int:
    return math.prod(shape[1:]) * np.dtype(dtype).itemsize


def _partial_bytes(node: Node) -> int:
    if node.kind == "map":
        kept = [node.params["full_shape"][a] for a in node.params["out_axes"] if a is not None]
        reducer = node.params["reducer"]
        arrays = 1 if reducer is None else REDUCERS[reducer].arrays  # a variance: mean and M2
        return math.prod(kept) * max(8, np.dtype(node.dtype).itemsize) * arrays
    return math.prod(partial_shape(node)) * max(8, np.dtype(node.dtype).itemsize)


def _squares_deviations(node: Node) -> bool:
    """Whether a node's reducer squares deviations in a float64 buffer (a
    variance's, or the moments of :func:`jask.engine.ops.reductions.with_moments`)."""
    reducer = node.params.get("reducer") if node.kind == "map" else None
    return reducer is not None and REDUCERS[reducer].reduce in MOMENTS


def _slab_bytes(node: Node, rows: int) -> int:
    """That buffer for a band of ``rows``: a slab of rows at a time, at most
    :data:`jask.engine.ops.reductions.SLAB` elements (one row if a row is longer),
    never more than the band."""
    row = math.prod(node.params["full_shape"][1:])
    return 8 * min(rows * row, max(SLAB, row))


def _out_row_bytes(node: Node) -> int:
    if node.op == WEIGHTS and node.kind == "map":
        return 0  # views of its operands' bands (fusion.RowScaled)
    return _row_bytes(node.shape, node.dtype) if node.rows else 0


def _scaled_strip_bytes(node: Node, rows: int) -> int:
    """A weighted Gram product's buffer (:data:`jask.engine.fusion.WEIGHTS`):
    one strip of its scaled rows, never more than the band."""
    return min(rows, STRIP) * _row_bytes(node.shape, node.dtype)


def _temp_row_bytes(node: Node) -> int:
    """Bytes per row a node's kernel holds while it runs besides its output:
    a map's result over the full shape (before any reduction) in the widest
    dtype it computes in; a product, nothing (a contraction's partial is
    counted apart)."""
    if node.kind != "map" or node.op == WEIGHTS:  # scaled by its product, a strip at a time
        return 0
    p = node.params
    dts = [np.dtype(d) for d in p["dtypes"] if d is not None] + [np.dtype(node.dtype)]
    return math.prod(p["full_shape"][1:]) * max(d.itemsize for d in dts)


def _peak_row_bytes(order: list, keep: set) -> int:
    """Most bytes per row a band task holds at once besides its input bands,
    walking the nodes as :func:`jask.engine.fusion.band_task` does (a value is dropped after its
    last reader unless it is kept: written or returned)."""
    last = last_uses(tuple(order))
    live = peak = 0
    for i, node in enumerate(order):
        peak = max(peak, live + _out_row_bytes(node) + _temp_row_bytes(node))
        live += _out_row_bytes(node)
        for j in last[i]:
            if id(order[j]) not in keep:
                live -= _out_row_bytes(order[j])
    return max(peak, live)


def plan_bands(name: str, nodes: list, leaves: list, held: int, n: int, budget: int,
               workers: int, keep: set | None = None) -> Plan | None:
    """The band height for a group, or ``None`` if no band fits the budget.

    A band is a whole number of the largest input's chunk rows (so each of
    its chunks is read once); one band task holds its input bands (and the
    buffers a read needs), the node bands alive at once (``keep``: the ids
    of nodes written or returned, alive to the end) with a temporary, and
    its own partials; the partials waiting in the fan-in tree are held once
    (:func:`waiting_partials`). Node bands and partials grow with the width
    of what a band carries (a Hessian's ``d`` tangents, ``X @ W``'s ``k``
    columns), so the band shrinks as they grow; a group whose partials of
    values computed in the band cannot fit runs op by op (:func:`fits_one_row`).

    Example:
      >>> x = StoreSpec("", (1000, 100), np.dtype("float64"), (100, 100))
      >>> n = Node("dot", "dot", [x, np.ones(100)], (1000,), np.dtype("float64"),
      ...          dict(ta=False, tb=False, vectors=(None, "col")))
      >>> plan_bands("dot", [n], [x], 800, 1000, 10**7, 2).rows
      500
    """
    models = [read_model(s) for s in leaves]
    units = [1]
    if leaves:  # whole chunk rows of the largest input: each of its chunks read once
        biggest = max(range(len(leaves)), key=lambda i: _row_bytes(leaves[i].shape,
                                                                    leaves[i].dtype))
        chunk_rows = max(1, min(models[biggest].unit[0], n))
        # uncompressed C-order chunks are read by row ranges: any band height
        # reads each byte once, so a band may also cut their chunks
        units = [chunk_rows] + ([1] if models[biggest].raw and chunk_rows > 1 else [])
    leaf_row = sum(_row_bytes(s.shape, s.dtype) for s in leaves)
    node_row = _peak_row_bytes(nodes, keep or set())
    kept_row = sum(_out_row_bytes(x) for x in nodes if id(x) in (keep or set()))
    partial = sum(_partial_bytes(x) for x in nodes if not x.rows)
    squaring = [x for x in nodes if _squares_deviations(x)]
    weighted = [x for x in nodes if x.kind == "map" and x.op == WEIGHTS]
    fixed = held + memory.op_overhead(budget)
    # the task bound is the budget's, as for every op; only the bytes get a share
    most_tasks = memory.task_bound(sum(memory.nbytes(s.shape, s.dtype) for s in leaves),
                                   budget)
    share = int(budget * BAND_SHARE)

    def cost(rows: int, at_once: int, strip: int = 0) -> memory.TileCost:
        tiles = [(rows,) + tuple(s.shape[1:]) for s in leaves]
        extra = max((memory.read_cost(m, t)[0] for m, t in zip(models, tiles)), default=0)
        # a band task reads all its input bands before computing any node
        # (fusion.band_task): a read's buffers and the node bands never meet.
        # In strips, the nodes kept whole are assembled beside one strip's nodes,
        # and the strips' partials are added up
        nodes_held = (rows * node_row if not strip else
                      rows * kept_row + strip * node_row + partial)
        # its partial beside one strip's product of a contraction (tasks.strip_product),
        # and a variance's slab of squared deviations
        task = (rows * leaf_row + max(extra, nodes_held) + 2 * partial
                + sum(_slab_bytes(x, rows) for x in squaring)
                + sum(_scaled_strip_bytes(x, strip or rows) for x in weighted))
        bands = -(-n // rows)
        return memory.TileCost(name, (rows,), task, at_once, extra, bands, 1.0,
                               fixed + partial * waiting_partials(bands))

    if not fits_one_row(nodes, budget):
        return None  # run op by op, as unfused (its ops plan their own tiles)

    def largest(fits, hi: int) -> int:
        """The largest k in [1, hi] that fits (given that 1 does)."""
        lo = 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        return lo

    for unit in units:
        most = -(-n // unit)
        for at_once in range(workers, 0, -1):
            # the most rows that fit, but bands enough for every worker (fewer
            # bands wait for fewer combines: cost is not monotone in rows, so
            # the band found is checked)
            lo = largest(lambda m: cost(m * unit, at_once).total <= share,
                         max(1, -(-most // at_once)))
            rows = min(n, lo * unit)
            if cost(rows, at_once).total <= share and -(-n // rows) <= most_tasks:
                return Plan(name, (rows,), None, -(-n // rows), cost(rows, at_once))
    # No whole band fits: one chunk row a band (each chunk read once), its nodes
    # computed in strips (what a band carries per row, a Hessian's d tangents,
    # held for one strip only)
    rows = units[0]
    for at_once in range(workers, 0, -1):
        if cost(rows, at_once, 1).total > share or -(-n // rows) > most_tasks:
            continue
        strip = largest(lambda k: cost(rows, at_once, k).total <= share, rows)
        return Plan(name, (rows,), None, -(-n // rows), cost(rows, at_once, strip),
                    strip=strip)
    return None


def waiting_partials(bands: int) -> int:
    """Partials a group's fan-in tree holds at once besides the running band
    tasks' own: up to ``FAN_IN - 1`` finished ones waiting at each level (the
    combines are listed right after their inputs, :func:`fusion.group_graph`),
    and a combine's running sum with the next.

    Example:
      >>> waiting_partials(1), waiting_partials(8), waiting_partials(97)
      (0, 9, 23)
    """
    levels = 0
    while bands > 1:
        bands, levels = -(-bands // FAN_IN), levels + 1
    return (FAN_IN - 1) * levels + 2 if levels else 0


def fits_one_row(nodes: list, budget: int) -> bool:
    """Whether a band of one row can hold what the group carries: the
    partials of a reduction over rows of values computed in the band (a
    Hessian's ``d x d`` Gram matrix ``X.T @ G`` of its ``d``-wide tangents
    ``G``), two at once at least whatever the band, with the op's overhead.
    A group that cannot runs op by op, as unfused: each op plans its own
    tiles within the budget, at the price of its intermediates written and
    ``X`` read once per op."""
    carried = [x for x in nodes if not x.rows and any(isinstance(i, Node) for i in x.inputs)]
    needs = 2 * sum(_partial_bytes(x) for x in carried) + memory.op_overhead(budget)
    return not carried or needs <= int(budget * BAND_SHARE)
