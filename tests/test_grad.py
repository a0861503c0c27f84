"""Gradients of every op against jax.numpy + jax.grad, eager and jitted."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import rand, tolerance

MODES = {
    "eager": lambda f, **kw: jax.grad(f, **kw),
    "jit(grad)": lambda f, **kw: jax.jit(jax.grad(f, **kw)),
    "grad(jit)": lambda f, **kw: jax.grad(jax.jit(f), **kw),
}


def check_grad(disk_fn, ref_fn, args, mode, dtype, argnums=0):
    """Compare the gradient of disk_fn on DiskArrays with ref_fn on jnp arrays."""
    disk_args = [jask.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    got = MODES[mode](disk_fn, argnums=argnums)(*disk_args)
    want = jax.grad(ref_fn, argnums=argnums)(*[jnp.asarray(a) for a in args])
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    for g, w in zip(got, want):
        if isinstance(g, jask.DiskArray):
            assert g.filename.endswith(".grad"), g.filename
            assert g.dtype == dtype
            g = g.to_numpy()
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **tolerance(dtype))


@pytest.mark.parametrize("mode", MODES)
def test_grad_elementwise(small_budget, rng, dtype, mode):
    x, y = rand(rng, (97, 61), dtype), rand(rng, (97, 61), dtype)
    check_grad(lambda a, b: jask.sum(jask.square(a - b) * a + b),
               lambda a, b: jnp.sum(jnp.square(a - b) * a + b), [x, y], mode, dtype,
               argnums=(0, 1))


@pytest.mark.parametrize("mode", MODES)
def test_grad_dot(small_budget, rng, dtype, mode):
    x, w, y = rand(rng, (97, 13), dtype), rand(rng, (13, 3), dtype), rand(rng, (97, 3), dtype)
    check_grad(lambda x, w, y: jask.sum(jask.square(x @ w - y)),
               lambda x, w, y: jnp.sum(jnp.square(x @ w - y)), [x, w, y], mode, dtype,
               argnums=(0, 1, 2))


@pytest.mark.parametrize("mode", MODES)
def test_grad_batched_dot(small_budget, rng, dtype, mode):
    a, b = rand(rng, (3, 17, 11), dtype), rand(rng, (3, 11, 5), dtype)
    check_grad(lambda a, b: jask.sum(jask.square(jask.dot(a, b))),
               lambda a, b: jnp.sum(jnp.square(a @ b)), [a, b], mode, dtype, argnums=(0, 1))


@pytest.mark.parametrize("mode", MODES)
def test_grad_transpose(small_budget, rng, dtype, mode):
    a, c = rand(rng, (5, 33, 19), dtype), rand(rng, (19, 5, 33), dtype)
    check_grad(lambda a, c: jask.sum(jask.transpose(a, (2, 0, 1)) * c),
               lambda a, c: jnp.sum(jnp.transpose(a, (2, 0, 1)) * c), [a, c], mode, dtype,
               argnums=(0, 1))


@pytest.mark.parametrize("mode", MODES)
def test_grad_scalar_operands(small_budget, rng, dtype, mode):
    """Gradients with respect to the scalar of mul (either side), add and sub."""
    x = rand(rng, (97, 61), dtype)
    s = dtype(1.7)

    def disk(a, s):
        return jask.sum(jask.square(jask.mul(s, a) + s) - s * a) + jask.sum(jask.mul(a, s) - s)

    def ref(a, s):
        return jnp.sum(jnp.square(s * a + s) - s * a) + jnp.sum(a * s - s)

    check_grad(disk, ref, [x, s], mode, dtype, argnums=(0, 1))


@pytest.mark.parametrize("mode", MODES)
def test_grad_rsub_and_neg(small_budget, rng, dtype, mode):
    x = rand(rng, (31, 7), dtype)
    check_grad(lambda a: jask.sum(jask.square(2.0 - a) + (-a)),
               lambda a: jnp.sum(jnp.square(2.0 - a) + (-a)), [x], mode, dtype)


@pytest.mark.parametrize("mode", MODES)
def test_grad_materialize(small_budget, rng, dtype, mode):
    x = rand(rng, (97, 61), dtype)
    check_grad(lambda a: jnp.sum(jnp.sin(jask.materialize(a * 2.0))),
               lambda a: jnp.sum(jnp.sin(a * 2.0)), [x], mode, dtype)


def test_value_and_grad(small_budget, rng):
    x = rand(rng, (97, 61), np.float32)
    val, g = jax.jit(jax.value_and_grad(lambda a: jask.sum(jask.square(a))))(jask.from_numpy(x))
    np.testing.assert_allclose(float(val), np.sum(x * x), rtol=1e-4)
    np.testing.assert_allclose(g.to_numpy(), 2 * x, rtol=1e-5)


def test_unused_input_gets_zero_gradient(small_budget, rng):
    x = rand(rng, (9, 7), np.float32)
    g = jax.grad(lambda a, b: jask.sum(a), argnums=1)(jask.from_numpy(x), jask.from_numpy(x))
    np.testing.assert_array_equal(g.to_numpy(), np.zeros_like(x))
