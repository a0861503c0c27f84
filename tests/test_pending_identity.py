"""Issue 25, never a silent wrong value: a pending result, a view and an
opened array never show changes made after their call or their open.

Each case was a wrong value on commit d9deaf7, with no error. Other tools'
writes (plain zarr, ``rm``/``cp -a``) run in child processes, and what they
leave is checked with plain zarr.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr

import jask
from helpers import SMALL_BUDGET, write_store


def _python(code: str) -> None:
    """Run ``code`` in a child Python with plain zarr (another tool's writer)."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True)


def _shell(command: str) -> None:
    subprocess.run(["bash", "-c", command], check=True)


@pytest.fixture(params=[True, False], ids=["lazy", "at-call"])
def lazy(request, small_budget):
    """Eager ops recorded (the default), or each run at its call (``lazy=False``)."""
    jask.set_memory_budget(SMALL_BUDGET, scratch_dir=small_budget.scratch_dir,
                           lazy=request.param)
    return request.param


# --- values from outside, changed after the call -------------------------------------

SCALE = 2.0  # a global jask.map's function reads


def _map_closure(X):
    k = np.ones(1, np.float32)
    out = jask.map(lambda a: a * k, X)
    k[:] = 500.0  # the caller reuses its buffer
    return out, 1.0


def _map_global(X):
    global SCALE
    out = jask.map(lambda a: a * SCALE, X)
    SCALE = 3.0
    return out, 2.0


def _memmap_setitem(X):
    mm = X.to_memmap()
    out = X + 1.0  # called after to_memmap, read after the write below
    mm[...] = 9.0
    return out, 2.0


def _memmap_vindex(X):
    mm = X.to_memmap()
    out = X * 3.0
    mm.vindex[np.arange(X.shape[0]), np.zeros(X.shape[0], int)] = 9.0
    return out, 3.0


def _memmap_view(X):
    mm = X.to_memmap()
    out = X[:5].T  # a view, no copy: it reads X's store
    mm.oindex[:, :] = 9.0
    return out, 1.0


def _memmap_attrs(X):
    mm = X.to_memmap()
    out = X - 1.0
    mm.attrs["units"] = "m"  # zarr rewrites zarr.json: a pending reader saw a changed store
    mm[:2] = 9.0
    return out, 0.0


def _memmap_blocks(X):
    mm = X.to_memmap()
    out = X + 2.0
    mm.blocks[0] = 9.0
    return out, 3.0


@pytest.mark.parametrize("change", [_map_closure, _map_global, _memmap_setitem,
                                    _memmap_vindex, _memmap_view, _memmap_attrs, _memmap_blocks],
                         ids=lambda f: f.__name__.lstrip("_"))
def test_a_result_holds_what_its_call_saw(small_budget, change):
    """``jask.map(f, X)`` ran ``f`` when the result was read, with the
    caller's changes since (a closure's numpy array: 16,384,000 for 32,768);
    a write through ``to_memmap()`` after ``b = X + 1`` gave ``b == 10``."""
    global SCALE
    SCALE = 2.0
    X = jask.from_numpy(np.ones((64, 8), np.float32))
    out, value = change(X)
    np.testing.assert_array_equal(out.to_numpy(), np.full(out.shape, value, np.float32))


def test_every_writing_method_of_zarr_array_computes_pending_readers_first():
    """A write method zarr adds (or renames) would bypass the guard: each
    ``set_*`` method, ``resize``, ``append`` and ``update_attributes`` is
    the view's own."""
    import zarr

    from jask.store.memmaps import WritableView
    writes = [n for n in dir(zarr.Array) if n.startswith("set_")
              or n in ("resize", "append", "update_attributes")]
    assert len(writes) >= 8
    assert [n for n in writes if n not in vars(WritableView)] == []


# --- a store replaced by a restored copy ---------------------------------------------

#: How a backup comes back: in place of the folder (whose inode number often
#: comes back too), or copied into it (the folder's inode stays).
RESTORES = {"rm-cp": "rm -rf '{path}' && cp -a '{backup}' '{path}'",
            "cp-into": "cp -a '{backup}/.' '{path}/'"}


@pytest.mark.parametrize("restore, jask_updated", [("rm-cp", False), ("cp-into", False),
                                                   ("cp-into", True)])
def test_a_store_restored_from_a_copy_is_a_change(small_budget, rng, tmp_path, restore,
                                                  jask_updated):
    """``rm -rf X.zarr; cp -a backup X.zarr`` often puts the old inode number
    back, and keeps ``zarr.json``'s times (and a jask-updated store's version
    token): the pending result returned the restored values. Now a change
    time, which no copy can set, says it is another store."""
    x = rng.standard_normal((48, 6)).astype(np.float32)
    for attempt in range(20):  # until the folder has its inode number back, as reported
        path, backup = tmp_path / f"x{attempt}.zarr", tmp_path / f"backup{attempt}.zarr"
        write_store(path, x, chunks=(16, 6), compressors=None)
        X = jask.open(path)
        if jask_updated:
            X.update_(jask.from_numpy(x))  # carries a token this process wrote
        _shell(f"cp -a '{path}' '{backup}'")
        _python(f"""
            import zarr
            z = zarr.open_array({str(path)!r}, mode="r+")
            z[...] = z[...] + 1  # chunks written in place: zarr.json untouched
        """)
        Y, V = X * 2.0, X[3:9]
        inode = os.stat(path).st_ino
        _shell(RESTORES[restore].format(path=path, backup=backup))
        if os.stat(path).st_ino == inode:
            break
    else:
        pytest.skip("the filesystem never gave the folder its inode number back")
    np.testing.assert_array_equal(zarr.open_array(str(path))[...], x)  # the old values
    with pytest.raises(jask.StoreChangedError, match=os.path.basename(path)):
        Y.to_numpy()
    # a view reads its base, as X itself does: the values now there (another
    # tool's writes are seen as they land; jask's own update_ copies it first)
    np.testing.assert_array_equal(V.to_numpy(), x[3:9])


# --- one store, two paths ------------------------------------------------------------

def _link_to_store(tmp_path):
    real = tmp_path / "real.zarr"
    os.symlink(real, tmp_path / "link.zarr")
    return real, tmp_path / "link.zarr"


def _link_to_folder(tmp_path):
    (tmp_path / "data").mkdir()
    os.symlink(tmp_path / "data", tmp_path / "alias")
    return tmp_path / "data" / "x.zarr", tmp_path / "alias" / "x.zarr"


def _dot_dot_after_a_link(tmp_path):
    """``lnk/../x.zarr`` with ``lnk`` a link into ``deep``: the system opens
    ``deep/x.zarr``, where ``abspath`` says ``./x.zarr`` (another store here)."""
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    os.symlink(tmp_path / "deep" / "inner", tmp_path / "lnk")
    write_store(tmp_path / "x.zarr", np.full((40, 7), -1, np.float32), chunks=(16, 7))
    return tmp_path / "deep" / "x.zarr", tmp_path / "lnk" / ".." / "x.zarr"


def _bind_mounted_folder(tmp_path):
    """The folder mounted a second time (``mount --bind``): no link to resolve."""
    (tmp_path / "data").mkdir()
    (tmp_path / "mnt").mkdir()
    if subprocess.run(["mount", "--bind", str(tmp_path / "data"), str(tmp_path / "mnt")],
                      capture_output=True).returncode:
        pytest.skip("mount --bind is refused here (it needs root)")
    _mounts.append(tmp_path / "mnt")
    return tmp_path / "data" / "x.zarr", tmp_path / "mnt" / "x.zarr"


_mounts: list = []


@pytest.fixture(autouse=True)
def _unmount():
    yield
    while _mounts:
        jask.collect()  # (no store of jask's open there)
        subprocess.run(["umount", str(_mounts.pop())], check=True)


TWO_PATHS = {"link-to-store": _link_to_store, "link-to-folder": _link_to_folder,
             "dot-dot-after-a-link": _dot_dot_after_a_link, "bind-mount": _bind_mounted_folder}


@pytest.mark.parametrize("paths", TWO_PATHS.values(), ids=TWO_PATHS.keys())
@pytest.mark.parametrize("through", ["link", "real"])
def test_one_store_reached_by_two_paths_is_one_store(lazy, rng, tmp_path, paths, through):
    """The same store opened through a symlink and through its real path:
    ``update_`` through one changed the pending results and views taken
    through the other (paths were compared with ``abspath``)."""
    x = rng.standard_normal((40, 7)).astype(np.float32)
    real, link = paths(tmp_path)
    write_store(real, x, chunks=(16, 7), compressors=None)
    R, L = jask.open(real), jask.open(link)
    readers = [R * 2.0, L * 2.0, R[2:9].T, L[2:9].T]
    expected = [x * 2, x * 2, x[2:9].T, x[2:9].T]
    (L if through == "link" else R).update_(jask.from_numpy(x + 10))
    for got, want in zip(readers, expected):
        np.testing.assert_array_equal(got.to_numpy(), want)
    np.testing.assert_array_equal(R.to_numpy(), x + 10)
    np.testing.assert_array_equal(L.to_numpy(), x + 10)


def test_update_through_a_link_updates_the_store_it_points_to(small_budget, rng, tmp_path):
    """``update_`` of a store opened through a symlink swapped the link itself
    for a copy: the real store kept its old values and a
    ``.NAME.jask-update-*`` folder was left beside the link."""
    x = rng.standard_normal((40, 7)).astype(np.float32)
    real, link = _link_to_store(tmp_path)
    write_store(real, x, chunks=(16, 7), compressors=None)
    L = jask.open(link)
    L.update_(jask.from_numpy(x + 10))
    assert os.path.islink(link) and os.readlink(link) == str(real)
    np.testing.assert_array_equal(zarr.open_array(str(real))[...], x + 10)
    assert not [n for n in os.listdir(tmp_path) if ".jask-" in n], os.listdir(tmp_path)


def test_save_over_a_link_writes_the_store_it_points_to(small_budget, rng, tmp_path):
    """``jask.save(x, link, overwrite=True)`` put a new folder in place of the
    link and left the store it pointed to as it was."""
    x = rng.standard_normal((40, 7)).astype(np.float32)
    real, link = _link_to_store(tmp_path)
    write_store(real, x, chunks=(16, 7))
    jask.save(jask.from_numpy(x + 3), link, overwrite=True)
    assert os.path.islink(link)
    np.testing.assert_array_equal(zarr.open_array(str(real))[...], x + 3)


def test_an_opened_array_keeps_the_store_its_open_found(small_budget, rng, tmp_path):
    """A link re-pointed after ``jask.open(link)``: the opened array read the
    other store (of the same layout), with no error."""
    x = rng.standard_normal((40, 7)).astype(np.float32)
    write_store(tmp_path / "v1.zarr", x, chunks=(16, 7))
    write_store(tmp_path / "v2.zarr", x + 1, chunks=(16, 7))
    os.symlink(tmp_path / "v1.zarr", tmp_path / "current")
    X = jask.open(tmp_path / "current")
    _shell(f"ln -sfn '{tmp_path / 'v2.zarr'}' '{tmp_path / 'current'}'")
    np.testing.assert_array_equal(X.to_numpy(), x)
    np.testing.assert_array_equal(jask.open(tmp_path / "current").to_numpy(), x + 1)


def test_a_scratch_store_opened_through_a_link_is_kept(small_budget, rng, tmp_path):
    """A result of jask's opened by its path through a link to the scratch
    folder was deleted with the DiskArray that made it, under the opened one."""
    x = rng.standard_normal((40, 7)).astype(np.float32)
    os.symlink(small_budget.scratch_dir, tmp_path / "scratch-link")
    made = (jask.from_numpy(x) * 2.0).block_until_ready()
    inside = os.path.relpath(made.filename, small_budget.scratch_dir)
    opened = jask.open(tmp_path / "scratch-link" / inside)
    del made
    jask.collect()
    np.testing.assert_array_equal(opened.to_numpy(), x * 2)


# --- a store rewritten with another layout -------------------------------------------

def _int32(path, x):
    """The same shape and chunk file sizes, int32 for float32."""
    return f"""
        import numpy as np, zarr
        z = zarr.create_array({str(path)!r}, shape={x.shape}, chunks=(16, 16), dtype="int32",
                              compressors=None, overwrite=True)
        z[...] = np.arange({x.size}, dtype="int32").reshape({x.shape})
    """


def _rechunked(path, x):
    """Other chunks whose files have the old ones' size (16x16 for 8x32)."""
    return f"""
        import numpy as np, zarr
        z = zarr.create_array({str(path)!r}, shape={x.shape}, chunks=(8, 32), dtype="float32",
                              compressors=None, overwrite=True)
        z[...] = np.arange({x.size}, dtype="float32").reshape({x.shape})
    """


def _read_opened(X):
    return float(jask.sum(X))


def _read_called_after(X):
    return (X + 0.0).to_numpy()


def _read_view(X):
    return X[1:5].to_numpy()


def _read_to_numpy(X):
    return X.to_numpy()


@pytest.mark.parametrize("rewrite", [_int32, _rechunked], ids=["int32", "rechunked"])
@pytest.mark.parametrize("read", [_read_opened, _read_called_after, _read_view, _read_to_numpy],
                         ids=lambda f: f.__name__[6:])
def test_a_store_rewritten_with_another_layout_is_refused(lazy, tmp_path, rewrite, read):
    """A user's local store overwritten by zarr with int32 for float32, or with
    other chunks of the same file sizes, was read with the layout jask opened
    it with (a sum of 3.0e-41, or 77,232 for 4,717,056), where at a URL jask
    raises StoreChangedError. Now a local store is refused the same way,
    before any value is returned; reopening reads the new layout."""
    x = np.ones((32, 32), np.float32)
    path = tmp_path / "x.zarr"
    write_store(path, x, chunks=(16, 16), compressors=None)
    X = jask.open(path)
    assert float(jask.sum(X)) == x.size  # (read once: jask knows its chunks)
    _python(rewrite(path, x))
    with pytest.raises(jask.StoreChangedError, match="x.zarr.*since it was opened"):
        read(X)
    fresh = zarr.open_array(str(path))[...]
    np.testing.assert_array_equal(jask.open(path).to_numpy(), fresh)


def test_a_view_copied_after_a_rewrite_is_refused(lazy, tmp_path):
    """A view taken before the rewrite and copied after it (its ``filename``)
    was copied with the old layout: a store of garbage numbers."""
    x = np.ones((32, 32), np.float32)
    path = tmp_path / "x.zarr"
    write_store(path, x, chunks=(16, 16), compressors=None)
    X = jask.open(path)
    assert float(jask.sum(X)) == x.size
    V = X[1:5]
    _python(_int32(path, x))
    with pytest.raises(jask.StoreChangedError, match="since it was opened"):
        V.filename


def test_a_rewrite_before_the_first_read_is_refused(small_budget, tmp_path):
    """The layout is the one the open saw, read or not; attributes written
    since (zarr rewrites ``zarr.json`` for them too) are no change."""
    x = np.ones((32, 32), np.float32)
    path = tmp_path / "x.zarr"
    write_store(path, x, chunks=(16, 16), compressors=None)
    X = jask.open(path)
    _python(f"""
        import zarr
        zarr.open_array({str(path)!r}, mode="r+").attrs["units"] = "m"
    """)
    np.testing.assert_array_equal(X.to_numpy(), x)
    Y = X * 2.0
    _python(_int32(path, x))
    for read in (lambda: Y.to_numpy(), lambda: X.to_numpy(), lambda: X + 1.0):
        with pytest.raises(jask.StoreChangedError, match="x.zarr"):
            read()
