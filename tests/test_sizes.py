"""One budget shows the same everywhere: Dask's format (binary units) in
reprs, plans, I/O counts and progress; errors lead with the exact bytes."""
import io
import re

import numpy as np
import pytest
from dask.utils import format_bytes

import jask


@pytest.fixture
def budget(small_budget):
    return small_budget.max_memory


def test_the_budget_reads_the_same_in_repr_plan_and_errors(budget, rng):
    shown = format_bytes(budget)  # the reference: Dask's own formatting
    x = jask.from_numpy(rng.standard_normal((301, 97)).astype(np.float32))  # over the budget
    assert f"of a {shown} " in x._repr_html_()
    assert f"under a budget of {shown}," in str(jask.visualize(lambda a: a * 2.0, x))
    with pytest.raises(MemoryError) as err:
        np.asarray(x)
    assert f"over the memory budget of {budget} bytes ({shown})" in str(err.value)
    assert f"({x.nbytes} bytes ({format_bytes(x.nbytes)}))" in str(err.value)


def test_io_counts_and_progress_use_the_same_units(small_budget, rng):
    x = jask.from_numpy(rng.standard_normal((301, 97)).astype(np.float32))
    out = io.StringIO()
    with jask.track() as t, jask.progress_bars(min_tasks=1, file=out):
        jask.square(x).block_until_ready()
    size = format_bytes(x.nbytes)
    assert f"read {size} " in repr(t) and f"read {size}, wrote {size}" in out.getvalue()
    assert not re.search(r"\d (kB|MB|GB)\b", repr(t) + out.getvalue())  # no decimal units
