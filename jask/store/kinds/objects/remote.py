"""Chunk I/O on object storage: tiles of a Zarr array at a URL, read and written.

What :mod:`jask.store.chunkio` does with files, done with requests
(obstore, :mod:`jask.store.kinds.objects.buckets`), many in flight per task from one
asyncio gather:

* an uncompressed C-order chunk is read by one ranged GET of just the rows
  the tile needs (a row range of a C-order chunk is contiguous);
* a compressed chunk (zstd, blosc, gzip: the numcodecs codec Zarr wraps) is
  fetched whole and decoded in the task's thread;
* a sharded array's shard index is fetched once per shard version (a suffix
  range, checked against its crc32c and the object's size), then each inner
  chunk by a ranged GET;
* anything else (filters, other codecs, big-endian) goes through zarr-python
  over zarr's ``ObjectStore`` on the same client.

Every object is checked as chunkio checks files (docs/promises.rst, checked
reads; the same layout record and decoder, :mod:`jask.store.chunk_layout`):
a chunk object of the wrong size, or one that does not decode to the chunk,
is a :class:`~jask.store.spec.DamagedStoreError` naming the URL and the key;
a missing chunk object reads as the fill value, as in Zarr.

Transient errors (a dropped connection, a dead endpoint, 5xx, throttling)
are retried with exponential backoff and jitter, each retry counted
(``counters.retried``); then :class:`RemoteStoreError` names the op, the URL
and the key, with every credential redacted. Nothing here knows of JAX or
Dask.

Writes put whole chunks, one PUT each; the metadata object (``zarr.json``) is
put by the caller last, so a half-written array never opens as complete.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import struct
import threading
import time

import google_crc32c
import numpy as np
import zarr

from jask.base import counters, forks, memory
from jask.store import buffers
from jask.store.chunk_layout import (
    DECODE_ERRORS,
    ChunkLayout,
    chunk_ranges,
    decode_into,
    layout_of,
    overlap,
)
from jask.store.kinds.objects.buckets import RemoteStoreError  # (sessions raises it too)
from jask.store.spec import DamagedStoreError, StoreSpec, check_metadata

from . import buckets, sessions

__all__ = ["RemoteStoreError", "read", "write", "write_metadata", "get", "put", "exists",
           "list_prefix", "delete_prefix", "open_array", "spec_of", "read_model", "forget",
           "remember", "metadata_text", "metadata_version", "opened_version"]

#: Retries of a transient error after the first attempt, and the first wait
#: (doubled each time, with jitter, at most BACKOFF_MAX): 0.1+0.2+0.4+0.8+1.6
#: s, about 3 s, rides out a restarting endpoint or a throttling burst.


class _Obstore:
    """obstore, imported when a URL is first used: jask imports and runs on
    local stores without the ``cloud`` extra."""

    def __getattr__(self, name: str):
        try:
            import obstore as module
        except ImportError as err:
            raise ImportError("jask reads and writes object storage (s3://, gs://, az://) "
                              'through obstore: pip install "jask[cloud]"') from err
        return getattr(module, name)


obstore = _Obstore()

RETRIES = 5
BACKOFF = 0.1
BACKOFF_MAX = 2.0
#: Requests in flight per task (one asyncio gather), and the encoded bytes
#: they may hold at once besides the tile (at least one request's).
IN_FLIGHT = 16
IN_FLIGHT_BYTES = 2**20

_METADATA = ("zarr.json", ".zarray")

def _secrets(url: str) -> dict:
    """The secrets a message about ``url`` must not show: its options' and
    the environment's credentials."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "GOOGLE_", "AZURE_"))
           and buckets._SECRET_WORDS.search(k) and len(v) >= 8}
    return {**env, **buckets.options_for(url)}


def _error(op: str, url: str, key: str | None, err: BaseException,
           attempts: int = 1) -> RemoteStoreError:
    cause = str(err).split("\n\nDebug source:")[0].strip() or type(err).__name__
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    where = f"{url!r}" + (f" key {key!r}" if key else "")
    text = f"{op} of the Zarr store {where} failed{tries}: {type(err).__name__}: {cause}"
    return RemoteStoreError(buckets.redact(text, _secrets(url)))


def _transient(err: BaseException) -> bool:
    """Whether a retry may succeed: connection errors, timeouts, 5xx, 429,
    and a bucket not found (one just made, or an endpoint just back, may not
    show it yet); a missing key is an answer, not a fault."""
    if isinstance(err, FileNotFoundError) and _no_bucket(err):
        return True
    if isinstance(err, (FileNotFoundError, PermissionError, DamagedStoreError)):
        return False
    bad = (obstore.exceptions.PermissionDeniedError, obstore.exceptions.UnauthenticatedError,
           obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError,
           obstore.exceptions.InvalidPathError, obstore.exceptions.NotSupportedError,
           obstore.exceptions.UnknownConfigurationKeyError)
    if isinstance(err, bad) or _bad_range(err):
        return False
    return isinstance(err, (obstore.exceptions.GenericError, ConnectionError, TimeoutError))


def _bad_range(err: BaseException) -> bool:
    """A ranged GET past an object's end: the object is shorter than a chunk."""
    return "InvalidRange" in str(err) or "Range Not Satisfiable" in str(err)


def _no_bucket(err: BaseException) -> bool:
    return "NoSuchBucket" in str(err)


def _wait(attempt: int) -> float:
    return min(BACKOFF_MAX, BACKOFF * 2**attempt) * (0.5 + random.random() / 2)


async def _retrying(op: str, url: str, key: str | None, call):
    """``await call()``, retrying transient errors; a RemoteStoreError at last."""
    for attempt in itertools.count():
        counters.requested(url)
        try:
            return await call()
        except Exception as err:
            if not _transient(err):
                raise
            if attempt >= RETRIES:
                raise _error(op, url, key, err, attempt + 1) from None
            counters.retried(url)
            await asyncio.sleep(_wait(attempt))


def _run(coro):
    """Run ``coro`` to completion from synchronous code (a task's thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # called from inside an event loop (a notebook's): run it on a thread of its own
    box: list = []
    thread = threading.Thread(target=lambda: box.append(_capture(coro)))
    thread.start()
    thread.join()
    ok, value = box[0]
    if ok:
        return value
    raise value


def _capture(coro):
    try:
        return True, asyncio.run(coro)
    except BaseException as err:  # re-raised on the caller's thread
        return False, err


# --- small object operations ------------------------------------------------------

def _client_key(url: str, name: str):
    loc = buckets.bucket_prefix(url)
    return loc.client, loc.key(name)


async def _missing_as_none(request):
    """``await request`` (an obstore GET or HEAD), or None for a missing object;
    a missing bucket raises (retried, then an error: never the fill value)."""
    try:
        return await request
    except FileNotFoundError as err:
        if _no_bucket(err):
            raise
        return None


async def _get(url: str, name: str, op: str = "read", copy: bool = True):
    """The object's bytes (None if missing); ``copy=False``: a view of the
    response body, decoded from directly (one encoded copy less per read)."""
    client, key = _client_key(url, name)

    async def call():
        result = await _missing_as_none(obstore.get_async(client, key))
        return None if result is None else await result.bytes_async()
    found = await _retrying(op, url, name, call)
    if found is None:
        return None
    return bytes(found) if copy else memoryview(found)


def get(url: str, name: str) -> bytes | None:
    """The bytes of object ``name`` under ``url`` (None: no such object).

    Example:
      >>> put("memory:///doc", "a", b"xyz"); get("memory:///doc", "a"), get("memory:///doc", "b")
      (b'xyz', None)
    """
    return _run(_get(url, name))


def put(url: str, name: str, data, *, create_only: bool = False, op: str = "write") -> None:
    """Put ``data`` as object ``name`` under ``url`` (``create_only``: fail
    with FileExistsError if it exists, by a conditional put).

    Example:
      >>> put("memory:///doc-put", "lock", b"1", create_only=True)
      >>> put("memory:///doc-put", "lock", b"2", create_only=True)
      Traceback (most recent call last):
      ...
      FileExistsError: 'memory:///doc-put' already holds 'lock'
    """
    client, key = _client_key(url, name)
    mode = "create" if create_only else "overwrite"

    async def call():
        try:
            await obstore.put_async(client, key, data, mode=mode)
        except obstore.exceptions.AlreadyExistsError:
            raise FileExistsError(f"{url!r} already holds {name!r}") from None
    _run(_retrying(op, url, name, call))


def write_metadata(url: str, text: str | bytes, name: str = "zarr.json") -> None:
    """Put the array's metadata object: the LAST write of a new array, so
    that it opens only once every chunk is in place.

    Example:
      >>> import numpy as np
      >>> from jask.store.spec import plain_v3_metadata
      >>> text = plain_v3_metadata((4,), np.dtype("float32"), (4,))
      >>> url = "memory:///doc-meta/x.zarr"
      >>> remember(url, text)  # the layout, before the metadata is in place
      >>> write(StoreSpec(url, (4,), np.dtype("float32"), (4,)), (slice(0, 4),), np.ones(4))
      >>> exists(url)
      False
      >>> write_metadata(url, text); exists(url)
      True
    """
    put(url, name, text.encode() if isinstance(text, str) else text, op="write of metadata")
    forget(url)


def exists(url: str) -> bool:
    """Whether a Zarr array or group's metadata is at ``url``.

    Example:
      >>> exists("memory:///nothing-here")
      False
    """
    async def any_metadata():
        found = await asyncio.gather(*(_head(url, n) for n in _METADATA + (".zgroup",)))
        return any(found)
    return _run(any_metadata())


async def _head(url: str, name: str) -> bool:
    return await _stat(url, name) is not None


async def _stat(url: str, name: str) -> tuple | None:
    """(name, ETag, size) of object ``name`` under ``url`` by one HEAD (None: no such object)."""
    client, key = _client_key(url, name)

    async def call():
        meta = await _missing_as_none(obstore.head_async(client, key))
        return None if meta is None else (name, meta.get("e_tag"), int(meta["size"]))
    return await _retrying("lookup", url, name, call)


def metadata_version(url: str, name: str | None = None) -> tuple | None:
    """What identifies the version of the Zarr array at ``url``: the (name,
    ETag, size) of its metadata object (``name``, else ``zarr.json`` or
    ``.zarray``), by HEAD requests (counted); None when there is none. A user's
    array at a URL carries no version token: another writer replacing it
    rewrites this object (jask.store.versions compares it before and after).

    Example:
      >>> put("memory:///doc-version/x.zarr", ".zarray", b"{}")
      >>> metadata_version("memory:///doc-version/x.zarr")[::2]
      ('.zarray', 2)
    """
    async def version():
        for each in (name,) if name else _METADATA:
            found = await _stat(url, each)
            if found is not None:
                return found
        return None
    return _run(version())


def list_prefix(url: str) -> list[str]:
    """Every key under ``url``, relative to it, sorted.

    Example:
      >>> put("memory:///lp/x.zarr", "c/0", b"1"); list_prefix("memory:///lp/x.zarr")
      ['c/0']
    """
    loc = buckets.bucket_prefix(url)
    prefix = loc.prefix + "/" if loc.prefix else ""

    async def call():
        out = []
        async for batch in obstore.list(loc.client, prefix or None):
            out.extend(m["path"] for m in batch)
        return out
    keys = _run(_retrying("listing", url, None, call))
    return sorted(k[len(prefix):] for k in keys)


def delete_prefix(url: str) -> int:
    """Delete every object under ``url`` (metadata first, so that a
    half-deleted array never opens); the number deleted.

    Example:
      >>> put("memory:///doc-del/x.zarr", "c/0", b"1"); delete_prefix("memory:///doc-del/x.zarr")
      1
    """
    keys = list_prefix(url)
    keys.sort(key=lambda k: k.rsplit("/", 1)[-1] not in _METADATA + (".zattrs", ".zgroup"))
    loc = buckets.bucket_prefix(url)
    meta = [k for k in keys if k.rsplit("/", 1)[-1] in _METADATA]

    async def remove(names):
        async def one(name):
            await _retrying("delete", url, name,
                            lambda: obstore.delete_async(loc.client, loc.key(name)))
        await _gather([one(n) for n in names])
    _run(remove(meta))
    _run(remove([k for k in keys if k not in meta]))
    forget(url)
    return len(keys)


async def _gather(coros, limit: int = IN_FLIGHT):
    """``asyncio.gather`` with at most ``limit`` running at once."""
    gate = asyncio.Semaphore(limit)

    async def gated(c):
        try:
            async with gate:
                return await c
        finally:
            c.close()  # (one never started, as another failed: no "never awaited")
    return await asyncio.gather(*(gated(c) for c in coros))


# --- what a store at a URL is ----------------------------------------------------

_arrays: dict[str, zarr.Array] = {}
_layouts: dict[str, ChunkLayout | None] = {}
# (url, shape, dtype, chunks) -> the metadata_version its array had when
# spec_of opened it: what an op reading it was planned with. Not a cache of
# the store (forget keeps it): a DiskArray of an older version must still fail.
_opened: dict[tuple, tuple] = {}
_indexes: dict[tuple, np.ndarray] = {}
_lock = forks.lock()
#: Stores whose array and layout are kept per process (a worker process sees
#: a scratch store per op and step: the oldest go first).
_MAX_CACHED = 256


def _bounded(cache: dict) -> None:
    while len(cache) >= _MAX_CACHED:
        cache.pop(next(iter(cache)))


def open_array(url: str, *, mode: str = "r") -> zarr.Array:
    """A ``zarr.Array`` of the array at ``url`` over zarr's ``ObjectStore``
    (on jask's obstore client: the same options and credentials).

    Example:
      >>> import numpy as np, jask
      >>> _ = jask.save(jask.from_numpy(np.arange(3.0)), "memory:///doc-open/x.zarr")
      >>> open_array("memory:///doc-open/x.zarr")[1:]
      array([1., 2.])
    """
    cached = _arrays.get(url) if mode == "r" else None
    if cached is not None:
        return cached
    loc = buckets.bucket_prefix(url)
    store = zarr.storage.ObjectStore(loc.client, read_only=mode == "r")
    for attempt in itertools.count():  # (zarr's own requests: retried here, as a whole)
        counters.requested(url)
        try:
            arr = zarr.open_array(store=store, path=loc.prefix, mode=mode)
            break
        except FileNotFoundError as err:
            if not _no_bucket(err) or attempt >= RETRIES:
                raise FileNotFoundError(f"no Zarr array at {url!r}") from None
        except obstore.exceptions.BaseError as err:
            if not _transient(err) or attempt >= RETRIES:
                raise _error("open", url, None, err, attempt + 1) from None
        counters.retried(url)
        time.sleep(_wait(attempt))
    if mode == "r":
        with _lock:
            _bounded(_arrays)
            _arrays[url] = arr
    return arr


def spec_of(url: str) -> StoreSpec:
    """The StoreSpec of the Zarr array at ``url`` (v2 or v3; checked as a
    local one is), reading its metadata only.

    Example:
      >>> import numpy as np, jask
      >>> _ = jask.save(jask.from_numpy(np.zeros((3, 5))), "memory:///doc-spec/x.zarr", chunks=2)
      >>> spec = spec_of("memory:///doc-spec/x.zarr"); spec.shape, spec.chunks
      ((3, 5), (2, 2))
    """
    version = metadata_version(url)  # before the metadata is read: a later change is seen
    try:
        arr = open_array(url)
    except (zarr.errors.NodeTypeValidationError, ValueError, KeyError, TypeError) as err:
        raise FileNotFoundError(f"{url!r} is not a Zarr array: {err}") from None
    chunks, dtype = check_metadata(url, arr.shape, arr.chunks, arr.dtype)
    spec = StoreSpec(url, tuple(arr.shape), dtype, chunks, managed=False)
    if version is not None:
        with _lock:
            _bounded(_opened)
            _opened[_opened_key(spec)] = version
    return spec


def _opened_key(store: StoreSpec) -> tuple:
    return store.path, tuple(store.shape), str(store.dtype), tuple(store.chunks)


def opened_version(store: StoreSpec) -> tuple | None:
    """The :func:`metadata_version` the array at ``store.path`` had when
    :func:`spec_of` gave ``store`` (the same URL, shape, dtype and chunks);
    None when no such store was opened in this process.

    Example:
      >>> import numpy as np, jask
      >>> _ = jask.save(jask.from_numpy(np.zeros(3)), "memory:///doc-opened/x.zarr")
      >>> opened_version(spec_of("memory:///doc-opened/x.zarr"))[0]
      'zarr.json'
    """
    return _opened.get(_opened_key(store))


def metadata_text(arr: zarr.Array) -> str:
    """The metadata document (``zarr.json``) of a Zarr v3 array.

    Example:
      >>> import zarr
      >>> arr = zarr.create_array(store=zarr.storage.MemoryStore(), shape=(2,), dtype="f4")
      >>> '"zarr_format": 3' in metadata_text(arr)
      True
    """
    return json.dumps(arr.metadata.to_dict(), default=str)


def remember(url: str, text: str) -> None:
    """Know the layout of the array at ``url`` from its metadata ``text``
    before it is written (it is written last); once per process (example:
    :func:`write_metadata`)."""
    if url not in _layouts:
        _layout_from(url, _array_from_text(url, text))


def _array_from_text(url: str, text: str) -> zarr.Array:
    from zarr.core.array import AsyncArray
    from zarr.core.metadata import ArrayV3Metadata
    from zarr.storage import StorePath

    loc = buckets.bucket_prefix(url)
    meta = ArrayV3Metadata.from_dict(json.loads(text))
    store = zarr.storage.ObjectStore(loc.client, read_only=False)
    return zarr.Array(AsyncArray(metadata=meta, store_path=StorePath(store, loc.prefix)))


def _layout(url: str) -> ChunkLayout | None:
    """The ChunkLayout of the array at ``url`` (root: the URL), or None when
    zarr-python's pipeline is needed."""
    try:
        return _layouts[url]
    except KeyError:
        return _layout_from(url, open_array(url))


def _layout_from(url: str, arr: zarr.Array) -> ChunkLayout | None:
    layout = layout_of(arr, url)
    with _lock:
        _bounded(_layouts)
        _layouts[url] = layout
        if url not in _arrays:
            _bounded(_arrays)
            _arrays[url] = arr
    return layout


def forget(url: str) -> None:
    """Drop what is cached about the store at ``url`` (its zarr.Array,
    layout and shard indexes), as for an array written anew there.

    Example:
      >>> forget("memory:///doc-forget/x.zarr")
    """
    with _lock:
        _arrays.pop(url, None)
        _layouts.pop(url, None)
        for key in [k for k in _indexes if k[0] == url]:
            _indexes.pop(key, None)


def read_model(store: StoreSpec) -> memory.ReadModel:
    """What reading ``store`` holds (:class:`jask.base.memory.ReadModel`): an
    uncompressed one is read by ranges as a local raw store is (``raw``);
    compressed chunks are decoded one at a time as local ones are, with up
    to ``group`` fetched at once (about IN_FLIGHT_BYTES). An uncompressed
    read holds up to ``fetched`` bytes of ranges in flight besides its tile
    (IN_FLIGHT_BYTES, or one range when that is larger).

    Example:
      >>> import numpy as np, jask
      >>> _ = jask.save(jask.from_numpy(np.ones((8, 8))), "memory:///doc-model/x.zarr", chunks=4)
      >>> m = read_model(spec_of("memory:///doc-model/x.zarr")); m.raw, m.unit, m.fetched
      (True, (4, 4), 1048576)
    """
    shape, itemsize = tuple(store.shape), np.dtype(store.dtype).itemsize
    try:
        arr = open_array(store.path)
    except FileNotFoundError:  # one jask is about to write: uncompressed chunks
        return memory.ReadModel(shape, tuple(store.chunks), itemsize, raw=True,
                                fetched=IN_FLIGHT_BYTES,
                                write_unit=tuple(store.chunks), whole_objects=True)
    layout = _layout(store.path)
    unit = tuple(max(1, c) for c in arr.chunks)
    codec = ",".join(type(c).__name__.replace("Codec", "").lower()
                     for c in tuple(arr.filters) + tuple(arr.compressors)) or "none"
    shards = getattr(arr, "shards", None)
    if shards:
        codec += f", sharded {tuple(shards)}"
    per = max(1, math.prod(unit) * itemsize)
    group = max(1, min(IN_FLIGHT, IN_FLIGHT_BYTES // per))
    if layout is None:
        return memory.ReadModel(shape, unit, itemsize, copies=memory.COMPRESSED_COPIES,
                                group=group, write_unit=tuple(shards or unit),
                                write_copies=memory.ZARR_WRITE_COPIES, codec=codec,
                                whole_objects=True)
    write_copies = (1 if layout.plain else memory.DECODED_COPIES) if layout.encodes \
        else memory.ZARR_WRITE_COPIES
    return memory.ReadModel(shape, unit, itemsize, raw=layout.plain,
                            fetched=IN_FLIGHT_BYTES if layout.plain else 0,
                            copies=memory.DECODED_COPIES, group=group,
                            write_unit=tuple(shards or unit), write_copies=write_copies,
                            codec=codec, whole_objects=True)


# --- reading tiles -----------------------------------------------------------------

def read(store: StoreSpec, region: tuple, out: np.ndarray | None = None) -> np.ndarray:
    """One tile of the array at the URL ``store.path`` as a numpy array
    (``out``, when given).

    Example:
      >>> import numpy as np, jask
      >>> _ = jask.save(jask.from_numpy(np.arange(6.0)), "memory:///doc-read/x.zarr", chunks=4)
      >>> read(spec_of("memory:///doc-read/x.zarr"), (slice(3, 6),))
      array([3., 4., 5.])
    """
    url = store.path
    layout = _layout(url)
    shape = tuple(s.stop - s.start for s in region)
    if layout is None:
        tile = _read_zarr(store, region)
        if out is None:
            return tile
        out[...] = tile
        return out
    if out is None:
        out = buffers.empty(shape, layout.dtype) if layout.plain else np.empty(shape, layout.dtype)
    jobs = [(index,) + overlap(index, region, layout.chunks)
            for index in itertools.product(*chunk_ranges(region, layout.chunks))]
    if layout.plain:
        row = math.prod(layout.chunks[1:]) * layout.dtype.itemsize
        most = max(1, IN_FLIGHT_BYTES // max(1, row * max(s[0].stop - s[0].start
                                                             for _, s, _ in jobs)))
        _run(_gather([_read_rows(layout, out, *job) for job in jobs], min(IN_FLIGHT, most)))
    elif layout.shard is None:
        chunk_bytes = math.prod(layout.chunks) * layout.dtype.itemsize
        most = max(1, IN_FLIGHT_BYTES // max(1, chunk_bytes))
        _run(_gather([_read_chunk(layout, out, *job) for job in jobs], min(IN_FLIGHT, most)))
    else:
        _run(_read_sharded(layout, out, jobs))
    return out


async def _read_rows(layout, out: np.ndarray, index: tuple, src: tuple, dst: tuple) -> None:
    """Rows ``src[0]`` of an uncompressed chunk by one ranged GET, into ``out[dst]``."""
    url, name = layout.root, layout.encode_key(index)
    row = math.prod(layout.chunks[1:]) * layout.dtype.itemsize
    full = row * layout.chunks[0]
    client, key = _client_key(url, name)
    rows = src[0]

    async def call():
        try:
            result = await _missing_as_none(obstore.get_async(
                client, key, options={"range": (rows.start * row, rows.stop * row)}))
        except obstore.exceptions.GenericError as err:
            if not _bad_range(err):
                raise
            return (await obstore.head_async(client, key))["size"], b""  # shorter than asked
        return None if result is None else (result.meta["size"], await result.bytes_async())
    found = await _retrying("read", url, name, call)
    if found is None:
        _check_may_be_missing(layout, index)
        out[dst] = layout.fill_value
        return
    size, data = found
    if size != full:
        raise layout.damaged(index, f"its object holds {size} bytes, not {full}")
    counters.stored_read(url, len(data))
    piece = np.frombuffer(memoryview(data), layout.dtype).reshape(
        (rows.stop - rows.start,) + layout.chunks[1:])
    out[dst] = piece[(slice(None),) + src[1:]]


async def _read_chunk(layout, out: np.ndarray, index: tuple, src: tuple, dst: tuple) -> None:
    """One whole compressed chunk, decoded, into ``out[dst]``."""
    data = await _get(layout.root, layout.encode_key(index), copy=False)
    if data is None:
        _check_may_be_missing(layout, index)
    _place(layout, out, index, src, dst, data)


def _check_may_be_missing(layout, index: tuple) -> None:
    """Zarr leaves chunks of only the fill value unwritten, but jask writes
    every chunk of its own stores: there a missing object is damage."""
    if sessions.holds_jask_stores(layout.root):
        raise FileNotFoundError(
            f"chunk {layout.key(index)!r} of the Zarr store {layout.root!r} is missing (no "
            "such object): the store is damaged or was removed")


def _place(layout, out, index, src, dst, data) -> None:
    if data is None:
        out[dst] = layout.fill_value
        return
    counters.stored_read(layout.root, len(data))
    chunk = np.empty(layout.chunks, dtype=layout.dtype, order=layout.order)
    decode_into(layout, index, data, chunk.reshape(-1, order="A").view(np.uint8))
    out[dst] = chunk[src]


async def _read_sharded(layout, out: np.ndarray, jobs: list) -> None:
    """Inner chunks of shards: each shard's index once, then ranged GETs."""
    shards, inner, _, _ = layout.shard
    per = tuple(s // c for s, c in zip(shards, inner))
    by_shard: dict[tuple, list] = {}
    for job in jobs:
        by_shard.setdefault(tuple(i // p for i, p in zip(job[0], per)), []).append(job)
    indexes = await _gather([_shard_index(layout, where) for where in by_shard])
    client = buckets.bucket_prefix(layout.root).client
    reads = []
    for (where, group), index in zip(by_shard.items(), indexes):
        name = layout.encode_key(where)
        for job in group:
            slot = int(np.ravel_multi_index(tuple(i % p for i, p in zip(job[0], per)), per))
            if index is None or int(index[slot, 0]) == 2**64 - 1:
                _check_may_be_missing(layout, job[0])
                out[job[2]] = layout.fill_value
                continue
            reads.append(_read_inner(layout, out, client, name, index[slot], job))
    chunk_bytes = math.prod(inner) * layout.dtype.itemsize
    await _gather(reads, max(1, min(IN_FLIGHT, IN_FLIGHT_BYTES // max(1, chunk_bytes))))


async def _read_inner(layout, out, client, name: str, entry, job) -> None:
    offset, nbytes = int(entry[0]), int(entry[1])
    key = buckets.bucket_prefix(layout.root).key(name)

    async def call():
        result = await obstore.get_async(client, key,
                                         options={"range": (offset, offset + nbytes)})
        return await result.bytes_async()
    data = memoryview(await _retrying("read", layout.root, name, call))
    if len(data) != nbytes:
        raise layout.damaged(job[0], f"its shard object {name!r} ended early")
    index, src, dst = job
    _place(layout, out, index, src, dst, data)


async def _shard_index(layout, where: tuple) -> np.ndarray | None:
    """The checked index of shard ``where`` (None: no such shard)."""
    shards, inner, at_end, crc = layout.shard
    per = tuple(s // c for s, c in zip(shards, inner))
    size = math.prod(per) * 16 + (4 if crc else 0)
    url, name = layout.root, layout.encode_key(where)
    client, key = _client_key(url, name)

    async def call():
        result = await _missing_as_none(obstore.get_async(
            client, key, options={"range": {"suffix": size} if at_end else (0, size)}))
        return None if result is None else (result.meta, await result.bytes_async())
    found = await _retrying("read", url, name, call)
    if found is None:
        return None
    meta, raw = found[0], bytes(found[1])
    cache_key = (url, name, meta.get("e_tag"), meta["size"])
    cached = _indexes.get(cache_key)
    if cached is not None:
        return cached
    bad = f"shard {name!r} of the Zarr store {url!r} is damaged: its object "
    total = int(meta["size"])
    if total < size or len(raw) != size:
        raise DamagedStoreError(bad + f"holds {total} bytes, less than its index of {size} "
                                "bytes")
    if crc and struct.pack("<I", google_crc32c.value(raw[:-4])) != raw[-4:]:
        raise DamagedStoreError(bad + "has an index that does not match its crc32c checksum")
    index = np.frombuffer(raw, "<u8", count=math.prod(per) * 2).reshape(-1, 2)
    written = index[:, 0] != np.uint64(2**64 - 1)
    lo, hi = (0, total - size) if at_end else (size, total)
    offsets, lengths = index[written, 0], index[written, 1]
    if np.any((offsets < lo) | (lengths > hi) | (offsets > hi - lengths)):
        raise DamagedStoreError(bad + f"has an index pointing outside its chunk bytes "
                                f"[{lo}, {hi}) (cut short, or not a shard)")
    with _lock:
        if len(_indexes) >= 64:
            _indexes.pop(next(iter(_indexes)))
        _indexes[cache_key] = index
    return index


def _read_zarr(store: StoreSpec, region: tuple) -> np.ndarray:
    """A tile through zarr-python (filters, other codecs, big-endian)."""
    arr = open_array(store.path)
    counters.stored_read(store.path, counters.region_bytes(store, region))
    try:
        return np.asarray(arr[region]).astype(store.dtype, copy=False)
    except obstore.exceptions.BaseError as err:
        raise _error("read", store.path, None, err) from None
    except DECODE_ERRORS as err:
        raise DamagedStoreError(f"a chunk of the Zarr store {store.path!r} in the region "
                                f"{region} is damaged: Zarr could not decode it "
                                f"({type(err).__name__}: {err})") from err


# --- writing whole chunks ----------------------------------------------------------

def write(store: StoreSpec, region: tuple, block: np.ndarray) -> None:
    """Write a tile of whole chunks (the last ones may be cut by the array's
    edge) of the array at ``store.path``: one PUT per chunk, encoded here for
    uncompressed, zstd and gzip chunks, through Zarr otherwise. Its metadata
    must be known (:func:`remember`) or in place (example: :func:`write_metadata`)."""
    url = store.path
    layout = _layout(url)
    if layout is None or not (layout.encodes and all(
            s.start % c == 0 and (s.stop % c == 0 or s.stop == n)
            for s, c, n in zip(region, layout.chunks, layout.shape))):
        arr = _arrays.get(url)
        if arr is None or arr.read_only:
            arr = open_array(url, mode="r+")
        try:
            arr[region] = block
        except obstore.exceptions.BaseError as err:
            raise _error("write", url, None, err) from None
        counters.stored_written(url, counters.region_bytes(store, region))
        return
    block = np.asarray(block, dtype=layout.dtype)
    puts = []
    for index in itertools.product(*chunk_ranges(region, layout.chunks)):
        src = tuple(slice(i * c - s.start, min((i + 1) * c, n) - s.start)
                    for i, c, s, n in zip(index, layout.chunks, region, layout.shape))
        part = block[src]
        if part.shape != layout.chunks or not layout.plain:
            full = np.empty(layout.chunks, layout.dtype, order=layout.order)
            full.fill(layout.fill_value)
            full[tuple(slice(0, d) for d in part.shape)] = part
            part = full
        data = np.ascontiguousarray(part) if layout.plain else part.reshape(-1, order="A")
        if layout.decoder is not None:
            data = layout.decoder.encode(data.view(np.uint8))
        # (no copy: obstore reads the buffer)
        payload = (np.ascontiguousarray(data).data if isinstance(data, np.ndarray)
                   else memoryview(data)).cast("B")
        counters.stored_written(url, payload.nbytes)
        puts.append(_put(url, layout.encode_key(index), payload))
    _run(_gather(puts))


async def _put(url: str, name: str, data) -> None:
    client, key = _client_key(url, name)
    await _retrying("write", url, name, lambda: obstore.put_async(client, key, data))
