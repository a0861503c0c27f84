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
    if kind == "descending":
        return (N * K - 1) - np.arange(N) * K
    raise ValueError(kind)


@pytest.fixture
def small_budget(tmp_path):
    before = jask.get_config()
    jask.set_memory_budget("512KB", scratch_dir=str(tmp_path))
    yield
    jask.set_memory_budget(before.max_memory, scratch_dir=before.scratch_dir)


@pytest.mark.parametrize("kind", ["row-slots", "scattered", "negative", "descending"])
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


def test_an_index_out_of_range_raises_as_numpy(small_budget):
    a = np.zeros((N, K), np.float32)
    idx = np.arange(N) * K
    idx[-1] = N * K  # one past the end, in the last band
    with pytest.raises(IndexError):
        jask.take(jask.from_numpy(a), jask.from_numpy(idx))
