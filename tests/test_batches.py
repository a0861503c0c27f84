"""jask.batches: minibatches of DiskArrays for training loops.

Every row once per epoch for the chunkings users bring, the rows the plan
says, deterministic whatever the budget and the threads, resumable mid-epoch,
disjoint shares across processes, within the budget, and the errors users
get for what they get wrong."""
import errno
import gc
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import wait

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import jask
from helpers import run_script, wait_for_fork
from jask.api.batches import RUN_BYTES, RUN_WINDOW_BYTES, RUNS_PER_BATCH, BatchPlan

#: (name, rows, columns, X's chunk rows, y's chunk rows, compressed, batch_size, buffer)
CASES = [
    ("one chunk", 10, 3, 10, 10, False, 4, None),
    ("ragged last chunk", 1003, 5, 100, 100, False, 64, 300),
    ("tiny chunks", 517, 2, 7, 7, True, 32, 100),
    ("y chunked otherwise", 1000, 4, 128, 333, True, 50, 256),
    ("buffer below a chunk", 600, 4, 512, 600, False, 16, 40),
    ("batch over a window", 700, 3, 50, 50, False, 256, 100),
    ("batch of one", 37, 2, 8, 8, False, 1, None),
    ("batch of all", 64, 2, 16, 16, False, 64, 32),
]


def _stores(tmp_path, rows, cols, cx, cy, compressed):
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    kw = {} if compressed else {"compressors": None}
    X = zarr.create_array(str(tmp_path / "X.zarr"), shape=x.shape, chunks=(cx, cols),
                          dtype="f4", **kw)
    X[:] = x
    Y = zarr.create_array(str(tmp_path / "y.zarr"), shape=(rows,), chunks=(cy,), dtype="i8",
                          **kw)
    Y[:] = np.arange(rows)
    return jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr")), x


def _rows(loader) -> list:
    return [yb.tolist() for _, yb in loader]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_every_row_once_per_epoch_aligned_as_the_plan_says(tmp_path, case, shuffle):
    _, rows, cols, cx, cy, compressed, bs, buffer = case
    X, y, x = _stores(tmp_path, rows, cols, cx, cy, compressed)
    loader = jask.batches(X, y, batch_size=bs, shuffle=shuffle, seed=3, buffer=buffer)
    for epoch in range(2):
        got = [(xb, yb) for xb, yb in loader]
        planned = [b.tolist() for b in loader.plan.batch_rows(epoch)]
        assert [yb.tolist() for _, yb in got] == planned
        assert sorted(r for b in planned for r in b) == list(range(rows))
        assert all(len(b) == bs for b in planned[:-1]) and 0 < len(planned[-1]) <= bs
        for xb, yb in got:  # each X row is its y's row
            np.testing.assert_array_equal(xb, x[yb])
        assert loader.state["epoch"] == epoch and loader.state["batch"] == len(planned)
    if shuffle and rows > 2 * bs:
        assert _rows(loader) != sorted(_rows(loader))  # (epochs 2 and 3 differ from order)


def test_in_order_reads_each_byte_once_and_shuffled_epochs_differ(tmp_path):
    X, y, _ = _stores(tmp_path, 4000, 8, 256, 256, False)
    loader = jask.batches(X, y, batch_size=100, shuffle=False)
    with jask.track() as t:
        assert [r for b in _rows(loader) for r in b] == list(range(4000))
    assert t.passes(X) == 1.0 and t.passes(y) == 1.0 and t.bytes_written == 0
    assert t.graphs == 0  # no jask op per batch
    shuffled = jask.batches(X, y, batch_size=100, seed=0)
    first, second = _rows(shuffled), _rows(shuffled)
    assert first != second and sorted(sum(first, [])) == sorted(sum(second, []))


@pytest.mark.parametrize("compressed", [True, False], ids=["whole chunks", "runs"])
def test_same_seed_same_batches_whatever_the_budget_and_threads(tmp_path, compressed):
    X, y, _ = _stores(tmp_path, 3000, 16, 128, 128, compressed)
    runs = []
    for budget, threads in [("64MB", 1), ("8MB", 4), ("1GB", 2)]:
        jask.set_memory_budget(budget, scratch_dir=str(tmp_path / "scratch"))
        loader = jask.batches(X, y, batch_size=64, seed=11, buffer=512, threads=threads,
                              epochs=2)
        runs.append(_rows(loader))
    jask.set_memory_budget("1GB", scratch_dir=str(tmp_path / "scratch"))
    assert runs[0] == runs[1] == runs[2]
    other = _rows(jask.batches(X, y, batch_size=64, seed=12, buffer=512, epochs=2))
    assert other != runs[0]


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in order"])
@pytest.mark.parametrize("stop_at", [0, 1, 7, 15, 16, 17, 40])
def test_resume_mid_epoch_equals_an_uninterrupted_run(tmp_path, stop_at, shuffle):
    X, y, _ = _stores(tmp_path, 1000, 4, 64, 64, False)
    make = lambda **kw: jask.batches(X, y, batch_size=60, seed=5, buffer=200, epochs=3,
                                     shuffle=shuffle, **kw)
    whole = _rows(make())  # 17 batches an epoch, 51 in all
    loader = make()
    seen: list = []
    for _, yb in (loader if stop_at else ()):
        seen.append(yb.tolist())  # a batch handed out is a batch done
        if len(seen) == stop_at:
            break
    saved = json.loads(json.dumps(loader.state))  # saved with the model, as JSON
    assert jax.tree_util.tree_leaves(saved)  # a pytree of ints
    assert seen + _rows(make(state=saved)) == whole
    assert seen + _rows(make().restore(saved)) == whole


def test_epochs_none_runs_one_epoch_per_loop_and_epochs_n_stops_after_n(tmp_path):
    X, y, _ = _stores(tmp_path, 100, 2, 10, 10, False)
    each = jask.batches(X, y, batch_size=30, seed=0)
    assert len(each) == 4 and [len(_rows(each)) for _ in range(3)] == [4, 4, 4]
    assert each.state["epoch"] == 2
    three = jask.batches(X, y, batch_size=30, seed=0, epochs=3, drop_last=True)
    assert len(_rows(three)) == 9 and _rows(three) == []


def test_a_restored_state_of_other_batches_is_refused(tmp_path):
    X, y, _ = _stores(tmp_path, 100, 2, 10, 10, False)
    state = jask.batches(X, y, batch_size=10, seed=1).state
    for other in [dict(batch_size=20, seed=1), dict(batch_size=10, seed=2),
                  dict(batch_size=10, seed=1, buffer=10), dict(batch_size=10, seed=1,
                                                               shard=(0, 2))]:
        with pytest.raises(ValueError, match="other batches"):
            jask.batches(X, y, **other, state=state)
    with pytest.raises(ValueError, match="not a jask.batches state"):
        jask.batches(X, y, batch_size=10, state=[1, 2])
    with pytest.raises(ValueError, match="past its epoch"):
        jask.batches(X, y, batch_size=10, seed=1, state=dict(state, batch=99))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shards_are_disjoint_and_cover_every_row(tmp_path, shuffle, drop_last):
    X, y, _ = _stores(tmp_path, 1001, 2, 50, 50, False)
    shares = [_rows(jask.batches(X, y, batch_size=32, seed=4, shard=(i, 3), shuffle=shuffle,
                                 drop_last=drop_last)) for i in range(3)]
    rows = [sorted(r for b in share for r in b) for share in shares]
    assert all(not set(rows[i]) & set(rows[j]) for i in range(3) for j in range(i + 1, 3))
    if drop_last:  # the same number of whole batches each, for data-parallel steps
        assert len({len(s) for s in shares}) == 1
        assert all(len(b) == 32 for s in shares for b in s)
    else:
        assert sorted(sum(rows, [])) == list(range(1001))


def test_shards_in_separate_processes_read_only_their_share(tmp_path):
    X, y, _ = _stores(tmp_path, 2000, 4, 100, 100, False)
    code = (
        "import json, sys, jask\n"
        "X, y = jask.open(sys.argv[1]), jask.open(sys.argv[2])\n"
        "loader = jask.batches(X, y, batch_size=64, seed=9, shard=(int(sys.argv[3]), 2))\n"
        "with jask.track() as t:\n"
        "    rows = [int(r) for _, yb in loader for r in yb]\n"
        "print(json.dumps({'rows': rows, 'passes': t.passes(X)}))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, X.filename, y.filename, str(i)],
                              stdout=subprocess.PIPE, cwd=str(tmp_path), text=True)
             for i in range(2)]
    out = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    a, b = (set(o["rows"]) for o in out)
    assert not a & b and a | b == set(range(2000))
    assert all(o["passes"] == 0.5 for o in out)  # each read only its own chunks


def test_arrays_in_memory_and_pending_results_beside_stores(tmp_path):
    X, _, x = _stores(tmp_path, 300, 3, 40, 40, True)
    labels = np.arange(300) % 7
    loader = jask.batches(X * 2.0, labels, jax.numpy.arange(300), batch_size=50, seed=2)
    for xb, lb, ib in loader:
        np.testing.assert_array_equal(xb, 2 * x[np.asarray(ib)])
        np.testing.assert_array_equal(lb, labels[np.asarray(ib)])


def test_device_places_batches_as_jax_arrays(tmp_path):
    X, y, _ = _stores(tmp_path, 100, 2, 10, 10, False)
    device = jax.devices()[0]
    xb, yb = next(iter(jask.batches(X, y, batch_size=10, device=device)))
    assert isinstance(xb, jax.Array) and xb.devices() == {device}
    xb, yb = next(iter(jask.batches(X, y, batch_size=10)))
    assert isinstance(xb, np.ndarray)


CPU = jax.devices("cpu")[0]


def _on_host(loader) -> list:
    return [tuple(np.asarray(v) for v in batch) for batch in loader]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_the_device_feed_gives_the_host_paths_batches(tmp_path, case, shuffle, device_feed):
    """Windows copied whole to the device and batches gathered there: the
    same values in the same order as numpy batches, every row once."""
    _, rows, cols, cx, cy, compressed, bs, buffer = case
    X, y, x = _stores(tmp_path, rows, cols, cx, cy, compressed)
    make = lambda **kw: jask.batches(X, y, batch_size=bs, shuffle=shuffle, seed=3,
                                     buffer=buffer, epochs=2, **kw)
    host, loader = _on_host(make()), make(device=CPU)
    assert loader.device_bytes > 0
    got = []
    for xb, yb in loader:
        assert isinstance(xb, jax.Array) and xb.devices() == {CPU} and yb.devices() == {CPU}
        got.append((np.asarray(xb), np.asarray(yb)))
    assert len(got) == len(host)
    for (hx, hy), (dx, dy) in zip(host, got):
        np.testing.assert_array_equal(dx, hx)
        np.testing.assert_array_equal(dy, hy)
    epoch = [r for _, yb in got[:len(got) // 2] for r in yb.tolist()]
    assert sorted(epoch) == list(range(rows))


@pytest.mark.parametrize("stop_at", [1, 7, 16, 17, 40])
def test_the_device_feed_resumes_mid_epoch(tmp_path, stop_at, monkeypatch, device_feed):
    monkeypatch.setattr(jask.api.batches, "TRANSFER_BYTES", 100)  # windows in 8-row pieces
    X, y, _ = _stores(tmp_path, 1000, 4, 64, 64, False)
    make = lambda **kw: jask.batches(X, y, batch_size=60, seed=5, buffer=200, epochs=3,
                                     device=CPU, **kw)
    whole = _rows(make())
    loader = make()
    seen: list = []
    for _, yb in loader:
        seen.append(yb.tolist())
        if len(seen) == stop_at:
            break
    assert not [t for t in threading.enumerate() if t.name.startswith("jask-batches")]
    saved = json.loads(json.dumps(loader.state))
    assert seen + _rows(make(state=saved)) == whole


def test_the_device_feed_hands_a_window_before_the_next_one_is_read(tmp_path, monkeypatch,
                                                                      device_feed):
    """A window's batches are handed over while the next window's reads are
    still running: its store-version check does not wait behind them (it did,
    on the reading pool)."""
    X, y, _ = _stores(tmp_path, 1000, 4, 64, 64, False)
    loader = jask.batches(X, y, batch_size=60, seed=5, buffer=200, threads=1, device=CPU)
    plan = loader.plan
    first = set((plan.windows(0)[0] * plan.unit).tolist())
    (_, yb), rest = _first_batch_while_reads_held(  # reads past the first window's
        loader, monkeypatch, lambda starts, stops, stamps: stamps and int(starts[0]) not in first)
    assert [yb.tolist()] + [b.tolist() for _, b in rest] == _rows(
        jask.batches(X, y, batch_size=60, seed=5, buffer=200))


def _first_batch_while_reads_held(loader, monkeypatch, held) -> tuple:
    """The loader's first batch, got while its reads for which ``held(starts,
    stops, stamps)`` is true wait (failing if it came only after them), and
    an iterator over the batches after it (the reads let go)."""
    gate, read = threading.Event(), jask.api.batches._read_runs

    def held_back(a, starts, stops, into, stamps, *args):
        if not gate.is_set() and held(starts, stops, stamps):
            gate.wait(10)
        return read(a, starts, stops, into, stamps, *args)

    monkeypatch.setattr(jask.api.batches, "_read_runs", held_back)
    t0 = time.perf_counter()
    it = iter(loader)
    first = next(it)
    assert time.perf_counter() - t0 < 5  # not after the held-back reads
    gate.set()
    return first, it


def test_the_device_feed_reads_shards_and_any_thread_count_alike(tmp_path, device_feed):
    X, y, _ = _stores(tmp_path, 1001, 2, 50, 50, True)
    shares = []
    for i in range(3):
        runs = [_rows(jask.batches(X, y, batch_size=32, seed=4, shard=(i, 3), device=CPU,
                                   threads=threads)) for threads in (1, 5)]
        assert runs[0] == runs[1] == _rows(jask.batches(X, y, batch_size=32, seed=4,
                                                        shard=(i, 3)))
        shares.append(sorted(r for b in runs[0] for r in b))
    assert sorted(sum(shares, [])) == list(range(1001))


@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_the_device_feed_reads_the_next_epochs_first_window_as_an_epoch_ends(
        tmp_path, monkeypatch, shuffle, device_feed):
    """The next epoch's first window is read while the epoch before's last
    batches are taken, and the next loop takes it from there (an epoch's first
    window was never hidden behind steps): each window's rows are read once,
    and the batches are the plan's."""
    from jask.store.tiles import rows_of_runs
    X, y, x = _stores(tmp_path, 1600, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=50, shuffle=shuffle, seed=2, buffer=200, device=CPU)
    plan = loader.plan
    assert len(plan.windows(1)) == 8  # the stager cannot reach the last window unawaited
    assert _rows(loader) == [b.tolist() for b in plan.batch_rows(0)]
    wait(loader._ahead.work)
    read: list = []
    real = jask.api.batches._read_runs

    def recorded(a, starts, stops, *args):
        if len(a.shape) == 2:  # X's reads (y's may be taken from it read whole)
            read.append(rows_of_runs(starts, stops))
        return real(a, starts, stops, *args)

    monkeypatch.setattr(jask.api.batches, "_read_runs", recorded)
    got = [(np.asarray(a), np.asarray(b)) for a, b in loader]
    wait(loader._ahead.work)  # epoch 2's first window
    assert [b.tolist() for _, b in got] == [b.tolist() for b in plan.batch_rows(1)]
    for xv, yv in got:
        np.testing.assert_array_equal(xv, x[yv])

    def rows(epoch, windows):
        return [r for w in windows for u in plan.windows(epoch)[w]
                for r in range(*plan.unit_rows(int(u)))]

    assert sorted(np.concatenate(read).tolist()) == sorted(rows(1, range(1, 8)) + rows(2, [0]))
    loader.close()


@pytest.mark.parametrize("readers, threads, expected", [
    ("threads", None, jask.api.batches.DEFAULT_THREADS),
    ("processes", None, jask.api.batches.CHILD_THREADS),  # (its threads share one GIL)
    ("processes", 8, 8),
    ("threads", 3, 3),
    ("processes compressed", None, jask.api.batches.DEFAULT_THREADS),  # (no child reads)
])
def test_reading_threads_by_default_and_as_asked(tmp_path, readers, threads, expected):
    compressed = readers.endswith(" compressed")
    readers = readers.split()[0]
    X, y, _ = _stores(tmp_path, 400, 4, 100, 100, compressed)
    with jask.batches(X, y, batch_size=50, readers=readers, threads=threads) as loader:
        assert loader.threads == expected
        assert sorted(sum(_rows(loader), [])) == list(range(400))


def test_the_reading_child_reads_the_next_epochs_first_window_ahead(tmp_path, device_feed):
    """As above, with the runs read by the loader's child process: the
    reads ahead are the child's, counted by ``jask.track`` in the epoch that
    made them, and the next epoch's values are the store's."""
    X, y, x = _stores(tmp_path, 1600, 4, 100, 100, False)
    with jask.batches(X, y, batch_size=50, shuffle=True, seed=2, buffer=200, device=CPU,
                      readers="processes") as loader:
        for epoch, passes in [(0, 1.125), (1, 1.0), (2, 1.0)]:
            with jask.track() as t:
                got = [(np.asarray(a), np.asarray(b)) for a, b in loader]
                wait(loader._ahead.work)
            assert t.passes(X) == passes
            assert [b.tolist() for _, b in got] == [
                b.tolist() for b in loader.plan.batch_rows(epoch)]
            for xv, yv in got:
                np.testing.assert_array_equal(xv, x[yv])


@pytest.mark.parametrize("readers, shuffle, rows, drop_last", [
    ("threads", False, 1600, False), ("threads", True, 1600, False),
    ("threads", False, 1400, True), ("threads", True, 1400, True),
    ("threads", True, 1600, True), ("threads", False, 1400, False),
    ("processes", True, 1600, False), ("processes", False, 1400, True),
], ids=["in order", "shuffled", "odd, drop_last, in order", "odd, drop_last, shuffled",
        "drop_last, shuffled", "odd, in order", "child, shuffled", "child, odd, drop_last"])
def test_the_window_read_ahead_is_used_on_every_epoch_after_pauses(
        tmp_path, monkeypatch, device_feed, readers, shuffle, rows, drop_last):
    """Each epoch's iteration begins with the window the one before read
    ahead, however long the pauses between them: a pause frees what the loader
    keeps only :data:`KEEP_IDLE_S` after the LAST iteration ended (the release
    timer of an iteration before freed the windows and the read ahead in the
    pause after the next: every other epoch's first batch waited for a whole
    window on a TPU). Here the timers fire when the test says."""
    timers: list = []
    real_timer = threading.Timer

    class Timer:  # fired by hand, even once cancelled (it may have fired already)
        def __init__(self, seconds, fn, args=(), kwargs=None):
            self.fire, self.daemon = lambda: fn(*args), True

        def start(self):
            timers.append(self)

        def cancel(self):
            pass

        def join(self):
            pass

    monkeypatch.setattr(threading, "Timer", lambda seconds, fn, *a: (
        Timer if fn is jask.api.batches._free_later else real_timer)(seconds, fn, *a))
    X, y, x = _stores(tmp_path, rows, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=48, shuffle=shuffle, seed=2, buffer=200, device=CPU,
                          drop_last=drop_last, readers=readers)
    plan = loader.plan
    assert len(plan.windows(0)) == rows // 200

    def rows_of(epoch, windows):
        return sum(plan.rows_in(plan.windows(epoch)[w]) for w in windows)

    assert _rows(loader) == [b.tolist() for b in plan.batch_rows(0)]
    wait(loader._ahead.work)  # (its reads counted before epoch 1's are)
    for epoch in range(1, 6):
        for timer in timers[:-1]:  # a second has passed since each iteration but the last
            timer.fire()
        assert loader._ahead is not None and loader._ahead.epoch == epoch
        with jask.track() as t:
            got = [(np.asarray(a), np.asarray(b)) for a, b in loader]
            wait(loader._ahead.work)
        assert [b.tolist() for _, b in got] == [b.tolist() for b in plan.batch_rows(epoch)]
        for xv, yv in got:
            np.testing.assert_array_equal(xv, x[yv])
        # its first window not read again: the rest of its own, and the next's first
        windows = range(1, len(plan.windows(epoch)))
        assert t.passes(X) == (rows_of(epoch, windows) + rows_of(epoch + 1, [0])) / rows
    timers[-1].fire()  # the last iteration's: what the loader keeps is freed
    assert loader._slots == [] and loader._ahead is None
    loader.close()


def test_a_window_read_ahead_is_dropped_for_a_changed_store_or_a_restored_state(
        tmp_path, device_feed):
    X, y, _ = _stores(tmp_path, 1600, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=50, seed=2, buffer=200, device=CPU)
    _rows(loader)  # epoch 0; epoch 1's first window read ahead
    X.update_(X * 0.0)  # (waits for the reads ahead)
    got = [(np.asarray(xb), yb.tolist()) for xb, yb in loader]
    assert all(np.all(xb == 0) for xb, _ in got)
    assert [b for _, b in got] == [b.tolist() for b in loader.plan.batch_rows(1)]
    loader.restore({**loader.state, "epoch": 0, "batch": 5})  # not epoch 2's first window
    assert _rows(loader) == [b.tolist() for b in loader.plan.batch_rows(0)][5:]
    loader.close()
    assert getattr(loader, "_ahead", None) is None


def test_the_device_feed_holds_on_the_device_at_most_what_it_states(tmp_path, device_feed):
    X, y, _ = _stores(tmp_path, 6000, 16, 100, 100, False)
    before = {id(a) for a in jax.live_arrays()}

    def held_now() -> int:  # (holding no array itself once it returns)
        return sum(a.nbytes for a in jax.live_arrays() if id(a) not in before)

    loader = jask.batches(X, y, batch_size=50, seed=0, buffer=400, device=CPU)
    most = 0
    for i, _batch in enumerate(loader):
        if i % 5 == 0:
            most = max(most, held_now())
    assert 0 < most <= loader.device_bytes
    assert loader.device_bytes < 6000 * (16 * 4 + 8) / 2  # a few windows, not the epoch
    # the CPU device's memory is the host's: it is in the loader's host share
    assert loader.held_bytes > jask.batches(X, y, batch_size=50, seed=0, buffer=400).held_bytes


@pytest.mark.parametrize("feed", ["host feed", "device feed"])
def test_the_host_memory_it_states_covers_its_window_orders(tmp_path, monkeypatch, feed):
    """What the loader allocates on the host (traced: numpy's arrays, in every
    thread) over two iterations stays within what it states: with rows of one
    byte, a window's order (4 or 8 bytes a row: each slot's, the device feed's
    read ahead's, and the one being drawn) outweighs the window itself."""
    import tracemalloc
    if feed == "device feed":
        monkeypatch.setattr(jask.api.batches, "HOST_CUT_PLATFORMS", ())
    rows = 2**18
    z = zarr.create_array(str(tmp_path / "b.zarr"), shape=(rows,), chunks=(2**16,), dtype="u1",
                          compressors=None)
    z[:] = np.arange(rows) % 251
    X = jask.open(str(tmp_path / "b.zarr"))
    make = lambda: jask.batches(X, batch_size=256, seed=0, buffer=2**17, threads=1,
                                device=CPU if feed == "device feed" else None)
    warm = make()  # its programs compiled, and what that imports, before the trace
    list(warm)
    warm.close()
    tracemalloc.start()
    try:
        loader = make()
        for _ in range(2):  # the second from the window the first read ahead
            for _batch in loader:
                pass
        jax.effects_barrier()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # (on the CPU device the device's part is in held_bytes too: what is traced is the host's)
    host = loader.held_bytes - loader.device_bytes
    assert (feed == "device feed") == (loader.device_bytes > 0)
    assert 2**17 * 4 < peak <= host, (peak, host)
    loader.close()


@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_the_cpu_device_gets_batches_cut_on_the_host(tmp_path, shuffle):
    """On JAX's CPU device (whose memory is the host's) batches are cut as
    numpy ones and put there: the same batches, nothing held on the device
    besides them, the host share that of numpy batches; each batch stays
    intact while later ones are cut (none shares a reused buffer)."""
    X, y, x = _stores(tmp_path, 1000, 4, 64, 64, False)
    make = lambda **kw: jask.batches(X, y, batch_size=60, shuffle=shuffle, seed=2, buffer=200,
                                     epochs=2, **kw)
    host, loader = make(), make(device=CPU)
    assert loader.device_bytes == 0 and loader.held_bytes == host.held_bytes
    got = list(loader)  # every batch kept until the end
    want = _on_host(host)
    assert len(got) == len(want)
    for (xb, yb), (hx, hy) in zip(got, want):
        assert isinstance(xb, jax.Array) and xb.devices() == {CPU} and yb.devices() == {CPU}
        np.testing.assert_array_equal(np.asarray(xb), hx)
        np.testing.assert_array_equal(np.asarray(yb), hy)
        np.testing.assert_array_equal(np.asarray(xb), x[np.asarray(yb).astype(int)])
    assert not [t for t in threading.enumerate() if t.name.startswith("jask-batches")]


def test_a_sharding_places_each_batch(tmp_path, device_feed):
    X, y, x = _stores(tmp_path, 300, 4, 40, 40, False)
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("rows",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("rows"))
    loader = jask.batches(X, y, batch_size=32, seed=1, device=sharding)
    assert loader.device_bytes > 0  # one device: windows go there whole
    for xb, yb in loader:
        assert xb.sharding == sharding or xb.devices() == sharding.device_set
        np.testing.assert_array_equal(np.asarray(xb), x[np.asarray(yb)])
    with pytest.raises(TypeError, match="device must be"):
        jask.batches(X, y, batch_size=32, device="tpu")


def test_a_step_trains_on_the_batches(tmp_path):
    """The loop users write: a jitted optax step per batch, numpy batches in."""
    import optax
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 4)).astype(np.float32)
    t = x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    X, T = jask.from_numpy(x), jask.from_numpy(t)
    opt = optax.adam(0.05)
    w = jax.numpy.zeros(4)
    s = opt.init(w)

    @jax.jit
    def step(w, s, xb, tb):
        g = jax.grad(lambda w: jax.numpy.mean((xb @ w - tb) ** 2))(w)
        u, s = opt.update(g, s)
        return optax.apply_updates(w, u), s

    for xb, tb in jask.batches(X, T, batch_size=100, seed=0, epochs=20):
        w, s = step(w, s, xb, tb)
    np.testing.assert_allclose(w, [1.0, -2.0, 0.5, 3.0], atol=1e-2)


def test_leaving_the_loop_stops_the_reading_threads(tmp_path):
    X, y, _ = _stores(tmp_path, 5000, 8, 64, 64, False)
    loader = jask.batches(X, y, batch_size=16, seed=0)
    for i, _ in enumerate(loader):
        if i == 3:
            break
    assert not [t for t in threading.enumerate() if t.name.startswith("jask-batches")]
    assert loader.state["batch"] == 4
    never = iter(loader)  # an iterator never advanced holds nothing
    del never
    it = iter(loader)
    next(it)
    with pytest.raises(RuntimeError, match="already being iterated"):
        next(iter(loader))
    it.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("jask-batches")]


def _reading_threads() -> set:
    return {t for t in threading.enumerate() if t.name.startswith("jask-loader-read")}


def test_a_loader_keeps_its_reading_threads_until_closed(tmp_path, monkeypatch):
    """The reading pool starts at the first batch asked for and serves every
    iteration after (starting it cost 0.17 s an iteration on a TPU host), and
    so are its host windows; ``close()`` (or the end of a ``with`` block) ends
    its threads and frees the windows, and a later
    iteration starts them again, giving the same batches."""
    # windows kept between iterations that follow each other (on a loaded
    # machine, more than the default second can pass between two here)
    from jask.api import batches as batches_module
    monkeypatch.setattr(batches_module, "KEEP_IDLE_S", 60.0)
    X, y, _ = _stores(tmp_path, 2000, 8, 64, 64, False)
    before = _reading_threads()
    with jask.batches(X, y, batch_size=50, seed=3) as loader:
        assert _reading_threads() == before  # nothing started yet
        first = _rows(loader)
        mine = _reading_threads() - before
        assert 0 < len(mine) <= loader.threads
        windows, pool = [b.ctypes.data for s in loader._slots for b in s._whole], loader._pool
        second = _rows(loader)
        # the same pool, its threads idle between (a pool starts threads as
        # tasks find none idle: the second iteration may add some, up to its size)
        now = _reading_threads() - before
        assert loader._pool is pool and mine <= now and len(now) <= loader.threads
        # and the same host windows (fresh memory is slow to touch on a TPU host)
        assert [b.ctypes.data for s in loader._slots for b in s._whole] == windows
        it = iter(loader)
        next(it)
        with pytest.raises(RuntimeError, match="being iterated"):
            loader.close()
        it.close()
    assert not {t for t in now if t.is_alive()}
    assert loader._slots == []  # its windows freed
    third = _rows(loader)  # closed, then iterated again: a new pool (from batch 1 on)
    loader.close()
    assert _reading_threads() == before
    fresh = jask.batches(X, y, batch_size=50, seed=3)
    want = [_rows(fresh) for _ in range(3)]
    assert [first, second, third] == [want[0], want[1], want[2][1:]]
    fresh.close()


def test_the_loaders_buffers_are_kept_out_of_the_ops_budget(tmp_path):
    X, y, _ = _stores(tmp_path, 5000, 8, 64, 64, False)
    jask.set_memory_budget("64MB", scratch_dir=str(tmp_path / "scratch"))
    full = jask.get_config().max_memory
    loader = jask.batches(X, y, batch_size=16, seed=0)
    it = iter(loader)
    next(it)
    assert jask.get_config().max_memory == full - loader.held_bytes
    assert jask.sum(X).shape == ()  # ops still run meanwhile, in what is left
    it.close()
    # the host windows are kept between iterations, and held out of the budget until
    # close(): an op run between two epochs gets the rest
    kept = full - jask.get_config().max_memory
    assert 0 < kept <= loader.held_bytes
    assert jask.sum(X).shape == ()
    for _ in loader:  # a second epoch holds no more than the first
        assert jask.get_config().max_memory == full - loader.held_bytes
    assert jask.get_config().max_memory == full - kept
    loader.close()
    assert jask.get_config().max_memory == full
    again = jask.batches(X, y, batch_size=16, seed=0)
    next(iter(again))
    del again  # and the loader's collection gives it back
    gc.collect()
    assert jask.get_config().max_memory == full
    jask.set_memory_budget("1GB", scratch_dir=str(tmp_path / "scratch"))


def test_a_loader_left_open_gives_its_windows_back(tmp_path, monkeypatch):
    """Kept windows are a cache: a loader left open (never closed, still
    referenced) gives them back a moment after its iteration ends, and at once
    to a loader being planned, whose default buffer (and so its order) is then
    what it would be alone (a notebook's loader made again must take the
    state saved from the first)."""
    from jask.api import batches as batches_module

    X, y, _ = _stores(tmp_path, 5000, 8, 64, 64, False)
    jask.set_memory_budget("2MB", scratch_dir=str(tmp_path / "scratch"))
    full = jask.get_config().max_memory
    first = jask.batches(X, y, batch_size=16, seed=0)
    alone = first.state
    for _ in first:
        pass
    assert jask.get_config().max_memory < full  # kept for the next epoch
    second = jask.batches(X, y, batch_size=16, seed=0)
    assert jask.get_config().max_memory == full  # taken back from the idle loader
    assert second.state == alone
    for _ in second:
        pass
    monkeypatch.setattr(batches_module, "KEEP_IDLE_S", 0.05)
    for _ in second:  # an epoch ends; nothing else asks: given back after a moment
        pass
    deadline = time.monotonic() + 5
    while jask.get_config().max_memory != full and time.monotonic() < deadline:
        time.sleep(0.02)
    assert jask.get_config().max_memory == full
    first.close()
    second.close()
    jask.set_memory_budget("1GB", scratch_dir=str(tmp_path / "scratch"))


def test_buffers_over_half_the_budget_are_refused_before_any_read(tmp_path):
    X, y, _ = _stores(tmp_path, 20000, 64, 4096, 4096, False)  # 1 MiB chunks of X
    jask.set_memory_budget("4MB", scratch_dir=str(tmp_path / "scratch"))
    try:
        with jask.track() as t, pytest.raises(jask.BudgetError, match="buffer="):
            jask.batches(X, y, batch_size=64, buffer=4096)  # two windows of 1 MiB chunks
        assert t.bytes_read == 0
        small = jask.batches(X, y, batch_size=64, buffer=1024)  # pieces of a chunk
        assert sorted(sum(_rows(small), [])) == list(range(20000))
        small.close()  # (its windows, kept until then, out of the budget)
        assert small.held_bytes <= jask.get_config().max_memory // 2
    finally:
        jask.set_memory_budget("1GB", scratch_dir=str(tmp_path / "scratch"))


def test_a_store_replaced_during_an_epoch_is_named_not_mixed(tmp_path):
    X, y, _ = _stores(tmp_path, 4000, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=10, seed=0, buffer=100, prefetch=1)
    it = iter(loader)
    next(it)
    X.update_(X * 0.0)  # this process's writer: waits for reads, never deadlocks
    with pytest.raises(jask.StoreChangedError):
        for _ in it:
            pass
    # the next epoch reads the new version
    assert all(np.all(xb == 0) for xb, _ in jask.batches(X, y, batch_size=500))


_REWRITE = ("import sys, numpy as np, zarr; a = zarr.open_array(sys.argv[1]); "
            "a[...] = -np.asarray(a[...]) - 1")


def _rewrite_by_zarr(path: str, by: str) -> None:
    """Another writer rewrites the Zarr array at ``path`` chunk by chunk (each
    chunk renamed over the old one, as zarr-python writes), its values made
    ``-x - 1``: from a thread of this process, or another process."""
    if by == "thread":
        def rewrite() -> None:
            a = zarr.open_array(path)
            a[...] = -np.asarray(a[...]) - 1
        writer = threading.Thread(target=rewrite)
        writer.start()
        writer.join()
    else:
        subprocess.run([sys.executable, "-c", _REWRITE, path], check=True, timeout=120)


class _Versions:
    """Rows of X's version written by ``_stores`` (``x[:, 0] == 4 * label``) and
    of the one ``_rewrite_by_zarr`` writes (``-4 * label - 1``) seen in batches."""

    def __init__(self):
        self.old = self.new = 0

    def count(self, xb, yb) -> None:
        xb, yb = np.asarray(xb), np.asarray(yb)
        self.old += int(np.sum(xb[:, 0] == yb * 4))
        self.new += int(np.sum(xb[:, 0] == -yb * 4 - 1))


@pytest.mark.parametrize("feed", ["host", "device"])
@pytest.mark.parametrize("by", ["thread", "process"])
@pytest.mark.parametrize("readers", ["threads", "processes"])
def test_a_store_rewritten_by_zarr_during_an_epoch_is_named_not_mixed(tmp_path, readers, by,
                                                                      feed, monkeypatch):
    if feed == "device":
        monkeypatch.setattr(jask.api.batches, "HOST_CUT_PLATFORMS", ())
    X, y, _ = _stores(tmp_path, 4000, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=10, seed=0, buffer=200, prefetch=1, threads=2,
                          readers=readers)
    it = iter(loader)
    seen = _Versions()
    seen.count(*next(it))
    _rewrite_by_zarr(X.filename, by)  # no folder swapped: chunk files renamed over
    with pytest.raises(jask.StoreChangedError, match="chunk file"):
        for xb, yb in it:
            seen.count(xb, yb)
    assert seen.new == 0  # (main's readers handed out the new rows after the old ones)
    # the epoch goes on from the batch the error stopped at, the next one whole: the new version
    for _ in range(2):
        rows = [(np.asarray(xb), np.asarray(yb)) for xb, yb in loader]
        assert rows and all(np.all(xb[:, 0] == -yb * 4 - 1) for xb, yb in rows)
    assert sorted(sum((yb.tolist() for _, yb in rows), [])) == list(range(4000))
    loader.close()


#: compressed layouts: (zarr_format, chunks, shards) of X (4 columns), and the readers
COMPRESSED = {"v3": (3, (100, 4), None, "threads"), "v2": (2, (100, 4), None, "threads"),
              "v3 column chunks": (3, (100, 2), None, "threads"),
              "v3 sharded": (3, (50, 4), (100, 4), "threads"),
              "v3 reading process": (3, (100, 4), None, "processes")}  # (read by threads)


@pytest.mark.parametrize("layout", list(COMPRESSED))
@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in order"])
def test_a_compressed_store_rewritten_by_zarr_during_an_epoch_is_named_not_mixed(
        tmp_path, shuffle, layout):
    """Compressed chunks are decoded whole (no file held open): each chunk
    file read is still recorded as it was, and checked with its window."""
    rows = 4000
    zarr_format, chunks, shards, readers = COMPRESSED[layout]
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    X = zarr.create_array(str(tmp_path / "X.zarr"), shape=x.shape, chunks=chunks, shards=shards,
                          dtype="f4", zarr_format=zarr_format)  # Zarr's default compressor
    X[:] = x
    Y = zarr.create_array(str(tmp_path / "y.zarr"), shape=(rows,), chunks=(100,), dtype="i8",
                          zarr_format=zarr_format)
    Y[:] = np.arange(rows)
    X, y = jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr"))
    assert not jask.store.tiles.reads_runs(X._store())  # (the case under test)
    loader = jask.batches(X, y, batch_size=10, seed=0, buffer=200, prefetch=1, threads=2,
                          shuffle=shuffle, readers=readers)
    it = iter(loader)
    seen = _Versions()
    seen.count(*next(it))
    time.sleep(0.05)  # (past the file system's clock tick since the epoch began)
    _rewrite_by_zarr(X.filename, "process")
    raised = None
    try:
        for xb, yb in it:
            seen.count(xb, yb)
    except jask.StoreChangedError as err:
        raised = str(err)
    assert seen.new == 0 and seen.old > 0  # (main handed out the new rows after the old ones)
    # v3's chunk files are under c/: the store's folder unchanged, each file seen changed;
    # v2's are in the folder, whose change time names the store replaced
    assert raised is not None and ("chunk file" if zarr_format == 3 else "replaced") in raised
    # the epoch goes on from the batch the error stopped at, the next one whole: the new version
    for _ in range(2):
        got = [(np.asarray(xb), np.asarray(yb)) for xb, yb in loader]
        assert got and all(np.all(xb[:, 0] == -yb * 4 - 1) for xb, yb in got)
    assert sorted(sum((yb.tolist() for _, yb in got), [])) == list(range(rows))
    loader.close()


@pytest.mark.parametrize("compressed", [False, True])
def test_a_chunk_written_in_place_during_an_epoch_is_named_not_mixed(tmp_path, compressed):
    """(A compressed one, its first bytes overwritten, is named changed, not damaged.)"""
    X, y, _ = _stores(tmp_path, 4000, 4, 100, 100, compressed)
    loader = jask.batches(X, y, batch_size=10, seed=0, buffer=200, prefetch=1, threads=2,
                          shuffle=False)
    it = iter(loader)
    next(it)
    time.sleep(0.05)  # (past the file system's clock tick since the epoch began)
    last = os.path.join(X.filename, "c", "39", "0")  # not read yet: its inode kept, its size
    with open(last, "r+b") as f:
        f.write(np.float32(-1).tobytes())
    with pytest.raises(jask.StoreChangedError, match="c/39/0"):
        for _ in it:
            pass
    loader.close()


def test_a_damaged_chunk_is_named_at_the_batch_that_needs_it(tmp_path):
    X, y, _ = _stores(tmp_path, 400, 4, 100, 100, True)
    with open(os.path.join(X.filename, "c", "2", "0"), "wb") as f:
        f.write(b"not zstd")
    with pytest.raises(jask.DamagedStoreError, match="c/2/0"):
        _rows(jask.batches(X, y, batch_size=50, shuffle=False))


@pytest.mark.parametrize("args, kwargs, error, match", [
    ((), {"batch_size": 4}, ValueError, "at least one array"),
    (("X", "short"), {"batch_size": 4}, ValueError, "first axes differ"),
    (("X",), {"batch_size": 0}, ValueError, "batch_size"),
    (("X",), {"batch_size": 2.5}, ValueError, "batch_size"),
    (("X",), {"batch_size": 4, "shard": (2, 2)}, ValueError, "shard"),
    (("X",), {"batch_size": 4, "buffer": 0}, ValueError, "buffer"),
    (("X",), {"batch_size": 4, "epochs": 0}, ValueError, "epochs"),
    (("X",), {"batch_size": 4, "threads": 0}, ValueError, "threads"),
    (("X", "scalar"), {"batch_size": 4}, ValueError, "0-d"),
    (("X", "list"), {"batch_size": 4}, TypeError, "not an array"),
])
def test_bad_arguments_are_named(tmp_path, args, kwargs, error, match):
    X, _, _ = _stores(tmp_path, 20, 2, 5, 5, False)
    values = {"X": X, "short": np.zeros(19), "scalar": np.float32(1), "list": [1, 2]}
    with pytest.raises(error, match=match):
        jask.batches(*(values[a] for a in args), **kwargs)


def test_the_plan_moves_rows_at_most_a_window_and_mixes_chunks():
    plan = BatchPlan(rows=10_000, unit=100, window=4, batch_size=50, shuffle=True, seed=0,
                     drop_last=False, shard=(0, 1))
    batches = list(plan.batch_rows(0))
    windows = [set(w.tolist()) for w in plan.windows(0)]
    for b in batches:  # a batch's rows come from one window's chunks (two, across a boundary)
        chunks = set((b // 100).tolist())
        assert sum(1 for w in windows if chunks & w) <= 2
        assert any(chunks <= w for w in windows) or len(chunks) <= 8
    firsts = [int(b[0]) // 100 for b in batches[:20]]
    assert len(set(firsts)) > 4  # the chunks' order is shuffled, not sequential


def test_stores_in_object_storage_are_read_by_shard_one_request_per_chunk(s3_bucket):
    from s3server import zarr_store
    x = np.arange(1200 * 6, dtype=np.float32).reshape(1200, 6)
    for name, values, chunks in [("X", x, (100, 6)), ("y", np.arange(1200), (100,))]:
        z = zarr.create_array(store=zarr_store(f"{s3_bucket}/{name}.zarr"), shape=values.shape,
                              dtype=values.dtype, chunks=chunks)
        z[:] = values
    X, y = jask.open(f"{s3_bucket}/X.zarr"), jask.open(f"{s3_bucket}/y.zarr")
    seen = []
    for i in range(2):
        with jask.track() as t:
            rows = _rows(jask.batches(X, y, batch_size=64, seed=1, shard=(i, 2)))
        seen.append(sorted(sum(rows, [])))
        assert t.passes(X) == 0.5
        assert t.total.requests <= 2 * 6 + 4  # a GET per chunk of X and y (+ metadata)
    assert not set(seen[0]) & set(seen[1]) and sorted(seen[0] + seen[1]) == list(range(1200))


def test_ctrl_c_in_the_loop_stops_the_loader(tmp_path):
    import signal
    X, y, _ = _stores(tmp_path, 5000, 8, 64, 64, False)
    loader = jask.batches(X, y, batch_size=16, seed=0)
    with pytest.raises(KeyboardInterrupt):
        for i, _ in enumerate(loader):
            if i == 5:
                signal.raise_signal(signal.SIGINT)
    assert not [t for t in threading.enumerate() if t.name.startswith("jask-batches")]
    assert loader.state["batch"] == 6
    assert len(_rows(loader)) == len(loader) - 6  # and goes on where it stopped


def test_the_default_buffer_halves_to_fit_a_small_budget(tmp_path):
    X, y, _ = _stores(tmp_path, 20000, 64, 512, 512, False)
    jask.set_memory_budget("4MB", scratch_dir=str(tmp_path / "scratch"))
    try:
        loader = jask.batches(X, y, batch_size=64)  # 64 batches (1 MiB a window) do not fit
        assert loader.plan.unit * loader.plan.window < 64 * 64
        assert loader.held_bytes <= jask.get_config().max_memory // 2
        assert sorted(sum(_rows(loader), [])) == list(range(20000))
    finally:
        jask.set_memory_budget("1GB", scratch_dir=str(tmp_path / "scratch"))


def test_the_default_buffer_grows_so_that_shuffled_runs_are_large_reads(tmp_path):
    rows, B = 40_000, 64
    x = np.arange(rows * 64, dtype=np.float32).reshape(rows, 64)  # rows of 256 bytes
    for name, kw in [("raw", {"compressors": None}), ("zstd", {})]:
        z = zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=x.shape, chunks=(8192, 64),
                              dtype="f4", **kw)
        z[:] = x
    X = jask.open(str(tmp_path / "raw.zarr"))
    loader = jask.batches(X, batch_size=B, seed=3)
    # runs of 128 KiB (not 2 * 64 batches / B = 128 rows of 32 KiB), as many a window
    assert loader.plan.unit * 256 >= RUN_BYTES
    assert loader.plan.window >= B / RUNS_PER_BATCH
    assert loader.plan.unit * loader.plan.window * 256 <= RUN_WINDOW_BYTES
    seen = np.concatenate([xb[:, 0] for (xb,) in loader]) // 64
    assert sorted(seen.tolist()) == list(range(rows))
    # in order, compressed chunks, or a buffer given: as before
    assert jask.batches(X, batch_size=B, shuffle=False).plan.unit == 64 * B
    assert jask.batches(X, batch_size=B, buffer=64 * B).plan.unit == 2 * 64
    assert jask.batches(jask.open(str(tmp_path / "zstd.zarr")), batch_size=B).plan.unit == 64 * B
    assert jask.batches(x, batch_size=B).plan.unit <= 2 * 64  # in memory: nothing to read


def _sorted_labels(tmp_path, rows, chunk, compressed, sharded=False):
    """A store of labels sorted ascending (the worst case for a local shuffle)
    beside a feature store, as users make them."""
    y = np.sort(np.random.default_rng(0).random(rows)).astype(np.float32)
    kw = {} if compressed else {"compressors": None}
    Y = zarr.create_array(str(tmp_path / "y.zarr"), shape=(rows,), chunks=(chunk,), dtype="f4",
                          **kw, **({"shards": (chunk * 4,)} if sharded else {}))
    Y[:] = y
    X = zarr.create_array(str(tmp_path / "X.zarr"), shape=(rows, 4), chunks=(chunk, 4),
                          dtype="f4", **kw, **({"shards": (chunk * 4, 4)} if sharded else {}))
    X[:] = np.repeat(y[:, None], 4, axis=1)
    return jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr")), y


def _deviation(means: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((means - y.mean()) ** 2)))


def test_on_a_label_sorted_store_batch_means_deviate_within_2x_a_full_shuffle(tmp_path):
    rows, B = 2**17, 64
    X, Y, y = _sorted_labels(tmp_path, rows, 4096, compressed=False)
    loader = jask.batches(X, Y, batch_size=B, seed=5, drop_last=True)
    assert loader.plan.window >= B / RUNS_PER_BATCH  # runs of a window, from anywhere
    got = []
    for epoch in range(2):
        means = []
        for xb, yb in loader:
            np.testing.assert_array_equal(xb[:, 0], yb)
            means.append(yb.mean())
        got.append(_deviation(np.array(means), y))
    full = [_deviation(y[np.random.default_rng(s).permutation(rows)][:rows // B * B]
                       .reshape(-1, B).mean(axis=1), y) for s in range(4)]
    assert max(got) <= 2 * np.mean(full), (got, full)
    # the runs come from all over the store, not from a few neighbouring chunks
    first_window = loader.plan.windows(0)[0] * loader.plan.unit // 4096
    assert len(set(first_window.tolist())) > 16


@pytest.mark.parametrize("compressed,sharded", [(True, False), (False, True)],
                         ids=["compressed", "sharded"])
def test_chunks_that_must_be_decoded_whole_are_shuffled_whole(tmp_path, compressed, sharded):
    X, Y, y = _sorted_labels(tmp_path, 20_000, 1000, compressed, sharded)
    loader = jask.batches(X, Y, batch_size=50, seed=2)
    assert loader.plan.unit == 1000  # a run would cost its whole chunk's read and decode
    assert sorted(v for _, yb in loader for v in yb.tolist()) == sorted(y.tolist())


def test_runs_across_several_arrays_chunked_otherwise_and_in_memory(tmp_path):
    rows = 5000
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    X = zarr.create_array(str(tmp_path / "X.zarr"), shape=x.shape, chunks=(500, 3), dtype="f4",
                          compressors=None)
    X[:] = x
    Z = zarr.create_array(str(tmp_path / "Z.zarr"), shape=(rows, 2), chunks=(333, 1),
                          dtype="i8", compressors=None)  # chunks narrower than the array
    Z[:] = np.arange(rows * 2).reshape(rows, 2)
    y = np.arange(rows)  # (Z, of the most bytes a row, sets the runs: its chunks of 333 rows)
    Xj, Zj = jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "Z.zarr"))
    loader = jask.batches(Xj, Zj, y, batch_size=40, seed=9, buffer=400, threads=3)
    assert loader.plan.unit == 9  # 400 rows mixed: at least 20 runs for batches of 40
    seen = []
    for xb, zb, yb in loader:
        np.testing.assert_array_equal(xb, x[yb])
        np.testing.assert_array_equal(zb, np.arange(rows * 2).reshape(rows, 2)[yb])
        seen.extend(yb.tolist())
    assert sorted(seen) == list(range(rows))


#: (name, shape, chunks, compressed, sharded, runs as (start, stop))
RUN_CASES = [
    ("raw, within chunks", (1000, 6), (100, 6), False, False, [(0, 5), (7, 9), (150, 200)]),
    ("raw, across chunks", (1000, 6), (100, 6), False, False, [(95, 230), (230, 231),
                                                                 (999, 1000)]),
    ("raw, narrow chunks", (500, 6), (64, 4), False, False, [(3, 70), (100, 101), (400, 500)]),
    ("compressed", (1000, 3), (128, 3), True, False, [(1, 2), (10, 20), (127, 129),
                                                      (600, 1000)]),
    ("sharded", (1000,), (50,), False, True, [(0, 1), (49, 51), (300, 310), (320, 330)]),
]


@pytest.mark.parametrize("case", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_read_runs_reads_the_rows_of_each_run(tmp_path, case):
    from jask.store import registry
    from jask.store.tiles import read_runs
    _, shape, chunks, compressed, sharded, runs = case
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    kw = {} if compressed else {"compressors": None}
    if sharded:
        kw["shards"] = (chunks[0] * 4,) + chunks[1:]
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=shape, chunks=chunks, dtype="f4", **kw)
    z[:] = values
    a = jask.open(str(tmp_path / "a.zarr"))
    starts, stops = (np.array(v) for v in zip(*runs))
    out = np.empty((int(np.sum(stops - starts)),) + shape[1:], np.float32)
    read_runs(registry.spec(a._handle), starts, stops, out)
    np.testing.assert_array_equal(out, np.concatenate([values[lo:hi] for lo, hi in runs]))
    with pytest.raises(ValueError, match="read_runs into an array of shape"):
        read_runs(registry.spec(a._handle), starts, stops, out[1:])


@pytest.mark.parametrize("device", [None, "cpu"], ids=["numpy", "cpu device"])
def test_narrow_arrays_beside_runs_are_read_whole_once_an_epoch(tmp_path, device, device_feed):
    X, y, x = _stores(tmp_path, 6000, 16, 600, 250, False)
    loader = jask.batches(X, y, batch_size=50, seed=4, buffer=3000,
                          device=None if device is None else jax.devices("cpu")[0])
    assert loader._resident == (False, True)  # y's 48 kB, under a window's 240 kB
    assert loader.held_bytes >= 6000 * 8
    for epoch in range(2):
        with jask.track() as t:
            got = [(np.asarray(xb), np.asarray(yb)) for xb, yb in loader]
            if loader._ahead is not None:  # the device feed reads the next epoch's first
                wait(loader._ahead.work)   # window (half of X) as an epoch ends
        ahead = 0.5 if device is not None and epoch == 0 else 0.0
        assert t.passes(y) == 1.0 and t.passes(X) == 1.0 + ahead
        assert [yb.tolist() for _, yb in got] == [b.tolist() for b in loader.plan.batch_rows(epoch)]
        for xb, yb in got:
            np.testing.assert_array_equal(xb, x[yb])


def test_a_resident_array_is_read_whole_on_every_reading_thread(tmp_path, monkeypatch):
    """A narrow array read whole at an epoch's start is read in a task per
    reading thread, not by one (one thread read 256 cold chunk files of labels
    while the first window waited: 0.12 of a 0.93 s epoch), and its takes wait
    for it: the batches stay those planned."""
    X, y, x = _stores(tmp_path, 6000, 16, 600, 250, False)
    calls: list = []
    read = jask.api.batches._read_runs

    def recorded(a, starts, stops, *args):
        calls.append((a, len(starts)))
        return read(a, starts, stops, *args)

    monkeypatch.setattr(jask.api.batches, "_read_runs", recorded)
    loader = jask.batches(X, y, batch_size=50, seed=4, buffer=3000, threads=4)
    assert loader._resident == (False, True)
    got = [(xb, yb) for xb, yb in loader]
    whole_reads = [n for a, n in calls if a is y]
    assert len(whole_reads) == 4 and sum(whole_reads) == 4  # 24 chunks: 4 tasks of 6
    assert [yb.tolist() for _, yb in got] == [b.tolist() for b in loader.plan.batch_rows(0)]
    for xb, yb in got:
        np.testing.assert_array_equal(xb, x[yb])


def _rows_in_chunks_of_100(tmp_path) -> tuple:
    """1,000 x 3 float32 values, and the spec of a Zarr store of them in
    uncompressed chunks of 100 rows (read by ``read_runs``)."""
    from jask.store import registry
    values = np.arange(3000, dtype=np.float32).reshape(1000, 3)
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(1000, 3), chunks=(100, 3),
                          dtype="f4", compressors=None)
    z[:] = values
    return values, registry.spec(jask.open(str(tmp_path / "a.zarr"))._handle)


def test_open_files_keep_each_chunk_file_open_across_calls(tmp_path, monkeypatch):
    from jask.store.tiles import OpenFiles, read_runs
    values, spec = _rows_in_chunks_of_100(tmp_path)
    opened: list = []
    real_open = os.open
    chunks = os.path.join(str(tmp_path / "a.zarr"), "c")
    monkeypatch.setattr(os, "open", lambda path, *a, **k: (
        str(path).startswith(chunks) and opened.append(path), real_open(path, *a, **k))[1])
    starts, stops = np.array([5, 210, 230, 590]), np.array([9, 220, 231, 600])
    expected = np.concatenate([values[lo:hi] for lo, hi in zip(starts, stops)])

    def read(files):
        out = np.empty((int(np.sum(stops - starts)), 3), np.float32)
        read_runs(spec, starts, stops, out, files)
        np.testing.assert_array_equal(out, expected)

    files = OpenFiles()
    read(files)
    read(files)
    assert len(opened) == len(set(opened)) == 3  # chunks 0, 2 and 5, once each
    held = [files.get(p) for p in opened]
    files.close()
    for fd in held:
        with pytest.raises(OSError):
            os.fstat(fd)
    opened.clear()
    few = OpenFiles(most=1)  # past it, a call opens and closes its own
    read(few)
    read(few)
    assert len(opened) == 1 + 2 * 2
    few.close()


def test_a_calls_runs_are_all_asked_for_before_the_first_is_read_even_with_no_file_open(
        tmp_path, monkeypatch):
    # a loader's first window opens its files in the call: its runs were asked for only
    # once held open, so a cold disk had one run per reading thread in flight
    from jask.store import chunkio
    from jask.store.tiles import OpenFiles, read_runs
    if not (chunkio._asks_cached and hasattr(os, "posix_fadvise")):
        pytest.skip("this system cannot say what is cached: runs are not asked for")
    values, spec = _rows_in_chunks_of_100(tmp_path)
    calls: list = []
    real_fadvise, real_preadv = os.posix_fadvise, os.preadv
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, offset, n, advice: (
        calls.append(("advise", offset, n)), real_fadvise(fd, offset, n, advice))[1])
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset, *flags: (
        calls.append(("read",) + flags), real_preadv(fd, buffers, offset, *flags))[1])
    starts, stops = np.array([5, 210, 230, 590]), np.array([9, 220, 231, 600])
    out = np.empty((int(np.sum(stops - starts)), 3), np.float32)
    files = OpenFiles()
    read_runs(spec, starts, stops, out, files)
    files.close()
    np.testing.assert_array_equal(
        out, np.concatenate([values[lo:hi] for lo, hi in zip(starts, stops)]))
    advised = [c[1:] for c in calls if c[0] == "advise"]
    # every span (chunk 2's two runs are two spans), each in its own file
    assert sorted(advised) == sorted([(5 * 12, 4 * 12), (10 * 12, 10 * 12), (30 * 12, 12),
                                      (90 * 12, 10 * 12)])
    first_read = next(i for i, c in enumerate(calls) if c[0] == "read")
    assert all(c[0] == "advise" for c in calls[:first_read]) and first_read == len(advised)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_a_loader_leaves_no_chunk_file_open(tmp_path):
    X, y, _ = _stores(tmp_path, 6000, 16, 600, 250, False)
    before = len(os.listdir("/proc/self/fd"))
    for epochs in (2, None):
        loader = jask.batches(X, y, batch_size=50, seed=4, buffer=3000, epochs=epochs)
        assert sum(map(len, _rows(loader))) == 6000 * (epochs or 1)
    for _, _ in zip(range(3), jask.batches(X, y, batch_size=50, seed=4, buffer=3000)):
        pass  # left midway
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("dtype", ["f2", "bool", "i1", "i8", "u2"])
def test_read_runs_reads_every_dtype_and_empty_rows(tmp_path, dtype):
    from jask.store import registry
    from jask.store.tiles import read_runs
    values = (np.arange(600) % 7).astype(dtype).reshape(200, 3)
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(200, 3), chunks=(50, 3), dtype=dtype,
                          compressors=None)
    z[:] = values
    spec = registry.spec(jask.open(str(tmp_path / "a.zarr"))._handle)
    starts, stops = np.array([1, 49, 120]), np.array([3, 60, 121])
    out = np.empty((14, 3), dtype)
    read_runs(spec, starts, stops, out)
    np.testing.assert_array_equal(out, np.concatenate([values[lo:hi]
                                                       for lo, hi in zip(starts, stops)]))
    empty = np.empty((0, 3), dtype)
    assert read_runs(spec, np.array([], np.int64), np.array([], np.int64), empty) is empty


@pytest.mark.parametrize("runs", [[(60, 90)], [(51, 52), (53, 54), (55, 56), (60, 90)]],
                         ids=["one run", "runs enough to map"])
def test_read_runs_names_a_chunk_file_cut_short_even_when_held_open(tmp_path, runs):
    from jask.store import registry
    from jask.store.tiles import OpenFiles, read_runs
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(200, 3), chunks=(50, 3), dtype="f4",
                          compressors=None)
    z[:] = np.ones((200, 3), np.float32)
    spec = registry.spec(jask.open(str(tmp_path / "a.zarr"))._handle)
    chunk = os.path.join(str(tmp_path / "a.zarr"), "c", "1", "0")
    starts, stops = (np.array(v) for v in zip(*runs))
    out = np.zeros((int(np.sum(stops - starts)), 3), np.float32)
    files = OpenFiles()
    read_runs(spec, starts, stops, out, files)  # the file is held open from here on
    os.truncate(chunk, 100)
    for held in (files, None):  # read through the held descriptor, then opened afresh
        with pytest.raises(jask.DamagedStoreError, match="c/1/0"):
            read_runs(spec, starts, stops, out, held)
    files.close()


#: (name, runs of one chunk file as (start, stop), what the system says of its bytes:
#: "cached", "cold" (RWF_NOWAIT refused with EAGAIN), "unknown" (no RWF_NOWAIT), and
#: whether the runs are copied from a mapping of the file)
MAPPED_CASES = [
    ("many runs, cached", [(0, 3), (10, 12), (40, 41), (90, 100)], "cached", True),
    ("adjacent runs, cached", [(5, 9), (9, 20), (20, 21), (60, 64), (64, 70)], "cached", True),
    ("many runs, cold", [(0, 3), (10, 12), (40, 41), (90, 100)], "cold", False),
    ("adjacent runs, cold", [(5, 9), (9, 20), (20, 21), (60, 64), (64, 70)], "cold", False),
    ("many runs, cannot ask", [(1, 2), (3, 4), (50, 99), (99, 100)], "unknown", True),
    ("few runs", [(0, 3), (10, 12), (40, 41)], "cached", False),
    ("runs of two chunks", [(0, 3), (10, 12), (40, 41), (95, 100), (100, 104), (110, 111),
                            (150, 160), (199, 200)], "cached", True),
]


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="asks the cache with RWF_NOWAIT")
@pytest.mark.parametrize("case", MAPPED_CASES, ids=[c[0] for c in MAPPED_CASES])
@pytest.mark.parametrize("held", [False, True], ids=["opened per call", "held open"])
def test_read_runs_copies_a_chunks_many_runs_from_a_mapping_when_cached(tmp_path, monkeypatch,
                                                                       case, held):
    from jask.store import chunkio, registry
    from jask.store.tiles import OpenFiles, read_runs
    _, runs, cache, mapped = case
    values = np.arange(200 * 5, dtype=np.float32).reshape(200, 5)
    z = zarr.create_array(str(tmp_path / "a.zarr"), shape=(200, 5), chunks=(100, 5),
                          dtype="f4", compressors=None)
    z[:] = values
    spec = registry.spec(jask.open(str(tmp_path / "a.zarr"))._handle)
    real_preadv, maps = os.preadv, []

    def preadv(fd, buffers, offset, flags=0):
        if flags and cache == "cold":
            raise BlockingIOError(errno.EAGAIN, "not in memory")
        if flags and cache == "unknown":
            raise OSError(errno.EOPNOTSUPP, "not supported")
        return real_preadv(fd, buffers, offset, flags)
    real_mmap = chunkio.mmap.mmap
    monkeypatch.setattr(chunkio.os, "preadv", preadv)
    monkeypatch.setattr(chunkio, "_asks_cached", True)  # restored after: "unknown" clears it
    monkeypatch.setattr(chunkio.mmap, "mmap",
                        lambda *a, **k: (maps.append(a), real_mmap(*a, **k))[1])
    starts, stops = (np.array(v) for v in zip(*runs))
    files = OpenFiles() if held else None
    for _ in range(2):
        out = np.full((int(np.sum(stops - starts)), 5), -1, np.float32)
        read_runs(spec, starts, stops, out, files)
        np.testing.assert_array_equal(out, np.concatenate([values[lo:hi] for lo, hi in runs]))
    assert bool(maps) == mapped
    if files is not None:
        files.close()


def test_rows_of_runs_are_each_runs_rows_in_order():
    from jask.store.tiles import rows_of_runs
    for runs in ([(0, 1)], [(3, 7), (7, 8), (20, 22)], [(5, 5), (6, 9)]):
        starts, stops = (np.array(v) for v in zip(*runs))
        assert rows_of_runs(starts, stops).tolist() == [r for lo, hi in runs
                                                        for r in range(lo, hi)]
    assert rows_of_runs(np.array([], np.int64), np.array([], np.int64)).tolist() == []


@pytest.mark.parametrize("host_cut", [False, True], ids=["device feed", "host cut"])
def test_a_sharding_over_several_devices_gets_the_numpy_batches_split(tmp_path, host_cut):
    """A NamedSharding over four devices (JAX's CPU split in four, in a child
    process): through the device feed (windows put with their rows split as
    the batches', batches cut on the devices) and through the host cut (each
    batch put), the numpy batches in order with exactly that sharding, for
    rows split over every device, over one axis of a 2x2 mesh and over both,
    or not at all; a saved state resumes them; no device holds more than
    ``loader.device_bytes``. Shardings that cannot hold every batch are refused
    before anything is read."""
    report = _sharded_report(tmp_path)
    assert report["devices"] == 4
    feed = "host cut" if host_cut else "device feed"
    runs = {k: v for k, v in report.items() if k.startswith(feed)}
    assert len(runs) == 8
    for name, run in runs.items():
        assert run["same"] and run["exact_sharding"] and run["resumes"], name
        assert run["batches"] == 2 * 25, name
        if host_cut or "replicated" in name:  # rows not split: cut on the host
            assert run["device_bytes"] == 0, name
        else:
            assert 0 < run["most_per_device"] <= run["device_bytes"], name
    if not host_cut:  # each device holds its share of a window, not the whole
        split = runs["device feed, rows over 4, shuffled"]["device_bytes"]
        assert split < runs["device feed, rows over 2 of a 2x2 mesh, shuffled"]["device_bytes"]
    refused = report["refused"]
    assert "partitioned 4 times" in refused["a batch the devices do not divide"]
    assert "[42] rows" in refused["a short last batch they do not divide"]
    assert "names 2 axes" in refused["a spec naming more axes than y has"]
    assert report["short last batch dropped"] == 1000 // 48


_SHARDED: dict = {}


def _sharded_report(tmp_path) -> dict:
    """The child's report (run once for both parametrizations: starting JAX costs seconds)."""
    if not _SHARDED:
        _SHARDED.update(run_script("sharded_batches.py", tmp_path, timeout=600,
                                   env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}))
    return _SHARDED


@pytest.mark.skipif(not hasattr(jax.sharding, "PositionalSharding"),
                    reason="PositionalSharding is gone from this JAX")
def test_a_positional_sharding_places_each_batch(tmp_path):  # pragma: no cover - older JAX
    X, y, x = _stores(tmp_path, 300, 4, 40, 40, False)
    sharding = jax.sharding.PositionalSharding(jax.devices()[:1]).reshape(1, 1)
    for xb, yb in jask.batches(X, y, batch_size=32, seed=1, device=sharding):
        np.testing.assert_array_equal(np.asarray(xb), x[np.asarray(yb)])


_SUSPENDED = """
import sys, jax, jask
X = jask.open(sys.argv[1])
device = None
if sys.argv[4] == "device":
    jask.api.batches.HOST_CUT_PLATFORMS = ()  # (the device feed, onto JAX's CPU)
    device = jax.devices()[0]
loader = jask.batches(X, batch_size=37, shuffle=True, seed=5, epochs=2, buffer=1000,
                      readers=sys.argv[3], device=device)
it = iter(loader)
next(it)
if sys.argv[2] == "error":
    undefined_name
print("done")
"""


@pytest.mark.parametrize("readers,feed", [("threads", "host"), ("processes", "host"),
                                          ("threads", "device")])
@pytest.mark.parametrize("end", ["done", "error"])
def test_a_script_ending_with_an_iterator_suspended_exits(tmp_path, end, readers, feed):
    """A script that ends (or stops at an uncaught error) with a loader's
    iterator suspended at module level exits: the iteration is closed while
    the interpreter ends, and the threads it started then (the idle timer, the
    reading child's kill timer) never started (main hung at exit, for ever)."""
    X, _, _ = _stores(tmp_path, 10007, 3, 257, 257, False)
    done = subprocess.run([sys.executable, "-c", _SUSPENDED, X.filename, end, readers, feed],
                          capture_output=True, text=True, timeout=120)
    if end == "error":
        assert done.returncode == 1 and "NameError" in done.stderr, done.stderr
    else:
        assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_an_iterator_left_suspended_lets_go_of_its_chunk_files(tmp_path, monkeypatch):
    """An iteration whose consumer stops asking (an iterator kept alive, never
    closed nor collected) closes the chunk files it holds open; asked again, it
    goes on from where it was, every row still once."""
    import jask.api.batches as loader_module
    monkeypatch.setattr(loader_module, "IDLE_RELEASE_S", 0.2)
    rows = 300 * 64
    X, y, _ = _stores(tmp_path, rows, 4, 64, 64, False)  # 300 chunk files each
    before = len(os.listdir("/proc/self/fd"))
    loader = jask.batches(X, y, batch_size=64, buffer=64 * 64, threads=2, prefetch=1, seed=5)
    it = iter(loader)
    seen = [next(it)[1].tolist()]
    held = len(os.listdir("/proc/self/fd")) - before
    assert held > 100  # a window's runs come from chunks all over the store
    deadline = threading.Event()
    for _ in range(100):
        if len(os.listdir("/proc/self/fd")) - before <= 4:
            break
        deadline.wait(0.05)
    assert len(os.listdir("/proc/self/fd")) - before <= 4
    assert loader.state["batch"] == 1
    seen += [yb.tolist() for _, yb in it]
    assert sorted(v for b in seen for v in b) == list(range(rows))
    assert seen == [b.tolist() for b in loader.plan.batch_rows(0)]
    loader.close()
    assert len(os.listdir("/proc/self/fd")) - before <= 4


@pytest.mark.parametrize("start", [0, 5])
def test_in_order_the_first_batch_waits_only_for_its_rows(tmp_path, monkeypatch, start):
    """The first window of an iteration in order is read in pieces: its first
    batch is handed over while the rest of the window is still being read."""
    X, y, x = _stores(tmp_path, 4096, 8, 1024, 1024, False)
    loader = jask.batches(X, y, batch_size=64, shuffle=False, buffer=2048, threads=2)
    plan = loader.plan
    planned = [b.tolist() for b in plan.batch_rows(0)]
    first_rows = set(planned[start])
    loader.restore({**loader.state, "batch": start})
    (xb, yb), rest = _first_batch_while_reads_held(  # reads of rows past the first batch's
        loader, monkeypatch, lambda starts, stops, stamps: not first_rows.intersection(
            range(int(starts[0]), int(stops[-1]))))
    got = [yb.tolist()] + [b.tolist() for _, b in rest]
    assert got == planned[start:]
    np.testing.assert_array_equal(xb, x[planned[start]])


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise here")
@pytest.mark.parametrize("starts, stops, spans", [
    ([5, 210, 230, 590], [9, 220, 231, 600], [(5, 9), (210, 220), (230, 231), (590, 600)]),
    # runs that follow each other in a file are asked for as one (an in-order read)
    ([5, 9, 12, 230], [9, 12, 20, 231], [(5, 20), (230, 231)]),
])
def test_runs_of_chunk_files_held_open_are_asked_for_before_they_are_read(
        tmp_path, monkeypatch, starts, stops, spans):
    """A cold disk gets every run of a call in flight at once: each run of a
    chunk file held open is advised (WILLNEED, its bytes) before the reads."""
    import jask.store.chunkio as chunkio
    from jask.store.tiles import OpenFiles, read_runs
    values, spec = _rows_in_chunks_of_100(tmp_path)
    starts, stops = np.array(starts), np.array(stops)
    files = OpenFiles()
    out = np.empty((int(np.sum(stops - starts)), 3), np.float32)
    read_runs(spec, starts, stops, out, files)  # opens and holds the files
    advised: list = []
    monkeypatch.setattr(chunkio, "_asks_cached", True)
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, at, n, how: advised.append(
        (at, n, how)))
    out[...] = 0
    read_runs(spec, starts, stops, out, files)
    files.close()
    np.testing.assert_array_equal(out, np.concatenate([values[lo:hi]
                                                       for lo, hi in zip(starts, stops)]))
    row = 3 * 4
    assert advised == [((lo % 100) * row, (hi - lo) * row, os.POSIX_FADV_WILLNEED)
                       for lo, hi in spans]


def _segments(loader) -> set:
    """The names of ``loader``'s windows in shared memory."""
    return {shared.name.lstrip("/") for slot in loader._slots for shared in slot._shared}


def _left(segments) -> set:
    """Those of ``segments`` still in /dev/shm (none where there is no /dev/shm)."""
    return {n for n in segments if os.path.exists(os.path.join("/dev/shm", n))}


def _ended(pid: int, seconds: float = 20.0) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_reader_processes_give_the_thread_readers_batches_and_resume(tmp_path):
    X, y, _ = _stores(tmp_path, 3000, 16, 128, 128, False)
    kw = dict(batch_size=100, seed=5, buffer=512, threads=2, epochs=2)
    with jask.track() as by_threads:
        threads = [(xb, yb) for xb, yb in jask.batches(X, y, **kw)]
    with jask.batches(X, y, readers="processes", **kw) as loader:
        with jask.track() as t:
            got = [(xb.copy(), yb.copy()) for xb, yb in loader]
        assert len(got) == len(threads) == 60
        # the child's reads counted here, as the threads' are: every byte once an epoch
        assert t.passes(X) == by_threads.passes(X) == 2.0
        assert t.passes(y) == by_threads.passes(y) == 2.0
        assert t.bytes_read == by_threads.bytes_read
        for (a, b), (c, d) in zip(got, threads):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)
        for epoch in (got[:30], got[30:]):  # every row once an epoch, X and y aligned
            assert sorted(np.concatenate([yb for _, yb in epoch]).tolist()) == list(range(3000))
            for xb, yb in epoch:
                np.testing.assert_array_equal(xb[:, 0], yb * 16)
        pid = loader._process.pid
        loader.restore({**loader.state, "epoch": 1, "batch": 17})
        rest = [yb.copy() for _, yb in loader]
        assert [r.tolist() for r in rest] == [b.tolist() for _, b in threads[47:]]
        assert loader._process.pid == pid  # one child for the loader's life
        # the child runs jask.store alone: neither JAX nor jask's __init__ is loaded there
        with open(f"/proc/{pid}/maps") as maps:
            mapped = maps.read()
        assert "jaxlib" not in mapped and "numpy" in mapped
    with pytest.raises(ValueError, match="readers"):
        jask.batches(X, y, batch_size=10, readers="process")


def test_reader_processes_read_in_this_process_where_shared_memory_has_no_room(
        tmp_path, monkeypatch):
    # a container's /dev/shm (Docker's 64 MB): a window larger than its room would be
    # killed by SIGBUS mid-read; the loader keeps such windows here, read by threads
    from jask.api import batches as loaders
    X, y, _ = _stores(tmp_path, 3000, 16, 128, 128, False)
    kw = dict(batch_size=100, seed=5, buffer=512, threads=2)
    threads = [yb.tolist() for _, yb in jask.batches(X, y, **kw)]
    monkeypatch.setattr(loaders, "shared_room", lambda: 1000)
    with jask.batches(X, y, readers="processes", **kw) as loader:
        assert [yb.tolist() for _, yb in loader] == threads
        assert loader._slots and all(not slot._shared for slot in loader._slots)


def test_reader_processes_are_the_default_on_an_accelerator_only(tmp_path, monkeypatch):
    from jask.api import batches as loaders
    X, y, _ = _stores(tmp_path, 200, 4, 100, 100, False)
    cpu = jax.devices("cpu")[0]
    assert jask.batches(X, y, batch_size=10).readers == "threads"
    assert jask.batches(X, y, batch_size=10, device=cpu).readers == "threads"
    assert jask.batches(X, y, batch_size=10, readers="processes").readers == "processes"
    # an accelerator's device, as CI has none: the CPU's platform not counted as the host's
    monkeypatch.setattr(loaders, "THREAD_READER_PLATFORMS", ())
    assert jask.batches(X, y, batch_size=10, device=cpu).readers == "processes"
    assert jask.batches(X, y, batch_size=10, device=jax.sharding.SingleDeviceSharding(cpu)
                        ).readers == "processes"
    assert jask.batches(X, y, batch_size=10, device=cpu, readers="threads").readers == "threads"
    loader = jask.batches(np.arange(200.0), batch_size=10, readers="processes")
    assert len(_rows_of(loader)) == 20 and loader._process is None  # nothing for a child


def _rows_of(loader) -> list:
    return [b[0].tolist() for b in loader]


def test_reader_processes_name_a_replaced_store_and_a_killed_child(tmp_path):
    X, y, _ = _stores(tmp_path, 4000, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=10, seed=0, buffer=100, prefetch=1, threads=2,
                          readers="processes")
    it = iter(loader)
    next(it)
    X.update_(X * 0.0)
    with pytest.raises(jask.StoreChangedError):
        for _ in it:
            pass
    assert all(np.all(xb == 0) for xb, _ in loader)  # the next epoch: the new version
    it = iter(loader)
    seen = next(it)[1].tolist()
    killed = loader._process.pid
    os.kill(killed, 9)
    with pytest.raises(ChildProcessError, match=f"pid {killed}.*SIGKILL"):
        for _, yb in it:
            seen += yb.tolist()
    # the epoch goes on from the batch the error stopped at, read by a new child
    assert sorted(seen + sum(_rows(loader), [])) == list(range(4000))
    assert loader._process.pid != killed
    loader.close()


def test_reader_processes_leave_no_segment_or_process_after_close_or_collection(tmp_path):
    X, y, _ = _stores(tmp_path, 2000, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=50, threads=2, readers="processes")
    it = iter(loader)
    next(it)
    segments = _segments(loader)
    if os.path.isdir("/dev/shm"):
        assert segments and _left(segments) == segments  # the windows are shared
    pid = loader._process.pid
    del it
    loader.close()
    gc.collect()
    assert not _left(segments)
    assert _ended(pid)
    loader = jask.batches(X, y, batch_size=50, threads=2, readers="processes")
    assert len(_rows(loader)) == 40
    pid, segments = loader._process.pid, _segments(loader)
    del loader
    gc.collect()
    assert _ended(pid)
    assert not _left(segments)


def test_reader_processes_exit_by_themselves_at_close_and_a_stopped_one_is_killed(
        tmp_path, monkeypatch):
    """An ordinary close lets the reading process finish its reads and exit on
    its own (code 0: it was killed as soon as its output ended, before its exit);
    one that does not end (stopped, SIGSTOP) is killed after END_WAIT_S."""
    import signal

    from jask.api import reader_process
    X, y, _ = _stores(tmp_path, 2000, 4, 100, 100, False)
    for _ in range(3):
        loader = jask.batches(X, y, batch_size=50, threads=2, readers="processes")
        assert len(_rows(loader)) == 40
        proc = loader._process._proc
        loader.close()
        assert proc.returncode == 0
    monkeypatch.setattr(reader_process, "END_WAIT_S", 1.0)
    loader = jask.batches(X, y, batch_size=50, threads=2, readers="processes")
    assert len(_rows(loader)) == 40
    proc = loader._process._proc
    os.kill(proc.pid, signal.SIGSTOP)
    rescue = threading.Timer(60.0, os.kill, (proc.pid, signal.SIGKILL))  # (a failure, not a hang)
    rescue.start()
    began = time.monotonic()
    loader.close()
    took = time.monotonic() - began
    rescue.cancel()
    assert proc.returncode == -signal.SIGKILL and 0.9 < took < 30, (proc.returncode, took)


def test_reader_processes_need_no_main_guard_and_end_with_an_interrupted_script(tmp_path):
    import signal

    from helpers import ROOT, last_json, script_command
    _stores(tmp_path, 2000, 4, 100, 100, False)
    stores = [str(tmp_path / "X.zarr"), str(tmp_path / "y.zarr")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(script_command("reader_process_unguarded.py", *stores, "all"),
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = last_json(done.stdout)
    assert report["rows"] == list(range(2000))
    assert _ended(report["pid"]) and not _left(report["segments"])
    # Ctrl-C while it is iterated: the script ends, and its child and segments with it
    script = subprocess.Popen(script_command("reader_process_unguarded.py", *stores,
                                             "interrupt"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    begun = json.loads(script.stdout.readline())
    script.send_signal(signal.SIGINT)
    _, err = script.communicate(timeout=60)
    assert script.returncode != 0 and "KeyboardInterrupt" in err, err[-3000:]
    assert _ended(begun["pid"]) and not _left(begun["segments"])


def test_reader_processes_let_a_ctrl_c_end_the_loop_on_a_stopped_child(tmp_path, monkeypatch):
    import signal
    import threading
    import time

    from jask.api import reader_process
    X, y, _ = _stores(tmp_path, 4000, 4, 100, 100, False)
    monkeypatch.setattr(reader_process, "END_WAIT_S", 1.0)
    loader = jask.batches(X, y, batch_size=10, buffer=200, prefetch=1, threads=2,
                          readers="processes")
    it = iter(loader)
    seen = next(it)[1].tolist()
    stopped = loader._process.pid
    os.kill(stopped, signal.SIGSTOP)  # (or stuck on a hung mount): its reads never end
    interrupt = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    rescue = threading.Timer(60.0, os.kill, (stopped, signal.SIGKILL))  # (a failure, not a hang)
    interrupt.start()
    rescue.start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for _, yb in it:
            seen += yb.tolist()
    took = time.monotonic() - began
    rescue.cancel()
    # leaving the loop killed the child after END_WAIT_S, not waiting on its reads forever
    assert took < 30 and _ended(stopped)
    # the epoch goes on from the batch left, read by a new child
    assert sorted(seen + sum(_rows(loader), [])) == list(range(4000))
    assert loader._process.pid != stopped
    loader.close()


def test_reader_processes_name_a_stopped_child_to_a_consumer_waiting_on_it(tmp_path,
                                                                           monkeypatch):
    import signal
    import warnings

    from jask.api import reader_process
    X, y, _ = _stores(tmp_path, 4000, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=10, buffer=200, prefetch=1, threads=2,
                          readers="processes")
    it = iter(loader)
    seen = next(it)[1].tolist()
    monkeypatch.setattr(jask.api.batches, "STALL_WARN_S", 0.3)
    stopped = loader._process.pid
    os.kill(stopped, signal.SIGSTOP)
    go_on = threading.Timer(3.0, os.kill, (stopped, signal.SIGCONT))
    go_on.start()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for _, yb in it:
            seen += yb.tolist()
    go_on.join()
    # the consumer was told, while it waited, which process its batches wait on and why
    told = [str(w.message) for w in said if f"pid {stopped}" in str(w.message)]
    assert told and all(w.filename == __file__ for w in said if f"pid {stopped}" in
                        str(w.message))
    if reader_process.process_state(os.getpid()) is not None:  # (Linux's /proc)
        assert any("is stopped (SIGSTOP; state T)" in m and f"kill -CONT {stopped}" in m
                   for m in told), told
    # continued, it read the rest of the epoch
    assert sorted(seen) == list(range(4000))
    loader.close()


@pytest.mark.filterwarnings("ignore:os.fork")
def test_a_child_forked_after_a_loader_ran_runs_ops_and_loaders_of_its_own(tmp_path):
    """The parent's loader keeps its reading pool and windows (idle) when the
    process forks: the child's op and its new loader (which frees the kept
    loaders' windows at once) must neither wait on the parent's threads nor
    touch the parent's windows. The op is compiled in the parent first: XLA's
    compiler threads are not in a forked child (jask.base.forks)."""
    X, y, _ = _stores(tmp_path, 2000, 4, 100, 100, False)
    kept = jask.batches(X, y, batch_size=100, seed=0, threads=2)
    assert sorted(sum(_rows(kept), [])) == list(range(2000))  # its pool and windows live on
    a = jask.from_numpy(np.arange(6.0, dtype=np.float32))
    assert float(jask.sum(a + 1.0)) == 21.0
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = float(jask.sum(a + 1.0)) == 21.0
            rows = _rows(jask.batches(X, y, batch_size=64, seed=1, threads=2))
            ok = ok and sorted(sum(rows, [])) == list(range(2000))
            ok = ok and sorted(sum(_rows(kept), [])) == list(range(2000))
        finally:
            os._exit(0 if ok else 1)
    code = wait_for_fork(pid, 120)
    assert code is not None, "the forked child hung"
    assert code == 0
    assert sorted(sum(_rows(kept), [])) == list(range(2000))  # the parent's, undisturbed
    kept.close()


@pytest.mark.filterwarnings("ignore:os.fork")
def test_reader_processes_of_a_forked_loader_are_its_own(tmp_path):
    X, y, _ = _stores(tmp_path, 3000, 4, 100, 100, False)
    loader = jask.batches(X, y, batch_size=50, buffer=500, threads=2, readers="processes")
    assert len(_rows(loader)) == 60  # the parent's child and windows made, kept
    parents = loader._process.pid

    def epoch_ok() -> bool:
        rows = []
        for xb, yb in loader:
            if not np.all(xb[:, 0] == yb * 4):
                return False
            rows += yb.tolist()
        return sorted(rows) == list(range(3000))

    pid = os.fork()
    if pid == 0:  # the fork's loader: a child and windows of its own, none of the parent's
        ok = False
        try:
            ok = epoch_ok() and loader._process.pid != parents
        finally:
            os._exit(0 if ok else 1)
    try:
        assert epoch_ok() and loader._process.pid == parents  # at once, undisturbed
    finally:
        code = wait_for_fork(pid, 120)
    assert code == 0
    loader.close()


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in order"])
@pytest.mark.parametrize("in_flight,slots", [(None, 2), (1, 2), (2, 2), (2, 3), (None, 3),
                                             (1, 4)])
def test_a_window_put_with_few_pieces_in_flight_gives_the_same_batches(
        tmp_path, monkeypatch, device_feed, in_flight, slots, shuffle):
    """``PUTS_IN_FLIGHT`` bounds how many of a window's pieces are being copied
    at once (waiting for the oldest), ``DEVICE_SLOTS`` the host windows a device
    feed reads into in turn (benchmarks.loader_knobs sets both; the defaults are
    2 and 3): the batches are the plan's rows whatever they are, and the loader
    holds (and counts) that many windows."""
    monkeypatch.setattr(jask.api.batches, "PUTS_IN_FLIGHT", in_flight)
    monkeypatch.setattr(jask.api.batches, "DEVICE_SLOTS", slots)
    monkeypatch.setattr(jask.api.batches, "TRANSFER_BYTES", 1024)  # several pieces a window
    X, y, x = _stores(tmp_path, 1600, 4, 100, 100, False)
    make = lambda: jask.batches(X, y, batch_size=50, shuffle=shuffle, seed=3, buffer=400,  # noqa: E731
                                device=CPU)
    with make() as loader:
        got = [(np.asarray(a), np.asarray(b)) for a, b in loader]
        assert [b.tolist() for _, b in got] == [b.tolist() for b in loader.plan.batch_rows(0)]
        assert len(loader._slots) == slots
    monkeypatch.setattr(jask.api.batches, "DEVICE_SLOTS", slots + 1)
    window = 400 * (4 * 4 + 4)  # (a window's rows of X, and of y at 4 bytes or more)
    assert make().held_bytes - loader.held_bytes >= window  # one more slot, counted
    for xv, yv in got:
        np.testing.assert_array_equal(xv, x[yv])


@pytest.mark.parametrize("budget,slots,fits", [("16MB", 3, 3), ("8MB", 3, 2), ("16MB", 200, 2)])
def test_a_device_feed_takes_its_third_host_window_only_where_it_fits(
        tmp_path, monkeypatch, device_feed, budget, slots, fits):
    """A device feed reads into DEVICE_SLOTS host windows where they fit in the
    loader's share, else into two, never into smaller windows than numpy
    batches get (at 8 MB three do not fit: a smaller default buffer would
    change the order): the plan, and so the batches, stay theirs."""
    monkeypatch.setattr(jask.api.batches, "DEVICE_SLOTS", slots)
    X, y, _ = _stores(tmp_path, 6000, 16, 500, 500, False)
    jask.set_memory_budget(budget, scratch_dir=str(tmp_path / "scratch"))
    try:
        host = jask.batches(X, y, batch_size=64, seed=1)
        loader = jask.batches(X, y, batch_size=64, seed=1, device=CPU)
        assert (loader.slot_count, host.slot_count) == (fits, 2)
        assert loader.plan == host.plan
        with loader:
            got = [np.asarray(b) for _, b in loader]
            assert len(loader._slots) == fits
        assert [b.tolist() for b in got] == [b.tolist() for b in host.plan.batch_rows(0)]
    finally:
        jask.set_memory_budget("1GB", scratch_dir=str(tmp_path / "scratch"))


@pytest.mark.parametrize("rows,bs,buffer", [(1600, 50, 400), (1003, 64, 300), (97, 10, 40)])
def test_in_order_the_device_feed_slices_its_windows_without_a_gather(
        tmp_path, monkeypatch, device_feed, rows, bs, buffer):
    """In order a window's batches are slices of it (a gather of the identity
    order cost a TPU's time at its gather rate, not its memory's): the plan's rows
    every epoch, with batches going on into the next window and a short last one."""
    monkeypatch.setattr(jask.api.batches, "TRANSFER_BYTES", 1024)  # several pieces a window
    X, y, x = _stores(tmp_path, rows, 4, 100, 100, False)
    with jask.batches(X, y, batch_size=bs, shuffle=False, buffer=buffer, epochs=2,
                      device=CPU) as loader:
        got = [(np.asarray(a), np.asarray(b)) for a, b in loader]
    assert [b.tolist() for _, b in got] == [list(range(lo, min(lo + bs, rows)))
                                            for lo in range(0, rows, bs)] * 2
    for xv, yv in got:
        np.testing.assert_array_equal(xv, x[yv])
    cut, _ = jask.api.batches._programs(CPU, False)
    pieces = ((jnp.zeros((8, 4)), jnp.zeros((8, 4))),)
    hlo = cut.lower(pieces, jnp.zeros(24, jnp.int32), 3, 4, 2).as_text()
    assert "gather" not in hlo and "dynamic_slice" in hlo
    shuffled, _ = jask.api.batches._programs(CPU, True)
    assert "gather" in shuffled.lower(pieces, jnp.zeros(24, jnp.int32), 3, 4, 2).as_text()


@pytest.mark.parametrize("shuffle", [False, True], ids=["in order", "shuffled"])
def test_the_device_feed_raises_what_fails_before_its_first_window(
        tmp_path, monkeypatch, device_feed, shuffle):
    """An error in the device feed's setup (its programs, its pieces) reaches
    the consumer at its first batch; the consumer never waits on a feed that died."""
    def broken(target, shuffle=True):
        raise RuntimeError("no program for this device")

    monkeypatch.setattr(jask.api.batches, "_programs", broken)
    X, y, _ = _stores(tmp_path, 200, 4, 50, 50, False)
    got: list = []

    def first_batch() -> None:
        with jask.batches(X, y, batch_size=20, shuffle=shuffle, device=CPU) as loader:
            try:
                next(iter(loader))
            except RuntimeError as err:
                got.append(err)

    reader = threading.Thread(target=first_batch, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "the consumer waits on a device feed that died"
    assert "no program for this device" in str(got[0])
