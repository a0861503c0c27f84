"""A loader's reads in worker processes (``jask.batches(..., readers="processes")``).

Threads of the loader's own process that read cost a jitted step's dispatch
in the main thread 1.3-11x its time alone on a TPU host, where the same reads
in another process cost it 1.1-1.2x (benchmarks/RESULTS.md, "Reader threads
against reader processes"): every reading thread's wake-up takes the GIL
the dispatching thread wants. So here the runs of a local, uncompressed store
are read by spawned processes (kept for the loader's life), each opening the
store by its location and reading straight into the loader's window, which
lives in shared memory; the loader's threads only wait for them.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import weakref
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import shared_memory

import numpy as np

from jask.store import StoreChangedError
from jask.store.tiles import read_runs
from jask.store.versions import check_unchanged


class SharedArray:
    """A numpy array in shared memory, named for the worker processes; the
    segment is unlinked once :attr:`value` and every view of it are gone."""

    def __init__(self, shape: tuple, dtype):
        nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        shm = shared_memory.SharedMemory(create=True, size=nbytes)
        self.name = shm.name
        self.value = np.ndarray(shape, dtype, buffer=shm.buf)
        # (views of an array made on a buffer keep that array as their base: the
        # finalizer runs once none is left, when the buffer can be closed)
        weakref.finalize(self.value, _free, shm)

    def offset_of(self, view: np.ndarray) -> int:
        """Where ``view`` (of :attr:`value`) begins in the segment, in bytes."""
        return (view.__array_interface__["data"][0]
                - self.value.__array_interface__["data"][0])


def _free(shm: shared_memory.SharedMemory) -> None:
    try:
        shm.unlink()
    except FileNotFoundError:
        pass
    try:
        shm.close()
    except BufferError:  # at the interpreter's exit, a view may be left: unlinked is enough
        pass


class ReaderProcesses:
    """``n`` spawned worker processes reading runs into :class:`SharedArray` s."""

    def __init__(self, n: int):
        self.broken = False
        self._pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start_worker)

    def submit(self, store, starts: np.ndarray, stops: np.ndarray, into: np.ndarray,
               window: SharedArray, stamps: list, op: str) -> Future:
        """Read runs ``starts[i]:stops[i]`` of ``store`` into ``into``, a view of
        ``window``; the future raises what the read raised (a store replaced
        meanwhile: :class:`StoreChangedError`; a worker ended: ``BrokenProcessPool``)."""
        future = self._pool.submit(_read_into, store, starts, stops, window.name,
                                   window.offset_of(into), into.shape, into.dtype.str,
                                   stamps, op)
        future.add_done_callback(self._note_broken)
        return future

    def _note_broken(self, future: Future) -> None:
        if not future.cancelled() and isinstance(future.exception(), BrokenProcessPool):
            self.broken = True

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _start_worker() -> None:
    os.environ["JAX_PLATFORMS"] = "cpu"  # never open the accelerator the loader's process holds
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's process's to handle


#: a worker's segments attached, the latest few (a loader reads into two windows)
_attached: dict[str, shared_memory.SharedMemory] = {}
_ATTACHED_MOST = 8


def _read_into(store, starts, stops, name: str, offset: int, shape: tuple, dtype: str,
               stamps: list, op: str) -> None:
    shm = _attached.pop(name, None) or shared_memory.SharedMemory(name=name)
    _attached[name] = shm
    while len(_attached) > _ATTACHED_MOST:
        _attached.pop(next(iter(_attached))).close()
    into = np.ndarray(shape, np.dtype(dtype), buffer=shm.buf, offset=offset)
    try:
        read_runs(store, starts, stops, into)
    except Exception as err:  # replaced by another process while read: say that
        try:
            check_unchanged(stamps, op)
        except StoreChangedError as changed:
            raise changed from err
        raise
    finally:
        del into
