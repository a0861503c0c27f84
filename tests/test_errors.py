"""Bad input fails early with a message that names the problem, and nothing
is lost: no output appears, and inputs are never modified by a failed op.

Shape mismatches of every binary op are in test_table.py."""
import os

import jax
import numpy as np
import pytest
import zarr

import jask
from helpers import stores_on_disk


@pytest.fixture
def a(small_budget):
    return jask.from_numpy(np.ones((9, 7), np.float32))


def test_mixed_dtypes_promote_as_jax_does(a):
    b = jask.from_numpy(np.full((9, 7), 2.0, np.float64))
    with jax.enable_x64(True):
        c = a + b  # float64, as jax.numpy gives with x64 on
    assert c.dtype == np.float64
    np.testing.assert_array_equal(c.to_numpy(), np.full((9, 7), 3.0))
    assert (a + b).dtype == np.float32  # x64 off: a float64 store is float32, as in jax.numpy


def test_dot_errors(a):
    with pytest.raises(ValueError, match="contraction"):
        jask.dot(a, a)
    with pytest.raises(ValueError, match="contraction"):
        jask.dot(a, jask.from_numpy(np.ones(9, np.float32)))
    with pytest.raises(ValueError, match="batch"):
        jask.dot(jask.from_numpy(np.ones((2, 9, 7), np.float32)),
                 jask.from_numpy(np.ones((3, 7, 4), np.float32)))
    with pytest.raises(ValueError, match="1-D operand"):
        jask.dot(jask.from_numpy(np.ones((2, 9, 7), np.float32)), np.ones(7, np.float32))


def test_operands_jask_cannot_use_are_type_errors(a):
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError, match="must be a DiskArray"):
        jask.update_(np.ones((9, 7)), a)
    with pytest.raises(TypeError, match="takes 2 operand"):
        jask.add(a)


@pytest.mark.parametrize("ufunc", [np.sin, np.add])
def test_map_of_a_numpy_ufunc_names_jax_numpys(a, ufunc):
    """JAX cannot trace numpy's ufuncs over a tile (np.sin crashed the process)."""
    with pytest.raises(TypeError, match=f"np.{ufunc.__name__}: pass jnp.{ufunc.__name__}"):
        jask.map(ufunc, *[a] * ufunc.nin)


def test_invalid_axes(a):
    with pytest.raises(ValueError, match="permutation"):
        jask.transpose(a, (0, 0))
    with pytest.raises(ValueError, match="permutation"):
        jask.transpose(a, (0, 1, 2))


def test_update_checks_shape_and_dtype(a):
    with pytest.raises(ValueError, match=r"\(7, 9\).*\(9, 7\)"):
        a.update_(jask.from_numpy(np.ones((7, 9), np.float32)))
    with pytest.raises(ValueError, match="float64.*float32"):
        a.update_(jask.from_numpy(np.ones((9, 7), np.float64)))
    np.testing.assert_array_equal(a.to_numpy(), np.ones((9, 7)))


def test_open_missing_or_not_an_array(tmp_path, small_budget):
    with pytest.raises(FileNotFoundError, match="no Zarr array at .*missing.zarr"):
        jask.open(tmp_path / "missing.zarr")
    (tmp_path / "folder").mkdir()
    with pytest.raises(FileNotFoundError, match="folder.*not a Zarr array"):
        jask.open(tmp_path / "folder")
    zarr.create_group(store=str(tmp_path / "group.zarr"))
    with pytest.raises(FileNotFoundError, match="group.zarr"):
        jask.open(tmp_path / "group.zarr")


def test_constructor_checks_the_store(tmp_path, small_budget):
    path = str(tmp_path / "x.zarr")
    zarr.create_array(store=path, shape=(3, 4), dtype="float32")
    with pytest.raises(ValueError, match=r"shape \(3, 4\).*float32.*shape \(4, 3\)"):
        jask.DiskArray(path, (4, 3), np.float32)


def test_budget_too_small_is_refused_before_writing(tmp_path):
    # A store whose chunks are far larger than the budget allows per task.
    path = str(tmp_path / "big-chunks.zarr")
    z = zarr.create_array(store=path, shape=(256, 256), chunks=(256, 256), dtype="float64")
    z[:] = 1.0
    jask.set_memory_budget(4096, scratch_dir=str(tmp_path / "scratch"))
    x = jask.open(path)
    before = stores_on_disk(jask.get_config())
    with pytest.raises(jask.BudgetError, match=r"jask.add: .* bytes.*budget of 4096 bytes"):
        x + x
    assert stores_on_disk(jask.get_config()) == before


# JAX logs the failed callback with its traceback, and pytest's log capture
# keeps that record (and through its frames, this test's locals) until the
# test is torn down: the plugin's leak check would see `target` alive.
@pytest.mark.jask_allow_leaks
def test_failed_op_leaves_no_output_and_inputs_intact(tmp_path, small_budget):
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(store=path, shape=(64, 64), chunks=(16, 16), dtype="float32",
                          compressors=None)
    z[:] = 1.0
    x = jask.open(path)
    target = jask.from_numpy(np.full((64, 64), 7.0, np.float32))
    with open(os.path.join(path, "c", "3", "3"), "wb") as f:
        f.write(b"truncated")  # one corrupt chunk: reading it fails mid-graph
    before = stores_on_disk(small_budget)
    with pytest.raises(Exception) as raised:
        (x + x).block_until_ready()  # eager ops are lazy: the error comes where it is read
    assert any("jask.add" in note for note in getattr(raised.value, "__notes__", [])), raised
    with pytest.raises(Exception):
        target.update_(x)
    with pytest.raises(Exception):
        jax.jit(lambda t, x: t.update_(x))(target, x)
    jask.collect()
    assert stores_on_disk(small_budget) == before
    np.testing.assert_array_equal(target.to_numpy(), np.full((64, 64), 7.0, np.float32))
    assert not [p for p in os.listdir(os.path.dirname(target.filename))
                if ".jask-" in p and p != ".jask-session"]  # (the session's own marker)
