"""The traps of the filename-in-the-type design (see shared design notes).

Each test here checks for a failure the design notes measured on that
design: fan-out gradients collided in one ``x.grad`` store, a jitted call
overwrote the arrays an earlier call returned, stores made inside compiled
calls were never removed, and disk effects ran out of program order or not
at all.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import rand, stores_on_disk, tolerance

MODES = {"eager": lambda f: f, "jit": jax.jit}


# --- 1. a value used twice gets the right gradient ----------------------------

@pytest.mark.parametrize("mode", MODES)
def test_fanout_through_dot(small_budget, rng, dtype, mode):
    x, w = rand(rng, (37, 11), dtype), rand(rng, (11, 3), dtype)
    X = jask.from_numpy(x)
    g = MODES[mode](jax.grad(lambda w: jask.sum(X @ w) + 3 * jask.sum(X @ w)))(jask.from_numpy(w))
    want = jax.grad(lambda w: jnp.sum(x @ w) + 3 * jnp.sum(x @ w))(jnp.asarray(w))
    np.testing.assert_allclose(g.to_numpy(), want, **tolerance(dtype))


@pytest.mark.parametrize("mode", MODES)
def test_fanout_elementwise(small_budget, rng, dtype, mode):
    w = rand(rng, (97, 61), dtype)
    g = MODES[mode](jax.grad(lambda w: jask.sum(2 * w) + jask.sum(w * w)))(jask.from_numpy(w))
    np.testing.assert_allclose(g.to_numpy(), 2 + 2 * w, **tolerance(dtype))


@pytest.mark.parametrize("mode", MODES)
def test_fanout_same_value_twice_in_one_op(small_budget, rng, dtype, mode):
    w = rand(rng, (97, 61), dtype)
    g = MODES[mode](jax.grad(lambda w: jask.sum(w * w)))(jask.from_numpy(w))
    np.testing.assert_allclose(g.to_numpy(), 2 * w, **tolerance(dtype))


# --- 2. returned arrays never change ------------------------------------------

def test_jit_results_are_not_overwritten_by_later_calls(small_budget, rng):
    f = jax.jit(lambda a, s: jask.mul(a, s))
    a = jask.from_numpy(rand(rng, (97, 61), np.float32))
    first = f(a, 2.0)
    kept = first.to_numpy().copy()
    second = f(a, 5.0)
    assert first.filename != second.filename
    np.testing.assert_array_equal(first.to_numpy(), kept)
    np.testing.assert_allclose(second.to_numpy(), kept * 2.5, rtol=1e-6)


def test_grad_calls_return_distinct_stores(small_budget, rng):
    w = jask.from_numpy(rand(rng, (97, 61), np.float32))
    grad = jax.grad(lambda w, s: jask.sum(jask.square(w * s)))
    g1 = grad(w, 1.0)
    kept = g1.to_numpy().copy()
    g2 = grad(w, 3.0)
    assert g1.filename != g2.filename
    np.testing.assert_array_equal(g1.to_numpy(), kept)
    np.testing.assert_allclose(g2.to_numpy(), 9 * kept, rtol=1e-5)


# --- 3. disk effects run, in program order -------------------------------------

def test_effects_keep_program_order_under_jit(small_budget, rng):
    w0, z0 = rand(rng, (97, 61), np.float32), rand(rng, (97, 61), np.float32)

    @jax.jit
    def f(w, z):
        before = jask.sum(w)
        w = w.update_(z)
        after = jask.sum(w)
        return before, after

    before, after = f(jask.from_numpy(w0), jask.from_numpy(z0))
    np.testing.assert_allclose(float(before), w0.sum(), rtol=1e-4)
    np.testing.assert_allclose(float(after), z0.sum(), rtol=1e-4)


@pytest.mark.parametrize("mode", ["jit", "grad(jit)"])
def test_discarded_update_still_runs(small_budget, rng, mode):
    w0 = rand(rng, (97, 61), np.float32)
    w, z = jask.from_numpy(w0), jask.from_numpy(np.ones_like(w0))

    def f(w, z):
        w.update_(z)  # result discarded on purpose
        return jask.sum(z * 2.0)

    if mode == "jit":
        jax.jit(f)(w, z)
    else:
        jax.grad(jax.jit(f), argnums=1)(w, z)
    np.testing.assert_array_equal(w.to_numpy(), np.ones_like(w0))


def test_constant_only_op_in_a_trace_runs_each_call(small_budget, rng):
    """An op on closed-over constants is staged, not run once at trace time."""
    x = rand(rng, (97, 61), np.float32)
    X = jask.from_numpy(x)

    @jax.jit
    def f(w):
        # X + X has no traced operand; its result must still be fresh per call.
        return (X + X) * 1.0, w * 1.0

    r1, _ = f(jask.from_numpy(x))
    r2, _ = f(jask.from_numpy(x))
    assert r1.filename != r2.filename
    np.testing.assert_allclose(r2.to_numpy(), 2 * x)
    # The seed of a backward pass is a constant-only op too.
    g = jax.jit(jax.grad(lambda w: jask.sum(w)))
    g1, g2 = g(X), g(X)
    assert g1.filename != g2.filename
    np.testing.assert_array_equal(g2.to_numpy(), np.ones_like(x))


# --- 4. stores are deleted when nothing can reach them -------------------------

def test_unreferenced_stores_are_deleted(small_budget, rng):
    a = jask.from_numpy(rand(rng, (97, 61), np.float32))
    b = a + a
    path = b.filename
    del b
    jask.collect()
    assert not os.path.exists(path)
    assert stores_on_disk(small_budget) == [a.filename]


def test_training_loop_leaves_only_live_stores(small_budget, rng):
    x, y = rand(rng, (97, 7), np.float32), rand(rng, (97, 1), np.float32)
    X, Y = jask.from_numpy(x), jask.from_numpy(y)
    w = jask.from_numpy(np.zeros((7, 1), np.float32))
    loss = lambda w: jask.sum(jask.square(X @ w - Y))
    traces = []

    @jax.jit
    def step(w, lr):
        traces.append(1)
        value, g = jax.value_and_grad(loss)(w)
        return w.update_(w - g * lr), value

    path = w.filename
    for _ in range(100):
        w, value = step(w, 0.002)
        # bounded: the stores of one step at most, never an accumulation
        assert len(stores_on_disk(small_budget)) <= 3 + 12
    assert len(traces) == 1
    assert w.filename == path
    final = w.to_numpy()  # a jask call: the last step's garbage goes now
    assert stores_on_disk(small_budget) == sorted([X.filename, Y.filename, path])
    ref = np.linalg.lstsq(x, y, rcond=None)[0]
    assert np.linalg.norm(final - ref) < 0.5 * np.linalg.norm(ref)


def test_intermediates_of_a_compiled_call_are_removed(small_budget, rng):
    a = jask.from_numpy(rand(rng, (97, 61), np.float32))

    @jax.jit
    def f(a):
        return jask.sum(a + a)

    f(a)
    jask.collect()
    assert stores_on_disk(small_budget) == [a.filename]
