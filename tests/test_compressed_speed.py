"""Compressed and sharded stores at full speed, counted in chunk decodes
(never the clock): each op decodes each chunk of its inputs once, and a
slice of a compressed store is planned in tiles of at least budget/64.

Decodes are counted as jask counts them (``jask.track``): the stored bytes
read from a store, against the bytes of its chunks as Zarr wrote them."""
import math

import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import jask
from helpers import bytes_on_disk, tolerance, user_store

LAYOUTS = {
    "zstd": dict(chunks=(32, 24), compressors=zarr.codecs.ZstdCodec()),
    "sharded": dict(chunks=(32, 24), shards=(64, 48), compressors=zarr.codecs.ZstdCodec()),
}


def chunk_bytes(x) -> int:
    """Bytes of a store's chunks as stored (a shard's index left out)."""
    z = zarr.open_array(x.filename, mode="r")
    total = bytes_on_disk(x.filename, metadata=False)
    if getattr(z, "shards", None):
        inner = math.prod(s // c for s, c in zip(z.shards, z.chunks))
        shards = math.prod(-(-n // s) for n, s in zip(z.shape, z.shards))
        total -= shards * (16 * inner + 4)
    return total


def decodes(track, x) -> float:
    """Chunks of ``x`` decoded per chunk of ``x``."""
    return track.store(x).stored_read / chunk_bytes(x)


@pytest.fixture(params=list(LAYOUTS))
def stores(request, tmp_path, rng, small_budget):
    """Two compressed user stores of ragged shapes (tiles do not divide them)."""
    layout = LAYOUTS[request.param]
    a = rng.standard_normal((150, 130)).astype(np.float32)
    b = rng.standard_normal((130, 110)).astype(np.float32)
    return (user_store(tmp_path / "a.zarr", a, **layout), a,
            user_store(tmp_path / "b.zarr", b, **layout), b)


def test_a_product_of_two_compressed_stores_decodes_each_chunk_once(stores):
    A, a, B, b = stores
    with jask.track() as t:
        C = (A @ B).block_until_ready()  # eager ops are lazy: computed inside the block
    np.testing.assert_allclose(C.to_numpy(), a @ b, **tolerance(np.float32))
    # a tiled product reads each tile of A once per column of output tiles:
    # A and B are decoded once into uncompressed copies, which it reads instead
    assert decodes(t, A) == 1.0
    assert decodes(t, B) == 1.0


def test_sums_and_products_with_memory_decode_each_chunk_once(stores):
    A, a, _, _ = stores
    w = jnp.asarray(np.linspace(-1, 1, 130 * 3, dtype=np.float32).reshape(130, 3))
    with jask.track() as t:
        total = float(jask.sum(A))
        Aw = np.asarray(A @ w)
    np.testing.assert_allclose(total, a.sum(dtype=np.float64), rtol=1e-4)
    np.testing.assert_allclose(Aw, a @ np.asarray(w), **tolerance(np.float32))
    assert decodes(t, A) == 2.0  # two ops, each chunk once per op


def test_elementwise_tiles_hold_whole_compressed_chunks(tmp_path, rng, small_budget):
    """A chunk is decoded straight into the tile that holds it whole, so
    whole chunks of 9 KB fit a 64 KB budget (48 KB besides the op's own) where
    a decode buffer beside each tile left only halves (each chunk then
    decoded twice)."""
    x = rng.standard_normal((288, 256)).astype(np.float32)
    X = user_store(tmp_path / "x.zarr", x, chunks=(36, 64), compressors=zarr.codecs.ZstdCodec())
    with jask.track() as t:
        Y = (X + X).block_until_ready()
    np.testing.assert_array_equal(Y.to_numpy(), x + x)
    assert decodes(t, X) == 2.0  # two operands, each chunk once for each


@pytest.mark.parametrize("rows,cols", [(slice(37, 7000), slice(None)), (slice(3, 6100, 3), 1)])
def test_a_slice_of_a_compressed_store_reads_tiles_of_at_least_budget_over_64(
        tmp_path, rng, small_budget, rows, cols):
    x = rng.standard_normal((7400, 8)).astype(np.float32)
    # chunks of 1/8 of the budget: reading one (encoded and decoded) takes a
    # quarter of it, whatever the tile
    X = user_store(tmp_path / "x.zarr", x, chunks=(256, 8), compressors=zarr.codecs.ZstdCodec())
    step = jask.visualize(lambda v: v[rows, cols], X).steps[-1]
    want = x[rows, cols]
    assert math.prod(step.tile) * 4 >= min(small_budget.max_memory // 64, want.nbytes)
    with jask.track() as t:
        got = X[rows, cols]
    np.testing.assert_array_equal(got.to_numpy(), want)
    # windows that start inside chunks decode a chunk more per tile, no more
    # (tiles of 1/32 of the budget decoded each chunk 6.8 times)
    spanned = (-(-(rows.stop - rows.start) // 256) + 1) / (7400 / 256)
    assert t.store(X).stored_read <= 2.5 * spanned * chunk_bytes(X)


def test_ops_that_read_chunks_by_lanes_windows_or_passes_decode_each_chunk_once(
        tmp_path, rng, small_budget):
    """Sorts (whole lanes), gathers, reshapes, joins and two-pass scans cut
    compressed chunks or read them twice: their inputs are decoded once,
    first, into uncompressed copies."""
    x = rng.standard_normal((150, 130)).astype(np.float32)
    X = user_store(tmp_path / "x.zarr", x, chunks=(32, 24), compressors=zarr.codecs.ZstdCodec())
    cases = {"sort": (lambda: jask.sort(X, axis=0), np.sort(x, axis=0)),
             "flip": (lambda: jask.flip(X), np.flip(x)),
             "reshape": (lambda: X.reshape((130, 150)), x.reshape((130, 150))),
             "concatenate": (lambda: jask.concatenate([X, X], axis=1), np.concatenate([x, x], 1)),
             "cumsum": (lambda: jask.cumsum(X, axis=1), np.cumsum(x, axis=1))}
    for name, (op, want) in cases.items():
        with jask.track() as t:
            got = op()
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-5, atol=1e-4, err_msg=name)
        assert decodes(t, X) == 1.0, name
