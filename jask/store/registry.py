"""The registry of stores: handles, owners and lifetimes.

Every array jask computes lives in a Zarr v3 store of its own. A store is
known to the rest of jask by an integer *handle*: that integer is what flows
through a compiled JAX program, and a callback turns it back into a path
(:func:`spec`) when it runs.

Lifetime. A store made by jask is deleted once nothing can reach it:

* an :class:`Owner` is held by every Python ``DiskArray`` whose handle is
  concrete; when the last one is garbage collected, the store is *doomed*;
* a store created inside a compiled program starts *pending*; it is
  *claimed* (given an Owner) if the program returns it, and otherwise is
  garbage once the program has finished. Pending stores are kept per
  thread: a safe point of one thread never removes those of a compiled call
  another thread is running (or has just returned from, claims still to
  come); they go at that thread's next safe point, or once it has ended.

Doomed and unclaimed pending stores are removed by :func:`sweep`, which the
JAX layer calls at safe points (after waiting for running programs), never
while a program may still read them.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import os
import threading
import uuid
import weakref

import numpy as np
import zarr

from jask.store.layout import create_at
from jask.store.spec import GRAD_SUFFIX, StoreSpec, check_metadata, plain_v3_metadata, stored_nbytes

from . import chunkio, durability, recycle, sessions, trash, versions

__all__ = ["Owner", "create", "register", "register_external", "spec", "claim", "sweep",
           "live_paths", "in_callback", "Deferred"]


class Owner:
    """Held by every DiskArray of one store; the store dies with the last one.

    An eager op's deferred result is owned before it is computed: its
    ``spec`` computes it (an observation, see :mod:`jask.engine.lazy`)."""

    __slots__ = ("handle", "__weakref__")

    def __init__(self, handle: int):
        self.handle = int(handle)

    @property
    def spec(self) -> StoreSpec:
        return spec(self.handle)

    @property
    def pending(self) -> bool:
        """Whether the store is still to be computed (a deferred eager result)."""
        return self.handle in _deferred


_lock = threading.RLock()
_handles = itertools.count(1)
_specs: dict[int, StoreSpec] = {}           # every store not yet deleted
_owners: dict[int, "_OwnerRef"] = {}       # handle -> its Owner, weakly
_pending: dict[int, int] = {}               # made in a program, not claimed yet -> thread
_doomed: set[int] = set()                   # no owner left
_unclaimed: dict = {}                       # handle or path -> thread made it, not owned yet
_trash: list = []                           # off the books, not deleted yet (paths, specs)
_deferred: dict[int, "Deferred"] = {}      # handle -> its computation, not run yet
_bases: dict[int, int] = {}                 # view handle -> its base's (kept alive by it)
_views: dict[int, "Deferred"] = {}         # view handle -> its copy, made before its base changes
_copying = threading.Lock()
_local = threading.local()


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


def _owner(handle: int) -> Owner | None:
    """The live Owner of a store, if it has one."""
    ref = _owners.get(handle)
    return ref() if ref is not None else None


def _doom_dead_owners() -> None:
    """Doom the stores whose Owner died since the last call (caller holds ``_lock``)."""
    while _dead_owners:
        ref = _dead_owners[0]  # taken off only once done: a Ctrl-C here leaves it to the next call
        if _owners.get(ref.handle) is ref:  # not owned again since
            if ref.handle in _specs or ref.handle in _deferred:
                _doomed.add(ref.handle)
            del _owners[ref.handle]
        _dead_owners.popleft()


def create(scratch_dir: str, name: str, shape, dtype, chunks, *, grad: bool = False) -> StoreSpec:
    """Make an empty store in this process's scratch folder, unregistered.

    The caller fills it and then :func:`register` s it; a store that is never
    registered (its op failed) is removed by :func:`discard`.
    """
    folder = sessions.session_dir(scratch_dir)
    suffix = GRAD_SUFFIX if grad else ".zarr"
    path = os.path.join(folder, f"{name}-{uuid.uuid4().hex[:12]}{suffix}")
    with _lock:  # registered or discarded by this thread next, unless Ctrl-C comes first
        _unclaimed[path] = threading.get_ident()
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


def register(store: StoreSpec, *, pending: bool) -> StoreSpec:
    """Give a completed store a handle. ``pending`` stores await a claim."""
    with _lock:
        handle = next(_handles)
        store = StoreSpec(store.path, store.shape, store.dtype, store.chunks, handle,
                          store.managed, store.view)
        # Ctrl-C may land between any two lines: the handle is tracked before
        # the path's record goes, so sweep always finds the store.
        if pending:  # a callback runs on the thread that called the program (on CPU)
            _pending[handle] = threading.get_ident()
        else:  # claimed by this thread next, unless an exception (Ctrl-C) comes first
            _unclaimed[handle] = threading.get_ident()
        _specs[handle] = store
        _unclaimed.pop(store.path, None)
        return store


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


def discard(store: StoreSpec, *, later: bool = False) -> None:
    """Remove a store that never became visible (its op failed), or, with
    ``later``, a garbage store: its path goes now, its files in the
    background (:mod:`jask.store.trash`)."""
    chunkio.forget(store.path)
    if not sessions.owns(store.path):
        pass  # opened by path, or a forked parent's: never deleted (jask.store.sessions)
    elif later and plain_v3_metadata(store.shape, store.dtype, store.chunks) is not None:
        recycle.give(store.path, store.shape, store.dtype, store.chunks, stored_nbytes(store))
    elif later:
        trash.remove(store.path)
    else:
        trash.remove_now(store.path)  # a folder, or keys in object storage
    with _lock:
        _unclaimed.pop(store.path, None)


def register_view(view: StoreSpec, copy: "Deferred", *, pending: bool) -> StoreSpec:
    """Give a view (:mod:`jask.store.views`) a handle; its base stays alive
    while it is, and ``copy.compute()`` (an unregistered copy of the view)
    replaces it before anything writes its base (:func:`before_mutation`)."""
    assert view.view is not None and view.view.base.handle, "a view of a registered store"
    with _lock:
        store = register(view, pending=pending)
        _bases[store.handle] = view.view.base.handle
        _views[store.handle] = copy
        return store


def materialize(handle) -> StoreSpec:
    """The store behind a handle, a view copied into a store of its own first
    (once; the handle keeps its identity and owners)."""
    handle = int(handle)
    with _copying:
        if handle not in _views:
            return spec(handle)
        copy = _views[handle].compute()
        with _lock:
            _views.pop(handle, None)
            _bases.pop(handle, None)
        return fulfil(handle, copy)


def register_external(path) -> StoreSpec:
    """Register an existing Zarr array that jask must never delete.

    The store is known by its resolved path (symlinks followed): opened
    through a link and through its real path it is one store, and the layout
    it was opened with is remembered (:func:`jask.store.versions.opened`).
    Raises FileNotFoundError, naming the path, when there is no Zarr array.
    """
    path = versions.resolved(os.fspath(path))
    sessions.keep(path)  # even a scratch store: a DiskArray of the user's reads it now
    durability.recover(path)  # finish an update_ a killed process left
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no Zarr array at {path!r} (no such folder)")
    layout = versions.layout(path)  # before zarr reads the metadata: a later change is seen
    try:
        arr = zarr.open_array(path, mode="r")
    except Exception as err:  # zarr raises several kinds for a folder that is no array
        raise FileNotFoundError(f"{path!r} is not a Zarr array: {err}") from None
    chunks, dtype = check_metadata(path, arr.shape, arr.chunks, arr.dtype)  # before any planning
    chunkio.forget(path)  # a store written anew in this folder: its own layout
    store = StoreSpec(path, tuple(arr.shape), dtype, chunks, managed=False)
    versions.opened(store, layout)
    return register(store, pending=False)


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
    """A handle for a store to be computed when first needed; pending (a
    garbage collected one is simply never computed)."""
    with _lock:
        handle = next(_handles)
        _pending[handle] = threading.get_ident()  # first: swept if Ctrl-C comes next
        _deferred[handle] = deferred
        return handle


def deferred(handle) -> Deferred | None:
    """The computation behind a handle not computed yet, else None."""
    return _deferred.get(int(handle))


def fulfil(handle: int, store: StoreSpec) -> StoreSpec:
    """Give a lazy handle the store its computation wrote. One nothing owns
    (computed as another one's input, its DiskArray gone) is pending for
    this thread: it goes at this thread's next safe point, once the
    computation reading it is over, never at another thread's."""
    with _lock:
        store = StoreSpec(store.path, store.shape, store.dtype, store.chunks, handle,
                          store.managed)
        _specs[handle] = store
        _unclaimed.pop(store.path, None)
        _deferred.pop(handle, None)
        _doom_dead_owners()
        if _owner(handle) is None:
            _doomed.discard(handle)
            _pending[handle] = threading.get_ident()
        return store


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
        old = _specs[int(handle)]
        new = StoreSpec(store.path, old.shape, old.dtype, store.chunks, int(handle), True)
        _specs[int(handle)] = new
        _unclaimed.pop(store.path, None)
        _trash.append(old)
        return new


def owned_deferred() -> list:
    """The computations of lazy stores something still owns (not run yet)."""
    with _lock:
        _doom_dead_owners()
        return [d for h, d in _deferred.items() if h in _owners]


def has_deferred() -> bool:
    """Whether any store awaits its computation (cheap: no lock)."""
    return bool(_deferred)


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
        others = {s.path for s in _specs.values()
                  if not s.managed and s.path != path and "://" not in s.path}
    found = [path]
    for other in sorted(others):
        try:
            there = os.stat(other)
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
            found.append(other)
    return found


def before_mutation(path: str) -> None:
    """Compute every lazy store that would read ``path``, and copy every view
    of it, before it changes (through whichever path they read it)."""
    if not _deferred and not _views:
        return  # (nothing to look for: a loop of update_s pays nothing)
    paths = _same_folder(canonical(path))
    # the lazy stores first: one that can never be computed lets go of the views it holds
    for handle, waiting in list(_deferred.items()):
        if handle in _deferred and any(waiting.reads(p) for p in paths):
            waiting.before_change()
    with _lock:
        _doom_dead_owners()
    for handle, copy in list(_views.items()):
        if any(copy.reads(p) for p in paths) and not (handle in _doomed
                                                     and handle not in _owners):
            try:  # (a view nothing holds any more is not copied: the next sweep drops it)
                materialize(handle)
            except Exception as err:
                if hasattr(err, "add_note"):
                    getattr(err, "add_note")(
                        f"(raised copying a view of {paths[0]!r} before it changes: a view keeps "
                        "its values; delete the views of it to change it)")
                raise


def spec(handle) -> StoreSpec:
    """The store behind a handle, for a callback about to read it (a lazy
    store is computed first)."""
    try:
        return _specs[int(handle)]
    except KeyError:
        waiting = _deferred.get(int(handle))
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
    waiting = _deferred.get(handle)
    if waiting is None or not waiting.owned_lazily:
        spec(handle)  # a lazy store is computed here, outside the lock
    with _lock:
        owner = _owner(handle)
        if owner is None:
            owner = Owner(handle)
            _owners[handle] = _OwnerRef(owner)
        _pending.pop(handle, None)
        _doomed.discard(handle)
        _unclaimed.pop(handle, None)
        return owner


def sweep() -> int:
    """Delete every doomed or unclaimed pending store; return how many.

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
        abandoned = _abandoned()
        abandoned_handles = {h for h in abandoned if isinstance(h, int)}
        dead = (_doomed | _unclaimed_pending() | abandoned_handles) - set(_owners.keys())
        kept = {b for v, b in _bases.items() if v in _specs and v not in dead}  # views' bases
        dead -= kept
        for h in dead:
            _bases.pop(h, None)
            _views.pop(h, None)
        removed = [_specs[h] for h in dead if h in _specs]
        # into the trash before off the books: a Ctrl-C below leaves them to the next sweep
        _trash.extend([p for p in abandoned - dead if isinstance(p, str)] + removed)
        for h in dead:
            _specs.pop(h, None)
        dropped = [_deferred.pop(h) for h in dead if h in _deferred]  # never computed
        # only those deleted: a finalizer run by a collection inside this sweep (the lock is
        # reentrant) dooms a store after 'dead' was taken, and it must stay doomed
        _doomed.difference_update(dead)  # (views' bases stay doomed until their views go)
        for h in dead:
            _pending.pop(h, None)
        for key in dead | abandoned:
            _unclaimed.pop(key, None)
    return len(removed), dropped


def _empty_trash() -> None:
    """Delete the trash's stores, each taken out only once deleted."""
    while True:
        with _lock:
            if not _trash:
                return
            item = _trash[0]
        if isinstance(item, str):  # made by an op interrupted before registering it
            if sessions.owns(item):
                trash.remove_now(item)
        elif item.managed:
            discard(item, later=True)  # reused or deleted in the background
        else:
            chunkio.forget(item.path)
        with _lock, contextlib.suppress(ValueError):  # another thread may have done it
            _trash.remove(item)


def _finished(threads) -> set:
    """Of ``threads`` (idents), this one (at a safe point, so between ops and
    compiled calls) and those that ended."""
    here = threading.get_ident()
    alive = {t.ident for t in threading.enumerate()}
    return {t for t in threads if t == here or t not in alive}


def _unclaimed_pending() -> set:
    """Pending stores whose program is over and whose claim never came: those
    made by this thread's calls or by threads that ended. Another thread's
    are left alone: its compiled call may be running, or have returned
    without claiming its outputs yet."""
    done = _finished(set(_pending.values()))
    return {h for h, t in _pending.items() if t in done}


def _abandoned() -> set:
    """Stores made or registered eagerly whose registration or claim never
    came (handles, or paths of stores never registered): those of this
    thread (which is at a safe point, so between ops) and of threads that
    ended."""
    done = _finished(set(_unclaimed.values()))
    return {h for h, t in _unclaimed.items() if t in done}


def has_garbage() -> bool:
    """Whether :func:`sweep` has anything to do."""
    with _lock:
        _doom_dead_owners()
        return bool(_doomed or _trash or (_pending and _unclaimed_pending())
                    or (_unclaimed and _abandoned()))


def live_paths() -> list[str]:
    """Paths of the managed stores not yet deleted (for tests and debugging)."""
    with _lock:
        return sorted(s.path for s in _specs.values() if s.managed)


