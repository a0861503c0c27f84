"""Reductions over an axis are as accurate as jax.numpy's, whatever the
chunks, the budget or the mode (issue 25: never a silent wrong value).

Every case of ``accuracy_table`` runs through three chunkings of a real Zarr
store, two budgets, eagerly and under ``jax.jit``; its error against a
float64 numpy reference must be at most jax.numpy's on the same data plus
:data:`accuracy_table.FLOOR_ULPS`, and its runs must agree with each other.
A float32 running sum failed both: a column of 0.1 summed over 25,000 rows
was hundreds of ulps off, and the error moved with the tiles.
"""
from __future__ import annotations

import os

import accuracy_table as table
import numpy as np
import pytest

#: Products (X.T @ X, X.T @ r) keep BLAS's float32 sums within strips of
#: ``jask.engine.tasks.STRIP`` rows, as jax.numpy does over all rows: when a
#: tile cuts a strip the two pieces round differently (docs/promises.rst).
SPREAD_ULPS = {"gram": 4.0, "normal": 4.0}


def _id(row, dtype, size, data) -> str:
    return f"{row.name}-{np.dtype(dtype).name}-{size:.0e}-{data}".replace("+0", "")


_HUGE = pytest.mark.skipif(os.environ.get("JASK_ACCURACY_HUGE") != "1",
                           reason="10^8 elements a case, 70 minutes in all "
                                  "(set JASK_ACCURACY_HUGE=1)")

CASES = ([pytest.param(*case, id=_id(*case)) for case in table.cases(table.SIZES)]
         + [pytest.param(*case, id=_id(*case), marks=pytest.mark.slow)
            for case in table.cases(table.SLOW_SIZES)]
         + [pytest.param(*case, id=_id(*case), marks=[pytest.mark.slow, _HUGE])
            for case in table.cases(table.HUGE_SIZES)])

_measured: dict = {}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One folder of input stores for the module (each made once)."""
    return str(tmp_path_factory.mktemp("accuracy"))


def _measure(case, stores: str, scratch: str) -> table.Measured:
    """The case measured once per module: both tests read the same runs."""
    if case not in _measured:
        _measured[case] = table.measure(*case, stores, scratch)
    return _measured[case]


@pytest.mark.parametrize("row, dtype, size, data", CASES)
def test_error_is_at_most_jax_numpys(row, dtype, size, data, stores, jask_scratch):
    m = _measure((row, dtype, size, data), stores, jask_scratch.path)
    # a wrong infinity or NaN is never allowed, even where jax.numpy gives one
    allowed = min(m.jnp + table.FLOOR_ULPS, np.finfo(np.float64).max)
    worse = {run: err for run, err in m.jask.items() if not err <= allowed}
    assert not worse, (f"{row.name} of {size} {m.dtype} elements ({data}): jax.numpy is "
                       f"{m.jnp:.2f} ulps off, jask (chunk rows, budget, mode) {worse}")


@pytest.mark.parametrize("row, dtype, size, data", CASES)
def test_value_does_not_depend_on_chunks_budget_or_mode(row, dtype, size, data, stores,
                                                        jask_scratch):
    m = _measure((row, dtype, size, data), stores, jask_scratch.path)
    assert m.spread <= SPREAD_ULPS.get(row.name, 1.0), (
        f"{row.name} of {size} {m.dtype} elements ({data}): runs {sorted(m.jask)} differ "
        f"by {m.spread:.1f} ulps")


def test_a_worker_process_knows_a_mean_or_variance_by_its_name_alone():
    """A graph carries a reducer's name; a Dask worker in another process
    never called ``mean_of`` (a LocalCluster's mean raised KeyError)."""
    import subprocess
    import sys
    code = ("from jask.engine.ops.reductions import REDUCERS as R; "
            "print(R['mean(count=20000)'].mean_count, R['var(ddof=1)'].ddof)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["20000", "1"]
