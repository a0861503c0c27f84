"""Values of every op against numpy, on odd shapes split into many tiles."""
import numpy as np
import pytest

import jask
from helpers import rand, tolerance

SHAPES = [(97, 61), (5, 33, 19), (301,)]


def test_small_budget_forces_many_tiles(small_budget, rng):
    a = jask.from_numpy(rand(rng, (97, 61), np.float32))
    assert np.prod([-(-s // c) for s, c in zip(a.shape, a.chunks)]) >= 4


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_binary(small_budget, rng, dtype, shape, op):
    x, y = rand(rng, shape, dtype), rand(rng, shape, dtype)
    a, b = jask.from_numpy(x), jask.from_numpy(y)
    out = getattr(jask, op)(a, b)
    expected = getattr(np, {"add": "add", "sub": "subtract", "mul": "multiply"}[op])(x, y)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_allclose(out.to_numpy(), expected, **tolerance(dtype))


@pytest.mark.parametrize("shape", SHAPES)
def test_operators_and_scalars(small_budget, rng, dtype, shape):
    x, y = rand(rng, shape, dtype), rand(rng, shape, dtype)
    a, b = jask.from_numpy(x), jask.from_numpy(y)
    tol = tolerance(dtype)
    np.testing.assert_allclose((a + b).to_numpy(), x + y, **tol)
    np.testing.assert_allclose((a - b).to_numpy(), x - y, **tol)
    np.testing.assert_allclose((a * b).to_numpy(), x * y, **tol)
    np.testing.assert_allclose((2.5 * a).to_numpy(), 2.5 * x, **tol)
    np.testing.assert_allclose((a * 2.5).to_numpy(), 2.5 * x, **tol)
    np.testing.assert_allclose((np.float32(3) * a).to_numpy(), 3 * x, **tol)
    np.testing.assert_allclose((a + 1.5).to_numpy(), x + 1.5, **tol)
    np.testing.assert_allclose((1.5 + a).to_numpy(), x + 1.5, **tol)
    np.testing.assert_allclose((a - 1.5).to_numpy(), x - 1.5, **tol)
    np.testing.assert_allclose((1.5 - a).to_numpy(), 1.5 - x, **tol)
    np.testing.assert_allclose((-a).to_numpy(), -x, **tol)
    assert (2.5 * a).dtype == dtype


@pytest.mark.parametrize("shape", SHAPES)
def test_square_and_sum(small_budget, rng, dtype, shape):
    x = rand(rng, shape, dtype)
    a = jask.from_numpy(x)
    np.testing.assert_allclose(jask.square(a).to_numpy(), x * x, **tolerance(dtype))
    s = jask.sum(a)
    assert s.shape == () and s.dtype == dtype
    np.testing.assert_allclose(float(s), x.sum(dtype=np.float64), **tolerance(dtype))


@pytest.mark.parametrize("shape,axes", [((97, 61), None), ((5, 33, 19), (2, 0, 1)),
                                        ((5, 33, 19), (1, 0, 2)), ((5, 33, 19), (-1, 1, 0)),
                                        ((301,), None)])
def test_transpose(small_budget, rng, dtype, shape, axes):
    x = rand(rng, shape, dtype)
    out = jask.transpose(jask.from_numpy(x), axes=axes)
    np.testing.assert_array_equal(out.to_numpy(), np.transpose(x, axes))


def test_T_property(small_budget, rng):
    x = rand(rng, (97, 61), np.float32)
    np.testing.assert_array_equal(jask.from_numpy(x).T.to_numpy(), x.T)


@pytest.mark.parametrize("a_shape,b_shape", [((97, 61), (61, 43)), ((3, 37, 29), (3, 29, 41)),
                                             ((257, 3), (3, 1)), ((1, 200), (200, 1)),
                                             ((2, 2, 17, 9), (2, 2, 9, 13))])
def test_dot(small_budget, rng, dtype, a_shape, b_shape):
    x, y = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    out = jask.dot(jask.from_numpy(x), jask.from_numpy(y))
    assert out.shape == np.matmul(x, y).shape
    np.testing.assert_allclose(out.to_numpy(), np.matmul(x, y), **tolerance(dtype))
    np.testing.assert_allclose((jask.from_numpy(x) @ jask.from_numpy(y)).to_numpy(),
                               x @ y, **tolerance(dtype))


def test_dot_streams_a_long_contraction(small_budget, rng):
    """K far larger than a tile: the product is split and summed by a tree."""
    x, y = rand(rng, (7, 5000), np.float32), rand(rng, (5000, 3), np.float32)
    np.testing.assert_allclose(jask.dot(jask.from_numpy(x), jask.from_numpy(y)).to_numpy(),
                               x @ y, rtol=1e-4, atol=1e-3)


def test_materialize(small_budget, rng, dtype):
    x = rand(rng, (97, 61), dtype)
    m = jask.materialize(jask.from_numpy(x))
    assert m.dtype == dtype
    np.testing.assert_array_equal(np.asarray(m), x)


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
    path = str(tmp_path / "features.zarr")
    z = zarr.create_array(store=path, shape=x.shape, chunks=(16, 16), dtype=x.dtype)
    z[:] = x
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
