"""jask.batches: a host feed's batches in recycled memory.

A batch's memory is reused only once nothing can read the batch any more: a
view, a slice, a memoryview or a JAX array of it kept by the consumer never
changes; batches kept whole stay right; the memory kept is bounded and freed
on close()."""
import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import jask
from jask.api import batches as batches_module

CPU = jax.devices("cpu")[0]
PREFETCH = 2


@pytest.fixture
def recycled(monkeypatch):
    """Every batch recycled, however small (the tests' batches are far below
    the mmap threshold, from which loaders recycle)."""
    monkeypatch.setattr(batches_module, "RECYCLE_BYTES", 1)


def _loader(tmp_path, epochs=2, **kw):
    rows, cols = 3000, 8
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    X = zarr.create_array(str(tmp_path / "X.zarr"), shape=x.shape, chunks=(100, cols),
                          dtype="f4", compressors=None)
    X[:] = x
    Y = zarr.create_array(str(tmp_path / "y.zarr"), shape=(rows,), chunks=(100,), dtype="i8",
                          compressors=None)
    Y[:] = np.arange(rows)
    return jask.batches(jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr")),
                        batch_size=50, buffer=400, seed=1, epochs=epochs, prefetch=PREFETCH,
                        **kw), x


#: Every kind of reference to a batch's memory a consumer may keep.
VIEWS = {"slice": lambda b: b[3:7], "strided": lambda b: b[::3],
         "reshape": lambda b: b.reshape(-1), "transpose": lambda b: b.T,
         "view": lambda b: b.view(np.int32), "asarray": np.asarray, "memoryview": memoryview,
         "jnp.asarray": jnp.asarray, "device_put": lambda b: jax.device_put(b, CPU)}


def _views_that_changed(loader) -> list:
    """Keep only one kind of view of each of a few batches, drop the batches,
    run the epochs out: the names of the views whose values changed meanwhile."""
    kept = []
    with loader:
        for b, (xb, yb) in enumerate(loader):
            kinds = list(VIEWS)
            if b % 3 == 0 and b // 3 < len(kinds):  # (one kind a batch: no other holds it)
                name = kinds[b // 3]
                for view in (VIEWS[name](xb), VIEWS[name](yb)):
                    kept.append((name, view, np.array(view, copy=True)))
            del xb, yb
            gc.collect()  # (a batch dropped is given back now, not at a later collection)
    assert len(kept) == 2 * len(VIEWS)
    return sorted({name for name, view, values in kept
                   if not np.array_equal(np.asarray(view), values)})


def test_a_view_kept_of_a_dropped_batch_never_changes(tmp_path, recycled):
    loader, _ = _loader(tmp_path)
    with loader:
        xb, _ = next(iter(loader))
        # a batch put on the CPU device shares its memory: held by JAX, not copied
        assert jax.device_put(xb, CPU).unsafe_buffer_pointer() == xb.ctypes.data
        del xb
    assert _views_that_changed(loader) == []


def test_the_check_above_fails_where_memory_comes_back_with_views_alive(
        tmp_path, recycled, monkeypatch):
    """The premise's test can fail: memory given back at the batch's death
    (not its owner's) is overwritten under the views kept."""
    def lend_at_the_batchs_death(self, shape, dtype):
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        with self.lock:
            blocks = self.free.get(nbytes)
            block = blocks.pop() if blocks else np.empty(nbytes, np.uint8)
        batch = block.view(dtype).reshape(shape)
        weakref.finalize(batch, self._give_back, block)
        return batch

    monkeypatch.setattr(batches_module._BatchMemory, "empty", lend_at_the_batchs_death)
    loader, _ = _loader(tmp_path)
    assert {"slice", "strided", "reshape", "transpose", "view"} <= set(
        _views_that_changed(loader))


def test_batches_dropped_are_recycled_and_the_memory_kept_is_bounded(tmp_path, recycled):
    loader, x = _loader(tmp_path)
    blocks, seen = set(), 0
    for xb, yb in loader:
        np.testing.assert_array_equal(xb, x[yb])
        blocks.add(xb.__array_interface__["data"][0])
        seen += 1
        del xb, yb
        gc.collect()
    assert seen == 120
    # lent at once: those cut ahead (2 * prefetch + 2) and the one the loop holds
    assert len(blocks) <= 2 * PREFETCH + 3
    memory = loader._batch_memory
    assert all(len(free) <= 2 * PREFETCH + 2 for free in memory.free.values())
    loader.close()
    assert loader._batch_memory is None and memory.free == {}


def test_batches_kept_are_never_reused_and_a_closed_loader_keeps_none(tmp_path, recycled):
    loader, x = _loader(tmp_path)
    want = [(xb.copy(), yb.copy()) for xb, yb in _loader(tmp_path / "plain")[0]]
    got = list(loader)  # every batch of both epochs kept
    assert len({xb.__array_interface__["data"][0] for xb, _ in got}) == len(got) == 120
    for (xb, yb), (wx, wy) in zip(got, want):
        np.testing.assert_array_equal(xb, wx)
        np.testing.assert_array_equal(yb, wy)
    memory = loader._batch_memory
    loader.close()
    del got
    gc.collect()  # given back after close(): freed, not kept
    assert not any(memory.free.values())


def test_the_cpu_device_keeps_its_batches_intact(tmp_path, recycled):
    """On JAX's CPU device batches are cut on the host: a JAX batch, which may
    share the host batch's memory, never changes while it is held."""
    loader, x = _loader(tmp_path, device=CPU)
    assert loader.device_bytes == 0
    kept = []
    for b, (xb, yb) in enumerate(loader):
        assert isinstance(xb, jax.Array)
        if b % 7 == 0:
            kept.append((xb, yb, np.array(xb), np.array(yb)))
        del xb, yb
        gc.collect()
    for xb, yb, wx, wy in kept:
        np.testing.assert_array_equal(np.asarray(xb), wx)
        np.testing.assert_array_equal(np.asarray(yb), wy)
        np.testing.assert_array_equal(wx, x[wy])


def test_batches_below_the_threshold_are_plain_arrays(tmp_path, monkeypatch):
    monkeypatch.setattr(batches_module, "RECYCLE_BYTES", 50 * 8 * 4)  # X's batch, not y's
    loader, x = _loader(tmp_path, epochs=1)
    for xb, yb in loader:
        np.testing.assert_array_equal(xb, x[yb])
        assert yb.base is None and xb.base is not None
    loader.close()
