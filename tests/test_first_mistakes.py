"""First mistakes answered (issue 18): what a new user tries first on a
DiskArray either works or is refused with a message naming what to do."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jask


@pytest.fixture
def x(small_budget):
    return np.random.default_rng(0).standard_normal((301, 7)).astype(np.float32)


@pytest.fixture
def X(x):
    return jask.from_numpy(x)


def test_jax_numpy_functions_name_the_jask_function_to_use(X):
    with pytest.raises(TypeError, match=r"jnp\.mean does not take a DiskArray; use "
                                        r"jask\.mean\(x\) or x\.mean\(\)"):
        jnp.mean(X)
    with pytest.raises(TypeError, match=r"jnp\.var does not take a DiskArray; use jask\.var"):
        jnp.var(X, axis=0)  # checked before jax.numpy's own jit
    with pytest.raises(TypeError, match=r"jnp\.sqrt does not take a DiskArray; use jask\.sqrt"):
        jax.jit(jnp.sqrt)(X)
    with pytest.raises(TypeError, match=r"jask has no median: use jask\.map\(jnp\.median, x\)"):
        jnp.median(X)
    # what did work keeps working: jax.Array operators defer to jask, jnp.asarray under jit
    w = jnp.arange(7, dtype=jnp.float32)
    assert isinstance(w * X, jask.DiskArray) and isinstance(w + X, jask.DiskArray)
    assert isinstance(jax.jit(lambda v: jnp.asarray(v) * 2.0)(X), jask.DiskArray)


def test_numpy_functions_work_on_small_disk_arrays_through_array(X, x):
    head = X[:100]
    np.testing.assert_allclose(np.mean(head), np.mean(x[:100]), rtol=1e-6)
    np.testing.assert_array_equal(np.max(head, axis=0), np.max(x[:100], axis=0))
    np.testing.assert_array_equal(np.concatenate([head, x[:2]]), np.concatenate([x[:100], x[:2]]))
    assert np.asarray(head, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(head, copy=False)


def test_numpy_functions_refuse_arrays_over_the_budget_naming_it(x, small_budget):
    big = jask.from_numpy(np.tile(x, (8, 1)))  # 67 kB, over the 64 kB budget
    with pytest.raises(MemoryError, match="memory budget of 64000 bytes"):
        np.mean(big)


def test_device_put_is_refused_clearly(X):
    with pytest.raises(TypeError, match="jax.device_put does not take a DiskArray.*"
                                        "jask.materialize"):
        jax.device_put(X)


def test_second_derivatives_reverse_over_reverse_match_jax_numpy_or_name_the_op(X, x):
    """jax.grad of a gradient, as a new user writes it first: jax.numpy's
    values, eagerly and under jit; where a backward piece has no rule of its
    own (cumprod's), refused naming the op, never a wrong value.
    Reverse over forward stays refused, naming forward over reverse."""
    def loss(w):
        return jask.sum(jask.square(X @ w))

    w = jnp.ones(7, jnp.float32)
    xm = jnp.asarray(x)
    want = 2 * xm.T @ (xm @ jnp.ones(7, jnp.float32))  # grad of sum(grad): H @ 1, H = 2 X^T X
    for second in (jax.grad(lambda w: jnp.sum(jax.grad(loss)(w))),
                   jax.jit(jax.grad(lambda w: jnp.sum(jax.grad(loss)(w))))):
        np.testing.assert_allclose(second(w), want, rtol=1e-5)
    np.testing.assert_allclose(jax.jacrev(jax.grad(loss))(w), 2 * xm.T @ xm, rtol=1e-5)
    a = jnp.float32(0.5)
    rows = jnp.array([3, 0, 3])  # a gather: its VJP is a scatter-add, whose own is the gather
    np.testing.assert_allclose(
        jax.grad(jax.grad(lambda a: jask.sum(jask.square(jask.take(X * a, rows, axis=0)))))(a),
        2 * jnp.sum(jnp.square(xm[rows])), rtol=1e-5)
    with_zeros = jask.from_numpy(np.where(np.abs(x) < 0.3, 0, x))
    with pytest.raises(NotImplementedError, match=r"jask\.cumprod: second derivatives.*"
                                                  r"not supported"):
        jax.grad(jax.grad(lambda a: jask.sum(jask.cumprod(with_zeros * a, axis=0))))(a)
    v = jnp.arange(7.0, dtype=jnp.float32)
    for reverse_over_forward in (jax.grad(lambda w: jax.jvp(loss, (w,), (v,))[1]),
                                 jax.jacrev(jax.jacfwd(loss))):
        with pytest.raises(NotImplementedError, match=r"not differentiable in reverse mode.*"
                                                      r"forward over reverse"):
            reverse_over_forward(w)
    _, hv = jax.jvp(jax.grad(loss), (w,), (v,))
    np.testing.assert_allclose(hv, 2 * xm.T @ (xm @ v), rtol=1e-5)


def test_optax_apply_updates_keeps_disk_parameters_eagerly_as_under_jit(X, x, small_budget):
    big = jask.from_numpy(np.tile(x, (8, 1)))  # over the budget: np.asarray would refuse it
    params = {"W": X, "big": big, "b": jnp.ones(3)}
    updates = {"W": jask.from_numpy(np.full(x.shape, 0.5, np.float32)),
               "big": big * 0.5, "b": jnp.full(3, 0.25)}
    for apply in (optax.apply_updates, jax.jit(optax.apply_updates)):
        new = apply(params, updates)
        assert isinstance(new["W"], jask.DiskArray) and isinstance(new["big"], jask.DiskArray)
        np.testing.assert_allclose(new["W"].to_numpy(), x + 0.5, rtol=1e-6)
        np.testing.assert_allclose(new["big"][:301].to_numpy(), x * 1.5, rtol=1e-6)
        np.testing.assert_allclose(new["b"], np.full(3, 1.25))
        np.testing.assert_array_equal(X.to_numpy(), x)  # the parameters' stores are untouched
