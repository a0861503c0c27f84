"""What a Zarr group holds: its arrays' names, dimension names and attributes.

Read from the metadata only (no chunk is opened). Dimension names come from
Zarr v3's ``dimension_names`` or, for stores xarray wrote in Zarr v2, from
the ``_ARRAY_DIMENSIONS`` attribute.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import zarr

from .kinds.objects import buckets

__all__ = ["Member", "group_members", "read_values", "open_array", "zarr_store"]

_DIMS_ATTR = "_ARRAY_DIMENSIONS"  # xarray's name for dimension names in Zarr v2


@dataclass(frozen=True)
class Member:
    """One array of a group: its name, path, dimension names and attributes."""

    name: str
    path: str
    dims: tuple[str, ...]
    attrs: dict
    dtype: np.dtype
    nbytes: int


def _dims(name: str, array) -> tuple[str, ...]:
    names = getattr(array.metadata, "dimension_names", None)
    if not names or any(n is None for n in names):
        names = array.attrs.get(_DIMS_ATTR)
    if not names:  # no names stored: xarray's own default
        names = [f"dim_{i}" for i in range(array.ndim)]
    if len(names) != array.ndim:
        raise ValueError(f"array {name!r} has {array.ndim} dimensions but its metadata names "
                         f"{len(names)}: {list(names)}")
    return tuple(str(n) for n in names)


def group_members(path) -> tuple[list[Member], dict]:
    """The arrays directly in the Zarr group at ``path`` and the group's attributes.

    Raises FileNotFoundError, naming the path, when there is no Zarr group.
    """
    path = os.fspath(path)
    url = buckets.is_url(path)
    if not url and not os.path.isdir(path):
        raise FileNotFoundError(f"no Zarr group at {path!r} (no such folder)")
    try:
        group = zarr.open_group(zarr_store(path), mode="r")
    except Exception as err:  # zarr raises several kinds for a folder that is no group
        raise FileNotFoundError(f"{path!r} is not a Zarr group: {err}") from None
    try:
        arrays = sorted(group.arrays())
    except Exception as err:  # noqa: BLE001 - zarr's several kinds for a member's bad metadata
        raise FileNotFoundError(f"the Zarr group {path!r} holds an array whose metadata zarr "
                                f"cannot read: {type(err).__name__}: {err}") from None
    members = []
    for name, array in arrays:
        attrs = {k: v for k, v in array.attrs.items() if k != _DIMS_ATTR}
        members.append(Member(name, f"{path}/{name}" if url else os.path.join(path, name),
                              _dims(name, array), attrs,
                              np.dtype(array.dtype), int(array.nbytes)))
    return members, dict(group.attrs)


def read_values(path) -> np.ndarray:
    """The whole array at ``path`` in memory, through Zarr (labels, dates: small arrays of
    types jask does not compute on)."""
    return np.asarray(zarr.open_array(zarr_store(os.fspath(path)), mode="r")[...])


def open_array(path: str) -> zarr.Array:
    """The ``zarr.Array`` at ``path`` (a folder or a URL), read-only, on :func:`zarr_store`."""
    return zarr.open_array(zarr_store(path), mode="r")


def zarr_store(path: str, *, read_only: bool = True):
    """What zarr (and xarray and dask through it) opens for ``path``: the folder
    itself, or for a URL zarr's own ``ObjectStore`` on jask's obstore client
    (the options and credentials jask reads it with), so no fsspec
    filesystem (s3fs, gcsfs, adlfs) is needed."""
    if not buckets.is_url(path):
        return path
    loc = buckets.bucket_prefix(path)
    if read_only or not loc.rootable:  # reading writes nothing above the path
        return zarr.storage.StorePath(zarr.storage.ObjectStore(loc.client, read_only=read_only),
                                      loc.prefix)
    # zarr writing at a StorePath of the bucket writes parent groups' zarr.json
    # above the path: a writer gets a client rooted at it
    return zarr.storage.ObjectStore(loc.rooted_client, read_only=False)
