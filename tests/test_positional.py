"""Kernels that take their tile's position, and argmax/argmin built on them
(values against numpy and jax.numpy are in the op table, tests/ops_table.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from jask.api.elementwise import apply
from jask.core.ufuncs import Ufunc
from jask.engine.blockwise import positional


@positional
def _where_am_i(x, *, region, shape):
    """Each element's flat index in the full shape, from the tile's region."""
    rows = np.arange(region[0].start, region[0].stop)[:, None]
    cols = np.arange(region[1].start, region[1].stop)[None, :]
    return x * 0 + rows * shape[1] + cols


PLACE = Ufunc("where_am_i", _where_am_i, lambda a: a, (None,), public=False)


def test_a_positional_kernel_gets_its_tiles_place(small_budget):
    x = np.ones((97, 301), np.float32)  # 114 kB: tiles split rows and columns
    X = jask.from_numpy(x)
    want = np.arange(x.size, dtype=np.float32).reshape(x.shape)
    np.testing.assert_array_equal(apply(PLACE, X).to_numpy(), want)
    # compiled: the op joins a band group, whose bands are told their rows too
    got = jax.jit(lambda X: jask.sum(apply(PLACE, X) * X, axis=1))(X)
    np.testing.assert_allclose(got, want.sum(1), rtol=1e-6)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_flat_index_across_tiles_in_both_axes(name, small_budget, rng):
    """axis=None over tiles split in rows and columns: the flat index counts
    every earlier row of the whole array; a later tie or NaN does not win."""
    x = np.round(rng.standard_normal((53, 401))).astype(np.float32)  # many ties
    X = jask.from_numpy(x)
    f, ref = getattr(jask, name), getattr(jnp, name)
    assert int(f(X)) == int(ref(x))
    x[30, 350] = x[40, 10] = np.nan  # the NaN of the smaller flat index wins
    X = jask.from_numpy(x)
    assert int(f(X)) == int(ref(x)) == 30 * 401 + 350
    np.testing.assert_array_equal(f(X, axis=1), ref(x, axis=1))


def test_argmax_passes_no_gradient_as_in_jax(small_budget, rng):
    x = rng.standard_normal((97, 61)).astype(np.float32)
    X = jask.from_numpy(x)
    want = jax.grad(lambda x: jnp.sum(x * jnp.argmax(x, axis=0)))(x)
    for grad in (jax.grad, lambda f: jax.jit(jax.grad(f))):
        got = grad(lambda X: jask.sum(X * jask.argmax(X, axis=0)))(X)
        np.testing.assert_allclose(got.to_numpy(), want)
    zero = jax.grad(lambda X: jask.argmin(X).astype(jnp.float32))(X)
    assert not np.any(zero.to_numpy())


def test_argmax_refuses_what_jax_numpy_refuses(small_budget):
    X = jask.from_numpy(np.ones((4, 3), np.float32))
    with pytest.raises(TypeError, match="axis must be None or an int"):
        jask.argmax(X, axis=(0, 1))
    with pytest.raises(ValueError, match="out of range"):
        jask.argmin(X, axis=2)
    with pytest.raises(ValueError, match="empty"):
        jask.argmax(jask.from_numpy(np.ones((0, 3), np.float32)), axis=0)
