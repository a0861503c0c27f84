"""Disk space and changed inputs: the two ways the filesystem refuses an op.

:class:`DiskFullError` is raised before an output that cannot fit is
written, or when the disk fills up mid-op; :class:`StoreChangedError` when
another writer replaced an input while an op read it (snapshot reads, in
:mod:`jask.store.versions`).
"""
from __future__ import annotations

import contextlib
import errno

from jask.base.sizes import exact_bytes
from jask.store.location import location_of
from jask.store.versions import StoreChangedError, check_unchanged, snapshot, stamp

from . import recycle, trash

__all__ = ["DiskFullError", "StoreChangedError", "check_space", "space_errors", "stamp",
           "check_unchanged", "snapshot"]


class DiskFullError(OSError):
    """Not enough free disk space for an op's output.

    Raised before anything is written when the output's size is known and
    does not fit, or when the disk fills up during the op (the partial
    output is then removed). The message names the folder, the bytes needed
    and the bytes free; ``errno`` is ``ENOSPC``, so ``except OSError`` code
    keeps working.

    Example:
      >>> import errno, jask
      >>> issubclass(jask.DiskFullError, OSError)
      True
      >>> try:
      ...     check_space("/", 2**80, "add")
      ... except jask.DiskFullError as err:
      ...     err.errno == errno.ENOSPC
      True
    """


def _free_bytes(folder: str) -> int:
    return location_of(folder).free_bytes()  # object storage: no limit known


def _full_error(folder: str, needed: int, op: str) -> DiskFullError:
    free = _free_bytes(folder)
    return DiskFullError(
        errno.ENOSPC,
        f"{op}: not enough disk space in {folder!r}: the output needs {exact_bytes(needed)} "
        f"and {exact_bytes(free)} are free. Free some space (or write elsewhere: jask's own "
        "results go to the scratch_dir of jask.set_memory_budget) and run the op again; "
        "nothing was kept of it")


def check_space(folder: str, needed: int, op: str) -> None:
    """Refuse, before writing, an output that cannot fit in ``folder``."""
    if _free_bytes(folder) < needed:
        recycle.clear()  # garbage kept for reuse or still being deleted
        trash.wait()
        if _free_bytes(folder) < needed:
            raise _full_error(folder, needed, op)


def raise_if_full(err: BaseException, needs: dict[str, int], op: str) -> None:
    """Raise :class:`DiskFullError` if ``err`` is a bare full-disk error of an
    op writing into several folders (``folder -> bytes``), naming the one
    with the least space left."""
    if (isinstance(err, OSError) and err.errno == errno.ENOSPC
            and not isinstance(err, DiskFullError)):
        folder = min(needs, key=_free_bytes)
        raise _full_error(folder, needs[folder], op) from err


@contextlib.contextmanager
def space_errors(folder: str, needed: int, op: str):
    """Turn a disk filling up mid-op (another writer took the space) into a
    :class:`DiskFullError` that names the folder and the sizes."""
    try:
        yield
    except OSError as err:
        if err.errno != errno.ENOSPC or isinstance(err, DiskFullError):
            raise
        raise _full_error(folder, needed, op) from err


# --- stores changed by another writer: jask.store.versions (re-exported here) ---
