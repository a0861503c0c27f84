"""The child process of a loader's reads (:mod:`jask.api.reader_process`
starts it): tasks pickled on stdin, each a read of runs of a store into a
window in shared memory, read by a few threads; each task's outcome, and
what it counted, pickled back on stdout. Only jask.store and jask.base are
imported here: the child never runs JAX (nor jask's ``__init__``).
"""
from __future__ import annotations

import mmap
import os
import pickle
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import shared_memory

import numpy as np

from jask.base import counters, forks
from jask.store.tiles import OpenFiles
from jask.store.versions import read_runs_of_version

#: the child's segments mapped, the latest few (a loader reads into two windows an array)
_mapped: dict[str, object] = {}
_MAPPED_MOST = 8
_mapped_lock = forks.lock()


def _window(name: str):
    """The segment ``name`` mapped (a buffer), kept while among the latest few:
    unmapped once dropped and no read's view of it is left."""
    with _mapped_lock:
        buf = _mapped.pop(name, None)
        if buf is None:
            path = os.path.join("/dev/shm", name.lstrip("/"))
            if os.path.exists(path):  # Linux: a file, mapped without a resource tracker's say
                with open(path, "r+b") as f:
                    buf = mmap.mmap(f.fileno(), 0)
            else:  # (kept, never closed here: the parent unlinks it)
                buf = shared_memory.SharedMemory(name=name)
        _mapped[name] = buf
        while len(_mapped) > _MAPPED_MOST:
            _mapped.pop(next(iter(_mapped)))
        return buf.buf if isinstance(buf, shared_memory.SharedMemory) else buf


def _read_into(store, starts, stops, name: str, offset: int, shape: tuple, dtype: str,
               stamps: list, op: str) -> dict:
    """Read a task; the chunk files it read, as it saw them (:meth:`OpenFiles.seen`)."""
    into = np.ndarray(shape, np.dtype(dtype), buffer=_window(name), offset=offset)
    files = OpenFiles()
    try:
        read_runs_of_version(store, starts, stops, into, stamps, op, files)
    finally:
        files.close()
    return files.seen()


def serve(threads: int) -> None:
    """The child: read the tasks on stdin with ``threads`` threads, report each
    on stdout; at stdin's end, finish the reads begun and return."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the loader's process's to handle
    parent = os.getppid()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print() here goes to stderr, not among the reports
    written = threading.Lock()

    def run(task: int, message: bytes) -> None:
        error: BaseException | None = None
        seen: dict = {}
        try:
            seen = _read_into(*pickle.loads(message))
        except BaseException as err:
            error = err
        # what this read counted (and what others running beside it counted so
        # far): the parent adds it to its own, so `jask.track` sees the child's reads
        counted = counters.drain(parent)
        try:
            report = pickle.dumps((task, error, counted, seen))
            pickle.loads(report)  # an error the parent could not rebuild: said plainly
        except Exception:
            report = pickle.dumps((task, RuntimeError(f"{type(error).__name__}: {error}"),
                                   counted, seen))
        with written:
            out.write(report)
            out.flush()

    with ThreadPoolExecutor(threads, thread_name_prefix="jask-read") as pool:
        while True:
            try:
                task, message = pickle.load(sys.stdin.buffer)
            except EOFError:
                break
            pool.submit(run, task, message)
