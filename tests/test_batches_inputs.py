"""jask.batches given what users bring: stores made by zarr in its other
formats and layouts, odd dtypes and shapes, and arguments or states spelled
wrong (refused, with what was wrong, before anything is read)."""
import jax
import numpy as np
import pytest
import zarr

import jask

CPU = jax.devices("cpu")[0]
ROWS = 300
X = (np.arange(ROWS * 10) % 251 - 100).reshape(ROWS, 10)

# (name, zarr.create_array keywords, the dtype stored): one store each, batches checked
STORES = [
    ("v2 '.' separator", dict(zarr_format=2, chunks=(64, 10), dimension_separator="."), "f4"),
    ("v2 '/' separator", dict(zarr_format=2, chunks=(64, 10), dimension_separator="/"), "f4"),
    ("v2 F order, raw", dict(zarr_format=2, chunks=(64, 10), order="F", compressor=None), "f4"),
    ("v2 big-endian", dict(zarr_format=2, chunks=(64, 10), compressor=None), ">f4"),
    ("v3 zstd, 1-row chunks", dict(chunks=(1, 10)), "f4"),
    ("v3 7-row chunks, ragged", dict(chunks=(7, 10)), "i8"),
    ("v3 chunks splitting the features", dict(chunks=(64, 3), compressors=None), "u2"),
    ("v3 sharded", dict(chunks=(16, 10), shards=(128, 10)), "f2"),
    ("v3 int8", dict(chunks=(50, 10), compressors=None), "i1"),
    ("v3 bool", dict(chunks=(50, 10)), "bool"),
]


def _store(path, kw, dtype, x):
    kw = dict(kw)
    if kw.get("zarr_format") == 2:
        z = zarr.create(shape=x.shape, dtype=dtype, store=str(path), **kw)
    else:
        z = zarr.create_array(str(path), shape=x.shape, dtype=dtype, **kw)
    z[...] = x
    return jask.open(str(path))


@pytest.mark.parametrize("device", [None, CPU], ids=["numpy", "cpu"])
@pytest.mark.parametrize("name,kw,dtype", STORES, ids=[s[0] for s in STORES])
def test_stores_of_zarr_layouts_give_each_row_once_as_numpy_reads_it(tmp_path, name, kw,
                                                                      dtype, device):
    x = X.astype(dtype)
    stored = _store(tmp_path / "x.zarr", kw, dtype, x)
    y = np.arange(ROWS)
    for shuffle in (True, False):
        loader = jask.batches(stored, y, batch_size=32, seed=3, shuffle=shuffle, device=device)
        rows = list(loader.plan.batch_rows(0))
        got = [(np.asarray(xb), np.asarray(yb)) for xb, yb in loader]
        assert len(got) == len(rows) == len(loader)
        assert sorted(np.concatenate(rows).tolist()) == list(range(ROWS))
        for (xb, yb), r in zip(got, rows):
            # native (what a step takes); on a device, what jax.numpy makes of it
            native = x.dtype.newbyteorder("=")
            assert xb.dtype == (native if device is None else jax.dtypes.canonicalize_dtype(native))
            np.testing.assert_array_equal(xb, x[r])
            np.testing.assert_array_equal(yb, y[r])


@pytest.mark.parametrize("fill", [np.nan, 7.0])
def test_missing_chunks_come_as_the_fill_value(tmp_path, fill):
    z = zarr.create_array(str(tmp_path / "m.zarr"), shape=(ROWS, 4), chunks=(64, 4), dtype="f4",
                          fill_value=fill)
    x = np.full((ROWS, 4), fill, "f4")
    x[100:200] = np.arange(400).reshape(100, 4)
    z[100:200] = x[100:200]
    loader = jask.batches(jask.open(str(tmp_path / "m.zarr")), batch_size=32, seed=1)
    for (xb,), r in zip(loader, loader.plan.batch_rows(0)):
        np.testing.assert_array_equal(xb, x[r])


def test_images_beside_labels_in_numpy_and_jax(tmp_path):
    imgs = np.random.default_rng(0).integers(0, 255, (200, 8, 8, 3)).astype("u1")
    stored = _store(tmp_path / "i.zarr", dict(chunks=(50, 4, 8, 3)), "u1", imgs)
    y = np.arange(200, dtype="i4")
    for labels in (y, jax.numpy.asarray(y), jask.from_numpy(y)):
        loader = jask.batches(stored, labels, batch_size=64, seed=2)
        for (xb, yb), r in zip(loader, loader.plan.batch_rows(0)):
            np.testing.assert_array_equal(xb, imgs[r])
            assert yb.dtype == np.int32 and (yb == r).all()


# (what is passed, the error, words of its message)
BAD = [
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=1.5), ValueError, "seed"),
    (dict(seed=None), ValueError, "seed"),
    (dict(shuffle="False"), ValueError, "shuffle"),
    (dict(drop_last="no"), ValueError, "drop_last"),
    (dict(batch_size=2.0), ValueError, "batch_size"),
    (dict(batch_size=0), ValueError, "batch_size"),
]


@pytest.mark.parametrize("kw,error,words", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_arguments_are_refused_naming_them(kw, error, words):
    with pytest.raises(error, match=words):
        jask.batches(np.arange(10), **{"batch_size": 4, **kw})


def test_numpy_ints_are_ints_for_every_count():
    loader = jask.batches(np.arange(10), batch_size=np.int64(4), seed=np.int64(1),
                          prefetch=np.int32(2), threads=np.int64(2), epochs=np.int64(1))
    assert sorted(int(v) for (b,) in loader for v in b) == list(range(10))


@pytest.mark.parametrize("value", [
    pytest.param(lambda tmp: zarr.create_array(str(tmp / "z.zarr"), shape=(10,), dtype="f4"),
                 id="zarr.Array (read whole)"),
    pytest.param(lambda tmp: np.ma.masked_array(np.arange(10), mask=np.arange(10) % 2),
                 id="masked (mask dropped)"),
    pytest.param(lambda tmp: list(range(10)), id="list"),
])
def test_arrays_it_would_read_whole_or_change_are_refused(tmp_path, value):
    with pytest.raises(TypeError, match="argument 0"):
        jask.batches(value(tmp_path), batch_size=4)


def test_a_loader_made_inside_jit_says_so():
    @jax.jit
    def f(v):
        return jask.batches(v, batch_size=4)

    with pytest.raises(TypeError, match="traced"):
        f(jax.numpy.arange(10.0))


def _state(**kw):
    loader = jask.batches(np.arange(100), batch_size=10, seed=1)
    it = iter(loader)
    for _ in range(3):
        next(it)
    del it
    return {**loader.state, **kw}


@pytest.mark.parametrize("edit,words", [
    (dict(batch=2.7), "not a jask.batches state"),
    (dict(batch="3"), "not a jask.batches state"),
    (dict(batch=True), "not a jask.batches state"),
    (dict(epoch=-1), "negative epoch"),
    (dict(batch=-1), "past its epoch"),
    (dict(batch=11), "past its epoch"),
])
def test_a_state_edited_by_hand_is_refused(edit, words):
    with pytest.raises(ValueError, match=words):
        jask.batches(np.arange(100), batch_size=10, seed=1).restore(_state(**edit))


def test_a_state_saved_as_arrays_restores():
    state = jax.tree_util.tree_map(np.asarray, _state())
    loader = jask.batches(np.arange(100), batch_size=10, seed=1, state=state)
    rows = list(loader.plan.batch_rows(0))[3:]
    assert [b.tolist() for (b,) in loader] == [r.tolist() for r in rows]
