"""Reading and writing tiles of a store, whole chunks at a time.

Most stores jask touches are uncompressed Zarr v3 arrays on a local disk:
each chunk is one file holding the chunk's bytes in C order. For those, a
tile is read with one positioned read per chunk of just the rows it needs
(a row range of a C-order chunk is contiguous), straight into the tile when
the tile spans whole chunk rows, and written with one ``write`` per chunk,
which made jask's ops 3-4x faster than ``zarr.Array`` indexing, whose
per-chunk overhead dominated jask's tasks. Any other store (compressed,
Zarr v2, F order, sharded) whose chunks are single local files or byte
ranges of shard files is decoded here, a chunk at a time in the task's own
thread, with numcodecs (zstd, blosc, gzip); anything else (filters, other
codecs, big-endian, an icechunk branch's snapshot or session) goes through
``zarr.Array``, a few chunks per call so that Zarr never
decodes many chunks at once. Whole chunks are written the same way (encoded
here for zstd, gzip and v2 compressors), anything else through Zarr.
Chunk files written here are laid out as Zarr lays them out, so every Zarr
reader opens them (Zarr itself may skip chunks that hold only the fill
value; such missing files read as the fill value here too).

What a chunk is (its layout, its codec, its checked decoding) is in
:mod:`jask.store.chunk_layout`, which :mod:`jask.store.kinds.objects.remote` shares.

This is the tile I/O of two kinds of location
(:class:`~jask.store.kinds.local.location.LocalFolder`,
:class:`~jask.store.kinds.icechunk.location.IcechunkBranch`): each function takes the
location (its path, and its ``zarr_array()``). :mod:`jask.store.tiles` calls
them, a view's region mapped to its base's and empty regions dealt with.
:func:`read_model` tells the memory model (:mod:`jask.base.memory`) which of
these paths a store takes and what a read of it holds.
"""
from __future__ import annotations

import errno
import functools
import itertools
import math
import mmap
import os
import struct
from collections.abc import Callable
from typing import cast

import google_crc32c  # what Zarr checks shard indexes with
import numpy as np
import zarr
from zarr.storage import LocalStore

from jask.base import counters, forks, memory
from jask.store.chunk_layout import (
    DECODE_ERRORS,
    ChunkLayout,
    chunk_ranges,
    decode_into,
    layout_of,
    overlap,
)
from jask.store.spec import DamagedStoreError, StoreSpec

from . import buffers

__all__ = ["read", "read_runs", "rows_of_runs", "reads_runs", "write", "prefetch", "forget",
           "read_model", "cached_array", "remember_plain", "link_chunks_except"]

#: Decoded bytes one Zarr read call covers (whole chunks; at least one).
ZARR_GROUP_BYTES = 2**20


def _chunk_file(layout: ChunkLayout, index: tuple) -> str:
    """The path of chunk ``index``'s file (or of the shard file holding it)."""
    return os.path.join(layout.root, *layout.encode_key(index).split("/"))


@functools.lru_cache(maxsize=2**16)
def _row_chunk_file(root: str, encode_key: Callable[[tuple], str], ndim: int, row: int) -> str:
    """:func:`_chunk_file` of chunk ``(row, 0, ...)``, remembered: a loader's
    :func:`read_runs` calls name each chunk row's file once per window, and
    building the path cost as much as a run's read (the layout's ``root``
    and ``encode_key`` name the file; the function is held, never compared)."""
    return os.path.join(root, *encode_key((row,) + (0,) * (ndim - 1)).split("/"))


def link_chunks_except(where, staging: str, written: tuple) -> bool:
    """Hard-link into ``staging`` (an empty store laid out as the one at
    ``where``) every chunk file of that store but those about to be written:
    the chunks whose index on each axis is among ``written``'s for that axis,
    so that writing them into ``staging`` completes a copy having written
    only them. False, linking nothing, where the chunk files are not jask's
    to name (sharded, or a layout jask does not encode). The linked files are
    never written through either name: the written chunks are new files, and
    the old store is deleted once ``staging`` replaces it."""
    layout = _raw_layout(where)
    if layout is None or layout.shard is not None or not layout.encodes:
        return False
    sets = [set(w) for w in written]
    grid = [range(-(-n // c)) for n, c in zip(layout.shape, layout.chunks)]
    for index in itertools.product(*grid):
        if all(i in w for i, w in zip(index, sets)):
            continue
        source = _chunk_file(layout, index)
        target = os.path.join(staging, os.path.relpath(source, layout.root))
        try:
            os.link(source, target)
        except FileNotFoundError:
            if not os.path.exists(source):  # a chunk never written: the fill value
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)  # keys with "/": c/0/1
            os.link(source, target)
    return True


def _chunk_data(layout: ChunkLayout, index: tuple) -> bytes | memoryview | None:
    """The encoded bytes of chunk ``index`` (None: not written); a view of
    a buffer this thread reuses for the next chunk (:mod:`jask.store.buffers`)."""
    if layout.shard is None:
        try:
            fd = os.open(_chunk_file(layout, index), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return _pread_all(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
    shards, inner, _, _ = layout.shard
    per = tuple(s // c for s, c in zip(shards, inner))
    where = tuple(i // p for i, p in zip(index, per))
    slot = int(np.ravel_multi_index(tuple(i % p for i, p in zip(index, per)), per))
    try:
        fd = os.open(_chunk_file(layout, where), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        offset, nbytes = (int(v) for v in _index_of_shard(layout, fd, where)[slot])
        if offset == 2**64 - 1:  # an inner chunk never written
            return None
        data = _pread_all(fd, nbytes, offset)
        if len(data) != nbytes:
            raise layout.damaged(index, f"its shard file {_chunk_file(layout, where)!r} ended "
                                 f"early (was it cut short while being read?)")
        return data
    finally:
        os.close(fd)


def _pread_all(fd: int, nbytes: int, offset: int) -> memoryview:
    """Up to ``nbytes`` of ``fd`` from ``offset`` (fewer at the file's end),
    read into a reused buffer: fresh pages fault in slowly here."""
    buffer = buffers.empty((max(nbytes, 1),), np.uint8)
    view, got = buffer.data.cast("B")[:nbytes], 0
    while got < nbytes:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n <= 0:
            break
        got += n
    return view[:got]


# Checked shard indexes: (path, inode, size, mtime) -> (inner chunks, 2) array.
_indexes: dict[tuple, np.ndarray] = {}
_MAX_CACHED_INDEXES = 64


def _index_of_shard(layout: ChunkLayout, fd: int, where: tuple) -> np.ndarray:
    """The index of the shard file ``fd`` (shard ``where``): the (offset,
    bytes) of each inner chunk, checked as Zarr checks it (its crc32c) and
    against the file's size, so that no read goes past the file or into the
    index. Read once per version of the file.
    """
    shards, inner, at_end, crc = cast(tuple, layout.shard)
    per = tuple(s // c for s, c in zip(shards, inner))
    stat = os.fstat(fd)
    key = (_chunk_file(layout, where), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    found = _indexes.get(key)
    if found is not None:
        return found
    path, size = key[0], math.prod(per) * 16 + (4 if crc else 0)
    first = layout.encode_key(where)
    bad = f"shard {first!r} of the Zarr store {layout.root!r} is damaged: its file {path!r} "
    # (each reason below goes on from "its file ... ")
    if stat.st_size < size:
        raise DamagedStoreError(bad + f"holds {stat.st_size} bytes, less than its index of "
                                f"{size} bytes")
    base = stat.st_size - size if at_end else 0
    raw = os.pread(fd, size, base)
    if len(raw) != size:
        raise DamagedStoreError(bad + "ended early")
    if crc and struct.pack("<I", google_crc32c.value(raw[:-4])) != raw[-4:]:
        raise DamagedStoreError(bad + "has an index that does not match its crc32c checksum")
    index = np.frombuffer(raw, "<u8", count=math.prod(per) * 2).reshape(-1, 2)
    written = index[:, 0] != np.uint64(2**64 - 1)
    lo, hi = (0, base) if at_end else (size, stat.st_size)
    offsets, lengths = index[written, 0], index[written, 1]
    if np.any((offsets < lo) | (lengths > hi) | (offsets > hi - lengths)):
        raise DamagedStoreError(bad + f"has an index pointing outside its chunk bytes "
                                f"[{lo}, {hi}) (cut short, or not a shard)")
    with _lock:
        if len(_indexes) >= _MAX_CACHED_INDEXES:
            _indexes.pop(next(iter(_indexes)))
        _indexes[key] = index
    return index


# What is known of each store, per process (also on Dask workers): its
# zarr.Array and its file layout. forget() drops both.
_arrays: dict[str, zarr.Array] = {}
_layouts: dict[str, ChunkLayout | None] = {}
_lock = forks.lock()
_MAX_CACHED_ARRAYS = 256


def cached_array(path: str, open_new: Callable[[], zarr.Array]) -> zarr.Array:
    """The ``zarr.Array`` of the store at ``path``, made by ``open_new()``
    once per process."""
    arr = _arrays.get(path)
    if arr is None:
        arr = open_new()
        with _lock:
            if len(_arrays) >= _MAX_CACHED_ARRAYS:
                _arrays.pop(next(iter(_arrays)))
            _arrays[path] = arr
    return arr


def _raw_layout(where) -> ChunkLayout | None:
    """The file layout of the store at ``where`` (its location), or None when
    Zarr's own pipeline is needed (sharded, filters, other codecs, a session's
    store, big-endian)."""
    try:
        return _layouts[where.path]
    except KeyError:
        pass
    arr = where.zarr_array()
    layout = None
    store = arr.store
    if isinstance(store, LocalStore):
        root = os.fspath(store.root / arr.path) if arr.path else os.fspath(store.root)
        layout = layout_of(arr, root)
    with _lock:
        _layouts[where.path] = layout
    return layout


def _default_key(index: tuple) -> str:
    return ".".join(("c",) + tuple(str(i) for i in index))  # layout.create_at's keys


def remember_plain(path: str, shape: tuple, dtype: np.dtype, chunks: tuple) -> None:
    """The layout of a store jask just wrote the metadata of (layout.create_at):
    uncompressed C-order v3, default keys with "/", fill value 0."""
    layout = ChunkLayout(path, tuple(shape), tuple(chunks), np.dtype(dtype),
                         np.dtype(dtype).type(0), _default_key)
    with _lock:
        _layouts[path] = layout


def forget(path: str) -> None:
    """Drop what is cached about a store that is gone or replaced."""
    with _lock:
        _arrays.pop(path, None)
        _layouts.pop(path, None)
        for key in [k for k in _indexes if k[0].startswith(path + os.sep)]:
            _indexes.pop(key, None)


def read_model(where, store, on_disk: bool) -> memory.ReadModel:
    """How reading ``store`` (at ``where``) works and what it holds
    (:class:`jask.base.memory.ReadModel`).

    A store not ``on_disk`` (yet) is taken as one jask would make (raw chunk
    files) when it is ``managed``, else as uncompressed and read through Zarr.
    """
    itemsize = np.dtype(store.dtype).itemsize
    shape, chunks = tuple(store.shape), tuple(store.chunks)
    if not store.path or not on_disk:
        if getattr(store, "managed", False):  # one jask will make: raw chunk files
            return memory.ReadModel(shape, chunks, itemsize, raw=True, write_unit=chunks)
        return memory.ReadModel(shape, chunks, itemsize, write_unit=chunks,
                                group=_group(chunks, itemsize))
    arr = where.zarr_array()
    unit = tuple(max(1, c) for c in arr.chunks)  # Zarr allows chunks of 0 along empty axes
    compressed = bool(arr.compressors or arr.filters)
    copies = memory.COMPRESSED_COPIES if compressed else memory.ZARR_COPIES
    if getattr(arr, "order", "C") == "F":
        copies += 1  # decoded in F order, then copied to C order
    codec = ",".join(type(c).__name__.replace("Codec", "").lower()
                     for c in tuple(arr.filters) + tuple(arr.compressors)) or "none"
    shards = getattr(arr, "shards", None)
    if shards:
        codec += f", sharded {tuple(shards)}"
    layout = _raw_layout(where)
    group = _group(unit, itemsize)
    if layout is not None and not layout.plain:  # decoded here, a chunk at a time
        copies, group = memory.DECODED_COPIES, 1
    if layout is not None and layout.encodes:  # one chunk padded/encoded at a time
        write_copies = 1 if layout.plain else memory.DECODED_COPIES
    else:
        write_copies = memory.ZARR_WRITE_COPIES
    direct = layout is not None and not layout.plain and layout.order == "C"  # _read_decoded
    return memory.ReadModel(shape, unit, itemsize, raw=layout is not None and layout.plain,
                            copies=copies, group=group, write_copies=write_copies,
                            write_unit=tuple(shards or unit), codec=codec,
                            direct=direct)


def _group(unit: tuple, itemsize: int) -> int:
    """Chunks per Zarr read call: about ZARR_GROUP_BYTES, at most what Zarr
    decodes concurrently anyway."""
    per = max(1, math.prod(unit) * itemsize)
    return max(1, min(ZARR_GROUP_BYTES // per, int(zarr.config.get("async.concurrency") or 1)))


def _check_may_be_missing(where, layout: ChunkLayout, index: tuple, path: str) -> None:
    """Zarr leaves chunks of only the fill value unwritten, but jask writes
    every chunk of its own stores (``where`` says which): there a missing file
    is damage."""
    if not os.path.isdir(layout.root) or where.holds_jask_stores():
        raise FileNotFoundError(
            f"chunk {layout.encode_key(index)!r} of the Zarr store {layout.root!r} is "
            f"missing (no file {path!r}): the store is damaged or was removed")


def _read_rows(where, layout: ChunkLayout, index: tuple, rows: slice,
               dest: np.ndarray | Callable[[], np.ndarray]) -> np.ndarray | None:
    """Fill ``dest`` (or the array it makes, once the file is found) with
    rows ``rows`` of chunk ``index`` (all its other axes, full chunk width);
    return it. None when the chunk file does not exist."""
    row = math.prod(layout.chunks[1:]) * layout.dtype.itemsize
    path = _chunk_file(layout, index)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # Zarr leaves chunks of only fill_value unwritten
        _check_may_be_missing(where, layout, index, path)
        return None
    try:
        _check_size(layout, index, path, os.fstat(fd).st_size, row * layout.chunks[0])
        if callable(dest):  # a sparse store's missing chunks need no buffer
            dest = dest()
        view = dest.data.cast("B")
        counters.stored_read(layout.root, view.nbytes)
        _pread_into(layout, index, path, fd, view, rows.start * row)
    finally:
        os.close(fd)
    return dest


def _check_size(layout: ChunkLayout, index: tuple, path: str, size: int, expected: int) -> None:
    """Refuse chunk file ``path`` (of ``size`` bytes) unless it holds ``expected`` bytes."""
    if size != expected:
        raise layout.damaged(index, f"its file {path!r} holds {size} bytes, not {expected}")


def _pread_into(layout: ChunkLayout, index: tuple, path: str, fd: int, view: memoryview,
               offset: int) -> None:
    """Fill ``view`` from ``fd`` at ``offset``; a file that ends first is damaged."""
    while view.nbytes:
        got = os.preadv(fd, [view], offset)
        if got <= 0:
            raise layout.damaged(index, f"its file {path!r} ended early (was it cut short "
                                 "while being read?)")
        view, offset = view[got:], offset + got


def _read_raw(where, layout: ChunkLayout, region: tuple,
              out: np.ndarray | None = None) -> np.ndarray:
    """A tile of an uncompressed C-order store, reading only the chunk rows
    it needs; straight into the tile where those rows are contiguous in it."""
    if out is None:
        out = buffers.empty(tuple(s.stop - s.start for s in region), layout.dtype)
    buffer = None
    for index in itertools.product(*chunk_ranges(region, layout.chunks)):
        src, dst = overlap(index, region, layout.chunks)
        direct = (all(s.start == 0 and s.stop == c for s, c in zip(src[1:], layout.chunks[1:]))
                  and all(d.start == 0 and d.stop == n for d, n in zip(dst[1:], out.shape[1:])))
        if direct:
            if _read_rows(where, layout, index, src[0], out[dst]) is None:
                out[dst] = layout.fill_value
            continue
        shape = (src[0].stop - src[0].start,) + layout.chunks[1:]

        def rows_buffer(shape=shape) -> np.ndarray:
            nonlocal buffer
            if buffer is None or buffer.size < math.prod(shape):
                buffer = buffers.empty((math.prod(shape),), layout.dtype)
            return buffer[:math.prod(shape)].reshape(shape)
        rows = _read_rows(where, layout, index, src[0], rows_buffer)
        if rows is not None:
            out[dst] = rows[(slice(None),) + src[1:]]
        else:
            out[dst] = layout.fill_value
    return out


def _load_decoded(layout: ChunkLayout, index: tuple,
                  into: np.ndarray | None = None) -> np.ndarray | None:
    """One whole compressed chunk (or inner chunk of a shard), decoded in
    this thread (numcodecs releases the GIL while decoding: the task threads
    decode in parallel; Zarr would decode on its own threads, each of which
    then keeps freed chunk buffers in its own malloc arena) into ``into``
    (C-contiguous, the chunk's shape: a part of the tile) or a buffer this
    thread reuses. None when it was never written (Zarr leaves chunks of
    only fill_value unwritten)."""
    data = _chunk_data(layout, index)
    if data is None:
        return None
    if into is None:
        into = buffers.empty(layout.chunks[::-1] if layout.order == "F" else layout.chunks,
                             layout.dtype)
        if layout.order == "F":
            into = into.T
    counters.stored_read(layout.root, len(data))
    decode_into(layout, index, data, into.reshape(-1, order="A").view(np.uint8))
    return into


def _read_decoded(layout: ChunkLayout, region: tuple,
                  out: np.ndarray | None = None) -> np.ndarray:
    """A tile of a store whose chunk files must be decoded whole: a chunk
    the tile holds whole, in one contiguous run (C order), is decoded
    straight into the tile; any other into a reused chunk buffer and copied."""
    if out is None:
        out = buffers.empty(tuple(s.stop - s.start for s in region), layout.dtype)
    for index in itertools.product(*chunk_ranges(region, layout.chunks)):
        src, dst = overlap(index, region, layout.chunks)
        part = out[dst]
        whole = layout.order == "C" and all(
            s.start == 0 and s.stop == c for s, c in zip(src, layout.chunks))
        if whole and part.flags.c_contiguous:
            if _load_decoded(layout, index, into=part) is None:
                part[...] = layout.fill_value
            continue
        chunk = _load_decoded(layout, index)
        part[...] = layout.fill_value if chunk is None else chunk[src]
        del chunk
    return out


def _split(region: tuple, unit: tuple, most: int) -> list[tuple]:
    """``region`` cut at chunk boundaries into pieces of at most ``most`` chunks.

    Example:
      >>> pieces = _split((slice(0, 4), slice(0, 6)), (2, 2), 3)
      >>> [tuple((s.start, s.stop) for s in r) for r in pieces]
      [((0, 2), (0, 6)), ((2, 4), (0, 6))]
    """
    counts = [len(r) for r in chunk_ranges(region, unit)]
    if math.prod(counts) <= most:
        return [region]
    axis = next(i for i, n in enumerate(counts) if n > 1)
    after = math.prod(counts[axis + 1:])
    step = max(1, most // after) * unit[axis]
    s = region[axis]
    cuts = [s.start] + list(range((s.start // unit[axis] + 1) * unit[axis], s.stop, unit[axis]))
    cuts = cuts[::max(1, step // unit[axis])] + [s.stop]
    pieces = []
    for lo, hi in zip(cuts, cuts[1:]):
        piece = region[:axis] + (slice(lo, hi),) + region[axis + 1:]
        pieces.extend(_split(piece, unit, most) if after > most else [piece])
    return pieces


def _read_zarr(where, store: StoreSpec, region: tuple) -> np.ndarray:
    """A tile through Zarr, a few whole chunks per call: one call over a
    tile of many chunks would decode ten of them at once."""
    arr = where.zarr_array()
    unit = tuple(max(1, c) for c in arr.chunks)
    counters.stored_read(store.path, counters.region_bytes(store, region))  # not known: as decoded
    pieces = _split(region, unit, _group(unit, np.dtype(store.dtype).itemsize))
    if len(pieces) == 1:  # big-endian stores are read as native numbers
        return _zarr_piece(arr, store, region).astype(store.dtype, copy=False)
    out = np.empty(tuple(s.stop - s.start for s in region), dtype=store.dtype)
    for piece in pieces:
        inside = tuple(slice(p.start - r.start, p.stop - r.start) for p, r in zip(piece, region))
        out[inside] = _zarr_piece(arr, store, piece)
    return out


def _zarr_piece(arr: zarr.Array, store: StoreSpec, piece: tuple) -> np.ndarray:
    """``arr[piece]``; Zarr's error for a chunk it cannot decode becomes a
    DamagedStoreError naming the store and that chunk."""
    try:  # zarr types any selection as array or scalar: slices give an array
        return cast(np.ndarray, arr[piece])
    except DECODE_ERRORS as err:
        grid = tuple(getattr(arr, "shards", None) or arr.chunks)
        for index in itertools.product(*chunk_ranges(piece, grid)):  # which chunk it was
            try:
                arr[tuple(slice(max(s.start, i * c), min(s.stop, (i + 1) * c))
                          for i, s, c in zip(index, piece, grid))]
            except DECODE_ERRORS as one:
                key = arr.metadata.encode_chunk_key(index)
                raise DamagedStoreError(
                    f"chunk {key!r} of the Zarr store {store.path!r} is damaged: Zarr could "
                    f"not decode it ({type(one).__name__}: {one})") from err
        raise


def read(where, store: StoreSpec, region: tuple, out: np.ndarray | None = None) -> np.ndarray:
    """One tile (not empty) of ``store``, whose files or session are at
    ``where``, as a numpy array: ``out`` when given (C-contiguous)."""
    layout = _raw_layout(where)
    if layout is None:
        tile = _read_zarr(where, store, region)
        if out is None:
            return tile
        out[...] = tile
        return out
    if layout.plain:
        return _read_raw(where, layout, region, out)
    return _read_decoded(layout, region, out)


def reads_runs(where, store: StoreSpec) -> bool:
    """Whether :func:`read_runs` reads ``store``'s rows at byte offsets of
    its chunk files: uncompressed C-order chunks."""
    layout = _raw_layout(where)
    return layout is not None and layout.plain


class OpenFiles:
    """Chunk files kept open across calls of :func:`read_runs`, closed by
    :meth:`close`: a reader of many short runs (``jask.batches``, a few runs
    of each chunk per call) then opens and checks each file once, not once
    per call (here a system call costs ~25 µs, a run's ``preadv`` about as
    much). At most ``most`` files are held (:data:`MOST` by default); past
    that, a call opens and closes its own. Safe to share between threads (``preadv`` takes its own
    offset); a file replaced meanwhile is read as it was opened.

    It also remembers each chunk file's identity when it was first opened
    (:meth:`seen`; closing does not forget it), so that a reader sees a store
    rewritten chunk by chunk by another program (zarr writes a chunk to a
    temporary file and renames it over the old one), which its version
    (:func:`jask.store.versions.check_unchanged`) does not show:
    :meth:`changed` names the files read since its last call that were
    rewritten since first seen (a ``stat`` each), and those first seen
    changed at or after :attr:`since_ns` (a file's change time: the reader's
    epoch began then, and so every file it reads is as the store held it then).

    Example:
      >>> files = OpenFiles()
      >>> files.close()
    """

    #: files held open at most (each one descriptor)
    MOST = 1024

    def __init__(self, most: int | None = None) -> None:
        """``most``: files held open at most (default :data:`MOST`; 0: none,
        what is read only recorded, for :meth:`changed`)."""
        self._most = self.MOST if most is None else most
        self._open: dict[str, int] = {}
        self._seen: dict[str, tuple | None] = {}
        self._read: set[str] = set()  # files read since the last check
        self._lock = forks.lock()  # (a forked child closes those a reading thread opened)
        #: a file first seen with a change time at or after this (ns) was written meanwhile
        self.since_ns: int | None = None

    @property
    def full(self) -> bool:
        """Whether no more files are held."""
        return len(self._open) >= self._most

    def get(self, path: str) -> int | None:
        """The descriptor held for ``path``, or None."""
        return self._open.get(path)

    def keep(self, path: str, fd: int) -> bool:
        """Hold ``fd`` (just opened and checked) for ``path``; False where it is
        not held (the caller closes it): no room, or another thread's is."""
        with self._lock:
            if path in self._open or len(self._open) >= self._most:
                return False
            self._open[path] = fd
            return True

    def saw(self, path: str, info: os.stat_result | None) -> None:
        """Remember chunk file ``path`` as ``info`` (its ``fstat`` once opened,
        before it is read; None: there is none), unless it was seen already."""
        if path not in self._seen:
            self._seen.setdefault(path, _identity(info))

    def saw_unopened(self, path: str) -> None:
        """Remember chunk file ``path`` as a ``stat`` finds it now (none: there
        is none), before a read that opens it by path, unless it was seen
        already (its first identity is the one checked: no second ``stat``)."""
        if path in self._seen:
            return
        try:
            info: os.stat_result | None = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):  # never written: the fill value
            info = None
        self.saw(path, info)

    def were_read(self, paths) -> None:
        """Chunk files just read (checked at the next :meth:`changed`)."""
        with self._lock:
            self._read.update(paths)

    def seen(self) -> dict:
        """{path: identity} of the chunk files seen (for :meth:`merge`)."""
        return dict(self._seen)

    def merge(self, seen: dict, read: bool = True) -> None:
        """Remember the chunk files another reader (a reading process) saw;
        ``read``: as read here (checked at the next :meth:`changed`), not where
        the caller has just checked them after their reads (a window read ahead)."""
        for path, identity in seen.items():
            self._seen.setdefault(path, identity)
        if read:
            self.were_read(seen)

    def renew(self) -> bool:
        """Ready for another pass over the store (an epoch): False where a file
        held open was rewritten since first seen (a ``stat`` each; the caller
        reads with new ones). Those not held are forgotten, not checked: their
        next open records them anew (an ``fstat``), as one first seen, so that a
        store of many chunk files costs a ``stat`` per file held, not per file seen."""
        with self._lock:
            self._seen = {p: i for p, i in self._seen.items() if p in self._open}
        return not self.changed(every=True)

    def changed(self, every: bool = False) -> list[str]:
        """The chunk files read since the last call (``every``: all seen) that
        were rewritten, replaced, made or removed since first seen (a ``stat``
        each), or first seen written at or after :attr:`since_ns`."""
        with self._lock:
            read, self._read = self._read, set()
        paths = list(self._seen) if every else list(read)
        out = []
        for path in paths:
            before = self._seen.get(path)
            if before is not None and self.since_ns is not None and before[4] >= self.since_ns:
                out.append(path)
                continue
            try:
                now = _identity(os.stat(path))
            except (FileNotFoundError, NotADirectoryError):
                now = None
            if now != before:
                out.append(path)
        return out

    def close(self) -> None:
        with self._lock:
            held, self._open = list(self._open.values()), {}
        for fd in held:
            os.close(fd)


def _identity(info: os.stat_result | None) -> tuple | None:
    """What tells one version of a chunk file from another: a file renamed
    over it has another inode; one written in place, another modification
    time (or size)."""
    if info is None:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def read_runs(where, store: StoreSpec, starts, stops, out: np.ndarray,
              files: OpenFiles | None = None) -> np.ndarray:
    """Rows ``starts[i]:stops[i]`` (sorted runs, each within one chunk row)
    one after another into ``out``, for a store :func:`reads_runs` says yes
    to: each chunk file opened once (or held open in ``files`` across calls).
    A chunk's runs that follow each other in its file are read as one. Where a
    chunk has at least :data:`MAPPED_RUNS` runs and its bytes are in memory
    already, they are copied from a mapping of the file by one ``np.take``
    (no system call per run, the GIL released once); else each run is one
    ``preadv`` straight into ``out``, so that a cold disk reads only the runs'
    bytes; the runs of files held open in ``files`` are first asked for
    together (:func:`_advise_runs`), so that the disk has them all in flight.
    Chunks narrower than the array: each run read as a tile (a
    ``preadv`` per chunk it crosses)."""
    layout = _raw_layout(where)
    assert layout is not None
    if tuple(layout.chunks[1:]) != tuple(store.shape[1:]):
        rest, at = tuple(slice(0, n) for n in store.shape[1:]), 0
        for lo, hi in zip(starts.tolist(), stops.tolist()):
            _read_raw(where, layout, (slice(lo, hi),) + rest, out[at:at + hi - lo])
            at += hi - lo
        return out
    per = layout.chunks[0]
    row = math.prod(layout.chunks[1:]) * layout.dtype.itemsize
    flat = out.reshape(len(out), -1).view(np.uint8) if out.size else out
    starts, stops = np.asarray(starts, np.int64), np.asarray(stops, np.int64)
    counters.stored_read(layout.root, int(np.sum(stops - starts)) * row)
    chunk_of = starts // per
    # the chunks' groups of runs: [bounds[k], bounds[k + 1])
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(chunk_of)) + 1, [len(starts)]]).tolist()
    ends = np.cumsum(stops - starts).tolist()  # where each run ends in out
    # worked out once for the whole call, as plain ints: the reading threads hold the
    # GIL for it, and the thread cutting batches waits for it after each take
    chunks = chunk_of[bounds[:-1]].tolist()
    paths = [_row_chunk_file(layout.root, layout.encode_key, len(layout.chunks), c)
             for c in chunks]
    spans = _spans(chunk_of, starts, stops, bounds, per)
    if files is not None:
        _hold_open(files, layout, paths, chunks, row * per)
        _advise_runs(files, paths, spans, row)
    at = 0
    for k, (i, j) in enumerate(zip(bounds[:-1], bounds[1:])):
        c = chunks[k]
        index = (c,) + (0,) * (len(layout.chunks) - 1)
        path = paths[k]
        fd = files.get(path) if files is not None else None
        mine = fd is None
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:  # Zarr leaves chunks of only fill_value unwritten
                _check_may_be_missing(where, layout, index, path)
                if files is not None:
                    files.saw(path, None)
                out[at:ends[j - 1]] = layout.fill_value
                at = ends[j - 1]
                continue
        try:
            if mine:
                info = os.fstat(fd)
                _check_size(layout, index, path, info.st_size, row * per)
                if files is not None:
                    files.saw(path, info)
                if files is not None and files.keep(path, fd):
                    mine = False
            into = flat[at:ends[j - 1]]
            if not row or j - i < MAPPED_RUNS or not _copy_if_cached(
                    fd, starts[i:j] - c * per, stops[i:j] - c * per, row, into):
                _pread_spans(layout, index, path, fd, spans[k], row, into)
        finally:
            if mine:
                os.close(fd)
        at = ends[j - 1]
    if files is not None:
        files.were_read(paths)  # (after their reads: a check then covers them)
    return out


#: A chunk's runs are copied from a mapping of its file (one ``mmap``, one
#: ``np.take``) where it has at least this many in one call and they are in
#: memory: on a TPU v5e host (gVisor, page cache warm) a window of 4,096 runs
#: of 64 KiB read at 1.3 GB/s by a ``preadv`` each on 8 threads, 5.7-6.0 GB/s
#: by a take per chunk (the GIL taken and released once a chunk, not once a run).
MAPPED_RUNS = 4
#: Whether this system says if a file's bytes are in memory (``RWF_NOWAIT``); set
#: False at its first refusal (gVisor refuses it: there a chunk is copied from
#: its mapping whatever the cache holds).
_asks_cached = hasattr(os, "RWF_NOWAIT")


def rows_of_runs(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The row indices of runs ``starts[i]:stops[i]``, one run after another.

    Example:
      >>> rows_of_runs(np.array([1, 6]), np.array([3, 9])).tolist()
      [1, 2, 6, 7, 8]
    """
    starts, stops = np.asarray(starts, np.int64), np.asarray(stops, np.int64)
    lengths = stops - starts
    before = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - before, lengths)


def _copy_if_cached(fd: int, lows: np.ndarray, highs: np.ndarray, row: int,
                    into: np.ndarray) -> bool:
    """Rows ``lows[i]:highs[i]`` of a chunk file (``row`` bytes each) into
    ``into`` (rows x ``row`` bytes) from a mapping of the rows they span,
    if the first run's bytes are in memory (read with ``RWF_NOWAIT``: a cold
    file is read run by run instead, where the disk reads only their bytes);
    False where they are not, or the file is shorter than they need (a
    mapping read past its file's end would kill the process)."""
    global _asks_cached
    if _asks_cached:
        first = into[:int(highs[0] - lows[0])]
        try:
            if os.preadv(fd, [first.data.cast("B")], int(lows[0]) * row,
                         os.RWF_NOWAIT) != first.nbytes:
                return False
        except BlockingIOError:
            return False
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            _asks_cached = False
    start = int(lows[0]) * row // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
    stop = int(highs[-1]) * row
    if os.fstat(fd).st_size < stop:  # cut short since opened: read by runs, which say so
        return False
    mapped = mmap.mmap(fd, stop - start, offset=start, access=mmap.ACCESS_READ)
    try:
        rows = np.frombuffer(mapped, np.uint8, offset=int(lows[0]) * row - start).reshape(-1, row)
        # mode="clip": the rows are in range, and "raise" would copy through a buffer
        np.take(rows, rows_of_runs(lows - lows[0], highs - lows[0]), axis=0, out=into,
                mode="clip")
        del rows
    finally:
        try:
            mapped.close()
        except BufferError:  # an error's traceback holds a view: unmapped when it goes
            pass
    return True


def _hold_open(files: OpenFiles, layout: ChunkLayout, paths: list, chunks: list,
               size: int) -> None:
    """Open (and check) the chunk files of a call not held in ``files`` yet,
    and hold them: before its runs are asked for (:func:`_advise_runs`), so
    that a loader's first window, whose files none is open yet, has all its
    runs in flight too (it read at a third of the disk's rate, a run per
    thread at a time). Files missing, or that ``files`` has no room for, are
    left to the reads."""
    for path, c in zip(paths, chunks):
        if files.full:
            return
        if files.get(path) is not None:
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            info = os.fstat(fd)
            _check_size(layout, (c,) + (0,) * (len(layout.chunks) - 1), path, info.st_size,
                        size)
        except BaseException:
            os.close(fd)
            raise
        files.saw(path, info)
        if not files.keep(path, fd):
            os.close(fd)


def _advise_runs(files: OpenFiles, paths: list, spans: list, row: int) -> None:
    """Ask the kernel to start reading every span of runs (``spans[k]``, rows of
    the chunk file ``paths[k]``) of the call whose file is held open in ``files``
    (``POSIX_FADV_WILLNEED``): a cold disk then has all of them in flight at
    once, not one per reading thread, and the ``preadv`` that follow find them
    in memory."""
    # (not where the system cannot say what is cached: gVisor, whose system calls cost
    # ~45 us each, serialised; its page cache is warm in the runs measured there)
    if not _asks_cached or not hasattr(os, "posix_fadvise") or len(paths) <= 1:
        return
    for path, joined in zip(paths, spans):
        fd = files.get(path)
        if fd is None:
            continue
        for lo, hi in joined:
            os.posix_fadvise(fd, lo * row, (hi - lo) * row, os.POSIX_FADV_WILLNEED)


def _spans(chunk_of: np.ndarray, starts: np.ndarray, stops: np.ndarray, bounds: list,
           per: int) -> list:
    """For each chunk's group of runs ``[bounds[k], bounds[k + 1])``, its runs
    as rows of the chunk's file, those that follow each other in it joined (a
    system call each), worked out for all chunks at once.

    Example:
      >>> _spans(np.array([0, 0, 0, 1]), np.array([0, 4, 9, 12]), np.array([4, 6, 10, 14]),
      ...        [0, 3, 4], 10)
      [[(0, 6), (9, 10)], [(2, 4)]]
    """
    if not len(starts):
        return []
    # a span begins at each chunk's first run and where a run does not follow the one before
    begins = np.flatnonzero(np.concatenate(
        [[True], (chunk_of[1:] != chunk_of[:-1]) | (starts[1:] != stops[:-1])]))
    lasts = np.concatenate([begins[1:] - 1, [len(starts) - 1]])
    base = chunk_of[begins] * per
    los, his = (starts[begins] - base).tolist(), (stops[lasts] - base).tolist()
    cut = np.searchsorted(begins, bounds).tolist()
    return [list(zip(los[a:b], his[a:b])) for a, b in zip(cut[:-1], cut[1:])]


def _pread_spans(layout: ChunkLayout, index: tuple, path: str, fd: int, spans: list,
                 row: int, into: np.ndarray) -> None:
    """Rows ``lo:hi`` of a chunk file for each ``(lo, hi)`` of ``spans`` (runs
    that follow each other in the file joined) into ``into``, a ``preadv`` each."""
    buffer, at = into.reshape(-1).data.cast("B"), 0
    for lo, hi in spans:
        _pread_into(layout, index, path, fd, buffer[at:at + (hi - lo) * row], lo * row)
        at += (hi - lo) * row


def prefetch(where, store: StoreSpec, region: tuple) -> None:
    """Ask the kernel to start reading the chunk files of a tile now.

    The data goes to the page cache, not to this process, so it costs no
    budget; it lets the disk work on several files while a task computes.
    Stores that go through Zarr are left alone.
    """
    layout = _raw_layout(where)
    if layout is None or layout.shard is not None or not hasattr(os, "posix_fadvise"):
        return
    for index in itertools.product(*chunk_ranges(region, layout.chunks)):
        try:
            fd = os.open(_chunk_file(layout, index), os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def write(where, store: StoreSpec, region: tuple, block: np.ndarray) -> None:
    """Write a tile (not empty) made of whole chunks (the last ones may be
    cut by the array's edge) of ``store``, at ``where``."""
    layout = _raw_layout(where)
    if layout is None or not (layout.encodes and all(
            s.start % c == 0 and (s.stop % c == 0 or s.stop == n)
            for s, c, n in zip(region, layout.chunks, layout.shape))):
        where.zarr_array()[region] = block
        counters.stored_written(store.path, counters.region_bytes(store, region))  # as decoded
        return
    block = np.asarray(block, dtype=layout.dtype)
    mode = where.file_mode()  # 0600 in jask's scratch
    for index in itertools.product(*chunk_ranges(region, layout.chunks)):
        src = tuple(slice(i * c - s.start, min((i + 1) * c, n) - s.start)
                    for i, c, s, n in zip(index, layout.chunks, region, layout.shape))
        part = block[src]
        if part.shape != layout.chunks or not layout.plain:
            # an edge chunk is stored full size; a compressed one in its order
            full = buffers.empty(layout.chunks, layout.dtype)  # (reused: jask.store.buffers)
            if layout.order == "F":
                full = full.reshape(layout.chunks[::-1]).T
            full.fill(layout.fill_value)
            full[tuple(slice(0, d) for d in part.shape)] = part
            part = full
        data = np.ascontiguousarray(part) if layout.plain else part.reshape(-1, order="A")
        if layout.decoder is None:
            view = data.data.cast("B")
        else:  # compressed here, in the task's thread
            view = memoryview(layout.decoder.encode(data.view(np.uint8))).cast("B")
        path = _chunk_file(layout, index)
        if path.count(os.sep) > layout.root.count(os.sep) + 1:  # keys with "/": c/0/1
            os.makedirs(os.path.dirname(path), exist_ok=True)
        counters.stored_written(layout.root, view.nbytes)
        # no O_TRUNC: a reused store's chunk file (jask.store.recycle) is overwritten
        # in place, with no blocks freed and allocated again
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, mode)
        try:
            size = view.nbytes
            while view:  # on a filling disk a write can be short before one fails
                view = view[os.write(fd, view):]
            if os.fstat(fd).st_size > size:
                os.ftruncate(fd, size)
        finally:
            os.close(fd)

