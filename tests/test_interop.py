"""jask stores open in other readers; Dask arrays become jask stores."""
import dask
import dask.array as da
import jax
import numpy as np
import pytest
import zarr

import jask


@pytest.fixture
def small_budget(tmp_path):
    jask.set_memory_budget("4MB", scratch_dir=str(tmp_path / "scratch"))


def _values(shape=(300, 200)):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7


def test_store_opens_in_zarr_dask_and_xarray():
    xarray = pytest.importorskip("xarray")
    values = _values()
    x = jask.from_numpy(values) * 2.0
    np.testing.assert_array_equal(zarr.open_array(x.filename, mode="r")[...], values * 2)
    np.testing.assert_array_equal(da.from_zarr(x.filename).compute(), values * 2)
    arr = xarray.DataArray(jask.to_dask(x), dims=("row", "col"))
    np.testing.assert_allclose(arr.mean("col").compute().values, (values * 2).mean(1),
                               rtol=1e-6)


def test_to_dask_keeps_the_store_chunks(small_budget):
    x = jask.from_numpy(np.ones((1000, 1000), np.float32))
    d = jask.to_dask(x)
    assert d.chunksize == x.chunks and x.chunks[0] < 1000
    assert float(d.sum().compute()) == 1e6


def test_to_dask_sees_update_(small_budget):
    x = jask.from_numpy(np.zeros(10, np.float32))
    d = jask.to_dask(x)
    x = x.update_(x + 1.0)
    assert float(d.sum().compute()) == 10.0


def test_to_dask_rejects_other_values():
    with pytest.raises(TypeError, match="DiskArray"):
        jask.to_dask(np.ones(3))


def test_from_dask_rechunks_to_budget_chunks(small_budget):
    values = np.random.default_rng(0).standard_normal((1000, 1000)).astype(np.float32)
    x = jask.from_dask(da.from_array(values, chunks=(100, 1000)) + 1)
    assert x.chunks != (100, 1000) and x.chunks[0] < 1000
    assert zarr.open_array(x.filename).chunks == x.chunks
    np.testing.assert_array_equal(x.to_numpy(), values + 1)


def test_from_dask_result_is_an_ordinary_jask_value(small_budget):
    w = jask.from_dask(da.ones((50, 4), chunks=(7, 3), dtype=np.float32))
    grad = jax.grad(lambda w: jask.sum(jask.square(w)))(w)
    np.testing.assert_array_equal(grad.to_numpy(), 2.0)
    path = w.filename
    assert path in jask.store.registry.live_paths()
    del w, grad
    jask.collect()
    assert path not in jask.store.registry.live_paths()


def test_from_dask_roundtrip_through_to_dask(small_budget):
    x = jask.from_numpy(_values())
    y = jask.from_dask(jask.to_dask(x).T)
    np.testing.assert_array_equal(y.to_numpy(), _values().T)
    assert y.filename != x.filename


def test_from_dask_failure_leaves_no_store(small_budget):
    def broken(block):
        raise RuntimeError("cannot read this chunk")

    before = jask.store.registry.live_paths()
    bad = da.ones((100,), chunks=10).map_blocks(broken, dtype=float)
    with pytest.raises(RuntimeError, match="cannot read"):
        jask.from_dask(bad)
    jask.collect()
    assert jask.store.registry.live_paths() == before


@pytest.mark.parametrize("bad, error", [
    (np.ones(3), TypeError),
    (da.ones(5, chunks=2).astype(object), ValueError),
])
def test_from_dask_rejects_bad_input(bad, error):
    with pytest.raises(error, match="from_dask"):
        jask.from_dask(bad)


def test_from_dask_unknown_shape():
    x = da.arange(10, chunks=5)
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        jask.from_dask(x[x > 3])


def test_from_dask_on_a_distributed_client(small_budget):
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None):
        x = jask.from_dask(da.arange(1000.0, chunks=100))
        assert float(jask.sum(x)) == 499500.0


def test_from_dask_with_a_synchronous_scheduler(small_budget):
    with dask.config.set(scheduler="synchronous"):
        x = jask.from_dask(da.full((20, 20), 3.0, chunks=5))
    assert float(jask.sum(x)) == 1200.0


def test_a_large_dask_operand_is_computed_where_it_is_read(small_budget):
    """A Dask operand too large for memory (xarray's climatology indexed by
    each day's month) is not written: each band computes its rows of it, so
    ``sum((X - d) ** 2)`` reads X once and writes nothing."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2000, 512)).astype(np.float32)
    table = rng.standard_normal((12, 512)).astype(np.float32)
    codes = rng.integers(0, 12, 2000)
    d = da.from_array(table, chunks=(1, 200))[codes]  # chunks of one row, as xarray's
    assert d.nbytes > jask.get_config().max_memory / 4
    X = jask.from_numpy(x)
    with jask.track() as t:
        got = float(jask.sum((X - d) ** 2))
    want = float(((x.astype(np.float64) - table[codes]) ** 2).sum())
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert t.bytes_written == 0 and 0.99 <= t.passes(X) <= 1.01, t
    assert t.total.bytes_read <= 1.01 * X.nbytes, t
    np.testing.assert_array_equal((X - d).to_numpy(), x - table[codes])  # read alone: written
