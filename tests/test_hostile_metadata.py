"""Whatever a Zarr store's metadata says, jask.open, jask.sum, to_numpy and
an elementwise op give numpy's answer or a clear error, fast.

Hypothesis draws the metadata: Zarr v2 and v3, shapes with empty axes or
none, chunk shapes that do not divide them or are 0, every numeric dtype
in both byte orders, dtypes jask refuses (dates, strings), codecs, cut or
emptied chunk files, and absurd shapes (10**12 rows, 10**18) of sparse
stores, whose graph would fill memory. Stores are written by plain zarr
(or their metadata by hand, where zarr would refuse to write it).
"""
import json
import os
import shutil
import time
import tracemalloc
import warnings

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jask

NUMBERS = ["<f4", ">f4", "<f8", ">f8", "<f2", ">f2", "|b1", "|i1", "|u1", "<i2", "<u2", ">u2",
           "<i4", ">i4", "<i8", ">i8", "<u8", ">u8", "<c8", ">c16"]
REFUSED = ["<M8[s]", "<m8[ms]", "<U3"]  # stored by zarr, not numbers
CODECS = {
    2: {"none": None, "zstd": numcodecs.Zstd(), "gzip": numcodecs.GZip(),
        "blosc": numcodecs.Blosc()},
    3: {"none": None, "zstd": zarr.codecs.ZstdCodec(), "gzip": zarr.codecs.GzipCodec(),
        "blosc": zarr.codecs.BloscCodec()},
}
#: Seconds an example's jask calls may take: "milliseconds", with room for
#: a loaded CI machine and JAX compiling a first reduction.
FAST = 10.0
SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def warm():
    """JAX compiles its first reductions in seconds: not what is timed here."""
    x = jask.from_numpy(np.ones((3, 2), np.float32))
    float(jask.sum(x * 2))
    del x
    jask.collect()


def _clear(err, path) -> bool:
    """An error that names the store or the op and is jask's, not numpy's."""
    message = str(err)
    return bool(message) and (str(path) in message or message.startswith("jask."))


@st.composite
def small_stores(draw):
    fmt = draw(st.sampled_from([2, 3]))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 7]), max_size=3)))
    chunks = tuple(draw(st.sampled_from([1, 2, 3, 4, 8])) for _ in shape)
    dtype = draw(st.sampled_from(NUMBERS + REFUSED))
    codec = draw(st.sampled_from(["none", "zstd", "gzip", "blosc"]))
    damage = draw(st.sampled_from([None, None, "empty", "truncated"]))
    return fmt, shape, chunks, dtype, codec, damage


def _write(path, fmt, shape, chunks, dtype, codec):
    """The store by plain zarr, no chunk of only the fill value (0): each is a file."""
    values = (np.arange(int(np.prod(shape))) % 5 + 1).reshape(shape)
    data = (values.astype(dtype) if np.dtype(dtype).kind not in "MmU"
            else np.full(shape, "2020-01-01" if dtype[1] == "M" else 1).astype(dtype))
    with warnings.catch_warnings():  # zarr warns that v3 has no spec'd strings/dates
        warnings.simplefilter("ignore")
        z = zarr.create_array(str(path), shape=shape, chunks=chunks, dtype=dtype,
                              zarr_format=fmt, compressors=CODECS[fmt][codec])
        z[...] = data
    return data


def _chunk_files(path):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs
                  if f not in ("zarr.json", ".zarray", ".zattrs"))


@settings(max_examples=40, **SETTINGS)
@given(small_stores())
def test_any_small_store_gives_numpys_answer_or_a_clear_error(tmp_path, small_budget, case):
    fmt, shape, chunks, dtype, codec, damage = case
    path = tmp_path / "x.zarr"
    shutil.rmtree(path, ignore_errors=True)
    data = _write(path, fmt, shape, chunks, dtype, codec)
    files = _chunk_files(path)
    if damage and files:
        with open(files[0], "r+b") as f:
            f.truncate(0 if damage == "empty" else os.path.getsize(files[0]) // 2)
    start = time.perf_counter()
    if dtype in REFUSED:
        with pytest.raises(TypeError, match="numbers and booleans") as err:
            jask.open(path)
        assert str(path) in str(err.value)
        return
    x = jask.open(path)
    assert x.shape == shape and x.dtype == np.dtype(dtype).newbyteorder("=")
    if damage and files:
        for read in (lambda: jask.sum(x), x.to_numpy):
            with pytest.raises(jask.DamagedStoreError) as err:
                read()
            assert str(path) in str(err.value)
    else:
        np.testing.assert_array_equal(x.to_numpy(), data)
        total = complex(jask.sum(x))
        np.testing.assert_allclose(total, data.sum(dtype=np.complex128), rtol=1e-2)
        try:
            doubled = (x * 2).to_numpy()
        except TypeError as err:  # a 0-d result store: jask refuses it
            assert shape == () and "0-d" in str(err), err
        else:
            np.testing.assert_array_equal(doubled, data * 2)
    assert time.perf_counter() - start < FAST


@st.composite
def absurd_stores(draw):
    fmt = draw(st.sampled_from([2, 3]))
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.sampled_from([0, 1, 5, 300, 10**12, 10**18])) for _ in range(ndim)]
    chunks = [draw(st.sampled_from([0, 1, 7, 10**6, 10**9])) for _ in range(ndim)]
    if draw(st.booleans()):
        chunks = chunks[:-1] if draw(st.booleans()) else chunks + [4]  # ranks that differ
    if draw(st.integers(0, 5)) == 0:
        shape[0] = -shape[0] - 1
    dtype = draw(st.sampled_from(["<f4", ">f8", "|b1", "<u8", "<f2", "<i8"]))
    return fmt, shape, chunks, dtype


def _write_metadata(path, fmt, shape, chunks, dtype):
    """Metadata written by hand, as zarr would read it, with no chunk files."""
    os.makedirs(path)
    if fmt == 2:
        meta = {"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype,
                "compressor": None, "fill_value": 0, "filters": None, "order": "C"}
        with open(os.path.join(path, ".zarray"), "w") as f:
            json.dump(meta, f)
        return
    endian = "big" if dtype[0] == ">" else "little"
    meta = {"zarr_format": 3, "node_type": "array", "shape": shape,
            "data_type": np.dtype(dtype).name, "fill_value": 0, "attributes": {},
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "codecs": [{"name": "bytes", "configuration": {"endian": endian}}]}
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(meta, f)


@settings(max_examples=40, **SETTINGS)
@given(absurd_stores())
def test_absurd_metadata_is_refused_or_answered_in_milliseconds(tmp_path, small_budget, case):
    fmt, shape, chunks, dtype = case
    path = tmp_path / "x.zarr"
    shutil.rmtree(path, ignore_errors=True)
    _write_metadata(path, fmt, shape, chunks, dtype)
    start = time.perf_counter()
    try:
        x = jask.open(path)
    except (ValueError, TypeError, FileNotFoundError) as err:
        assert _clear(err, path), repr(err)
        assert time.perf_counter() - start < FAST
        return
    nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    tracemalloc.start()
    try:
        answers = {"sum": (lambda: complex(jask.sum(x)), lambda: 0),  # missing: fill value
                   "add": (lambda: (x + 1).shape, lambda: tuple(shape)),
                   "asarray": (lambda: np.asarray(x).tolist(), lambda: np.zeros(shape).tolist())}
        for name, (run, expected) in answers.items():
            try:
                value = run()
            except MemoryError as err:  # BudgetError, or np.asarray over the budget
                assert _clear(err, path) or "np.asarray" in str(err), repr(err)
                assert nbytes > 64_000 or "chunks of shape" in str(err), err  # chunk too big
            else:
                assert value == expected(), (name, value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, f"{peak} bytes held for a store of shape {shape}"
    assert time.perf_counter() - start < FAST


def test_a_chunk_of_zero_is_refused_in_milliseconds(tmp_path):
    """The planner looped forever on it (every extent a power of two of 0)."""
    path = tmp_path / "zero.zarr"
    _write_metadata(path, 3, [10, 4], [0, 4], "<f4")
    with pytest.raises(ValueError, match="chunks of length 0 along axis 0") as err:
        jask.open(path)
    assert str(path) in str(err.value)


def test_a_huge_sparse_store_is_refused_before_its_graph(tmp_path, small_budget):
    """jask.sum built every tile region up front: 3.4 GB, then MemoryError('')."""
    path = tmp_path / "huge.zarr"
    _write_metadata(path, 3, [10**12, 64], [1000, 64], "<f4")
    x = jask.open(path)
    tracemalloc.start()
    try:
        with pytest.raises(jask.BudgetError) as err:
            jask.sum(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(err.value)
    for part in ("(1000000000000, 64)", "(1000, 64)", str(path), "64000 bytes", "100000"):
        assert part in message, message
    assert peak < 10 * 2**20  # not the 3.4 GB of every tile's region
