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


def test_a_reduction_with_no_derivative_row_raises_naming_it(small_budget, rng, monkeypatch):
    """A reducer kind with no row in REDUCTION_RULES is refused under jax.grad
    and jax.jvp, naming the op: never differentiated with another kind's rules
    (once, the map's rules summed: a sum's gradient, wrong for anything else)."""
    import pytest

    from jask.core import primitives, ufuncs
    from jask.engine.ops.reductions import REDUCERS, Reducer

    monkeypatch.setitem(REDUCERS, "fake_sum", Reducer(REDUCERS["sum"].reduce, np.add,
                                                      kind="fake"))
    x = jask.from_numpy(rand(rng, (6, 4), np.float32))

    def fake(x):
        return primitives.reduce("fake_reduction", ufuncs.IDENTITY, [x], [(0, 1)], [None],
                                 (6, 4), (None, None), np.float32, reducer="fake_sum",
                                 to_memory=True).reshape(())

    assert float(fake(x)) == pytest.approx(float(np.sum(x.to_numpy())), rel=1e-5)
    with pytest.raises(NotImplementedError,
                       match="Differentiation rule for 'jask.fake_reduction' not implemented"):
        jax.grad(fake)(x)
    with pytest.raises(NotImplementedError,
                       match="Differentiation rule for 'jask.fake_reduction' not implemented"):
        jax.jvp(fake, (x,), (x,))
