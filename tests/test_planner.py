"""The tile planner on the stores users bring: any shape, dtype, chunking
(tiny to larger than the budget, ragged, different per operand),
compressor, shards and budget. It answers within a second with a plan whose
modelled cost fits and whose task count respects the bound, or refuses with
a BudgetError naming what does not fit. The stores are real Zarr arrays
(metadata only: the planner never reads data)."""
import itertools
import math
import os
import time

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import user_spec
from jask.base import memory
from jask.engine.ops import products
from jask.engine.plan import ops, plan_blockwise
from jask.store.spec import StoreSpec

_counter = itertools.count()


def _store(folder, shape, chunks, dtype, codec):
    path = os.path.join(folder, f"s{next(_counter)}.zarr")
    extra = {"compressors": None}
    if codec == "zstd":
        extra = {"compressors": zarr.codecs.ZstdCodec()}
    elif codec == "blosc":
        extra = {"compressors": zarr.codecs.BloscCodec()}
    elif codec == "sharded":
        extra = {"shards": tuple(2 * c for c in chunks)}
    elif codec == "v2":
        extra = {"zarr_format": 2, "order": "F"}
    zarr.create_array(store=path, shape=shape, chunks=chunks, dtype=dtype, **extra)
    return user_spec(path)


@st.composite
def cases(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 20000 if ndim < 3 else 600)) for _ in range(ndim))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    n_ops = draw(st.integers(1, 3))
    chunkings = [tuple(draw(st.integers(1, max(1, 2 * n))) for n in shape) for _ in range(n_ops)]
    codecs = [draw(st.sampled_from(["none", "zstd", "blosc", "sharded", "v2"]))
              for _ in range(n_ops)]
    budget = draw(st.sampled_from([64_000, 10**6, 16 * 10**6, 256 * 10**6]))
    workers = draw(st.integers(1, 4))
    return shape, dtype, chunkings, codecs, budget, workers


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_planner_fits_or_refuses_fast(tmp_path, case):
    shape, dtype, chunkings, codecs, budget, workers = case
    stores = [_store(str(tmp_path), shape, c, dtype, k) for c, k in zip(chunkings, codecs)]
    axes = tuple(range(len(shape)))
    for op, operands in [("add", [(s, axes) for s in stores]), ("square", [(stores[0], axes)])]:
        start = time.process_time()
        try:
            tile, cost = plan_blockwise(op, shape, dtype, operands, budget=budget,
                                        workers=workers)
        except memory.BudgetError as err:
            assert time.process_time() - start < 1.0
            assert f"budget of {budget} bytes" in str(err)
            continue
        assert time.process_time() - start < 1.0
        assert cost.total <= budget
        assert 1 <= cost.tasks_at_once <= workers
        tasks = math.prod(-(-n // t) for n, t in zip(shape, tile))
        data = math.prod(shape) * np.dtype(dtype).itemsize
        assert tasks == cost.tasks <= memory.task_bound(data, budget)
        tile_bytes = math.prod(tile) * np.dtype(dtype).itemsize
        assert tile_bytes >= min(memory.min_tile_bytes(budget), data)
    _check_transpose_copy_and_dot(stores, shape, dtype, budget, workers)


def _timed(plan, budget):
    """Run a planner: within a second of CPU, a plan that fits, or a BudgetError.

    CPU time of this process, not the clock: a runaway plan burns CPU, while
    other processes on the machine (pytest-xdist's other worker) do not count.
    """
    start = time.process_time()
    try:
        result = plan()
    except memory.BudgetError as err:
        assert "budget of" in str(err)
        result = None
    assert time.process_time() - start < 1.0
    return result


def _check_transpose_copy_and_dot(stores, shape, dtype, budget, workers):
    first, last = stores[0], stores[-1]
    axes = tuple(reversed(range(len(shape))))
    data = math.prod(shape) * np.dtype(dtype).itemsize
    for plan in (lambda: ops.transpose_chunks(first, axes, budget, workers),
                 lambda: ops.copy_chunks(last, first, budget, workers)):
        result = _timed(plan, budget)
        if result is not None:
            tile, cost = result
            assert cost.total <= budget and cost.tasks <= memory.task_bound(data, budget)
    if len(shape) == 2:  # first @ first.T: (m, k) x (k, m)
        result = _timed(lambda: products.dot_tiles(first, first, False, True, dtype, budget,
                                                   workers), budget)
        if result is not None:
            chunks, tk, splits, cost = result
            assert cost.total <= budget and 1 <= cost.tasks_at_once <= workers
            tasks = cost.tasks // splits * math.ceil(shape[1] / tk)
            out = shape[0] ** 2 * np.dtype(dtype).itemsize  # (the result counts too)
            assert (tasks <= memory.task_bound(2 * data + out, budget)
                    or tuple(chunks) == (shape[0],) * 2)


def test_the_runaway_of_issue_8_is_gone():
    """8192^2 float32 with 1024^2 chunks, budget 32 MB: once 16.7 M tasks of
    2x2 elements; now a few hundred tasks of whole chunk rows."""
    a = StoreSpec("", (8192, 8192), np.dtype("float32"), (1024, 1024))
    start = time.process_time()
    tile, cost = plan_blockwise("add", a.shape, a.dtype, [(a, (0, 1))] * 2,
                                budget=32 * 10**6, workers=2)
    assert time.process_time() - start < 1.0
    assert cost.tasks < 1000 and math.prod(tile) * 4 >= 2**20
    assert cost.total <= 32 * 10**6


def test_refusal_names_the_store_its_chunks_and_what_would_work(tmp_path):
    x = _store(str(tmp_path), (4096, 4096), (4096, 4096), "float32", "zstd")
    with pytest.raises(memory.BudgetError) as err:
        plan_blockwise("add", x.shape, "float32", [(x, (0, 1))] * 2, budget=16 * 10**6,
                       workers=2)
    text = str(err.value)
    assert x.path in text and "(4096, 4096)" in text and "zstd" in text
    assert "budget of 16000000 bytes" in text and "Rechunk it to chunks of at most" in text


def test_update_into_a_sharded_store_writes_whole_shards(tmp_path):
    target = _store(str(tmp_path), (1000, 900), (100, 90), "float32", "sharded")
    source = StoreSpec("", (1000, 900), np.dtype("float32"), (128, 128))
    tile, cost = ops.copy_chunks(target, source, 10**8, 2)
    shards = zarr.open_array(target.path).shards
    assert all(t % s == 0 or t == n for t, s, n in zip(tile, shards, target.shape))
