"""A damaged chunk is an error naming the store and the chunk, on every read
path, never a number; a missing chunk file is the fill value, as in Zarr.

The stores are written by plain zarr (v2 and v3; gzip, zstd, blosc, sharded,
uncompressed, big-endian), then one chunk file is emptied, cut short, or
replaced by a valid frame of the codec holding half the chunk (which
numcodecs decodes into the start of the chunk and says nothing: jask
summed the uninitialised rest). Plain zarr raises on each of these too,
except on an empty shard file, which it reads as the fill value (zarr
never writes one: it deletes a shard that holds nothing).
"""
import os
import shutil

import jax
import jax.numpy as jnp
import numcodecs
import numpy as np
import pytest
import zarr

import jask

SHAPE, CHUNKS = (50, 40), (16, 16)
V3, V2 = dict(zarr_format=3), dict(zarr_format=2)

#: name: (zarr.create_array arguments, numcodecs codec of a chunk file or None)
LAYOUTS = {
    "v3 gzip": (dict(V3, compressors=zarr.codecs.GzipCodec()), numcodecs.GZip()),
    "v3 zstd": (dict(V3, compressors=zarr.codecs.ZstdCodec()), numcodecs.Zstd()),
    "v3 blosc": (dict(V3, compressors=zarr.codecs.BloscCodec()), numcodecs.Blosc()),
    "v3 uncompressed": (dict(V3, compressors=None), None),
    "v3 sharded zstd": (dict(V3, shards=(32, 32)), "shard"),
    "v3 sharded uncompressed": (dict(V3, shards=(32, 32), compressors=None), "shard"),
    "v3 big-endian zstd": (dict(V3, serializer=zarr.codecs.BytesCodec(endian="big")),
                           numcodecs.Zstd()),
    "v2 gzip": (dict(V2, compressors=numcodecs.GZip()), numcodecs.GZip()),
    "v2 zstd": (dict(V2, compressors=numcodecs.Zstd()), numcodecs.Zstd()),
    "v2 blosc": (dict(V2, compressors=numcodecs.Blosc()), numcodecs.Blosc()),
    "v2 uncompressed": (dict(V2, compressors=None), None),
    "v2 F zstd": (dict(V2, compressors=numcodecs.Zstd(), order="F"), numcodecs.Zstd()),
}


def _write(path, layout):
    data = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    z = zarr.create_array(str(path), shape=SHAPE, dtype=np.float32, chunks=CHUNKS,
                          **LAYOUTS[layout][0])
    z[...] = data
    return data


def _chunk_file(path, layout):
    """Chunk (1, 1)'s file, or for a sharded store, shard (0, 0)'s; its key."""
    key = ("c/0/0" if "sharded" in layout else "c/1/1") if "v3" in layout else "1.1"
    return os.path.join(str(path), *key.split("/")), key


def _damage(path, layout, how):
    file, key = _chunk_file(path, layout)
    with open(file, "rb") as f:
        data = f.read()
    codec = LAYOUTS[layout][1]
    if how == "empty":
        data = b""
    elif how == "truncated":
        data = data[:len(data) // 2]
    elif how == "short frame" and codec == "shard":  # an index byte changed
        data = data[:-20] + bytes([data[-20] ^ 1]) + data[-19:]
    elif how == "short frame":  # a valid frame of half the chunk's bytes
        half = bytes(np.prod(CHUNKS) * 4 // 2)
        data = half if codec is None else codec.encode(half)
    with open(file, "wb") as f:
        f.write(data)
    return key


@pytest.mark.parametrize("fmt", ["v2", "v3"])
def test_a_damaged_chunk_is_an_error_naming_store_and_chunk(tmp_path, small_budget, fmt):
    for layout in [name for name in LAYOUTS if name.startswith(fmt)]:
        for how in ("empty", "truncated", "short frame"):
            path = tmp_path / f"{layout} {how}.zarr"
            _write(path, layout)
            key = _damage(path, layout, how)
            if not ("sharded" in layout and how == "empty"):  # zarr reads it as fill
                with pytest.raises(Exception):  # noqa: B017 - each codec raises its own kind
                    zarr.open_array(str(path), mode="r")[...]
            x = jask.open(path)
            reads = [lambda: float(jask.sum(x)), x.to_numpy, lambda: (x + 1).to_numpy()]
            for read in reads if how == "short frame" else reads[:1]:
                with pytest.raises(jask.DamagedStoreError) as err:
                    read()
                message = str(err.value)
                assert str(path) in message and repr(key) in message, (layout, how, message)
                assert isinstance(err.value, ValueError)


def test_nothing_is_written_from_a_damaged_store(tmp_path, small_budget):
    y_path = tmp_path / "y.zarr"
    y_values = np.ones(SHAPE, np.float32)
    zarr.create_array(str(y_path), data=y_values, chunks=CHUNKS, compressors=None)
    y = jask.open(y_path)
    for layout in ("v3 zstd", "v3 uncompressed", "v3 sharded zstd"):
        path = tmp_path / f"{layout}.zarr"
        _write(path, layout)
        _damage(path, layout, "short frame")
        x = jask.open(path)
        with pytest.raises(jask.DamagedStoreError):
            np.asarray(x)
        with pytest.raises(jask.DamagedStoreError):
            jask.save(x, tmp_path / "saved.zarr")
        with pytest.raises(jask.DamagedStoreError):
            (x * 2).to_zarr(tmp_path / "doubled.zarr")
        with pytest.raises(jask.DamagedStoreError):
            y.update_(y + x)
        assert not os.path.exists(tmp_path / "saved.zarr")
        assert not os.path.exists(tmp_path / "doubled.zarr")
        assert np.array_equal(zarr.open_array(str(y_path), mode="r")[...], y_values)


def test_a_damaged_chunk_in_a_fused_band_group_is_an_error(tmp_path, small_budget):
    path = tmp_path / "X.zarr"
    _write(path, "v3 zstd")
    key = _damage(path, "v3 zstd", "short frame")
    X, w = jask.open(path), jnp.ones(SHAPE[1], jnp.float32)
    with pytest.raises(Exception) as err:  # noqa: B017 - JAX wraps a callback's error
        jax.jit(jax.grad(lambda w, X: jask.sum(jask.square(X @ w))))(w, X)
    message = str(err.value)
    assert "DamagedStoreError" in message and "fused" in message
    assert str(path) in message and repr(key) in message


def test_a_missing_chunk_file_is_still_the_fill_value(tmp_path, small_budget):
    for layout in ("v3 gzip", "v3 sharded zstd", "v2 blosc", "v2 uncompressed"):
        path = tmp_path / f"{layout}.zarr"
        _write(path, layout)
        os.remove(_chunk_file(path, layout)[0])
        expected = zarr.open_array(str(path), mode="r")[...]
        np.testing.assert_array_equal(jask.open(path).to_numpy(), expected)
        assert float(jask.sum(jask.open(path))) == expected.sum(dtype=np.float64)


def test_a_store_written_anew_in_the_same_folder_is_read_anew(tmp_path, small_budget):
    """jask kept the first store's layout (shape, chunks, codec) by path while
    the folder (its inode) stayed: the new values read as the fill value."""
    path = tmp_path / "x.zarr"
    zarr.create_array(str(path), data=np.arange(12.0).reshape(3, 4), chunks=(2, 2),
                      compressors=zarr.codecs.BloscCodec())
    old = jask.open(path)  # still held: its store stays known
    assert float(jask.sum(old)) == 66.0
    for entry in os.listdir(path):  # emptied, not removed: the folder's inode stays
        shutil.rmtree(path / entry) if (path / entry).is_dir() else os.remove(path / entry)
    new = np.arange(1, 21, dtype=">i4").reshape(4, 5)
    zarr.create_array(str(path), data=new, chunks=(3, 3), zarr_format=2)
    x = jask.open(path)
    np.testing.assert_array_equal(x.to_numpy(), new)
    assert float(jask.sum(x)) == 210.0
    del old
