"""jask.batches in a process forked while the loader's reads are in flight: the
child's copy of the iteration has none of the parent's threads (reading pool,
cutter, reading process's collector), and must neither wait for them when
closed nor when it goes on."""
import os
import signal
import threading
import time

import jax
import numpy as np
import pytest
import zarr

import jask
from helpers import wait_for_fork
from jask.api import batches as batches_module
from jask.api import reader_process

CPU = jax.devices("cpu")[0]


def _store(tmp_path, rows=3000, cols=8, chunk=100):
    """One array whose row r is r * cols, r * cols + 1, ...: a batch names its rows."""
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    X = zarr.create_array(str(tmp_path / "X.zarr"), shape=x.shape, chunks=(chunk, cols),
                          dtype="f4", compressors=None)
    X[:] = x
    return jask.open(str(tmp_path / "X.zarr"))


def _rows(batch) -> list:
    return (np.asarray(batch[0])[:, 0] // 8).astype(int).tolist()


def _good(batch) -> bool:
    xb = np.asarray(batch[0])
    return bool(np.array_equal(xb, (xb[:, :1] // 8) * 8 + np.arange(8)))


@pytest.mark.filterwarnings("ignore:os.fork")
@pytest.mark.parametrize("feed,child", [
    ("threads", "closes"), ("threads", "goes on"), ("processes", "closes"),
    ("processes", "goes on"), ("device", "closes")])
def test_a_child_forked_while_a_window_is_read_closes_or_goes_on(
        tmp_path, monkeypatch, request, feed, child):
    """The parent forks while the third window's read is in flight (held there:
    a reading thread made to wait, or the reading process stopped). The child
    either closes the iteration and the loader, then iterates that loader on
    (the rest of both epochs) and a new loader over the store, or goes on with the iteration
    from the batch after the parent's last: every batch the plan's. The device
    feed's child only closes: going on raises (the test below)."""
    if feed == "device":
        request.getfixturevalue("device_feed")
    X = _store(tmp_path)
    loader = jask.batches(X, batch_size=50, buffer=400, seed=1, epochs=2, threads=2,
                          prefetch=1, readers="processes" if feed == "processes" else "threads",
                          device=CPU if feed == "device" else None)
    plan = loader.plan
    expected = [rows.tolist() for rows in plan.batch_rows(0)]
    third = set((plan.windows(0)[2] * plan.unit).tolist())  # its units' first rows
    in_read, forked = threading.Event(), threading.Event()
    real = batches_module._read_runs

    def held_read(a, starts, *args):  # the third window's reads wait over the fork
        if int(starts[0]) in third:
            in_read.set()
            forked.wait(30)
        return real(a, starts, *args)

    monkeypatch.setattr(batches_module, "_read_runs", held_read)
    it = iter(loader)
    got = [_rows(next(it))]
    stopped = None
    if feed == "processes":
        stopped = loader._process.pid
        os.kill(stopped, signal.SIGSTOP)  # what it reads stays in flight
    while len(got) < 15 and not (in_read.is_set() or (  # (the first two windows' batches)
            stopped and loader._process._pending)):
        got.append(_rows(next(it)))
    # (past the first window's batches, the third window's reads are given out)
    deadline = time.monotonic() + 20
    while not (in_read.is_set() or (stopped and loader._process._pending)):
        assert time.monotonic() < deadline, "no read in flight to fork over"
        time.sleep(0.01)
    pid = os.fork()
    if pid == 0:
        ok = False
        forked.set()  # (this process's reads of the third window are not held)
        try:
            if child == "closes":
                it.close()
                loader.close()
                if feed == "device":
                    ok = True
                    return
                # the rest of both epochs, read by threads (and a reading child) of its own
                rest = list(loader)
                ok = (all(map(_good, rest)) and got + [_rows(b) for b in rest[:len(
                    expected) - len(got)]] == expected and sorted(sum(got + [
                        _rows(b) for b in rest], [])) == sorted(list(range(3000)) * 2))
                again = list(jask.batches(X, batch_size=64, seed=2, threads=2))
                ok = ok and sorted(sum(map(_rows, again), [])) == list(range(3000))
            else:
                rest = [next(it) for _ in range(len(expected) - len(got))]
                ok = all(map(_good, rest)) and got + [_rows(b) for b in rest] == expected
                it.close()
        finally:
            os._exit(0 if ok else 1)
    forked.set()
    if stopped:
        os.kill(stopped, signal.SIGCONT)
    code = wait_for_fork(pid, 30)
    assert code is not None, "the forked child hung"
    assert code == 0
    rest = [next(it) for _ in range(len(expected) - len(got))]  # the parent's, undisturbed
    assert all(map(_good, rest)) and got + [_rows(b) for b in rest] == expected
    it.close()
    loader.close()


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_forked_child_alive_lets_the_parents_reading_process_end_at_close(tmp_path):
    """A fork inherits the pipes to the parent's reading process: holding its
    stdin's write end, it kept the reading process from seeing its input end,
    and the parent's close() waited END_WAIT_S, then killed it, while the fork lived."""
    X = _store(tmp_path)
    loader = jask.batches(X, batch_size=50, buffer=400, threads=2, readers="processes")
    assert sorted(sum(map(_rows, loader), [])) == list(range(3000))
    reader = loader._process._proc
    go = os.pipe()
    pid = os.fork()
    if pid == 0:  # alive until the parent has closed its loader
        os.close(go[1])
        os.read(go[0], 1)
        os._exit(0)
    os.close(go[0])
    try:
        began = time.monotonic()
        loader.close()
        took = time.monotonic() - began
    finally:
        os.close(go[1])
        code = wait_for_fork(pid, 30)
    assert code == 0
    assert reader.returncode == 0  # (it ended by itself)
    assert took < reader_process.END_WAIT_S / 2, took


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_child_forked_while_a_thread_holds_a_read_updates_the_store(tmp_path, monkeypatch):
    """A reading thread holds its store against this process's writers while
    it reads; forked then, the child kept that hold with no thread to end it,
    and its ``update_`` of the store waited SWAP_WAIT for it."""
    monkeypatch.setattr(jask.store.versions, "SWAP_WAIT", 10.0)
    X = _store(tmp_path)
    x = np.asarray(zarr.open_array(str(tmp_path / "X.zarr"))[:])
    in_read, forked = threading.Event(), threading.Event()
    real = batches_module.read_runs_of_version

    def held_read(*args):  # (inside the read's hold of its store)
        if not forked.is_set():
            in_read.set()
            forked.wait(30)
        return real(*args)

    monkeypatch.setattr(batches_module, "read_runs_of_version", held_read)
    loader = jask.batches(X, batch_size=50, buffer=400, seed=1, threads=2)
    it = iter(loader)
    reading = threading.Thread(target=next, args=(it,))  # (its first batch waits on the read)
    reading.start()
    assert in_read.wait(20)
    pid = os.fork()
    if pid == 0:
        ok = False
        forked.set()
        try:
            began = time.monotonic()
            jask.update_(X, jask.from_numpy(x * 2))
            ok = time.monotonic() - began < 5 and np.array_equal(
                zarr.open_array(str(tmp_path / "X.zarr"))[:], x * 2)
        finally:
            os._exit(0 if ok else 1)
    forked.set()
    reading.join(20)
    code = wait_for_fork(pid, 30)
    assert code == 0
    it.close()
    loader.close()


def test_the_process_id_asked_once_a_batch_is_the_childs_in_a_fork():
    """``forks.pid()`` (what a loader's loop compares with its feeder's, once a
    batch, without a system call) is the forked child's own there."""
    from jask.base import forks
    assert forks.pid() == os.getpid()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if forks.pid() == os.getpid() != os.getppid() else 1)
    assert wait_for_fork(pid, 30) == 0


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_device_feed_in_a_child_forked_after_jax_started_raises_not_hangs(
        tmp_path, device_feed):
    """A device feed compiles its cut as it goes (a window begun at another
    batch, another count), which waits forever in a child forked after JAX
    started (jask.base.forks): there the inherited iteration's next batch, and
    a new device-feed iteration, raise a RuntimeError naming the problem; a
    loader of numpy batches takes the rest from the loader's state."""
    X = _store(tmp_path)
    loader = jask.batches(X, batch_size=50, buffer=400, seed=1, epochs=1, threads=2,
                          prefetch=1, device=CPU)
    expected = [rows.tolist() for rows in loader.plan.batch_rows(0)]
    it = iter(loader)
    got = [_rows(next(it)) for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            said = []
            for again in (lambda: next(it), lambda: next(iter(loader)), lambda: next(iter(
                    jask.batches(X, batch_size=50, buffer=400, seed=3, device=CPU)))):
                try:
                    again()
                except RuntimeError as err:
                    said.append(str(err))
            it.close()
            rest = list(jask.batches(X, batch_size=50, buffer=400, seed=1, epochs=1,
                                     threads=2, state=loader.state))
            ok = (len(said) == 3 and all(
                "forked" in m and "spawn" in m and "device=None" in m for m in said)
                and all(map(_good, rest)) and got + [_rows(b) for b in rest] == expected)
        finally:
            os._exit(0 if ok else 1)
    code = wait_for_fork(pid, 30)
    assert code is not None, "the forked child hung"
    assert code == 0
    rest = [next(it) for _ in range(len(expected) - len(got))]  # the parent's, undisturbed
    assert got + [_rows(b) for b in rest] == expected
    it.close()
    loader.close()


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_child_forked_after_jax_started_knows_it():
    """``forks.forked_after_jax()``: False here, True in a child forked once
    JAX's backend has started (and in its own forked children)."""
    from jask.base import forks
    jax.device_put(np.zeros(1), CPU)  # (started)
    assert not forks.forked_after_jax()
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            grandchild = os.fork()
            if grandchild == 0:
                os._exit(0 if forks.forked_after_jax() else 1)
            ok = forks.forked_after_jax() and wait_for_fork(grandchild, 20) == 0
        finally:
            os._exit(0 if ok else 1)
    assert wait_for_fork(pid, 30) == 0
