"""What a chunk of a Zarr array is, wherever its bytes live.

jask reads and writes chunks itself in two places: :mod:`jask.store.chunkio`
(files on a local disk) and :mod:`jask.store.kinds.objects.remote` (objects at a URL).
Both need the same facts about an array: its chunk grid and chunk keys, the
one codec that turns a chunk's bytes into the chunk (or that Zarr's own
pipeline is needed), its shards' inner chunks, and a checked decode that
names the store and the chunk when the bytes are not the chunk. They live
here, apart from both, so that each I/O module imports them and neither
imports the other for them (chunkio hands URLs to remote; remote imports
nothing of chunkio). Nothing here reads or writes a store.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BytesCodec, ShardingCodec

from jask.store.spec import DamagedStoreError

__all__ = ["ChunkCodec", "ChunkLayout", "layout_of", "decode_into", "DECODE_ERRORS",
           "chunk_ranges", "overlap"]

#: What numcodecs and Zarr raise for bytes that are no chunk.
DECODE_ERRORS = (ValueError, RuntimeError, EOFError, ArithmeticError, TypeError)


class ChunkCodec(Protocol):
    """What jask uses of a numcodecs codec (``numcodecs.abc.Codec``)."""

    def encode(self, buf: Any) -> Any: ...

    def decode(self, buf: Any, out: Any = None) -> Any: ...


@dataclass(frozen=True)
class ChunkLayout:
    """Where each chunk of a Zarr array whose chunks jask reads itself lives
    under ``root`` (a local folder or a URL), and how a chunk's bytes (a
    file, an object, or a byte range of a shard) become the chunk."""

    root: str
    shape: tuple
    chunks: tuple
    dtype: np.dtype
    fill_value: object
    encode_key: Callable[[tuple], str]  # (chunk index) -> "c/0/1"
    decoder: ChunkCodec | None = None  # for compressed chunks; None: plain bytes
    order: Literal["C", "F"] = "C"
    encodes: bool = True  # whether jask may encode chunks as Zarr would here
    # (shard shape, inner chunk shape, index at the end, index has a crc32c)
    shard: tuple | None = None

    @property
    def plain(self) -> bool:
        """Chunks hold the chunk's bytes in C order: byte ranges work."""
        return self.decoder is None and self.order == "C" and self.shard is None

    def key(self, index: tuple) -> str:
        """The chunk's key (``c/1/2``), or for an inner chunk of a shard the
        shard's key and the inner chunk's index in it."""
        if self.shard is None:
            return self.encode_key(index)
        per = tuple(s // c for s, c in zip(self.shard[0], self.shard[1]))
        where = tuple(i // p for i, p in zip(index, per))
        return f"{self.encode_key(where)} (inner chunk {tuple(i % p for i, p in zip(index, per))})"

    def damaged(self, index: tuple, what: str) -> DamagedStoreError:
        """The error for chunk ``index`` whose bytes are not the chunk."""
        return DamagedStoreError(f"chunk {self.key(index)!r} of the Zarr store {self.root!r} is "
                                 f"damaged: {what}")


def layout_of(arr: zarr.Array, root: str) -> ChunkLayout | None:
    """The layout of ``arr``'s chunks under ``root`` when jask can read them
    itself: each chunk one object (or one byte range of a shard) that a
    single codec decodes to the chunk's little-endian bytes; None when
    Zarr's own pipeline is needed (filters, other codecs, big-endian).

    Example:
      >>> import zarr
      >>> arr = zarr.create_array(zarr.storage.MemoryStore(), shape=(5, 4), chunks=(2, 4),
      ...                         dtype="f4", compressors=zarr.codecs.ZstdCodec())
      >>> layout = layout_of(arr, "/data/x.zarr")
      >>> layout.chunks, type(layout.decoder).__name__, layout.plain
      ((2, 4), 'Zstd', False)
    """
    found = _codec_fields(arr)
    if (found is not None and np.dtype(arr.dtype).isnative and np.little_endian
            and arr.shape and all(c > 0 for c in arr.chunks)):
        fill = arr.fill_value if arr.fill_value is not None else 0
        return ChunkLayout(root, tuple(arr.shape), tuple(arr.chunks), np.dtype(arr.dtype),
                           fill, arr.metadata.encode_chunk_key, **found)
    return None


def _codec_fields(arr) -> dict | None:
    """The ChunkLayout fields (``decoder``, ``order``, ``encodes``, ``shard``)
    of an array whose each chunk is one file or object (or one byte range of
    a shard) that a single codec decodes to the chunk's little-endian bytes;
    else None."""
    meta = arr.metadata
    if meta.zarr_format == 2:
        if meta.filters or not np.dtype(arr.dtype).isnative:
            return None
        return dict(decoder=meta.compressor, order=meta.order)
    codecs = meta.codecs
    if getattr(meta, "storage_transformers", ()) or not codecs:
        return None
    shard = None
    if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):
        sharding = codecs[0]
        index_types = [type(c).__name__ for c in sharding.index_codecs]
        if index_types not in (["BytesCodec"], ["BytesCodec", "Crc32cCodec"]):
            return None
        shard = (tuple(arr.shards), tuple(sharding.chunk_shape),
                 sharding.index_location.value == "end", len(index_types) == 2)
        codecs = sharding.codecs
    found = _single_codec(codecs)
    if found is None:
        return None
    decoder, encodes = found
    return dict(decoder=decoder, encodes=encodes and shard is None, shard=shard)


def _single_codec(codecs) -> tuple | None:
    """(numcodecs codec or None, whether jask may encode) for [bytes, codec?]."""
    if (not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2
            or codecs[0].endian is not None and codecs[0].endian.value != "little"):
        return None
    if len(codecs) == 1:
        return None, True
    codec = codecs[1]
    if isinstance(codec, zarr.codecs.ZstdCodec):
        return numcodecs.Zstd(level=codec.level, checksum=codec.checksum), True
    if isinstance(codec, zarr.codecs.BloscCodec):
        # blosc frames describe themselves: any Blosc decodes them, but
        # writing is left to Zarr, which knows the store's settings
        return numcodecs.Blosc(), False
    if isinstance(codec, zarr.codecs.GzipCodec):
        return numcodecs.GZip(level=codec.level), True
    return None


def decode_into(layout: ChunkLayout, index: tuple, data: bytes | memoryview,
                out: np.ndarray) -> None:
    """Decode chunk ``index`` into all of ``out``, or raise DamagedStoreError.

    numcodecs decodes a frame shorter than ``out`` into its start and says
    nothing, leaving the rest as it was: the decoded size is checked first
    (blosc and zstd frames state it) or after (gzip).

    Example:
      >>> import numcodecs, numpy as np
      >>> layout = ChunkLayout("/data/x.zarr", (4,), (4,), np.dtype("f4"), 0.0,
      ...                      lambda i: f"c/{i[0]}", decoder=numcodecs.Zstd())
      >>> out = np.empty(4, np.float32)
      >>> decode_into(layout, (0,), numcodecs.Zstd().encode(np.arange(4.0, dtype="f4")),
      ...             out.view(np.uint8)); out
      array([0., 1., 2., 3.], dtype=float32)
      >>> decode_into(layout, (1,), numcodecs.Zstd().encode(np.zeros(3, "f4")),
      ...             out.view(np.uint8))
      Traceback (most recent call last):
      ...
      jask.store.spec.DamagedStoreError: chunk 'c/1' ... decode to 12 bytes, not 16
    """
    codec = layout.decoder
    name = "uncompressed" if codec is None else f"{type(codec).__name__.lower()}-compressed"
    got: int | None
    try:
        if codec is None:
            got = len(data)
        elif isinstance(codec, numcodecs.Blosc):
            got = _blosc_content_size(data)
        elif isinstance(codec, numcodecs.Zstd):
            got = _zstd_content_size(data)
        else:
            got = None
        if got is not None and got < 0:
            raise layout.damaged(index, f"its {len(data)} bytes are no whole {name} chunk")
        if got is not None and got != out.nbytes:
            raise layout.damaged(index, f"its {len(data)} bytes, a {name} chunk, decode to "
                                 f"{got} bytes, not {out.nbytes}")
        if codec is None:
            out[:] = np.frombuffer(data, np.uint8)
        elif got is not None:
            codec.decode(data, out=out)
        else:
            decoded = np.frombuffer(memoryview(codec.decode(data)).cast("B"), np.uint8)
            if decoded.nbytes != out.nbytes:
                raise layout.damaged(index, f"its {len(data)} bytes, a {name} chunk, decode "
                                     f"to {decoded.nbytes} bytes, not {out.nbytes}")
            out[:] = decoded
    except DamagedStoreError:
        raise
    except (ValueError, RuntimeError, EOFError, OSError, TypeError) as err:
        # each codec has its own way of saying its input is no frame of it
        raise layout.damaged(index, f"its {len(data)} bytes are not a {name} chunk "
                                    f"({type(err).__name__}: {err})") from err


def _blosc_content_size(frame: bytes | memoryview) -> int:
    """The decoded size a blosc frame header states (-1: no whole blosc frame)."""
    if len(frame) < 16:
        return -1
    nbytes, _, cbytes = struct.unpack_from("<III", frame, 4)
    return nbytes if cbytes == len(frame) else -1


def _zstd_content_size(frame: bytes | memoryview) -> int | None:
    """The decoded size a zstd frame header states (-1: no zstd frame;
    None: not stated, as in a frame written by a stream)."""
    if len(frame) < 5 or frame[:4] != b"\x28\xb5\x2f\xfd":
        return -1
    flags = frame[4]
    single = flags >> 5 & 1
    size_bytes = (1 if single else 0, 2, 4, 8)[flags >> 6]
    start = 5 + (0 if single else 1) + (0, 1, 2, 4)[flags & 3]
    if size_bytes == 0:
        return None
    if len(frame) < start + size_bytes:
        return -1
    size = int.from_bytes(frame[start:start + size_bytes], "little")
    return size + 256 if size_bytes == 2 else size


def chunk_ranges(region: tuple, chunks: tuple) -> list[range]:
    """The chunk indexes ``region`` touches, one range per axis.

    Example:
      >>> chunk_ranges((slice(3, 9), slice(0, 2)), (4, 2))
      [range(0, 3), range(0, 1)]
    """
    return [range(s.start // c, (s.stop - 1) // c + 1) for s, c in zip(region, chunks)]


def overlap(index: tuple, region: tuple, chunks: tuple) -> tuple[tuple, tuple]:
    """Where chunk ``index`` and ``region`` meet: (slices in the chunk, in the region).

    Example:
      >>> overlap((1,), (slice(3, 9),), (4,))
      ((slice(0, 4, None),), (slice(1, 5, None),))
    """
    src, dst = [], []
    for i, s, c in zip(index, region, chunks):
        lo, hi = max(s.start, i * c), min(s.stop, (i + 1) * c)
        src.append(slice(lo - i * c, hi - i * c))
        dst.append(slice(lo - s.start, hi - s.start))
    return tuple(src), tuple(dst)
