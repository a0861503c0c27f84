"""``take(x, indices)`` (flattened ``x``) at indices on disk too large for memory
(issue 46, scikit-learn's ``take(ravel(raw), y + arange(n) * k)``): the indices
read in bands, each taken from the span of ``x`` it points into. Values
against numpy's; indices that move along ``x`` read it about once."""
from __future__ import annotations

import numpy as np
import pytest

import jask

N, K = 30000, 3  # indices of 240 KB (int64), over a 512 KB budget's in-memory share


def _indices(kind: str, rng) -> np.ndarray:
    if kind == "row-slots":  # y + arange(n) * k
        return rng.integers(0, K, N) + np.arange(N) * K
    if kind == "scattered":
        return rng.integers(0, N * K, N)
    if kind == "negative":
        return -1 - rng.integers(0, N * K, N)
    if kind == "every-2nd":  # a strided slice's positions, none next to another
        return np.arange(N) * 2
    if kind == "descending":
        return (N * K - 1) - np.arange(N) * K
    raise ValueError(kind)


@pytest.fixture
def small_budget(tmp_path):
    before = jask.get_config()
    jask.set_memory_budget("512KB", scratch_dir=str(tmp_path))
    yield
    jask.set_memory_budget(before.max_memory, scratch_dir=before.scratch_dir)


@pytest.mark.parametrize("kind", ["row-slots", "scattered", "negative", "every-2nd",
                                  "descending"])
@pytest.mark.parametrize("shape", [(N, K), (N * K,)], ids=["2-d", "1-d"])
def test_take_at_indices_on_disk_has_numpys_values(small_budget, kind, shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    idx = _indices(kind, rng)
    x, di = jask.from_numpy(a), jask.from_numpy(idx)
    with jask.track() as t:
        got = jask.take(x, di)
    np.testing.assert_array_equal(np.asarray(got.to_numpy()), np.take(a, idx))
    if kind == "row-slots":
        assert t.passes(x) <= 1.1


@pytest.mark.parametrize("on_disk", [False, True], ids=["numpy indices", "disk indices"])
@pytest.mark.parametrize("kind", ["row-slots", "every-2nd", "descending"])
def test_positions_close_together_share_a_read(small_budget, kind, on_disk):
    """Taken from a computed array (plain chunk files, read span by span),
    positions a few apart are read a span at a time, not one read each, as
    scikit-learn's loss takes ``ravel(raw)[y + arange(n) * k]`` (its 4 MB
    LogisticRegression read 167,000 times per fit step, 15 s of 16)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal(N * K).astype(np.float32)
    idx = _indices(kind, rng)
    idx[0] = 0  # the first band's span starts at x's start: a plain view, read by spans
    x = jask.from_numpy(a) + np.float32(1)
    with jask.track() as t:
        got = jask.take(x, jask.from_numpy(idx) if on_disk else idx)
    np.testing.assert_array_equal(np.asarray(got.to_numpy()), np.take(a + np.float32(1), idx))
    assert t.tiles_read < N / 100, t.tiles_read  # one read per position: ~N / 8


@pytest.mark.parametrize("kind", ["row-slots", "every-2nd", "descending"])
def test_the_gradient_at_positions_close_together_is_jax_numpys(small_budget, kind):
    """The VJP (a scatter-add reading the cotangent span by span, repeats
    added up) against jax.grad of jax.numpy's take."""
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(2)
    a = rng.standard_normal(N * K).astype(np.float32)
    idx = np.concatenate([_indices(kind, rng), np.arange(0, N, 7)])  # some positions twice
    w = rng.standard_normal(idx.shape).astype(np.float32)
    W = jask.from_numpy(w)  # over the in-memory operands' share
    got = jax.grad(lambda X: jask.sum(jask.multiply(jask.take(X, idx), W)))(jask.from_numpy(a))
    want = jax.grad(lambda x: jnp.sum(jnp.take(x, idx) * w))(a)
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-6, atol=1e-6)


def test_an_index_out_of_range_raises_as_numpy(small_budget):
    a = np.zeros((N, K), np.float32)
    idx = np.arange(N) * K
    idx[-1] = N * K  # one past the end, in the last band
    with pytest.raises(IndexError):
        jask.take(jask.from_numpy(a), jask.from_numpy(idx))
