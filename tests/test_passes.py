"""Passes over the data: variance in one pass, and grad(jit(loss)) in two.

Each test counts the bytes read from the data store (jask.track, not the
clock) and checks the values against numpy in float64 or jax.numpy + jax.grad.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import rand, to_numpy, tolerance

#: Reads of X that count as one pass (a chunk cut at a band's edge is read twice).
ONE_PASS = 1.2


@pytest.fixture
def reads():
    with jask.track() as counts:
        yield counts


def _offset_data(rng):
    """1e6 + N(0, 1) in float32: the sum-of-squares formula loses every digit."""
    return (1e6 + rng.standard_normal((1001, 37))).astype(np.float32)


def test_std_reads_X_once_and_keeps_its_digits(small_budget, rng):
    Xn = _offset_data(rng)
    exact = Xn.astype(np.float64).std(0)
    naive = np.sqrt(np.maximum(0, (Xn * Xn).mean(0) - Xn.mean(0) ** 2))
    assert np.max(np.abs(naive - exact) / exact) > 0.1  # the data is a hard case
    X = jask.from_numpy(Xn)
    for label, f in [("eager", lambda X: X.std(0)), ("jit", jax.jit(lambda X: X.std(0)))]:
        with jask.track() as counts:
            got = np.asarray(f(X))
        assert got.dtype == np.float32, label
        np.testing.assert_allclose(got, exact, rtol=1e-6, err_msg=label)
        assert 0.99 <= counts.passes(X) <= ONE_PASS, (label, counts)
    with jask.track() as counts:
        mean, std = jax.jit(lambda X: (X.mean(0), X.std(0)))(X)
    np.testing.assert_allclose(std, exact, rtol=1e-6)
    np.testing.assert_allclose(mean, Xn.astype(np.float64).mean(0), rtol=1e-6)
    assert 0.99 <= counts.passes(X) <= ONE_PASS, counts


@pytest.mark.parametrize("axis,keepdims,ddof", [(0, False, 1), (1, True, 0), (None, False, 2)])
def test_var_matches_numpy_in_float64(small_budget, rng, dtype, axis, keepdims, ddof):
    xn = rand(rng, (253, 19), dtype) * 3 + 5
    x = jask.from_numpy(xn)
    got = jask.var(x, axis=axis, keepdims=keepdims, ddof=ddof)
    expect = xn.astype(np.float64).var(axis=axis, keepdims=keepdims, ddof=ddof)
    assert to_numpy(got).dtype == jnp.var(jnp.asarray(xn), axis=axis).dtype
    np.testing.assert_allclose(to_numpy(got), expect, **tolerance(dtype))
    np.testing.assert_allclose(to_numpy(jask.std(x, axis=axis, keepdims=keepdims,
                                                 correction=ddof)),
                               np.sqrt(expect), **tolerance(dtype))


def test_var_of_float16_accumulates_wide(small_budget, rng):
    xn = (100 + rng.standard_normal((515, 9))).astype(np.float16)
    got = jask.var(jask.from_numpy(xn), axis=0)
    assert got.dtype == jnp.var(jnp.asarray(xn), axis=0).dtype == np.float16
    np.testing.assert_allclose(np.asarray(got, np.float64), xn.astype(np.float64).var(0),
                               rtol=1e-3)


def test_var_edge_cases_as_jax_numpy(small_budget):
    x = jask.from_numpy(np.array([[1.0, 2.0, 1.0], [np.nan, 4.0, np.inf], [3.0, 1.0, 2.0]],
                                 np.float32))
    ref = jnp.asarray(x.to_numpy())
    np.testing.assert_allclose(jask.var(x, 0), jnp.var(ref, 0), rtol=1e-6)  # NaN where jnp's
    np.testing.assert_array_equal(jask.var(x[:1], 0, ddof=1), jnp.var(ref[:1], 0, ddof=1))
    np.testing.assert_array_equal(jask.var(x[:2, 1:2], 0, ddof=3),
                                  jnp.var(ref[:2, 1:2], 0, ddof=3))  # N < ddof: NaN
    with pytest.raises(ValueError, match="ddof or correction"):
        jask.var(x, ddof=1, correction=1)


@pytest.mark.parametrize("axis,ddof,transform", [(0, 1, "eager"), (1, 0, "jit")])
def test_var_and_std_gradients_match_jax(small_budget, rng, axis, ddof, transform):
    xn = rand(rng, (301, 7), np.float32) + 3
    cn = rand(rng, (xn.shape[1 - axis],), np.float32)

    def loss(np_):
        def f(x, c):
            return np_.sum((np_.std(x, axis=axis, ddof=ddof) + np_.var(x, axis=axis)) * c)
        return f

    expect = jax.grad(loss(jnp))(jnp.asarray(xn), jnp.asarray(cn))
    x = jask.from_numpy(xn)
    g = jax.grad(loss(jask)) if transform == "eager" else jax.jit(jax.grad(loss(jask)))
    np.testing.assert_allclose(to_numpy(g(x, jnp.asarray(cn))), expect, rtol=2e-4, atol=2e-5)


# --- grad(jit(loss)): the forward program's residuals written in its pass --------------

def _least_squares(np_):
    def loss(w, X, y):
        return np_.sum(np_.square(X @ w - y))
    return loss


def _logistic(np_):
    def loss(params, X, y):
        z = X @ params["w"] + params["b"]
        softplus = jask.nn.softplus if np_ is jask else jax.nn.softplus
        return np_.mean(softplus(z) - y * z)
    return loss


@pytest.mark.parametrize("model", ["least_squares", "logistic"])
@pytest.mark.parametrize("transform", ["grad", "value_and_grad"])
def test_grad_of_jit_reads_X_twice(small_budget, rng, model, transform):
    """The forward program computes the loss (jax.vjp returns it: one pass)
    and writes its residuals in that pass; the backward program gets the
    cotangent only when it runs, and X.T @ (its function) reads X again."""
    Xn = rand(rng, (2003, 17), np.float32)
    yn = (rng.random(2003) > 0.5).astype(np.float32)
    jask.set_memory_budget("256KB", scratch_dir=small_budget.scratch_dir)  # X: 2 to 4 bands
    X, y = jask.from_numpy(Xn), jask.from_numpy(yn)
    if model == "least_squares":
        params, loss = jnp.asarray(rand(rng, (17,), np.float32)), _least_squares
    else:
        params = {"w": jnp.asarray(rand(rng, (17,), np.float32)), "b": jnp.float32(0.3)}
        loss = _logistic
    step = getattr(jax, transform)(jax.jit(loss(jask)))
    with jask.track() as counts:
        got = step(params, X, y)
    expect = getattr(jax, transform)(loss(jnp))(params, jnp.asarray(Xn), jnp.asarray(yn))
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expect)):
        np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-5)
    assert 1.9 <= counts.passes(X) <= 2 * ONE_PASS, counts


def test_a_program_returning_a_store_and_a_value_reads_X_once(small_budget, rng, dtype, reads):
    Xn, wn = rand(rng, (1201, 13), dtype), rand(rng, (13,), dtype)
    X = jask.from_numpy(Xn)
    prediction, total = jax.jit(lambda X, w: (X @ w, jask.sum(X @ w)))(X, jnp.asarray(wn))
    np.testing.assert_allclose(prediction.to_numpy(), Xn @ wn, **tolerance(dtype))
    np.testing.assert_allclose(total, (Xn @ wn).sum(), **tolerance(dtype))
    assert 0.99 <= reads.passes(X) <= ONE_PASS, reads


def test_a_program_returning_only_stores_reads_X_once(small_budget, rng, reads):
    xn = rand(rng, (1201, 13), np.float32)
    x = jask.from_numpy(xn)
    doubled, shifted = jax.jit(lambda x: (x * 2.0, jask.exp(x) + 1.0))(x)
    np.testing.assert_allclose(doubled.to_numpy(), xn * 2, **tolerance(np.float32))
    np.testing.assert_allclose(shifted.to_numpy(), np.exp(xn) + 1, **tolerance(np.float32))
    assert 0.99 <= reads.passes(x) <= ONE_PASS, reads
