"""Damaged stores give a clear error naming the store and chunk, never a
silent wrong value; a store on a read-only filesystem can be read.

What jask can detect: Zarr leaves out chunk files that hold only the fill
value, so a missing chunk file of a *user's* store reads as the fill value,
as in every Zarr reader; jask writes every chunk of its own stores, so there
a missing file is an error. A truncated chunk, metadata that is no Zarr
array, and a store replaced by another writer while an op reads it are
errors everywhere.
"""
import os
import subprocess

import numpy as np
import pytest
import zarr

from helpers import run_script, tmpfs_mount


def _run(tmp_path, **cases):
    args = [f"{case.replace('_', '-')}={path}" for case, path in cases.items()]
    report = run_script("bad_stores.py", tmp_path / "scratch", *args, timeout=300)
    return {k.replace("-", "_"): v for k, v in report.items()}


def _store(path, compressed=False, shape=(300, 200)):
    data = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    kwargs = {} if compressed else {"compressors": None}
    zarr.create_array(str(path), data=data, chunks=(64, 64), zarr_format=3, **kwargs)
    return data


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """Every damaged store, and one child process that runs an op on each."""
    tmp = tmp_path_factory.mktemp("damaged")
    truncated, compressed, missing, corrupt, big = (
        tmp / n for n in ("truncated.zarr", "compressed.zarr", "missing.zarr", "corrupt.zarr",
                          "big.zarr"))
    for path in (truncated, missing, corrupt):
        _store(path)
    _store(compressed, compressed=True)
    _store(big, shape=(3000, 1000))
    for path, keep in ((truncated, 100), (compressed, 20)):
        chunk = path / "c" / "1" / "2"
        chunk.write_bytes(chunk.read_bytes()[:keep])
    os.remove(missing / "c" / "0" / "0")
    (corrupt / "zarr.json").write_text("{ not json")
    results = _run(tmp, open_truncated=truncated, open_compressed=compressed,
                   open_missing=missing, open_corrupt=corrupt, own_missing_chunk="-",
                   changed_mid_op=big)
    return tmp, results


def test_truncated_chunk_names_store_and_chunk(damaged):
    tmp, results = damaged
    result = results["open_truncated"]
    assert result["type"] == "DamagedStoreError", result  # a ValueError
    assert str(tmp / "truncated.zarr") in result["message"] and "'c/1/2'" in result["message"]
    assert "100 bytes" in result["message"]


def test_truncated_compressed_chunk_is_an_error(damaged):
    assert not damaged[1]["open_compressed"]["ok"]  # Zarr's codec error, never a value


def test_missing_chunk_of_a_users_store_reads_as_fill_value_like_zarr(damaged):
    tmp, results = damaged
    expected = float(zarr.open_array(str(tmp / "missing.zarr"), mode="r")[:].sum())
    assert results["open_missing"] == {"ok": True, "value": pytest.approx(expected, rel=1e-6)}


def test_missing_chunk_of_jasks_own_store_is_an_error(damaged):
    result = damaged[1]["own_missing_chunk"]
    assert result["type"] == "FileNotFoundError", result
    assert "from_numpy-" in result["message"] and "missing" in result["message"]


def test_corrupt_metadata_names_the_store(damaged):
    tmp, results = damaged
    result = results["open_corrupt"]
    assert result["type"] == "FileNotFoundError", result
    assert str(tmp / "corrupt.zarr") in result["message"]


def test_store_another_thread_replaces_mid_op_is_read_as_one_version(damaged):
    """The swap waits for the read (a reader hold), so the op sees one version whole:
    never a mix of old and new values (new = -old - 1 everywhere)."""
    result = damaged[1]["changed_mid_op"]
    assert result["ok"], result
    old = float(np.arange(3000 * 1000, dtype=np.float64).sum())
    new = -old - 3000 * 1000
    assert result["value"] in (pytest.approx(2 * old, rel=1e-5),
                               pytest.approx(2 * new, rel=1e-5)), result


@pytest.fixture
def read_only_mount(tmp_path):
    with tmpfs_mount(tmp_path / "ro", "8m") as mount:
        yield mount


def test_store_on_a_read_only_filesystem_can_be_read(tmp_path, read_only_mount):
    data = _store(read_only_mount / "a.zarr")
    os.makedirs(read_only_mount / ".a.zarr.jask-update-0000")  # a leftover it cannot remove
    ro = subprocess.run(["mount", "-o", "remount,ro", str(read_only_mount)],
                        capture_output=True, text=True)
    if ro.returncode != 0:
        pytest.skip(f"cannot remount read-only: {ro.stderr.strip()}")
    result = _run(tmp_path, read_only=read_only_mount / "a.zarr")["read_only"]
    assert result["sum"] == {"ok": True, "value": pytest.approx(float(data.sum()), rel=1e-6)}
    assert result["add"] == {"ok": True, "value": pytest.approx(float((data + 1).sum()), rel=1e-6)}
    assert not result["update_"]["ok"] and "Read-only" in result["update_"]["message"]
