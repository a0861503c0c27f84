"""The NaN-skipping reductions against numpy (values), jax.numpy (dtypes and
gradients), on an array with scattered NaNs and an all-NaN column, tiled
by a small budget; and numpy's functions reaching them through NEP 18."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import to_numpy, tolerance

NAMES = ["nansum", "nanmean", "nanvar", "nanstd", "nanmax", "nanmin", "nanargmax", "nanargmin"]


@pytest.fixture
def values(dtype, rng):
    x = rng.standard_normal((157, 33)).astype(dtype)
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, 5] = np.nan  # an all-NaN column: NaN (or -1 for the arg ones) where jax says so
    return x


def _got(result):
    return to_numpy(result) if isinstance(result, jask.DiskArray) else np.asarray(result)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on the all-NaN column
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("axis", [None, 0])
def test_values_and_dtypes_match(name, axis, values, small_budget, dtype):
    x = jask.from_numpy(values)
    got = getattr(jask, name)(x, axis)
    want = getattr(jnp, name)(jnp.asarray(values), axis)
    assert np.dtype(got.dtype) == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(_got(got), want, equal_nan=True, **tolerance(dtype))
    if not (name.startswith("nanarg") and axis == 0):  # numpy raises on the all-NaN column
        reference = getattr(np, name)(values, axis)
        np.testing.assert_allclose(_got(got), reference, equal_nan=True, **tolerance(dtype))


@pytest.mark.parametrize("name", ["nanvar", "nanmax"])
def test_gradients_match_jax(name, values, small_budget):
    x = jask.from_numpy(values)
    w = jnp.linspace(0.5, 1.5, values.shape[1], dtype=values.dtype)
    # nansum of the result: the all-NaN column's NaN would make every gradient NaN
    got = jax.grad(lambda w: jnp.nansum(getattr(jask, name)(x * w, 0)))(w)
    want = jax.grad(lambda w: jnp.nansum(getattr(jnp, name)(jnp.asarray(values) * w, 0)))(w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_numpy_functions_stream_through_jask(values, small_budget, dtype):
    x = jask.from_numpy(values)
    got = np.nanmean(x, axis=0)
    np.testing.assert_allclose(_got(got), np.nanmean(values, axis=0), equal_nan=True,
                               **tolerance(dtype))
    with pytest.raises(TypeError, match="out="):
        np.nansum(x, out=np.empty(33))
