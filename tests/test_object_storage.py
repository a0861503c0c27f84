"""Zarr stores in object storage: read, computed on and saved by jask.

Every store here lives on a real S3-compatible server (moto's server mode,
a separate process on 127.0.0.1: tests/s3server.py), reached through the
standard environment variables only. Inputs are written by plain zarr (over
zarr's own ObjectStore) with other tools' chunkings; results are checked against numpy and
jax.numpy; faults are the server process killed mid-op.
"""
from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numcodecs
import numpy as np
import pytest
import zarr
from s3server import ACCESS_KEY, SECRET_KEY, zarr_store

import jask
from jask.store.kinds.objects import buckets, remote

#: Layouts other tools write: (zarr.create_array keywords), shape (37, 23).
LAYOUTS = {
    "small-ragged": dict(chunks=(8, 6), compressors=None),  # tiles do not divide 37, 23
    "large-chunk": dict(chunks=(40, 30), compressors=None),  # (past the edges: padded)
    "zstd": dict(chunks=(10, 12), compressors=zarr.codecs.ZstdCodec(level=3)),
    "sharded-zstd": dict(chunks=(5, 6), shards=(10, 12)),  # (zarr's default v3 compressor)
    "v2-gzip": dict(chunks=(10, 10), zarr_format=2, compressors=numcodecs.GZip()),
}


def _write_with_zarr(url: str, values: np.ndarray, **layout) -> None:
    """A store as zarr-python writes it to S3 (its ObjectStore), not through jask."""
    z = zarr.create_array(store=zarr_store(url), shape=values.shape, dtype=values.dtype, **layout)
    z[:] = values


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_layout_reads_as_numpy(s3_bucket, small_budget, name):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, 23)).astype(np.float32)
    url = f"{s3_bucket}/{name}.zarr"
    _write_with_zarr(url, x, **LAYOUTS[name])
    a = jask.open(url)
    assert a.filename == url and a.shape == x.shape
    with jask.track() as t:
        total = float(jask.sum(a))
        y = (a * a + 2).to_numpy()
    np.testing.assert_allclose(total, x.sum(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y, x * x + 2, rtol=1e-6)
    np.testing.assert_array_equal(a[5:29, 3:17].to_numpy(), x[5:29, 3:17])
    assert t.total.requests > 0 and t.total.retries == 0
    assert t.store(a).stored_read > 0


def test_uncompressed_chunks_are_read_by_ranges(s3_bucket, small_budget):
    """A tile of a few rows of a large uncompressed chunk fetches those rows,
    not the chunk."""
    x = (np.arange(400 * 600) % 97).astype(np.float32).reshape(400, 600)  # sums exactly
    url = f"{s3_bucket}/big-chunk.zarr"
    _write_with_zarr(url, x, chunks=(400, 600), compressors=None)  # 960 kB, budget 64 kB
    a = jask.open(url)
    with jask.track() as t:
        total = float(jask.sum(a))
    assert total == x.sum()
    assert t.store(a).stored_read == x.nbytes  # each byte once: ranged GETs of row bands
    assert t.total.requests > 10


def test_matmul_and_a_jitted_gradient_step(s3_bucket, small_budget, dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((53, 19)).astype(dtype)
    w0 = rng.standard_normal(19).astype(dtype)
    url = f"{s3_bucket}/X.zarr"
    _write_with_zarr(url, x, chunks=(7, 19), compressors=zarr.codecs.ZstdCodec())
    X = jask.open(url)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose((X @ jnp.asarray(w0)).to_numpy(), x @ w0, rtol=tol, atol=tol)

    def loss(w):
        return jask.sum(jask.square(X @ w))

    step = jax.jit(lambda w: w - 0.01 * jax.grad(loss)(w))
    want = jax.grad(lambda w: jnp.sum((jnp.asarray(x) @ w) ** 2))(jnp.asarray(w0))
    np.testing.assert_allclose(np.asarray(step(jnp.asarray(w0))), w0 - 0.01 * np.asarray(want),
                               rtol=tol, atol=tol)


def test_save_to_a_url_and_to_a_local_path(s3_bucket, small_budget, tmp_path):
    x = np.random.default_rng(3).standard_normal((29, 31)).astype(np.float32)
    _write_with_zarr(f"{s3_bucket}/in.zarr", x, chunks=(6, 6))
    a = jask.open(f"{s3_bucket}/in.zarr")
    for compressor in (None, "zstd"):
        url = f"{s3_bucket}/out-{compressor}.zarr"
        saved = jask.save(a * 3, url, chunks=(8, 10), compressor=compressor)
        assert saved.filename == url
        np.testing.assert_allclose(zarr.open_array(zarr_store(url), mode="r")[:], x * 3, rtol=1e-6)
    local = a.to_zarr(str(tmp_path / "local.zarr"))
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "local.zarr"))[:], x)
    np.testing.assert_array_equal(local.to_numpy(), x)
    # an existing array at a URL is never replaced (no atomic exchange there)
    with pytest.raises(FileExistsError, match="does not overwrite it, even with overwrite=True"):
        jask.save(a + 0, f"{s3_bucket}/in.zarr", overwrite=True)
    np.testing.assert_array_equal(jask.open(f"{s3_bucket}/in.zarr").to_numpy(), x)


def test_open_group_at_a_url(s3_bucket, small_budget):
    g = zarr.open_group(zarr_store(f"{s3_bucket}/g.zarr"), mode="w")
    g.create_array("t", shape=(5,), dtype="i8", dimension_names=["t"])[:] = np.arange(5)
    g.create_array("v", shape=(5, 3), dtype="f8", dimension_names=["t", "c"])[:] = 1.5
    arrays, _ = jask.open_group(f"{s3_bucket}/g.zarr/")
    assert arrays["v"][1] == ("t", "c") and float(jask.sum(arrays["v"][0])) == 22.5
    assert arrays["t"][0].filename == f"{s3_bucket}/g.zarr/t"


def test_update_of_a_url_store_is_refused(s3_bucket, small_budget):
    _write_with_zarr(f"{s3_bucket}/w.zarr", np.ones(6), chunks=(4,))
    w = jask.open(f"{s3_bucket}/w.zarr")
    with pytest.raises(NotImplementedError, match="object storage.*nothing was written"):
        w.update_(w * 2)
    np.testing.assert_array_equal(w.to_numpy(), np.ones(6))


@pytest.mark.parametrize("codec", ["none", "zstd", "sharded"])
def test_damaged_chunk_objects_are_named(s3_bucket, small_budget, codec):
    import obstore

    layout = {"none": dict(chunks=(4, 4), compressors=None),
              "zstd": dict(chunks=(4, 4), compressors=zarr.codecs.ZstdCodec()),
              "sharded": dict(chunks=(2, 4), shards=(4, 4), compressors=None)}
    url = f"{s3_bucket}/d-{codec}.zarr"
    _write_with_zarr(url, np.arange(64.0).reshape(8, 8), **layout[codec])
    loc = buckets.bucket_prefix(url)
    obstore.put(loc.client, loc.key("c/1/0"), b"\x28\xb5\x2f\xfd not a chunk")
    with pytest.raises(jask.DamagedStoreError, match=f"{url}.*damaged") as err:
        float(jask.sum(jask.open(url)))
    assert "c/1/0" in str(err.value)


def test_server_killed_mid_op_then_back(s3_bucket, s3_server, small_budget, monkeypatch,
                                        tmp_path):
    """Killed mid-op: transient errors are retried and counted, then the
    error names the URL and the op, without credentials, and a save leaves
    nothing. Back after a moment: the retries ride it out."""
    monkeypatch.setattr(remote, "BACKOFF", 0.01)
    monkeypatch.setattr(remote, "RETRIES", 3)
    x = np.arange(96 * 40, dtype=np.float32).reshape(96, 40)
    url = f"{s3_bucket}/k.zarr"
    _write_with_zarr(url, x, chunks=(2, 40), compressors=None)
    a = jask.open(url, storage_options={"key": ACCESS_KEY, "secret": SECRET_KEY})
    assert float(jask.sum(a)) == x.sum()

    def kill_once_reading():
        while jask.stats().store(a).stored_read <= x.nbytes:
            time.sleep(0.001)
        s3_server.kill()

    killer = threading.Thread(target=kill_once_reading)
    killer.start()
    try:
        with jask.track() as t, pytest.raises(remote.RemoteStoreError) as err:
            jask.save(a + 1, str(tmp_path / "saved.zarr"))
    finally:
        killer.join()
    message = str(err.value) + repr(err.value) + repr(a) + repr(buckets.bucket_prefix(url))
    assert url in message and "read" in message and "attempts" in message
    assert SECRET_KEY not in message and ACCESS_KEY not in message
    assert t.total.retries >= remote.RETRIES
    assert not [p.name for p in tmp_path.iterdir() if "saved" in p.name]  # nor staging

    monkeypatch.setattr(remote, "BACKOFF", 0.1)  # down for a moment, then back
    monkeypatch.setattr(remote, "RETRIES", 8)
    bucket = s3_bucket.removeprefix("s3://")

    def restart():
        time.sleep(0.2)
        s3_server.start()
        s3_server.make_bucket(bucket)  # (moto keeps buckets in memory)

    thread = threading.Thread(target=restart)
    thread.start()
    try:
        with jask.track() as t:
            saved = jask.save(jask.from_numpy(np.arange(50.0)), f"{s3_bucket}/after.zarr",
                              chunks=(10,))
    finally:
        thread.join()
    assert t.total.retries > 0
    after = zarr.open_array(zarr_store(f"{s3_bucket}/after.zarr"))[:]
    np.testing.assert_array_equal(after, np.arange(50.0))
    np.testing.assert_array_equal(saved.to_numpy(), np.arange(50.0))


def test_a_failed_save_to_a_url_leaves_no_array(s3_bucket, small_budget):
    """A save that fails midway (a damaged input chunk) deletes what it put;
    no metadata was ever written, so nothing opens at the URL."""
    import obstore

    _write_with_zarr(f"{s3_bucket}/src.zarr", np.ones((40, 8)), chunks=(4, 8))
    loc = buckets.bucket_prefix(f"{s3_bucket}/src.zarr")
    obstore.put(loc.client, loc.key("c/7/0"), b"short")
    with pytest.raises(jask.DamagedStoreError):
        jask.save(jask.open(f"{s3_bucket}/src.zarr"), f"{s3_bucket}/dst.zarr", chunks=(4, 8))
    assert remote.list_prefix(f"{s3_bucket}/dst.zarr") == []
    with pytest.raises(FileNotFoundError):
        jask.open(f"{s3_bucket}/dst.zarr")


def test_xarray_datasets_at_urls(s3_bucket, small_budget):
    """jask.xarray.open_dataset reads a group at a URL; jask.xarray.to_zarr
    writes DiskArrays to one (through xarray's own writer)."""
    import xarray as xr

    import jask.xarray

    values = np.arange(12.0).reshape(4, 3)
    xr.Dataset({"v": (("t", "c"), values)}, coords={"t": np.arange(4)}).to_zarr(
        zarr_store(f"{s3_bucket}/ds.zarr"), mode="w", consolidated=False)
    ds = jask.xarray.open_dataset(f"{s3_bucket}/ds.zarr")
    assert isinstance(ds.v.data, jask.DiskArray)
    jask.xarray.to_zarr(ds * 2, f"{s3_bucket}/ds2.zarr", mode="w")
    written = xr.open_zarr(zarr_store(f"{s3_bucket}/ds2.zarr"), consolidated=False)
    np.testing.assert_array_equal(written.v.values, 2 * values)


def test_a_missing_chunk_object_reads_as_the_fill_value(s3_bucket, small_budget):
    """As in Zarr (which leaves out chunks of only the fill value), unlike a damaged one."""
    url = f"{s3_bucket}/sparse.zarr"
    _write_with_zarr(url, np.arange(16.0).reshape(4, 4), chunks=(2, 4), compressors=None,
                     fill_value=-1.0)
    remote.put(url, "c/1/0", b"")  # (an empty object is damage, not a missing chunk)
    with pytest.raises(jask.DamagedStoreError, match="c/1/0"):
        jask.open(url).to_numpy()
    loc = buckets.bucket_prefix(url)
    import obstore

    obstore.delete(loc.client, loc.key("c/1/0"))
    want = np.arange(16.0).reshape(4, 4)
    want[2:] = -1.0
    np.testing.assert_array_equal(jask.open(url).to_numpy(), want)
    np.testing.assert_array_equal(zarr.open_array(zarr_store(url), mode="r")[:], want)


def test_ops_reading_pieces_many_times_copy_a_url_input_to_local_scratch(s3_bucket,
                                                                        small_budget):
    """A gather of rows in a random order, a sort along the rows and a scan read an
    input's chunks in many pieces: from a URL that was one request per row and chunk
    (11,111 requests and 34 s for a 4 MiB take). With scratch on a local disk the input
    is copied there first, one request per chunk object."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((203, 57)).astype(np.float32)
    _write_with_zarr(f"{s3_bucket}/x.zarr", x, chunks=(16, 20), compressors=None)
    X = jask.open(f"{s3_bucket}/x.zarr")
    rows = rng.permutation(203)
    chunks = 13 * 3
    for f, ref in [(lambda: jask.take(X, rows, axis=0), x[rows]),
                   (lambda: jask.sort(X, axis=0), np.sort(x, axis=0)),
                   (lambda: jask.cumsum(X, axis=1), np.cumsum(x, axis=1)),
                   (lambda: jask.flip(X), x[::-1, ::-1])]:
        with jask.track() as t:
            out = f().block_until_ready()
        np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-5, atol=1e-5)
        assert t.requests <= chunks + 2, t.requests


def test_plain_zarr_dask_and_xarray_reach_urls_through_jask_zarr_store(s3_bucket, small_budget):
    """``jask.zarr_store``, ``to_dask`` and ``jask.xarray.to_zarr`` reach a URL
    with zarr's own ObjectStore on jask's client: no fsspec filesystem (the
    cloud extra has none), and nothing written above the path (zarr on a
    StorePath of the bucket wrote parent groups' ``zarr.json`` there)."""
    import importlib.util

    import xarray as xr

    import jask.xarray

    assert importlib.util.find_spec("s3fs") is None  # what the cloud extra installs
    values = np.arange(24.0).reshape(6, 4)
    url = f"{s3_bucket}/deep/x.zarr"
    jask.save(jask.from_numpy(values), url, chunks=(2, 4))
    X = jask.open(url)
    np.testing.assert_array_equal(jask.to_dask(X).compute(), values)
    np.testing.assert_array_equal(zarr.open_array(jask.zarr_store(url), mode="r")[1:3], values[1:3])
    jask.xarray.to_zarr(xr.Dataset({"v": (("t", "c"), X)}) * 2, f"{s3_bucket}/deep/ds.zarr",
                        mode="w")
    written = xr.open_zarr(jask.zarr_store(f"{s3_bucket}/deep/ds.zarr"), consolidated=False)
    np.testing.assert_array_equal(written.v.values, 2 * values)
    keys = remote.list_prefix(s3_bucket)
    assert all(k.startswith(("deep/x.zarr/", "deep/ds.zarr/")) for k in keys), keys
    with pytest.raises(ValueError, match="read-only|read only"):  # read-only unless asked
        zarr.open_array(jask.zarr_store(url), mode="r+")[0, 0] = 5.0
    np.testing.assert_array_equal(jask.open(url).to_numpy(), values)


def test_zarr_store_writes_at_keys_with_spaces_unicode_and_percent(s3_bucket, small_budget):
    """A writable store is rooted at the path by its URL, which obstore
    decodes: the key must be quoted, or '%20' would become a space."""
    values = np.arange(6.0).reshape(2, 3)
    url = f"{s3_bucket}/my data/ü%20+.zarr"
    zarr.create_array(jask.zarr_store(url, read_only=False), data=values, chunks=(1, 3))
    assert all(k.startswith("my data/ü%20+.zarr/") for k in remote.list_prefix(s3_bucket))
    np.testing.assert_array_equal(jask.open(url).to_numpy(), values)


def test_zarr_store_of_a_memory_url_reaches_jasks_objects():
    """``memory://`` clients are stores of their own: one rooted at the path
    would be empty, so zarr reads and writes there through the bucket's."""
    url = "memory:///zarr-store-test/x.zarr"
    jask.save(jask.from_numpy(np.arange(4.0)), url)
    np.testing.assert_array_equal(zarr.open_array(jask.zarr_store(url), mode="r")[:],
                                  np.arange(4.0))
    np.testing.assert_array_equal(jask.to_dask(jask.open(url)).compute(), np.arange(4.0))
    zarr.create_array(jask.zarr_store("memory:///zarr-store-test/y.zarr", read_only=False),
                      data=np.ones(3))
    np.testing.assert_array_equal(jask.open("memory:///zarr-store-test/y.zarr").to_numpy(),
                                  np.ones(3))
