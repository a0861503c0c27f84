"""Zarr and the filesystem: store specs, chunk I/O, making and replacing
stores, sessions, disk space, the registry of handles. No JAX or Dask here.

This module is the store's front door: where a store lives (its
:class:`~jask.store.location.Location`, from :func:`location_of` or, for a
path a user named, :func:`locate`), the verbs that need a location's kind
(sessions, journals, options, a save's exchange, an icechunk branch's name)
and the errors users see. The layers above import the rest from the shared
module it lives in (:mod:`jask.store.tiles`, :mod:`jask.store.views`,
:mod:`jask.store.versions`, :mod:`jask.store.space`, :mod:`jask.store.layout`,
:mod:`jask.store.groups`, :mod:`jask.store.memmaps`, :mod:`jask.store.buffers`,
:mod:`jask.store.recycle`, :mod:`jask.store.trash`, the record
:mod:`jask.store.spec` and the lifetimes :mod:`jask.store.registry`); never a
kind's package (:mod:`jask.store.kinds`) nor the I/O behind the location
(``pyproject.toml``'s import contract checks it). One
:class:`~jask.store.location.Location` per kind (a local folder, a prefix in
object storage, an icechunk branch) owns what differs between them.
"""
from __future__ import annotations

import os

from jask.store.kinds.icechunk.repositories import name as icechunk_name
from jask.store.kinds.local.saves import put as put_saved
from jask.store.kinds.objects.buckets import RemoteStoreError
from jask.store.location import Location, location_of
from jask.store.space import DiskFullError, StoreChangedError
from jask.store.spec import OBJECTS, DamagedStoreError, kind_of

# each kind of location registers itself with jask.store.location when imported
from .kinds.icechunk import location as icechunk_branch  # noqa: F401
from .kinds.local import location as local_folder  # noqa: F401
from .kinds.objects import buckets
from .kinds.objects import location as object_prefix  # noqa: F401

__all__ = [
    "Location", "location_of", "locate", "register_options", "worker_options",
    "session_dir", "journal_dir", "put_saved", "icechunk_name",
    "DiskFullError", "StoreChangedError", "RemoteStoreError", "DamagedStoreError",
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
