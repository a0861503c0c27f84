"""cumsum's two passes (values and gradients against numpy and jax are in
the op table, tests/ops_table.py)."""
import numpy as np
import pytest

import jask


def test_cumsum_carries_across_many_tiles_of_a_larger_than_budget_array(small_budget, rng):
    x = rng.standard_normal((301, 97)).astype(np.float32)  # 117 kB against a 64 kB budget
    X = jask.from_numpy(x)
    for axis in (0, 1):
        np.testing.assert_allclose(jask.cumsum(X, axis=axis).to_numpy(),
                                   np.cumsum(x.astype(np.float64), axis=axis),
                                   rtol=2e-4, atol=2e-4)


def test_cumsum_of_integers_wraps_as_jax_numpy(small_budget):
    x = np.full((97, 61), 2**30, np.int32)
    got = jask.cumsum(jask.from_numpy(x), axis=0).to_numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.cumsum(x, axis=0, dtype=np.int32))


def test_cumsum_refuses_what_jax_numpy_refuses(small_budget):
    X = jask.from_numpy(np.ones((4, 3), np.float32))
    with pytest.raises(TypeError, match="axis must be None or an int"):
        jask.cumsum(X, axis=(0, 1))
    with pytest.raises(ValueError, match="out of range"):
        jask.cumsum(X, axis=2)
