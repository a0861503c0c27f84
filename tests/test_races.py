"""Snapshot reads and threads: a read of a store another process or thread
replaces sees one version or raises StoreChangedError; jitted and eager calls
from several threads run at once.

A few seconds of benchmarks/races.py (the full harness runs for as long as
asked): a real child process, real threads, each store version a constant,
so a mixed read shows as unequal values.
"""
import subprocess
import threading

import jax
import numpy as np
import pytest

import jask
from benchmarks import races

#: One writer process serves this module's tests (starting one costs seconds).
pytestmark = pytest.mark.xdist_group("races")


@pytest.fixture(scope="module")
def writer(tmp_path_factory):
    """A child process that update_s stores when asked (benchmarks.races --role serve)."""
    work = tmp_path_factory.mktemp("races")
    child = races._spawn("serve", [], 0, str(work), "64KB", stdin=subprocess.PIPE,
                         stderr=None)
    line = child.stdout.readline()
    assert line.strip() == "ready", line

    def ask(*command) -> str:
        child.stdin.write(" ".join(map(str, command)) + "\n")
        child.stdin.flush()
        return child.stdout.readline()

    yield ask
    child.stdin.close()
    assert child.wait(timeout=60) == 0


def test_reads_see_one_version_while_a_process_and_a_thread_write(tmp_path, small_budget,
                                                                   writer):
    store = races.make_store(str(tmp_path / "shared.zarr"))
    mine = jask.from_numpy(np.zeros(races.SHAPE, np.float32))  # a store jask made
    results: dict = {}

    def reader(name, x):
        results[name] = races.read_loop(x, races.READERS[:5], 2.5, str(tmp_path))

    threads = [threading.Thread(target=reader, args=("user", jask.open(store))),
               threading.Thread(target=reader, args=("made", mine)),
               threading.Thread(target=races.update_loop, args=(mine, 2.5, 0, True)),
               threading.Thread(target=writer, args=("update", store, 2.5, 1000))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    total = races.Counts()
    for counts in results.values():
        for c in counts.values():
            total.add(c)
    assert total.errors == []
    assert total.mixed == 0, results
    assert total.consistent >= 4, results  # few when the machine is busy
    # threads of one process never need the error: writers wait for readers
    assert sum(c.refused for c in results["made"].values()) == 0, results


def test_a_slow_read_across_swaps_that_reuse_the_inode_is_refused(tmp_path, small_budget,
                                                                 writer):
    """The reader pauses at its first tile while another process swaps the
    store twice, the folder at its path ending with its old inode number (a
    stamp of the inode alone saw no change and the result mixed 0 and 102)."""
    store = races.make_store(str(tmp_path / "s.zarr"), shape=(256, 128))  # 2x the budget
    x = jask.open(store)
    swapped, lock, report = threading.Event(), threading.Lock(), []

    def pause(tile):
        with lock:
            if not report:
                report.append(writer("swap", store))
                swapped.set()
        swapped.wait()
        return tile

    def slow(a):
        return jax.pure_callback(pause, jax.ShapeDtypeStruct(a.shape, a.dtype), a)

    with pytest.raises(jask.StoreChangedError, match="s.zarr"):
        jask.map(slow, x).to_numpy()
    assert report == ['{"inode_back": true}\n']
    values = x.to_numpy()  # a fresh read sees the new version whole
    assert (values == 102).all()


def test_jitted_training_threads_beside_eager_ops(small_budget):
    report = races.jit_threads(2.0)
    assert report["errors"] == []
    assert min(report["steps"]) >= 2, report


def test_threads_updating_each_others_source_never_wait_for_each_other(small_budget):
    """a.update_(b) and b.update_(a) at once: each swap waits only for
    readers still reading, never for a thread that is itself swapping."""
    a = jask.from_numpy(np.full(races.SHAPE, 1.0, np.float32))
    b = jask.from_numpy(np.full(races.SHAPE, 2.0, np.float32))
    errors: list = []

    def copy(target, source, n=15):
        try:
            for _ in range(n):
                target.update_(source)
        except Exception as err:  # noqa: BLE001 - reported
            errors.append(repr(err))

    threads = [threading.Thread(target=copy, args=(a, b)),
               threading.Thread(target=copy, args=(b, a))]
    [t.start() for t in threads]
    [t.join(timeout=120) for t in threads]
    assert not any(t.is_alive() for t in threads), "the two updates wait for each other"
    assert errors == []
    for x in (a, b):
        values = x.to_numpy()
        assert (values == values.flat[0]).all() and values.flat[0] in (1.0, 2.0)
