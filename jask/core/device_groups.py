"""Band groups computed on an accelerator: an eager ``value_and_grad`` of a loss.

Eagerly, a value op reading pending ops (``mean(logaddexp(0, X @ w) - y *
(X @ w))``, then its gradient ``X.T @ g`` with ``g`` a chain of VJP maps) runs
as one band group (:mod:`jask.engine.lazy`). With a device configured
(:func:`jask.set_device`), :class:`OnDevice` computes such a group there: the
stores it reads stream by row bands (:func:`jask.engine.device.stream`: one
read of each, reused host buffers, bands in flight ahead), and one jitted
program per band shape computes every node of the group on the band and adds
the value roots' partials to those kept on the device (a compensated sum, as
:mod:`jask.core.device`'s folds). Only the finished values come back.

The group's nodes carry numpy kernels (a row of the op table, a VJP or JVP
built from its rules): they are traced into that program by calling them on
:class:`_Lifted` values, which answer numpy's ufunc and function protocols
with jax.numpy's functions of the same name. A group with anything else (a
kernel taking its tile's position or a user's function, a statistic's
moments kept for the next statistic, a store read whole, a dtype the device
does not compute) is left to the host path, decided before anything is read.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np

from jask.base.config import Config
from jask.base.memory import nbytes
from jask.core import device as on_device
from jask.core import ufuncs
from jask.engine import device as streaming
from jask.engine import fusion
from jask.engine.blockwise import is_positional, unchanged
from jask.engine.ops.reductions import REDUCERS
from jask.store.spec import StoreSpec
from jask.store.views import key as view_key

__all__ = ["OnDevice", "runner"]


def runner(config: Config) -> OnDevice | None:
    """The group runner for the configured device, or None for the host path."""
    device = on_device.target(config)
    return None if device is None else OnDevice(device)


class _Unsupported(Exception):
    """Something of a group the device path does not compute."""


# --- numpy kernels traced as jax.numpy ---------------------------------------------

#: numpy ufuncs whose jax.numpy function has another name
_RENAMED = {"expit": jax.scipy.special.expit, "absolute": jnp.abs,
            "conjugate": jnp.conjugate, "true_divide": jnp.true_divide}


def _jnp_function(name: str):
    fn = _RENAMED.get(name) or getattr(jnp, name, None)
    if fn is None:
        raise _Unsupported(f"numpy's {name} has no jax.numpy counterpart")
    return fn


def _lower(x):
    return x.value if isinstance(x, _Lifted) else x


class _Lifted(np.lib.mixins.NDArrayOperatorsMixin):
    """A traced jax value that numpy's functions compute on with jax.numpy:
    a kernel written for numpy tiles (``g * np.exp(a - out)``) becomes part
    of the band's jitted program."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None or kwargs.get("where") is not None:
            raise _Unsupported(f"numpy's {ufunc.__name__}.{method} with out= or where=")
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("casting", None)
        if kwargs:
            raise _Unsupported(f"numpy's {ufunc.__name__} with {sorted(kwargs)}")
        result = _jnp_function(ufunc.__name__)(*(_lower(x) for x in inputs))
        if dtype is not None:
            result = result.astype(dtype)
        return _Lifted(result)

    def __array_function__(self, func, types, args, kwargs):
        fn = _jnp_function(func.__name__)
        lowered = jax.tree_util.tree_map(_lower, (args, kwargs),
                                         is_leaf=lambda x: isinstance(x, _Lifted))
        result = fn(*lowered[0], **lowered[1])
        return jax.tree_util.tree_map(_Lifted, result)

    def __array__(self, *args, **kwargs):
        raise _Unsupported("a kernel converted its tile to a numpy array")

    @property
    def shape(self):
        return self.value.shape

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def ndim(self):
        return self.value.ndim

    @property
    def T(self):
        return _Lifted(self.value.T)

    def astype(self, dtype, copy=True):
        return _Lifted(self.value.astype(dtype))

    def reshape(self, *shape):
        return _Lifted(self.value.reshape(*shape))

    def __getitem__(self, key):
        return _Lifted(self.value[_lower(key)])


def _known_kernel(kernel) -> bool:
    """A kernel of the op table (a row, its VJP or JVP, the JVP of its VJP: a
    Hessian's), not a user's function (whose closure may change between
    calls of a cached program)."""
    if kernel is unchanged:
        return True
    if is_positional(kernel):
        return False
    owner = getattr(kernel, "__self__", None)
    row = getattr(owner, "ufunc", None)
    if row is not None:
        while getattr(row, "ufunc", None) is not None:  # a VJP's own JVP: its row's rules
            row = row.ufunc
        return not row.at_call and ufuncs.TABLE.get(row.name) is row
    return any(kernel is r.numpy and not r.at_call for r in ufuncs.TABLE.values())


def _inner_reducer(name: str | None) -> str | None:
    """The reducer whose partials the device keeps for ``name``: a sum, a mean
    (a sum divided once), a max or a min; a statistic's moments reduced as the
    statistic itself (its moments are not kept)."""
    if name is not None and name.startswith("moments:"):
        name = name[len("moments:"):]
    if name is None or name in ("sum", "max", "min") or name.startswith("mean(count="):
        return name
    raise _Unsupported(f"the reducer {name}")


#: Rows summed together before their sums are added (see ``core.device.SUM_BLOCK``).
SUM_BLOCK = on_device.SUM_BLOCK


def _reduce(reducer: str, x, axes: tuple, rows_reduced: bool):
    """``x`` reduced over ``axes``, kept as length 1; a sum over the rows in
    blocks of :data:`SUM_BLOCK` (short sums added: an error growing with the
    blocks, not the rows)."""
    if reducer == "max":
        return jnp.max(x, axis=axes, keepdims=True)
    if reducer == "min":
        return jnp.min(x, axis=axes, keepdims=True)
    if not rows_reduced or x.shape[0] <= SUM_BLOCK:
        return jnp.sum(x, axis=axes, keepdims=True)
    return on_device.blocked_sum(x, axes, keepdims=True)


def _combine(reducer: str, acc, comp, part):
    if reducer == "max":
        return jnp.maximum(acc, part), comp
    if reducer == "min":
        return jnp.minimum(acc, part), comp
    return on_device._two_sum(acc, comp, part)


# --- a group as one program per band --------------------------------------------------

class _Spec(NamedTuple):
    """What a band's program needs of a node (not its inputs: a cached
    program keeps no group's arrays alive)."""

    kind: str
    rows: bool
    case: str | None
    dtype: np.dtype
    params: dict


class _Layout:
    """Where each node's inputs come from in a band's program: ``("node", i)``,
    ``("band", k)`` (the k-th store streamed), ``("const", k, banded)`` (an
    array in memory, sliced to the band's rows when ``banded``); and the
    group's signature, the key of its compiled program."""

    def __init__(self, order: list, tops: list):
        position = {id(node): i for i, node in enumerate(order)}
        self.stores: list = []
        self.consts: list = []
        store_at: dict = {}
        self.sources: list = []
        self.nodes: list = []
        signature: list = []
        for node in order:
            if node.kind == "map" and not _known_kernel(node.params["kernel"]):
                raise _Unsupported(f"jask.{node.op}'s kernel")
            if fusion.whole_inputs(node):
                raise _Unsupported("a store read whole")
            banded_axes = (node.params["axes"] if node.kind == "map"
                           else [(0,), ()] if node._dot_case() == "rows" else [(0,), (0,)])
            refs: list[tuple] = []
            for x, ax in zip(node.inputs, banded_axes):
                if isinstance(x, fusion.Node):
                    refs.append(("node", position[id(x)]))
                elif isinstance(x, StoreSpec):
                    key = view_key(x)
                    if key not in store_at:
                        store_at[key] = len(self.stores)
                        self.stores.append(x)
                    refs.append(("band", store_at[key]))
                else:
                    banded = bool(ax) and ax[0] == 0 and np.ndim(x) > 0
                    refs.append(("const", len(self.consts), banded))
                    self.consts.append(np.asarray(x))
            self.sources.append(tuple(refs))
            self.nodes.append(_Spec(node.kind, node.rows,
                                    node._dot_case() if node.kind == "dot" else None,
                                    np.dtype(node.dtype), {k: v for k, v in node.params.items()
                                                           if k != "then"}))
            signature.append((node.kind, tuple(node.shape), str(node.dtype), tuple(refs),
                              _frozen(node.params)))
        self.tops = [position[id(t)] for t in tops]
        for i in self.tops:
            if order[i].rows:
                raise _Unsupported("a value keeping the rows")
        self.reducers: list[str] = []
        for i in self.tops:
            reducer = (_inner_reducer(order[i].params["reducer"]) if order[i].kind == "map"
                       else "sum")
            if reducer is None:
                raise _Unsupported("a value root reducing nothing")
            self.reducers.append(reducer)
        self.signature = (tuple(signature), tuple(self.tops), tuple(self.reducers),
                          tuple((c.shape, str(c.dtype)) for c in self.consts))


def _frozen(params: dict) -> tuple:
    """Parameters as a hashable key (arrays by shape and dtype: they are the
    program's arguments, not constants)."""
    out = []
    for key, value in sorted(params.items()):
        if key == "then":
            value = None if value is None else (value[0].shape, str(value[0].dtype), value[1])
        elif isinstance(value, np.ndarray):
            value = (value.shape, str(value.dtype))
        elif key == "kernel" and hasattr(value, "__self__") and hasattr(value, "__func__"):
            # a VJP's or JVP's method: equal when their objects are (a bound
            # method compares its object by identity, made anew at each call)
            value = (value.__func__, value.__self__)
        out.append((key, value))
    return tuple(out)


def _band_program(layout: _Layout):
    """The jitted ``(accs, comps, start, bands, consts) -> (accs, comps)`` of a
    group: every node on one band, the value roots' partials folded in."""
    reducers = layout.reducers

    def value_of(ref, values, bands, consts, start, rows):
        if ref[0] == "node":
            return values[ref[1]]
        if ref[0] == "band":
            return bands[ref[1]]
        c = consts[ref[1]]
        if ref[2]:
            return jax.lax.dynamic_slice_in_dim(c, start, rows, axis=0)
        return c

    def map_node(node, refs, values, bands, consts, start, rows):
        p = node.params
        full = (rows,) + tuple(p["full_shape"][1:])
        tiles = []
        for ref, ax, dt in zip(refs, p["axes"], p["dtypes"]):
            block = value_of(ref, values, bands, consts, start, rows)
            block = jnp.asarray(block)
            if dt is not None and block.dtype != dt:
                block = block.astype(dt)
            tiles.append(_Lifted(block.reshape(fusion.placed_dims(block.shape, ax, len(full)))))
        result = jnp.broadcast_to(_lower(p["kernel"](*tiles)), full)
        kept = {a for a in p["out_axes"] if a is not None}
        reduced = tuple(d for d in range(len(full)) if d not in kept)
        reducer = _inner_reducer(p["reducer"])
        if reducer is not None and reduced:
            result = _reduce(reducer, result, reduced, 0 in reduced)
        if node.rows:
            if reducer is not None and reducer.startswith("mean(count="):
                result = result / REDUCERS[reducer].mean_count
            own = tuple(1 if a is None else result.shape[a] for a in p["out_axes"])
            return result.astype(node.dtype).reshape(own)
        return result

    def dot_node(node, refs, values, bands, consts, start, rows):
        a, b = (value_of(r, values, bands, consts, start, rows) for r in refs)
        p = node.params
        if node.case == "rows":
            return jnp.matmul(a, b.T if p["tb"] else b).astype(node.dtype)
        part = jnp.matmul(a.reshape(rows, -1).T, b.reshape(rows, -1))
        return part.reshape(a.shape[1:] + b.shape[1:])

    def program(accs, comps, start, bands, consts):
        rows = bands[0].shape[0]
        values: dict = {}
        for i, (node, refs) in enumerate(zip(layout.nodes, layout.sources)):
            compute = map_node if node.kind == "map" else dot_node
            values[i] = compute(node, refs, values, bands, consts, start, rows)
        out_accs, out_comps = [], []
        for acc, comp, i, reducer in zip(accs, comps, layout.tops, reducers):
            acc, comp = _combine(reducer, acc, comp, values[i].astype(acc.dtype))
            out_accs.append(acc)
            out_comps.append(comp)
        return tuple(out_accs), tuple(out_comps)

    return jax.jit(program)


#: Compiled band programs by group signature (an eager training loop makes the
#: same group every step); the oldest dropped beyond :data:`PROGRAMS`.
PROGRAMS = 64
_programs: OrderedDict = OrderedDict()


def _program_for(layout: _Layout):
    key = layout.signature
    if key in _programs:
        _programs.move_to_end(key)
        return _programs[key]
    program = _band_program(layout)
    _programs[key] = program
    while len(_programs) > PROGRAMS:
        _programs.popitem(last=False)
    return program


class _GroupFold:
    """The device side of a group's stream (:class:`jask.engine.device.Target`)."""

    def __init__(self, device, program, partials: list, consts: list):
        self.device = device
        self.program = program
        self.meter = on_device.Meter(device)  # before the partials and constants
        self.accs = tuple(jax.device_put(np.full(shape, start, dtype), device)
                          for shape, dtype, start in partials)
        self.comps = tuple(jax.device_put(np.zeros(shape, dtype), device)
                           for shape, dtype, _ in partials)
        self.consts = tuple(jax.device_put(c, device) for c in consts)
        self.start = 0

    def put(self, tiles: list):
        band = [jax.device_put(t, self.device) for t in tiles]
        start, self.start = self.start, self.start + len(tiles[0])
        self.meter.measure()
        return start, band

    def fold(self, band):
        start, tiles = band
        self.accs, self.comps = self.program(self.accs, self.comps, np.int32(start),
                                             tuple(tiles), self.consts)
        self.meter.measure()
        return self.accs

    def wait(self, token) -> None:
        jax.block_until_ready(token)


def _start_of(reducer: str, dtype) -> float:
    if reducer == "max":
        return -np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min
    if reducer == "min":
        return np.inf if np.dtype(dtype).kind == "f" else np.iinfo(dtype).max
    return 0


class OnDevice:
    """A :class:`jask.engine.lazy.GroupRunner` computing groups of value roots
    on ``device``."""

    def __init__(self, device):
        self.device = device

    def run(self, name: str, order: list, tops: list, config: Config,
            wide: bool) -> list | None:
        try:
            layout = _Layout(order, tops)
        except _Unsupported:
            return None
        if not layout.stores or any(not on_device._supported(s.dtype, self.device)
                                    for s in layout.stores):
            return None
        if any(c.dtype.kind not in "biuf" or c.dtype.itemsize > 4 and not jax.config.read(
                "jax_enable_x64") for c in layout.consts):
            return None
        n = fusion.band_length(order[-1])
        if n == 0 or any(s.shape[0] != n for s in layout.stores):
            return None
        partials = []
        for i, reducer in zip(layout.tops, layout.reducers):
            node = order[i]
            dtype = np.dtype(node.dtype)
            if dtype.kind != "f" or not on_device._supported(dtype, self.device):
                return None
            partials.append((_partial_shape(node, order, layout), dtype,
                             _start_of(reducer, dtype)))
        program = _program_for(layout)
        first = min(n, 8)
        try:  # traced once, on a short band, before anything is read
            jax.eval_shape(program, *_abstract(partials, layout, first))
        except Exception:  # a kernel jax.numpy cannot trace: the host computes the group
            _programs.pop(layout.signature, None)
            return None
        room = on_device.share(self.device, config) - sum(c.nbytes for c in layout.consts)
        partial_bytes = sum(3 * nbytes(shape, dtype) for shape, dtype, _ in partials)
        work_row = sum(nbytes(node.shape[1:], node.dtype) for node in order if node.rows)
        planned = streaming.plan(layout.stores, partial_bytes, room, config,
                                 work_row_bytes=work_row)
        fold = _GroupFold(self.device, program, partials, layout.consts)
        streaming.stream(layout.stores, planned, fold, name)
        on_device.finished(planned, room + sum(c.nbytes for c in layout.consts), fold.meter)
        totals = [np.asarray(acc) - np.asarray(comp) if reducer not in ("max", "min")
                  else np.asarray(acc)
                  for acc, comp, reducer in zip(fold.accs, fold.comps, layout.reducers)]
        return [_finished(order[i], reducer, total, wide)
                for i, reducer, total in zip(layout.tops, layout.reducers, totals)]


def _partial_shape(node, order, layout) -> tuple:
    """The shape of a value root's partials on the device: full rank, 1 along
    the reduced axes (a map), or the product's (a dot: ``p x p2`` for a
    weighted Gram product)."""
    if node.kind == "map":
        full = node.params["full_shape"]
        kept = {a for a in node.params["out_axes"] if a is not None}
        return tuple(d if i in kept else 1 for i, d in enumerate(full))
    a, b = node.inputs
    return tuple(a.shape[1:]) + tuple(b.shape[1:])


def _abstract(partials: list, layout: _Layout, rows: int) -> tuple:
    accs = tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype, _ in partials)
    bands = tuple(jax.ShapeDtypeStruct((rows,) + tuple(s.shape[1:]), s.dtype)
                  for s in layout.stores)
    consts = tuple(jax.ShapeDtypeStruct(c.shape, c.dtype) for c in layout.consts)
    return accs, accs, jax.ShapeDtypeStruct((), np.int32), bands, consts


def _finished(node, reducer: str, total: np.ndarray, wide: bool) -> np.ndarray:
    """A value root's result from its total over the bands (a mean divided
    once; a weighted Gram matrix times its tangents: :func:`fusion.finish`)."""
    if node.kind == "map":
        node = fusion.Node(node.op, node.kind, node.inputs, node.shape, node.dtype,
                           {**node.params, "reducer": reducer})
    return fusion.finish(node, total, wide)

