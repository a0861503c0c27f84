"""DiskArray._repr_html_: every field checked against what it describes
(zarr's metadata, du, the chunks a real elementwise op writes)."""
import shutil
import subprocess

import jax
import numpy as np
import pytest
import zarr

import jask
from jask.api import display


def test_fields_of_a_jask_store(small_budget, rng):
    x = jask.from_numpy(rng.standard_normal((97, 61)).astype(np.float32))
    f = display.fields(x)
    ref = zarr.open_array(x.filename, mode="r")
    assert f["shape"] == "(97, 61)" and f["dtype"] == "float32"
    assert f["size"] == "23.11 kiB"  # 97 * 61 * 4 bytes
    count = int(np.prod([-(-s // c) for s, c in zip(ref.shape, ref.chunks)]))
    assert count > 1 and f["chunks"] == f"{ref.chunks} ({count} chunks)"
    assert f["store"] == x.filename
    assert f["owner"].startswith("jask: deleted when")


def test_bytes_on_disk_match_du(small_budget, tmp_path, rng):
    z = zarr.create_array(store=tmp_path / "c.zarr", shape=(300, 200), chunks=(64, 64),
                          dtype="float64", compressors=zarr.codecs.ZstdCodec())
    z[...] = np.round(rng.standard_normal((300, 200)), 1)
    du = subprocess.run(["du", "-s", "--block-size=1", str(tmp_path / "c.zarr")],
                        capture_output=True, text=True, check=True)
    assert display.disk_usage(str(tmp_path / "c.zarr")) == int(du.stdout.split()[0])
    f = display.fields(jask.open(tmp_path / "c.zarr"))
    assert f["owner"] == "opened: jask never deletes it"
    assert f["chunks"] == "(64, 64) (20 chunks)"


def test_a_store_removed_under_an_opened_array_still_shows(small_budget, tmp_path):
    zarr.create_array(store=tmp_path / "gone.zarr", shape=(4,), dtype="float32")
    x = jask.open(tmp_path / "gone.zarr")
    shutil.rmtree(tmp_path / "gone.zarr")
    assert display.fields(x)["on disk"].startswith("unavailable: ")
    assert "gone.zarr" in x._repr_html_()


def test_elementwise_tile_is_what_an_op_uses(small_budget, tmp_path, rng):
    """The tile shown is the chunking a real add writes, for jask's own
    chunks and for chunks another tool chose."""
    values = rng.standard_normal((203, 77)).astype(np.float32)
    z = zarr.create_array(store=tmp_path / "o.zarr", shape=values.shape, chunks=(50, 77),
                          dtype="float32")
    z[...] = values
    for x in (jask.from_numpy(values), jask.open(tmp_path / "o.zarr")):
        shown = display.fields(x)["elementwise tile"]
        result = x + x
        n = int(np.prod([-(-s // c) for s, c in zip(x.shape, result.chunks)]))
        assert shown.startswith(f"{result.chunks} ({n} tasks,"), (shown, result.chunks)
        assert "held at once of a 62.50 kiB budget" in shown


def test_a_tile_that_cannot_fit_shows_the_error(tmp_path):
    jask.set_memory_budget("16KB", scratch_dir=str(tmp_path / "scratch"))
    z = zarr.create_array(store=tmp_path / "big.zarr", shape=(400, 400), chunks=(400, 400),
                          dtype="float32")
    shown = display.fields(jask.open(tmp_path / "big.zarr"))["elementwise tile"]
    assert shown.startswith("none fits: jask.add:") and "budget of 16000 bytes" in shown
    assert z.shape == (400, 400)


def test_html_has_table_picture_and_escaped_path(small_budget, tmp_path):
    folder = tmp_path / "a<b&c"
    folder.mkdir()
    z = zarr.create_array(store=folder / "x.zarr", shape=(30, 40), chunks=(10, 20),
                          dtype="int32")
    x = jask.open(folder / "x.zarr")
    page = x._repr_html_()
    assert "a&lt;b&amp;c" in page and "a<b&c" not in page
    assert "<svg" in page and "<table" in page
    for label in ("shape", "dtype", "on disk", "chunks", "store", "owner", "elementwise tile"):
        assert f">{label}</th>" in page
    assert z.chunks == (10, 20)
    assert "\n" not in repr(x) and repr(x).startswith("DiskArray(shape=(30, 40)")


def test_zero_d_and_many_chunks(small_budget, tmp_path):
    # (jask.from_numpy cannot make a 0-d store yet: storage.create_at)
    assert display.chunk_svg((), ()) == "" and display.n_chunks((), ()) == 1
    z = zarr.create_array(store=tmp_path / "m.zarr", shape=(10**6, 10**5), chunks=(10, 10),
                          dtype="float32")  # 10^9 chunks, none written
    page = jask.open(tmp_path / "m.zarr")._repr_html_()
    assert "<svg" in page and "(1000000000 chunks)" in page and z.nchunks == 10**9


def test_traced_arrays_show_a_short_table(small_budget):
    seen = []

    def f(a):
        seen.append(display.html(a))
        return a

    jax.jit(f)(jask.from_numpy(np.ones((3, 2), np.float32)))
    (page,) = seen
    assert "traced" in page and "(3, 2)" in page and "<svg" not in page
    assert "on disk" not in page


@pytest.mark.parametrize("shape", [(5,), (4, 6, 8), (2, 3, 4, 5)], ids=str)
def test_picture_for_other_ranks(small_budget, shape):
    x = jask.from_numpy(np.zeros(shape, np.float32))
    assert "<svg" in x._repr_html_()
