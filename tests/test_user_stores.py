"""Stores users bring, written by plain zarr with other tools' choices:
compressed (zstd, blosc, gzip), sharded, Zarr v2 in C and F order, ragged
chunks, chunks from a few elements to larger than a task's share of the
budget, missing (fill-value) chunks, and operands on different chunk grids.
Every op agrees with numpy, and update_ into a sharded or compressed store
keeps its layout and writes every shard whole."""

import jax
import numpy as np
import pytest
import zarr

import jask
from helpers import tolerance, user_store, write_store

SHAPE = (301, 203)

LAYOUTS = {
    "plain v3": dict(chunks=(64, 64), compressors=None),
    "zstd": dict(chunks=(50, 70), compressors=zarr.codecs.ZstdCodec()),
    "blosc": dict(chunks=(33, 203), compressors=zarr.codecs.BloscCodec()),
    "gzip": dict(chunks=(128, 16), compressors=zarr.codecs.GzipCodec()),
    "sharded": dict(chunks=(20, 30), shards=(40, 90)),
    "sharded plain": dict(chunks=(64, 50), shards=(128, 200), compressors=None),
    "sharded blosc": dict(chunks=(32, 32), shards=(64, 64), compressors=zarr.codecs.BloscCodec()),
    "v2 C": dict(chunks=(45, 45), zarr_format=2),
    "v2 F": dict(chunks=(45, 60), zarr_format=2, order="F"),
    "v2 plain F": dict(chunks=(100, 100), zarr_format=2, order="F", compressors=None),
    "tiny chunks": dict(chunks=(3, 5), compressors=None),
    "whole array": dict(chunks=SHAPE, compressors=zarr.codecs.ZstdCodec()),
}


@pytest.fixture
def budget(jask_scratch):
    jask.set_memory_budget("2MB", scratch_dir=jask_scratch.path)
    return jask.get_config()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ops_on_a_user_store_match_numpy(tmp_path, budget, layout):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    y = rng.standard_normal(SHAPE).astype(np.float32)
    a = user_store(tmp_path / "a.zarr", x, **LAYOUTS[layout])
    b = user_store(tmp_path / "b.zarr", y, chunks=(77, 41), compressors=None)
    tol = tolerance(np.float32)
    np.testing.assert_allclose((a + b).to_numpy(), x + y, **tol)
    np.testing.assert_allclose((b - a).to_numpy(), y - x, **tol)
    np.testing.assert_allclose((2.5 * a).to_numpy(), 2.5 * x, **tol)
    np.testing.assert_allclose(jask.square(a).to_numpy(), x * x, **tol)
    np.testing.assert_allclose(jask.transpose(a).to_numpy(), x.T, **tol)
    np.testing.assert_allclose(float(jask.sum(a)), x.sum(dtype=np.float64), rtol=1e-4)
    np.testing.assert_allclose((a @ jask.transpose(b)).to_numpy(), x @ y.T, rtol=1e-3, atol=1e-3)
    grad = jax.grad(lambda a: jask.sum(jask.square(a)))(a)
    np.testing.assert_allclose(grad.to_numpy(), 2 * x, **tol)
    assert np.array_equal(zarr.open_array(a.filename)[:], x)  # the input is untouched


@pytest.mark.parametrize("layout", ["sharded", "zstd", "v2 F", "plain v3"])
def test_update_into_a_user_store_keeps_its_layout(tmp_path, budget, layout):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    target_path = write_store(tmp_path / "t.zarr", np.zeros(SHAPE, np.float32),
                              **LAYOUTS[layout])
    before = zarr.open_array(target_path)
    t = jask.open(target_path)
    s = jask.from_numpy(x)
    t.update_(s * 2.0)
    after = zarr.open_array(target_path)
    np.testing.assert_array_equal(after[:], 2 * x)
    assert (after.chunks, after.shards, after.order, after.metadata.zarr_format) == (
        before.chunks, before.shards, before.order, before.metadata.zarr_format)
    assert [type(c) for c in after.compressors] == [type(c) for c in before.compressors]


def test_missing_chunks_read_as_the_fill_value(tmp_path, budget):
    for fmt, extra in [(2, {}), (3, {}), (3, {"shards": (60, 60)})]:
        path = str(tmp_path / f"sparse{fmt}{len(extra)}.zarr")
        z = zarr.create_array(store=path, shape=(100, 100), chunks=(30, 30), dtype="float32",
                              fill_value=7.0, zarr_format=fmt, **extra)
        z[0:30, 0:30] = 1.0
        expected = np.full((100, 100), 7.0, np.float32)
        expected[0:30, 0:30] = 1.0
        np.testing.assert_array_equal((jask.open(path) * 1.0).to_numpy(), expected)


def test_operands_on_different_grids(tmp_path, jask_scratch):
    jask.set_memory_budget("32MB", scratch_dir=jask_scratch.path)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2000, 2048)).astype(np.float32)
    y = rng.standard_normal((2000, 2048)).astype(np.float32)
    a = user_store(tmp_path / "a.zarr", x, chunks=(1000, 1000), compressors=None)
    b = user_store(tmp_path / "b.zarr", y, chunks=(512, 2048),
                   compressors=zarr.codecs.ZstdCodec())
    np.testing.assert_allclose((a * b).to_numpy(), x * y, **tolerance(np.float32))
    np.testing.assert_allclose((b + a).to_numpy(), x + y, **tolerance(np.float32))


def test_chunks_too_large_for_the_budget_are_refused_naming_the_store(tmp_path, jask_scratch):
    jask.set_memory_budget("2MB", scratch_dir=jask_scratch.path)
    x = np.ones((1024, 1024), np.float32)  # one 4 MB zstd chunk: cannot be decoded in 2 MB
    path = write_store(tmp_path / "big.zarr", x, chunks=(1024, 1024),
                       compressors=zarr.codecs.ZstdCodec())
    a = jask.open(path)
    with pytest.raises(jask.BudgetError, match=r"big\.zarr.*\(1024, 1024\).*zstd.*Rechunk"):
        a + a
    # the same chunks uncompressed are read by row ranges: it runs
    plain = user_store(tmp_path / "plain.zarr", x, chunks=(1024, 1024), compressors=None)
    np.testing.assert_array_equal((plain + plain).to_numpy(), 2 * x)
