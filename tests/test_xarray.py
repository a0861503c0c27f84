"""xarray over DiskArrays, checked against xarray over numpy (and jax.grad).

The DiskArray reaches xarray through the Array API namespace and jask's
chunk manager (the ``xarray.chunkmanagers`` entry point), never through
Dask; values come back as xarray computes them on the same numbers in memory.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import jask
from helpers import to_numpy

xr = pytest.importorskip("xarray")
import jask.xarray  # noqa: E402 - after the skip

N, M = 203, 7  # rows tiles do not divide


@pytest.fixture
def data(small_budget):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, M)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    y = rng.standard_normal(N).astype(np.float32)
    return x, y


def _wrap(x, y):
    dims = ("sample", "feature")
    on_disk = xr.Dataset({"X": (dims, jask.from_numpy(x)), "y": ("sample", jask.from_numpy(y))},
                         coords={"sample": np.arange(N) * 10})
    in_memory = xr.Dataset({"X": (dims, x), "y": ("sample", y)},
                           coords={"sample": np.arange(N) * 10})
    return on_disk, in_memory


def _values(da):
    data = da.data
    return to_numpy(data) if isinstance(data, jask.DiskArray) else np.asarray(data)


def test_a_dataarray_wraps_the_diskarray_itself(data):
    ds, _ = _wrap(*data)
    assert isinstance(ds.X.data, jask.DiskArray)
    assert ds.X.data.__array_namespace__() is jask.array_api


OPERATIONS = {  # name -> f(ds): each runs on the DiskArray Dataset and the numpy one
    "centre by name": lambda ds: ds.X - ds.X.mean("sample", skipna=False),
    "broadcast a row": lambda ds: ds.X * ds.y,
    "mean, NaNs skipped": lambda ds: ds.X.mean("sample"),
    "std, NaNs skipped": lambda ds: ds.X.std("feature"),
    "max, NaNs skipped": lambda ds: ds.X.max("sample"),
    "sum over all": lambda ds: ds.X.sum(skipna=False),
    "isel": lambda ds: ds.X.isel(sample=slice(5, 150)),
    "sel": lambda ds: ds.X.sel(sample=slice(100, 900)),
    "where": lambda ds: ds.X.where(ds.X > 0, 0.0),
    "transpose": lambda ds: ds.X.T,
    "standardise": lambda ds: ((ds.X - ds.X.mean("sample")) / ds.X.std("sample")),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_operations_match_xarray_in_memory(data, name):
    on_disk, in_memory = _wrap(*data)
    got, want = OPERATIONS[name](on_disk), OPERATIONS[name](in_memory)
    assert got.dims == want.dims and got.shape == want.shape
    assert not hasattr(got.data, "dask")  # no Dask hop
    if got.size > 1000:  # large results stay on disk
        assert isinstance(got.data, jask.DiskArray), name
    np.testing.assert_allclose(_values(got), want.values, rtol=2e-5, atol=2e-5, equal_nan=True)


#: xarray's methods that call jax.numpy's functions beyond the standard (pad, quantile,
#: einsum, sliding windows, isin, cumsum) through the namespace
BEYOND_THE_STANDARD = {
    "rolling mean": lambda ds: ds.X.rolling(sample=5).mean(),
    "rolling mean, centred": lambda ds: ds.X.rolling(sample=4, center=True,
                                                     min_periods=2).mean(),
    "rolling max": lambda ds: ds.X.rolling(sample=3).max(),
    "quantile": lambda ds: ds.X.quantile([0.1, 0.5, 0.9], dim="sample"),
    "quantile, NaNs kept": lambda ds: ds.X.quantile(0.5, dim="feature", skipna=False),
    "median": lambda ds: ds.X.median("sample"),
    "weighted mean": lambda ds: ds.X.weighted(abs(ds.y)).mean("sample"),
    "cumsum": lambda ds: ds.X.cumsum("sample"),
    "cumsum, NaNs kept": lambda ds: ds.X.cumsum("sample", skipna=False),
    "coarsen mean": lambda ds: ds.X.coarsen(sample=7, boundary="trim").mean(),
    "coarsen mean, padded": lambda ds: ds.X.coarsen(sample=7, boundary="pad").mean(),
    "shift": lambda ds: ds.X.shift(sample=3),
    "pad": lambda ds: ds.X.pad(sample=(2, 3), mode="edge"),
    "isin": lambda ds: ds.X.isin([0.0, 1.0]),
    "dot": lambda ds: xr.dot(ds.X, ds.y),
    "argmax, NaNs skipped": lambda ds: ds.X.argmax("sample"),
    "prod, NaNs skipped": lambda ds: (ds.X * 0.1 + 1).prod("sample"),
    "groupby mean": lambda ds: ds.X.groupby(ds.sample % 3).mean(),
    "differentiate": lambda ds: ds.X.differentiate("sample"),
    "differentiate, second-order edges": lambda ds: ds.X.differentiate("sample", edge_order=2),
    "full_like": lambda ds: xr.full_like(ds.X, 2.5),
    "zeros_like": lambda ds: xr.zeros_like(ds.X),
    "apply_ufunc, parallelized": lambda ds: xr.apply_ufunc(lambda a: a * 2 + 1, ds.X,
                                                           dask="parallelized"),
    "apply_ufunc of a numpy ufunc": lambda ds: xr.apply_ufunc(np.arctan2, ds.X, ds.y,
                                                              dask="parallelized"),
}


@pytest.mark.parametrize("name", list(BEYOND_THE_STANDARD))
def test_xarray_methods_beyond_the_standard_match_xarray_in_memory(data, name):
    on_disk, in_memory = _wrap(*data)
    got, want = BEYOND_THE_STANDARD[name](on_disk), BEYOND_THE_STANDARD[name](in_memory)
    assert got.dims == want.dims and got.shape == want.shape
    # the namespace's arrays, never a bare jax.Array (xarray's duck-array tests ask the same)
    assert isinstance(got.data, jask.array_api.Array), type(got.data)
    np.testing.assert_allclose(_values(got), want.values, rtol=2e-5, atol=2e-5, equal_nan=True)


@pytest.mark.parametrize("name", ["mean", "std", "var", "sum"])
def test_a_default_reduction_reads_the_data_once(data, name):
    """xarray's default skips NaNs (nanmean, nanstd, ...): one pass per
    result, nothing written (mean read X twice and std four times)."""
    on_disk, in_memory = _wrap(*data)
    with jask.track() as counts:
        got = _values(getattr(on_disk.X, name)("sample"))
    want = getattr(in_memory.X, name)("sample").values
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
    assert 0.99 <= counts.passes(on_disk.X.data) <= 1.2, counts
    assert counts.bytes_written <= got.nbytes, counts  # at most the result itself


def test_a_loss_through_xarray_has_jax_gradients(data):
    x, y = data
    x = np.nan_to_num(x)
    on_disk, _ = _wrap(x, y)

    def loss(w):  # skipna=False: xarray's NaN-skipping path goes through numpy
        pred = (on_disk.X * xr.DataArray(w, dims="feature")).sum("feature", skipna=False)
        return ((pred - on_disk.y) ** 2).mean(skipna=False).data

    def reference(w):
        return jnp.mean((x @ w - y) ** 2)

    w = jnp.linspace(-1, 1, M, dtype=jnp.float32)
    want = jax.grad(reference)(w)
    np.testing.assert_allclose(loss(w), reference(w), rtol=1e-5)
    for mode, grad in {"eager": jax.grad(loss), "jit(grad)": jax.jit(jax.grad(loss))}.items():
        np.testing.assert_allclose(grad(w), want, rtol=1e-4, atol=1e-6, err_msg=mode)


@pytest.mark.filterwarnings("ignore::UserWarning")  # zarr: no v3 spec yet for fixed strings
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_open_dataset_reads_a_group_xarray_wrote(tmp_path, data, zarr_format):
    x, y = data
    written = xr.Dataset({"X": (("time", "feature"), x), "y": ("time", y)},
                         coords={"time": pd.date_range("2020-01-01", periods=N),
                                 "feature": list("abcdefg"), "station": ("time", np.arange(N))},
                         attrs={"title": "test"})
    path = tmp_path / "ds.zarr"
    written.to_zarr(path, zarr_format=zarr_format, consolidated=False)
    ds = jask.xarray.open_dataset(path)
    assert isinstance(ds.X.data, jask.DiskArray) and isinstance(ds.station.data, jask.DiskArray)
    assert set(ds.coords) == {"time", "feature", "station"} and ds.attrs == {"title": "test"}
    xr.testing.assert_identical(ds.load(), xr.open_zarr(path, consolidated=False).load())
    week = jask.xarray.open_dataset(path).X.sel(time=slice("2020-01-03", "2020-01-09"))
    np.testing.assert_allclose(_values(week.mean("time", skipna=False)), x[2:9].mean(0),
                               rtol=1e-5)


def test_to_zarr_streams_diskarrays_into_a_group(tmp_path, data):
    on_disk, in_memory = _wrap(*data)
    z = OPERATIONS["standardise"](on_disk).to_dataset(name="Z")
    jask.xarray.to_zarr(z, tmp_path / "z.zarr")
    back = xr.open_zarr(tmp_path / "z.zarr", consolidated=False).load()
    xr.testing.assert_allclose(back, OPERATIONS["standardise"](in_memory).to_dataset(name="Z"),
                               rtol=2e-5, atol=2e-5)


def test_what_xarray_cannot_do_with_a_diskarray_is_refused_clearly(data):
    ds, _ = _wrap(*data)
    with pytest.raises(NotImplementedError, match="core dimensions"):
        # (without allow_rechunk, xarray stops earlier: it reads .chunks as Dask's)
        xr.apply_ufunc(lambda a: a.sum(-1), ds.X, input_core_dims=[["feature"]],
                       dask="parallelized", dask_gufunc_kwargs={"allow_rechunk": True})
    with pytest.raises(NotImplementedError, match="vectorize"):
        xr.apply_ufunc(lambda a: a + 1, ds.X, dask="parallelized", vectorize=True)


DAYS = 731


@pytest.fixture
def daily(small_budget):
    """Daily (time, point) values with NaNs in them, and their dates."""
    rng = np.random.default_rng(2)
    x = (10 + rng.standard_normal((DAYS, M))).astype(np.float32)
    x[rng.random(x.shape) < 0.02] = np.nan
    return x, pd.date_range("2001-01-01", periods=DAYS, freq="D")


def _daily(x, time):
    """The DataArray on disk and in memory."""
    return (xr.DataArray(jask.from_numpy(x), dims=("time", "point"), coords={"time": time}),
            xr.DataArray(x, dims=("time", "point"), coords={"time": time}))


def test_resample_mean_reads_the_data_once(daily):
    """Monthly means with xarray's defaults: each month a slice (a view),
    reduced skipping NaNs; together one pass, nothing written."""
    on_disk, in_memory = _daily(*daily)
    with jask.track() as counts:
        got = _values(on_disk.resample(time="MS").mean())
    np.testing.assert_allclose(got, in_memory.resample(time="MS").mean().values, rtol=2e-5,
                               atol=2e-5, equal_nan=True)
    assert 0.99 <= counts.passes(on_disk.data) <= 1.2, counts
    assert counts.bytes_written == 0, counts


def test_groupby_mean_and_anomalies_match_xarray_in_memory(daily):
    """The climatology and the anomalies: xarray chunks the climatology with
    Dask and indexes it by each day's month, an array as large as the data;
    jask writes it to a store block by block (it raised BudgetError: an
    in-memory operand over a quarter of the budget) and the anomalies stay on
    disk."""
    on_disk, in_memory = _daily(*daily)
    clim, want_clim = (a.groupby("time.month").mean() for a in (on_disk, in_memory))
    np.testing.assert_allclose(_values(clim), want_clim.values, rtol=2e-5, atol=2e-5)
    anomalies = on_disk.groupby("time.month") - clim
    want = in_memory.groupby("time.month") - want_clim
    assert isinstance(anomalies.data, jask.DiskArray)
    assert anomalies.nbytes > jask.get_config().max_memory / 4  # (the case that raised)
    np.testing.assert_allclose(_values(anomalies), want.values, rtol=2e-5, atol=2e-5,
                               equal_nan=True)


#: xarray's defaults (NaN-skipping, no flox) on daily data: each result reads
#: the data once and writes nothing (a groupby takes each group's days by an
#: integer array: runs of days, a view; the anomaly's climatology indexed by
#: each day's month comes as a Dask array, computed band by band where read)
DEFAULTS = {
    "groupby mean": lambda da: da.groupby("time.month").mean(),
    "groupby season mean": lambda da: da.groupby("time.season").mean(),  # unequal groups
    "resample mean": lambda da: da.resample(time="MS").mean(),
    "anomaly": lambda da, clim: ((da.groupby("time.month") - clim) ** 2).sum(),
}


def _store_of(x, time, path, chunk_days, compressed):
    """(time, point) written by xarray with ``chunk_days`` a chunk (a ragged
    last one), opened by jask.xarray."""
    encoding = {"chunks": (chunk_days, x.shape[1])}
    if not compressed:
        encoding["compressors"] = None
    xr.Dataset({"t2m": (("time", "point"), x)}, coords={"time": time}).to_zarr(
        path, mode="w", encoding={"t2m": encoding}, consolidated=False)
    return jask.xarray.open_dataset(path).t2m


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
@pytest.mark.parametrize("case", list(DEFAULTS))
@pytest.mark.parametrize("layout", ["from_numpy", "xarray chunks of 20 days",
                                    "xarray zstd chunks of 20 days"])
def test_xarray_defaults_read_the_data_once_and_write_nothing(small_budget, tmp_path, case,
                                                             layout):
    """On data 3x the budget, each group's days too many for memory (1/8 of
    the budget: a copy would be written); chunks not aligned with months (20
    days, a ragged last chunk of 11), a month with no number at all (its
    mean NaN, as xarray's)."""
    rng = np.random.default_rng(3)
    x = (10 + rng.standard_normal((DAYS, 64))).astype(np.float32)
    x[rng.random(x.shape) < 0.02] = np.nan
    time = pd.date_range("2001-01-01", periods=DAYS, freq="D")
    assert x.nbytes > 2 * jask.get_config().max_memory
    x[(time.month == 3) & (time.year == 2001)] = np.nan
    x[(time.month == 3) & (time.year == 2002)] = np.nan  # March: all NaN
    if layout == "from_numpy":
        on_disk = _daily(x, time)[0]
    else:
        on_disk = _store_of(x, time, tmp_path / "ds.zarr", 20, "zstd" in layout)
        assert on_disk.data.chunks == (20, 64) and DAYS % 20
    in_memory = _daily(x, time)[1]
    f = DEFAULTS[case]
    args, want_args = (), ()
    if case == "anomaly":
        args = (DEFAULTS["groupby mean"](on_disk).load(),)
        want_args = (DEFAULTS["groupby mean"](in_memory),)
        assert np.isnan(args[0].sel(month=3).values).all()
    with jask.track() as counts:
        got = _values(f(on_disk, *args))
    want = f(in_memory, *want_args).values
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
    assert 0.99 <= counts.passes(on_disk.data) <= 1.01, counts
    assert counts.bytes_written == 0, counts
    assert counts.total.bytes_read <= 1.01 * on_disk.nbytes, counts  # no copy of it read
