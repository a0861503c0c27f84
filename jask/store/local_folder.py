"""A store in a local folder: opened by its resolved path, replaced by one
atomic exchange of folders (:mod:`jask.store.durability`), saved beside its
path and exchanged into place (:mod:`jask.store.saves`)."""
from __future__ import annotations

from typing import Callable

from jask.store.location import Location
from jask.store.spec import FOLDER, StoreSpec

from . import chunkio, durability, registry, saves, sessions

__all__ = ["LocalFolder"]


class LocalFolder(Location):
    """A Zarr array in a folder of a local (or mounted) filesystem."""

    kind = FOLDER

    supports_rename = True
    reads_by_request = False
    checks_free_space = True

    def open(self) -> StoreSpec:
        return registry.register_external(self.path)

    def replace(self, target: StoreSpec, make_staging: Callable[[str], None],
                fill: Callable[[str], None], scratch_dir: str) -> StoreSpec:
        """A staging copy beside the target, swapped in by one exchange; a
        user's store is synced first, and its copy journalled in the session
        (a killed process's copy is cleaned by the next)."""
        journal = None if target.managed else sessions.journal_dir(  # a session goes whole
            sessions.session_dir(scratch_dir))
        with saves.copies_of(target.path, journal) as note:  # a killed one's: cleaned later
            durability.replace(target.path, note(make_staging), fill, durable=not target.managed)
        chunkio.forget(target.path)
        return target
