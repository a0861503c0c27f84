"""Putting a complete new array at a user's path, atomically (``jask.save``).

The new array is written into a hidden staging folder beside the path,
``.NAME.jask-save-<id>``, and put in place only once complete:

* over an existing path, by one ``renameat2(RENAME_EXCHANGE)`` of the two
  folders (Linux 3.15+: ext4, xfs, btrfs, tmpfs): at every instant the path
  holds the old array or the new one, never nothing. The staging name then
  holds the old array, which is removed;
* on a new path, by ``renameat2(RENAME_NOREPLACE)`` (a path that appeared
  meanwhile is never clobbered);
* where the filesystem cannot exchange (macOS, NFS, some FUSE mounts), by
  renaming the old array aside (``.NAME.jask-aside-<id>``) and the new one
  in. A kill between those two renames leaves no array at the path until
  the next jask session puts the complete new one in.

Proof, not names. Before the staging folder exists, an entry in this
process's session journal (:func:`jask.store.kinds.local.sessions.journal_dir`, a
``0600`` file of this user's in a proven session folder) records the path,
the two hidden names (each with a random id) and the inode of the old
array. A later session that finds a dead session's folder (and this
process at exit) runs :func:`recover_journal`: it finishes a fallback swap
cut short and removes the hidden copies a killed save left, exactly the
paths its journal names; a folder that merely has a jask-like hidden name
is never touched. Cost: one small journal file written and removed per save.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import stat
import uuid
from typing import Callable

__all__ = ["put", "copies_of", "recover_journal"]

_AT_FDCWD = -100
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_NO_RENAMEAT2 = (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP)


def _libc_renameat2():
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux, or too old a libc
        return None


#: ``renameat2`` from libc, or None where there is none (then: renames).
renameat2 = _libc_renameat2()

#: Test hook, None in normal use: called with the name of each step of
#: :func:`put` as it begins ("write", "swap", "cleanup", and in the fallback
#: "renamed-aside" between its two renames), so that a test can SIGKILL a
#: saving process exactly there.
on_step: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if on_step is not None:
        on_step(name)


def put(target: str, write: Callable[[str], None], *, overwrite: bool, journal: str) -> None:
    """Write a new array with ``write(staging)`` and put it at ``target``.

    If ``write`` fails (or is interrupted) the staging folder is removed and
    ``target`` is untouched. ``journal`` is the folder of this session's
    journal (entries are removed once the save is over).

    Raises:
      FileExistsError: ``target`` exists (or appeared) and ``overwrite`` is off.

    Example:
      >>> import tempfile
      >>> d = tempfile.mkdtemp(); t = os.path.join(d, "a.zarr")
      >>> put(t, lambda p: open(os.path.join(p, "v"), "w").close(), overwrite=False,
      ...     journal=tempfile.mkdtemp())
      >>> os.listdir(d), os.listdir(t)
      (['a.zarr'], ['v'])
    """
    target = os.path.abspath(target)
    tag = uuid.uuid4().hex[:12]
    folder, name = os.path.split(target)
    staging = os.path.join(folder, f".{name}.jask-save-{tag}")
    aside = os.path.join(folder, f".{name}.jask-aside-{tag}")
    entry: dict = {"target": target, "staging": staging, "aside": aside,
                   "old": _identity(target), "phase": "write"}
    record = os.path.join(journal, f"save-{tag}")
    _write_entry(record, entry)  # before the staging folder exists: never unproven
    try:
        os.mkdir(staging)
        _step("write")
        write(staging)
    except BaseException:
        _remove(staging)
        _unlink(record)
        raise
    _step("swap")
    try:
        # complete: if a fallback swap is cut short, recovery puts it in
        _swap(staging, target, aside, overwrite, lambda: _write_entry(
            record, dict(entry, phase="swap"), fresh=False))
    except BaseException:
        _recover(entry)  # a refused or failed swap: the path as it was, no copies left
        _unlink(record)
        raise
    _step("cleanup")
    _recover(entry)  # the old array, now at a hidden name, goes
    _unlink(record)


def _swap(staging: str, target: str, aside: str, overwrite: bool, journal_swap) -> None:
    """Put ``staging`` at ``target``; the old array (if any) goes to a hidden name
    (``journal_swap()`` first, where that takes two renames)."""
    if os.path.lexists(target):
        if not overwrite:
            raise FileExistsError(f"jask.save: {target!r} already exists; pass "
                                  "overwrite=True to replace it")
        if _renameat2(staging, target, _RENAME_EXCHANGE):
            return
        journal_swap()
        os.rename(target, aside)
        _step("renamed-aside")  # no array at target: recovery puts staging in
        os.rename(staging, target)
        return
    if _renameat2(staging, target, _RENAME_NOREPLACE):
        return
    if os.path.lexists(target):
        raise FileExistsError(f"jask.save: {target!r} appeared while saving; pass "
                              "overwrite=True to replace it")
    os.rename(staging, target)


def _renameat2(source: str, target: str, flags: int) -> bool:
    """One ``renameat2``; False where the kernel or filesystem has none."""
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_RENAMEAT2:
        return False
    if code == errno.EEXIST:
        raise FileExistsError(code, f"jask.save: {target!r} appeared while saving; pass "
                                    "overwrite=True to replace it")
    raise OSError(code, f"jask.save: cannot put {source!r} at {target!r}: "
                        f"{os.strerror(code)}")


@contextlib.contextmanager
def copies_of(target: str, journal: str | None):
    """Journal the hidden copies of ``target`` made in the block, for
    ``update_`` (:func:`jask.store.kinds.local.durability.replace`): ``note(make)`` wraps a
    ``make(path)``. If the process is killed, a later session removes each
    copy the journal names (the new values, or the old store after the
    exchange), never what is at ``target``.

    Example:
      >>> import tempfile
      >>> d = tempfile.mkdtemp()
      >>> with copies_of(os.path.join(d, "a.zarr"), tempfile.mkdtemp()) as note:
      ...     note(os.mkdir)(os.path.join(d, ".a.zarr.copy"))
      >>> os.listdir(d)
      ['.a.zarr.copy']
    """
    records: list[str] = []

    def note(make):
        if journal is None:
            return make
        folder = journal

        def made(path: str) -> None:
            record = os.path.join(folder, f"save-{uuid.uuid4().hex[:12]}")
            _write_entry(record, {"target": os.path.abspath(target), "staging": path,
                                  "aside": path, "old": _identity(target), "phase": "write"})
            records.append(record)
            make(path)
        return made
    try:
        yield note
    finally:
        for record in records:
            _unlink(record)


# --- the journal -------------------------------------------------------------------

def _identity(path: str) -> list | None:
    """(device, inode) of ``path`` if it is this user's, else None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return [info.st_dev, info.st_ino] if info.st_uid == os.geteuid() else None


def _write_entry(record: str, entry: dict, *, fresh: bool = True) -> None:
    """Write the journal entry at ``record``. A new one directly (cut short, it
    does not parse and names nothing made yet); a changed one by a rename."""
    path = record if fresh else record + ".partial"
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_EXCL if fresh else os.O_TRUNC)
    with os.fdopen(os.open(path, flags, 0o600), "w") as f:
        json.dump(entry, f)
    if not fresh:
        os.replace(path, record)


def _read_entry(record: str) -> dict | None:
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        try:
            entry = json.load(f)
        except ValueError:
            return None
    keys = {"target", "staging", "aside", "old", "phase"}
    return entry if isinstance(entry, dict) and keys <= entry.keys() else None


def recover_journal(journal: str) -> None:
    """Finish or undo every save a dead session journalled in ``journal``.

    Example:
      >>> import tempfile
      >>> recover_journal(tempfile.mkdtemp())  # nothing journalled: nothing done
    """
    try:
        names = sorted(os.listdir(journal))
    except OSError:
        return
    for name in names:
        record = os.path.join(journal, name)
        entry = _read_entry(record) if name.startswith("save-") and "." not in name else None
        if entry is not None:
            with contextlib.suppress(OSError):
                _recover(entry)
        _unlink(record)


def _recover(entry: dict) -> None:
    """Put a complete new array in where a swap was cut short; remove the
    hidden copies this save made (their random names are in the journal)."""
    target, staging, aside = entry["target"], entry["staging"], entry["aside"]
    if not os.path.lexists(target):
        if entry["phase"] == "swap" and _identity(staging) is not None:
            os.rename(staging, target)  # complete: the new array goes in
        elif entry["old"] is not None and _identity(aside) == entry["old"]:
            os.rename(aside, target)    # never lose the old one
    at_target = _identity(target)
    for hidden in (staging, aside):
        found = _identity(hidden)
        if found is not None and found != at_target:
            _remove(hidden)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        _unlink(path)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
