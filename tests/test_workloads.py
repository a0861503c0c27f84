"""Three real models end to end on disk-resident data with in-memory
parameters, against the same model in jax.numpy: logistic regression with
optax.adam, a two-layer MLP with a clipped adam chain, and PCA by power
iteration on mean-centred data. The budget forces many tiles."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jask


@pytest.fixture
def data(small_budget):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((301, 9)).astype(np.float32) * np.linspace(0.5, 3, 9, dtype=np.float32)
    true_w = rng.standard_normal(9).astype(np.float32)
    y = (x @ true_w + 0.3 * rng.standard_normal(301) > 0).astype(np.float32)
    return x, y


def _logistic_loss(lib, params, X, y):
    logits = X @ params["w"] + params["b"]
    if lib is jask:
        return jask.mean(jask.nn.softplus(logits) - y * logits)
    return jnp.mean(jax.nn.softplus(logits) - y * logits)


def _train(loss, params, opt, steps, *data):
    state = opt.init(params)

    @jax.jit
    def step(params, state, *data):
        value, grads = jax.value_and_grad(loss)(params, *data)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    losses = []
    for _ in range(steps):
        params, state, value = step(params, state, *data)
        losses.append(float(value))
    return params, losses


def test_logistic_regression_with_adam(data):
    x, y = data
    X, Y = jask.from_numpy(x), jask.from_numpy(y)
    params = {"w": jnp.zeros(9, jnp.float32), "b": jnp.zeros((), jnp.float32)}
    opt = optax.adam(0.05)
    got, got_losses = _train(lambda p, X, y: _logistic_loss(jask, p, X, y), params, opt, 6, X, Y)
    want, want_losses = _train(lambda p, X, y: _logistic_loss(jnp, p, X, y), params, opt, 6,
                               jnp.asarray(x), jnp.asarray(y))
    assert all(isinstance(v, jax.Array) for v in jax.tree.leaves(got))
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    assert got_losses[-1] < got_losses[0]


def _mlp_loss(lib, params, X, y):
    act = jask.tanh if lib is jask else jnp.tanh
    mean = jask.mean if lib is jask else jnp.mean
    h = act(X @ params["w1"] + params["b1"])
    out = h @ params["w2"] + params["b2"]
    return mean((out - y) ** 2)


def test_two_layer_mlp_with_a_clipped_adam_chain(data):
    x, y = data
    X, Y = jask.from_numpy(x), jask.from_numpy(y)
    rng = np.random.default_rng(3)
    params = {"w1": jnp.asarray(rng.standard_normal((9, 5)).astype(np.float32) * 0.3),
              "b1": jnp.zeros(5, jnp.float32),
              "w2": jnp.asarray(rng.standard_normal(5).astype(np.float32) * 0.3),
              "b2": jnp.zeros((), jnp.float32)}
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(0.02))
    got, got_losses = _train(lambda p, X, y: _mlp_loss(jask, p, X, y), params, opt, 5, X, Y)
    want, want_losses = _train(lambda p, X, y: _mlp_loss(jnp, p, X, y), params, opt, 5,
                               jnp.asarray(x), jnp.asarray(y))
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4)
    for k in params:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4)
    assert got_losses[-1] < got_losses[0]


def test_pca_by_power_iteration_on_centred_data(data):
    x, _ = data
    X = jask.from_numpy(x)
    mu = jask.mean(X, axis=0)                       # in memory: (9,)
    sigma = jask.std(X, axis=0)
    Z = (X - mu) / sigma                            # standardised, on disk
    np.testing.assert_allclose(jask.mean(Z, axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(jask.std(Z, axis=0), 1, rtol=1e-4)
    z = (x - x.mean(0)) / x.std(0)
    v = ref = np.ones(9, np.float32) / 3
    for _ in range(40):
        v = jask.materialize(Z.T @ (Z @ v))
        v = v / jnp.linalg.norm(v)
        ref = z.T @ (z @ ref)
        ref = ref / np.linalg.norm(ref)
    np.testing.assert_allclose(v, ref, atol=2e-4)
    # and it is heading for the top principal axis
    top = np.linalg.svd(z, full_matrices=False)[2][0]
    assert abs(float(np.dot(np.asarray(v), top))) > abs(float(np.dot(np.ones(9) / 3, top)))
