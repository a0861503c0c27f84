"""Where a store lives: one interface for the three kinds of location.

A store is a local folder, a prefix in object storage or an array of an
icechunk repository's branch. What differs between them (how a user's path
is opened, how a store is replaced in place: a swap, a new version or a
commit; whether it may be replaced at all; whether it is read by requests)
is owned by one :class:`Location` subclass per kind, each in a module of its
own (:mod:`jask.store.local_folder`, :mod:`jask.store.object_prefix`,
:mod:`jask.store.icechunk_branch`), as zarr-python's ``zarr.abc.store.Store``
has one subclass per kind with its capabilities as properties (here constants
of the kind, read the same way).

The kind is read from the path once, when a :class:`jask.store.spec.StoreSpec`
is made (:func:`jask.store.spec.kind_of`, the spec's ``kind``);
:func:`jask.store.location_of` hands out the location of a spec or a path,
and code above ``store/`` calls it and never asks which kind it holds.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable, ClassVar

from jask.store.spec import StoreSpec

__all__ = ["Location"]


@dataclass(frozen=True)
class Location(abc.ABC):
    """Where one store lives (``path``: its folder, URL or icechunk name) and
    what may be done there. Picklable and cheap to make: a location holds its
    path only, and every cache stays with the modules of its kind."""

    path: str

    kind: ClassVar[str]

    # Capabilities: what the kind allows, asked by code that must plan for it
    # (constants of the kind: each subclass sets the first two).

    #: Whether a complete store can be put in place in one step (a rename or
    #: an exchange of folders): a save writes beside the path and swaps.
    supports_rename: ClassVar[bool]
    #: Whether reads are requests over a network (object storage), so that
    #: reading the same bytes several times costs requests, not the page cache.
    reads_by_request: ClassVar[bool]
    #: Whether there is free space to ask for before writing (a disk).
    checks_free_space: ClassVar[bool] = False
    #: Whether :meth:`replace`'s ``fill`` must run on this process's threads
    #: (an icechunk session lives in one process).
    replaces_in_this_process: ClassVar[bool] = False

    # What differs by kind.

    def register_options(self, storage_options: dict | None) -> None:
        """Use ``storage_options`` for the stores under this location in this
        process (object storage; ignored elsewhere)."""

    @abc.abstractmethod
    def open(self) -> StoreSpec:
        """Register the existing Zarr array at this location as a user's
        store (never deleted by jask) and return its spec (with a handle)."""

    def check_in_place(self, op: str) -> None:
        """Raise, before anything runs, when the store here cannot be written in
        place by ``op`` all at once (nothing to refuse on a disk or a branch)."""

    @abc.abstractmethod
    def replace(self, target: StoreSpec, make_staging: Callable[[str], None],
                fill: Callable[[str], None], scratch_dir: str) -> StoreSpec:
        """Replace ``target``'s data (its store is at this location) with what
        ``fill(staging)`` writes, atomically: readers see the old values or the
        new ones, and a failure leaves the old ones. ``make_staging(path)``
        makes an empty store of the target's layout where one is needed.
        Returns the store now behind ``target``'s handle."""
