"""Eager ops are lazy where it is safe: an op a band group can hold returns at
once, and its store is computed when something needs it; a reduction to
memory then runs the pending chain as one band group (jask.engine.lazy).

Bytes are counted with jask.track, never the clock."""
import gc
import glob
import os
import threading

import jax
import numpy as np
import pytest

import jask
from helpers import SMALL_BUDGET
from jask.store import registry


@pytest.fixture
def small_budget(jask_scratch):
    """conftest's small budget, with eager ops lazy."""
    jask.set_memory_budget(SMALL_BUDGET, scratch_dir=jask_scratch.path, lazy=True)
    return jask.get_config()

ROWS, COLS = 301, 37  # bands and tiles do not divide them


def _x(dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal((ROWS, COLS)).astype(dtype)


def _standardised_sum(X):
    mu, sd = X.mean(0), X.std(0)
    Z = (X - mu) / sd
    return jask.sum(Z * Z), Z


def test_eager_chain_reads_x_once_and_writes_nothing_between(small_budget, dtype):
    assert small_budget.lazy
    x = _x(dtype)
    X = jask.from_numpy(x)
    mu, sd = X.mean(0), X.std(0)
    with jask.track() as t:
        Z = (X - mu) / sd
        assert t.graphs == 0 and t.bytes_read == 0  # recorded, nothing run yet
        total = jask.sum(Z * Z)
    assert t.passes(X) == 1.0
    assert t.bytes_written == 0  # Z, Z * Z: never written
    assert t.ran == ["fused_sum (subtract, divide, multiply, sum)"]
    z = (x - x.mean(0)) / x.std(0)
    np.testing.assert_allclose(float(total), float((z * z).sum()), rtol=1e-5)
    # Z is still pending: reading it computes it (one more pass over X)
    np.testing.assert_allclose(Z.to_numpy(), z, rtol=1e-5, atol=1e-5)


def test_the_issue_chain_reads_x_once_beyond_its_statistics(small_budget):
    X = jask.from_numpy(_x())
    with jask.track() as stats:
        X.mean(0), X.std(0)
    assert stats.passes(X) == 1.0  # asked for together: one pass (jask.engine.moments)
    with jask.track() as t:
        total, _ = _standardised_sum(X)
        float(total)
    assert t.passes(X) == 1.0  # the statistics known already, then the chain in one pass
    assert t.bytes_written == 0


def test_observation_points_compute_and_values_equal_numpy(small_budget):
    x = _x()
    X = jask.from_numpy(x)
    y = jask.exp(X * 0.5) + 1.0
    assert "pending" in repr(y)  # showing it computes nothing
    np.testing.assert_allclose(np.asarray(y), np.exp(x * 0.5) + 1, rtol=1e-6)
    assert "pending" not in repr(y) and os.path.isdir(y.filename)
    w = X - 2.0
    with jask.track() as t:
        np.testing.assert_allclose(jask.transpose(w).to_numpy(), (x - 2).T)  # not fusable
    assert t.ran[0] == "subtract (deferred)" and t.store(w).bytes_written == w.nbytes
    v = X * 3.0
    s = jax.jit(lambda a: jask.sum(a))(v)  # a jitted call resolves the handle
    np.testing.assert_allclose(float(s), float((x * 3).sum()), rtol=1e-5)


def test_update_after_a_lazy_op_gives_the_old_values(small_budget):
    x = _x()
    X = jask.from_numpy(x)
    y = X + 1.0
    twice = y * 2.0
    X.update_(jask.from_numpy(np.zeros_like(x)))  # program order: y read X before this
    np.testing.assert_allclose(twice.to_numpy(), (x + 1) * 2)
    np.testing.assert_allclose(y.to_numpy(), x + 1)
    np.testing.assert_array_equal((X + 1.0).to_numpy(), np.ones_like(x))


def test_saving_over_a_store_a_lazy_result_reads_keeps_the_old_values(small_budget, tmp_path):
    x = _x()
    path = str(tmp_path / "mine.zarr")
    jask.from_numpy(x).to_zarr(path)
    y = jask.open(path) * 2.0
    jask.save(jask.from_numpy(np.zeros_like(x)), path, overwrite=True)
    np.testing.assert_allclose(y.to_numpy(), x * 2)


def test_a_lazy_result_outlives_its_inputs_and_a_dropped_one_never_runs(small_budget):
    def ours():
        return [p for p in registry.live_paths() if p.startswith(small_budget.scratch_dir)]

    x = _x()
    X = jask.from_numpy(x)
    y = (X * 2.0) - 1.0  # the temporary X * 2.0 is gone already
    kept = ours()
    del X
    gc.collect()
    jask.collect()  # a safe point: nothing y reads may go
    assert ours() == kept  # X's store, held by the pending y
    np.testing.assert_allclose(y.to_numpy(), x * 2 - 1)
    jask.collect()
    assert ours() == [y.filename]  # computed: X's store could go
    with jask.track() as t:
        dropped = y + 5.0
        del dropped
        jask.collect()
    assert t.graphs == 0 and t.bytes_written == 0  # never computed
    del y
    jask.collect()
    assert ours() == []


def test_an_error_in_a_deferred_op_names_the_op_where_observed(small_budget):
    X = jask.from_numpy(_x())
    y = jask.sqrt(X)  # recorded, not run
    for chunk in glob.glob(os.path.join(X.filename, "c*")):
        with open(chunk, "r+b") as f:
            f.truncate(5)  # damaged behind jask's back
    with pytest.raises(Exception) as info:
        y.to_numpy()
    assert any("jask.sqrt" in note and "deferred" in note
               for note in getattr(info.value, "__notes__", []))


def test_a_budget_error_is_still_raised_at_the_call(small_budget, tmp_path):
    import zarr
    path = str(tmp_path / "wide.zarr")
    zarr.create_array(path, shape=(4, 40_000), chunks=(4, 40_000), dtype="float32")[...] = 1
    with pytest.raises(jask.BudgetError):
        jask.open(path) + 1.0


def test_lazy_false_runs_each_op_at_its_call(jask_scratch):
    jask.set_memory_budget("64KB", scratch_dir=jask_scratch.path, lazy=False)
    assert jask.get_config().lazy is False
    x = _x()
    X = jask.from_numpy(x)
    with jask.track() as t:
        Z = (X - 1.0) / 2.0
        assert t.by_op["subtract"].graphs == 1 and t.by_op["divide"].graphs == 1
        total = jask.sum(Z * Z)
    assert "pending" not in repr(Z)
    assert t.passes(X) == 1.0 and t.bytes_written == 3 * X.nbytes  # X-1, Z, Z*Z
    np.testing.assert_allclose(float(total), float((((x - 1) / 2) ** 2).sum()), rtol=1e-5)


def test_a_long_eager_chain_is_computed_in_bounded_pieces(small_budget):
    from jask.engine.lazy import MAX_PENDING
    X = jask.from_numpy(_x())
    y = X
    with jask.track() as t:
        for _ in range(3 * MAX_PENDING):  # unbounded, this would recurse without end
            y = y + 1.0
        assert 2 <= t.graphs <= 3  # computed each time the chain got too long
    np.testing.assert_allclose(y.to_numpy(), _x() + 3 * MAX_PENDING, rtol=1e-5)


def test_an_eager_loop_keeps_few_stores_alive(small_budget):
    from jask.engine.lazy import MAX_HELD
    x = _x()
    w = jask.from_numpy(x)
    for k in range(4 * MAX_HELD):
        g = jask.from_numpy(x * k)
        w = w - 0.5 * g  # each g is gone from Python: only the pending chain holds it
        jask.collect()
        ours = [p for p in registry.live_paths() if p.startswith(small_budget.scratch_dir)]
        assert len(ours) <= MAX_HELD + 2
    np.testing.assert_allclose(w.to_numpy(), x * (1 - 0.5 * sum(range(4 * MAX_HELD))),
                               rtol=1e-5)


def test_threads_keep_their_own_chains(small_budget):
    x = _x()
    X = jask.from_numpy(x)
    results, errors = {}, []

    def work(k):
        try:
            for _ in range(3):
                z = (X - float(k)) * float(k + 1)
                results[k] = (float(jask.sum(z * z)), z.to_numpy())
        except Exception as err:  # noqa: BLE001 - reported
            errors.append(repr(err))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    [t.start() for t in threads]
    [t.join(timeout=120) for t in threads]
    assert errors == []
    for k in range(3):
        z = (x - k) * (k + 1)
        np.testing.assert_allclose(results[k][0], float((z * z).sum()), rtol=1e-5)
        np.testing.assert_allclose(results[k][1], z, rtol=1e-6)


def test_lazy_is_the_default(jask_scratch):
    from jask.base.config import make_config
    assert make_config("8MB", scratch_dir=jask_scratch.path).lazy is True
    jask.set_memory_budget("8MB", scratch_dir=jask_scratch.path)
    assert jask.get_config().lazy is True
    assert "pending" in repr(jask.from_numpy(_x()) + 1.0)


def test_a_full_disk_is_refused_at_the_call(jask_scratch):
    """An output the scratch disk cannot hold: DiskFullError naming the folder
    when the op records (as lazy=False would at its call), nothing written."""
    import shutil
    jask.set_memory_budget("1GB", scratch_dir=jask_scratch.path)
    rows = shutil.disk_usage(os.path.dirname(jask_scratch.path)).free // 100_000 + 1  # output:
    # 4x the free space
    x = jask.from_numpy(np.ones((rows, 1), np.float32))  # (a few MB)
    before = registry.live_paths()
    with pytest.raises(jask.DiskFullError, match="add: not enough disk space in") as err:
        x + np.zeros((1, 100_000), np.float32)  # a broadcast along the rows: it records
    assert jask_scratch.path in str(err.value)
    assert registry.live_paths() == before


def test_a_pending_result_passed_to_jit_is_computed_once(small_budget):
    """A jitted call observes an eager result: its store is written at the
    first call (one pass over X), and later calls read it, not X."""
    x = _x()
    X = jask.from_numpy(x)
    Z = (X - 1.0) * 2.0
    f = jax.jit(lambda Z: jask.sum(Z * Z))
    with jask.track() as first:
        f(Z)
    assert "filename=" in repr(Z) and first.passes(X) == 1.0  # computed, a store
    with jask.track() as second:
        got = f(Z)
    assert second.passes(X) == 0.0 and second.passes(Z) == 1.0
    np.testing.assert_allclose(float(got), float((((x - 1) * 2) ** 2).sum()), rtol=1e-4)
