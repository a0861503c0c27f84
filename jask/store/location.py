"""Where a store lives: one interface for the three kinds of location.

A store is a local folder, a prefix in object storage or an array of an
icechunk repository's branch. Everything that differs between them is owned
by one :class:`Location` subclass per kind, each in a module of its own
(:mod:`jask.store.kinds.local.location`, :mod:`jask.store.kinds.objects.location`,
:mod:`jask.store.kinds.icechunk.location`), as zarr-python's ``zarr.abc.store.Store``
has one subclass per kind with its capabilities as properties (here constants
of the kind, read the same way): how its tiles are read and written and what
a read holds, how a store is made there, opened, replaced in place (a swap, a
new version or a commit) and deleted, and jask's sessions in it.

The kind is read from the path once, when a :class:`jask.store.spec.StoreSpec`
is made (:func:`jask.store.spec.kind_of`, the spec's ``kind``);
:func:`location_of` hands out the location of a spec or a path, and the code
that calls it, in ``store/`` and above, never asks which kind it holds.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np

import jask.store.buffers as buffers
from jask.store.spec import StoreSpec, kind_of

if TYPE_CHECKING:
    import zarr

    from jask.base.memory import ReadModel
    from jask.store.chunkio import OpenFiles

__all__ = ["Location", "location_of"]

_KINDS: dict[str, type[Location]] = {}


def location_of(where: StoreSpec | str) -> Location:
    """The location of a store (its spec, whose kind was read when it was
    made) or of a path jask already knows to be well formed.

    Example:
      >>> location_of("/data/x.zarr").supports_rename, location_of("s3://b/x.zarr").supports_rename
      (True, False)
    """
    if isinstance(where, StoreSpec):
        return _KINDS[where.kind](where.path)
    return _KINDS[kind_of(where)](where)


@dataclass(frozen=True)
class Location(abc.ABC):
    """Where one store lives (``path``: its folder, URL or icechunk name) and
    what may be done there. Picklable and cheap to make: a location holds its
    path only, and every cache stays with the modules of its kind."""

    path: str

    kind: ClassVar[str]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _KINDS[cls.kind] = cls

    # Capabilities: what the kind allows, asked by code that must plan for it
    # (constants of the kind: each subclass sets the first two). Code outside
    # store/ asks these, never the kind or the path's string.

    #: Whether a complete store can be put in place in one step (a rename or
    #: an exchange of folders): a save writes beside the path and swaps.
    supports_rename: ClassVar[bool]
    #: Whether reads are requests over a network (object storage), so that
    #: reading the same bytes several times costs requests, not the page cache.
    reads_by_request: ClassVar[bool]
    #: Whether the store is a folder of this machine's filesystem, known by
    #: its path: its version a ``stat`` (no request), its path resolved
    #: through symlinks (:func:`jask.store.versions.resolved`).
    is_local: ClassVar[bool] = False
    #: Whether ``jask.save`` writes the array at its path directly, its
    #: chunks first and its metadata last (no rename to swap a copy in).
    saves_in_place: ClassVar[bool] = False
    #: Whether there is free space to ask for before writing (a disk).
    checks_free_space: ClassVar[bool] = False
    #: Whether :meth:`replace`'s ``fill`` must run on this process's threads
    #: (an icechunk session lives in one process).
    replaces_in_this_process: ClassVar[bool] = False

    # Tiles (jask.store.tiles calls these, views and empty regions dealt with).

    @abc.abstractmethod
    def zarr_array(self) -> zarr.Array:
        """The ``zarr.Array`` jask reads and writes the store here with,
        opened once per process."""

    @abc.abstractmethod
    def user_array(self) -> zarr.Array:
        """A new read/write ``zarr.Array`` of the store here, Zarr's own
        configuration, for a user (``DiskArray.to_memmap``)."""

    @abc.abstractmethod
    def read(self, store: StoreSpec, region: tuple, out: np.ndarray | None = None) -> np.ndarray:
        """One tile of ``store`` (whose data is here) as a numpy array: ``out``
        (C-contiguous, the tile's shape and the store's dtype) when given."""

    @abc.abstractmethod
    def write(self, store: StoreSpec, region: tuple, block: np.ndarray) -> None:
        """Write a tile of whole chunks of ``store`` (the last ones may be cut
        by the array's edge)."""

    def link_chunks_except(self, staging: str, written: tuple) -> bool:
        """Give ``staging`` (an empty store laid out as this one) every chunk
        of this store but those about to be written (whose index on each axis
        is among ``written``'s for that axis) without copying their bytes, so
        that a replacement writing only those is whole; False where the kind
        cannot (nothing by default), and the caller copies them."""
        return False

    def prefetch(self, store: StoreSpec, region: tuple) -> None:
        """Start reading a tile's chunks ahead of :meth:`read`, at no cost to
        the budget (where the kind can: nothing by default)."""

    def reads_runs(self, store: StoreSpec) -> bool:
        """Whether short runs of rows of ``store`` cost about their own bytes
        to read (:meth:`read_runs`): no by default (a chunk is fetched or
        decoded whole)."""
        return False

    def read_runs(self, store: StoreSpec, starts: np.ndarray, stops: np.ndarray,
                  out: np.ndarray, files: OpenFiles | None = None) -> np.ndarray:
        """Rows ``starts[i]:stops[i]`` of ``store`` (all of its other axes;
        sorted runs, not overlapping, each within one chunk row) one after
        another into ``out`` (``files``: chunk files held open across calls,
        by the kinds that read them by ``preadv``; ignored here).

        By default each chunk row is read once for all its runs: the span
        from its first run to its last, into a reused buffer, the runs copied
        out (a compressed chunk is decoded once, however many runs it gives).
        """
        rest = tuple(slice(0, n) for n in store.shape[1:])
        per = store.chunks[0]
        at, i, n = 0, 0, len(starts)
        while i < n:
            j = i + 1  # the runs of chunk row starts[i] // per
            while j < n and (starts[j] // per) == (starts[i] // per):
                j += 1
            lo, hi = int(starts[i]), int(stops[j - 1])
            length = int(np.sum(stops[i:j] - starts[i:j]))
            if j - i == 1 or length == hi - lo:  # one run, or runs that touch: straight in
                self.read(store, (slice(lo, hi),) + rest, out[at:at + length])
            else:
                span = buffers.empty((hi - lo,) + tuple(store.shape[1:]), np.dtype(store.dtype))
                self.read(store, (slice(lo, hi),) + rest, span)
                k = at
                for a, b in zip(starts[i:j].tolist(), stops[i:j].tolist()):
                    out[k:k + b - a] = span[a - lo:b - lo]
                    k += b - a
            at += length
            i = j
        return out

    @abc.abstractmethod
    def read_model(self, store: StoreSpec) -> ReadModel:
        """How reading ``store`` works and what it holds."""

    @abc.abstractmethod
    def forget(self) -> None:
        """Drop what this process caches of the store here (it is gone, or
        was written anew)."""

    # Versions: what an op that read a store checks was not replaced meanwhile.

    def version(self, store: StoreSpec) -> tuple | None:
        """``(path, version)``: what identifies the version of ``store`` (whose
        data is here) that an op plans with and reads, for :meth:`check_version`
        once it has read it; None when nothing can replace it under jask."""
        return None

    def check_version(self, before, op: str) -> None:
        """Raise :class:`jask.StoreChangedError`, naming ``op``, when the store
        here is no longer at the version ``before`` (:meth:`version`'s)."""

    # Making, keeping and deleting stores.

    @abc.abstractmethod
    def create(self, shape: tuple, dtype: np.dtype, chunks: tuple,
               metadata: str | None) -> None:
        """Make an empty store here with the Zarr v3 metadata ``metadata``
        (jask's plain layout; None: a dtype whose metadata Zarr writes)."""

    def file_mode(self) -> int:
        """The permission bits of a file jask makes in the store here: ``0600``
        in this process's scratch, ``0644`` elsewhere (files: a folder's)."""
        return 0o644

    def free_bytes(self) -> int:
        """The bytes that may still be written here (no limit known: a huge
        number; see :attr:`checks_free_space`)."""
        return 2**63 - 1

    def session(self) -> str:
        """This process's session (a folder or a prefix) in the scratch
        location here, made on first use: where jask's own stores go."""
        raise ValueError(f"jask cannot keep its scratch stores at {self.path!r}: use a "
                         "local folder or a prefix in object storage")

    def owned(self) -> bool:
        """Whether the store here is this process's own, in its session and
        not opened by path (:meth:`keep`): the only stores jask deletes."""
        return False

    def keep(self) -> None:
        """Never delete the store here in this process (a DiskArray of the
        user's, opened by path, reads it)."""

    def holds_jask_stores(self) -> bool:
        """Whether the store here is one of jask's own (in a proven session),
        whose every chunk jask writes: a missing chunk is damage, not the
        fill value."""
        return False

    def journal(self) -> str:
        """The local folder (``0700``) journalling this process's saves to
        local paths, for a scratch location here (a save renames on the
        disk it writes to, so its journal stays on this machine)."""
        raise ValueError(f"jask keeps no session at {self.path!r}")

    def hide(self) -> str | None:
        """Make an owned store here disappear at once, before it is deleted;
        the path to delete it from then (the same where the kind has no
        rename), or None when it is deleted already."""
        return self.path

    def delete(self) -> None:
        """Delete the store here now (a folder, or every key under a prefix
        of this process's session; the caller checked :meth:`owned`)."""

    # A user's store at this location.

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
