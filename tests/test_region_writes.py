"""``x[key] = v`` of a basic key writes only the chunks the key meets (issue 46).

Each case assigns into a real Zarr store (jask's own, a user's plain one, a
user's zstd-compressed one, a user's sharded one) and checks: the values
against numpy's ``a[key] = v``, the bytes written into the store at most the
chunks the key meets (the other chunk files are linked into the new version,
not copied; a sharded store, whose files jask does not name, is copied
whole), the promises of a write (views taken before keep their values, the
filename stays, a write that fails half-way leaves the store as it was and
shares no file with it) and nothing shared once it is done.
"""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import zarr

import jask
import jask.engine.ops.mutation

SHAPE, CHUNKS = (23, 17), (5, 4)  # ragged chunks on both axes


def _chunks_met(key: tuple) -> int:
    """How many chunks of SHAPE/CHUNKS the basic key ``key`` selects from."""
    mask = np.zeros(SHAPE, bool)
    mask[key] = True
    return sum(bool(mask[i * CHUNKS[0]:(i + 1) * CHUNKS[0], j * CHUNKS[1]:(j + 1) * CHUNKS[1]]
                    .any())
               for i, j in itertools.product(range(-(-SHAPE[0] // CHUNKS[0])),
                                             range(-(-SHAPE[1] // CHUNKS[1]))))


def _store(tmp_path, kind: str, a: np.ndarray):
    if kind == "jask":
        return jask.from_numpy(a)  # jask's own layout: one chunk here, written whole
    path = os.path.join(tmp_path, f"{kind}.zarr")
    options = {"compressors": None}
    if kind == "zstd":
        options = {"compressors": zarr.codecs.ZstdCodec()}
    elif kind == "sharded":
        options = {"compressors": None, "shards": (10, 8)}
    z = zarr.create_array(path, shape=a.shape, chunks=CHUNKS, dtype=a.dtype, **options)
    z[...] = a
    return jask.open(path)


#: (id, key, value: "scalar", "row", "block" (of the selection's shape), "disk" (a DiskArray))
CASES = [
    ("column", (slice(None), 3), "scalar"),
    ("column-block", (slice(None), slice(4, 12)), "block"),
    ("column-block-disk", (slice(None), slice(4, 12)), "disk"),
    ("row", 7, "row"),
    ("negative-int", (-1, slice(2, 9)), "block"),
    ("corner", (slice(20, None), slice(15, None)), "disk"),
    ("strided", (slice(1, 22, 6), slice(2, None, 5)), "block"),
    ("one-element", (11, 9), "scalar"),
    ("broadcast-row", (slice(3, 14), slice(None)), "row"),
    ("ellipsis", (Ellipsis, slice(0, 1)), "scalar"),
]


def _value(kind: str, a: np.ndarray, key):
    shape = np.empty(SHAPE)[key].shape
    rng = np.random.default_rng(len(shape))
    if kind == "scalar":
        return -3.5
    if kind == "row":
        return rng.standard_normal(shape[-1:]).astype(a.dtype)
    block = rng.standard_normal(shape).astype(a.dtype)
    return jask.from_numpy(block) if kind == "disk" else block


def _written(track, x) -> int:
    return sum(s.bytes_written for path, s in track.by_store.items()
               if os.path.realpath(path) == os.path.realpath(x.filename))


@pytest.mark.parametrize("kind", ["plain", "zstd", "sharded", "jask"])
@pytest.mark.parametrize("name,key,value", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_region_write_has_numpys_values_and_writes_only_its_chunks(
        tmp_path, kind, name, key, value, dtype):
    a = np.random.default_rng(0).standard_normal(SHAPE).astype(dtype)
    x = _store(tmp_path, kind, a)
    filename = x.filename
    before = x[2:9]  # a view: keeps the values it had
    v = _value(value, a, key)
    want = a.copy()
    want[key] = v.to_numpy() if isinstance(v, jask.DiskArray) else v
    with jask.track() as t:
        x[key] = v
    np.testing.assert_array_equal(x.to_numpy(), want)
    np.testing.assert_array_equal(before.to_numpy(), a[2:9])
    assert x.filename == filename
    if kind in ("plain", "zstd"):
        # every chunk met at most once, full size (an edge chunk is stored whole)
        bound = _chunks_met(key) * int(np.prod(CHUNKS)) * a.itemsize
        assert 0 < _written(t, x) <= bound, (name, _written(t, x), bound)
    assert x.dtype == np.dtype(dtype)


def test_the_chunks_written_are_counted_for_a_column_block(tmp_path):
    """The issue's measure: a column block of a column-chunked store writes its
    columns' chunks, a tenth of the store, where the whole store was written
    (twice: the new values, then their copy) before."""
    a = np.zeros((400, 100), np.float32)
    path = os.path.join(tmp_path, "x.zarr")
    z = zarr.create_array(path, shape=a.shape, chunks=(100, 10), dtype=a.dtype,
                          compressors=None)
    z[...] = a
    x = jask.open(path)
    with jask.track() as t:
        x[:, 20:30] = 1.0
    assert _written(t, x) == a.nbytes // 10
    assert t.bytes_written <= a.nbytes // 10 + 64  # and the value's one-element store
    a[:, 20:30] = 1.0
    np.testing.assert_array_equal(x.to_numpy(), a)


def _chunk_files(path: str) -> dict:
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            if not f.startswith(".") and f != "zarr.json":
                full = os.path.join(root, f)
                out[os.path.relpath(full, path)] = full
    return out


def test_nothing_is_shared_once_written(tmp_path):
    a = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    x = _store(tmp_path, "plain", a)
    x[:, 4:8] = 0.0
    files = _chunk_files(x.filename)
    assert files and all(os.stat(f).st_nlink == 1 for f in files.values())


def test_a_write_failing_half_way_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    a = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    x = _store(tmp_path, "plain", a)
    raw = {k: open(f, "rb").read() for k, f in _chunk_files(x.filename).items()}
    real = jask.engine.ops.mutation.set_region_block

    def writes_then_fails(*args):
        real(*args)  # the tile is in the staging store
        raise OSError("the disk went away")

    monkeypatch.setattr(jask.engine.ops.mutation, "set_region_block", writes_then_fails)
    with pytest.raises(OSError, match="went away"):
        x[:, 0:9] = 5.0
    monkeypatch.undo()
    np.testing.assert_array_equal(x.to_numpy(), a)
    after = _chunk_files(x.filename)
    assert {k: open(f, "rb").read() for k, f in after.items()} == raw
    assert all(os.stat(f).st_nlink == 1 for f in after.values())  # the staging copy is gone
    x[:, 0:9] = 5.0  # and the next write goes through
    a[:, 0:9] = 5.0
    np.testing.assert_array_equal(x.to_numpy(), a)


@pytest.mark.parametrize("key,value,error", [
    ((slice(None), 3), np.ones(5), ValueError),  # does not broadcast to (23,)
    ((slice(None), 3), np.nan, None),  # a float store takes NaN
    ((30, 1), 1.0, IndexError),  # out of range: the general path's check
])
def test_refused_values_leave_the_store_as_it_was(tmp_path, key, value, error):
    a = np.ones(SHAPE, np.float32)
    x = _store(tmp_path, "plain", a)
    if error is None:
        x[key] = value
        a[key] = value
        np.testing.assert_array_equal(x.to_numpy(), a)
        return
    with pytest.raises(error):
        x[key] = value
    np.testing.assert_array_equal(x.to_numpy(), a)


def test_an_integer_store_refuses_what_numpy_refuses_before_writing(tmp_path):
    a = np.zeros(SHAPE, np.int8)
    path = os.path.join(tmp_path, "i.zarr")
    z = zarr.create_array(path, shape=SHAPE, chunks=CHUNKS, dtype=a.dtype, compressors=None)
    z[...] = a
    x = jask.open(path)
    with pytest.raises((OverflowError, ValueError)):
        x[:, 2] = 300
    np.testing.assert_array_equal(x.to_numpy(), a)
