"""What a hostile user tried on issue #19's notebook features (lazy eager
ops, views, the Gram planner, one-pass var/std), on local stores, each
compared with numpy or jax.numpy."""
from __future__ import annotations

import numpy as np
import pytest
import zarr

import jask
from helpers import to_numpy, tolerance, user_store


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
