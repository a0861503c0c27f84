"""Manipulation and indexing beyond the op table's rows (tests/ops_table.py
has their values and dtypes): the gradients of the rows checked in one
mode only, indices traced under jit, and the refusals of what has no
out-of-core meaning (value-dependent shapes, writing through x[i] = v)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import stores_on_disk, tolerance


def _pieces(lib, x, v):
    """Every manipulation function once, each reduced with its own weights
    so that a wrong cotangent anywhere shows (``lib``: jask or jax.numpy)."""
    take_along = np.random.default_rng(1).integers(-13, 13, (31, 3), dtype=np.int32)
    return [  # (moveaxis, unstack and concat are transposes, slices and joins, tested)
        lib.roll(x, (3, -20), (0, 1)),
        lib.expand_dims(lib.broadcast_arrays(x[:, :1], v)[0], 0),
        lib.repeat(x, np.arange(13) % 3, axis=1),
        lib.tile(x, (2, 1, 2)),
        lib.diff(x, 2, 0, append=v[None]),
        lib.take_along_axis(x, take_along, axis=1),
    ]


def test_gradients_of_every_function_under_jit_grad(small_budget, rng):
    """One program, so one compile: jit(grad) as the training loops use it."""
    x = rng.standard_normal((31, 13)).astype(np.float32)
    v = rng.standard_normal(13).astype(np.float32)
    weights = [rng.standard_normal(np.shape(p)).astype(np.float32)
               for p in _pieces(np, x, v)]

    def loss(lib, x, v):
        total = 0.0
        for piece, w in zip(_pieces(lib, x, v), weights):
            total = total + lib.sum(lib.multiply(piece, w))
        return total

    X = jask.from_numpy(x)
    got = jax.jit(jax.grad(lambda X, v: loss(jask, X, v), argnums=(0, 1)))(X, jnp.asarray(v))
    want = jax.grad(lambda x, v: loss(jnp, x, v), argnums=(0, 1))(x, v)
    assert isinstance(got[0], jask.DiskArray) and not isinstance(got[1], jask.DiskArray)
    np.testing.assert_allclose(got[0].to_numpy(), want[0], **tolerance(np.float32))
    np.testing.assert_allclose(got[1], want[1], **tolerance(np.float32))


def test_take_with_traced_indices_compiles_once(small_budget, rng):
    """Random minibatches: one program serves every batch of indices."""
    x = rng.standard_normal((97, 5)).astype(np.float32)
    X = jask.from_numpy(x)
    traces = []

    @jax.jit
    def step(X, rows):
        traces.append(1)
        return jax.grad(lambda X: jask.sum(jask.square(X[rows])))(X)

    for seed in range(3):
        rows = np.random.default_rng(seed).integers(0, 97, 8).astype(np.int32)
        want = jax.grad(lambda x: jnp.sum(jnp.square(x[rows])))(x)
        np.testing.assert_allclose(step(X, rows).to_numpy(), want, rtol=1e-6)
    assert len(traces) == 1


def test_take_out_of_range_raises_or_fills_and_modes_as_jax_numpy(small_budget):
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    X = jask.from_numpy(x)
    index = np.array([-1, 4, -5, 0], np.int32)
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
        jask.take(X, index, axis=1)  # the default is numpy's (issue 43)
    for mode in ("fill", "clip", "wrap"):
        np.testing.assert_array_equal(jask.take(X, index, axis=1, mode=mode).to_numpy(),
                                      jnp.take(x, index, axis=1, mode=mode))
    ints = jask.from_numpy(x.astype(np.int32))
    np.testing.assert_array_equal(jask.take(ints, index, axis=1, mode="fill").to_numpy(),
                                  jnp.take(x.astype(np.int32), index, axis=1))


def test_nonzero_loads_a_small_array_and_refuses_a_large_one(small_budget, rng):
    x = np.where(rng.standard_normal((20, 7)) > 1, 1.0, 0.0).astype(np.float32)
    got = jask.nonzero(jask.from_numpy(x))
    for g, w in zip(got, np.nonzero(x)):
        np.testing.assert_array_equal(g, w)
    big = jask.from_numpy(np.ones((100, 50), np.float32))  # 20 kB: over 64 kB / 8
    with pytest.raises(MemoryError, match=r"nonzero.*\(100, 50\).*jask.where"):
        jask.nonzero(big)


def test_value_dependent_shapes_and_writes_are_refused_with_what_to_do(small_budget):
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    X = jask.from_numpy(x)
    before = stores_on_disk(small_budget)
    with pytest.raises(TypeError, match=r"x\.at\[index\]\.set\(value\)"):  # eager writes run
        jax.jit(lambda X: X.__setitem__(0, 1.0))(X)
    with pytest.raises(IndexError, match=r"depends on the mask.*jask.where"):
        jax.jit(lambda X, m: X[m])(X, x > 3)
    # a mask or indices on disk, within the in-memory share, run outside jit
    # (over it: tests/test_array_api_ecosystem.py)
    np.testing.assert_array_equal(X[X > 3].to_numpy(), x[x > 3])
    with pytest.raises(ValueError, match=r"repeats must be .* known outside jit"):
        jax.jit(lambda X, r: jask.repeat(X, r, axis=0))(X, np.array([1, 2, 1]))
    np.testing.assert_array_equal(
        jask.take(X, jask.from_numpy(np.array([0, 5], np.int32))), np.take(x, [0, 5]))
    with pytest.raises(ValueError, match=r"squeeze axis 1 .*\(3, 4\)"):
        jask.squeeze(X, axis=1)
    with pytest.raises(ValueError, match=r"broadcast .*\(3, 4\) to shape \(4, 4\)"):
        jask.broadcast_to(X, (4, 4))
    np.testing.assert_array_equal(X.to_numpy(), x)
    assert stores_on_disk(small_budget) == before


def test_an_integer_index_keeps_small_results_in_memory_as_reductions_do(small_budget):
    """1/8 of the budget (8 kB at 64 kB), decided from shapes: X[i] of a
    narrow array is a jax.Array, of a wide one a DiskArray; X[i, j] is 0-d."""
    x = np.arange(3 * 4000, dtype=np.float32).reshape(3, 4000)  # a row: 16 kB
    X = jask.from_numpy(x)
    assert isinstance(X[1], jask.DiskArray) and not isinstance(X[:, 5], jask.DiskArray)
    np.testing.assert_array_equal(X[1].to_numpy(), x[1])
    np.testing.assert_array_equal(X[:, -5], x[:, -5])
    assert X[2, 7].shape == () and float(X[2, 7]) == x[2, 7]
    assert jax.jit(lambda X: X[2, 7] + X[:, 5].sum())(X) == x[2, 7] + x[:, 5].sum()


BROADCASTS = [  # (input shape, target shape, dtype, a DiskArray?) at 64 kB: the share is 8 kB
    ((1,), (30006,), np.int32, True),  # array-api-extra's searchsorted: a count to x2's shape
    ((), (100, 100), np.float32, True),  # a 0-d value, 40 kB
    ((3, 1), (3, 4000), np.float64, True),
    ((5000,), (3, 5000), np.float32, True),  # the input itself over the share: written first
    ((1, 5), (4, 5), np.bool_, False),
    ((), (), np.float32, False),
    ((2, 1), (0, 2, 7), np.float32, False),
    ((1,), (2000,), np.float32, False),  # exactly the share (64,000 bytes / 8)
    ((1,), (2001,), np.float32, True),
]


@pytest.mark.parametrize("start, shape, dtype, on_disk", BROADCASTS)
def test_broadcast_to_of_an_in_memory_array_goes_to_disk_over_the_in_memory_share(
        small_budget, start, shape, dtype, on_disk):
    """Decided from the result's shape and dtype: within the share jax.numpy's
    answer, over it a DiskArray, in jask and in its namespace, values as numpy's."""
    import jask.array_api as xp
    x = (np.arange(math.prod(start)) % 7).reshape(start).astype(dtype)
    want = np.broadcast_to(np.asarray(jnp.asarray(x)), shape)  # in JAX's dtype, as jax.numpy's
    for got in (jask.broadcast_to(x, shape), xp.broadcast_to(jnp.asarray(x), shape),
                jax.jit(lambda v: jask.broadcast_to(v, shape))(x)):
        assert isinstance(got, jask.DiskArray) == on_disk
        np.testing.assert_array_equal(got.to_numpy() if on_disk else np.asarray(got), want)
        assert got.dtype == want.dtype
    if on_disk:  # cut per tile by the op reading it: in one band group (1-D here) never
        X = jask.from_numpy(np.ones(shape, dtype))  # written, else written tile by tile
        jask.reset_stats()
        total = jask.sum(X + jask.broadcast_to(x, shape))
        written = sum(c.bytes_written for k, c in jask.stats().by_store.items()
                      if k.rsplit("/", 1)[-1].startswith("broadcast_to-"))
        assert written == 0 if len(shape) == 1 else written <= want.nbytes
        np.testing.assert_allclose(np.asarray(total), (want + 1).sum(dtype=np.float64),
                                   rtol=1e-6)
    if start:  # fewer axes than the input: refused as numpy refuses it
        with pytest.raises(ValueError, match="broadcast"):
            jask.broadcast_to(x, start[1:])
