"""Gradient behaviours the op table does not cover: value_and_grad, and an
unused input. Gradients of every op, and of the compositions once checked
here, are in test_table.py (ops_table.FOLDED_CASES)."""
import jax
import numpy as np

import jask
from helpers import rand


def test_value_and_grad(small_budget, rng):
    x = rand(rng, (97, 61), np.float32)
    val, g = jax.jit(jax.value_and_grad(lambda a: jask.sum(jask.square(a))))(jask.from_numpy(x))
    np.testing.assert_allclose(float(val), np.sum(x * x), rtol=1e-4)
    np.testing.assert_allclose(g.to_numpy(), 2 * x, rtol=1e-5)


def test_unused_input_gets_zero_gradient(small_budget, rng):
    x = rand(rng, (9, 7), np.float32)
    g = jax.grad(lambda a, b: jask.sum(a), argnums=1)(jask.from_numpy(x), jask.from_numpy(x))
    np.testing.assert_array_equal(g.to_numpy(), np.zeros_like(x))
