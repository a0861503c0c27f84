"""DiskArray basics the op table (ops_table.py) does not cover: tiling,
streaming a long contraction, update_, memmaps, attributes, opened stores.

Values of the ops themselves are checked by test_table.py."""
import numpy as np
import pytest

import jask
from helpers import rand, write_store


def test_small_budget_forces_many_tiles(small_budget, rng):
    a = jask.from_numpy(rand(rng, (97, 61), np.float32))
    assert np.prod([-(-s // c) for s, c in zip(a.shape, a.chunks)]) >= 4


def test_dot_streams_a_long_contraction(small_budget, rng):
    """K far larger than a tile: the product is split and summed by a tree."""
    x, y = rand(rng, (7, 5000), np.float32), rand(rng, (5000, 3), np.float32)
    np.testing.assert_allclose(jask.dot(jask.from_numpy(x), jask.from_numpy(y)).to_numpy(),
                               x @ y, rtol=1e-4, atol=1e-3)


def test_update_in_place(small_budget, rng, dtype):
    x, y = rand(rng, (97, 61), dtype), rand(rng, (97, 61), dtype)
    a, b = jask.from_numpy(x), jask.from_numpy(y)
    path = a.filename
    a2 = a.update_(b)
    assert a2.filename == path == a.filename
    np.testing.assert_array_equal(a.to_numpy(), y)
    np.testing.assert_array_equal(b.to_numpy(), y)  # the source is untouched


def test_to_memmap_reads_and_writes_tiles(small_budget, rng):
    x = rand(rng, (97, 61), np.float32)
    a = jask.from_numpy(x)
    view = a.to_memmap()
    np.testing.assert_array_equal(view[3:5, 7], x[3:5, 7])
    view[0, 0] = 42.0
    assert a.to_numpy()[0, 0] == 42.0


def test_attributes_and_repr(small_budget):
    a = jask.from_numpy(np.zeros((4, 6), np.float32))
    assert (a.shape, a.dtype, a.ndim, a.size, a.nbytes) == ((4, 6), np.float32, 2, 24, 96)
    assert len(a) == 4
    assert "shape=(4, 6)" in repr(a) and "float32" in repr(a) and a.filename in repr(a)


def test_open_existing_store_is_never_modified_or_deleted(small_budget, tmp_path, rng):
    import zarr
    x = rand(rng, (50, 40), np.float32)
    path = write_store(tmp_path / "features.zarr", x, chunks=(16, 16))
    a = jask.open(path)
    assert a.filename == path and a.shape == x.shape
    np.testing.assert_allclose((a + a).to_numpy(), 2 * x)
    del a
    jask.collect()
    np.testing.assert_array_equal(zarr.open_array(path)[:], x)
    # The constructor wraps an existing store the same way.
    b = jask.DiskArray(path, (50, 40), np.float32)
    np.testing.assert_allclose(float(jask.sum(b)), x.sum(), rtol=1e-4)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_update_keeps_an_opened_store_layout(small_budget, tmp_path, rng, zarr_format):
    import zarr
    path = str(tmp_path / "params.zarr")
    extra = {"dimension_names": ("row", "col")} if zarr_format == 3 else {}
    z = zarr.create_array(store=path, shape=(20, 10), chunks=(8, 5), dtype="float32",
                          zarr_format=zarr_format, attributes={"units": "m"}, **extra)
    z[:] = 0.0
    x = rand(rng, (20, 10), np.float32)
    jask.open(path).update_(jask.from_numpy(x))
    after = zarr.open_array(path)
    assert after.metadata.zarr_format == zarr_format and after.chunks == (8, 5)
    assert dict(after.attrs) == {"units": "m"}
    if zarr_format == 3:
        assert after.metadata.dimension_names == ("row", "col")
    np.testing.assert_array_equal(after[:], x)
