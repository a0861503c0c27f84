"""jask.batches under a hostile user, round 7: a host feed's recycled batch
memory across a fork, the idle-release timer against abandoned and
interleaved iterations, and stores rewritten while few chunk files are held."""
import gc
import os
import threading

import numpy as np
import pytest
import zarr

import jask
from helpers import wait_for_fork
from jask.api import batches as batches_module


@pytest.fixture
def recycled(monkeypatch):
    """Every batch recycled, however small (loaders recycle from 1 MiB)."""
    monkeypatch.setattr(batches_module, "RECYCLE_BYTES", 1)


def _stores(tmp_path, rows=3000, cols=8, chunk=100):
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    X = zarr.create_array(str(tmp_path / "X.zarr"), shape=x.shape, chunks=(chunk, cols),
                          dtype="f4", compressors=None)
    X[:] = x
    Y = zarr.create_array(str(tmp_path / "y.zarr"), shape=(rows,), chunks=(chunk,), dtype="i8",
                          compressors=None)
    Y[:] = np.arange(rows)
    return jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr")), x


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_child_forked_while_the_cutter_lends_a_block_gives_back_and_iterates(
        tmp_path, recycled):
    """The parent's cutting thread takes the batch memory's lock for every batch:
    a fork at that moment copies it held, with no thread left to release it.
    The child, dropping a batch it inherited (its block given back) and freeing
    the batch memory, must not wait for it forever."""
    X, y, x = _stores(tmp_path)
    loader = jask.batches(X, y, batch_size=50, buffer=400, seed=1, epochs=2, prefetch=2,
                          threads=2)
    it = iter(loader)
    held = next(it)
    memory = loader._batch_memory
    taken, fork_done = threading.Event(), threading.Event()

    def lend():  # the cutter's moment in _BatchMemory.empty, made to last over the fork
        with memory.lock:
            taken.set()
            fork_done.wait(10)

    lender = threading.Thread(target=lend)
    lender.start()
    taken.wait(10)
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            del held
            gc.collect()
            memory.close()  # (as the child's iteration of the loader would)
            ok = all(np.array_equal(xb, x[yb]) for xb, yb in jask.batches(
                X, y, batch_size=50, buffer=400, seed=2, threads=2))
        finally:
            os._exit(0 if ok else 1)
    fork_done.set()
    lender.join()
    code = wait_for_fork(pid, 30)
    assert code is not None, "the forked child hung on the batch memory's lock"
    assert code == 0
    assert np.array_equal(held[0], x[held[1]])
    it.close()
    loader.close()


def test_close_leaves_no_thread_behind_not_even_the_idle_timer(tmp_path, monkeypatch):
    """An iteration ended starts a timer freeing the windows after KEEP_IDLE_S;
    close() frees them at once: its timer, left waiting, was a thread alive
    after close() (one per loader closed so)."""
    monkeypatch.setattr(batches_module, "KEEP_IDLE_S", 30.0)
    X, y, x = _stores(tmp_path, rows=600)
    before = set(threading.enumerate())
    for abandon in (False, True):
        loader = jask.batches(X, y, batch_size=50, buffer=200, seed=1, threads=2)
        seen = []
        for xb, yb in loader:
            assert np.array_equal(xb, x[yb])
            seen.append(yb.copy())
            if abandon:
                break
        loader.close()
        assert [t for t in threading.enumerate() if t not in before] == []
        # a closed loader iterates on (the epoch's rest, or the next), and its timer goes
        # with the next close()
        rest = [yb for xb, yb in loader if np.array_equal(xb, x[yb])]
        assert sorted(np.concatenate(seen + rest) % 600) == sorted(list(range(600)) * (1 + (
            not abandon)))
        loader.close()
        assert [t for t in threading.enumerate() if t not in before] == []


@pytest.mark.parametrize("readers", ["threads", "processes"])
def test_few_files_held_and_a_store_written_three_ways_between_epochs(
        tmp_path, readers, monkeypatch):
    """Two chunk files held open (the others forgotten at each epoch's start and
    opened again): a store written between epochs by zarr whole, by one chunk,
    and one chunk file in place gives each next epoch the store as it is then."""
    monkeypatch.setattr(jask.store.chunkio.OpenFiles, "MOST", 2)
    X, y, x = _stores(tmp_path, rows=2000, cols=4)
    loader = jask.batches(X, y, batch_size=40, buffer=400, seed=3, threads=2, prefetch=1,
                          readers=readers)
    now = x.copy()
    for epoch, how in enumerate(["whole", "chunk", "in place", "whole", None]):
        got = [(xb.copy(), yb.copy()) for xb, yb in loader]
        assert len(got) == loader.plan.batches_in(epoch)
        for xb, yb in got:
            np.testing.assert_array_equal(xb, now[yb])
        now = now.copy()
        if how == "whole":
            now += 1e5
            zarr.open_array(X.filename)[...] = now
        elif how == "chunk":
            now[700:800] += 1e5
            zarr.open_array(X.filename)[700:800] = now[700:800]
        elif how == "in place":
            now[1200, 0] = -1
            with open(os.path.join(X.filename, "c", "12", "0"), "r+b") as f:
                f.write(np.float32(-1).tobytes())
    loader.close()


@pytest.mark.parametrize("most", [0, 2, 1024])
def test_a_store_rewritten_as_the_feeder_begins_the_next_epoch_gives_it_the_new_one(
        tmp_path, most, monkeypatch):
    """One iteration of three epochs, the store rewritten by zarr just as the
    feeder begins epochs 1 and 2 (before their chunk files are renewed): the
    files held open across the epoch's start are of the old version, the
    others forgotten and opened anew. Each epoch is one version, the new one,
    and nothing is raised (none was written during an epoch)."""
    monkeypatch.setattr(jask.store.chunkio.OpenFiles, "MOST", most)
    X, y, x = _stores(tmp_path, rows=2000, cols=4)
    versions = [x]
    files_for = batches_module._Feeder.files_for

    def written_first(self, stamps):
        if self.files_stamps is not None:  # (epoch 1 on)
            versions.append(versions[-1] + 1e5)
            zarr.open_array(X.filename)[...] = versions[-1]  # (its metadata unchanged)
        return files_for(self, stamps)

    monkeypatch.setattr(batches_module._Feeder, "files_for", written_first)
    loader = jask.batches(X, y, batch_size=40, buffer=400, seed=3, threads=2, prefetch=1,
                          epochs=3)
    got = [(xb.copy(), yb.copy()) for xb, yb in loader]
    assert len(versions) == 3
    per = loader.plan.batches_in(0)
    for b, (xb, yb) in enumerate(got):
        np.testing.assert_array_equal(xb, versions[b // per][yb])
    loader.close()
