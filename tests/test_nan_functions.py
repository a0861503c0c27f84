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


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", ["nansum", "nanmean", "nanvar", "nanstd"])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_each_reads_its_input_once(name, axis, small_budget, rng):
    """One pass each, eagerly: the counts travel in the partials (nanmean
    read X twice, sum then count; nanvar and nanstd four times)."""
    values = rng.standard_normal((1201, 13)).astype(np.float32)
    values[rng.random(values.shape) < 0.2] = np.nan
    values[:, 3] = np.nan
    x = jask.from_numpy(values)
    with jask.track() as counts:
        got = _got(getattr(jask, name)(x, axis))
    np.testing.assert_allclose(got, getattr(jnp, name)(jnp.asarray(values), axis),
                               equal_nan=True, **tolerance(np.float32))
    assert 0.99 <= counts.passes(x) <= 1.2, counts
    assert counts.bytes_written == 0, counts


@pytest.mark.parametrize("ddof", [0, 1, 3])
def test_nanvar_ddof_and_sparse_columns_as_jax(ddof, small_budget, rng):
    values = rng.standard_normal((301, 6)).astype(np.float32)
    values[rng.random(values.shape) < 0.5] = np.nan
    values[2:, 1] = np.nan  # two numbers left
    values[1:, 2] = np.nan  # one
    values[:, 4] = np.nan  # none
    x = jask.from_numpy(values)
    for name in ["nanvar", "nanstd"]:
        got = getattr(jask, name)(x, 0, ddof=ddof)
        want = getattr(jnp, name)(jnp.asarray(values), 0, ddof=ddof)
        np.testing.assert_allclose(_got(got), want, equal_nan=True, rtol=1e-5, atol=1e-6)


def test_nan_reductions_of_float16_count_in_wide_precision(small_budget):
    """250,000 rows: a float16 count is inexact beyond 2048 and infinite past 65504."""
    values = np.ones((250_000, 2), np.float16)
    values[::3] = np.nan
    values[1::3, 1] = 3
    x = jask.from_numpy(values)
    for name in ["nanmean", "nanvar"]:
        got = getattr(jask, name)(x, 0)
        want = getattr(jnp, name)(jnp.asarray(values, jnp.float32), 0)
        assert got.dtype == np.float16
        np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=2e-3)


@pytest.mark.parametrize("name", ["nanmean", "nanstd"])
@pytest.mark.parametrize("transform", ["eager", "jit"])
def test_gradients_of_the_one_pass_reducers_match_jax(name, transform, values, small_budget):
    x = jask.from_numpy(values)
    w = jnp.linspace(0.5, 1.5, values.shape[1], dtype=values.dtype)

    def loss(np_, x):
        return lambda w: jnp.nansum(getattr(np_, name)(x * w, 0) * w)

    grad = jax.grad(loss(jask, x))
    got = (jax.jit(grad) if transform == "jit" else grad)(w)
    want = jax.grad(loss(jnp, jnp.asarray(values)))(w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)


def _lanes(dtype):
    """Columns that take each of nanmean's paths: no NaN (one plain float64 sum),
    some NaN, all NaN, infinities of one sign and of both (NaN, as numpy)."""
    values = np.arange(400 * 6, dtype=np.float64).reshape(400, 6) % 17 + 0.25
    values[::7, 1] = np.nan
    values[:, 2] = np.nan
    values[5, 3] = np.inf
    values[9, 4], values[300, 4] = np.inf, -np.inf
    return values.astype(dtype)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on the all-NaN column
@pytest.mark.parametrize("name", ["nanmean", "nanvar"])
@pytest.mark.parametrize("values", [
    _lanes(np.float32),
    _lanes(np.float64),
    np.full((300, 3), 1.5, np.float32),  # no NaN anywhere
    np.arange(2**24, 2**24 + 600, dtype=np.int32).reshape(300, 2),  # exact only if widened
], ids=["float32 lanes", "float64 lanes", "no NaN", "int32 beyond 2**24"])
@pytest.mark.parametrize("axis", [0, None])
def test_nan_reductions_of_each_kind_of_lane_as_numpy(name, values, axis, small_budget):
    x = jask.from_numpy(values)
    got = _got(getattr(jask, name)(x, axis))
    want = getattr(np, name)(values.astype(np.float64), axis)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
