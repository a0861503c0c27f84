"""sort, argsort and searchsorted beyond the op table (values, ties and NaNs
against jax.numpy are in tests/ops_table.py): what they refuse, and when."""
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import stores_on_disk


def test_a_lane_larger_than_the_budget_is_refused_naming_it_before_writing(small_budget):
    X = jask.from_numpy(np.zeros((3, 20000), np.float32))  # one lane: 80 kB, budget 64 kB
    before = stores_on_disk(small_budget)
    with pytest.raises(jask.BudgetError, match=r"one lane along axis 1 .*memory budget of 64000"):
        jask.sort(X)
    with pytest.raises(jask.BudgetError, match="one lane along axis 1"):
        jask.argsort(X, axis=-1)
    assert stores_on_disk(small_budget) == before
    # along the short axis it runs, tile by tile
    assert jask.sort(X, axis=0).shape == (3, 20000)


def test_bad_arguments_are_refused_as_jax_numpy_refuses_them(small_budget):
    X = jask.from_numpy(np.ones((4, 3), np.float32))
    with pytest.raises(TypeError, match="axis must be None or an int"):
        jask.sort(X, axis=(0, 1))
    with pytest.raises(ValueError, match="out of range"):
        jask.argsort(X, axis=2)
    with pytest.raises(ValueError, match=r"a must be 1-D, got shape \(4, 3\)"):
        jask.searchsorted(X, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="side must be 'left' or 'right'"):
        jask.searchsorted(jask.from_numpy(np.arange(5.0)), np.ones(2), side="middle")
    with pytest.raises(ValueError, match="axis must be given"):
        jask.cumulative_sum(X)


def test_searchsorted_of_values_on_disk_gives_a_disk_array_as_jax_numpy(small_budget, rng):
    a = np.sort(rng.standard_normal(3001)).astype(np.float32)
    v = rng.standard_normal((41, 37)).astype(np.float32)
    got = jask.searchsorted(jask.from_numpy(a), jask.from_numpy(v), side="right")
    assert isinstance(got, jask.DiskArray)
    np.testing.assert_array_equal(got.to_numpy(), np.asarray(jnp.searchsorted(a, v, "right")))
