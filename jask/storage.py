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
import itertools
import json
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
           "sweep", "live_paths", "open_array", "forget_array", "in_callback"]

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
_sessions: dict[str, str] = {}              # scratch_dir -> this process's folder
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

    Folders left by processes of this host that no longer run are removed.
    """
    with _lock:
        folder = _sessions.get(scratch_dir)
        if folder is not None:
            return folder
        os.makedirs(scratch_dir, exist_ok=True)
        host = socket.gethostname()
        _remove_stale_sessions(scratch_dir, host)
        folder = os.path.join(scratch_dir, f"session-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.makedirs(folder)
        _sessions[scratch_dir] = folder
        return folder


def _remove_stale_sessions(scratch_dir: str, host: str) -> None:
    prefix = f"session-{host}-"
    for name in os.listdir(scratch_dir):
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix):].split("-")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(os.path.join(scratch_dir, name), ignore_errors=True)


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


def create(scratch_dir: str, name: str, shape, dtype, chunks, *, grad: bool = False) -> StoreSpec:
    """Make an empty store in this process's scratch folder, unregistered.

    The caller fills it and then :func:`register` s it; a store that is never
    registered (its op failed) is removed by :func:`discard`.
    """
    folder = session_dir(scratch_dir)
    suffix = GRAD_SUFFIX if grad else ".zarr"
    return create_at(os.path.join(folder, f"{name}-{uuid.uuid4().hex[:12]}{suffix}"),
                     shape, dtype, chunks)


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
            json.dump(metadata, f, indent=2)
    return StoreSpec(path, shape, dtype, tuple(chunks))


# Numeric dtypes whose Zarr v3 name is numpy's name (the spec's core types).
_V3_CORE_TYPES = {"int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                  "float32", "float64", "complex64", "complex128"}


def _plain_v3_metadata(shape, dtype, chunks) -> dict | None:
    """``zarr.json`` of an uncompressed, C-order Zarr v3 array, per the spec.

    Writing it directly takes 0.2 ms; ``zarr.create_array`` took 2.4 ms,
    most of an eager op on small arrays. None for dtypes outside the core
    set, which go through zarr-python.
    """
    if dtype.name not in _V3_CORE_TYPES or not shape or not np.little_endian:
        return None
    fill = 0.0 if dtype.kind == "f" else ([0.0, 0.0] if dtype.kind == "c" else 0)
    return {
        "shape": list(shape),
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def register(store: StoreSpec, *, pending: bool) -> StoreSpec:
    """Give a completed store a handle. ``pending`` stores await a claim."""
    with _lock:
        handle = next(_handles)
        store = StoreSpec(store.path, store.shape, store.dtype, store.chunks, handle,
                          store.managed)
        _specs[handle] = store
        if pending:
            _pending.add(handle)
        return store


def discard(store: StoreSpec) -> None:
    """Remove a store that never became visible (its op failed)."""
    forget_array(store.path)
    shutil.rmtree(store.path, ignore_errors=True)


def register_external(path) -> StoreSpec:
    """Register an existing Zarr array that jask must never delete.

    Raises FileNotFoundError, naming the path, when there is no Zarr array.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no Zarr array at {path!r} (no such folder)")
    try:
        arr = zarr.open_array(path, mode="r")
    except Exception as err:  # zarr raises several kinds for a folder that is no array
        raise FileNotFoundError(f"{path!r} is not a Zarr array: {err}") from None
    store = StoreSpec(os.path.abspath(path), tuple(arr.shape), np.dtype(arr.dtype),
                      tuple(arr.chunks), managed=False)
    return register(store, pending=False)


def spec(handle) -> StoreSpec:
    """The store behind a handle, for a callback about to read it."""
    try:
        return _specs[int(handle)]
    except KeyError:
        raise RuntimeError(
            f"jask store handle {int(handle)} no longer exists: its last DiskArray was "
            "deleted while a compiled function still referred to it (for example a "
            "DiskArray closed over by a jitted function). Pass DiskArrays as arguments "
            "instead.") from None


def claim(handle: int) -> Owner:
    """The Owner of a store, making one if the store has none yet."""
    handle = int(handle)
    with _lock:
        owner = _owners.get(handle)
        if owner is None:
            owner = Owner(spec(handle))
            _owners[handle] = owner
        _pending.discard(handle)
        _doomed.discard(handle)
        return owner


def sweep() -> int:
    """Delete every doomed or unclaimed pending store; return how many.

    Only safe once no program that could read those stores is running; the
    JAX layer calls it after ``jax.effects_barrier()``.
    """
    with _lock:
        dead = (_doomed | _pending) - set(_owners.keys())
        removed = [_specs.pop(h) for h in dead if h in _specs]
        _doomed.clear()
        _pending.difference_update(dead)
    for store in removed:
        if store.managed:
            discard(store)
        else:
            forget_array(store.path)
    return len(removed)


def has_garbage() -> bool:
    """Whether :func:`sweep` has anything to do."""
    return bool(_doomed or _pending)


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
        with _arrays_lock:
            if len(_arrays) >= _MAX_CACHED_ARRAYS:
                _arrays.pop(next(iter(_arrays)))
            _arrays[path] = arr
    return arr


def forget_array(path: str) -> None:
    """Drop what is cached about a store that is gone or replaced."""
    from jask import chunkio
    with _arrays_lock:
        _arrays.pop(path, None)
    chunkio.forget(path)

