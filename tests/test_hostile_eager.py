"""What a hostile user tried on issue #19's notebook features (lazy eager
ops, views, the Gram planner, one-pass var/std), on local stores, each
compared with numpy or jax.numpy."""
from __future__ import annotations

import numpy as np
import pytest
import zarr

import jask
from helpers import SMALL_BUDGET, tmpfs_mount, to_numpy, tolerance, user_store


@pytest.mark.parametrize("shape", [(303, 9), (9, 301)])
def test_products_whose_result_is_larger_than_their_inputs(small_budget, rng, shape):
    """X @ X.T of a tall X and the Gram matrix X.T @ X of a wide one: the
    result is many budgets, the inputs a fraction of one. The planner's bound
    on tasks counted only the inputs, so every tile small enough to fit was
    refused as "too many tasks" and the op raised BudgetError."""
    x = rng.standard_normal(shape).astype(np.float32)
    X = jask.from_numpy(x)
    np.testing.assert_allclose(to_numpy(X @ X.T), x @ x.T, **tolerance(np.float32))
    np.testing.assert_allclose(to_numpy(X.T @ X), x.T @ x, **tolerance(np.float32))
    w = rng.standard_normal((shape[1], 50)).astype(np.float32)
    np.testing.assert_allclose(to_numpy(X @ jask.from_numpy(w)), x @ w, **tolerance(np.float32))


def test_a_refused_view_names_the_op_called_and_the_chunks_stored(small_budget, rng, tmp_path):
    """A view that cannot be read within the budget: the error names the op
    the user called (not the copy jask tried instead) and the stored array's
    chunks and a rechunking of them (not the view's axes)."""
    x = rng.standard_normal((333, 23)).astype(np.float32)
    X = user_store(tmp_path / "big.zarr", x, chunks=(333, 23), compressors=zarr.codecs.ZstdCodec())
    for call, op in [(lambda: jask.sum(X.T, axis=1), "jask.sum"),
                     (lambda: to_numpy(X.T * 2.0), "jask.multiply")]:
        with pytest.raises(jask.BudgetError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(op) and "chunks of shape (333, 23)" in msg, msg
        assert "(23, 333)" not in msg and ", 23))" in msg, msg  # a rechunking of the stored axes


def test_an_op_on_a_pending_result_is_refused_at_its_call(small_budget, rng, tmp_path):
    """BudgetError at the call, also when an input is a pending eager result:
    ``Y + Big`` with Y pending and Big's chunks too large for the budget
    returned at once and raised only where Y + Big was first read."""
    x = rng.standard_normal((130, 130)).astype(np.float32)
    Big = user_store(tmp_path / "big.zarr", x, chunks=(130, 130),
                     compressors=zarr.codecs.ZstdCodec())
    Y = jask.from_numpy(x) * 2.0
    with pytest.raises(jask.BudgetError, match="big.zarr"):
        Y + Big
    with pytest.raises(jask.BudgetError, match="big.zarr"):
        jask.sum(Y * Big, axis=0)
    np.testing.assert_array_equal(to_numpy(Y), x * 2)  # the pending result is intact


@pytest.mark.parametrize("how", ["zarr overwrite", "removed"])
def test_a_pending_result_of_a_store_replaced_since_its_call_is_refused(small_budget, rng,
                                                                          tmp_path, how):
    """``Y = Z * 2`` on a user's store, then another writer replaces the store
    (zarr's ``overwrite=True``) or deletes it before Y is read: Y silently held
    the new values (or the fill value, all zeros) instead of the values Z had
    at the call. Now reading Y raises StoreChangedError naming the store;
    jask's own update_ of Z still computes Y first (the values at the call)."""
    import shutil

    x = rng.standard_normal((133, 23)).astype(np.float32)
    path = tmp_path / "z.zarr"
    Z = user_store(path, x, chunks=(40, 7), compressors=zarr.codecs.ZstdCodec())
    Y, S = Z * 2.0, Z.T[2:9] - Z.T[3:10]  # (on views of Z too)
    if how == "removed":
        shutil.rmtree(path)
    else:
        zarr.create_array(str(path), shape=x.shape, dtype=x.dtype, chunks=(40, 7),
                          overwrite=True)[...] = x + 1
    for pending in (Y, S):
        with pytest.raises(jask.StoreChangedError, match="z.zarr"):
            to_numpy(pending)
    if how == "removed":
        return
    Y = Z * 2.0
    Z.update_(Z * 0.0)  # jask's own writer: Y is computed first
    np.testing.assert_array_equal(to_numpy(Y), (x + 1) * 2)
    np.testing.assert_array_equal(to_numpy(Z), np.zeros_like(x))


def test_a_damaged_store_with_a_pending_reader_can_be_repaired(small_budget, rng, tmp_path):
    """``Y = Z * 2`` on a store with a damaged chunk returns at once (eager ops
    are lazy); ``Z.update_(good values)`` then computed Y first, raised
    DamagedStoreError and refused to repair Z for as long as Y lived. Now the
    repair goes ahead and Y raises the damage (naming store and chunk) when read."""
    x = rng.standard_normal((133, 23)).astype(np.float32)
    path = tmp_path / "d.zarr"
    Z = user_store(path, x, chunks=(40, 7), compressors=zarr.codecs.ZstdCodec())
    chunk = path / "c" / "1" / "1"
    chunk.write_bytes(chunk.read_bytes()[:20])
    Y, V = Z * 2.0, Z.T[1:] + 1.0
    Z.update_(jask.from_numpy(x))
    np.testing.assert_array_equal(to_numpy(Z), x)
    np.testing.assert_array_equal(zarr.open_array(str(path))[...], x)
    for pending in (Y, V, Y):
        with pytest.raises(jask.DamagedStoreError, match=r"'c/1/1'.*d\.zarr"):
            to_numpy(pending)
    np.testing.assert_allclose(to_numpy(Z * 2.0), x * 2)


def test_a_deep_copy_keeps_its_values(small_budget, rng):
    """``best = copy.deepcopy(params)`` (early stopping) shared the store:
    the next ``params.update_`` changed ``best`` too, and a copy of a view
    changed with the view's update_. A copy is now a view of its own (free
    until either side is written)."""
    import copy

    x = rng.standard_normal((133, 23)).astype(np.float32)
    X = jask.from_numpy(x)
    best, shallow, V = copy.deepcopy({"w": X})["w"], copy.copy(X), X[3:-2].T
    of_view = copy.deepcopy(V)
    X.update_(X + 1.0)
    V.update_(V * 0.0)
    np.testing.assert_array_equal(to_numpy(best), x)
    np.testing.assert_array_equal(to_numpy(shallow), x)
    np.testing.assert_array_equal(to_numpy(of_view), x[3:-2].T)
    best.update_(best * 2.0)  # and writing the copy leaves the original alone
    np.testing.assert_array_equal(to_numpy(X), x + 1)
    np.testing.assert_array_equal(to_numpy(best), x * 2)


def test_pending_results_count_against_the_scratch_disk_at_the_call(small_budget, rng,
                                                                     tmp_path):
    """DiskFullError at the call: with room for one more output, ``Y = X * 2``
    then ``Z = X * 3`` both returned (each output alone fits) and the disk
    filled when they were read; eagerly Z was refused at its call. The
    outputs of pending results still held now count at each call."""
    import gc
    import os

    with tmpfs_mount(tmp_path / "small", "3m") as mount:
        jask.set_memory_budget(SMALL_BUDGET, scratch_dir=str(mount), allow_tmpfs=True)
        x = rng.standard_normal((1000, 230)).astype(np.float32)
        X = jask.from_numpy(x)
        X.filename  # (written)
        with open(mount / "ballast", "wb") as f:  # room for 1.5 outputs
            stat = os.statvfs(mount)
            os.posix_fallocate(f.fileno(), 0, stat.f_bavail * stat.f_frsize - 3 * x.nbytes // 2)
        Y = X * 2.0
        with pytest.raises(jask.DiskFullError) as err:
            X * 3.0
        assert str(mount) in str(err.value) and "pending" in " ".join(err.value.__notes__)
        np.testing.assert_array_equal(to_numpy(Y), x * 2)
        del X, Y, err
        gc.collect()
        jask.collect()


def test_a_product_decodes_once_only_where_its_output_still_fits(small_budget, rng, tmp_path):
    """A @ B of zstd stores decodes each into a scratch copy first; with a
    scratch disk that holds the output but not the copies too, the first copy
    was kept while the second was refused, and the product then found no room
    for its output (DiskFullError). The copies now leave room for the output,
    and those made before a refusal are let go."""
    import gc

    a = rng.standard_normal((600, 300)).astype(np.float32)
    b = rng.standard_normal((300, 200)).astype(np.float32)
    zstd = dict(chunks=(64, 64), compressors=zarr.codecs.ZstdCodec())
    A, B = user_store(tmp_path / "a.zarr", a, **zstd), user_store(tmp_path / "b.zarr", b, **zstd)
    with tmpfs_mount(tmp_path / "small", "1m") as mount:
        jask.set_memory_budget("256KB", scratch_dir=str(mount), allow_tmpfs=True)
        R = A @ B
        np.testing.assert_allclose(to_numpy(R), a @ b, **tolerance(np.float32))
        del R
        gc.collect()
        jask.collect()
