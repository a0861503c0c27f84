"""A store under a prefix in object storage: no rename, so a user's plain
store is never replaced in place, and jask's own is replaced by a new
version (a new store handed the array's handle in one step,
:func:`jask.store.registry.repoint`). Its chunks are read and written by
requests (:mod:`jask.store.kinds.objects.remote`), its options kept per URL prefix
(:mod:`jask.store.kinds.objects.buckets`), jask's own stores kept under a session prefix
with a lease (:mod:`jask.store.kinds.objects.sessions`)."""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from typing import Callable

import numpy as np
import zarr

from jask.store import registry, tiles, versions
from jask.store.location import Location, location_of
from jask.store.spec import GRAD_SUFFIX, OBJECTS, StoreSpec

from . import buckets, remote, sessions

__all__ = ["ObjectPrefix"]

#: The object a save to a URL claims it by, and every key such a save writes
#: (chunks, default "/" key encoding): what ``overwrite=True`` may clear.
_CLAIM = ".jask-save"
_SAVE_KEY = re.compile(r"c(/[0-9]+)*|\.jask-save")


class ObjectPrefix(Location):
    """A Zarr array under a URL (``s3://``, ``gs://``, ``az://``, ``memory://``)."""

    kind = OBJECTS

    supports_rename = False
    reads_by_request = True
    saves_in_place = True

    # Tiles: ranged GETs and whole-chunk PUTs (jask.store.kinds.objects.remote).

    def zarr_array(self) -> zarr.Array:
        return remote.open_array(self.path)

    def user_array(self) -> zarr.Array:
        return remote.open_array(self.path, mode="r+")

    def read(self, store: StoreSpec, region: tuple, out: np.ndarray | None = None) -> np.ndarray:
        return remote.read(store, region, out)

    def write(self, store: StoreSpec, region: tuple, block: np.ndarray) -> None:
        remote.write(store, region, block)

    def read_model(self, store):
        return remote.read_model(store)

    def forget(self) -> None:
        remote.forget(self.path)

    # Versions: a user's array's metadata object (its ETag) as it was opened;
    # jask's own arrays here are replaced by nobody else.

    def version(self, store: StoreSpec) -> tuple | None:
        if getattr(store, "managed", True):
            return None
        opened = remote.opened_version(store)
        return self.path, opened if opened is not None else remote.metadata_version(self.path)

    def check_version(self, before, op: str) -> None:
        if remote.metadata_version(self.path, before and before[0]) != before:
            tiles.forget(self.path)
            raise versions.StoreChangedError(
                f"{op}: the Zarr array at {self.path!r} was replaced by another writer (its "
                f"metadata object {before[0] if before else 'zarr.json'!r} changed) since "
                "it was opened or while this op read it, so the result could mix old and "
                "new values; it was discarded and nothing was written. Open it again "
                "(jask.open) and run the op again.")

    # Making, keeping and deleting.

    def create(self, shape: tuple, dtype: np.dtype, chunks: tuple,
               metadata: str | None) -> None:
        """Put ``zarr.json`` of an empty array *first*: worker processes
        writing its chunks learn its layout from it. (A scratch store is
        complete when its op registers it, not when its metadata appears:
        only jask reads it, by handle, once its graph has finished.)"""
        if metadata is None:  # a dtype outside the spec's core set: Zarr writes the text
            arr = zarr.create_array(store=zarr.storage.MemoryStore(), shape=shape, chunks=chunks,
                                    dtype=dtype, compressors=None, fill_value=0, zarr_format=3,
                                    chunk_key_encoding={"name": "default", "separator": "."})
            metadata = remote.metadata_text(arr)
        remote.remember(self.path, metadata)
        remote.write_metadata(self.path, metadata)

    def session(self) -> str:
        return sessions.session_url(self.path, _storage_options(self.path))

    def journal(self) -> str:
        # in a local session of its own (recovered by the next process here
        # whose scratch is in object storage)
        return location_of(os.path.join(tempfile.gettempdir(), "jask-journals")).journal()

    def owned(self) -> bool:
        return sessions.owns(self.path)

    def keep(self) -> None:
        sessions.keep(self.path)

    def holds_jask_stores(self) -> bool:
        return sessions.holds_jask_stores(self.path)

    def delete(self) -> None:
        """Every key under the prefix (a listing, then one DeleteObjects per
        1,000 keys), if this process's session holds it."""
        sessions.remove(self.path)

    # A user's store here.

    def register_options(self, storage_options: dict | None) -> None:
        buckets.register_options(self.path, storage_options)

    def open(self) -> StoreSpec:
        remote.forget(self.path)  # an array written anew at this URL: its own layout
        return registry.register(remote.spec_of(self.path))

    def check_in_place(self, op: str) -> None:
        """Refuse a user's plain Zarr store (its chunks cannot all change at
        once: there is no rename); jask's own array here gets a new version.

        Example:
          >>> ObjectPrefix("s3://bucket/w.zarr").check_in_place("update_")
          Traceback (most recent call last):
          ...
          NotImplementedError: jask.update_: 's3://bucket/w.zarr' is a plain Zarr store in object...
        """
        if self.holds_jask_stores():
            return  # jask's own array: replaced by a new version (replace)
        raise NotImplementedError(
            f"jask.{op}: {buckets.redact(self.path)!r} is a plain Zarr store in object "
            "storage, which cannot replace its chunks all at once (there is no rename): a "
            "reader, or a crash mid-write, would see old and new chunks mixed, so jask refuses "
            "it; nothing was written. Keep arrays you update in "
            "place in an icechunk repository (jask.open_icechunk('s3://bucket/repo', "
            "'name')), whose update_ is one commit, or write the new values to a new URL "
            "(jask.save(new_value, 's3://bucket/new.zarr'))")

    def replace(self, target: StoreSpec, make_staging: Callable[[str], None],
                fill: Callable[[str], None], scratch_dir: str) -> StoreSpec:
        """jask's own array in a bucket: object storage has no rename, so the new
        values go to a new store of the same layout, which then takes the array's
        handle in one step (the old one is deleted at the next safe point). A
        failure midway leaves the array as it was."""
        if not target.managed:  # (refused before: check_in_place)
            raise NotImplementedError(f"jask: cannot replace {target.path!r} in place")
        name = os.path.basename(target.path).split("-")[0] or "update_"
        new = registry.create(scratch_dir, name, target.shape, target.dtype,
                              target.chunks, grad=target.path.endswith(GRAD_SUFFIX))
        try:
            fill(new.path)
        except BaseException:
            registry.discard(new)
            raise
        return registry.repoint(target.handle, new)

    # A new array saved here (jask.save): its chunks put first, its metadata last.

    def check_save_target(self, source_path: str, scratch_dir: str) -> None:
        """Refuse, before anything is planned, a save here over the array's own
        store, to a whole bucket, or into jask's scratch prefix."""
        url = self.path
        if url == source_path:
            raise ValueError(f"jask.save: {url!r} is the array's own store; save it elsewhere")
        if not buckets.bucket_prefix(url).prefix:  # a failed save deletes what is under its URL
            raise ValueError(f"jask.save: {url!r} is a whole bucket; save to a prefix in it "
                             f"({url}/name.zarr)")
        if (url + "/").startswith(scratch_dir.rstrip("/") + "/"):  # (never a local scratch)
            raise ValueError(f"jask.save: {url!r} is inside jask's scratch prefix "
                             f"{scratch_dir!r}, whose sessions are removed when they end")

    def clear_for_save(self, overwrite: bool, before_delete: Callable[[], None]) -> None:
        """Refuse a save over an array, a group or objects no save of jask's
        writes; delete a failed save's objects with ``overwrite``
        (``before_delete()`` first)."""
        url = self.path
        debris = remote.list_prefix(url)  # one LIST: an array there, or a failed save's objects
        if any(k in ("zarr.json", ".zarray", ".zgroup") for k in debris):
            raise FileExistsError(
                f"jask.save: {url!r} already holds a Zarr array or group; object storage cannot "
                "replace it in one step (a failure midway would leave neither array), so jask "
                "does not overwrite it, even with overwrite=True: save to a new URL (and delete "
                "the old prefix yourself), or keep the array in an icechunk repository")
        foreign = [k for k in debris if not _SAVE_KEY.fullmatch(k)]
        if foreign:  # not a jask save's: the user's (an array below, their files)
            raise FileExistsError(
                f"jask.save: {url!r} holds {len(debris)} objects, {foreign[0]!r} among them, "
                "that no save of jask's writes; jask never deletes them, even with "
                "overwrite=True: save to a new URL")
        if debris and not overwrite:
            raise FileExistsError(
                f"jask.save: {url!r} holds {len(debris)} objects but no Zarr metadata (left by "
                "a save that failed, or one under way); pass overwrite=True to delete them and "
                "save there")
        before_delete()
        if debris:
            remote.delete_prefix(url)

    def remember_layout(self, text: str) -> None:
        """Read and write the array here with the metadata ``text``, not put yet
        (a worker process learns the layout from it; cached per process)."""
        remote.remember(self.path, text)

    def put_array(self, text: str, write_chunks: Callable[[], None]) -> None:
        """Claim this prefix, run ``write_chunks()``, then put the metadata
        ``text``: only then does the array open. On failure what was put is
        deleted."""
        url = self.path
        remote.forget(url)
        remote.remember(url, text)
        # Claimed by a conditional put before any chunk: of two saves to one URL
        # at once, the second is refused with nothing written (else their chunks
        # would mix, and its cleanup would delete the first's array).
        try:
            remote.put(url, _CLAIM, b"jask.save", create_only=True, op="claim")
        except FileExistsError:
            raise FileExistsError(f"jask.save: another save to {url!r} is under way (or was "
                                  "cut short: pass overwrite=True to clear its objects)") from None
        try:
            write_chunks()
            remote.write_metadata(url, text)  # last: only now does the array open
        except BaseException as err:
            try:
                remote.delete_prefix(url)
            except Exception:  # the endpoint may be what failed: no metadata was put anyway
                pass
            getattr(err, "add_note")(f"jask.save: no array was made at {url!r} (its metadata "
                                     "is put last)")
            raise
        finally:
            tiles.forget(url)
        with contextlib.suppress(Exception):  # (left behind, it is harmless beside the metadata)
            buckets.delete(url, _CLAIM)


def _storage_options(scratch_url: str) -> dict | None:
    """The options ``set_memory_budget`` was given with this scratch URL."""
    from jask.base.config import get_config

    config = get_config()
    same = config.scratch_dir.rstrip("/") == scratch_url.rstrip("/")
    return dict(config.storage_options) if same and config.storage_options else None
