"""A store in a local folder: its chunk files read and written by positioned
I/O (:mod:`jask.store.chunkio`), replaced by one atomic exchange of folders
(:mod:`jask.store.kinds.local.durability`), jask's own kept in this process's session
folder (:mod:`jask.store.kinds.local.sessions`) and deleted by a rename out of sight
(:mod:`jask.store.trash`)."""
from __future__ import annotations

import itertools
import os
import shutil
import uuid
from typing import Callable

import numpy as np
import zarr
from zarr.storage import LocalStore

from jask.store import chunkio, registry, tiles, trash, versions
from jask.store.location import Location, location_of
from jask.store.spec import FOLDER, StoreSpec, check_metadata

from . import durability, saves, sessions

__all__ = ["LocalFolder"]


class LocalFolder(Location):
    """A Zarr array in a folder of a local (or mounted) filesystem."""

    kind = FOLDER

    supports_rename = True
    reads_by_request = False
    is_local = True
    checks_free_space = True

    # Tiles: the chunk files themselves, or Zarr's pipeline for layouts
    # jask does not decode (jask.store.chunkio).

    def zarr_array(self) -> zarr.Array:
        return chunkio.cached_array(self.path, self._open_zarr)

    def _open_zarr(self) -> zarr.Array:
        arr = zarr.open_array(self.path, mode="r+")
        if sessions.holds_jask_stores(self.path):  # so that a missing chunk file means damage
            arr = arr.with_config({"write_empty_chunks": True})  # type: ignore[call-overload]
        return arr

    def user_array(self) -> zarr.Array:
        return zarr.open_array(self.path, mode="r+")

    def read(self, store: StoreSpec, region: tuple, out: np.ndarray | None = None) -> np.ndarray:
        return chunkio.read(self, store, region, out)

    def write(self, store: StoreSpec, region: tuple, block: np.ndarray) -> None:
        chunkio.write(self, store, region, block)

    def link_chunks_except(self, staging: str, written: tuple) -> bool:
        return chunkio.link_chunks_except(self, staging, written)

    def prefetch(self, store: StoreSpec, region: tuple) -> None:
        chunkio.prefetch(self, store, region)

    def reads_runs(self, store: StoreSpec) -> bool:
        return chunkio.reads_runs(self, store)

    def read_runs(self, store: StoreSpec, starts, stops, out: np.ndarray,
                  files: chunkio.OpenFiles | None = None) -> np.ndarray:
        if chunkio.reads_runs(self, store):
            return chunkio.read_runs(self, store, starts, stops, out, files)
        if files is None:
            return super().read_runs(store, starts, stops, out, files)
        # chunks decoded whole, their files opened by path (none held): each is recorded
        # as it was before its read (a stat), for the reader's check (OpenFiles.changed)
        paths = _chunk_files_of_rows(self.zarr_array(), starts, stops)
        for path in paths:
            files.saw_unopened(path)
        try:
            super().read_runs(store, starts, stops, out, files)
        finally:  # (after their reads: a check then covers them; a failed read's
            files.were_read(paths)  # too, so that a file rewritten meanwhile is named)
        return out

    def read_model(self, store):
        return chunkio.read_model(self, store, on_disk=os.path.isdir(self.path))

    def forget(self) -> None:
        chunkio.forget(self.path)

    # Versions: the folder's and zarr.json's identity (jask.store.versions).

    def version(self, store: StoreSpec) -> tuple | None:
        path = versions.resolved(self.path)
        return path, versions.identity(path)

    def check_version(self, before, op: str) -> None:
        if versions.identity(self.path) != before:
            tiles.forget(self.path)
            raise versions.StoreChangedError(
                f"{op}: the store {self.path!r} was replaced by another writer while this op "
                "read it, so the result could mix old and new values; it was discarded "
                "and nothing was written. Run the op again (it is safe to).")

    # Making, keeping and deleting.

    def create(self, shape: tuple, dtype: np.dtype, chunks: tuple,
               metadata: str | None) -> None:
        """A folder with ``zarr.json`` (``0700``/``0600`` in this process's
        scratch, not the umask's)."""
        if metadata is None:
            zarr.create_array(store=self.path, shape=shape, chunks=chunks, dtype=dtype,
                              compressors=None, fill_value=0, zarr_format=3,
                              chunk_key_encoding={"name": "default", "separator": "."})
            os.chmod(os.path.join(self.path, "zarr.json"), sessions.file_mode(self.path))
            os.chmod(self.path, sessions.folder_mode(self.path))
            return
        os.mkdir(self.path, sessions.folder_mode(self.path))
        fd = os.open(os.path.join(self.path, "zarr.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     sessions.file_mode(self.path))
        with os.fdopen(fd, "w") as f:
            f.write(metadata)
        # tile I/O then knows its files without asking Zarr (about 2 ms a store)
        chunkio.remember_plain(self.path, shape, dtype, chunks)

    def file_mode(self) -> int:
        return sessions.file_mode(self.path)

    def free_bytes(self) -> int:
        probe = os.path.abspath(self.path)
        while not os.path.exists(probe):  # made on first write
            probe = os.path.dirname(probe)
        return shutil.disk_usage(probe).free

    def session(self) -> str:
        return sessions.session_dir(self.path)

    def journal(self) -> str:
        return sessions.journal_dir(self.session())

    def owned(self) -> bool:
        return sessions.owns(self.path)

    def keep(self) -> None:
        sessions.keep(self.path)

    def holds_jask_stores(self) -> bool:
        return sessions.holds_jask_stores(self.path)

    def hide(self) -> str | None:
        """A rename within its folder (a move to another folder took 1 ms);
        where the rename fails, deleted now."""
        hidden = os.path.join(os.path.dirname(self.path), f"{trash.TRASH}-{uuid.uuid4().hex[:12]}")
        try:
            os.rename(self.path, hidden)
        except OSError:  # gone already, or no rename here
            self.delete()
            return None
        return hidden

    def delete(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    # A user's store here.

    def open(self) -> StoreSpec:
        """Known by its resolved path (symlinks followed): opened through a
        link and through its real path it is one store, and the layout it was
        opened with is remembered (:func:`jask.store.versions.opened`). Raises
        FileNotFoundError, naming the path, when there is no Zarr array."""
        path = versions.resolved(self.path)
        sessions.keep(path)  # even a scratch store: a DiskArray of the user's reads it now
        durability.recover(path)  # finish an update_ a killed process left
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no Zarr array at {path!r} (no such folder)")
        layout = versions.layout(path)  # before zarr reads the metadata: a later change is seen
        try:
            arr = zarr.open_array(path, mode="r")
        except Exception as err:  # zarr raises several kinds for a folder that is no array
            raise FileNotFoundError(f"{path!r} is not a Zarr array: {err}") from None
        chunks, dtype = check_metadata(path, arr.shape, arr.chunks, arr.dtype)  # before planning
        tiles.forget(path)  # a store written anew in this folder: its own layout
        store = StoreSpec(path, tuple(arr.shape), dtype, chunks, managed=False)
        versions.opened(store, layout)
        return registry.register(store)

    def replace(self, target: StoreSpec, make_staging: Callable[[str], None],
                fill: Callable[[str], None], scratch_dir: str) -> StoreSpec:
        """A staging copy beside the target, swapped in by one exchange; a
        user's store is synced first, and its copy journalled in the session
        (a killed process's copy is cleaned by the next)."""
        # a session goes whole: only a user's store's copy is journalled
        journal = None if target.managed else location_of(scratch_dir).journal()
        with saves.copies_of(target.path, journal) as note:  # a killed one's: cleaned later
            durability.replace(target.path, note(make_staging), fill, durable=not target.managed)
        tiles.forget(target.path)
        return target


def _chunk_files_of_rows(arr: zarr.Array, starts, stops) -> list[str]:
    """The files a read of rows ``starts[i]:stops[i]`` (all of the other axes)
    of the local array ``arr`` opens: every chunk file (or shard file) of the
    chunk rows they touch, by the array's own key encoding (v3 ``c/1/0``, v2 ``1.0``)."""
    store = arr.store
    if not isinstance(store, LocalStore):
        return []
    root = os.fspath(store.root / arr.path) if arr.path else os.fspath(store.root)
    grid = tuple(getattr(arr, "shards", None) or arr.chunks)
    firsts = np.asarray(starts, np.int64) // grid[0]
    lasts = (np.asarray(stops, np.int64) - 1) // grid[0]
    rows = sorted({r for a, b in zip(firsts.tolist(), lasts.tolist()) for r in range(a, b + 1)})
    rest = [range(-(-n // c)) for n, c in zip(arr.shape[1:], grid[1:])]
    return [os.path.join(root, *arr.metadata.encode_chunk_key((r,) + index).split("/"))
            for r in rows for index in itertools.product(*rest)]

