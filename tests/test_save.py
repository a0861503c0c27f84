"""jask.save / DiskArray.to_zarr: a result written to a path of the user's
choice, read back by plain zarr (the reference) and by jask.open."""
import io
import os
import re
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
import zarr

import jask
from helpers import rand, tolerance

SHAPES = [(97, 61), (5, 33, 19), (301,)]


@pytest.fixture
def budget(jask_scratch):
    """Small enough for many tiles, large enough for chunks that straddle the
    source's (each task then decodes up to 2^ndim source chunks)."""
    jask.set_memory_budget("256KB", scratch_dir=jask_scratch.path)


def _leftovers(folder):
    """Hidden staging folders a save left beside its target."""
    return [n for n in os.listdir(folder) if n.startswith(".")]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("compressor", [None, "zstd", "blosc"])
def test_round_trip_with_chunks_and_compressor(budget, tmp_path, rng, dtype, shape,
                                               compressor):
    values = rand(rng, shape, dtype)
    x = jask.from_numpy(values)
    chunks = tuple(max(1, s // 7 + 1) for s in shape)  # ragged edge chunks
    path = tmp_path / "out" / "result.zarr"
    saved = (2.0 * x).to_zarr(path, chunks=chunks, compressor=compressor)
    ref = zarr.open_array(path, mode="r")
    assert ref.shape == shape and ref.dtype == np.dtype(dtype) and ref.chunks == chunks
    assert [type(c).__name__ for c in ref.compressors] == (
        [] if compressor is None else [{"zstd": "ZstdCodec", "blosc": "BloscCodec"}[compressor]])
    np.testing.assert_allclose(ref[...], 2 * values, **tolerance(dtype))
    assert saved.filename == str(path) and saved.chunks == chunks
    np.testing.assert_array_equal(jask.open(path).to_numpy(), ref[...])
    assert _leftovers(path.parent) == []


def test_many_tiles_under_a_small_budget(small_budget, tmp_path, rng):
    """The default chunks are planned as every op's tiles (jask.engine.plan: a
    compressor's buffers and the op's own overhead count); the graph has a
    task per chunk."""
    values = rand(rng, (403, 257), np.float32)
    x = jask.from_numpy(values)
    plain = jask.save(x, tmp_path / "plain.zarr")
    np.testing.assert_array_equal(plain.to_numpy(), values)
    out = io.StringIO()
    with jask.progress_bars(min_tasks=1, file=out):
        saved = jask.save(x, tmp_path / "s.zarr", compressor="zstd")
    n = np.prod([-(-s // c) for s, c in zip(x.shape, saved.chunks)])
    assert n > 20, x.chunks  # the budget forces many tiles
    assert "jask-save" in out.getvalue() and f"{n}/{n}" in out.getvalue()
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr")[...], values)


def test_codec_instance_and_int_chunks(budget, tmp_path, rng):
    values = rand(rng, (50, 40), np.float64)
    saved = jask.save(jask.from_numpy(values), tmp_path / "g.zarr", chunks=16,
                      compressor=zarr.codecs.GzipCodec(level=1))
    ref = zarr.open_array(tmp_path / "g.zarr")
    assert ref.chunks == (16, 16) and type(ref.compressors[0]).__name__ == "GzipCodec"
    np.testing.assert_array_equal(saved.to_numpy(), values)


def test_sources_chunked_by_other_tools(budget, tmp_path, rng):
    """A sharded v3 store and a v2 F-order store, saved with other chunks."""
    values = rand(rng, (120, 90), np.float32)
    sharded = zarr.create_array(store=tmp_path / "sh.zarr", shape=values.shape,
                                chunks=(10, 15), shards=(40, 45), dtype="float32")
    sharded[...] = values
    v2 = zarr.create_array(store=tmp_path / "v2.zarr", shape=values.shape, chunks=(33, 17),
                           dtype="float32", zarr_format=2, order="F")
    v2[...] = values
    for name in ("sh.zarr", "v2.zarr"):
        out = tmp_path / f"copy-{name}"
        jask.open(tmp_path / name).to_zarr(out, chunks=(25, 30), compressor="zstd")
        np.testing.assert_array_equal(zarr.open_array(out)[...], values)


def test_saved_array_outlives_its_source_and_the_session(small_budget, tmp_path):
    """jask never deletes a saved array: not when the source goes, not at exit."""
    script = textwrap.dedent(f"""
        import numpy as np, jask
        jask.set_memory_budget("1MB", scratch_dir={str(tmp_path / "child-scratch")!r})
        x = jask.from_numpy(np.arange(1000.0).reshape(40, 25)) * 3.0
        x.to_zarr({str(tmp_path / "kept.zarr")!r}, chunks=(7, 25), compressor="zstd")
        del x
        print("collected", jask.collect())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "collected" in done.stdout
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "kept.zarr")[...],
                                  np.arange(1000.0).reshape(40, 25) * 3)
    # the child's own scratch session is gone (with the scratch dir it made); the saved array is not
    assert not (tmp_path / "child-scratch").exists()


def test_refuses_an_existing_path_unless_asked(small_budget, tmp_path):
    x = jask.from_numpy(np.ones((6, 5), np.float32))
    first = x.to_zarr(tmp_path / "a.zarr")
    with pytest.raises(FileExistsError, match="a.zarr.*overwrite=True"):
        (x * 5.0).to_zarr(tmp_path / "a.zarr")
    np.testing.assert_array_equal(first.to_numpy(), np.ones((6, 5)))
    (x * 5.0).to_zarr(tmp_path / "a.zarr", chunks=(2, 5), overwrite=True)
    ref = zarr.open_array(tmp_path / "a.zarr")
    assert ref.chunks == (2, 5)
    np.testing.assert_array_equal(ref[...], np.full((6, 5), 5.0))
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("chunks, match", [
    ((0, 5), "positive int"), ((3,), "one positive int per axis"), ((2.5, 5), "positive"),
    (-1, "positive"), ("auto", "positive"),
])
def test_bad_chunks_refused_before_writing(small_budget, tmp_path, chunks, match):
    x = jask.from_numpy(np.ones((6, 5), np.float32))
    with pytest.raises(ValueError, match=match):
        x.to_zarr(tmp_path / "bad.zarr", chunks=chunks)
    assert not os.path.exists(tmp_path / "bad.zarr") and _leftovers(tmp_path) == []


@pytest.mark.parametrize("compressor, error", [
    ("lzma-ish", ValueError), (zarr.codecs.BytesCodec(), TypeError), (3, TypeError),
])
def test_bad_compressor_refused_before_writing(small_budget, tmp_path, compressor, error):
    x = jask.from_numpy(np.ones((6, 5), np.float32))
    with pytest.raises(error, match="compressor"):
        x.to_zarr(tmp_path / "bad.zarr", compressor=compressor)
    assert not os.path.exists(tmp_path / "bad.zarr") and _leftovers(tmp_path) == []


def test_chunks_over_the_budget_refused_before_writing(tmp_path):
    jask.set_memory_budget("64KB", scratch_dir=str(tmp_path / "scratch"))
    x = jask.from_numpy(np.ones((300, 300), np.float32))
    with pytest.raises(jask.BudgetError, match="jask.save"):
        x.to_zarr(tmp_path / "big.zarr", chunks=(300, 300))
    assert not os.path.exists(tmp_path / "big.zarr") and _leftovers(tmp_path) == []


@pytest.mark.parametrize("dtype, compressor", [(np.float32, None), (np.float64, "zstd")])
def test_chunks_over_the_budget_name_chunks_that_fit(tmp_path, rng, dtype, compressor):
    """The refusal names a chunk shape that fits (the longest with the asked
    trailing axes); saving with it works, one row longer is refused."""
    jask.set_memory_budget("64KB", scratch_dir=str(tmp_path / "scratch"))
    values = rng.standard_normal((301, 37)).astype(dtype)
    x = jask.from_numpy(values)
    with pytest.raises(jask.BudgetError, match=r"jask.save: .*pass chunks=\((\d+), 37\)") as err:
        x.to_zarr(tmp_path / "big.zarr", chunks=(301, 37), compressor=compressor)
    assert not os.path.exists(tmp_path / "big.zarr")
    rows = int(re.search(r"pass chunks=\((\d+), 37\)", str(err.value)).group(1))
    assert 1 < rows < 301
    x.to_zarr(tmp_path / "fits.zarr", chunks=(rows, 37), compressor=compressor)
    ref = zarr.open_array(tmp_path / "fits.zarr")
    assert ref.chunks == (rows, 37)
    np.testing.assert_array_equal(ref[...], values)
    with pytest.raises(jask.BudgetError, match="jask.save"):
        x.to_zarr(tmp_path / "one-more.zarr", chunks=(rows + 1, 37), compressor=compressor)


def test_a_failed_write_leaves_no_store(small_budget, tmp_path, rng):
    """A source chunk that cannot be decoded fails the graph mid-way: neither
    the target nor a staging folder is left, and an existing target survives."""
    values = rand(rng, (60, 40), np.float32)
    src = zarr.create_array(store=tmp_path / "src.zarr", shape=values.shape, chunks=(10, 40),
                            dtype="float32", compressors=zarr.codecs.ZstdCodec())
    src[...] = values
    with open(tmp_path / "src.zarr" / "c" / "4" / "0", "wb") as f:
        f.write(b"not zstd at all")
    x = jask.open(tmp_path / "src.zarr")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(Exception):
        x.to_zarr(out / "r.zarr", chunks=(10, 40))
    assert os.listdir(out) == []
    keep = jask.from_numpy(np.zeros((60, 40), np.float32)).to_zarr(out / "keep.zarr")
    with pytest.raises(Exception):
        x.to_zarr(out / "keep.zarr", chunks=(10, 40), overwrite=True)
    assert sorted(os.listdir(out)) == ["keep.zarr"]
    np.testing.assert_array_equal(keep.to_numpy(), 0)


def test_refused_inside_jit_and_for_non_arrays(small_budget, tmp_path):
    x = jask.from_numpy(np.ones(4))
    with pytest.raises(TypeError, match="side effect"):
        jax.jit(lambda a: jask.save(a, tmp_path / "j.zarr"))(x)
    with pytest.raises(TypeError, match="expected a DiskArray"):
        jask.save(np.ones(4), tmp_path / "n.zarr")
    assert not os.path.exists(tmp_path / "j.zarr")


def test_refuses_its_own_store_and_the_scratch_directory(small_budget, tmp_path):
    x = jask.from_numpy(np.ones(4))
    opened = jask.open(x.to_zarr(tmp_path / "o.zarr").filename)
    with pytest.raises(ValueError, match="own store"):
        opened.to_zarr(opened.filename, overwrite=True)
    with pytest.raises(ValueError, match="scratch directory"):
        x.to_zarr(os.path.join(jask.get_config().scratch_dir, "mine.zarr"))


@pytest.mark.parametrize("np_dtype", [np.int16, np.uint8, np.complex64], ids=str)
@pytest.mark.parametrize("compressor", ["blosc", "gzip", zarr.codecs.Crc32cCodec()],
                         ids=["blosc", "gzip", "crc32c (through zarr)"])
def test_other_dtypes_and_codecs_read_back_in_zarr(budget, tmp_path, np_dtype, compressor):
    values = (np.arange(37 * 23) % 251).astype(np_dtype).reshape(37, 23)
    jask.from_numpy(values).to_zarr(tmp_path / "o.zarr", chunks=(10, 7), compressor=compressor)
    ref = zarr.open_array(tmp_path / "o.zarr")
    assert ref.dtype == np_dtype and ref.chunks == (10, 7)
    np.testing.assert_array_equal(ref[...], values)
