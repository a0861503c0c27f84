"""An array of an icechunk repository's branch: read at one snapshot, and
replaced by one commit of a writable session with icechunk's conflict
detector (:mod:`jask.store.kinds.icechunk.repositories`): a racing commit to the same
array is :class:`jask.StoreChangedError`, with nothing committed."""
from __future__ import annotations

from typing import Callable

import numpy as np
import zarr

from jask.store import chunkio, tiles, versions
from jask.store.location import Location
from jask.store.spec import ICECHUNK, StoreSpec

from . import repositories

__all__ = ["IcechunkBranch"]


class IcechunkBranch(Location):
    """A Zarr array in an icechunk repository, named
    ``icechunk+s3://bucket/prefix?branch=main#array``."""

    kind = ICECHUNK

    supports_rename = False
    reads_by_request = False
    # an icechunk session lives in one process (Session.fork/merge: not done)
    replaces_in_this_process = True

    # Tiles: through Zarr over the snapshot, or the update's session
    # (jask.store.chunkio's Zarr path: no files to read directly).

    def zarr_array(self) -> zarr.Array:
        return chunkio.cached_array(self.path, lambda: repositories.open_array(self.path))

    def user_array(self) -> zarr.Array:
        raise NotImplementedError(
            f"jask: {self.path!r} is an array of an icechunk branch, whose writes go through "
            "a session and a commit: change it with jask.update_ (one commit), not through "
            "to_memmap")

    def read(self, store: StoreSpec, region: tuple, out: np.ndarray | None = None) -> np.ndarray:
        return chunkio.read(self, store, region, out)

    def write(self, store: StoreSpec, region: tuple, block: np.ndarray) -> None:
        chunkio.write(self, store, region, block)

    def read_model(self, store):
        return chunkio.read_model(self, store, on_disk=True)

    def forget(self) -> None:
        chunkio.forget(self.path)

    def version(self, store: StoreSpec) -> tuple | None:
        """No version to compare (an op reads one snapshot; a commit checks the
        snapshot it was computed from): the stamp holds this process's readers
        until they finish, before its own commit replaces what they read."""
        return self.path, None

    def create(self, shape: tuple, dtype: np.dtype, chunks: tuple,
               metadata: str | None) -> None:
        raise NotImplementedError(f"jask makes no new arrays in an icechunk branch "
                                  f"({self.path!r}): its scratch stores are folders or URLs")

    # A user's store here.

    def open(self) -> StoreSpec:
        """Refused: a branch is opened at a snapshot by
        :func:`jask.open_icechunk`, which names the repository and the array."""
        raise FileNotFoundError(
            f"{self.path!r} names an array of an icechunk branch, which jask.open does not "
            "read: open it with jask.open_icechunk(repo, path, branch=...)")

    def replace(self, target: StoreSpec, make_staging: Callable[[str], None],
                fill: Callable[[str], None], scratch_dir: str) -> StoreSpec:
        """Fill a writable icechunk session of the branch and commit it
        (:func:`jask.store.kinds.icechunk.repositories.replace`). ``fill`` must run its
        tiles on this process's threads (:attr:`replaces_in_this_process`)."""
        versions.check_open(target.path)  # what this thread read to make it is one version
        with versions.swapping(target.path):  # this process's readers finish their snapshot
            try:
                repositories.replace(target.path, fill)
            except repositories.Conflict as err:
                raise versions.StoreChangedError(str(err)) from None
            finally:
                tiles.forget(target.path)  # the next read opens the new snapshot
        versions.replaced(target.path)
        return target
