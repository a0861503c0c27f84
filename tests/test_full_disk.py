"""A full scratch disk gives a clear error, keeps nothing partial, leaves inputs
intact, and the next op works once space is freed.

The small disk is a real 12 MiB tmpfs mount (we run as root here); the test
is skipped, saying why, where mounting is not allowed.
"""
import os
import re

import numpy as np
import pytest
import zarr

from helpers import run_script, tmpfs_mount


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs_mount(tmp_path / "small", "12m") as mount:
        yield mount


def test_full_scratch_disk(tmp_path, small_disk):
    data = np.arange(1_000_000, dtype=np.float32).reshape(1000, 1000) / 1e6
    zarr.create_array(str(tmp_path / "input.zarr"), data=data, chunks=(250, 250),
                      compressors=None, zarr_format=3)
    zarr.create_array(str(small_disk / "target.zarr"), data=np.ones((600, 600), np.float32),
                      chunks=(100, 100), compressors=None, zarr_format=3)
    with open(small_disk / "ballast", "wb") as f:       # the user's own file
        os.posix_fallocate(f.fileno(), 0, 9 * 2**20)    # (truncate would be sparse)
    report = run_script("full_disk.py", small_disk, tmp_path / "input.zarr", timeout=300)
    scratch = os.path.join(str(small_disk), "scratch")

    refused = report["refused"]
    assert refused["type"] == "DiskFullError", refused
    assert scratch in refused["message"]
    # the 4 MB output, as stored: edge chunks are written full size
    needed = int(re.search(r"needs ([\d,]+) bytes", refused["message"]).group(1).replace(",", ""))
    assert 4_000_000 <= needed <= 5_000_000, refused["message"]
    assert re.search(r"and \d+ bytes( \(.+\))? are free", refused["message"]), refused
    assert report["left_after_refused"] == []

    racing = report["racing"]
    print("racing ops on a nearly full disk:", [r.get("type", "ok") for r in racing])
    assert any(r["ok"] for r in racing) or all(r["type"] == "DiskFullError" for r in racing), racing
    for i, r in enumerate(racing):
        if r["ok"]:
            total = float(data.astype(np.float64).sum())
            assert r["value"] == pytest.approx(total * (i + 2), rel=1e-5)
        else:
            assert r["type"] == "DiskFullError" and scratch in r["message"], r
    assert report["left_after_racing"] == []            # nothing partial kept

    update = report["update"]
    assert update["type"] == "DiskFullError" and str(small_disk) in update["message"], update
    assert report["from_numpy"]["type"] == "DiskFullError", report["from_numpy"]
    assert report["after_freeing"]["ok"], report["after_freeing"]
    total = float(data.astype(np.float64).sum())
    assert report["after_freeing"]["value"] == pytest.approx(total + 1e6, rel=1e-5)
    assert report["update_after_freeing"]["ok"], report["update_after_freeing"]

    # checked from outside: the input untouched, the target updated once space was freed
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "input.zarr"), mode="r")[:], data)
    assert (zarr.open_array(str(small_disk / "target.zarr"), mode="r")[:] == 7.0).all()
    assert [n for n in os.listdir(small_disk) if n.startswith(".target")] == []


def test_every_writer_names_the_full_folder(tmp_path):
    """save, to_zarr, jask.optim.step, optax.apply_updates and
    jask.optim.apply_updates: a DiskFullError naming the folder and the sizes
    (before, a bare ``OSError: [Errno 28]`` from the last three)."""
    with tmpfs_mount(tmp_path / "small", "4m") as mount:
        report = run_script("full_disk_writers.py", mount, tmp_path / "scratch", timeout=300)
        np.testing.assert_array_equal(zarr.open_array(str(mount / "p.zarr"))[...], 1.0)
    for writer in ["save", "to_zarr zstd", "apply_updates", "optim.step",
                   "optax.apply_updates"]:
        r = report[writer]
        folder = report["scratch"] if writer.startswith(("optim", "optax")) else str(mount)
        assert r["type"] == "DiskFullError", (writer, r)
        assert f"in {folder!r}" in r["message"], (writer, r)
        free = r"and \d+ bytes( \(.+\))? are free"
        assert re.search(r"needs \d+ bytes \(.+\) " + free, r["message"]), r
    assert report["left_beside"] == ["ballast", "p.zarr"]   # no partial copies
