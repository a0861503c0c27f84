"""A jitted step run as compiled pieces with its band groups on the device
(jask.core.rewrite), on JAX's CPU backend: values against jax.numpy and
the compiled host path, one pass over X, the pieces cut where the groups
sit, derivatives unchanged, and a jitted training loop without a hang."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from jask.core import device as on_device
from jask.core.rewrite import pieces, rewritten_jaxpr, split


@pytest.fixture
def cpu_device(jask_scratch):
    jask.set_memory_budget("4MiB", scratch_dir=jask_scratch.path)
    jask.set_device(jax.devices("cpu")[0], memory="2MiB")
    yield jax.devices("cpu")[0]
    jask.set_device()


def _logistic(w, X, y, m=jask):
    z = X @ w
    return m.mean(m.logaddexp(0.0, z) - y * z)


def _least_squares(w, X, y, m=jask):
    r = X @ w - y
    return m.mean(r * r)


def _data(rng, rows=30_000, cols=10):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = (rng.random(rows) > 0.5).astype(np.float32)
    return x, y, jask.from_numpy(x), jask.from_numpy(y)


@pytest.fixture
def split_calls(monkeypatch):
    calls = []
    original = pieces.run_split
    monkeypatch.setattr(pieces, "run_split", lambda *a: calls.append(1) or original(*a))
    return calls


@pytest.mark.parametrize("loss", [_logistic, _least_squares])
def test_jitted_value_and_grad_runs_in_pieces_one_pass(cpu_device, rng, split_calls, loss):
    x, y, X, Y = _data(rng)
    w = jnp.asarray(rng.standard_normal(10).astype(np.float32) * 0.1)
    step = jax.jit(jax.value_and_grad(loss))
    with jax.default_matmul_precision("highest"):
        rv, rg = jax.value_and_grad(loss)(w, jnp.asarray(x), jnp.asarray(y), jnp)
        with jask.track() as t:
            v, g = step(w, X, Y)
    assert split_calls == [1]
    assert t.passes(X) == 1.0 and t.graphs == 0  # one group on the device: loss and gradient
    assert on_device.last_stream().plan.device_bytes <= on_device.last_stream().share
    np.testing.assert_allclose(v, rv, rtol=2e-6)
    np.testing.assert_allclose(g, rg, rtol=2e-5, atol=1e-7)
    jask.set_device("host")
    hv, hg = step(w, X, Y)  # the compiled program, its group in a callback
    assert split_calls == [1]
    np.testing.assert_allclose(v, hv, rtol=2e-6)
    np.testing.assert_allclose(g, hg, rtol=2e-5, atol=1e-7)


def test_split_cuts_at_the_band_group(cpu_device, rng):
    x, y, X, Y = _data(rng, 1_000, 4)

    def step(w, X, y):
        v, g = jax.value_and_grad(_logistic)(jnp.tanh(w), X, y)
        return v * 2.0, w - 0.1 * g

    closed = jax.make_jaxpr(step)(jnp.zeros(4), X, Y)
    done = split(rewritten_jaxpr(closed, True))
    kinds = [p.kind for p in done.pieces]
    assert done.groups == 1
    assert kinds[0] == "program" and kinds[-1] == "program"  # tanh before, the update after
    together = [p for p in done.pieces if p.kind == "eqn" and pieces._is_group(p.call)]
    assert len(together) == 1
    got = pieces.run_split(done, [jnp.full(4, 0.3), X, Y])
    want = jax.jit(step)(jnp.full(4, 0.3), X, Y)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_without_a_group_or_device_the_program_is_compiled(jask_scratch, rng, split_calls):
    x, y, X, Y = _data(rng, 2_000, 4)
    jask.set_memory_budget("4MiB", scratch_dir=jask_scratch.path)
    value = jax.jit(_logistic)(jnp.zeros(4), X, Y)  # no device configured (CPU: "auto")
    assert split_calls == []
    jask.set_device(jax.devices("cpu")[0])
    try:
        out = jax.jit(lambda X: X * 2.0)(X)  # a store op alone: no group to stream
        assert split_calls == []
        np.testing.assert_allclose(out.to_numpy(), 2 * x)
    finally:
        jask.set_device()
    np.testing.assert_allclose(value, np.log(2.0), rtol=1e-6)


def test_derivatives_of_a_jitted_loss_keep_their_values(cpu_device, rng):
    x, y, X, Y = _data(rng, 5_000, 6)
    w = jnp.asarray(rng.standard_normal(6).astype(np.float32) * 0.1)
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    with jax.default_matmul_precision("highest"):
        g = jax.grad(jax.jit(_least_squares))(w, X, Y)
        rg = jax.grad(_least_squares)(w, jx, jy, jnp)
        np.testing.assert_allclose(g, rg, rtol=2e-5, atol=1e-7)
        v = jax.vmap(jax.jit(_logistic), in_axes=(0, None, None))(jnp.stack([w, 2 * w]), X, Y)
        rv = jax.vmap(lambda w: _logistic(w, jx, jy, jnp))(jnp.stack([w, 2 * w]))
        np.testing.assert_allclose(v, rv, rtol=2e-6)


def _train(X, Y, steps: int):
    step = jax.jit(lambda w: w - 0.5 * jax.grad(_logistic)(w, X, Y))
    w = jnp.zeros(X.shape[1], jnp.float32)
    for _ in range(steps):
        w = step(w)
    return w


def _train_reference(x, y, steps: int):
    step = jax.jit(lambda w: w - 0.5 * jax.grad(_logistic)(w, x, y, jnp))
    w = jnp.zeros(x.shape[1], jnp.float32)
    for _ in range(steps):
        w = step(w)
    return w


@pytest.mark.parametrize("steps", [20, pytest.param(1_000, marks=pytest.mark.slow)])
def test_jitted_training_loop_soak(cpu_device, rng, split_calls, steps):
    x, y, X, Y = _data(rng, 4_000, 5)
    with jax.default_matmul_precision("highest"):
        w = _train(X, Y, steps)
        ref = _train_reference(jnp.asarray(x), jnp.asarray(y), steps)
    assert len(split_calls) == steps
    np.testing.assert_allclose(w, ref, rtol=1e-4, atol=1e-5)


def _descend(w, X, y, m=jask, steps=6):
    """A jitted training loop: ``steps`` gradient steps in ``lax.fori_loop``."""
    return jax.lax.fori_loop(0, steps, lambda i, w: w - 0.5 * jax.grad(_logistic)(w, X, y, m), w)


def _until_small(w, X, y, m=jask):
    """Gradient steps in ``lax.while_loop`` until the gradient is small; the steps taken."""
    def more(c):
        return (jnp.linalg.norm(c[1]) > 2e-3) & (c[2] < 40)

    def step(c):
        g = jax.grad(_logistic)(c[0], X, y, m)
        return c[0] - 2.0 * g, g, c[2] + 1

    w, _, k = jax.lax.while_loop(more, step, (w, jnp.ones_like(w), 0))
    return w, k


def _scanned(w, X, y, m=jask, reverse=False):
    """``lax.scan`` over step sizes: the losses as ``ys``, the weights carried."""
    def step(w, rate):
        v, g = jax.value_and_grad(_logistic)(w, X, y, m)
        return w - rate * g, v

    return jax.lax.scan(step, w, jnp.linspace(0.2, 1.0, 5), reverse=reverse)


def _nested(w, X, y, m=jask):
    """A ``fori_loop`` of ``fori_loop``s: 2 x 3 gradient steps."""
    return jax.lax.fori_loop(0, 2, lambda i, w: _descend(w, X, y, m, steps=3) * 0.9, w)


def _scanned_back(w, X, y, m=jask):
    return _scanned(w, X, y, m, reverse=True)


#: Each loop and the passes over X it makes (None: the steps it returns).
LOOPS = [(_descend, 6), (_until_small, None), (_scanned, 5), (_scanned_back, 5), (_nested, 6)]


@pytest.mark.parametrize("fn, passes", LOOPS, ids=["fori", "while", "scan", "scan-reverse",
                                                   "nested"])
def test_band_groups_inside_loops_run_on_the_device(cpu_device, rng, split_calls, fn, passes):
    x, y, X, Y = _data(rng, 20_000, 6)
    w = jnp.asarray(rng.standard_normal(6).astype(np.float32) * 0.1)
    step = jax.jit(fn)
    with jax.default_matmul_precision("highest"):
        ref = jax.jit(lambda w: fn(w, jnp.asarray(x), jnp.asarray(y), jnp))(w)
        with jask.track() as t:
            got = step(w, X, Y)
        jask.set_device("host")
        host = step(w, X, Y)  # the compiled program, its groups in the loop's callbacks
    assert split_calls == [1]
    passes = passes or int(ref[1])
    assert passes > 1 and t.passes(X) == passes and t.graphs == 0  # a group each iteration
    assert 0 < t.peak_device_bytes <= on_device.last_stream().share
    for a, b, c in zip(jax.tree.leaves(got), jax.tree.leaves(ref), jax.tree.leaves(host)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_a_loop_without_a_group_stays_compiled(cpu_device, rng, split_calls):
    x, y, X, Y = _data(rng, 2_000, 4)
    doubled, w = jax.jit(lambda X, w: (X * 2.0, jax.lax.fori_loop(0, 3, lambda i, w: w * 2, w)))(
        X, jnp.ones(4))  # a store op and a loop of JAX's own: no band group to stream
    assert split_calls == []
    np.testing.assert_allclose(doubled.to_numpy(), 2 * x)
    np.testing.assert_allclose(w, np.full(4, 8.0))
    with jask.track() as t:
        total = jax.jit(lambda w, X: jax.lax.fori_loop(0, 3, lambda i, w: w + jask.sum(X), w))(
            jnp.zeros(()), X)  # a sum alone is a group: streamed each iteration
    assert split_calls == [1] and t.passes(X) == 3 and t.graphs == 0
    np.testing.assert_allclose(total, 3 * x.sum(dtype=np.float64), rtol=1e-4)


def test_jitted_gradient_error_no_larger_than_jax_numpys(cpu_device, rng):
    """The accuracy promise on the device path, against float64 at
    ``highest``: the band group's gradient (partials folded across bands by
    a compensated sum) errs no more than jax.numpy's own gradient over the
    rows in memory. The data: near the fitted weights, where the gradient is
    a small difference of large sums."""
    rows, cols = 60_000, 64
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    w = (rng.standard_normal(cols) * 0.05).astype(np.float32)
    y = (x @ w + rng.standard_normal(rows).astype(np.float32) > 0).astype(np.float32)
    X, Y = jask.from_numpy(x), jask.from_numpy(y)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    z = x64 @ w.astype(np.float64)
    ref = x64.T @ (1 / (1 + np.exp(-z)) - y64) / rows
    step = jax.jit(jax.value_and_grad(_logistic), static_argnums=3)
    with jax.default_matmul_precision("highest"):
        _, g = step(w, X, Y, jask)
        _, rg = step(w, jnp.asarray(x), jnp.asarray(y), jnp)
    assert len(on_device.last_stream().plan.bands) > 1
    assert _rel(g, ref) <= max(_rel(rg, ref), 1e-6)


def _rel(value, ref) -> float:
    return float(np.abs(np.asarray(value, np.float64) - ref).max() / np.abs(ref).max())


#: A jitted helper, as users write one: called from a jitted step.
_jitted_logistic = jax.jit(_logistic, static_argnums=3)


def _helper_step(w, X, y, m=jask):
    """``jax.value_and_grad`` of a jitted helper inside a jitted step."""
    v, g = jax.value_and_grad(_jitted_logistic)(w, X, y, m)
    return v, w - 0.5 * g


def _helper_twice(w, X, y, m=jask):
    """One jitted helper called twice: its program inlined twice."""
    return _jitted_logistic(w, X, y, m) + _jitted_logistic(2.0 * w, X, y, m)


def _checkpointed(w, X, y, m=jask):
    """A ``jax.checkpoint``ed helper (a ``remat`` equation) beside a jitted one."""
    return (jax.checkpoint(lambda w: _logistic(w, X, y, m))(w)
            + jax.jit(_least_squares, static_argnums=3)(w, X, y, m))


def _branching(w, X, y, m=jask):
    """``lax.cond`` on a value computed in the step, a band group in each branch."""
    return jax.lax.cond(jnp.sum(w) > 0,
                        lambda w: jax.grad(_logistic)(w, X, y, m),
                        lambda w: 2.0 * jax.grad(_least_squares)(w, X, y, m), w)


def _switching(w, X, y, m=jask):
    """``lax.switch`` over three branches, one without a band group."""
    index = jnp.argmax(jnp.abs(w)) % 3
    return jax.lax.switch(index, [lambda w: jax.grad(_logistic)(w, X, y, m),
                                  lambda w: w * 3.0,
                                  lambda w: jax.grad(_least_squares)(w, X, y, m)], w)


#: Each step, its weights (a sign picking a branch), and the passes over X it makes.
NESTED = [(_helper_step, 1.0, 1), (_helper_twice, 1.0, 1), (_checkpointed, 1.0, 1),
          (_branching, 1.0, 1), (_branching, -1.0, 1)]


@pytest.mark.parametrize("fn, sign, passes", NESTED,
                         ids=["jit-helper", "jit-helper-twice", "checkpoint", "cond-true",
                              "cond-false"])
def test_band_groups_in_nested_programs_run_on_the_device(cpu_device, rng, split_calls, fn,
                                                          sign, passes):
    x, y, X, Y = _data(rng, 20_000, 6)
    w = sign * jnp.abs(jnp.asarray(rng.standard_normal(6).astype(np.float32) * 0.1))
    step = jax.jit(fn)
    with jax.default_matmul_precision("highest"):
        ref = jax.jit(lambda w: fn(w, jnp.asarray(x), jnp.asarray(y), jnp))(w)
        with jask.track() as t:
            got = step(w, X, Y)
        jask.set_device("host")
        with jask.track() as h:
            host = step(w, X, Y)  # the compiled program, its groups in callbacks
    assert split_calls == [1]
    assert t.passes(X) == passes and t.graphs == 0 and h.peak_device_bytes == 0
    assert 0 < t.peak_device_bytes <= on_device.last_stream().share
    for a, b, c in zip(jax.tree.leaves(got), jax.tree.leaves(ref), jax.tree.leaves(host)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_switch_runs_the_chosen_branch_only(cpu_device, rng, split_calls, index):
    x, y, X, Y = _data(rng, 10_000, 3)
    w = jnp.asarray(np.eye(3, dtype=np.float32)[index] * 0.2 + 0.01)
    with jax.default_matmul_precision("highest"):
        ref = _switching(w, jnp.asarray(x), jnp.asarray(y), jnp)
        with jask.track() as t:
            got = jax.jit(_switching)(w, X, Y)
    assert split_calls == [1]
    assert t.passes(X) == (0 if index == 1 else 1)  # the branch not taken reads nothing
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_a_jitted_loss_differentiated_eagerly_runs_on_the_device(cpu_device, rng,
                                                                 split_calls):
    """``jax.grad(jax.jit(f))``: JAX runs the forward program (the loss and
    its residuals) and the backward one, each an eager jitted call, so each
    is split: two passes over X, as on the host."""
    x, y, X, Y = _data(rng, 20_000, 6)
    w = jnp.asarray(rng.standard_normal(6).astype(np.float32) * 0.1)
    grad = jax.value_and_grad(_jitted_logistic)
    with jax.default_matmul_precision("highest"):
        rv, rg = jax.value_and_grad(_logistic)(w, jnp.asarray(x), jnp.asarray(y), jnp)
        with jask.track() as t:
            v, g = grad(w, X, Y)
        jask.set_device("host")
        with jask.track() as h:
            hv, hg = grad(w, X, Y)
    assert split_calls == [1, 1]  # the forward program and the backward one
    assert t.passes(X) == h.passes(X) == 2 and t.peak_device_bytes > 0
    for a, b in [(v, rv), (g, rg), (v, hv), (g, hg)]:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
