"""Making empty stores: jask's own plain layout, or a copy of a user's layout."""
from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from jask.store.location import location_of
from jask.store.spec import StoreSpec, plain_v3_metadata

from . import tiles

__all__ = ["create_at", "create_like", "maker_like", "compressed"]


def create_at(path: str, shape, dtype, chunks) -> StoreSpec:
    """Make an empty uncompressed Zarr v3 array at ``path`` (jask's layout)."""
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    if not shape:  # zarr refuses chunks=None here; 0-d stores are not supported yet
        raise TypeError(f"jask cannot make a 0-d store yet (at {path!r})")
    location_of(path).create(shape, dtype, tuple(chunks),
                             plain_v3_metadata(shape, dtype, tuple(chunks)))
    return StoreSpec(path, shape, dtype, tuple(chunks))


def create_like(original: str, path: str) -> None:
    """An empty array at ``path`` laid out exactly as the Zarr array at
    ``original`` (format, chunks, shards, codecs, fill value, attributes,
    dimension names)."""
    source = tiles.open_array(original)  # opened once per process, as ops read it
    meta = source.metadata
    extra: dict[str, Any]  # keyword arguments of zarr.create_array for this format
    if meta.zarr_format == 3:
        extra = dict(shards=source.shards, dimension_names=meta.dimension_names,
                     serializer=source.serializer, chunk_key_encoding=meta.chunk_key_encoding)
    else:
        extra = dict(order=source.order, chunk_key_encoding={
            "name": "v2", "separator": meta.dimension_separator})
    zarr.create_array(store=path, shape=source.shape, chunks=source.chunks,
                      dtype=source.dtype, compressors=source.compressors,
                      filters=source.filters, fill_value=source.fill_value,
                      attributes=dict(source.attrs), zarr_format=meta.zarr_format, **extra)


def maker_like(target: StoreSpec):
    """``path -> None`` making an empty store at ``path`` laid out as
    ``target`` (what :func:`jask.store.kinds.local.durability.replace` stages into):
    jask's own layout without asking Zarr, a user's copied from its metadata."""
    def make(path: str) -> None:
        if target.managed:
            create_at(path, target.shape, target.dtype, target.chunks)
        else:
            create_like(target.path, path)
    return make


def compressed(target: StoreSpec) -> bool:
    """Whether ``target``'s chunks pass through codecs beyond plain bytes, so
    that :func:`jask.store.spec.stored_nbytes` is only an upper bound."""
    if target.managed:
        return False
    source = tiles.open_array(target.path)
    return bool(source.compressors or source.filters)

