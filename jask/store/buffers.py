"""Tile buffers reused from task to task within a graph run.

Freshly allocated memory is slow to touch on this machine (0.5-0.8 GB/s:
each page faults in, zeroed), and glibc returns every tile-sized block to
the system when it is freed (:mod:`jask.engine.execute` pins its mmap
threshold so that freed tiles never pile up in malloc arenas). An op on
arrays of tens of MB then spent most of its time faulting in the pages of
tiles it had just freed. :func:`empty` hands out a buffer a previous task
of the same thread no longer uses (nothing but this cache refers to it),
so its pages are already in place.

Buffers are kept only while a graph runs (:func:`scope`) and only as many
as one task held at once, so the memory model is unchanged: a thread never
keeps more than its task's tiles, and when the last running graph ends all
of them are freed.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np

from jask.base import forks

__all__ = ["empty", "scope"]

#: Buffers smaller than this are not worth keeping (malloc reuses them anyway).
MIN_BYTES = 1 << 20

_local = threading.local()
_lock = forks.lock()
_caches: list[list] = []  # every thread's cache, to free them all at the end
_running = [0]


def _cache() -> list | None:
    """This thread's cache while a graph runs (a new one after each end)."""
    if not _running[0]:
        return None
    mine = getattr(_local, "cache", None)
    if mine is not None and mine[0] == _generation[0]:
        return mine[1]
    cache: list = []
    with _lock:
        if not _running[0]:
            return None
        _caches.append(cache)
        _local.cache = (_generation[0], cache)
    return cache


def empty(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised array, in a buffer a finished task of this thread
    left, if there is one large enough (while a graph runs).

    Example:
      >>> with scope():
      ...     a = empty((512, 1024), "float32"); where = a.ctypes.data
      ...     del a  # its task is done with it
      ...     empty((256, 1024), "float32").ctypes.data == where
      True
    """
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    cache = _cache() if nbytes >= MIN_BYTES else None
    if cache is None:
        return np.empty(shape, dtype)
    best = None
    for i in range(len(cache)):
        # free when only the cache (and getrefcount's argument) refers to it
        if cache[i].nbytes >= nbytes and sys.getrefcount(cache[i]) <= 2 and (
                best is None or cache[i].nbytes < cache[best].nbytes):
            best = i
    if best is None:
        # drop free buffers too small to serve: a thread keeps at most what
        # its task holds at once
        cache[:] = [cache[i] for i in range(len(cache)) if sys.getrefcount(cache[i]) > 2]
        buf = np.empty(nbytes, np.uint8)
        cache.append(buf)
    else:
        buf = cache[best]
    return buf[:nbytes].view(dtype).reshape(shape)


@contextlib.contextmanager
def scope():
    """Keep buffers for reuse while the block runs; free them all when the
    last such block (in any thread) ends."""
    with _lock:
        _running[0] += 1
    try:
        yield
    finally:
        with _lock:
            _running[0] -= 1
            if _running[0] == 0:
                for cache in _caches:
                    cache.clear()
                _caches.clear()
                _generation[0] += 1  # threads start a new cache next time


_generation = [0]
