"""jax.numpy's functions beyond the Array API that xarray calls (pad, isin,
quantile and its kin, einsum, sliding windows, NaN-skipping scans): each
against jax.numpy on the same numbers in memory, on stores split into many
tiles by the small budget, and what each refuses before writing anything."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
import jask.array_api as xp
from helpers import stores_on_disk, to_numpy


def _values(r):
    return to_numpy(r) if isinstance(r, jask.DiskArray) else np.asarray(r)


def _same(got, want):
    got, want = _values(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                                 got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


@pytest.fixture
def data(small_budget):
    """A float32 store of 37 x 23 (tiles do not divide it), NaNs in a row and
    an element, a signed zero."""
    a = np.random.default_rng(0).standard_normal((37, 23)).astype(np.float32)
    a[3, 5] = np.nan
    a[7, :] = np.nan
    a[10, 2] = -0.0
    return a, jask.from_numpy(a)


PADS = [  # (pad_width, mode, keywords)
    (2, "constant", {}),
    ((3, 1), "constant", {"constant_values": 7.5}),
    (((1, 2), (3, 4)), "constant", {"constant_values": ((1, 2), (3, 4))}),
    (((0, 5), (4, 0)), "edge", {}),
    (((40, 3), (1, 30)), "edge", {}),
    (((2, 3), (4, 1)), "reflect", {}),
    (((40, 3), (1, 30)), "reflect", {}),  # wider than the axis: reflected again
    (((2, 3), (4, 1)), "symmetric", {}),
    (((40, 3), (1, 30)), "wrap", {}),
    (0, "edge", {}),
]


@pytest.mark.parametrize("width, mode, kw", PADS, ids=[f"{m}-{w}" for w, m, _ in PADS])
def test_pad_matches_jax_numpy(data, width, mode, kw):
    a, x = data
    _same(jask.pad(x, width, mode=mode, **kw), jnp.pad(jnp.asarray(a), width, mode=mode, **kw))


def test_pad_of_integers_casts_the_constant_as_jax_numpy(small_budget):
    a = np.arange(10, dtype=np.int32)
    _same(jask.pad(jask.from_numpy(a), 2, constant_values=7.9),
          jnp.pad(jnp.asarray(a), 2, constant_values=7.9))


def test_pad_refuses_what_it_cannot_gather_before_writing(data, small_budget):
    _, x = data
    before = stores_on_disk(small_budget)
    with pytest.raises(NotImplementedError, match="mode 'mean'"):
        jask.pad(x, 2, mode="mean")
    with pytest.raises(NotImplementedError, match="reflect_type 'odd'"):
        jask.pad(x, 2, mode="reflect", reflect_type="odd")
    with pytest.raises(ValueError, match="non-negative"):
        jask.pad(x, -1)
    with pytest.raises(ValueError, match="pad_width"):
        jask.pad(x, ((1, 2), (3, 4), (5, 6)))
    assert stores_on_disk(small_budget) == before


METHODS = ["linear", "lower", "higher", "midpoint", "nearest"]
QS = [0.5, 0.0, 1.0, 0.37, np.array([0.1, 0.33, 0.9], np.float32)]
AXES = [0, 1, -1, None, (0, 1)]


def _check_quantiles(data, op, method, qs, axes, keepdims_values):
    a, x = data
    for q in qs:
        for axis in axes:
            for keepdims in keepdims_values:
                got = getattr(jask, op)(x, q, axis=axis, method=method, keepdims=keepdims)
                want = getattr(jnp, op)(jnp.asarray(a), q, axis=axis, method=method,
                                        keepdims=keepdims)
                got, want = _values(got), np.asarray(want)
                assert got.shape == want.shape and got.dtype == want.dtype, (q, axis, keepdims)
                np.testing.assert_array_equal(got, want, err_msg=f"q={q} axis={axis}")


@pytest.mark.parametrize("op", ["quantile", "nanquantile"])
@pytest.mark.parametrize("method", METHODS)
def test_quantiles_equal_jax_numpy(data, op, method):
    """Exactly jax.numpy's values (its linear weights rounded as XLA rounds
    them), NaN lanes included."""
    _check_quantiles(data, op, method, [0.37, QS[-1]], [0, None], [False])


@pytest.mark.slow
@pytest.mark.parametrize("op", ["quantile", "nanquantile"])
@pytest.mark.parametrize("method", METHODS)
def test_quantiles_equal_jax_numpy_for_every_axis_q_and_keepdims(data, op, method):
    _check_quantiles(data, op, method, QS, AXES, [False, True])


@pytest.mark.slow
@pytest.mark.parametrize("op", ["median", "nanmedian"])
def test_medians_equal_jax_numpy(data, op):
    a, x = data
    for axis in (0, 1, None):
        _same(getattr(jask, op)(x, axis=axis), getattr(jnp, op)(jnp.asarray(a), axis=axis))


@pytest.mark.slow
def test_percentiles_and_integers_follow_jax_numpy(small_budget):
    """Integers promote as in jax.numpy; percentiles are no further from
    numpy's float64 values than jax.numpy's (its compiled program folds
    ``q / 100`` into the positions, a few ulps off: -34.000004 for -34)."""
    a = np.random.default_rng(3).integers(-50, 50, (41, 9)).astype(np.int32)
    x = jask.from_numpy(a)
    _same(jask.quantile(x, 0.5, axis=0), jnp.quantile(jnp.asarray(a), 0.5, axis=0))
    for op, q, axis in (("percentile", 25, 0), ("nanpercentile", [10, 90], 1)):
        got = _values(getattr(jask, op)(x, q, axis=axis))
        want = np.asarray(getattr(jnp, op)(jnp.asarray(a), jnp.asarray(q), axis=axis))
        exact = getattr(np, op)(a.astype(np.float64), q, axis=axis)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.max(np.abs(got - exact)) <= np.max(np.abs(want - exact))


@pytest.mark.slow
def test_quantiles_in_float64_with_x64(small_budget):
    a = np.random.default_rng(4).standard_normal((53, 6))
    a[2, 1] = np.nan
    with jax.enable_x64(True):
        x = jask.from_numpy(a)
        for op in ("quantile", "nanquantile"):
            _same(getattr(jask, op)(x, np.array([0.2, 0.75]), axis=0),
                  getattr(jnp, op)(jnp.asarray(a), jnp.asarray([0.2, 0.75]), axis=0))


def test_quantile_refusals_name_the_problem_before_writing(small_budget):
    x = jask.from_numpy(np.zeros((3, 20000), np.float32))  # one lane: 80 kB, budget 64 kB
    before = stores_on_disk(small_budget)
    with pytest.raises(jask.BudgetError, match="one lane along axis 1"):
        jask.quantile(x, 0.5, axis=1)
    with pytest.raises(NotImplementedError, match="inverted_cdf"):
        jask.quantile(x, 0.5, axis=0, method="inverted_cdf")
    with pytest.raises(ValueError, match="at most one axis"):
        jask.nanquantile(x, np.ones((2, 2)) / 2, axis=0)
    with pytest.raises(TypeError, match="known outside jit"):
        jax.jit(lambda q: jask.quantile(x, q, axis=0))(0.5)
    assert stores_on_disk(small_budget) == before
    assert jask.quantile(x, 0.5, axis=0).shape == (20000,)  # along the short axis it runs


ISIN = [np.array([0.0, 1.0, 2.5, -3.0]), np.array([1, 2], np.int64), np.array([np.nan, 0.0]),
        3, np.float32(0.1), np.arange(5, dtype=np.uint8)]


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
def test_isin_matches_jax_numpy(small_budget, dtype):
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((300, 41)) * 5).astype(dtype)
    if dtype == np.float32:
        a[0, 0], a[1, 1] = np.nan, -0.0
    x = jask.from_numpy(a)
    for test in ISIN:
        for invert in (False, True):
            _same(jask.isin(x, test, invert=invert),
                  jnp.isin(jnp.asarray(a), test if isinstance(test, int) else jnp.asarray(test),
                           invert=invert))


def test_isin_refuses_a_set_over_the_in_memory_share_and_a_traced_one(small_budget):
    x = jask.from_numpy(np.arange(1000.0, dtype=np.float32))
    before = stores_on_disk(small_budget)
    with pytest.raises(jask.BudgetError, match="20000 test elements"):
        jask.isin(x, np.arange(20000.0))
    with pytest.raises(TypeError, match="known outside jit"):
        jax.jit(lambda t: jask.isin(x, t))(jnp.arange(3.0))
    assert stores_on_disk(small_budget) == before
    # a set on disk within the share is read into memory
    _same(jask.isin(x, jask.from_numpy(np.array([3.0, 999.0], np.float32))),
          jnp.isin(jnp.arange(1000.0), jnp.asarray([3.0, 999.0])))


EINSUMS = ["ij,jk->ik", "ij,jk", "ij->ji", "ij->", "ij->j", "ij", "...j,...j->...",
           "bij,ij->bi", "bij,j->bi", "ij,j->i", "bij,bij->b", "ij,kj->ik", "bij,ij->b",
           "ij,ij->ij", "bij->ji", "bij,bjk->bik", "bij,bkj->bki", " i j , j k -> k i "]


def _operands(spec):
    rng = np.random.default_rng(6)
    sizes = {"b": 5, "i": 30, "j": 20, "k": 7}
    inputs = spec.replace(" ", "").split("->")[0].split(",")
    return [rng.standard_normal(tuple(sizes[c] for c in t.replace("...", "b"))).astype(
        np.float32) for t in inputs]


@pytest.mark.parametrize("spec", EINSUMS)
def test_einsum_matches_jax_numpy(small_budget, spec):
    arrays = _operands(spec)
    want = jnp.einsum(spec, *[jnp.asarray(a) for a in arrays])
    for disk in range(len(arrays)):  # each operand on disk in turn (the others in memory)
        operands = [jask.from_numpy(a) if k == disk else a for k, a in enumerate(arrays)]
        got = _values(jask.einsum(spec, *operands))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, np.asarray(want), rtol=2e-5, atol=2e-5)


def test_einsum_refuses_what_it_does_not_stream(small_budget):
    a = jask.from_numpy(np.ones((4, 4), np.float32))
    with pytest.raises(NotImplementedError, match="repeated in 'ii'"):
        jask.einsum("ii->i", a)
    with pytest.raises(NotImplementedError, match="3 operands"):
        jask.einsum("ij,jk,kl->il", a, a, a)
    with pytest.raises(ValueError, match="names 2 operand"):
        jask.einsum("ij,jk->ik", a)
    with pytest.raises(ValueError, match="repeats a letter or names one"):
        jask.einsum("ij->iz", a)


@pytest.mark.parametrize("window, axis", [(3, 0), (5, 1), ((2, 3), None), ((4, 2), (1, 0))])
def test_sliding_window_view_matches_numpy(data, window, axis):
    a, x = data
    want = np.lib.stride_tricks.sliding_window_view(a, window, axis)
    _same(jask.sliding_window_view(x, window, axis), want)


def test_nan_skipping_scans_match_jax_numpy(data):
    a, x = data
    for op in ("nancumsum", "nancumprod"):
        for axis in (0, 1, None):
            got = getattr(jask, op)(x, axis=axis)
            want = getattr(jnp, op)(jnp.asarray(a), axis=axis)
            # jask's partials accumulate in float64: near zero, closer than float32's
            np.testing.assert_allclose(_values(got), np.asarray(want), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(_values(getattr(np, op)(x, axis=axis)), np.asarray(want),
                                       rtol=1e-5, atol=1e-5)  # __array_function__, as xarray


def test_numpy_order_statistics_of_a_diskarray_stream(data):
    """xarray calls np.nanmedian and np.nanquantile on a DiskArray
    (``__array_function__``): jask's, not numpy's on the values in memory."""
    a, x = data
    _same(np.nanquantile(x, 0.3, axis=0), jnp.nanquantile(jnp.asarray(a), 0.3, axis=0))
    _same(np.nanmedian(x, axis=1), jnp.nanmedian(jnp.asarray(a), axis=1))


NAMESPACE = [  # (name, arguments after x, jax.numpy's function)
    ("pad", ((1, 2),), {"mode": "edge"}),
    ("quantile", (0.25,), {"axis": 0}),
    ("nanquantile", (), {"q": 0.25, "axis": 1}),  # xarray passes q by name
    ("median", (), {"axis": 0}),
    ("nanmedian", (), {"axis": 1}),
    ("cumsum", (), {"axis": 0}),
    ("cumprod", (), {"axis": 1}),
    ("nancumsum", (), {"axis": 0}),
    ("transpose", ((1, 0),), {}),
]


@pytest.mark.parametrize("name, args, kw", NAMESPACE, ids=[n for n, _, _ in NAMESPACE])
def test_the_namespace_answers_its_arrays_with_jax_numpy_values(data, name, args, kw):
    a, x = data
    got = getattr(xp, name)(x, *args, **kw)
    assert isinstance(got, xp.Array)
    want = getattr(jnp, name)(jnp.asarray(a), *args, **kw)
    np.testing.assert_allclose(_values(got), np.asarray(want), rtol=1e-5, atol=1e-5,
                               equal_nan=True)


def test_the_namespace_einsum_isin_and_sliding_windows(data):
    a, x = data
    assert isinstance(xp.einsum("ij,ij->i", x, x), xp.Array)
    assert isinstance(xp.isin(x, np.array([0.0])), xp.Array)
    windows = xp.lib.stride_tricks.sliding_window_view(x, 4, axis=0)
    assert isinstance(windows, xp.Array) and windows.shape == (34, 23, 4)


RESULT_TYPES = [  # arguments -> jax.numpy's dtype (64-bit types kept)
    ((np.float64(np.nan),), np.float64),  # numpy's scalar is a float with a dtype
    ((xp.int32, np.float64(np.nan)), np.float64),  # xarray fills an integer count with NaN
    ((xp.int16, 1.5), np.float32),  # a Python float with integers: jax.numpy's weak float
    ((xp.float32, 1), np.float32),
    ((xp.int8, xp.uint8), np.int16),
]


@pytest.mark.parametrize("args, want", RESULT_TYPES)
def test_result_type_answers_as_jax_numpy(args, want):
    assert xp.result_type(*args) == np.dtype(want)


def test_result_type_refusals_and_can_cast_keep_to_the_standard():
    import array_api_strict
    with pytest.raises(ValueError, match="at least one"):
        xp.result_type()
    with pytest.raises(ValueError, match="at least one"):
        array_api_strict.result_type()
    with pytest.raises(TypeError, match="no common integer type"):
        xp.result_type(xp.uint64, xp.int8)
    with pytest.raises(TypeError, match="mixed kinds"):  # arrays and dtypes: as array-api-strict
        xp.result_type(xp.int32, xp.float32)
    assert not xp.can_cast(xp.int32, xp.float64)
    assert xp.can_cast(xp.int8, xp.int32)


INDEXES = [  # keys of numpy's advanced indexing with arrays on several axes
    ([0, 5, 299], [1, 2, 6]),
    (np.array([[1, 2], [3, 4]]), np.array([0, 6])),
    (slice(2, 9), [1, 3]),
    ([3, 3, 1], slice(None, None, 2)),
    (np.array([True] * 2 + [False] * 298), [0, 4]),
    (5, [0, 3]),
    ([-1, 2], -2),
    (np.arange(200), np.arange(200) % 7),
]


@pytest.mark.parametrize("key", INDEXES, ids=[str(i) for i in range(len(INDEXES))])
def test_index_arrays_on_several_axes_match_jax_numpy_and_the_standard(small_budget, key):
    import array_api_strict as strict
    a = np.arange(300 * 7, dtype=np.float32).reshape(300, 7)
    _same(jask.from_numpy(a)[key], jnp.asarray(a)[key])
    if all(isinstance(i, int) or np.asarray(i).dtype.kind == "i" for i in key):
        # the 2024.12 standard's integer arrays (with integers only), as array-api-strict has them
        want = strict.asarray(a)[tuple(i if isinstance(i, int) else strict.asarray(np.asarray(i))
                                       for i in key)]
        np.testing.assert_array_equal(_values(jask.from_numpy(a)[key]), np.asarray(want))


def test_index_arrays_on_several_axes_are_refused_inside_jit_and_over_the_share(small_budget):
    x = jask.from_numpy(np.zeros((3000, 50), np.float32))
    with pytest.raises(IndexError, match="inside jit"):
        jax.jit(lambda i: x[i, i])(jnp.array([0, 1]))
    with pytest.raises(IndexError, match="over the in-memory share"):
        x[np.arange(3000), np.arange(3000) % 50]
    mask = jask.from_numpy(np.arange(3000) % 7 == 0)  # a boolean DiskArray within the share
    _same(x[mask, 1:3], jnp.zeros((3000, 50))[np.arange(3000) % 7 == 0, 1:3].astype(np.float32))
