"""``jax.checkpoint`` (``jax.remat``, flax's ``nn.remat``) of a function of
DiskArrays under ``jax.grad``, ``jax.value_and_grad`` and ``jax.vjp``, eager
and under ``jit``: jax.numpy's values on the in-memory copy, and the passes
over X (jask.track) next to the same without the checkpoint.

Inside a checkpoint JAX differentiates by linearizing (jask's JVP rules) and
transposing the tangent program (jask's ``transpose``), the forward computed
again in the backward pass."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask

N, D, H = 3001, 12, 8

CHECKPOINTS = {
    "checkpoint": jax.checkpoint,
    "remat": jax.remat,
    "nothing_saveable": lambda f: jax.checkpoint(
        f, policy=jax.checkpoint_policies.nothing_saveable),
    "dots_saveable": lambda f: jax.checkpoint(f, policy=jax.checkpoint_policies.dots_saveable),
    "everything_saveable": lambda f: jax.checkpoint(
        f, policy=jax.checkpoint_policies.everything_saveable),
}


def _ops(X):
    if isinstance(X, jask.DiskArray):
        return jask.square, jask.nn.softplus, jask.tanh, jask.sum, jask.mean
    return jnp.square, jax.nn.softplus, jnp.tanh, jnp.sum, jnp.mean


def losses(X, Y):
    """name -> loss(params) on jask or jnp: the GLM losses and a small MLP."""
    square, softplus, tanh, total, mean = _ops(X)

    def mlp(p):
        hidden = tanh(X @ p["w1"] + p["b1"])
        return mean(square(hidden @ p["w2"] - Y))

    return {"least-squares": lambda w: total(square(X @ w - Y)),
            "logistic": lambda w: total(softplus(X @ w) - Y * (X @ w)) / N,
            "mlp": mlp}


LOSSES = ["least-squares", "logistic", "mlp"]


def _params(name, rng):
    if name == "mlp":
        return {"w1": jnp.asarray(0.3 * rng.standard_normal((D, H)), jnp.float32),
                "b1": jnp.asarray(0.1 * rng.standard_normal(H), jnp.float32),
                "w2": jnp.asarray(0.3 * rng.standard_normal(H), jnp.float32)}
    return jnp.asarray(0.1 * rng.standard_normal(D), jnp.float32)


def _grad(f, w):
    return jax.grad(f)(w)


def _value_and_grad(f, w):
    return jax.value_and_grad(f)(w)


def _vjp(f, w):
    value, pullback = jax.vjp(f, w)
    return value, pullback(jnp.float32(1.5))


TRANSFORMS = {"grad": _grad, "value_and_grad": _value_and_grad, "vjp": _vjp}


@pytest.fixture
def data(small_budget, rng):
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = (x @ rng.standard_normal(D) + rng.standard_normal(N) > 0).astype(np.float32)
    return x, y, jask.from_numpy(x), jask.from_numpy(y)


def _close(got, want):
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5),
                 got, want)


def _passes(run, w, X):
    with jask.track() as counts:
        jax.block_until_ready(run(w))
    return counts.passes(X)


def _cases() -> list:
    """Every (loss, checkpoint, transform); in CI's run, every transform of
    ``jax.checkpoint`` and ``jax.grad`` of each policy (the rest: slow)."""
    return [pytest.param(name, checkpoint, transform,
                         marks=() if checkpoint == "checkpoint" or transform == "grad"
                         else pytest.mark.slow)
            for name in LOSSES for checkpoint in CHECKPOINTS for transform in TRANSFORMS]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name, checkpoint, transform", _cases())
def test_derivatives_of_a_checkpoint_match_jax_numpy(data, name, checkpoint, transform, jit,
                                                     rng):
    x, y, X, Y = data
    loss, ref = losses(X, Y)[name], losses(jnp.asarray(x), jnp.asarray(y))[name]
    w = _params(name, rng)
    wrap, take = CHECKPOINTS[checkpoint], TRANSFORMS[transform]
    run = (lambda w: take(wrap(loss), w))  # noqa: E731
    plain = (lambda w: take(loss, w))  # noqa: E731
    if jit:
        run, plain = jax.jit(run), jax.jit(plain)
        run(w), plain(w)  # (traced and compiled before counting)
    want = take(ref, w)
    _close(run(w), want)
    _close(take(wrap(ref), w), want)  # (the reference is jax's own checkpoint's too)
    rematted, without = _passes(run, w, X), _passes(plain, w, X)
    if jit:  # the gradient alone in one pass; with the value, the forward's pass and the
        # backward's (the forward computed again inside it) are two: the checkpoint's
        # boundary is one the rewrite does not merge across
        assert 0.99 <= rematted <= (1.01 if transform == "grad" else 2.01), rematted
    else:  # eagerly at most one pass more than without the checkpoint (mostly fewer)
        assert rematted <= without + 1.01, (rematted, without)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("reduction", ["max", "prod", "logsumexp"])
def test_a_reduction_without_a_transpose_is_refused_naming_checkpoint(data, reduction, jit):
    """A max's, product's or logsumexp's tangent reads the tangent it is
    linear in to choose (or weigh) elements: no transpose; refused, naming
    jax.checkpoint and what to write instead, never a wrong value."""
    _, _, X, _ = data
    reduce = getattr(jask, reduction)
    run = jax.grad(jax.checkpoint(lambda w: reduce(jask.tanh(X @ w))))
    with pytest.raises(NotImplementedError, match=f"jask.{reduction}_jvp.*jax.checkpoint"
                                                  ".*without jax.checkpoint"):
        (jax.jit(run) if jit else run)(jnp.full(D, 0.1, jnp.float32))
