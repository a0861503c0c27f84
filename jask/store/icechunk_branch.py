"""An array of an icechunk repository's branch: read at one snapshot, and
replaced by one commit of a writable session with icechunk's conflict
detector (:mod:`jask.store.icechunk_stores`): a racing commit to the same
array is :class:`jask.StoreChangedError`, with nothing committed."""
from __future__ import annotations

from typing import Callable

from jask.store.location import Location
from jask.store.spec import ICECHUNK, StoreSpec

from . import chunkio, icechunk_stores, registry, versions

__all__ = ["IcechunkBranch"]


class IcechunkBranch(Location):
    """A Zarr array in an icechunk repository, named
    ``icechunk+s3://bucket/prefix?branch=main#array``."""

    kind = ICECHUNK

    supports_rename = False
    reads_by_request = False
    # an icechunk session lives in one process (Session.fork/merge: not done)
    replaces_in_this_process = True

    def open(self) -> StoreSpec:
        # (jask.open_icechunk opens a branch; a name passed to jask.open is looked up as a
        # folder, as it always was, and is not found)
        return registry.register_external(self.path)

    def replace(self, target: StoreSpec, make_staging: Callable[[str], None],
                fill: Callable[[str], None], scratch_dir: str) -> StoreSpec:
        """Fill a writable icechunk session of the branch and commit it
        (:func:`jask.store.icechunk_stores.replace`). ``fill`` must run its
        tiles on this process's threads (:attr:`replaces_in_this_process`)."""
        versions.check_open(target.path)  # what this thread read to make it is one version
        with versions.swapping(target.path):  # this process's readers finish their snapshot
            try:
                icechunk_stores.replace(target.path, fill)
            except icechunk_stores.Conflict as err:
                raise versions.StoreChangedError(str(err)) from None
            finally:
                chunkio.forget(target.path)  # the next read opens the new snapshot
        versions.replaced(target.path)
        return target
