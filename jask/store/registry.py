"""The registry of stores: handles, owners and lifetimes.

Every array jask computes lives in a Zarr v3 store of its own. A store is
known to the rest of jask by an integer *handle*: that integer is what flows
through a compiled JAX program, and a callback turns it back into a path
(:func:`spec`) when it runs.

Lifetime. Each store has one :class:`Record` (in ``_records``, keyed by its
handle) whose :class:`State` says where it is in its life, and whose
methods are the only transitions (each checks the state it starts from):

* ``made`` by :func:`create`: a folder being filled, no handle handed out
  yet; :func:`register` ed or :func:`discard` ed by the thread that made it;
* ``unclaimed``: it has a handle and awaits its claim (an :class:`Owner`)
  from the thread that made it: at once for an eager op, when the program
  returns it for one made inside a compiled program;
* ``owned``: an Owner is held by every Python ``DiskArray`` of the store
  whose handle is concrete;
* ``doomed``: its last Owner was garbage collected;
* ``trash``: off the books, its folder deleted (or reused) next.

Apart from the state, a store is *pending* while it is not computed yet (its
:class:`Deferred` runs when first needed), and a view keeps its base's
record alive, as a pending computation keeps every store it reads. A made
or unclaimed store whose register or claim never came is garbage once its
thread is between ops (at a safe point: its compiled call is over) or has
ended: a safe point of one thread never removes those
of a compiled call another thread is running, or has just returned from.

Doomed stores, and made or unclaimed ones whose thread is done, are removed
by :func:`sweep`, which the JAX layer calls at safe points (after waiting
for running programs), never while a program may still read them. The
garbage collector only appends a dead Owner's reference to a queue (C code,
where no Ctrl-C lands): the store is doomed at the next safe point.
"""
from __future__ import annotations

import collections
import contextlib
import enum
import itertools
import os
import threading
import uuid
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from jask.base import forks
from jask.store.layout import create_at
from jask.store.location import location_of
from jask.store.spec import GRAD_SUFFIX, StoreSpec, plain_v3_metadata, stored_nbytes

from . import chunkio, recycle, tiles, trash, versions

__all__ = ["Owner", "State", "Record", "LifetimeError", "create", "register",
           "spec", "claim", "sweep", "live_paths", "in_callback",
           "Deferred"]


class Owner:
    """Held by every DiskArray of one store; the store dies with the last one.

    An eager op's pending result is owned before it is computed: its
    ``spec`` computes it (an observation, see :mod:`jask.engine.lazy`)."""

    __slots__ = ("handle", "__weakref__")

    def __init__(self, handle: int):
        self.handle = int(handle)

    @property
    def spec(self) -> StoreSpec:
        return spec(self.handle)

    @property
    def pending(self) -> bool:
        """Whether the store is still to be computed (a pending eager result)."""
        record = _records.get(self.handle)
        return record is not None and record.deferred is not None


class State(enum.Enum):
    """Where a store is in its life (see the module's docstring)."""

    MADE = "made"            # created by create(), being filled; no handle handed out
    UNCLAIMED = "unclaimed"  # a handle, awaiting its claim from the thread that made it
    OWNED = "owned"          # an Owner (a DiskArray) holds it
    DOOMED = "doomed"        # its last Owner died: deleted at the next sweep
    TRASH = "trash"          # off the books: its folder deleted (or reused) next


class LifetimeError(RuntimeError):
    """A transition a store's record cannot take from its state: jask's own bug."""


#: The lock every transition holds (reentrant: public functions call each other;
#: free again in a forked child: jask.base.forks).
_lock = forks.rlock()
_handles = itertools.count(1)
_copying = forks.lock()


_local = threading.local()


@dataclass(eq=False, slots=True)
class Record:
    """One store's life: its state and what it holds.

    Every change of ``state`` is one of the methods below, taken under
    ``_lock``; each checks the state it starts from and raises
    :class:`LifetimeError` on any other. Each writes the fields that make a
    store reachable before those that let it go, so a Ctrl-C between two of
    its lines leaves a store at worst kept one sweep longer, never deleted
    while something reads it."""

    key: int                   # the store's handle (allocated when it is made)
    state: State
    thread: int = 0            # made, unclaimed: whose register or claim it awaits;
    #                            trash: the thread deleting it (0: nobody yet)
    spec: StoreSpec | None = None     # None while pending (not computed) or made
    path: str = ""             # made: the folder being filled
    deferred: "Deferred | None" = None   # pending: its computation
    copy: "Deferred | None" = None       # a view: its own copy, made before its base changes
    base: "Record | None" = None         # a view: its base's record (kept while it lives)
    owner: "_OwnerRef | None" = None     # owned: a weak reference to its Owner
    #: trash: its path may be another record's too (a Ctrl-C between two steps
    #: of fulfil or replace left it behind): deleted only if no live record names it
    shared: bool = False

    def _expect(self, what: str, *states: State) -> None:
        if self.state not in states:
            raise LifetimeError(
                f"jask: internal error, store {self.key} cannot {what} while "
                f"{self.state.value} (only while {' or '.join(s.value for s in states)})")

    # --- coming into being ----------------------------------------------------
    @staticmethod
    def made(path: str) -> "Record":
        """A store created at ``path`` by this thread, to be filled (made)."""
        record = Record(next(_handles), State.MADE, threading.get_ident(), path=path)
        _records[record.key] = record  # (one step: a Ctrl-C before it leaves the folder
        return record                  # to the session's removal at exit)

    @staticmethod
    def unclaimed(store: StoreSpec | None = None, deferred: "Deferred | None" = None,
                  copy: "Deferred | None" = None, base: "Record | None" = None) -> "Record":
        """A new handle awaiting its claim from this thread: a completed store
        (an existing one, or a view of ``base``), or a pending one."""
        key = next(_handles)
        if store is not None:
            store = StoreSpec(store.path, store.shape, store.dtype, store.chunks, key,
                              store.managed, store.view)
        record = Record(key, State.UNCLAIMED, threading.get_ident(), store, deferred=deferred,
                        copy=copy, base=base)
        _records[key] = record  # (complete before it is found)
        return record

    def register(self, store: StoreSpec) -> StoreSpec:
        """made -> unclaimed: the store is complete and gets its handle."""
        self._expect("be registered", State.MADE)
        self.spec = StoreSpec(store.path, store.shape, store.dtype, store.chunks, self.key,
                              store.managed, store.view)
        self.thread, self.state = threading.get_ident(), State.UNCLAIMED
        return self.spec

    def discarded(self) -> None:
        """made -> gone: its op failed and removed the folder."""
        self._expect("be discarded", State.MADE)
        _records.pop(self.key, None)

    # --- holding --------------------------------------------------------------
    def claim(self) -> Owner:
        """unclaimed, owned or doomed -> owned: its Owner (the live one, or a new one)."""
        self._expect("be claimed", State.UNCLAIMED, State.OWNED, State.DOOMED)
        owner = self.owner() if self.owner is not None else None
        if owner is None:
            owner = Owner(self.key)
            self.owner, self.state = _OwnerRef(owner), State.OWNED  # (one step: no Ctrl-C
        else:                                                         # between the two)
            self.state = State.OWNED
        return owner

    def owner_died(self, ref: "_OwnerRef") -> None:
        """owned -> doomed: ``ref``, its Owner's reference, is dead (safe point)."""
        if self.owner is not ref:
            return  # owned again since, by a new Owner
        self._expect("lose its owner", State.OWNED)
        self.state, self.owner = State.DOOMED, None

    def fulfil(self, store: StoreSpec) -> StoreSpec:
        """pending -> computed, or a view -> a store of its own: ``store``
        (complete) is now the store behind the handle. One nothing owns is
        unclaimed for this thread: it goes at this thread's next safe point,
        once the computation reading it is over, never at another thread's."""
        self._expect("be computed", State.UNCLAIMED, State.OWNED, State.DOOMED)
        if self.deferred is None and self.copy is None:
            raise LifetimeError(f"jask: internal error, store {self.key} is computed already")
        self.spec = StoreSpec(store.path, store.shape, store.dtype, store.chunks, self.key,
                              store.managed)
        self.deferred = self.copy = self.base = None  # (a view no longer reads its base)
        _doom_dead_owners()
        if self.state is not State.OWNED:
            self.thread, self.state = threading.get_ident(), State.UNCLAIMED
        return self.spec

    def replace(self, store: StoreSpec) -> StoreSpec:
        """A new version (complete, never registered) behind the handle; the
        old one becomes a trash record of its own."""
        self._expect("be replaced", State.UNCLAIMED, State.OWNED, State.DOOMED)
        old = self.spec
        if old is None or old.view is not None:
            raise LifetimeError(f"jask: internal error, store {self.key} has no store to replace")
        trashed = Record(next(_handles), State.TRASH, spec=old, shared=True)  # a number of its own
        _records[trashed.key] = trashed  # first: never leaked (nor deleted while named below)
        self.spec = StoreSpec(store.path, old.shape, old.dtype, store.chunks, self.key, True)
        return self.spec

    # --- going ----------------------------------------------------------------
    @staticmethod
    def recomputed(handle: int, store: StoreSpec) -> StoreSpec:
        """gone -> unclaimed: a pending store dropped by another thread's sweep
        while it was computed for a reader in this thread, whose next safe
        point lets it go."""
        record = Record(handle, State.UNCLAIMED, threading.get_ident(), StoreSpec(
            store.path, store.shape, store.dtype, store.chunks, handle, store.managed))
        _records[handle] = record
        return record.spec  # type: ignore[return-value]

    def unreachable(self, done: Callable[[int], bool]) -> bool:
        """Whether nothing can reach it: doomed, or made or unclaimed by a
        thread ``done`` says is between ops or ended."""
        return self.state is State.DOOMED or (
            self.state in (State.MADE, State.UNCLAIMED) and done(self.thread))

    def to_trash(self) -> None:
        """doomed, or made or unclaimed and unreachable -> trash."""
        self._expect("go to the trash", State.DOOMED, State.MADE, State.UNCLAIMED)
        self.shared = self.state is State.MADE  # (set first: a made record's folder may be
        self.state, self.thread = State.TRASH, 0  # a live record's, see fulfil)
        self.owner = self.base = self.copy = None

    def drop(self) -> "Deferred":
        """pending and unreachable -> gone, never computed; returns its
        computation, to let go of outside the lock (it holds inputs' Owners)."""
        self._expect("be dropped", State.DOOMED, State.UNCLAIMED)
        deferred = self.deferred
        if deferred is None:
            raise LifetimeError(f"jask: internal error, store {self.key} is not pending")
        _records.pop(self.key, None)
        self.deferred = None  # (a reader holding this record no longer sees it pending)
        return deferred

    def take_out(self) -> None:
        """trash -> deleting, by this thread (another thread's or a finished
        one's is taken over)."""
        self._expect("be deleted", State.TRASH)
        self.thread = threading.get_ident()

    def deleted(self) -> None:
        """trash -> gone: its folder is deleted, reused, or never was jask's."""
        self._expect("be forgotten", State.TRASH)
        if _records.get(self.key) is self:
            del _records[self.key]


#: Every store's record, by handle (a store replaced by a new version keeps
#: its handle; its old version's trash record has a number of its own).
_records: dict[int, Record] = {}


def in_callback() -> bool:
    """True while this thread runs an op's work for a compiled program."""
    return getattr(_local, "depth", 0) > 0


class callback_scope:
    """Marks the current thread as running a program's callback."""

    def __enter__(self):
        _local.depth = getattr(_local, "depth", 0) + 1

    def __exit__(self, *exc):
        _local.depth -= 1


class _OwnerRef(weakref.ref):
    """A weak reference to a store's Owner that remembers the store's handle.

    When the Owner dies its callback is a deque's ``append``: C code, so no
    Python runs there and no Ctrl-C can land in it (Python drops an exception
    raised in a finalizer, and the interrupted op ran to its end). The handle
    is doomed later, at a safe point (:func:`_doom_dead_owners`)."""

    __slots__ = ("handle",)

    def __new__(cls, owner: Owner):
        return super().__new__(cls, owner, _dead_owners.append)  # (the callback is taken here)

    def __init__(self, owner: Owner):
        self.handle = owner.handle  # set before the reference is stored anywhere


#: _OwnerRefs whose Owner died, not yet doomed: appended by the garbage
#: collector from any thread, emptied under ``_lock`` at safe points.
_dead_owners: "collections.deque[_OwnerRef]" = collections.deque()


def _doom_dead_owners() -> None:
    """Doom the stores whose Owner died since the last call (caller holds ``_lock``)."""
    while _dead_owners:
        ref = _dead_owners[0]  # taken off only once done: a Ctrl-C here leaves it to the next call
        record = _records.get(ref.handle)
        if record is not None:
            record.owner_died(ref)
        _dead_owners.popleft()


def _made(path: str) -> Record | None:
    """The made (not yet registered) record of the store at ``path``, if any
    (caller holds ``_lock``). Looked for from the newest: it was made just before."""
    for record in reversed(list(_records.values())):
        if record.state is State.MADE and record.path == path:
            return record
    return None


def _unsettled() -> list:
    """The records not owned: the only ones a sweep may have to do with
    (one pass over the table, no call per record; caller holds ``_lock``)."""
    owned = State.OWNED
    return [r for r in list(_records.values()) if r.state is not owned]


def _done() -> Callable[[int], bool]:
    """Which threads' made and unclaimed stores are garbage: this one's (at a
    safe point, so between ops and compiled calls) and those of threads that
    ended. Another thread's are left alone: its compiled call may be running,
    or have returned without claiming its outputs yet."""
    here = threading.get_ident()
    alive: set = set()

    def done(thread: int) -> bool:
        if thread == here:
            return True
        if not alive:
            alive.update(t.ident for t in threading.enumerate())
        return thread not in alive
    return done


def create(scratch_dir: str, name: str, shape, dtype, chunks, *, grad: bool = False) -> StoreSpec:
    """Make an empty store in this process's scratch folder, unregistered.

    The caller fills it and then :func:`register` s it; a store that is never
    registered (its op failed) is removed by :func:`discard`.
    """
    folder = location_of(scratch_dir).session()
    suffix = GRAD_SUFFIX if grad else ".zarr"
    path = os.path.join(folder, f"{name}-{uuid.uuid4().hex[:12]}{suffix}")
    with _lock:  # registered or discarded by this thread next, unless Ctrl-C comes first
        Record.made(path)
    if _reuse(path, shape, dtype, chunks):  # a garbage store's folder (jask.store.recycle)
        return StoreSpec(path, tuple(int(s) for s in shape), np.dtype(dtype), tuple(chunks))
    return create_at(path, shape, dtype, chunks)


def _reuse(path: str, shape, dtype, chunks) -> bool:
    """Take a garbage store's folder of this layout for ``path`` (jask.store.recycle)."""
    shape, dtype, chunks = tuple(int(s) for s in shape), np.dtype(dtype), tuple(chunks)
    if plain_v3_metadata(shape, dtype, chunks) is None or not recycle.take(
            path, shape, dtype, chunks):
        return False
    chunkio.remember_plain(path, shape, dtype, chunks)
    return True


def register(store: StoreSpec) -> StoreSpec:
    """Give a completed store a handle; it awaits its claim from this thread
    (at once for an eager op, when its program returns it inside a callback)."""
    with _lock:
        record = _made(store.path) if store.managed else None
        if record is None:  # an existing store (opened, or jask's own at a URL)
            return Record.unclaimed(store).spec  # type: ignore[return-value]
        return record.register(store)


@contextlib.contextmanager
def new_store(scratch_dir: str, name: str, shape, dtype, chunks, *, grad: bool = False):
    """A new store (see :func:`create`) to fill in the ``with`` block; if the
    block fails, the store is removed, so a half-written one is never kept.

    Example:
      >>> import tempfile
      >>> with new_store(tempfile.mkdtemp(), "x", (2,), "float32", (2,)) as out:
      ...     out.shape
      (2,)
    """
    out = create(scratch_dir, name, shape, dtype, chunks, grad=grad)
    try:
        yield out
    except BaseException:
        discard(out)
        raise


def _delete(store: StoreSpec, *, later: bool) -> None:
    """Remove a store's folder if this session owns it (see :func:`discard`)."""
    tiles.forget(store.path)
    if not location_of(store).owned():
        pass  # opened by path, or a forked parent's: never deleted (Location.owned)
    elif later and plain_v3_metadata(store.shape, store.dtype, store.chunks) is not None:
        recycle.give(store.path, store.shape, store.dtype, store.chunks, stored_nbytes(store))
    elif later:
        trash.remove(store.path)
    else:
        trash.remove_now(store.path)  # a folder, or keys in object storage


def discard(store: StoreSpec, *, later: bool = False) -> None:
    """Remove a store that never became visible (its op failed), or, with
    ``later``, a garbage store: its path goes now, its files in the
    background (:mod:`jask.store.trash`)."""
    _delete(store, later=later)
    with _lock:
        record = _made(store.path)
        if record is not None:
            record.discarded()


def register_view(view: StoreSpec, copy: "Deferred") -> StoreSpec:
    """Give a view (:mod:`jask.store.views`) a handle; its base stays alive
    while it is, and ``copy.compute()`` (an unregistered copy of the view)
    replaces it before anything writes its base (:func:`before_mutation`)."""
    assert view.view is not None and view.view.base.handle, "a view of a registered store"
    with _lock:
        base = _records.get(view.view.base.handle)
        return Record.unclaimed(view, copy=copy, base=base).spec  # type: ignore[return-value]


def own_store(handle) -> StoreSpec:
    """The store behind a handle, a view copied into a store of its own first
    (once; the handle keeps its identity and owners)."""
    handle = int(handle)
    with _copying:
        record = _records.get(handle)
        if record is None or record.copy is None:
            return spec(handle)
        return fulfil(handle, record.copy.compute())


class Deferred:
    """A store not computed yet (see :mod:`jask.engine.lazy`): :func:`spec` runs it.

    ``owned_lazily``: :func:`claim` gives it an Owner without computing it (an
    eager op's result, whose computation holds its inputs' Owners)."""

    owned_lazily = False

    def compute(self) -> StoreSpec:
        raise NotImplementedError

    def reads(self, path: str) -> bool:
        """Whether computing it would read the store at ``path``."""
        raise NotImplementedError

    def before_change(self) -> None:
        """Compute it: a store it reads is about to change (:func:`before_mutation`)."""
        self.compute()


def register_deferred(deferred: Deferred) -> int:
    """A handle for a store to be computed when first needed: pending, and
    unclaimed (a garbage collected one is simply never computed)."""
    with _lock:
        return Record.unclaimed(deferred=deferred).key


def deferred(handle) -> Deferred | None:
    """The computation behind a pending handle, else None."""
    record = _records.get(int(handle))
    return record.deferred if record is not None else None


def pending() -> dict:
    """{handle: computation} of the stores not computed yet (for tests)."""
    return {r.key: r.deferred for r in list(_records.values()) if r.deferred is not None}


def fulfil(handle: int, store: StoreSpec) -> StoreSpec:
    """Give a pending handle (or a view's) the store its computation wrote
    (:meth:`Record.fulfil`)."""
    with _lock:
        record = _records.get(int(handle))
        made = _made(store.path)
        if record is None:  # dropped by another thread's sweep while computed for one here
            out = Record.recomputed(int(handle), store)
        else:
            out = record.fulfil(store)
        if made is not None:  # (after: a Ctrl-C between leaves a made record whose path a
            made.discarded()  # live store holds, which the trash never deletes)
        return out


def fulfil_as_view(handle: int, view: StoreSpec) -> StoreSpec:
    """Give a pending handle a view its computation registered
    (:func:`register_view`): the handle becomes that view, with its base kept
    and its copy made before the base changes; the view's own handle, which
    nothing else knew, is forgotten."""
    assert view.view is not None and view.view.base.handle, "a view of a registered store"
    base_handle = view.view.base.handle
    with _lock:
        made = _records.get(int(view.handle))
        record = _records.get(int(handle))
        if record is None:  # dropped by another thread's sweep meanwhile: as recomputed
            record = Record(int(handle), State.UNCLAIMED, threading.get_ident(), deferred=None)
            _records[record.key] = record
        else:
            record._expect("be computed", State.UNCLAIMED, State.OWNED, State.DOOMED)
            if record.deferred is None:
                raise LifetimeError(
                    f"jask: internal error, store {record.key} is computed already")
        record.spec = StoreSpec(view.path, view.shape, view.dtype, view.chunks, record.key,
                                view.managed, view.view)
        record.copy = made.copy if made is not None else None
        record.base = made.base if made is not None else _records.get(base_handle)
        record.deferred = None
        if made is not None and made.state is State.UNCLAIMED and made is not record:
            _records.pop(made.key, None)  # (the view's own handle: nothing else knew it)
        _doom_dead_owners()
        if record.state is not State.OWNED:
            record.thread, record.state = threading.get_ident(), State.UNCLAIMED
        return record.spec


def repoint(handle: int, store: StoreSpec) -> StoreSpec:
    """Make ``store`` (complete, never registered) the store behind ``handle``,
    in one step; the store it replaces goes to the trash (deleted at the next
    safe point). How jask's own arrays in object storage are updated in place:
    a new version, as storage without a rename allows.

    Example:
      >>> import numpy as np, jask
      >>> from jask.store import registry
      >>> x = jask.from_numpy(np.zeros(3))
      >>> old = registry.spec(x._handle)
      >>> new = create(jask.get_config().scratch_dir, "v", (3,), np.float64, (3,))
      >>> registry.repoint(x._handle, new).path == x.filename != old.path
      True
    """
    with _lock:
        record = _records[int(handle)]
        made = _made(store.path)
        new = record.replace(store)
        if made is not None:
            made.discarded()
        return new


def owned_deferred() -> list:
    """The computations of pending stores something still owns."""
    with _lock:
        _doom_dead_owners()
        return [r.deferred for r in _records.values()
                if r.deferred is not None and r.state is State.OWNED]


def has_deferred() -> bool:
    """Whether any store is pending (no lock: a snapshot of the records)."""
    return any(r.deferred is not None for r in list(_records.values()))


def canonical(path: str) -> str:
    """How a store's path is compared: absolute with symlinks followed
    (:func:`jask.store.versions.resolved`), or a URL (object storage, an
    icechunk array's ``icechunk+s3://...``) as it is.

    Example:
      >>> canonical("icechunk+s3://bucket/repo?branch=main#w"), canonical("/data/./x.zarr")
      ('icechunk+s3://bucket/repo?branch=main#w', '/data/x.zarr')
    """
    return versions.resolved(path)


def _same_folder(path: str) -> list:
    """``path`` and the paths of the registered user stores that name its
    folder another way, which resolving links cannot see (a bind mount)."""
    try:
        here = os.stat(path)
    except OSError:
        return [path]
    with _lock:
        others = {r.spec.path for r in _records.values()
                  if r.spec is not None and r.state is not State.TRASH and not r.spec.managed
                  and r.spec.path != path and location_of(r.spec).is_local}
    found = [path]
    for other in sorted(others):
        try:
            there = os.stat(other)
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
            found.append(other)
    return found


#: (anything kept?, told(path)) of the layers above that keep something of a
#: store's values (:mod:`jask.engine.moments`): told before the store changes.
_mutation_listeners: list = []


def on_mutation(told: Callable[[str], None], keeps: Callable[[], int]) -> None:
    """Call ``told(path)`` before jask changes the store at ``path`` (every
    path naming its folder), whenever ``keeps()`` says something is kept."""
    _mutation_listeners.append((keeps, told))


def before_mutation(path: str) -> None:
    """Compute every pending store that would read ``path``, and copy every
    view of it, before it changes (through whichever path they read it)."""
    for keeps, told in _mutation_listeners:
        if keeps():
            for same in _same_folder(canonical(path)):
                told(same)
    records = list(_records.values())
    if not any(r.deferred is not None or r.copy is not None for r in records):
        return  # (nothing to look for: a loop of update_s pays little)
    paths = _same_folder(canonical(path))
    # the pending stores first: one that can never be computed lets go of the views it holds
    for record in records:
        waiting = record.deferred
        if waiting is not None and any(waiting.reads(p) for p in paths):
            waiting.before_change()
    with _lock:
        _doom_dead_owners()
    for record in records:
        copy = record.copy
        if copy is not None and any(copy.reads(p) for p in paths) and record.state in (
                State.UNCLAIMED, State.OWNED):
            try:  # (a view nothing holds any more is not copied: the next sweep drops it)
                own_store(record.key)
            except Exception as err:
                if hasattr(err, "add_note"):
                    getattr(err, "add_note")(
                        f"(raised copying a view of {paths[0]!r} before it changes: a view keeps "
                        "its values; delete the views of it to change it)")
                raise


def spec(handle) -> StoreSpec:
    """The store behind a handle, for a callback about to read it (a pending
    store is computed first)."""
    record = _records.get(int(handle))
    if record is not None and record.state is not State.TRASH and record.state is not State.MADE:
        waiting = record.deferred  # (read before the spec: fulfil sets the spec first)
        store = record.spec
        if store is not None:
            return store
        if waiting is not None:
            return waiting.compute()
    raise RuntimeError(
        f"jask store handle {int(handle)} no longer exists: its last DiskArray was "
        "deleted while a compiled function still referred to it (for example a "
        "DiskArray closed over by a jitted function). Pass DiskArrays as arguments "
        "instead.") from None


def claim(handle: int) -> Owner:
    """The Owner of a store, making one if the store has none yet."""
    handle = int(handle)
    waiting = deferred(handle)
    if waiting is None or not waiting.owned_lazily:
        spec(handle)  # a pending store is computed here, outside the lock
    with _lock:
        record = _records.get(handle)
        if record is None or record.state is State.TRASH:
            spec(handle)  # swept meanwhile: raises as a handle that no longer exists
        return record.claim()  # type: ignore[union-attr]


def sweep() -> int:
    """Delete every doomed store, and the made or unclaimed ones whose thread
    is done (see :func:`_done`); return how many registered stores went.

    Only safe once no program that could read those stores is running; the
    JAX layer calls it after ``jax.effects_barrier()``.
    """
    removed, dropped = _sweep_once()
    while dropped:  # a dropped computation let go of its inputs' Owners: they may be dead now
        del dropped
        more, dropped = _sweep_once()
        removed += more
    _empty_trash()
    return removed


def _sweep_once() -> tuple:
    """One round of :func:`sweep`: (how many stores went, the computations
    dropped, to be let go of outside the lock)."""
    with _lock:
        _doom_dead_owners()
        done = _done()
        dead = [r for r in _unsettled() if r.unreachable(done)]
        if not dead:
            return 0, []
        going = set(dead)
        trashed = State.TRASH
        views = [r for r in list(_records.values()) if r.base is not None]
        kept = {r.base for r in views  # views' bases: kept while their views live
                if r.state is not trashed and r not in going}
        # and every store a pending computation still reads: one of a view's base
        # reads that base even once the view has a copy of its own (x.T's where)
        readers = [r.deferred for r in list(_records.values())
                   if r.deferred is not None and r not in going]
        removed, dropped = 0, []
        # a finalizer run by a collection inside this sweep only queues its Owner's
        # reference: a store doomed meanwhile is doomed at the next sweep
        for record in dead:
            if record in kept or record.spec is not None and any(
                    d.reads(record.spec.path) for d in readers):
                continue  # (doomed or unclaimed until its views and readers go)
            if record.spec is None and record.state is not State.MADE:
                dropped.append(record.drop())  # pending: never computed
            else:
                removed += record.spec is not None
                record.to_trash()
    return removed, dropped


def _empty_trash() -> None:
    """Delete the trash's stores, each forgotten only once deleted. A folder
    a live store still names (a Ctrl-C between two steps of a transition
    left its old record behind) is never deleted."""
    while True:
        with _lock:
            done = _done()
            batch = [r for r in _unsettled() if r.state is State.TRASH
                     and (r.thread == 0 or done(r.thread))]
            if not batch:
                return
            # a store others still name is kept, and so is what is cached about a
            # user's store while any array of it (a view's base) lives
            held = {r.spec.path for r in list(_records.values())
                    if r.spec is not None and r.state is not State.TRASH
                    } if any(r.shared or (r.spec is not None and not r.spec.managed)
                             for r in batch) else set()
            for record in batch:
                record.take_out()
        for record in batch:
            store = record.spec
            if record.shared and (store.path if store is not None else record.path) in held:
                pass
            elif store is None:  # made by an op interrupted before registering it
                trash.remove_now(record.path)
            elif store.managed:
                _delete(store, later=True)  # reused or deleted in the background
            elif store.path not in held:
                tiles.forget(store.path)
            with _lock:
                record.deleted()


def has_garbage() -> bool:
    """Whether :func:`sweep` has anything to do."""
    with _lock:
        _doom_dead_owners()
        unsettled = _unsettled()
        if not unsettled:
            return False
        done = _done()
        return any(r.state is State.TRASH or r.unreachable(done) for r in unsettled)


def live_paths() -> list[str]:
    """Paths of the managed stores not yet deleted (for tests and debugging)."""
    with _lock:
        return sorted(r.spec.path for r in _records.values()
                      if r.spec is not None and r.spec.managed and r.state is not State.TRASH)
