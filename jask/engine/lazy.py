"""Lazy stores: ops recorded, then run together.

Inside a compiled program (an op's callback), and eagerly unless the
configuration says ``lazy=False``, an op that a band group can hold
(:func:`jask.engine.fusion.fusable`: elementwise ops, broadcasts,
reductions, products with an in-memory operand, all along the rows of their
inputs) only records a :class:`Recorded` and returns its handle. The work
happens when something needs the data, in program order:

* an op returning an in-memory value (``sum``, the gradient ``X.T @ g`` of
  an in-memory parameter) runs its whole chain of recorded inputs as one band
  group (:mod:`jask.engine.fusion`): each input store read once, nothing in
  between written;
* any other op reading a recorded store, the program returning it, and an
  ``update_`` or ``to_memmap`` of a store a recorded one reads compute it
  first (:func:`jask.store.registry.spec`, :func:`jask.store.registry.before_mutation`);
* a recorded store nothing needs is dropped with the program's garbage,
  never computed.

Eagerly the DiskArray returned owns the recorded store at once (its Owner's
``spec`` computes it: ``filename``, ``to_numpy``, saves, ...), and the record
holds its inputs' Owners, so they live while it is pending. A chain longer
than :data:`MAX_PENDING` ops, or reading more than :data:`MAX_HELD`
stores, is computed before the next op records, so recursion and the
stores kept alive stay bounded. An error in a deferred op
surfaces where its result is first needed, with a note naming the op.

Groups that do not fit the budget as one band task run op by op, as
unfused (the same work an eager op does).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

import numpy as np

from jask.base import counters, forks, memory
from jask.base.config import Config
from jask.base.sizes import exact_bytes
from jask.engine import execute, fusion, gram, moments, work
from jask.engine.plan import Plan, bands
from jask.engine.work import room
from jask.store import DiskFullError, StoreChangedError, location_of, registry
from jask.store.space import snapshot
from jask.store.spec import DamagedStoreError, StoreSpec
from jask.store.tiles import forget as forget_cached
from jask.store.tiles import write
from jask.store.versions import check_layouts, identity, resolved, written_here
from jask.store.views import as_transposed, base_of

__all__ = ["Description", "GroupRunner", "Recorded", "record", "values", "MAX_PENDING", "MAX_HELD"]

#: One group runs at a time: a group reads stores other groups may be
#: computing, and each recorded store is computed once.
_running = forks.rlock()



#: Most ops a pending chain holds (itself and the pending ops it reads):
#: beyond, its inputs are computed first. Building and planning a group
#: recurse along the chain, and each pending op keeps its inputs' stores.
MAX_PENDING = 32
#: Most stores a pending chain reads: each stays on disk while the chain is
#: pending (an eager loop ``w = w - lr * g`` would otherwise keep every g).
MAX_HELD = 4


@dataclass(frozen=True, eq=False)
class Description:
    """What an op computes, for a band group (see :class:`fusion.Node`)."""

    op: str
    kind: str
    on_disk: tuple
    shape: tuple
    dtype: np.dtype
    params: dict = field(default_factory=dict)
    grad: bool = False
    #: eagerly, run at the call, never recorded: its kernel is a user's function
    #: (``jask.map``), which may read values its caller changes after the call
    at_call: bool = False


class Recorded(registry.Deferred):
    """A store an op will write when first needed."""

    def __init__(self, desc: Description, inputs: list, config: Config, work: Callable,
                 keep: tuple = ()):
        self.desc = desc
        self.inputs = inputs  # per operand: Recorded, StoreSpec or numpy array
        self.config = config
        self.work = work      # the op's own (unfused) work
        self.handle = 0
        self.store: StoreSpec | None = None
        self.forgotten = False  # nothing reads it any more: never computed
        self.keep = keep      # eagerly: the inputs' Owners, alive while this is pending
        self.owned_lazily = not registry.in_callback()  # an eager op's
        self.failed: Exception | None = None  # what computing it raised, for good
        self.upstream = frozenset().union(*(x.upstream for x in _pending(inputs))) | {id(self)}
        self.leaves = _leaves(inputs)  # the stores computing it reads (and keeps)
        # eagerly, the version of each user's local store it reads (one at a URL is
        # checked by its metadata's ETag when read): jask computes pending
        # readers before its own writers replace one, but another writer may too
        self.stamps = _stamps(inputs, desc.op) if self.owned_lazily else []

    def _fulfil(self, store: StoreSpec) -> None:
        if store.view is not None and store.handle:  # a pending transpose: now a view
            self.store = registry.fulfil_as_view(self.handle, store)
        else:
            self.store = registry.fulfil(self.handle, store)
        self.inputs, self.keep = [], ()  # computed: its inputs may go

    @property
    def shape(self) -> tuple:
        return self.desc.shape

    @property
    def dtype(self) -> np.dtype:
        return self.desc.dtype

    def compute(self) -> StoreSpec:
        if self.forgotten:
            raise RuntimeError(f"jask: internal error, {self.desc.op}'s result was needed "
                               "after the program said nothing reads it")
        if self.failed is not None:
            raise self.failed
        with _running:
            try:
                if self.store is None and (self.desc.kind == "transpose" or self.owned_lazily
                                           and not _pending(self.inputs)):
                    self.run_alone()  # one op on stored data: its own plan and name
                elif self.store is None:
                    _run_group([self], [], self.config)
            except Exception as err:
                if self.owned_lazily and hasattr(err, "add_note"):
                    getattr(err, "add_note")(
                        f"jask.{self.desc.op}: raised computing its deferred result, where "
                        "it was first needed (eager ops are lazy; "
                        "jask.set_memory_budget(..., lazy=False) runs each at its call)")
                raise
            assert self.store is not None
            return self.store

    def before_change(self) -> None:
        try:
            self.compute()
        except (StoreChangedError, DamagedStoreError) as err:
            # its inputs can never give it again: reading it raises this, and the
            # change (an update_ repairing a damaged store, say) goes ahead
            self.failed = err.with_traceback(None)  # (its frames hold the update_'s arrays)
            self.inputs, self.keep = [], ()  # (and the views of the store it held)

    def reads(self, path: str) -> bool:
        if self.forgotten:
            return False
        return any(x.path == path if isinstance(x, StoreSpec)
                   else isinstance(x, Recorded) and (x.store.path == path if x.store
                                                    else x.reads(path))
                   for x in self.inputs)

    def check_unchanged(self) -> None:
        """Refuse to compute from a user's store replaced (or removed) since the
        call: the result would hold values the program never gave it."""
        for path, before in self.stamps:
            now = identity(path)
            if now != before and not written_here(now):
                # (a swap by this process's jask, in another thread, is a writer racing this
                # op, whose values are either version's, as when it ran at the call)
                forget_cached(path)
                raise StoreChangedError(
                    f"jask.{self.desc.op}: the store {path!r} was replaced or removed by "
                    "another writer after this op was called and before its result was "
                    "computed (eager ops are lazy: jask.set_memory_budget(..., lazy=False) "
                    "runs each at its call); its result would hold the new values, so it "
                    "is refused. Call the op again.")

    def run_alone(self) -> None:
        """Compute this store with the op's own work (its inputs first)."""
        self.check_unchanged()
        stores = [x.compute() if isinstance(x, Recorded) else x
                  for x, d in zip(self.inputs, self.desc.on_disk) if d]
        values = [x for x, d in zip(self.inputs, self.desc.on_disk) if not d]
        held = self.keep  # noqa: F841 - the inputs' Owners, until the snapshot's check is over
        with snapshot(stores, f"jask ({self.desc.op})"), \
                counters.ran_as("deferred") if self.owned_lazily else contextlib.nullcontext():
            self._fulfil(self.work(stores, values, self.config))


def _stamps(inputs: list, op: str) -> list:
    """[(path, version)] of the users' local stores among ``inputs``, as the
    call sees them (a store rewritten since it was opened is refused now)."""
    users = [x for x in inputs if isinstance(x, StoreSpec) and not base_of(x).managed
             and location_of(x).is_local]
    check_layouts(users, f"jask.{op}")
    return [(p, identity(p)) for p in dict.fromkeys(
        resolved(x.path) for x in users)]


def _stand_in(x, config: Config) -> StoreSpec:
    """A store, or for a pending one a store as jask will make it (raw chunk
    files, default chunks), for planning before it exists."""
    if not isinstance(x, Recorded):
        return x
    if x.store is not None:
        return x.store
    chunks = memory.default_chunks(x.shape, x.dtype, config.max_memory, config.workers)
    return StoreSpec("", tuple(x.shape), np.dtype(x.dtype), tuple(chunks))


def _leaves(inputs: list) -> frozenset:
    return frozenset(x.path for x in inputs if isinstance(x, StoreSpec)).union(
        *(x.leaves for x in _pending(inputs)))


def _pending(inputs: list) -> list:
    return [x for x in inputs if isinstance(x, Recorded) and x.store is None]


def _inputs(desc: Description, args) -> list:
    """Operands in order: a recorded store, a computed store or an array."""
    n = sum(desc.on_disk)
    disk, values = iter(args[:n]), iter(args[n:])
    out: list = []
    for d in desc.on_disk:
        if d:
            handle = next(disk)
            recorded = registry.deferred(handle)
            if (recorded is not None and getattr(recorded, "owned_lazily", False)
                    and registry.in_callback()):
                recorded = None  # an eager result passed to a jitted call: computed now, once
            out.append(recorded if recorded is not None else registry.spec(handle))
        else:
            out.append(np.asarray(next(values)))  # immutable: see dispatch.to_store
    return out


def _pending_transpose(x) -> bool:
    """Whether ``x`` is the pending transpose of a pending matrix (``Z.T``)."""
    return isinstance(x, Recorded) and x.store is None and x.desc.kind == "transpose"


def _see_through(desc: Description, inputs: list) -> tuple[dict, list]:
    """(params, inputs) of a product reading a pending ``Z.T`` as ``Z`` transposed
    as it is read (``ta``), so that ``Z.T @ Z`` joins the band group computing
    ``Z`` (each band adds ``Z_band.T @ Z_band``): Z is never written."""
    if desc.kind == "dot" and _pending_transpose(inputs[0]):
        return ({**desc.params, "ta": not desc.params["ta"]},
                [inputs[0].inputs[0], *inputs[1:]])
    return desc.params, inputs


def _shallow(desc: Description, inputs: list, resolve=lambda x: x) -> fusion.Node:
    params, inputs = _see_through(desc, inputs)
    inputs = [resolve(x) for x in inputs]
    if desc.kind == "dot" and isinstance(inputs[0], StoreSpec):
        base, transposed = as_transposed(inputs[0])
        if transposed:  # X.T @ u: X read in row bands, the product contracted over them
            inputs = [base, *inputs[1:]]
            params = {**params, "ta": not params["ta"]}
    return fusion.Node(desc.op, desc.kind, inputs, desc.shape, np.dtype(desc.dtype), params)


def _joins(desc: Description, inputs: list) -> bool:
    """Whether the op can run in a band group with its recorded inputs."""
    if desc.kind == "transpose" or any(_pending_transpose(x) for x in _see_through(desc,
                                                                              inputs)[1]):
        return False  # a pending Z.T read by anything but a product: Z.T computed first
    node = _shallow(desc, inputs)
    if not fusion.fusable(node):
        return False
    if desc.kind == "dot" and any(isinstance(x, StoreSpec) and as_transposed(x)[1]
                                  for x in node.inputs):
        return False  # ... @ X.T: its own plan reads X as stored, once (jask.store.views)
    n = fusion.band_length(node)
    for x in node.inputs:
        if isinstance(x, Recorded) and x.store is None:
            inner = _shallow(x.desc, x.inputs)
            if not inner.rows or fusion.band_length(inner) != n:
                return False
    return True


def _reads_whole(desc: Description, inputs: list) -> bool:
    """Whether the op is ``X @ w`` with ``w`` a pending result that a band group reads
    whole, not by bands (``fusion.whole_inputs``)."""
    if desc.kind != "dot" or not isinstance(inputs[1], Recorded) or inputs[1].store is not None:
        return False
    p, inputs = _see_through(desc, inputs)
    a = inputs[0]
    if not isinstance(a, (StoreSpec, Recorded)) or len(a.shape) != 2 or p["vectors"][0]:
        return False
    transposed = isinstance(a, StoreSpec) and as_transposed(a)[1]  # X.T @ u: by bands
    return p["ta"] == transposed


def record(desc: Description, args, config: Config, work: Callable,
           keep: tuple = ()) -> int | None:
    """Record an op whose output is a store; its handle, or None when the
    op cannot join a group (then it runs now). ``keep``: eagerly, the
    Owners of its inputs (held while it is pending)."""
    eager = not registry.in_callback()
    if eager and execute.on_a_cluster():
        return None  # run now, on the cluster that is there now (it may be gone when read)
    inputs = _inputs(desc, args)
    if desc.kind == "transpose":
        return _record_transpose(desc, inputs, config, work, keep) if eager else None
    if _reads_whole(desc, inputs):
        # X @ w with w pending (along another axis): the band group reads w whole, so
        # compute it now and X @ w still joins the ops that read it by bands
        inputs[1] = inputs[1].compute()
    if not _joins(desc, inputs):
        return None
    waiting = _pending(inputs)
    planned = None
    if eager and hasattr(work, "plan"):
        # eagerly, refuse now what the op alone cannot run (BudgetError names it): a
        # pending input as the store it will be (a chunk of a user's store it reads
        # with it may not fit, and the group would then run it alone)
        stores = [_stand_in(x, config) for x, d in zip(inputs, desc.on_disk) if d]
        planned = work.plan(stores, [x for x, d in zip(inputs, desc.on_disk) if not d],
                            config)
        if waiting:
            planned = None  # (its output's chunks are the group's)
    if eager:  # and an output the scratch disk cannot hold (DiskFullError names the folder)
        chunks = (planned.chunks if planned is not None and planned.chunks is not None
                  else tuple(max(s, 1) for s in desc.shape))
        _room_after_pending(config, desc, chunks)
    def too_long() -> bool:
        return (len(frozenset().union(*(x.upstream for x in _pending(inputs)))) >= MAX_PENDING
                or bool(keep) and len(_leaves(inputs)) > MAX_HELD)  # (a program holds them anyway)

    # the chain is long enough: compute its longest pending inputs until it is not
    for x in sorted(waiting, key=lambda x: -len(x.upstream)):
        if not too_long():
            break
        x.compute()
    inputs = [x.store if isinstance(x, Recorded) and x.store is not None else x
              for x in inputs]
    recorded = Recorded(desc, inputs, config, work, keep)
    recorded.handle = registry.register_deferred(recorded)
    return recorded.handle


def _record_transpose(desc: Description, inputs: list, config: Config, work: Callable,
                      keep: tuple) -> int | None:
    """Eagerly, ``Z.T`` of a pending matrix ``Z``: pending too, a view of Z's store
    once computed (a product reading it joins Z's band group instead); of
    anything else, None (the view is made now)."""
    (z,) = inputs
    if not (isinstance(z, Recorded) and z.store is None and len(z.shape) == 2
            and tuple(desc.params["axes"]) == (1, 0)):
        return None
    recorded = Recorded(desc, inputs, config, work, keep)
    recorded.handle = registry.register_deferred(recorded)
    return recorded.handle


def _room_after_pending(config: Config, desc: Description, chunks: tuple) -> None:
    """Refuse an output the scratch disk cannot hold once the pending results
    still held are written too (each op at its call, as if it ran there)."""
    room(config, desc.op, desc.shape, desc.dtype, chunks)
    promised = [p for p in registry.owned_deferred() if isinstance(p, Recorded)
                and p.store is None and p.owned_lazily and p.failed is None
                and p.config.scratch_dir == config.scratch_dir]
    if not promised:
        return
    extra = sum(memory.nbytes(p.shape, p.dtype) for p in promised)
    try:
        room(config, desc.op, desc.shape, desc.dtype, chunks, extra=extra)
    except DiskFullError as err:
        getattr(err, "add_note")(
            f"(counting the pending eager results still held ({len(promised)}), "
            f"{exact_bytes(extra)}, written when they are read)")
        raise


def forget(handles) -> None:
    """Results nothing will read: an update_ need not compute them first."""
    for handle in handles:
        recorded = registry.deferred(handle)
        if isinstance(recorded, Recorded) and not recorded.owned_lazily:
            recorded.forgotten = True  # (an eager result passed in stays: it is owned)


def values(items: list, keep=(), wide: bool = False, device=None) -> list:
    """Compute ops returning in-memory values, ``items`` = [(description,
    args, config)], together with the recorded stores they read: one band
    group per band length. An entry is None where its op must run alone
    (it cannot join a group, or no band fits the budget). ``keep``: handles
    of recorded stores (the program returns them) computed in the same
    groups, each written as a store root. ``wide``: float values of a group
    come back as float64, not rounded to their dtype (:func:`fusion.finish`).
    ``device``: a :class:`GroupRunner` that may compute a group of value
    roots on an accelerator instead (eagerly: :mod:`jask.core.device`)."""
    out: list = [None] * len(items)
    groups: dict = {}
    stats: dict = {}  # item -> the statistic whose moments it computes (eagerly)
    for i, (desc, args, config) in enumerate(items):
        inputs = _inputs(desc, args)
        if not registry.in_callback() and config.lazy:
            out[i] = moments.centred(desc, inputs, config.max_memory)
            if out[i] is not None:  # sum(square(x - mean(x))), the moments kept of x
                continue
        stat = _statistic(desc, inputs, config)
        if stat is not None:
            out[i] = moments.recall(stat)
            if out[i] is not None:  # asked for with another statistic of the same data
                out[i] = np.asarray(out[i]).astype(desc.dtype, copy=False).reshape(desc.shape)
                continue
            if moments.widens(desc) and not _shallow(desc, inputs).rows:
                # a mean or variance over the rows: the moments of the data (one keeping
                # the rows is finished band by band: no partial is left to keep)
                desc = moments.widened(desc)
                stats[i] = stat
        if _joins(desc, inputs):
            n = fusion.band_length(_shallow(desc, inputs))
            groups.setdefault(n, []).append((i, desc, inputs, config))
    roots = _kept_by_length(keep)
    for n, members in groups.items():
        if len(members) == 1 and n not in roots and members[0][0] not in stats and not any(
                isinstance(x, Recorded) and x.store is None for x in members[0][2]):
            continue  # one op on stored data: its own plan is as good
        partials: dict = {}
        with _running:
            results = _run_group(roots.pop(n, []), [(d, x) for _, d, x, _ in members],
                                 members[0][3], partials, wide, device)
        for k, ((i, *_), result) in enumerate(zip(members, results)):
            out[i] = result
            if i in stats and k in partials:
                moments.remember(stats[i], partials[k])
    for alone in roots.values():  # no value op of their band length
        with _running:
            _run_group(alone, [], alone[0].config)
    return out


def statistics_together(desc: Description | None, config: Config) -> bool:
    """Whether an eager value op is a statistic (a mean, variance or standard
    deviation of an array's values) that :func:`values` computes with the
    moments the next statistic of the same data needs (:mod:`jask.engine.moments`)."""
    return (desc is not None and config.lazy and not registry.in_callback()
            and moments.may_know(desc))


def _statistic(desc: Description, inputs: list, config: Config):
    """The statistic an eager value op computes (None inside a program, with
    ``lazy=False``, or for any other op)."""
    if registry.in_callback() or not config.lazy:
        return None
    return moments.statistic(desc, inputs, config.max_memory)


def _kept_by_length(handles) -> dict:
    """The recorded stores, not computed yet, behind ``handles``, by band length."""
    roots: dict = {}
    for handle in handles:
        recorded = registry.deferred(handle)
        if isinstance(recorded, Recorded) and recorded.store is None and not recorded.forgotten:
            n = fusion.band_length(_shallow(recorded.desc, recorded.inputs))
            if recorded not in roots.setdefault(n, []):
                roots[n].append(recorded)
    return roots


# --- running a group ---------------------------------------------------------------

@dataclass
class _Group:
    order: list            # nodes, inputs before the nodes reading them
    node_of: dict          # id(recorded) -> its node
    recorded_of: dict       # id(node) -> its recorded
    tops: list = field(default_factory=list)  # the value roots' nodes


def _build(roots: list, value_roots: list) -> _Group:
    group = _Group([], {}, {})

    def node_of(p: Recorded) -> fusion.Node:
        if id(p) not in group.node_of:
            node = _shallow(p.desc, p.inputs, resolve)
            group.node_of[id(p)] = node
            group.recorded_of[id(node)] = p
            group.order.append(node)
        return group.node_of[id(p)]

    def resolve(x):
        if isinstance(x, Recorded):
            return x.store if x.store is not None else node_of(x)
        return x

    for p in roots:
        node_of(p)
    for desc, inputs in value_roots:
        top = _shallow(desc, inputs, resolve)
        group.tops.append(top)
        group.order.append(top)
    return group


class GroupRunner(Protocol):
    """Computes a band group somewhere other than in Dask tasks on the host
    (an accelerator: :mod:`jask.core.device` hands one down)."""

    def run(self, name: str, order: list, tops: list, config: Config,
            wide: bool) -> list | None:
        """The finished values of ``tops`` (nodes of ``order``, each reducing
        the rows), each store read once; None to leave the group to the host."""


def _run_group(roots: list, value_roots: list, config: Config,
               partials: dict | None = None, wide: bool = False,
               device: GroupRunner | None = None) -> list:
    """Compute ``roots`` (recorded stores) and ``value_roots`` ([(description,
    inputs)]) as one band group; return the values. When no band fits the
    budget, the recorded stores are computed op by op and the values are
    None (their ops then run alone). ``partials``: filled with each value
    root's combined partial, by its position, before it was finished;
    ``wide``: float values as float64 (:func:`fusion.finish`); ``device``:
    where a group of value roots alone may run instead (its partials are
    then not handed back: no moments are kept)."""
    group = _build(roots, value_roots)
    for p in group.recorded_of.values():
        p.check_unchanged()
    n = fusion.band_length(group.order[-1])
    name = f"fused_{group.order[-1].op}"
    keep = {id(group.node_of[id(p)]) for p in roots} | {id(top) for top in group.tops}
    fused, plan = _weighted(group, keep), None
    # bands sized for the tasks that share one process's budget: on a cluster, a worker's
    where = execute.placement(config.workers)  # asked once: planned and run for the same
    planning = replace(config, workers=where.per_process)
    if fused is not group:  # a weighted Gram product in place of the tangents it reads
        fused_keep = {id(fused.node_of[id(p)]) for p in roots} | {id(t) for t in fused.tops}
        plan = bands.group(name, fused.order, fused_keep, fused.tops, planning)
        if plan is None:
            fused = group
    if plan is None:
        plan = bands.group(name, group.order, keep, group.tops, planning)
    read = [x for node in group.order for x in node.inputs if isinstance(x, StoreSpec)]
    # the Owners of the stores read, held until the snapshot's check is over (fulfilling a
    # root lets go of its inputs: another thread's sweep could delete them mid-check)
    held = [p.keep for p in group.recorded_of.values()]  # noqa: F841
    with snapshot(read, f"jask ({name})"):  # one version of each store read
        if device is not None and not roots:
            with counters.ran_as(", ".join(node.op for node in fused.order)):
                done = device.run(name, fused.order, fused.tops, config, wide)
            if done is not None:
                return done
        if plan is None:  # too large for one band task: op by op, as unfused
            for node in group.order:
                p = group.recorded_of.get(id(node))
                if p is not None and p.store is None:
                    p.run_alone()
            return [None] * len(value_roots)
        return _run_fused(name, fused, roots, plan, n, config, where, partials, wide)


def _weighted(group: _Group, keep: set) -> _Group:
    """``group`` with each contraction of data with a batch of tangents
    (``jax.hessian``'s ``X.T @ (c * (X @ M))``) as a weighted Gram product
    (:func:`jask.engine.gram.rewrite`); ``group`` itself when none is found."""
    order, swaps = gram.rewrite(group.order, keep)
    if not swaps:
        return group
    node_of = {k: swaps.get(id(v), v) for k, v in group.node_of.items()}
    recorded_of = {id(node_of[id(p)]): p for p in group.recorded_of.values()}
    return _Group(order, node_of, recorded_of, [swaps.get(id(t), t) for t in group.tops])


def _run_fused(name: str, group: _Group, roots: list, plan: Plan, n: int, config: Config,
               where: execute.Placement, partials: dict | None = None, wide: bool = False):
    order = group.order
    index = {id(x): i for i, x in enumerate(order)}
    banded = [p for p in roots if group.node_of[id(p)].rows]
    reduced = [p for p in roots if not group.node_of[id(p)].rows]
    value_roots = tuple(index[id(group.node_of[id(p)])] for p in reduced)
    value_roots += tuple(index[id(top)] for top in group.tops)
    with contextlib.ExitStack() as stack:
        writes = []
        for p in banded:
            chunks = (plan.rows,) + tuple(p.shape[1:])
            stack.enter_context(work.room(config, p.desc.op, p.shape, p.dtype, chunks))
            store = stack.enter_context(registry.new_store(
                config.scratch_dir, p.desc.op, p.shape, p.dtype, chunks, grad=p.desc.grad))
            writes.append((group.node_of[id(p)], store))
        # On a cluster each task costs its scheduler a few ms, and each level of the fan-in
        # tree is a hop between processes (a transfer and a task, 5-40 ms each): one task per
        # worker thread runs its share of the bands in order and adds up their partials, and
        # those come back to be combined here, when holding them all at once is no more than
        # the plan kept room for in the tree (partials that keep the rows: one per band)
        bands_n = -(-n // plan.rows)
        runs = _runs(where, bands_n, fusion.reducers_of(tuple(order), value_roots))
        here = runs > 0 or (bool(value_roots) and 1 < bands_n <= bands.waiting_partials(bands_n)
                            and where.on_a_cluster)
        at_once = _at_once(where, plan)
        dsk, keys = fusion.group_graph(
            name, tuple(order), tuple(writes), value_roots, n, plan.rows, plan.strip,
            ahead=at_once, tree=not here, runs=runs,
            run_order=functools.partial(execute.run_order, at_once=at_once, where=where))
        with counters.ran_as(", ".join(node.op for node in order)):
            results = _run_naming_the_op(dsk, keys, config, plan, where)
        if here:
            results = [fusion.combine_bands(fusion.reducers_of(tuple(order), value_roots),
                                            *results)]
        combined = dict(zip(value_roots, results[-1] if value_roots else ()))
        values = {j: fusion.finish(order[j], v) for j, v in combined.items()}
        if partials is not None:
            partials.update((k, combined[index[id(top)]]) for k, top in enumerate(group.tops))
        small = [(p, _write_whole(p, values[index[id(group.node_of[id(p)])]], config))
                 for p in reduced]
    for node, store in writes:
        group.recorded_of[id(node)]._fulfil(store)
    for p, store in small:
        p._fulfil(store)
    if wide:
        return [fusion.finish(top, combined[index[id(top)]], wide=True) for top in group.tops]
    return [values[index[id(top)]] for top in group.tops]


def _runs(where: execute.Placement, bands_n: int, reducers: tuple) -> int:
    """On a cluster, the tasks a group's bands run in (one per worker thread:
    :func:`fusion.run_of_bands`), their partials combined by the client; 0
    for a task per band (here, without value roots, or with one keeping the
    rows, whose partials grow with the bands a task runs)."""
    threads = where.threads
    if (not where.on_a_cluster or not reducers or "rows" in reducers or bands_n < 2
            or min(threads, bands_n) > bands.waiting_partials(bands_n)):
        return 0
    return threads


def _at_once(where: execute.Placement, plan: Plan) -> int:
    """The band tasks that run at once in one process (as
    :func:`jask.engine.execute.run` limits them; on a cluster, as many as one
    worker's threads, which the plan was sized for)."""
    cost = plan.cost
    if cost is not None and cost.tasks_at_once >= 1:
        return min(where.per_process, cost.tasks_at_once)
    return where.per_process


def _run_naming_the_op(dsk, keys, config: Config, plan: Plan,
                       where: execute.Placement) -> list:
    """Run a group's graph. Inside a compiled program JAX reports only the
    last line of a callback's error: put the failing op's name there."""
    try:
        return execute.run(dsk, keys, config.workers, plan.cost, where)
    except Exception as err:
        notes = getattr(err, "__notes__", [])
        if notes and registry.in_callback():
            raise RuntimeError(f"{notes[-1]}: {type(err).__name__}: {err}") from err
        raise


def _write_whole(p: Recorded, data: np.ndarray, config: Config) -> StoreSpec:
    """A reduced result (small: it was held in memory) as a store of its own."""
    chunks = memory.default_chunks(p.shape, p.dtype, config.max_memory, config.workers)
    with registry.new_store(config.scratch_dir, p.desc.op, p.shape, p.dtype, chunks,
                           grad=p.desc.grad) as out:
        write(out, tuple(slice(0, d) for d in p.shape), data)
    return out
