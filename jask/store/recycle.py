"""Reusing the folders of garbage stores for new stores of the same layout.

Making a store and deleting it cost a handful of directory operations
(a folder, its ``zarr.json``, one file per chunk), each of which took
0.3-2 ms on this machine's ext4 disk while other processes wrote: more than
the rest of an eager op on a small array, and tens of ms for an array of
tens of MB. A garbage store of jask's own plain layout is therefore kept
under a hidden ``.free-*`` name in its session folder, and the next store
of the same shape, dtype and chunks is that folder renamed: its
``zarr.json`` is already right and its chunk files are overwritten in place
(:func:`jask.store.chunkio.write`; jask writes every chunk of its stores before
it registers them, so no stale chunk survives into a result).

At most :data:`MAX_BYTES` of them are kept, and none on a disk with less
than four times that free; the rest go to :mod:`jask.store.trash`. :func:`clear`
(called by ``jask.collect()`` and when the disk is short of space) deletes
them all. Only stores this process owns (:meth:`~jask.store.location.Location.owned`)
are kept or removed:
a store opened by path is never reused under another array.

Stores in object storage (a scratch URL) are not kept: there is no rename,
and a PUT of a chunk under a new key costs what overwriting an old one
costs, so reuse would save nothing; they go to :mod:`jask.store.trash`.
"""
from __future__ import annotations

import os
import uuid

from jask.base import forks
from jask.store.location import location_of

from . import trash

__all__ = ["give", "take", "clear"]

#: Most bytes of chunk files kept for reuse per process.
MAX_BYTES = 256 * 2**20
#: Most folders kept for reuse per process.
MAX_STORES = 32

_lock = forks.lock()
_free: dict[tuple, list[str]] = {}  # layout key -> hidden folders
_sizes: dict[str, int] = {}
_held = [0]


def _key(folder: str, suffix: str, shape, dtype, chunks) -> tuple:
    return (folder, suffix, tuple(shape), str(dtype), tuple(chunks))


def give(path: str, shape, dtype, chunks, nbytes: int) -> None:
    """Keep the garbage store at ``path`` for reuse, or delete it in the
    background if the pool is full.

    Example:
      >>> import tempfile
      >>> from jask.store.kinds.local import sessions
      >>> d = sessions.session_dir(tempfile.mkdtemp())
      >>> os.makedirs(os.path.join(d, "a-1.zarr"))
      >>> give(os.path.join(d, "a-1.zarr"), (2,), "float32", (2,), 8)
      >>> took = take(os.path.join(d, "b-2.zarr"), (2,), "float32", (2,))
      >>> took, [name for name in os.listdir(d) if not name.startswith(".jask")]
      (True, ['b-2.zarr'])
    """
    where = location_of(path)
    if not where.owned():
        return  # opened by path, or a forked parent's: never reused nor deleted
    if not where.supports_rename:  # no rename to reuse by (and nothing a reuse would save)
        trash.remove(path)
        return
    folder, name = os.path.split(path)
    key = _key(folder, os.path.splitext(name)[1], shape, dtype, chunks)
    with _lock:
        fits = _held[0] + nbytes <= MAX_BYTES and len(_sizes) < MAX_STORES
    if fits:  # never keep garbage on a disk short of space
        try:
            fits = where.free_bytes() > 4 * MAX_BYTES
        except OSError:  # no free space to be read: keep nothing
            fits = False
    with _lock:
        fits = fits and _held[0] + nbytes <= MAX_BYTES and len(_sizes) < MAX_STORES
        if fits:
            hidden = os.path.join(folder, f".free-{uuid.uuid4().hex[:12]}")
            try:
                os.rename(path, hidden)
            except OSError:
                return  # gone already
            _free.setdefault(key, []).append(hidden)
            _sizes[hidden] = nbytes
            _held[0] += nbytes
            return
    trash.remove(path)


def take(path: str, shape, dtype, chunks) -> bool:
    """Put a kept store of this layout at ``path``; False if none is kept."""
    folder, name = os.path.split(path)
    key = _key(folder, os.path.splitext(name)[1], shape, dtype, chunks)
    with _lock:
        folders = _free.get(key)
        if not folders:
            return False
        hidden = folders.pop()
        if not folders:
            del _free[key]
        _held[0] -= _sizes.pop(hidden)
    try:
        os.rename(hidden, path)
    except OSError:
        return False
    return True


def clear() -> None:
    """Delete every kept store (in the background: see :func:`jask.store.trash.wait`)."""
    with _lock:
        hidden = [p for folders in _free.values() for p in folders]
        _free.clear()
        _sizes.clear()
        _held[0] = 0
    for path in hidden:
        trash.remove(path)
