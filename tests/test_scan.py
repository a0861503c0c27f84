"""cumsum's two passes, and empty arrays in the scan and arg ops (values and
gradients against numpy and jax are in the op table, tests/ops_table.py)."""
import jax.numpy as jnp
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


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0,), (3, 0, 2)], ids=str)
@pytest.mark.parametrize("name", ["cumsum", "argmax", "argmin"])
def test_empty_arrays_answer_as_jax_numpy_does(name, shape, small_budget):
    """An empty result where jax.numpy gives one (shape and dtype), an error
    where it raises one (argmax over an empty axis)."""
    x = np.zeros(shape, np.float32)
    X = jask.from_numpy(x)
    for axis in [None, *range(len(shape))]:
        try:
            want = np.asarray(getattr(jnp, name)(jnp.asarray(x), axis=axis))
        except ValueError:
            with pytest.raises(ValueError, match="empty"):
                getattr(jask, name)(X, axis=axis)
            continue
        got = getattr(jask, name)(X, axis=axis)
        got = got.to_numpy() if isinstance(got, jask.DiskArray) else np.asarray(got)
        assert (got.shape, got.dtype) == (want.shape, want.dtype), axis
