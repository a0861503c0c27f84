"""Ops inside a compiled program run together: one read of the data per step.

Each test counts the bytes read from the data store (jask.track: the
counters, not the clock) and compares the values with jax.numpy + jax.grad on the same data.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import jask
from helpers import rand, tolerance, user_store

#: Reads of X per jit(grad) step that count as "one pass": the bands are whole
#: chunk rows, so a fused step reads X exactly once; the slack is for a
#: chunk cut at a band's edge.
ONE_PASS = 1.2


@pytest.fixture
def reads():
    """jask's byte counters over the test (jask.track)."""
    with jask.track() as counts:
        yield counts


def _passes(counts, x) -> float:
    return counts.passes(x)


def _least_squares(w, X, y):
    return jask.sum(jask.square(X @ w - y))


def _least_squares_ref(w, X, y):
    return jnp.sum(jnp.square(X @ w - y))


@pytest.mark.parametrize("chunks", [None, (250, 13), (97, 61)], ids=["jask", "ragged",
                                                                        "whole-rows"])
def test_jit_grad_step_reads_X_once(small_budget, rng, dtype, reads, tmp_path, chunks):
    Xn, yn, wn = rand(rng, (4001, 61), dtype), rand(rng, (4001,), dtype), rand(rng, (61,), dtype)
    jask.set_memory_budget("512KB", scratch_dir=small_budget.scratch_dir)  # X: 4 to 8 bands
    if chunks is None:
        X = jask.DiskArray.from_numpy(Xn)
    else:
        X = user_store(tmp_path / "X", Xn, chunks=chunks)
    y = jask.DiskArray.from_numpy(yn)
    step = jax.jit(jax.grad(_least_squares))
    got = step(jnp.asarray(wn), X, y)
    expect = jax.grad(_least_squares_ref)(jnp.asarray(wn), jnp.asarray(Xn), jnp.asarray(yn))
    np.testing.assert_allclose(got, expect, **tolerance(dtype))
    assert 0.99 <= _passes(reads, X) <= ONE_PASS, reads


def test_logistic_regression_step_reads_X_once(small_budget, rng, reads):
    Xn = rand(rng, (2003, 17), np.float32)
    yn = (rng.random(2003) > 0.5).astype(np.float32)
    jask.set_memory_budget("256KB", scratch_dir=small_budget.scratch_dir)
    X, y = jask.DiskArray.from_numpy(Xn), jask.DiskArray.from_numpy(yn)

    def loss(params, X, y):
        z = X @ params["w"] + params["b"]
        return jask.mean(jask.nn.softplus(z) - y * z)

    def ref(params, X, y):
        z = X @ params["w"] + params["b"]
        return jnp.mean(jax.nn.softplus(z) - y * z)

    params = {"w": jnp.asarray(rand(rng, (17,), np.float32)), "b": jnp.float32(0.3)}
    got = jax.jit(jax.grad(loss))(params, X, y)
    expect = jax.grad(ref)(params, jnp.asarray(Xn), jnp.asarray(yn))
    for k in params:
        np.testing.assert_allclose(got[k], expect[k], **tolerance(np.float32))
    assert 0.99 <= _passes(reads, X) <= ONE_PASS, reads


def test_value_and_grad_reads_X_once(small_budget, rng, dtype, reads):
    Xn, yn, wn = rand(rng, (999, 31), dtype), rand(rng, (999,), dtype), rand(rng, (31,), dtype)
    X, y = jask.DiskArray.from_numpy(Xn), jask.DiskArray.from_numpy(yn)
    value, grad = jax.jit(jax.value_and_grad(_least_squares))(jnp.asarray(wn), X, y)
    v_ref, g_ref = jax.value_and_grad(_least_squares_ref)(
        jnp.asarray(wn), jnp.asarray(Xn), jnp.asarray(yn))
    np.testing.assert_allclose(value, v_ref, **tolerance(dtype))
    np.testing.assert_allclose(grad, g_ref, **tolerance(dtype))
    assert 0.99 <= _passes(reads, X) <= ONE_PASS, reads


def test_an_elementwise_chain_writes_only_its_result(small_budget, rng, dtype, reads):
    xn = rand(rng, (301, 19), dtype)
    x = jask.DiskArray.from_numpy(xn)
    before = set(jask.store.registry.live_paths())

    @jax.jit
    def f(x):
        return jask.exp(jask.tanh(x * 2.0 + 1.0)) - x

    out = f(x)
    np.testing.assert_allclose(out.to_numpy(), np.exp(np.tanh(xn * 2 + 1)) - xn,
                               **tolerance(dtype))
    assert _passes(reads, x) <= ONE_PASS
    made = set(jask.store.registry.live_paths()) - before
    assert made == {out.filename}  # intermediates never became stores
    jask.collect()


def test_a_pending_result_sees_the_values_before_a_later_update(small_budget, rng, dtype):
    wn, zn = rand(rng, (97, 5), dtype), rand(rng, (97, 5), dtype)
    w, z = jask.DiskArray.from_numpy(wn), jask.DiskArray.from_numpy(zn)

    @jax.jit
    def f(w, z):
        doubled = w * 2.0          # recorded, not run yet
        w.update_(z)               # ... so it must run before this
        return jask.sum(doubled), jask.sum(w)

    before, after = f(w, z)
    np.testing.assert_allclose(before, 2 * wn.sum(), **tolerance(dtype))
    np.testing.assert_allclose(after, zn.sum(), **tolerance(dtype))


def test_a_group_too_wide_for_one_band_runs_op_by_op(small_budget, rng, tmp_path, reads):
    # chunks of all rows and a few columns: one chunk-row band is the whole
    # of X, far over the budget, so the group cannot be one band task
    Xn = rand(rng, (3000, 200), np.float32)
    X = user_store(tmp_path / "X", Xn, chunks=(3000, 8))
    jask.set_memory_budget("1MB", scratch_dir=small_budget.scratch_dir)
    w = jnp.asarray(rand(rng, (200,), np.float32))
    got = jax.jit(jax.grad(lambda w, X: jask.sum(jask.square(X @ w))))(w, X)
    expect = jax.grad(lambda w, X: jnp.sum(jnp.square(X @ w)))(w, jnp.asarray(Xn))
    np.testing.assert_allclose(got, expect, rtol=1e-3)
    assert _passes(reads, X) >= 1.9  # forward and backward products, one pass each


def test_an_error_in_a_group_names_the_op(small_budget, rng, tmp_path):
    Xn = rand(rng, (400, 9), np.float32)
    X = user_store(tmp_path / "X", Xn, chunks=(50, 9), compressors=zarr.codecs.ZstdCodec())
    chunk = os.path.join(X.filename, "c", "3", "0")
    with open(chunk, "wb") as f:
        f.write(b"not zstd")
    w = jnp.ones(9, jnp.float32)
    with pytest.raises(Exception) as info:
        jax.jit(jax.grad(lambda w, X: jask.sum(X @ w)))(w, X)
    text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
    assert "dot" in text


def test_training_steps_leave_no_stores_behind(small_budget, rng):
    Xn, yn = rand(rng, (513, 7), np.float32), rand(rng, (513,), np.float32)
    X, y = jask.DiskArray.from_numpy(Xn), jask.DiskArray.from_numpy(yn)
    step = jax.jit(jax.value_and_grad(_least_squares))
    w = jnp.zeros(7, jnp.float32)
    step(w, X, y)
    jask.collect()
    live = set(jask.store.registry.live_paths())
    # (pending eager results of DiskArrays other tests of this process still hold may wait)
    waiting = set(jask.store.registry.pending())
    for _ in range(5):
        loss, g = step(w, X, y)
        w = w - 1e-4 * g
    jask.collect()
    assert set(jask.store.registry.live_paths()) == live
    assert set(jask.store.registry.pending()) <= waiting  # nothing recorded survives its program


def test_seed_step_on_disk_parameters_reads_X_once(small_budget, rng, dtype, reads):
    # the first release's example: every operand a DiskArray, w updated in place
    Xn, yn = rand(rng, (3001, 23), dtype), rand(rng, (3001, 1), dtype)
    wn = rand(rng, (23, 1), dtype)
    jask.set_memory_budget("512KB", scratch_dir=small_budget.scratch_dir)
    X, y, w = (jask.DiskArray.from_numpy(a) for a in (Xn, yn, wn))
    loss = lambda w: jask.sum(jask.square(X @ w - y))  # noqa: E731
    step = jax.jit(lambda w, lr: w.update_(w - jax.grad(loss)(w) * lr))
    step(w, 1e-4)
    g = jax.grad(lambda w: jnp.sum(jnp.square(jnp.asarray(Xn) @ w - jnp.asarray(yn))))(
        jnp.asarray(wn))
    np.testing.assert_allclose(w.to_numpy(), wn - 1e-4 * np.asarray(g), **tolerance(dtype))
    assert 0.99 <= _passes(reads, X) <= ONE_PASS, reads


def test_a_result_returned_after_an_update_holds_the_old_values(small_budget, rng, dtype):
    Xn, wn = rand(rng, (501, 6), dtype), rand(rng, (6, 1), dtype)
    X, w = jask.DiskArray.from_numpy(Xn), jask.DiskArray.from_numpy(wn)

    @jax.jit
    def f(X, w):
        prediction = X @ w                     # recorded, read after the update
        dw = jax.grad(lambda w: jask.sum(X @ w))(w)
        w.update_(w - 0.5 * dw)
        return prediction

    out = f(X, w)
    np.testing.assert_allclose(out.to_numpy(), Xn @ wn, **tolerance(dtype))
    np.testing.assert_allclose(w.to_numpy(), wn - 0.5 * Xn.sum(0)[:, None], **tolerance(dtype))
