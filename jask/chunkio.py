"""Reading and writing tiles of a store, whole chunks at a time.

Most stores jask touches are uncompressed Zarr v3 arrays on a local disk:
each chunk is one file holding the chunk's bytes in C order. For those, a
tile is read with one ``readinto`` per chunk and written with one ``write``,
which made jask's ops 3-4x faster than ``zarr.Array`` indexing, whose
per-chunk overhead dominated jask's tasks. Any other store (compressed,
sharded, remote, big-endian) goes through ``zarr.Array`` unchanged. Chunk
files written here are laid out as Zarr lays them out, so every Zarr reader
opens them (Zarr itself may skip chunks that hold only the fill value; such
missing files read as the fill value here too).
"""
from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass

import numpy as np
from zarr.codecs import BytesCodec
from zarr.storage import LocalStore

from jask.storage import StoreSpec, open_array

__all__ = ["read", "write", "prefetch", "forget"]


@dataclass(frozen=True)
class RawLayout:
    """Where each chunk of an uncompressed local Zarr v3 array lives."""

    root: str
    shape: tuple
    chunks: tuple
    dtype: np.dtype
    fill_value: object
    encode_key: object  # (chunk index) -> "c/0/1"

    def path(self, index: tuple) -> str:
        return os.path.join(self.root, *self.encode_key(index).split("/"))


_layouts: dict[str, RawLayout | None] = {}
_lock = threading.Lock()


def _raw_layout(path: str) -> RawLayout | None:
    """The raw layout of a store, or None when Zarr's codecs are needed."""
    try:
        return _layouts[path]
    except KeyError:
        pass
    arr = open_array(path)
    meta = arr.metadata
    layout = None
    codecs = getattr(meta, "codecs", None)
    if (getattr(meta, "zarr_format", None) == 3 and isinstance(arr.store, LocalStore)
            and codecs is not None and len(codecs) == 1 and isinstance(codecs[0], BytesCodec)
            and (codecs[0].endian is None or codecs[0].endian.value == "little")
            and np.dtype(arr.dtype).isnative and np.little_endian
            and not getattr(meta, "storage_transformers", ())
            and arr.shape and all(c > 0 for c in arr.chunks)):
        layout = RawLayout(os.fspath(arr.store.root / arr.path) if arr.path else os.fspath(arr.store.root),
                           tuple(arr.shape), tuple(arr.chunks), np.dtype(arr.dtype),
                           arr.fill_value, meta.encode_chunk_key)
    with _lock:
        _layouts[path] = layout
    return layout


def forget(path: str) -> None:
    """Drop what is cached about a store that is gone or replaced."""
    with _lock:
        _layouts.pop(path, None)


def _chunk_ranges(region: tuple, chunks: tuple):
    return [range(s.start // c, (s.stop - 1) // c + 1) for s, c in zip(region, chunks)]


def _load_chunk(layout: RawLayout, index: tuple) -> np.ndarray:
    chunk = np.empty(layout.chunks, dtype=layout.dtype)
    path = layout.path(index)
    try:
        with open(path, "rb", buffering=0) as f:
            got = f.readinto(memoryview(chunk).cast("B"))
            extra = f.read(1)
    except FileNotFoundError:  # Zarr leaves chunks of only fill_value unwritten
        from jask.storage import writes_every_chunk
        if not os.path.isdir(layout.root) or writes_every_chunk(layout.root):
            raise FileNotFoundError(  # jask writes every chunk of its own stores
                f"chunk {layout.encode_key(index)!r} of the Zarr store {layout.root!r} is "
                f"missing (no file {path!r}): the store is damaged or was removed") from None
        chunk.fill(layout.fill_value)
        return chunk
    if got != chunk.nbytes or extra:
        raise ValueError(f"chunk {layout.encode_key(index)!r} of the Zarr store "
                         f"{layout.root!r} is corrupt: its file {path!r} holds "
                         f"{os.path.getsize(path)} bytes, not {chunk.nbytes}")
    return chunk


def read(store: StoreSpec, region: tuple) -> np.ndarray:
    """One tile of a store as a numpy array.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.arange(12.0).reshape(3, 4))
      >>> read(jask.storage.spec(a._handle), (slice(1, 3), slice(0, 2)))
      array([[4., 5.],
             [8., 9.]])
    """
    layout = _raw_layout(store.path)
    if layout is None:
        return open_array(store.path)[region]
    indices = list(itertools.product(*_chunk_ranges(region, layout.chunks)))
    if len(indices) == 1:  # the common case: the tile is (part of) one chunk
        chunk = _load_chunk(layout, indices[0])
        part = chunk[_overlap(indices[0], region, layout.chunks)[0]]
        # a view would keep the whole chunk alive: copy only a strict part
        return part if part.shape == chunk.shape else part.copy()
    out = np.empty(tuple(s.stop - s.start for s in region), dtype=layout.dtype)
    for index in indices:
        src, dst = _overlap(index, region, layout.chunks)
        out[dst] = _load_chunk(layout, index)[src]
    return out


def _overlap(index: tuple, region: tuple, chunks: tuple) -> tuple[tuple, tuple]:
    """Where chunk ``index`` and ``region`` meet: (slices in the chunk, in the region)."""
    src, dst = [], []
    for i, s, c in zip(index, region, chunks):
        lo, hi = max(s.start, i * c), min(s.stop, (i + 1) * c)
        src.append(slice(lo - i * c, hi - i * c))
        dst.append(slice(lo - s.start, hi - s.start))
    return tuple(src), tuple(dst)


def prefetch(store: StoreSpec, region: tuple) -> None:
    """Ask the kernel to start reading the chunk files of a tile now.

    The data goes to the page cache, not to this process, so it costs no
    budget; it lets the disk work on several files while a task computes.
    Stores that go through Zarr are left alone.
    """
    layout = _raw_layout(store.path)
    if layout is None or not hasattr(os, "posix_fadvise"):
        return
    for index in itertools.product(*_chunk_ranges(region, layout.chunks)):
        try:
            fd = os.open(layout.path(index), os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def write(store: StoreSpec, region: tuple, block: np.ndarray) -> None:
    """Write a tile made of whole chunks (the last ones may be cut by the
    array's edge).

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.zeros((2, 2)))
      >>> write(jask.storage.spec(a._handle), (slice(0, 2), slice(0, 2)), np.eye(2))
      >>> a.to_numpy()
      array([[1., 0.],
             [0., 1.]])
    """
    layout = _raw_layout(store.path)
    whole = layout is not None and all(
        s.start % c == 0 and (s.stop % c == 0 or s.stop == n)
        for s, c, n in zip(region, layout.chunks, layout.shape))
    if not whole:
        open_array(store.path)[region] = block
        return
    block = np.asarray(block, dtype=layout.dtype)
    for index in itertools.product(*_chunk_ranges(region, layout.chunks)):
        src = tuple(slice(i * c - s.start, min((i + 1) * c, n) - s.start)
                    for i, c, s, n in zip(index, layout.chunks, region, layout.shape))
        part = block[src]
        if part.shape != layout.chunks:  # edge chunk: Zarr stores it full size
            full = np.full(layout.chunks, layout.fill_value, dtype=layout.dtype)
            full[tuple(slice(0, d) for d in part.shape)] = part
            part = full
        path = layout.path(index)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        view = memoryview(np.ascontiguousarray(part)).cast("B")
        with open(path, "wb", buffering=0) as f:
            while view:  # on a filling disk a write can be short before one fails
                view = view[f.write(view):]
