"""This process's scratch folder, and the removal of dead processes' folders.

Each process keeps the stores it makes in its own ``session-<host>-<pid>-…``
folder inside the scratch directory, removed at exit.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import socket
import threading
import uuid

__all__ = ["session_dir"]

_lock = threading.Lock()
_sessions: dict[str, str] = {}              # scratch_dir -> this process's folder


def session_dir(scratch_dir: str) -> str:
    """This process's folder inside ``scratch_dir``, made on first use.

    A live session holds an exclusive ``flock`` on ``<folder>.lock`` for as
    long as the process runs (the kernel releases it when the process dies,
    however it dies). Session folders whose lock is free are removed here;
    nothing else in ``scratch_dir`` is ever touched.
    """
    with _lock:
        folder = _sessions.get(scratch_dir)
        if folder is not None:
            return folder
        os.makedirs(scratch_dir, exist_ok=True)
        host = socket.gethostname()
        _remove_stale_sessions(scratch_dir, host)
        folder = os.path.join(scratch_dir, f"session-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        # Lock first, folder second: a folder never exists without a held lock.
        fd = os.open(folder + _LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _session_locks[folder] = fd
        except OSError:  # no flock here (some network filesystems): PIDs only
            os.close(fd)
            os.unlink(folder + _LOCK_SUFFIX)
        os.makedirs(folder)
        _sessions[scratch_dir] = folder
        return folder


_LOCK_SUFFIX = ".lock"
_session_locks: dict[str, int] = {}


def _remove_stale_sessions(scratch_dir: str, host: str) -> None:
    prefix = f"session-{host}-"
    for name in os.listdir(scratch_dir):
        path = os.path.join(scratch_dir, name)
        if not name.startswith(prefix) or name.endswith(_LOCK_SUFFIX) or not os.path.isdir(path):
            continue
        if os.path.exists(path + _LOCK_SUFFIX):
            _remove_if_unlocked(path)
        else:  # a folder of an older jask, which marked liveness by PID only
            pid = name[len(prefix):].split("-")[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)


def _remove_if_unlocked(folder: str) -> None:
    try:
        fd = os.open(folder + _LOCK_SUFFIX, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return  # its process is alive
    try:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder + _LOCK_SUFFIX)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@atexit.register
def _remove_sessions() -> None:
    for folder in list(_sessions.values()):
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(folder + _LOCK_SUFFIX)
        fd = _session_locks.pop(folder, None)
        if fd is not None:
            os.close(fd)

