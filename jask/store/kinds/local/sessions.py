"""This process's scratch folder on a disk, and the removal of dead processes'
folders (:mod:`jask.store.kinds.objects.sessions` keeps sessions in object storage).

Each process keeps the stores it makes in its own ``session-<host>-<pid>-<id>``
folder inside the scratch directory, removed at exit. A folder is jask's
only by *proof*, never by its name: jask writes the same random proof (the
session's id, pid, process start time, host and user) into a lock file
beside the folder and a marker file inside it, both owned by this user and
readable by nobody else. Another session removes a folder only when both
proofs match, the folder, marker and lock are no symlinks and belong to
this user, and the lock is free (its process died). A folder that merely
looks like a session's is never touched.

Scratch is private: session folders are made ``0700`` and jask's files in
them ``0600``, whatever the umask. A forked child never removes its
parent's folder, nor any store in it (:func:`owns` is False there).
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import shutil
import signal
import socket
import stat
import sys
import threading
import uuid

from jask.base import forks

from . import saves

__all__ = ["session_dir", "owns", "keep", "holds_jask_stores", "open_lock",
           "file_mode", "folder_mode", "journal_dir"]

_lock = forks.lock()
_sessions: dict[str, str] = {}              # scratch_dir -> this process's folder
_owner_pid = [os.getpid()]                  # the process whose folders _sessions lists
_session_locks: dict[str, int] = {}         # folder -> fd holding its flock
_kept: set[str] = set()                     # stores opened by path: never deleted
_made_scratch: set[str] = set()             # scratch dirs made here: removed at exit if empty

_LOCK_SUFFIX = ".lock"
#: Name of the proof file inside every session folder.
MARKER = ".jask-session"
#: Subfolder of a session folder that journals saves in progress (jask.store.kinds.local.saves).
JOURNAL = "saves"
_PROOF_TAG = "jask-session 1"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def session_dir(scratch_dir: str) -> str:
    """This process's folder inside ``scratch_dir``, made on first use.

    A live session holds an exclusive ``flock`` on ``<folder>.lock`` for as
    long as the process runs (the kernel releases it when the process dies,
    however it dies). Proven session folders whose lock is free are removed
    here, after finishing the saves they journal; nothing else in
    ``scratch_dir`` is ever touched.

    Example:
      >>> import tempfile
      >>> folder = session_dir(tempfile.mkdtemp())
      >>> oct(os.stat(folder).st_mode & 0o777), owns(os.path.join(folder, "a.zarr"))
      ('0o700', True)
    """
    with _lock:
        _forget_if_forked()
        folder = _sessions.get(scratch_dir)
        if folder is not None and os.path.isdir(folder):
            return folder
        if folder is not None:  # removed under us (with its scratch dir): a new one
            _close_lock(_sessions.pop(scratch_dir))
        if not os.path.isdir(scratch_dir):
            os.makedirs(scratch_dir, mode=0o700, exist_ok=True)
            _made_scratch.add(scratch_dir)
        try:
            _remove_stale_sessions(scratch_dir)
            folder = _make_session(scratch_dir)
        except FileNotFoundError:  # another process removed it, empty, as it exited
            os.makedirs(scratch_dir, mode=0o700, exist_ok=True)
            folder = _make_session(scratch_dir)
        _sessions[scratch_dir] = folder
        _remove_at_kernel_shutdown()
        return folder


def _make_session(scratch_dir: str) -> str:
    token = uuid.uuid4().hex[:16]
    folder = os.path.join(scratch_dir, f"session-{socket.gethostname()}-{os.getpid()}-{token}")
    proof = _proof(token)
    # Lock first, folder second: a folder never exists without its lock file.
    fd = _create_private(folder + _LOCK_SUFFIX, proof, keep_open=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:  # no flock here (some network filesystems): pid + start time
        if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            os.close(fd)
            raise
    _session_locks[folder] = fd
    os.mkdir(folder, 0o700)
    os.chmod(folder, 0o700)  # whatever the umask
    _create_private(os.path.join(folder, MARKER), proof)
    return folder


def _create_private(path: str, text: str, *, keep_open: bool = False) -> int:
    """A new ``0600`` file at ``path`` holding ``text`` (never through a symlink)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    except BaseException:
        os.close(fd)
        raise
    if keep_open:
        return fd
    os.close(fd)
    return -1


def open_lock(path: str) -> int:
    """Open (or make, ``0600``) the lock file at ``path`` for ``flock``: never
    through a symlink, and only a regular file of this user's.

    Raises:
      PermissionError: ``path`` is a symlink, not a regular file, or another
        user's (someone could make jask lock, or remove, a file it does not own).

    Example:
      >>> import tempfile
      >>> os.close(open_lock(os.path.join(tempfile.mkdtemp(), "a.lock")))
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise PermissionError(errno.EPERM, "jask refuses the lock file, a symlink", path) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise PermissionError(errno.EPERM, "jask refuses the lock file, not a regular file "
                                           "of this user's", path)
    return fd


def _proof(token: str) -> str:
    pid = os.getpid()
    return (f"{_PROOF_TAG}\nid {token}\npid {pid}\nstart {_start_time(pid)}\n"
            f"host {socket.gethostname()}\nuid {os.geteuid()}\n")


def _start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot), or "" off Linux:
    with the pid, it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _read_own_file(path: str) -> str | None:
    """The text of ``path`` if it is a regular file of this user, not a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size > 4096:
            return None
        return os.read(fd, 4096).decode(errors="replace")
    finally:
        os.close(fd)


def _parse(text: str | None) -> dict[str, str] | None:
    if not text or not text.startswith(_PROOF_TAG + "\n"):
        return None
    fields = dict(line.split(" ", 1) for line in text.splitlines()[1:] if " " in line)
    return fields if {"id", "pid", "start", "host", "uid"} <= fields.keys() else None


def _proven(folder: str) -> dict[str, str] | None:
    """The proof of the session folder ``folder``, or None if it is not one
    jask made for this user (by the files in it, never by its name)."""
    try:
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return None
    lock_text = _read_own_file(folder + _LOCK_SUFFIX)
    proof = _parse(lock_text)
    if (proof is None or lock_text != _read_own_file(os.path.join(folder, MARKER))
            or not os.path.basename(folder).endswith("-" + proof["id"])
            or proof["uid"] != str(os.geteuid())):
        return None
    return proof


def _remove_stale_sessions(scratch_dir: str) -> None:
    for name in os.listdir(scratch_dir):
        if name.startswith("session-") and not name.endswith(_LOCK_SUFFIX):
            _remove_if_dead(os.path.join(scratch_dir, name))


def _remove_if_dead(folder: str) -> None:
    """Remove ``folder`` if it is a proven session whose process has died."""
    proof = _proven(folder)
    if proof is None:
        return  # not jask's (or not this user's): never touched
    try:
        fd = os.open(folder + _LOCK_SUFFIX, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # its process is alive
        except OSError:  # no flock here: the same host's pid and start time decide
            if proof["host"] != socket.gethostname() or _alive(proof):
                return
        _finish_journal(folder)
        _remove_session_files(folder)
    finally:
        os.close(fd)


def _alive(proof: dict[str, str]) -> bool:
    pid = int(proof["pid"]) if proof["pid"].isdigit() else -1
    if pid <= 0:
        return True  # cannot tell: keep it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_time(pid) == proof["start"]


def _finish_journal(folder: str) -> None:
    """Complete or undo the saves a dead session journalled (jask.store.kinds.local.saves)."""
    saves.recover_journal(os.path.join(folder, JOURNAL))


def _remove_session_files(folder: str) -> None:
    """Delete a session folder, its marker last and its lock file after it, so
    a removal cut short leaves a folder that is still proven (and removed later)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        entries = []  # gone already
    for entry in entries:
        if entry.name == MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder, MARKER))
        os.rmdir(folder)
        os.unlink(folder + _LOCK_SUFFIX)


# --- what this process may delete ------------------------------------------------

def owns(path: str) -> bool:
    """Whether ``path`` (a store, or a hidden folder of one) lies in a session
    folder of this very process and was not opened by path (:func:`keep`):
    the only files jask ever deletes. False in a forked child for the
    parent's stores.

    Example:
      >>> owns("/data/features.zarr")
      False
    """
    _forget_if_forked()
    path = os.path.abspath(path)
    return os.path.dirname(path) in _sessions.values() and path not in _kept


def keep(path: str) -> None:
    """Never delete the store at ``path`` in this process (it was opened by
    path with ``jask.open``, so a DiskArray of the user's refers to it); a
    scratch store still goes with its session folder when the process ends."""
    _kept.add(os.path.realpath(path))  # as jask.store.versions.resolved keys it


def holds_jask_stores(path: str) -> bool:
    """Whether the store at ``path`` is one of jask's own (in a proven session
    folder), whose every chunk file jask writes: there, unlike in Zarr stores
    in general, a missing chunk file is damage, not the fill value.

    Example:
      >>> holds_jask_stores("/s/.jask_scratch/session-h-1-ab/add-1.zarr")
      False
    """
    folder = os.path.dirname(os.path.abspath(path))
    return folder in _sessions.values() or _proven(folder) is not None


def file_mode(root: str) -> int:
    """Mode of a new chunk file of the store at ``root``: ``0600`` in this
    process's scratch, what Zarr gives elsewhere (less the umask)."""
    return 0o600 if os.path.dirname(root) in _sessions.values() else 0o644


def folder_mode(root: str) -> int:
    """Mode of a new folder of the store at ``root``: ``0700`` in this
    process's scratch, else ``0755`` (less the umask)."""
    return 0o700 if os.path.dirname(root) in _sessions.values() else 0o755


def journal_dir(folder: str) -> str:
    """The journal folder (``0700``) of the session folder ``folder``."""
    path = os.path.join(folder, JOURNAL)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    return path


# --- the end of a session, and forks ---------------------------------------------

def _forget_if_forked() -> None:
    """In a forked child, the parent's folders are not ours: forget them."""
    if _owner_pid[0] != os.getpid():
        _after_fork_in_child()


def _after_fork_in_child() -> None:
    for fd in _session_locks.values():
        with contextlib.suppress(OSError):
            os.close(fd)  # the parent's lock stays held by the parent's descriptor
    _session_locks.clear()
    _sessions.clear()
    _kept.clear()
    _made_scratch.clear()
    _owner_pid[0] = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _remove_sessions() -> None:
    if _owner_pid[0] != os.getpid():
        return  # a forked child: the folders are its parent's
    for folder in list(_sessions.values()):
        _finish_journal(folder)
        _remove_session_files(folder)
        _close_lock(folder)
    for scratch_dir in _made_scratch:  # a notebook run leaves no empty scratch folder behind
        with contextlib.suppress(OSError):
            os.rmdir(scratch_dir)  # only if empty: another session's, or anything else, stays


def _remove_at_kernel_shutdown() -> None:
    """In a Jupyter kernel, remove the sessions on SIGTERM too.

    Jupyter ends a kernel that is slow to exit after a shutdown or restart
    request with SIGTERM, which skips ``atexit``: every notebook run then
    left its scratch behind (seen with a ``LocalCluster`` closed in the
    notebook). Only in a kernel (outside one, SIGTERM keeps Python's own
    meaning) and only where nothing else handles it; the process still
    ends by SIGTERM.
    """
    if ("ipykernel" not in sys.modules or _sigterm_handled
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return
    signal.signal(signal.SIGTERM, _remove_sessions_then_end)
    _sigterm_handled.append(True)


_sigterm_handled: list[bool] = []


def _remove_sessions_then_end(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _remove_sessions()
    finally:
        os.kill(os.getpid(), signal.SIGTERM)


def _close_lock(folder: str) -> None:
    fd = _session_locks.pop(folder, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
