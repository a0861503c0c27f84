"""Deleting stores off the op's critical path.

Removing a store folder costs a few directory operations, each of which
took 0.3-2 ms on this machine's ext4 disk while other processes wrote
(more than the whole rest of an eager op on a small array). Garbage stores
are therefore renamed, in one step, to a hidden ``.trash-*`` name in
their folder, so their path is gone at once, and a daemon thread deletes
them. Only what a location :meth:`~jask.store.location.Location.owned` (this process's own scratch,
never a store opened by path, never a forked parent's) is removed at all.
:func:`wait` blocks until everything handed over is deleted
(``jask.collect()`` calls it); a process that exits first leaves them to
the session cleanup, which removes the whole session folder.

In object storage (a scratch URL) there is no rename: the store's keys are
deleted by the same thread (a listing and one DeleteObjects request per
1,000 keys); its name is fresh and never handed out again, so nothing reads
it meanwhile.
"""
from __future__ import annotations

import contextlib
import queue
import threading

from jask.base import forks
from jask.store.location import location_of

__all__ = ["remove", "remove_now", "wait"]

#: Prefix of the hidden name a store gets while it waits for deletion.
TRASH = ".trash"

_queue: "queue.Queue[str]" = queue.Queue()
_started = forks.lock()
_thread: threading.Thread | None = None


def remove(path: str) -> None:
    """Make the store at ``path`` disappear now, if this process owns it;
    delete it soon.

    Example:
      >>> import os, tempfile
      >>> from jask.store.kinds.local import sessions
      >>> d = sessions.session_dir(tempfile.mkdtemp())
      >>> os.makedirs(os.path.join(d, "a.zarr", "c"))
      >>> remove(os.path.join(d, "a.zarr")); wait()
      >>> [name for name in os.listdir(d) if not name.startswith(".jask")]
      []
    """
    where = location_of(path)
    if not where.owned():
        return  # not this process's to delete
    hidden = where.hide()  # a folder renamed out of sight; a prefix stays where it is
    if hidden is not None:
        _ensure_thread()
        _queue.put(hidden)


def remove_now(path: str) -> None:
    """Delete the store at ``path`` now, if this process owns it: a folder,
    or every key under a prefix of this process's object-storage session."""
    where = location_of(path)
    if where.owned():
        where.delete()


def wait() -> None:
    """Block until every store handed to :func:`remove` is deleted."""
    if _thread is not None:
        _queue.join()


def _ensure_thread() -> None:
    global _thread
    with _started:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_work, name="jask-trash", daemon=True)
            _thread.start()


def _work() -> None:
    while True:
        path = _queue.get()
        try:
            with contextlib.suppress(Exception):  # endpoint gone: the session's end or lease
                location_of(path).delete()
        finally:
            _queue.task_done()
