"""Zarr and the filesystem: store specs, chunk I/O, making and replacing
stores, sessions, disk space, the registry of handles. No JAX or Dask here.

This module is the store's front door: the layers above import what they use
from here (and the record itself from :mod:`jask.store.spec`, the lifetimes
from :mod:`jask.store.registry`), never from the modules behind it, so those
can move without the layers above learning of it (``pyproject.toml``'s
import contract checks it). Where a store lives is its :func:`location_of`: one
:class:`~jask.store.location.Location` per kind (a local folder, a prefix in
object storage, an icechunk branch), which owns what differs between them.
"""
from __future__ import annotations

import os

from jask.store.buffers import scope as buffer_scope
from jask.store.chunkio import OpenFiles
from jask.store.groups import Member, group_members, read_values, zarr_store
from jask.store.groups import open_array as open_zarr_array
from jask.store.kinds.icechunk.repositories import name as icechunk_name
from jask.store.kinds.local.saves import put as put_saved
from jask.store.kinds.objects.buckets import RemoteStoreError
from jask.store.layout import compressed, create_at, maker_like
from jask.store.location import Location, location_of
from jask.store.memmaps import WritableView, open_writable
from jask.store.recycle import clear as clear_recycled
from jask.store.space import (
    DiskFullError,
    StoreChangedError,
    check_space,
    check_unchanged,
    raise_if_full,
    snapshot,
    space_errors,
    stamp,
)
from jask.store.spec import OBJECTS, DamagedStoreError, kind_of
from jask.store.tiles import forget as forget_cached
from jask.store.tiles import open_array, prefetch, read, read_model, read_runs, reads_runs, write
from jask.store.trash import wait as wait_for_trash
from jask.store.versions import (
    check_layouts,
    held,
    identity,
    replaced,
    resolved,
    write_token,
    written_here,
)
from jask.store.views import as_transposed, base_of
from jask.store.views import gather as gather_view
from jask.store.views import key as view_key
from jask.store.views import reshape as reshape_view
from jask.store.views import same as same_elements
from jask.store.views import take as slice_view
from jask.store.views import transpose as transpose_view

# each kind of location registers itself with jask.store.location when imported
from .kinds.icechunk import location as icechunk_branch  # noqa: F401
from .kinds.local import location as local_folder  # noqa: F401
from .kinds.objects import buckets
from .kinds.objects import location as object_prefix  # noqa: F401

__all__ = [
    "Location", "location_of", "locate", "register_options",
    "worker_options",
    # tiles
    "read", "read_runs", "OpenFiles", "reads_runs", "write", "read_model", "prefetch",
    "forget_cached", "open_array", "buffer_scope",
    # views
    "view_key", "base_of", "as_transposed", "transpose_view", "slice_view", "reshape_view",
    "gather_view", "same_elements",
    # making stores, groups, what to_memmap hands out
    "create_at", "maker_like", "compressed", "Member", "group_members", "read_values",
    "zarr_store", "open_zarr_array", "put_saved", "icechunk_name", "WritableView", "open_writable",
    # versions and disk space
    "DiskFullError", "StoreChangedError", "RemoteStoreError", "DamagedStoreError", "check_space",
    "space_errors", "raise_if_full", "snapshot", "held", "stamp", "check_unchanged",
    "check_layouts", "identity", "replaced", "resolved", "write_token", "written_here",
    # sessions and garbage
    "session_dir", "journal_dir", "clear_recycled", "wait_for_trash",
]

def locate(path, storage_options: dict | None = None) -> Location:
    """The location a user named: a folder (a ``file://`` URL's too) or the URL
    of object storage, checked before any message could show its secrets, its
    ``storage_options`` kept for every store under it in this process, and its
    client made (bad options: a ValueError naming them, not the array).

    Example:
      >>> locate("file:///data/x.zarr")
      LocalFolder(path='/data/x.zarr')
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, str) and path.startswith("file://"):
        path = buckets.local_path(path)
    if kind_of(path) != OBJECTS:
        return location_of(path)
    url = buckets.check_url(path)
    buckets.register_options(url, storage_options)
    buckets.bucket_prefix(url).client  # made now: bad options raise here, naming them
    return location_of(url)


def register_options(path, storage_options: dict | None) -> None:
    """Use ``storage_options`` for every store under ``path`` in this process
    (a URL's: a folder has none)."""
    location_of(os.fspath(path)).register_options(storage_options)


def worker_options(scratch_dir: str, storage_options) -> dict[str, dict]:
    """Every URL prefix's options registered in this process, and the scratch
    prefix's own (registered here only once this process's session starts, at
    its first op): what a worker process registers to reach the same stores."""
    options = buckets.registered()
    if location_of(scratch_dir).reads_by_request and storage_options:
        options.setdefault(scratch_dir, dict(storage_options))
    return options


def session_dir(scratch_dir: str) -> str:
    """This process's session (a folder, or a prefix in object storage) in
    ``scratch_dir``, made on first use: where jask's own stores go."""
    return location_of(scratch_dir).session()


def journal_dir(scratch_dir: str) -> str:
    """The local folder journalling this process's saves to local paths,
    whatever kind of location ``scratch_dir`` is."""
    return location_of(scratch_dir).journal()
