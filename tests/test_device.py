"""The device path (jask.core.device, jask.engine.device) on JAX's CPU backend.

CI has no accelerator: the same code runs with the CPU device named in the
configuration (``jask.set_device(jax.devices("cpu")[0])``). Values against
float64 (an error no larger than jax.numpy's, at ``highest``), one pass over
the data by jask's counters, device bytes within the device share, and the
host path unchanged when the device path is off.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from jask.base.memory import BudgetError
from jask.core import device as on_device
from jask.store import registry


@pytest.fixture
def cpu_device(jask_scratch):
    """A budget of 4 MiB and the CPU device as the target, with a share of
    2 MiB: many bands, several in flight."""
    jask.set_memory_budget("4MiB", scratch_dir=jask_scratch.path)
    jask.set_device(jax.devices("cpu")[0], memory="2MiB")
    yield jax.devices("cpu")[0]
    jask.set_device()


def _store(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) + 3  # a mean: sums that cancel nothing
    return x, jask.from_numpy(x)


def _rel(value, ref) -> float:
    return float(np.abs(np.asarray(value, np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("shape", [(60_000, 16), (9_999, 33), (100, 3)])
def test_gram_on_device_values_one_pass_device_bytes(cpu_device, rng, shape):
    x, X = _store(rng, shape)
    ref = x.astype(np.float64).T @ x.astype(np.float64)
    with jax.default_matmul_precision("highest"):
        expected = _rel(jnp.asarray(x).T @ jnp.asarray(x), ref)
        with jask.track() as t:
            gram = np.asarray(X.T @ X)
    assert _rel(gram, ref) <= max(expected, 4 * np.finfo(np.float32).eps)
    assert t.passes(X) == 1.0 and t.graphs == 0  # no Dask graph: streamed to the device
    streamed = on_device.last_stream()
    assert streamed.share == 2 * 2**20
    assert streamed.plan.device_bytes <= streamed.share
    assert 0 < streamed.peak_device_bytes <= streamed.share
    if shape[0] > 50_000:  # slots refilled once their band has been folded in
        assert len(streamed.plan.bands) > streamed.plan.in_flight + streamed.plan.readers


def test_product_of_two_stores_and_dot(cpu_device, rng):
    x, X = _store(rng, (5_000, 12))
    y, Y = _store(rng, (5_000, 7))
    ref = x.astype(np.float64).T @ y.astype(np.float64)
    with jax.default_matmul_precision("highest"):
        expected = _rel(jnp.asarray(x).T @ jnp.asarray(y), ref)
        with jask.track() as t:
            both = np.asarray(jask.dot(X.T, Y))
    assert _rel(both, ref) <= max(expected, 4 * np.finfo(np.float32).eps)
    assert t.passes(X) == 1.0 and t.passes(Y) == 1.0 and t.graphs == 0


@pytest.mark.parametrize("axis", [None, 0, (0, 1)])
def test_sum_on_device_stays_there(cpu_device, rng, axis):
    x, X = _store(rng, (30_000, 8))
    ref = x.astype(np.float64).sum(axis=axis)
    expected = _rel(jnp.sum(jnp.asarray(x), axis=axis), ref)
    with jask.track() as t:
        total = jask.sum(X, axis=axis)
    assert isinstance(total, jax.Array) and total.devices() == {cpu_device}
    assert total.shape == np.shape(ref) and total.dtype == np.float32
    one_rounding = float(np.finfo(np.float32).eps)  # the result's own rounding to float32
    assert _rel(total, ref) <= expected + one_rounding
    assert t.passes(X) == 1.0 and t.graphs == 0


def test_what_the_device_path_leaves_to_the_host(cpu_device, rng):
    """A sum keeping the rows, an integer store: host graphs (a sum of a
    pending ``X * 2`` is a band group: on the device, read once)."""
    x, X = _store(rng, (2_000, 4))
    for run, ref in [(lambda: np.asarray(jask.sum(X, axis=1)), x.sum(1)),
                     (lambda: np.asarray(jask.sum(jask.from_numpy(np.arange(10)))), 45)]:
        with jask.track() as t:
            value = run()
        np.testing.assert_allclose(value, ref, rtol=1e-5)
        assert t.graphs >= 1
    with jask.track() as t:
        value = jask.sum(X * 2)
    np.testing.assert_allclose(value, (x.astype(np.float64) * 2).sum(), rtol=1e-6)
    assert t.graphs == 0 and t.passes(X) == 1.0


def test_host_path_unchanged_when_off(jask_scratch, rng):
    jask.set_memory_budget("4MiB", scratch_dir=jask_scratch.path)
    x, X = _store(rng, (4_000, 8))
    for device in ("auto", "host"):  # "auto" on a CPU-only machine: the host
        jask.set_device(device)
        before = on_device.last_stream()
        with jask.track() as t:
            gram, total = np.asarray(X.T @ X), jask.sum(X)
        assert t.graphs >= 2 and on_device.last_stream() is before
        np.testing.assert_allclose(gram, x.astype(np.float64).T @ x, rtol=1e-5)
        np.testing.assert_allclose(total, x.astype(np.float64).sum(), rtol=1e-6)
    jask.set_device()


def _pending_stores() -> set:
    return {path for path, r in list(registry._records.items()) if r.deferred is not None}


def test_device_share_too_small_is_a_budget_error(cpu_device, rng):
    _, X = _store(rng, (1_000, 300))
    jask.set_device(cpu_device, memory=2**20)  # partials alone: 4 x 360 kB
    pending = _pending_stores()  # (an earlier test's, alive in this worker)
    with jask.track() as t, pytest.raises(BudgetError, match="device share"):
        X.T @ X
    assert _pending_stores() == pending  # the refused op left no pending store
    assert t.tiles_read == 0  # refused before anything is read


def test_set_device_checks_its_arguments():
    with pytest.raises(ValueError, match="'auto', 'host' or a jax.Device"):
        jask.set_device("tpu")
    with pytest.raises(TypeError, match="jax.Device"):
        jask.set_device(3)
    with pytest.raises(ValueError, match="memory budget"):
        jask.set_device("host", memory="lots")
    jask.set_device()


def _logistic(w, X, y, m):
    z = X @ w
    return m.mean(m.logaddexp(0.0, z) - y * z)


def _least_squares(w, X, y, m):
    r = X @ w - y
    return m.mean(r * r)


def _in_float64(loss, w, x, y):
    """The loss and its gradient in float64 by numpy."""
    x, y, w = x.astype(np.float64), y.astype(np.float64), w.astype(np.float64)
    z = x @ w
    if loss is _logistic:
        return np.mean(np.logaddexp(0, z) - y * z), x.T @ (1 / (1 + np.exp(-z)) - y) / len(y)
    return np.mean((z - y) ** 2), 2 * x.T @ (z - y) / len(y)


@pytest.mark.parametrize("loss", [_logistic, _least_squares])
def test_eager_value_and_grad_band_groups_on_device(cpu_device, rng, loss):
    """Both band groups of an eager value_and_grad (the loss, then X.T @ g) on
    the device: no Dask graph, X read once by each, as the host path does."""
    x, X = _store(rng, (40_000, 12))
    y = (rng.random(40_000) > 0.5).astype(np.float32)
    Y = jask.from_numpy(y)
    w = jnp.asarray(rng.standard_normal(12).astype(np.float32) * 0.05)
    ref_v, ref_g = _in_float64(loss, np.asarray(w), x, y)
    with jax.default_matmul_precision("highest"):
        jv, jg = jax.value_and_grad(loss)(w, jnp.asarray(x), jnp.asarray(y), jnp)
        with jask.track() as t:
            v, g = jax.value_and_grad(loss)(w, X, Y, jask)
    eps = float(np.finfo(np.float32).eps)
    assert abs(float(v) - ref_v) <= abs(float(jv) - ref_v) + 4 * eps * abs(ref_v)
    assert _rel(g, ref_g) <= _rel(jg, ref_g) + 4 * eps
    assert t.passes(X) == 2.0 and t.graphs == 0  # the loss's group, then the gradient's
    streamed = on_device.last_stream()
    assert streamed.plan.device_bytes <= streamed.share
    assert 0 < streamed.peak_device_bytes <= streamed.share
    assert len(streamed.plan.bands) > 1


def test_eager_training_loop_compiles_each_group_once(cpu_device, rng):
    from jask.core import device_groups

    x, X = _store(rng, (8_000, 6))
    y = (rng.random(8_000) > 0.5).astype(np.float32)
    Y = jask.from_numpy(y)
    w = jnp.zeros(6, jnp.float32)
    step = jax.value_and_grad(_logistic)
    w = w - 0.1 * step(w, X, Y, jask)[1]
    compiled = len(device_groups._programs)
    ref = jnp.zeros(6, jnp.float32)
    ref = ref - 0.1 * step(ref, jnp.asarray(x), jnp.asarray(y), jnp)[1]
    for _ in range(3):
        w = w - 0.1 * step(w, X, Y, jask)[1]
        ref = ref - 0.1 * step(ref, jnp.asarray(x), jnp.asarray(y), jnp)[1]
    assert len(device_groups._programs) == compiled  # the same groups: programs reused
    np.testing.assert_allclose(w, ref, rtol=1e-4, atol=1e-6)


def test_group_with_a_users_function_stays_on_the_host(cpu_device, rng):
    x, X = _store(rng, (4_000, 4))
    w = jnp.ones(4, jnp.float32)
    with jask.track() as t:
        value = jask.sum(jask.map(lambda b: b * 2.0, X @ w))
    np.testing.assert_allclose(value, 2 * (x.astype(np.float64) @ np.ones(4)).sum(), rtol=1e-5)
    assert t.graphs >= 1


def test_track_reports_peak_device_bytes_within_the_share(cpu_device, rng):
    """``jask.track`` reports the most bytes a stream held on the device: the
    bands in flight and the partials, measured at every band, within the
    device share (a store of 7.7 MiB through a share of 2 MiB)."""
    x, X = _store(rng, (60_000, 32))
    y = (rng.random(60_000) > 0.5).astype(np.float32)
    Y = jask.from_numpy(y)
    w = jnp.zeros(32, jnp.float32)
    share = 2 * 2**20
    runs = {"product": lambda: np.asarray(X.T @ X),
            "row sum": lambda: jask.sum(X, axis=0),
            "band groups": lambda: jax.value_and_grad(_logistic)(w, X, Y, jask),
            "jitted step": lambda: jax.jit(jax.value_and_grad(_logistic), static_argnums=3)(
                w, X, Y, jask)}
    for name, run in runs.items():
        with jask.track() as t:
            jax.block_until_ready(run())
        assert t.graphs == 0, name  # streamed to the device, not a host graph
        band = on_device.last_stream().plan.band_bytes
        assert band < X.nbytes / 4, name  # many bands: the store does not fit the share
        assert band <= t.peak_device_bytes <= share, (name, t.peak_device_bytes)
        assert "device: peak" in repr(t)


def test_track_reports_no_device_bytes_on_the_host_path(jask_scratch, rng):
    jask.set_memory_budget("4MiB", scratch_dir=jask_scratch.path)
    _, X = _store(rng, (4_000, 8))
    jask.set_device("host")
    with jask.track() as t:
        np.asarray(X.T @ X)
    assert t.peak_device_bytes == 0 and "device:" not in repr(t)
    jask.set_device()


@pytest.mark.parametrize("loss", [_logistic, _least_squares])
@pytest.mark.parametrize("jitted", [False, True])
def test_hessian_weighted_gram_on_device(cpu_device, rng, loss, jitted):
    """``jax.hessian`` of a GLM: its group's weighted Gram product (``X.T @
    (c * X)`` a band, times the tangents at the end) runs on the device as
    the other groups do: no Dask graph, one pass when jitted (eagerly, the
    loss's, tangent's and gradient's groups first, as on the host), device
    bytes within the share; values against jax.numpy's hessian."""
    p = 24
    x = rng.standard_normal((30_000, p)).astype(np.float32)  # centred: curvature not vanishing
    X = jask.from_numpy(x)
    y = (rng.random(30_000) > 0.5).astype(np.float32)
    Y = jask.from_numpy(y)
    w = jnp.asarray(rng.standard_normal(p).astype(np.float32) * 0.05)
    hessian = jax.hessian(loss)
    if jitted:
        hessian = jax.jit(hessian, static_argnums=3)
    with jax.default_matmul_precision("highest"):
        want = jax.hessian(loss)(w, jnp.asarray(x), jnp.asarray(y), jnp)
        with jask.track() as t:
            got = np.asarray(hessian(w, X, Y, jask))
    ref = np.asarray(want, np.float64)
    assert got.shape == (p, p)
    assert _rel(got, ref) <= 1e-5
    assert t.graphs == 0 and t.ran == []  # every group streamed to the device
    assert t.passes(X) == (1.0 if jitted else 4.0)
    streamed = on_device.last_stream()
    assert streamed.plan.device_bytes <= streamed.share
    assert 0 < t.peak_device_bytes <= streamed.share
    assert len(streamed.plan.bands) > 1
