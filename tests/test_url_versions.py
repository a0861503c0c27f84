"""A user's Zarr array at a URL replaced by another writer: one version or an error.

Arrays at URLs carry no version token; jask records the ETag and size of
the array's metadata object (zarr.json, .zarray for v2) when it is opened
and compares them by one HEAD after an op's reads (jask.store.versions).
Here another writer (plain zarr over its ObjectStore, on a real S3 server process:
tests/s3server.py) rewrites the metadata before an op and in the middle of
one; the op raises StoreChangedError naming the URL, and nothing it would
have written exists.
"""
from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
import zarr
from s3server import zarr_store

import jask
from jask.store.kinds.objects import remote

SHAPE, CHUNKS = (37, 23), (8, 6)  # 5 x 4 chunk objects; tiles do not divide the shape


def _write_with_zarr(url: str, values: np.ndarray, **layout) -> None:
    z = zarr.create_array(store=zarr_store(url), shape=values.shape, dtype=values.dtype, **layout)
    z[:] = values


@pytest.mark.parametrize("fmt", [3, 2])
def test_array_replaced_after_open_is_refused_and_nothing_is_saved(s3_bucket, small_budget,
                                                                    fmt):
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    url, out = f"{s3_bucket}/x.zarr", f"{s3_bucket}/out.zarr"
    _write_with_zarr(url, x, chunks=CHUNKS, zarr_format=fmt)
    a = jask.open(url)
    np.testing.assert_allclose(float(jask.sum(a)), x.sum(), rtol=1e-5)  # unchanged: fine
    y = np.arange(40 * 20, dtype=np.float64).reshape(40, 20)
    _write_with_zarr(url, y, chunks=(10, 10), zarr_format=fmt, overwrite=True)  # another writer
    with pytest.raises(jask.StoreChangedError, match=f"'{url}' was replaced by another writer"):
        jask.save(a * 2, out)
    assert not remote.exists(out) and remote.list_prefix(out) == []
    with pytest.raises(jask.StoreChangedError, match="Open it again"):
        (a + 1).to_numpy()  # still the old array's shape: refused again
    b = jask.open(url)  # opened again: the new array
    assert b.shape == y.shape
    np.testing.assert_array_equal(jask.save(b * 2, out).to_numpy(), y * 2)


def test_metadata_rewritten_mid_op_is_refused(s3_bucket, small_budget):
    """Another writer grows the array (a new zarr.json) after the op's first
    tiles are read: the op raises, and its output is never published."""
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    url, out = f"{s3_bucket}/x.zarr", f"{s3_bucket}/out.zarr"
    _write_with_zarr(url, x, chunks=CHUNKS, compressors=None)
    a = jask.open(url)
    rewritten = threading.Event()

    def other_writer():  # runs inside the first tile's kernel, after that tile's read
        if not rewritten.is_set():
            rewritten.set()
            zarr.open_array(zarr_store(url), mode="r+").resize((SHAPE[0] + 8, SHAPE[1]))

    def f(t):
        jax.debug.callback(other_writer)
        return t * 3

    with jask.track() as counts:
        with pytest.raises(jask.StoreChangedError, match=f"'{url}' was replaced"):
            jask.save(jask.map(f, a), out)
    assert rewritten.is_set() and counts.total.requests > 1
    assert not remote.exists(out) and remote.list_prefix(out) == []
    assert jask.open(url).shape == (SHAPE[0] + 8, SHAPE[1])


def test_an_unchanged_array_costs_one_head_per_op(s3_bucket, small_budget):
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    url = f"{s3_bucket}/x.zarr"
    _write_with_zarr(url, x, chunks=CHUNKS, compressors=None)
    a = jask.open(url)
    with jask.track() as counts:
        total = float(jask.sum(a))
    np.testing.assert_allclose(total, x.sum(), rtol=1e-5)
    assert counts.total.requests == 5 * 4 + 1, counts  # a GET per chunk object, one HEAD
