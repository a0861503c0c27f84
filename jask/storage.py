"""Zarr stores, the scratch directory, handles and store lifetimes.

Every array jask computes lives in a Zarr v3 store of its own. A store is
known to the rest of jask by an integer *handle*: that integer is what flows
through a compiled JAX program, and a callback turns it back into a path
(:func:`spec`) when it runs.

Lifetime. A store made by jask is deleted once nothing can reach it:

* an :class:`Owner` is held by every Python ``DiskArray`` whose handle is
  concrete; when the last one is garbage collected, the store is *doomed*;
* a store created inside a compiled program starts *pending*; it is
  *claimed* (given an Owner) if the program returns it, and otherwise is
  garbage once the program has finished.

Doomed and unclaimed pending stores are removed by :func:`sweep`, which the
JAX layer calls at safe points (after waiting for running programs), never
while a program may still read them.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import itertools
import json
import math
import os
import shutil
import socket
import threading
import uuid
import weakref
from dataclasses import dataclass, field

import numpy as np
import zarr

__all__ = ["StoreSpec", "Owner", "create", "register_external", "spec", "claim",
           "sweep", "live_paths", "open_array", "forget_array", "in_callback",
           "DiskFullError", "StoreChangedError"]

#: Suffix of every store holding a gradient (a cotangent).
GRAD_SUFFIX = ".grad"


@dataclass(frozen=True)
class StoreSpec:
    """Where an array lives and how it is laid out. Immutable, picklable."""

    path: str
    shape: tuple
    dtype: np.dtype
    chunks: tuple
    handle: int = 0
    managed: bool = True  # jask made it and may delete it


@dataclass(eq=False)
class Owner:
    """Held by every DiskArray of one store; the store dies with the last one."""

    spec: StoreSpec
    _finalizer: weakref.finalize = field(init=False, repr=False)

    def __post_init__(self):
        self._finalizer = weakref.finalize(self, _doom, self.spec.handle)


_lock = threading.RLock()
_handles = itertools.count(1)
_specs: dict[int, StoreSpec] = {}           # every store not yet deleted
_owners: "weakref.WeakValueDictionary[int, Owner]" = weakref.WeakValueDictionary()
_pending: set[int] = set()                  # made in a program, not claimed yet
_doomed: set[int] = set()                   # no owner left
_unclaimed: dict = {}                       # handle or path -> thread made it, not owned yet
_trash: list = []                           # off the books, not deleted yet (paths, specs)
_sessions: dict[str, str] = {}              # scratch_dir -> this process's folder
_lazy: dict[int, "Lazy"] = {}              # handle -> its computation, not run yet
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


def _doom(handle: int) -> None:
    with _lock:
        if handle in _specs:
            _doomed.add(handle)


def session_dir(scratch_dir: str) -> str:
    """This process's folder inside ``scratch_dir``, made on first use.

    A live session holds an exclusive ``flock`` on ``<folder>.lock`` for as
    long as the process runs (the kernel releases it when the process dies,
    however it dies). Session folders whose lock is free are removed here;
    nothing else in ``scratch_dir`` is ever touched.
    """
    with _lock:
        folder = _sessions.get(scratch_dir)
        if folder is not None:
            return folder
        os.makedirs(scratch_dir, exist_ok=True)
        host = socket.gethostname()
        _remove_stale_sessions(scratch_dir, host)
        folder = os.path.join(scratch_dir, f"session-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        # Lock first, folder second: a folder never exists without a held lock.
        fd = os.open(folder + _LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _session_locks[folder] = fd
        except OSError:  # no flock here (some network filesystems): PIDs only
            os.close(fd)
            os.unlink(folder + _LOCK_SUFFIX)
        os.makedirs(folder)
        _sessions[scratch_dir] = folder
        return folder


_LOCK_SUFFIX = ".lock"
_session_locks: dict[str, int] = {}


def _remove_stale_sessions(scratch_dir: str, host: str) -> None:
    prefix = f"session-{host}-"
    for name in os.listdir(scratch_dir):
        path = os.path.join(scratch_dir, name)
        if not name.startswith(prefix) or name.endswith(_LOCK_SUFFIX) or not os.path.isdir(path):
            continue
        if os.path.exists(path + _LOCK_SUFFIX):
            _remove_if_unlocked(path)
        else:  # a folder of an older jask, which marked liveness by PID only
            pid = name[len(prefix):].split("-")[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)


def _remove_if_unlocked(folder: str) -> None:
    try:
        fd = os.open(folder + _LOCK_SUFFIX, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return  # its process is alive
    try:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder + _LOCK_SUFFIX)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@atexit.register
def _remove_sessions() -> None:
    for folder in list(_sessions.values()):
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(folder + _LOCK_SUFFIX)
        fd = _session_locks.pop(folder, None)
        if fd is not None:
            os.close(fd)


# --- disk space -----------------------------------------------------------

class DiskFullError(OSError):
    """Not enough free disk space for an op's output.

    Raised before anything is written when the output's size is known and
    does not fit, or when the disk fills up during the op (the partial
    output is then removed). The message names the folder, the bytes needed
    and the bytes free; ``errno`` is ``ENOSPC``, so ``except OSError`` code
    keeps working.

    Example:
      >>> import errno, jask
      >>> issubclass(jask.DiskFullError, OSError)
      True
      >>> try:
      ...     check_space("/", 2**80, "add")
      ... except jask.DiskFullError as err:
      ...     err.errno == errno.ENOSPC
      True
    """


def stored_nbytes(store: StoreSpec) -> int:
    """Bytes the chunk files of an uncompressed store take (edge chunks are
    stored whole).

    Example:
      >>> stored_nbytes(StoreSpec("x", (5, 4), np.dtype("float32"), (2, 4)))
      96
    """
    n_chunks = (math.prod(-(-s // c) for s, c in zip(store.shape, store.chunks))
                if store.shape else 1)
    return n_chunks * math.prod(store.chunks) * store.dtype.itemsize


def _free_bytes(folder: str) -> int:
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):  # made on first write
        probe = os.path.dirname(probe)
    return shutil.disk_usage(probe).free


def _full_error(folder: str, needed: int, op: str) -> DiskFullError:
    free = _free_bytes(folder)
    return DiskFullError(
        errno.ENOSPC,
        f"{op}: not enough disk space in {folder!r}: the output needs {needed:,} bytes "
        f"and {free:,} bytes are free. Free some space (or choose another scratch_dir "
        "with jask.set_memory_budget) and run the op again; nothing was kept of it")


def check_space(folder: str, needed: int, op: str) -> None:
    """Refuse, before writing, an output that cannot fit in ``folder``."""
    if _free_bytes(folder) < needed:
        from jask import recycle, trash  # garbage kept for reuse or still being deleted
        recycle.clear()
        trash.wait()
        if _free_bytes(folder) < needed:
            raise _full_error(folder, needed, op)


@contextlib.contextmanager
def space_errors(folder: str, needed: int, op: str):
    """Turn a disk filling up mid-op (another writer took the space) into a
    :class:`DiskFullError` that names the folder and the sizes."""
    try:
        yield
    except OSError as err:
        if err.errno != errno.ENOSPC or isinstance(err, DiskFullError):
            raise
        raise _full_error(folder, needed, op) from err


# --- stores changed by another writer -------------------------------------

class StoreChangedError(RuntimeError):
    """An input store was replaced (by ``update_`` in another process or
    thread) while an op read it; the op's result, which could mix old and
    new values, was discarded. Run the op again.

    Example:
      >>> import jask
      >>> issubclass(jask.StoreChangedError, RuntimeError)
      True
    """


def stamp(stores) -> list:
    """What identifies the current contents of the user's stores among ``stores``.

    ``update_`` (in any process) puts a new folder at the store's path, so
    the folder's inode changes whenever its values are replaced.
    """
    return [(s.path, _inode(s.path)) for s in stores if not s.managed]


def _inode(path: str):
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def check_unchanged(stamps: list, op: str) -> None:
    """Raise :class:`StoreChangedError` if a stamped store was replaced."""
    for path, inode in stamps:
        if _inode(path) != inode:
            forget_array(path)
            raise StoreChangedError(
                f"{op}: the store {path!r} was replaced by another writer while this op "
                "read it, so the result could mix old and new values; it was discarded. "
                "Run the op again once the other writer is done.")


def create(scratch_dir: str, name: str, shape, dtype, chunks, *, grad: bool = False) -> StoreSpec:
    """Make an empty store in this process's scratch folder, unregistered.

    The caller fills it and then :func:`register` s it; a store that is never
    registered (its op failed) is removed by :func:`discard`.
    """
    folder = session_dir(scratch_dir)
    suffix = GRAD_SUFFIX if grad else ".zarr"
    path = os.path.join(folder, f"{name}-{uuid.uuid4().hex[:12]}{suffix}")
    with _lock:  # registered or discarded by this thread next, unless Ctrl-C comes first
        _unclaimed[path] = threading.get_ident()
    if _reuse(path, shape, dtype, chunks):  # a garbage store's folder (jask.recycle)
        return StoreSpec(path, tuple(int(s) for s in shape), np.dtype(dtype), tuple(chunks))
    return create_at(path, shape, dtype, chunks)


def _reuse(path: str, shape, dtype, chunks) -> bool:
    from jask import recycle
    shape, dtype, chunks = tuple(int(s) for s in shape), np.dtype(dtype), tuple(chunks)
    if _plain_v3_metadata(shape, dtype, chunks) is None or not recycle.take(
            path, shape, dtype, chunks):
        return False
    if plain_created is not None:
        plain_created(path, shape, dtype, chunks)
    return True


def create_at(path: str, shape, dtype, chunks) -> StoreSpec:
    """Make an empty uncompressed Zarr v3 array at ``path`` (jask's layout)."""
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    metadata = _plain_v3_metadata(shape, dtype, tuple(chunks))
    if metadata is None:
        zarr.create_array(store=path, shape=shape, chunks=tuple(chunks) or None, dtype=dtype,
                          compressors=None, fill_value=0, zarr_format=3)
    else:
        os.makedirs(path)
        with open(os.path.join(path, "zarr.json"), "w") as f:
            f.write(metadata)
        if plain_created is not None:
            plain_created(path, shape, dtype, tuple(chunks))
    return StoreSpec(path, shape, dtype, tuple(chunks))


#: Set by :mod:`jask.chunkio`: told of each store made in jask's plain layout,
#: so tile I/O knows its files without asking Zarr (about 2 ms a store).
plain_created = None


# Numeric dtypes whose Zarr v3 name is numpy's name (the spec's core types).
_V3_CORE_TYPES = {"int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                  "float32", "float64", "complex64", "complex128"}


@functools.lru_cache(maxsize=256)
def _plain_v3_metadata(shape, dtype, chunks) -> str | None:
    """``zarr.json`` of an uncompressed, C-order Zarr v3 array, per the spec.

    Writing it directly takes 0.2 ms; ``zarr.create_array`` took 2.4 ms,
    most of an eager op on small arrays. None for dtypes outside the core
    set, which go through zarr-python. Chunk keys are ``c.0.1``: every
    chunk file sits in the store's own folder, so making and deleting a
    store takes one directory, not one per leading chunk index.
    """
    if dtype.name not in _V3_CORE_TYPES or not shape or not np.little_endian:
        return None
    fill = 0.0 if dtype.kind == "f" else ([0.0, 0.0] if dtype.kind == "c" else 0)
    return json.dumps({
        "shape": list(shape),
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
        "fill_value": fill,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }, indent=2)


def register(store: StoreSpec, *, pending: bool) -> StoreSpec:
    """Give a completed store a handle. ``pending`` stores await a claim."""
    with _lock:
        handle = next(_handles)
        store = StoreSpec(store.path, store.shape, store.dtype, store.chunks, handle,
                          store.managed)
        # Ctrl-C may land between any two lines: the handle is tracked before
        # the path's record goes, so sweep always finds the store.
        if pending:
            _pending.add(handle)
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
    background (:mod:`jask.trash`)."""
    forget_array(store.path)
    if later and _plain_v3_metadata(store.shape, store.dtype, store.chunks) is not None:
        from jask import recycle  # made by create_at: reusable
        recycle.give(store.path, store.shape, store.dtype, store.chunks, stored_nbytes(store))
    elif later:
        from jask import trash
        trash.remove(store.path)
    else:
        shutil.rmtree(store.path, ignore_errors=True)
    with _lock:
        _unclaimed.pop(store.path, None)


def register_external(path) -> StoreSpec:
    """Register an existing Zarr array that jask must never delete.

    Raises FileNotFoundError, naming the path, when there is no Zarr array.
    """
    path = os.fspath(path)
    from jask import durability
    durability.recover(path)  # finish an update_ a killed process left
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no Zarr array at {path!r} (no such folder)")
    try:
        arr = zarr.open_array(path, mode="r")
    except Exception as err:  # zarr raises several kinds for a folder that is no array
        raise FileNotFoundError(f"{path!r} is not a Zarr array: {err}") from None
    store = StoreSpec(os.path.abspath(path), tuple(arr.shape), np.dtype(arr.dtype),
                      tuple(arr.chunks), managed=False)
    return register(store, pending=False)


class Lazy:
    """A store not computed yet (see :mod:`jask.lazy`): :func:`spec` runs it."""

    def materialize(self) -> StoreSpec:
        raise NotImplementedError

    def reads(self, path: str) -> bool:
        """Whether computing it would read the store at ``path``."""
        raise NotImplementedError


def register_lazy(lazy: Lazy) -> int:
    """A handle for a store to be computed when first needed; pending (a
    garbage collected one is simply never computed)."""
    with _lock:
        handle = next(_handles)
        _lazy[handle] = lazy
        _pending.add(handle)
        return handle


def lazy(handle) -> Lazy | None:
    """The computation behind a handle not computed yet, else None."""
    return _lazy.get(int(handle))


def fulfil(handle: int, store: StoreSpec) -> StoreSpec:
    """Give a lazy handle the store its computation wrote."""
    with _lock:
        store = StoreSpec(store.path, store.shape, store.dtype, store.chunks, handle,
                          store.managed)
        _specs[handle] = store
        _unclaimed.pop(store.path, None)
        _lazy.pop(handle, None)
        return store


def before_mutation(path: str) -> None:
    """Compute every lazy store that would read ``path``, before it changes."""
    path = os.path.abspath(path)
    for handle, pending in list(_lazy.items()):
        if handle in _lazy and pending.reads(path):
            pending.materialize()


def spec(handle) -> StoreSpec:
    """The store behind a handle, for a callback about to read it (a lazy
    store is computed first)."""
    try:
        return _specs[int(handle)]
    except KeyError:
        pending = _lazy.get(int(handle))
        if pending is not None:
            return pending.materialize()
        raise RuntimeError(
            f"jask store handle {int(handle)} no longer exists: its last DiskArray was "
            "deleted while a compiled function still referred to it (for example a "
            "DiskArray closed over by a jitted function). Pass DiskArrays as arguments "
            "instead.") from None


def claim(handle: int) -> Owner:
    """The Owner of a store, making one if the store has none yet."""
    handle = int(handle)
    store = spec(handle)  # a lazy store is computed here, outside the lock
    with _lock:
        owner = _owners.get(handle)
        if owner is None:
            owner = Owner(store)
            _owners[handle] = owner
        _pending.discard(handle)
        _doomed.discard(handle)
        _unclaimed.pop(handle, None)
        return owner


def sweep() -> int:
    """Delete every doomed or unclaimed pending store; return how many.

    Only safe once no program that could read those stores is running; the
    JAX layer calls it after ``jax.effects_barrier()``.
    """
    with _lock:
        abandoned = _abandoned()
        abandoned_handles = {h for h in abandoned if isinstance(h, int)}
        dead = (_doomed | _pending | abandoned_handles) - set(_owners.keys())
        removed = [_specs[h] for h in dead if h in _specs]
        # into the trash before off the books: a Ctrl-C below leaves them to the next sweep
        _trash.extend([p for p in abandoned - dead if isinstance(p, str)] + removed)
        for h in dead:
            _specs.pop(h, None)
            _lazy.pop(h, None)  # never needed: never computed
        _doomed.clear()
        _pending.difference_update(dead)
        for key in dead | abandoned:
            _unclaimed.pop(key, None)
    _empty_trash()
    return len(removed)


def _empty_trash() -> None:
    """Delete the trash's stores, each taken out only once deleted."""
    while True:
        with _lock:
            if not _trash:
                return
            item = _trash[0]
        if isinstance(item, str):  # made by an op interrupted before registering it
            shutil.rmtree(item, ignore_errors=True)
        elif item.managed:
            discard(item, later=True)  # reused or deleted in the background
        else:
            forget_array(item.path)
        with _lock, contextlib.suppress(ValueError):  # another thread may have done it
            _trash.remove(item)


def _abandoned() -> set:
    """Stores made or registered eagerly whose registration or claim never
    came (handles, or paths of stores never registered): those of this
    thread (which is at a safe point, so between ops) and of threads that
    ended."""
    here = threading.get_ident()
    alive = {t.ident for t in threading.enumerate()}
    return {h for h, t in _unclaimed.items() if t == here or t not in alive}


def has_garbage() -> bool:
    """Whether :func:`sweep` has anything to do."""
    return bool(_doomed or _pending or _trash or (_unclaimed and _abandoned()))


def live_paths() -> list[str]:
    """Paths of the managed stores not yet deleted (for tests and debugging)."""
    with _lock:
        return sorted(s.path for s in _specs.values() if s.managed)


# --- opened zarr arrays, cached per process (also on Dask workers) ---------

_arrays: dict[str, zarr.Array] = {}
_arrays_lock = threading.Lock()
_MAX_CACHED_ARRAYS = 256


def open_array(path: str) -> zarr.Array:
    """A read/write ``zarr.Array`` for ``path``, opened once per process."""
    arr = _arrays.get(path)
    if arr is None:
        arr = zarr.open_array(path, mode="r+")
        if writes_every_chunk(path):  # so that a missing chunk file means damage
            arr = arr.with_config({"write_empty_chunks": True})  # type: ignore[call-overload]
        with _arrays_lock:
            if len(_arrays) >= _MAX_CACHED_ARRAYS:
                _arrays.pop(next(iter(_arrays)))
            _arrays[path] = arr
    return arr


def writes_every_chunk(path: str) -> bool:
    """Whether the store at ``path`` is one of jask's own (in a session
    folder), whose every chunk file jask writes: there, unlike in Zarr
    stores in general, a missing chunk file is damage, not the fill value.

    Example:
      >>> writes_every_chunk("/s/.jask_scratch/session-h-1-ab/add-1.zarr")
      True
      >>> writes_every_chunk("/data/features.zarr")
      False
    """
    return os.path.basename(os.path.dirname(os.path.abspath(path))).startswith("session-")


def forget_array(path: str) -> None:
    """Drop what is cached about a store that is gone or replaced."""
    from jask import chunkio
    with _arrays_lock:
        _arrays.pop(path, None)
    chunkio.forget(path)

