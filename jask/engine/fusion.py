"""Fused groups: several ops computed together over row bands, one read of each input.

A *group* is a small DAG of :class:`Node` s whose arrays all run along one
leading axis of length ``n`` (the rows of a data matrix ``X``, and of
``X @ w``, ``X @ w - y``, ...). One task per band of rows reads that band of
every input store once, computes every node of the group on it in memory
and then

* writes the band of each node whose store is wanted (a *store root*), and
* hands on a partial result for each node that reduces over the rows (a
  *value root*: ``sum``, ``X.T @ g``), which a fan-in tree adds up.

Intermediates nobody keeps are never written. So ``X.T @ (2 * (X @ w - y))``
reads ``X`` once, where running op by op reads it twice and writes three
arrays in between. Nothing here knows of JAX: :mod:`jask.engine.lazy` builds the
nodes from recorded ops and decides when a group runs.

A node is one of two kinds:

* ``"map"``: a kernel over the tiles of a full shape (see
  :mod:`jask.engine.blockwise`): an elementwise op, a broadcast or a
  reduction, given by its operands' axes maps, the axes the output keeps
  and a reducer;
* ``"dot"``: a matrix product that either keeps the rows (``X @ w`` with
  ``w`` in memory) or contracts them (``X.T @ g``, ``g @ X``).

:func:`fusable` says whether a node can join a band group;
:func:`jask.engine.plan.bands.group` chooses the band height from the memory
budget (``None`` when even one chunk-row band cannot fit: the ops then run
one by one, as unfused).
"""
from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import psutil

from jask.engine.blockwise import is_positional
from jask.engine.builders import FAN_IN, key_name
from jask.engine.ops.reductions import REDUCERS
from jask.engine.tasks import strip_product
from jask.store.spec import StoreSpec
from jask.store.tiles import prefetch, read, write
from jask.store.views import key as view_key

__all__ = ["Node", "finish", "fusable", "group_graph", "last_uses", "partial_shape"]


@dataclass(eq=False)
class Node:
    """One op of a group: what it computes and from what.

    ``inputs`` are other nodes, stores or in-memory numpy arrays (and for
    ``X @ w``, ``w`` may be a store, read whole: see :func:`whole_inputs`). For a
    ``"map"``, ``params`` holds ``kernel``, ``axes``, ``dtypes``,
    ``full_shape``, ``out_axes`` and ``reducer``; for a ``"dot"``, ``ta``,
    ``tb`` and ``vectors`` (as :func:`jask.engine.ops.products.dot` takes them).
    """

    op: str
    kind: str
    inputs: list
    shape: tuple
    dtype: np.dtype
    params: dict = field(default_factory=dict)

    @property
    def rows(self) -> bool:
        """Whether the output runs along the band axis (else it reduces it)."""
        if self.kind == "map":
            return 0 in self.params["out_axes"]
        return self._dot_case() == "rows"

    def _dot_case(self) -> str | None:
        p = self.params
        a, b = self.inputs
        va, vb = p["vectors"]
        if (p["ta"] is False and va is None and len(_shape(a)) == 2
                and isinstance(b, (np.ndarray, StoreSpec))):
            return "rows"      # X @ w: a row band of X gives a row band of the product
        if p["tb"]:
            return None
        if p["ta"] and va is None and len(_shape(a)) == 2 and len(_shape(b)) in (1, 2):
            return "contract"  # X.T @ g: every band adds X_band.T @ g_band
        if va == "row" and not p["ta"] and len(_shape(b)) == 2:
            return "contract"  # g @ X
        return None


def _shape(x) -> tuple:
    return tuple(x.shape)


def fusable(node: Node) -> bool:
    """Whether ``node`` can run in a band group: its rows, and the rows of
    its output and of every input read from disk, are the full shape's
    leading axis.

    Example:
      >>> x = StoreSpec("x", (10, 3), np.dtype("float32"), (5, 3))
      >>> n = Node("dot", "dot", [x, np.ones(3)], (10,), np.dtype("float32"),
      ...          dict(ta=False, tb=False, vectors=(None, "col")))
      >>> fusable(n), n.rows
      (True, True)

    A map putting a length-1 axis before the rows (``x[None]``) runs alone:
      >>> m = Node("reshape", "map", [x], (1, 10, 3), np.dtype("float32"),
      ...          dict(kernel=None, axes=((0, 1),), dtypes=(None,), full_shape=(10, 3),
      ...               out_axes=(None, 0, 1), reducer=None))
      >>> fusable(m)
      False
    """
    if node.kind == "dot":
        case = node._dot_case()
        a, b = node.inputs
        if case == "rows":
            return not isinstance(a, np.ndarray)
        return (case == "contract" and not isinstance(a, np.ndarray)
                and not isinstance(b, np.ndarray) and a.shape[0] == b.shape[0])
    p = node.params
    full = p["full_shape"]
    if not full:
        return False
    if p["reducer"] is not None and REDUCERS[p["reducer"]].pair:
        return False  # argmax's (value, index) partials: run alone
    out_axes = tuple(p["out_axes"])
    if 0 in out_axes and out_axes[0] != 0:
        return False  # the rows land off the output's leading axis (x[None]): not a band of it
    for x, ax in zip(node.inputs, p["axes"]):
        if isinstance(x, np.ndarray):
            continue
        if not ax or ax[0] != 0 or x.shape[0] != full[0]:
            return False  # a store broadcast along the rows: read whole, not banded
    return True


def whole_inputs(node: Node) -> list:
    """The stores a node reads whole rather than by bands (``w`` of ``X @ w``)."""
    if node.kind == "dot" and node._dot_case() == "rows" and isinstance(node.inputs[1],
                                                                         StoreSpec):
        return [node.inputs[1]]
    return []


def band_length(node: Node) -> int:
    """Length of the band axis of ``node``."""
    if node.kind == "map":
        return node.params["full_shape"][0]
    return node.inputs[0].shape[0]


# --- computing one band ------------------------------------------------------------

def placed_dims(shape: tuple, axes, ndim: int) -> list[int]:
    """The shape that places a block of ``shape`` on the result's ``axes``
    (``None``: an axis the block lacks) in an ``ndim``-dimensional
    broadcast: the block's lengths there, 1 elsewhere. Shared by the host
    band and the device's traced one (:mod:`jask.core.device_groups`)."""
    dims = [1] * ndim
    for i, a in enumerate(axes):
        if a is not None:
            dims[a] = shape[i]
    return dims


def _band_of(x, values: dict, rows: slice):
    """An input's band: a node's value, a store's rows, or an array's rows."""
    if isinstance(x, Node):
        return values[id(x)]
    if isinstance(x, StoreSpec):  # read once per band, however many nodes use it
        key = view_key(x)  # a view of a store is not the store
        if key not in values:
            region = (rows,) + tuple(slice(0, d) for d in x.shape[1:])
            values[key] = read(x, region)
        return values[key]
    return x[rows]


#: The op name of the map scaling the rows of a band by a weight each, read
#: only by a weighted Gram product (:mod:`jask.engine.gram`), which scales
#: its operand strip by strip as it multiplies: the band never holds it whole.
WEIGHTS = "weighted_gram"


@dataclass(frozen=True)
class RowScaled:
    """A band of ``weights * rows`` (``weights`` a column) not yet multiplied
    out: the value of a :data:`WEIGHTS` map in a band."""

    weights: np.ndarray
    rows: np.ndarray


def _map_band(node: Node, values: dict, rows: slice) -> np.ndarray | RowScaled:
    p = node.params
    full = p["full_shape"]
    region_shape = (rows.stop - rows.start,) + tuple(full[1:])
    tiles = []
    for x, ax, dt in zip(node.inputs, p["axes"], p["dtypes"]):
        if isinstance(x, np.ndarray) and not (ax and ax[0] == 0):
            block = x  # used whole: broadcast along the rows
        else:
            block = _band_of(x, values, rows)
        if dt is not None and block.dtype != dt:
            block = block.astype(dt)
        tiles.append(block.reshape(placed_dims(block.shape, ax, len(full))))
    if node.op == WEIGHTS:  # multiplied out by the product reading it, a strip at a time
        weights, scaled = tiles
        return RowScaled(np.broadcast_to(weights, (region_shape[0], 1)), scaled)
    kernel = p["kernel"]
    with np.errstate(all="ignore"):  # nan and inf follow IEEE, as in jax.numpy
        if is_positional(kernel):  # the band's place in the full shape
            band = (rows,) + tuple(slice(0, n) for n in full[1:])
            result = np.broadcast_to(kernel(*tiles, region=band, shape=tuple(full)),
                                     region_shape)
        else:
            result = np.broadcast_to(kernel(*tiles), region_shape)
    kept = {a for a in p["out_axes"] if a is not None}
    reduced = tuple(d for d in range(len(full)) if d not in kept)
    if p["reducer"] is not None and reduced:
        result = REDUCERS[p["reducer"]][0](result, reduced)
    if node.rows:  # reduced over whole rows of the band: finished here
        result = _finished(p["reducer"], result)
        own = tuple(1 if a is None else result.shape[a] for a in p["out_axes"])
        return np.ascontiguousarray(result.astype(node.dtype, copy=False)).reshape(own)
    return result  # a partial, full rank (1 along the reduced axes)


def _dot_band(node: Node, values: dict, rows: slice) -> np.ndarray:
    a, b = node.inputs
    p = node.params
    if node._dot_case() == "rows":
        if isinstance(b, StoreSpec):  # a small store, used whole: read once per band
            key = ("whole", view_key(b))
            if key not in values:
                values[key] = read(b, tuple(slice(0, d) for d in b.shape))
            b = values[key]
        w = b.T if p["tb"] else b
        return np.asarray(_band_of(a, values, rows) @ w).astype(node.dtype, copy=False)
    # a.T @ b over the band's rows (a row vector a: a @ b), the partial kept in
    # float64 as a reduction's partials are
    ab, bb = _band_of(a, values, rows), _band_of(b, values, rows)
    n = rows.stop - rows.start
    if isinstance(bb, RowScaled):  # a weighted Gram matrix
        partial = strip_product(ab.reshape(n, -1).T, bb.rows.reshape(n, -1), rows, a.shape[0],
                                row_weights=bb.weights)
        return partial.reshape(ab.shape[1:] + bb.rows.shape[1:])
    partial = strip_product(ab.reshape(n, -1).T, bb.reshape(n, -1), rows, a.shape[0],
                            wide=bool(p.get("wide")))
    return partial.reshape(ab.shape[1:] + bb.shape[1:])


def _compute(node: Node, values: dict, rows: slice, read_only: bool = False):
    try:
        if read_only:  # only read the node's input bands from their stores
            for x in node.inputs:
                if isinstance(x, StoreSpec) and not any(x is y for y in whole_inputs(node)):
                    _band_of(x, values, rows)
            return None
        if node.kind == "map":
            return _map_band(node, values, rows)
        return _dot_band(node, values, rows)
    except Exception as err:  # name the op, not only the group it ran in
        if hasattr(err, "add_note"):  # Python 3.11
            getattr(err, "add_note")(f"jask.{node.op} failed on rows {rows.start}:{rows.stop} "
                                     "(run fused with the ops around it)")
        raise


#: The most bytes of chunks a pass keeps asked for (``POSIX_FADV_WILLNEED``)
#: ahead of the bands it computes. Advice fills the page cache, not jask's
#: budget, but advice past what the cache holds evicts what it just read:
#: so at most a quarter of the memory the system reports available
#: (:func:`advice_room`). The first quick least-squares pass, cold, read
#: its chunks on demand for its first bands when each band asked only for
#: the one its thread ran next (benchmarks/RESULTS.md, 2026-12-06).
ADVICE_BYTES = 64 << 20


def advice_room() -> int:
    """The bytes a pass may keep asked for ahead of its bands now:
    ``min(ADVICE_BYTES, available memory / 4)``."""
    return min(ADVICE_BYTES, psutil.virtual_memory().available // 4)


def advice_distance(order: tuple, rows: int, at_once: int, room: int) -> int:
    """The bands between a band and the one whose chunks it asks for: at
    least the ``at_once`` tasks running together (each asks for its thread's
    next), and as many more as ``room`` bytes of the stores read by bands
    hold (decoded bytes: a compressed chunk's file is smaller, so the advice
    stays within ``room``); 0 (``at_once`` 0) asks for none."""
    per_band = sum(rows * int(np.prod(x.shape[1:], dtype=np.int64)) * x.dtype.itemsize
                   for x in _banded_stores(order))
    if not at_once or not per_band:
        return at_once
    return max(at_once, room // per_band)


def band_task(order: tuple, last_use: tuple, writes: tuple, values_out: tuple,
              rows: slice, ahead: tuple | None = None, strip: int = 0) -> tuple:
    """Compute one band of every node in ``order``; write the bands of the
    store roots; return the partials of the value roots.

    ``ahead``: the rows of bands to come (slices, in the order they run),
    whose chunks the kernel is asked to start reading now
    (:func:`jask.store.tiles.prefetch`), so that the disk works while this
    band computes.

    With ``strip``, the band's nodes are computed ``strip`` rows at a time
    over the input bands read whole: the band stays whole chunk rows (each
    chunk read once) while what its nodes carry per row (a Hessian's ``d``
    tangents) is held for one strip only; the bands of the nodes written or
    returned along the rows are assembled whole, the partials added."""
    if ahead is not None:
        _prefetch_bands(order, ahead)
    inputs: dict = {}
    for node in order:  # every input band first: a read's buffers never meet node bands
        _compute(node, inputs, rows, read_only=True)
    step = strip if 0 < strip < rows.stop - rows.start else rows.stop - rows.start
    kept = {id(node) for node, _ in writes} | {id(order[j]) for j in values_out
                                                if order[j].rows}
    assembled: dict = {}
    partials: dict = {}
    for start in range(rows.start, rows.stop, step):
        part = slice(start, min(rows.stop, start + step))
        cut = slice(start - rows.start, part.stop - rows.start)
        values = dict(inputs) if part == rows else {
            k: v if _whole(k) else v[cut] for k, v in inputs.items()}
        for i, node in enumerate(order):
            values[id(node)] = _compute(node, values, part)
            for j in last_use[i]:  # drop what no later node reads
                if j not in values_out and id(order[j]) not in kept:
                    values.pop(id(order[j]), None)
        for key, value in values.items():  # stores read whole: once per band
            if _whole(key):
                inputs[key] = value
        for node in order:
            if id(node) in kept:
                block = values[id(node)]
                if part == rows:
                    assembled[id(node)] = block
                    continue
                if id(node) not in assembled:
                    assembled[id(node)] = np.empty((rows.stop - rows.start,) + block.shape[1:],
                                                   block.dtype)
                assembled[id(node)][cut] = block
        for j in values_out:
            if not order[j].rows:
                value = values[id(order[j])]
                partials[j] = value if j not in partials else REDUCERS[_reducer(order[j])][1](
                    partials[j], value)
        del values
    for node, store in writes:
        block = assembled[id(node)]
        region = (rows,) + tuple(slice(0, d) for d in store.shape[1:])
        write(store, region, block.reshape(tuple(r.stop - r.start for r in region)))
    return tuple(assembled[id(order[j])] if order[j].rows else partials[j] for j in values_out)


def _banded_stores(order: tuple) -> list:
    """The stores ``order`` reads by bands (each view once; not those read whole)."""
    seen: dict = {}
    for node in order:
        for x in node.inputs:
            if (isinstance(x, StoreSpec) and view_key(x) not in seen
                    and not any(x is y for y in whole_inputs(node))):
                seen[view_key(x)] = x
    return list(seen.values())


def _prefetch_bands(order: tuple, bands: tuple) -> None:
    """Ask for the chunks of the stores ``order`` reads by bands, over each
    of ``bands`` (row slices) in turn."""
    stores = _banded_stores(order)
    for rows in bands:
        for x in stores:
            prefetch(x, (rows,) + tuple(slice(0, d) for d in x.shape[1:]))


def _whole(key) -> bool:
    """Whether a band task's cached value is a store read whole (``w`` of ``X @ w``)."""
    return type(key) is tuple and len(key) == 2 and key[0] == "whole"


def combine_bands(reducers: tuple, *results) -> tuple:
    """Add up (or max/min) the band partials of each value root; a root
    keeping the rows (``"rows"``) has its bands joined in order instead."""
    combined = []
    for i, reducer in enumerate(reducers):
        if reducer == "rows":
            combined.append(np.concatenate([r[i] for r in results], axis=0))
            continue
        combine = REDUCERS[reducer][1]
        acc = results[0][i]
        for r in results[1:]:
            acc = combine(acc, r[i])
        combined.append(acc)
    return tuple(combined)


def run_of_bands(compute_band, reducers: tuple, n: int, rows: int, first: int,
                 stop: int, distance: int = 1) -> tuple:
    """Bands ``first`` to ``stop - 1`` (of ``rows`` rows, of ``n``) run one
    after the other by ``compute_band`` (a bound :func:`band_task`): the
    first asks for the chunks of itself and the ``distance`` bands after it,
    each later one for the band ``distance`` places after it (within the
    run); their partials combined as they come (:func:`combine_bands`), so
    the run holds one band's work, its prefetch and one running partial."""
    def band(i: int) -> tuple:
        asks = range(first if i == first else i + distance, min(stop, i + distance + 1))
        ahead = tuple(slice(j * rows, min(n, (j + 1) * rows)) for j in asks)
        return compute_band(slice(i * rows, min(n, (i + 1) * rows)), ahead or None)

    combined = band(first)
    for i in range(first + 1, stop):
        combined = combine_bands(reducers, combined, band(i))
    return combined


def group_graph(name: str, order: tuple, writes: tuple, value_roots: tuple, n: int,
                rows: int, strip: int = 0, ahead: int = 0,
                tree: bool = True, runs: int = 0, room: int | None = None,
                run_order: Callable[[dict], list] = list) -> tuple[dict, list]:
    """The Dask graph of a group: one task per band, then a fan-in tree
    combining the value roots' partials (the last key's value: their tuple).

    ``value_roots`` are indices into ``order``; ``strip``: rows computed at
    once within a band (0: the whole band; see :func:`band_task`); ``ahead``:
    the tasks running at once (0: no chunks asked for ahead). The chunks of
    the stores read by bands are asked for ``room`` bytes ahead (default
    :func:`advice_room`; :func:`advice_distance` bands, at least ``ahead``,
    so at least each task's successor on its thread) of the bands in the
    order their tasks start (``run_order`` of the graph: as
    :func:`jask.engine.execute.run_order` says; Dask's threaded scheduler
    does not start them in band order): the first task asks for the bands
    up to that distance, in that order, and the ``j``-th for the band
    ``distance`` places after its own, so the disk reads from the pass's
    start while the bands compute (one band ahead per thread, the first
    pass over a store not in the page cache read 20% faster than band by
    band on demand); ``tree=False``: no tree, the keys are
    the bands', whose values the caller combines
    (``combine_bands(reducers(order, value_roots), *values)``); ``runs``
    (with ``tree=False``): at most
    that many tasks, each running a contiguous run of the bands in order
    (:func:`run_of_bands`) and returning their combined partials. On a
    cluster each task costs its scheduler a few milliseconds whatever it
    does: one task per worker thread keeps every thread busy at the least cost.
    """
    token = uuid.uuid4().hex
    band_name = key_name(name, token)
    last_use = last_uses(order)
    dsk: dict = {}
    keys: list = []
    key: tuple
    # The group's constants bound once: Dask walks every tuple of a task's
    # arguments when it converts the graph (a band's node tuples were 28 walks
    # per task, a quarter of a jitted step's time at 134 bands).
    compute_band = functools.partial(band_task, order, last_use, writes, value_roots,
                                     strip=strip)
    room = advice_room() if room is None else room
    if runs and not tree:
        bands_n = -(-n // rows)
        runs = min(runs, bands_n)
        # the runs of one process share its room: ``ahead`` of them run at once
        each = functools.partial(run_of_bands, compute_band, reducers_of(order, value_roots),
                                 n, rows, distance=advice_distance(order, rows, 1,
                                                                   room // max(1, ahead)))
        bounds = [bands_n * i // runs for i in range(runs + 1)]  # runs within one band alike
        for i in range(runs):
            key = (band_name, i)
            dsk[key] = (each, bounds[i], bounds[i + 1])
            keys.append(key)
        return dsk, keys
    for i, start in enumerate(range(0, n, rows)):
        key = (band_name, i)
        dsk[key] = (compute_band, slice(start, min(n, start + rows)), None)
        keys.append(key)
    if value_roots and tree:
        dsk, keys = _tree(name, token, dsk, keys, reducers_of(order, value_roots))
    distance = advice_distance(order, rows, ahead, room)
    if distance:
        started = [key for key in run_order(dsk) if key[0] == band_name]
        for j, key in enumerate(started):
            asks = started[:distance + 1] if j == 0 else started[j + distance:j + distance + 1]
            dsk[key] = dsk[key][:2] + ((tuple(dsk[k][1] for k in asks) or None),)
    return dsk, keys


def _tree(name: str, token: str, dsk: dict, keys: list, reducers: tuple) -> tuple[dict, list]:
    """``dsk`` with a fan-in tree combining the partials of the tasks ``keys``."""
    combine = key_name(name, token, stage="combine")
    level = 0
    while len(keys) > 1:
        nxt = []
        for i in range(0, len(keys), FAN_IN):
            key = (combine, level, i)
            dsk[key] = (combine_bands, reducers, *keys[i:i + FAN_IN])
            nxt.append(key)
        keys, level = nxt, level + 1
    return _combines_early(dsk, keys[0]), keys


def _combines_early(dsk: dict, root: tuple) -> dict:
    """``dsk`` listed with each combine right after its last input (a task
    run in the listed order, as :mod:`jask.engine.execute` runs one worker's
    graph, then holds at most ``FAN_IN`` partials per level of the tree, not
    every band's)."""
    listed: dict = {}

    def visit(key):
        for arg in dsk[key][2:] if dsk[key][0] is combine_bands else ():
            visit(arg)
        listed[key] = dsk[key]

    visit(root)
    return listed


def reducers_of(order: tuple, value_roots: tuple) -> tuple:
    """How the band partials of each value root combine (:func:`combine_bands`)."""
    return tuple(_reducer(order[j]) for j in value_roots)


def _reducer(node: Node) -> str:
    if node.rows:
        return "rows"
    return node.params["reducer"] if node.kind == "map" else "sum"


def last_uses(order: tuple) -> tuple:
    """For each node, the earlier nodes whose last reader it is."""
    last: dict = {}
    for i, node in enumerate(order):
        for x in node.inputs:
            if isinstance(x, Node):
                last[id(x)] = i
    position = {id(node): i for i, node in enumerate(order)}
    out: list = [[] for _ in order]
    for key, i in last.items():
        out[i].append(position[key])
    return tuple(tuple(x) for x in out)


def _finished(reducer: str | None, partial):
    """A reducer's output from its partial (a variance's moments: the variance)."""
    done = None if reducer is None else REDUCERS[reducer].finish
    return partial if done is None else done(partial)


def partial_shape(node: Node) -> tuple:
    """The shape of a node's partials: its own, but for a weighted Gram
    product (``then``: :mod:`jask.engine.gram`), whose partials are the
    ``p x p2`` Gram matrix its result is a product of."""
    then = node.params.get("then") if node.kind == "dot" else None
    if then is None:
        return tuple(node.shape)
    m, tb = then
    return tuple(node.shape[:-1]) + (m.shape[1] if tb else m.shape[0],)


def finish(node: Node, partial: np.ndarray, wide: bool = False) -> np.ndarray:
    """A value root's whole result from its combined partial (a weighted
    Gram matrix times the tangents ``M`` it was taken for: ``then``);
    ``wide``: a float result as float64, not yet rounded to its dtype (for
    arithmetic on it that cancels: see ``jask.core.dispatch.to_values``)."""
    if node.kind == "map" and not node.rows:
        partial = _finished(node.params["reducer"], partial)
    then = node.params.get("then") if node.kind == "dot" else None
    if then is not None:
        m, tb = then
        m = np.asarray(m, partial.dtype)
        partial = np.asarray(partial).reshape(partial_shape(node)) @ (m.T if tb else m)
    dtype = node.dtype
    if wide and np.dtype(dtype).kind == "f":
        dtype = np.promote_types(dtype, np.float64)
    return np.asarray(partial).astype(dtype, copy=False).reshape(node.shape)
