"""jask.optim against optax itself, one table of optimizers (as optax's
alias_test): in-memory pytrees, DiskArray parameters and mixed pytrees,
float32 and float64, eager and under jax.jit, with schedules, under a
budget that splits every leaf into many tiles."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jask
from helpers import bytes_on_disk, to_numpy, tolerance
from jask.testing import leaked_stores

SCHEDULE = optax.exponential_decay(0.05, transition_steps=1, decay_rate=0.7)


def _ndim_mask(params):
    return jax.tree.map(lambda x: x.ndim > 1, params)


#: name -> a function of the module (jask.optim or optax) giving the transformation
OPTIMIZERS = {
    "sgd": lambda m: m.sgd(0.1),
    "sgd_momentum_schedule": lambda m: m.sgd(SCHEDULE, momentum=0.9),
    "sgd_nesterov": lambda m: m.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": lambda m: m.adam(0.01),
    "adam_schedule": lambda m: m.adam(SCHEDULE, b1=0.8, eps_root=1e-8),
    "adam_nesterov": lambda m: m.adam(0.01, nesterov=True),
    "adamw": lambda m: m.adamw(SCHEDULE, weight_decay=0.1),
    "adamw_masked": lambda m: m.adamw(0.01, weight_decay=SCHEDULE, mask=_ndim_mask),
    "decay_schedule_sgd": lambda m: optax.chain(m.add_decayed_weights(SCHEDULE, _ndim_mask),
                                                m.sgd(0.1)),
    "clip_adam_chain": lambda m: optax.chain(m.clip_by_global_norm(3.0), m.scale_by_adam(),
                                             optax.scale_by_learning_rate(SCHEDULE)),
    "decay_trace_chain": lambda m: optax.chain(m.add_decayed_weights(0.01),
                                               m.trace(0.9, nesterov=True), optax.scale(-0.1)),
}
STEPS = 3
SHAPES = {"w": (67, 45), "b": (45,), "s": ()}


def _params(rng, dtype):
    return {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}


def _grads(rng, dtype):
    return [{k: (rng.standard_normal(s) * 0.3).astype(dtype) for k, s in SHAPES.items()}
            for _ in range(STEPS)]


def _run(tx, params, grads, jit, fused=False):
    """STEPS optimizer steps with fixed gradients; the final parameters.
    ``fused``: by jask.optim.step (update and apply in one pass)."""
    def step(params, state, g):
        if fused:
            return jask.optim.step(tx, g, state, params)
        updates, state = tx.update(g, state, params)
        return jask.optim.apply_updates(params, updates), state

    step = jax.jit(step) if jit else step
    state = tx.init(params)
    for g in grads:
        params, state = step(params, state, g)
    return params, state


def _reference(name, params, grads):
    tx = OPTIMIZERS[name](optax)
    state = tx.init(jax.tree.map(jnp.asarray, params))
    params = jax.tree.map(jnp.asarray, params)
    for g in grads:
        updates, state = tx.update(jax.tree.map(jnp.asarray, g), state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def _on_disk(tree, keys):
    return {k: jask.from_numpy(v) if k in keys else jnp.asarray(v) for k, v in tree.items()}


def _check(got, want, dtype):
    got_leaves = jax.tree.leaves(jax.tree.map(to_numpy, got))
    want_leaves = jax.tree.leaves(jax.tree.map(np.asarray, want))
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **tolerance(dtype))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_in_memory_matches_optax(name, jit, dtype, rng):
    params, grads = _params(rng, dtype), _grads(rng, dtype)
    got, got_state = _run(OPTIMIZERS[name](jask.optim), jax.tree.map(jnp.asarray, params),
                          [jax.tree.map(jnp.asarray, g) for g in grads], jit)
    want, want_state = _reference(name, params, grads)
    _check(got, want, dtype)
    assert jax.tree.structure(got_state) == jax.tree.structure(want_state)
    _check(got_state, want_state, dtype)


#: (jit, update and apply fused by jask.optim.step, leaves on disk)
MODES = {"eager-disk": (False, False, ("w", "b")), "jit-mixed": (True, False, ("w",)),
         "jit-step-disk": (True, True, ("w", "b")), "eager-step-mixed": (False, True, ("w",))}


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)],
                         indirect=True, ids=["float32", "float64"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_disk_params_match_optax(name, mode, dtype, rng, small_budget):
    jit, fused, disk = MODES[mode]
    params, grads = _params(rng, dtype), _grads(rng, dtype)
    tx = OPTIMIZERS[name](jask.optim)
    got, got_state = _run(tx, _on_disk(params, disk), [_on_disk(g, disk) for g in grads], jit,
                          fused)
    want, want_state = _reference(name, params, grads)
    _check(got, want, dtype)
    assert isinstance(got["w"], jask.DiskArray)
    # optax's own state classes, the moments of DiskArray leaves on disk
    assert jax.tree.structure(got_state) == jax.tree.structure(want_state)
    _check(got_state, want_state, dtype)
    state_leaves = jax.tree.leaves(got_state)
    big = [x for x in state_leaves if np.shape(x) == SHAPES["w"]]
    assert all(isinstance(x, jask.DiskArray) for x in big)


def test_state_classes_are_optax_own(small_budget):
    w = jask.from_numpy(np.ones((40, 30), np.float32))
    adam_state = jask.optim.adam(0.1).init(w)
    assert isinstance(adam_state[0], optax.ScaleByAdamState)
    assert isinstance(adam_state[0].mu, jask.DiskArray)
    assert isinstance(jask.optim.trace(0.9).init(w), optax.TraceState)
    np.testing.assert_array_equal(adam_state[0].nu.to_numpy(), np.zeros((40, 30), np.float32))


@pytest.mark.parametrize("name", ["sgd", "sgd_momentum_schedule", "adamw"])
def test_step_keeps_the_store_and_writes_no_update(name, small_budget, rng):
    w = jask.from_numpy(rng.standard_normal((50, 33)).astype(np.float32))
    g = jask.from_numpy(rng.standard_normal((50, 33)).astype(np.float32))
    path = w.filename
    tx = OPTIMIZERS[name](jask.optim)
    step = jax.jit(lambda w, s, g: jask.optim.step(tx, g, s, w))
    w2, state = step(w, tx.init(w), g)
    w3, state = step(w2, state, g)
    assert w3.filename == path
    state_stores = [x for x in jax.tree.leaves(state) if isinstance(x, jask.DiskArray)]
    # alive: the parameter, the gradient and the state; no update store
    live = leaked_stores(small_budget.scratch_dir)
    assert len(live) == 2 + len(state_stores), live


def test_apply_updates_keeps_the_store(small_budget, rng):
    w = jask.from_numpy(rng.standard_normal((50, 33)).astype(np.float32))
    path = w.filename
    u = jask.from_numpy(np.ones((50, 33), np.float32))
    before = w.to_numpy()
    step = jax.jit(jask.optim.apply_updates)
    w2 = step(w, u)
    w3 = step(w2, u)
    assert w2.filename == path and w3.filename == path
    np.testing.assert_allclose(w3.to_numpy(), before + 2, rtol=1e-6)


def test_bad_input_is_refused_before_writing(small_budget, rng):
    w = jask.from_numpy(np.ones((20, 7), np.float32))
    tx = jask.optim.adam(0.1)
    state = tx.init(w)
    with pytest.raises(TypeError, match="must be a DiskArray"):
        tx.update(jnp.ones((20, 7), jnp.float32), state, w)
    with pytest.raises(ValueError, match="shape"):
        jask.optim.apply_updates(w, jask.from_numpy(np.ones((7, 20), np.float32)))
    np.testing.assert_array_equal(w.to_numpy(), np.ones((20, 7), np.float32))


# --- a workload: a wide linear model whose weights live on disk ----------------------

def _linear_data(rng, n=32, d=4096, k=32):
    x = rng.standard_normal((n, d)).astype(np.float32) / np.sqrt(d)
    w_true = rng.standard_normal((d, k)).astype(np.float32)
    return x, x @ w_true


def test_wide_linear_model_trained_with_adam_on_disk(small_budget, jask_scratch, rng):
    x, y = _linear_data(rng)
    d, k = x.shape[1], y.shape[1]
    assert d * k * 4 >= 8 * small_budget.max_memory  # weights 8x the budget
    X = jask.from_numpy(x)
    tx = jask.optim.adam(0.05)
    traces = []

    def loss(w, x, y, lib):
        r = x @ w - y
        return lib.mean(r * r)

    @jax.jit
    def step(w, state, x, y):
        traces.append(1)
        value, g = jax.value_and_grad(loss)(w, x, y, jask)
        updates, state = tx.update(g, state, w)
        return jask.optim.apply_updates(w, updates), state, value

    w = jask.from_numpy(np.zeros((d, k), np.float32))
    path = w.filename
    state = tx.init(w)
    ref_tx = optax.adam(0.05)
    w_ref = jnp.zeros((d, k), jnp.float32)
    ref_state = ref_tx.init(w_ref)
    losses, ref_losses, scratch = [], [], []
    for _ in range(5):
        w, state, value = step(w, state, X, y)
        losses.append(float(value))
        value, g = jax.value_and_grad(loss)(w_ref, x, y, jnp)
        u, ref_state = ref_tx.update(g, ref_state, w_ref)
        w_ref = optax.apply_updates(w_ref, u)
        ref_losses.append(float(value))
        jask.collect()
        scratch.append(bytes_on_disk(jask_scratch.path))
    assert len(traces) == 1  # compiled once
    assert w.filename == path  # the parameter kept its store
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)
    assert losses[-1] < 0.5 * losses[0]
    # disk use flat over steps (the moments of one step may be chunked, and
    # so padded at the edges, otherwise than those of the step before)
    assert max(scratch) - min(scratch) < 0.01 * scratch[0], scratch
    np.testing.assert_allclose(w.to_numpy(), np.asarray(w_ref), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("fused", [False, True], ids=["update-apply", "step"])
def test_adam_on_a_user_store_keeps_its_layout(fused, small_budget, tmp_path, rng):
    """A parameter in a store made by another tool (zstd, Zarr v2, ragged
    chunks) is updated in place and keeps its codec and chunks."""
    import numcodecs
    import zarr
    w0 = rng.standard_normal((61, 47)).astype(np.float32)
    path = str(tmp_path / "w.zarr")
    z = zarr.create_array(store=path, shape=w0.shape, chunks=(13, 9), dtype="float32",
                          zarr_format=2, compressors=numcodecs.Zstd(level=1))
    z[:] = w0
    grads = [(rng.standard_normal(w0.shape) * 0.3).astype(np.float32) for _ in range(STEPS)]
    w = jask.open(path)
    tx = jask.optim.adam(SCHEDULE)
    got, _ = _run(tx, w, [jask.from_numpy(g) for g in grads], True, fused)
    want, _ = _run(optax.adam(SCHEDULE), jnp.asarray(w0), [jnp.asarray(g) for g in grads], False)
    assert got.filename == w.filename
    np.testing.assert_allclose(got.to_numpy(), np.asarray(want), **tolerance(np.float32))
    reopened = zarr.open_array(path, mode="r")
    assert reopened.metadata.zarr_format == 2 and reopened.chunks == (13, 9)
    assert reopened.compressors[0].codec_id == "zstd"
    np.testing.assert_allclose(reopened[:], np.asarray(want), **tolerance(np.float32))


def test_fused_refuses_bad_operands(small_budget):
    from jask.api.fused import fused
    x = jask.from_numpy(np.ones((4, 3), np.float32))
    with pytest.raises(TypeError, match="at least one DiskArray"):
        fused(lambda a: (a,), np.ones(3), out_dtypes=("f4",))
    with pytest.raises(ValueError, match="one shape"):
        fused(lambda a, b: (a,), x, jask.from_numpy(np.ones((3, 4), np.float32)),
              out_dtypes=("f4",))
    with pytest.raises(ValueError, match="scalars"):
        fused(lambda a, b: (a,), x, np.ones(3), out_dtypes=("f4",))
