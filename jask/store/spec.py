"""What a store is: its path and layout, and facts that follow from them alone.

A :class:`StoreSpec` names a Zarr array on disk; nothing here touches the
disk, so every layer may use it.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field

import numpy as np

from jask.base.sizes import exact_bytes
from jask.base.urls import is_url

__all__ = ["StoreSpec", "kind_of", "FOLDER", "OBJECTS", "ICECHUNK", "ICECHUNK_PREFIX", "View",
           "Runs", "GRAD_SUFFIX", "stored_nbytes", "plain_v3_metadata",
           "DamagedStoreError", "check_metadata"]

#: Suffix of every store holding a gradient (a cotangent).
GRAD_SUFFIX = ".grad"

#: The kinds of location a store lives in (jask.store.location), as a spec's ``kind`` names them.
FOLDER, OBJECTS, ICECHUNK = "folder", "objects", "icechunk"

#: What every icechunk store path of jask's begins with (``icechunk+s3://bucket/
#: prefix?branch=main#array``: :mod:`jask.store.kinds.icechunk.repositories`).
ICECHUNK_PREFIX = "icechunk+"


def kind_of(path) -> str:
    """Which kind of location ``path`` names: the one test of a path's string,
    made when a spec is made (its ``kind``) or a user's path is located
    (:func:`jask.store.locate`).

    Example:
      >>> kind_of("/data/x.zarr"), kind_of("s3://bucket/x.zarr"), kind_of("icechunk+s3://b/r#x")
      ('folder', 'objects', 'icechunk')
      >>> kind_of("file:///data/x.zarr"), kind_of("memory:///x.zarr")
      ('folder', 'objects')
    """
    if isinstance(path, str) and ":" not in path:  # no scheme: a folder (most specs, made
        return FOLDER                               # per op, in 1 us rather than 3)
    if isinstance(path, str) and path.startswith(ICECHUNK_PREFIX):
        return ICECHUNK
    return OBJECTS if is_url(path) else FOLDER


@dataclass(frozen=True)
class StoreSpec:
    """Where an array lives and how it is laid out. Immutable, picklable."""

    path: str
    shape: tuple
    dtype: np.dtype
    chunks: tuple
    handle: int = 0
    managed: bool = True  # jask made it and may delete it
    # Set for a view (jask.store.views): the data is another store's (path
    # is the base's), read through a slice, axis permutation and unit axes.
    view: "View | None" = None
    # Which kind of location holds it (kind_of, jask.store.location): read
    # from the path once, here, so that no layer asks the path again.
    kind: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "kind", kind_of(self.path))


@dataclass(frozen=True)
class Runs:
    """A kept axis of a view whose positions are runs of consecutive base
    positions (a gather by such indices: a groupby's rows of one month, each
    year's days of it): ``runs`` holds ``(start, length)`` in the base, in
    the view's order."""

    runs: tuple

    @property
    def length(self) -> int:
        return sum(n for _, n in self.runs)


@dataclass(frozen=True)
class View:
    """How a view's elements sit in its base store (see :mod:`jask.store.views`).

    ``index`` has one entry per axis of ``base``: an int (the axis is
    dropped at that position), ``(start, step)`` of a kept axis, or (on
    one axis at most) :class:`Runs` of a kept axis gathered by runs; ``axes``
    one entry per axis of the view: which kept axis it shows (their order
    is the permutation) or None for a new axis of length 1.
    """

    base: StoreSpec
    index: tuple
    axes: tuple


class DamagedStoreError(ValueError):
    """A chunk of a store holds bytes that are not the chunk: a chunk file
    or shard that is empty, cut short, too long or does not decode to the
    chunk's size. Raised before the op that read it writes anything the
    user sees; the message names the store and the chunk.

    (A *missing* chunk file of a user's store is no damage: Zarr leaves out
    chunks that hold only the fill value, and they read as the fill value.)

    Example:
      >>> import jask
      >>> issubclass(jask.DamagedStoreError, ValueError)
      True
    """


#: Most bytes an array may have: numpy indexes with signed 64-bit integers.
MAX_ARRAY_BYTES = 2**63 - 1


def check_metadata(path: str, shape, chunks, dtype) -> tuple[tuple, np.dtype]:
    """The chunks and native-byte-order dtype jask reads the Zarr array at
    ``path`` as, or a ValueError/TypeError naming ``path`` and what is wrong
    with its metadata (in microseconds: nothing is read).

    jask reads numbers and booleans in any byte order (as numpy's native
    order); a chunk of 0 along an axis longer than 0 could hold nothing.

    Example:
      >>> check_metadata("a", (10, 0), (4, 0), np.dtype(">f4"))
      ((4, 1), dtype('float32'))
      >>> check_metadata("a", (10,), (0,), np.dtype("f4"))
      Traceback (most recent call last):
      ...
      ValueError: the Zarr array 'a' has chunks of length 0 along axis 0 (chunks (0,), shape (10,))
    """
    shape, chunks, dtype = tuple(shape), tuple(chunks), np.dtype(dtype)
    where = f"the Zarr array {path!r}"
    if len(chunks) != len(shape):
        raise ValueError(f"{where} has chunks {chunks} of {len(chunks)} axes for its shape "
                         f"{shape} of {len(shape)}")
    if any(n < 0 for n in shape) or any(c < 0 for c in chunks):
        raise ValueError(f"{where} has a negative length in its shape {shape} or chunks {chunks}")
    for axis, (n, c) in enumerate(zip(shape, chunks)):
        if c == 0 and n > 0:
            raise ValueError(f"{where} has chunks of length 0 along axis {axis} (chunks "
                             f"{chunks}, shape {shape})")
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(f"{where} holds {dtype} values; jask computes on numbers and booleans "
                        "only (bool, int, uint, float, complex)")
    if math.prod(shape) * dtype.itemsize > MAX_ARRAY_BYTES:
        raise ValueError(f"{where} of shape {shape} and dtype {dtype} would hold "
                         f"{exact_bytes(math.prod(shape) * dtype.itemsize)}, more than numpy can "
                         f"index ({MAX_ARRAY_BYTES})")
    return tuple(max(c, 1) for c in chunks), dtype.newbyteorder("=")



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




# Numeric dtypes whose Zarr v3 name is numpy's name (the spec's core types).
_V3_CORE_TYPES = {"int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                  "float32", "float64", "complex64", "complex128"}


@functools.lru_cache(maxsize=256)
def plain_v3_metadata(shape, dtype, chunks) -> str | None:
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
