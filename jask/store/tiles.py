"""Tiles of any store, read and written: what is the same for every kind of
location (a view reads its base, every tile is counted, an empty region
reads as an empty array and writes nothing, read models are kept per
process), then the store's :class:`~jask.store.location.Location` does the
I/O (:mod:`jask.store.chunkio` for files, :mod:`jask.store.kinds.objects.remote` for
requests).

:func:`read_model` tells the memory model (:mod:`jask.base.memory`) which
path a store takes and what a read of it holds.
"""
from __future__ import annotations

import numpy as np
import zarr

from jask.base import counters, forks, memory
from jask.store.chunkio import OpenFiles, rows_of_runs
from jask.store.location import location_of
from jask.store.spec import StoreSpec

from . import views

__all__ = ["read", "read_runs", "rows_of_runs", "reads_runs", "OpenFiles", "write", "prefetch",
           "read_model", "open_array", "open_user_array", "forget"]


def read(store: StoreSpec, region: tuple, out: np.ndarray | None = None) -> np.ndarray:
    """One tile of a store as a numpy array; read into ``out`` when given (a
    C-contiguous array of the tile's shape and the store's dtype, such as a
    reused buffer: no new tile is allocated).

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.arange(12.0).reshape(3, 4))
      >>> read(jask.store.registry.spec(a._handle), (slice(1, 3), slice(0, 2)))
      array([[4., 5.],
             [8., 9.]])
    """
    if out is not None:
        shape = tuple(max(0, s.stop - s.start) for s in region)
        if out.shape != shape or out.dtype != store.dtype or not out.flags.c_contiguous:
            raise ValueError(f"read into an array of shape {out.shape} and dtype {out.dtype}: "
                             f"the tile is {shape} of {store.dtype} (C-contiguous)")
    if store.view is not None:  # a view reads its base (jask.store.views)
        tile = views.read(store, region, read)
        if out is None:
            return tile
        out[...] = tile
        return out
    counters.read(store, region)
    if _empty(region):  # nothing to read (and no chunk of 0 to divide by)
        if out is not None:
            return out
        return np.empty(tuple(max(0, s.stop - s.start) for s in region), store.dtype)
    return location_of(store).read(store, region, out)


def reads_runs(store: StoreSpec) -> bool:
    """Whether short runs of rows of ``store`` cost about their own bytes
    (:func:`read_runs`): local uncompressed chunk files."""
    return store.view is None and location_of(store).reads_runs(store)


def read_runs(store: StoreSpec, starts: np.ndarray, stops: np.ndarray,
              out: np.ndarray, files: OpenFiles | None = None) -> np.ndarray:
    """Rows ``starts[i]:stops[i]`` of ``store`` (all its other axes; sorted
    runs, not overlapping, none empty) one after another into ``out`` (C-contiguous):
    many runs per chunk in one call, each chunk opened (or decoded) once, or
    held open in ``files`` (:class:`OpenFiles`) across calls.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.arange(10.0))
      >>> out = np.empty(4)
      >>> read_runs(jask.store.registry.spec(a._handle), np.array([1, 6]), np.array([3, 8]), out)
      array([1., 2., 6., 7.])
    """
    starts, stops = np.asarray(starts, np.int64), np.asarray(stops, np.int64)
    rows = int(np.sum(stops - starts))
    shape = (rows,) + tuple(store.shape[1:])
    if out.shape != shape or out.dtype != store.dtype or not out.flags.c_contiguous:
        raise ValueError(f"read_runs into an array of shape {out.shape} and dtype {out.dtype}: "
                         f"the runs are {shape} of {store.dtype} (C-contiguous)")
    if store.view is not None:  # a view reads its base, run by run
        at = 0
        for lo, hi in zip(starts.tolist(), stops.tolist()):
            read(store, (slice(lo, hi),) + tuple(slice(0, n) for n in store.shape[1:]),
                 out[at:at + hi - lo])
            at += hi - lo
        return out
    if rows == 0:
        return out
    counters.read(store, (slice(0, rows),) + tuple(slice(0, n) for n in store.shape[1:]))
    starts, stops = _within_chunk_rows(starts, stops, store.chunks[0])
    return location_of(store).read_runs(store, starts, stops, out, files)


def _within_chunk_rows(starts: np.ndarray, stops: np.ndarray, per: int) -> tuple:
    """The runs cut where they cross from one chunk row into the next.

    Example:
      >>> [v.tolist() for v in _within_chunk_rows(np.array([2, 9]), np.array([7, 10]), 4)]
      [[2, 4, 9], [4, 7, 10]]
    """
    first, last = starts // per, (stops - 1) // per
    if np.all(first == last):
        return starts, stops
    pieces = last - first + 1
    own = np.repeat(np.arange(len(starts)), pieces)
    k = np.arange(len(own)) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # piece in its run
    lo = np.maximum(starts[own], (first[own] + k) * per)
    hi = np.minimum(stops[own], (first[own] + k + 1) * per)
    return lo, hi


def write(store: StoreSpec, region: tuple, block: np.ndarray) -> None:
    """Write a tile made of whole chunks (the last ones may be cut by the
    array's edge).

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.zeros((2, 2)))
      >>> write(jask.store.registry.spec(a._handle), (slice(0, 2), slice(0, 2)), np.eye(2))
      >>> a.to_numpy()
      array([[1., 0.],
             [0., 1.]])
    """
    if store.view is not None:  # its path is another array's
        raise ValueError(f"jask never writes into a view (of the store {store.path!r})")
    counters.wrote(store, region)
    if _empty(region):
        return
    location_of(store).write(store, region, block)


def prefetch(store: StoreSpec, region: tuple) -> None:
    """Start reading a tile's chunks now, at no cost to the budget (the page
    cache's, where the kind can)."""
    if store.view is not None:
        return views.prefetch(store, region, prefetch)
    if _empty(region):  # (the product lists every chunk index of an axis)
        return
    location_of(store).prefetch(store, region)


def _empty(region: tuple) -> bool:
    return any(s.stop <= s.start for s in region)


_models: dict[tuple, memory.ReadModel] = {}
_lock = forks.lock()


def read_model(store) -> memory.ReadModel:
    """How reading ``store`` works and what it holds (:class:`jask.base.memory.ReadModel`).

    A store not on disk (yet) is taken as one jask would make (raw chunk
    files) when it is ``managed``, else as uncompressed and read through Zarr.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.zeros((4, 6), np.float32))
      >>> m = read_model(jask.store.registry.spec(a._handle))
      >>> m.raw, m.unit == a.shape, m.codec
      (True, True, 'none')
    """
    if getattr(store, "view", None) is not None:
        return views.read_model(store, read_model)
    key = (store.path, tuple(store.shape), tuple(store.chunks), str(store.dtype))
    model = _models.get(key)
    if model is None:
        model = location_of(store.path).read_model(store)
        with _lock:
            _models[key] = model
    return model


def open_array(path: str) -> zarr.Array:
    """The ``zarr.Array`` jask reads and writes the store at ``path`` with,
    opened once per process."""
    return location_of(path).zarr_array()


def open_user_array(path: str) -> zarr.Array:
    """A new read/write ``zarr.Array`` of the store at ``path``, for users
    (``DiskArray.to_memmap``): not cached, Zarr's own configuration."""
    return location_of(path).user_array()


def forget(path: str) -> None:
    """Drop what is cached about a store that is gone or replaced."""
    with _lock:
        for key in [k for k in _models if k[0] == path]:
            _models.pop(key, None)
    location_of(path).forget()
