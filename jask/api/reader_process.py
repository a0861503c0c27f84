"""A loader's reads in a child process (``jask.batches(..., readers="processes")``).

Threads of the loader's own process that read cost a jitted step's dispatch
in the main thread 1.3-11x its time alone on a TPU host, where the same reads
in another process cost it 1.1-1.2x, and one child of eight threads less than
eight children of one (benchmarks/RESULTS.md, "Reader threads against reader
processes"): every reading thread's wake-up takes the GIL the dispatching
thread wants. So here the runs of local uncompressed stores are read by one
child process, ``python -c CHILD THREADS`` (:func:`jask.store.reader_child.serve`; it never imports
the user's ``__main__``), whose threads read straight into the loader's
windows, which live in shared memory. Tasks go to it pickled on its stdin, a
task id each; their outcomes come back on its stdout, where one thread of the
loader's process resolves their futures (its blocking reads release the GIL).
"""
from __future__ import annotations

import itertools
import os
import pickle
import signal
import subprocess
import sys
import threading
import weakref
from concurrent.futures import Future
from multiprocessing import shared_memory

import numpy as np

from jask.base import counters, forks
from jask.store.tiles import OpenFiles

#: the child's program: the working folder left off its path (a file there could
#: shadow a module), and jask's package entered without running its ``__init__``,
#: which imports JAX and the whole API (3-5 s and 300 MB a child, measured; the
#: child needs only jask.store and jask.base: about 1 s)
CHILD = ("import importlib.util, sys, types; del sys.path[0]; "
         "spec = importlib.util.find_spec('jask'); "
         "package = sys.modules['jask'] = types.ModuleType('jask'); "
         "package.__path__ = list(spec.submodule_search_locations); "
         "from jask.store.reader_child import serve; serve(int(sys.argv[1]))")
#: seconds a closed child gets to finish the reads it runs before it is killed
END_WAIT_S = 10.0


def shared_room() -> int | None:
    """Bytes free for shared memory (``/dev/shm``; None where there is no such
    folder). A container's is often small (Docker's default is 64 MB), and a
    segment is only reserved as it is written: one larger than the room would
    kill the process with SIGBUS mid-read, not fail when made."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class SharedArray:
    """A numpy array in shared memory, named for the reading process; the
    segment is unlinked once :attr:`value` and every view of it are gone."""

    def __init__(self, shape: tuple, dtype):
        nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        shm = shared_memory.SharedMemory(create=True, size=nbytes)
        self.name = shm.name
        self.value = np.ndarray(shape, dtype, buffer=shm.buf)
        # (views of an array made on a buffer keep that array as their base: the
        # finalizer runs once none is left, when the buffer can be closed)
        weakref.finalize(self.value, _free, shm, os.getpid())

    def offset_of(self, view: np.ndarray) -> int:
        """Where ``view`` (of :attr:`value`) begins in the segment, in bytes."""
        return (view.__array_interface__["data"][0]
                - self.value.__array_interface__["data"][0])


def _free(shm: shared_memory.SharedMemory, owner: int) -> None:
    try:
        if os.getpid() == owner:  # (a forked child's copy is the parent's segment)
            shm.unlink()
    except FileNotFoundError:
        pass
    try:
        shm.close()
    except BufferError:  # at the interpreter's exit, a view may be left: unlinked is enough
        pass


class ReaderProcess:
    """One child process reading runs into :class:`SharedArray` s with
    ``threads`` threads, started here; :attr:`ended` once it is gone (then
    every read given it and not done raises ``ChildProcessError``)."""

    def __init__(self, threads: int):
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "JAX_PLATFORMS": "cpu",  # never open the parent's accelerator
               "PYTHONPATH": os.pathsep.join([package] + [p for p in [
                   os.environ.get("PYTHONPATH")] if p])}  # this jask, wherever it is
        # (a session of its own: a terminal's Ctrl-C is the loader's process's to handle;
        # the child ends at its stdin's end, when this process ends too)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        self._pending: dict[int, tuple[Future, OpenFiles]] = {}
        self._lock = forks.lock()  # the pending futures, the child's stdin
        self._ids = itertools.count()
        self.ended = threading.Event()
        threading.Thread(target=_collect, args=(self._proc, self._pending, self._lock, self.ended),
                         name="jask-reader-process", daemon=True).start()
        self.close = weakref.finalize(self, _end, self._proc, self._lock)
        """End the child (once the reads it runs are done); also when collected."""
        _started.add(self)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stalled(self, waited: float) -> str | None:
        """What to tell a consumer that has waited ``waited`` seconds for a batch
        while this child has reads not done: its pid and state (Linux: a
        stopped child's reads wait for it to be continued); None where it has
        none left to do, or has ended."""
        with self._lock:
            if not self._pending or self.ended.is_set():
                return None
        state = process_state(self.pid)
        how = {"T": "is stopped (SIGSTOP; state T): its reads wait until it is continued "
                    "(kill -CONT {pid})",
               "t": "is stopped by a debugger (state t): its reads wait until it goes on",
               "D": "waits on its disk (state D: a slow or hung mount?)",
               "Z": "has ended (state Z)"}.get(
            state or "", f"is running (state {state}): its reads are slow" if state
            else "has reads not done after all this time")
        return (f"jask.batches: no batch for {waited:.0f} s: its reading process "
                f"(pid {self.pid}) {how.format(pid=self.pid)}. Ctrl-C or leaving the loop "
                "ends it; the next iteration starts another.")

    def kill_after(self, seconds: float | None = None) -> threading.Timer:
        """Kill the child unless the timer returned is cancelled within
        ``seconds`` (:data:`END_WAIT_S`): its reads then fail, and no wait on them lasts forever
        (a child stopped, SIGSTOP, or stuck on a hung mount). While the
        interpreter ends (an iteration closed then) it is killed at once: a
        thread started then never starts, and its start would wait for ever."""
        timer = threading.Timer(END_WAIT_S if seconds is None else seconds, _kill, (self._proc,))
        timer.daemon = True
        if sys.is_finalizing():
            _kill(self._proc)
            return timer  # (never started: its cancel() does nothing)
        timer.start()
        return timer

    def submit(self, store, starts: np.ndarray, stops: np.ndarray, into: np.ndarray,
               window: SharedArray, stamps: list, op: str, files: OpenFiles) -> Future:
        """Read runs ``starts[i]:stops[i]`` of ``store`` into ``into``, a view of
        ``window``; the future raises what the read raised (a store replaced
        meanwhile: :class:`StoreChangedError`; the child ended: ``ChildProcessError``).
        The chunk files it read are remembered in ``files`` (:meth:`OpenFiles.seen`,
        as the child saw them) before the future is done, so that the reader's
        check sees them rewritten as it sees its own threads' files.
        It cannot be cancelled: the child may be writing into ``window``."""
        future: Future = Future()
        future.set_running_or_notify_cancel()
        message = pickle.dumps((store, starts, stops, window.name, window.offset_of(into),
                                into.shape, into.dtype.str, stamps, op))
        with self._lock:
            if self.ended.is_set():
                future.set_exception(_ended_error(self._proc))
                return future
            task = next(self._ids)
            self._pending[task] = (future, files)
            try:
                pickle.dump((task, message), self._proc.stdin)  # type: ignore[arg-type]
                self._proc.stdin.flush()  # type: ignore[union-attr]
            except (OSError, ValueError):  # the child ended: _collect fails the future
                pass
        return future


#: the reading children this process started (:func:`_let_go_in_a_fork`)
_started: weakref.WeakSet[ReaderProcess] = weakref.WeakSet()


def _let_go_in_a_fork() -> None:
    """In a forked child: its copies of the pipes to the parent's reading
    children point at ``/dev/null`` instead (nothing buffered is ever flushed
    into them): a fork holding a child's stdin kept it from ever seeing its
    input's end, and the parent's ``close()`` waited :data:`END_WAIT_S`, then
    killed it, for as long as the fork lived."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for reader in list(_started):
            for pipe in (reader._proc.stdin, reader._proc.stdout):
                try:
                    os.dup2(null, pipe.fileno(), inheritable=False)  # type: ignore[union-attr]
                except (AttributeError, OSError, ValueError):  # (closed already)
                    pass
    finally:
        os.close(null)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_let_go_in_a_fork)


def _collect(proc: subprocess.Popen, pending: dict, lock: threading.Lock,
             ended: threading.Event) -> None:
    """Resolve the futures of the reads ``proc`` reports done; once it ends, fail the rest."""
    try:
        while True:
            task, error, counted, seen = pickle.load(proc.stdout)  # type: ignore[arg-type]
            if counted:  # before the future: a `jask.track` block it ends has them
                counters.merge_drained({proc.pid: counted})
            with lock:
                future, files = pending.pop(task)
            files.merge(seen)
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
    except EOFError:  # its output's end: the child is ending (its input ended, or it failed)
        try:  # (killed at once, an ordinary close's child was killed before its own exit)
            proc.wait(END_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
    except Exception:  # its output cannot be read: end it
        pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    with lock:
        ended.set()
        left = list(pending.values())
        pending.clear()
    for future, _files in left:
        future.set_exception(_ended_error(proc))


def process_state(pid: int) -> str | None:
    """Process ``pid``'s state letter from ``/proc/<pid>/stat`` (R running, S
    sleeping, D disk wait, T stopped, t traced, Z ended); None where none is
    read (no such process, no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 1:].split()  # (its name, in parentheses, may hold spaces)
    return fields[0].decode() if fields else None


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()  # (a stopped process too; _collect then fails its reads)


def _ended_error(proc: subprocess.Popen) -> ChildProcessError:
    code = proc.returncode
    how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
           else f"exit code {code}")
    return ChildProcessError(f"jask.batches: its reading process (pid {proc.pid}) ended, {how}; "
                             "the next iteration starts another")


def _end(proc: subprocess.Popen, lock) -> None:
    with lock:
        try:
            proc.stdin.close()  # type: ignore[union-attr]  # the child ends at its input's end
        except OSError:
            pass
    try:
        proc.wait(END_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
