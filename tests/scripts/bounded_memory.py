"""Run every op on arrays far larger than the budget; print peak RSS as JSON.

Run by tests/test_memory_bound.py (and the benchmark's chunking grid) in a
fresh process: ``python bounded_memory.py DATA_DIR BUDGET [CELL ...]``.
Each CELL is a folder of DATA_DIR holding the inputs ``a.zarr``, ``b.zarr``,
``X.zarr`` and ``y.zarr`` (chunked as that cell of the grid says), written by
the parent process, so this process never held them; without CELLs,
DATA_DIR itself is the one cell. With ``JASK_GRID_URL`` set (an ``s3://`` URL:
``url_grid.py`` uploads the cells there), the inputs are opened from
``URL/<cell>/<name>.zarr`` instead, read through jask.store.kinds.objects.remote.
The baseline is this process after
importing jask and warming up on tiny arrays (the XLA compiler, Dask's and
Zarr's thread pools: fixed costs, not tiles).

For every op it records the peak RSS above the baseline, the plan's
modelled bytes (per task x tasks at once, the largest of the op's graphs)
and the time; an op the planner refuses up front records the refusal
(``BudgetError``), after checking that nothing was written.
"""
import atexit
import ctypes
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from url_grid import source, upload

import jask
import jask.engine.execute
from jask.base.rss import current_rss, peak_rss, reset_peak_rss

#: Where to_zarr writes (outside jask's scratch: a saved array is the user's).
SAVED = tempfile.mkdtemp(prefix="jask-rss-saved-")
atexit.register(shutil.rmtree, SAVED, True)
_modelled = []


def _recording(run):
    """jask.engine.execute.run, also noting each plan's modelled bytes."""
    def wrapped(graph, keys, workers, cost=None, *args, **kwargs):
        if cost is not None:
            _modelled.append((cost.total, cost.task_bytes, cost.tasks_at_once, cost.tile))
        return run(graph, keys, workers, cost, *args, **kwargs)
    return wrapped


def ops(a, b, v, X, y, w):
    """Every op on a, b (and a @ v)."""
    return {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "mul by scalar": lambda: 0.5 * a,
        "square": lambda: jask.square(a),
        "transpose": lambda: jask.transpose(a),
        "sum": lambda: jask.sum(a),
        "dot": lambda: a @ v,
        "matmul": lambda: a @ b,  # compressed operands decoded once, first (on request)
        # before update_ and the steps: what XLA's programs and the Adam step leave in the
        # heap (2-5 MB) would count against whatever op is measured after them
        "sort": lambda: jask.sort(a, axis=0),  # whole columns per task
        "cumprod": lambda: jask.cumprod(a, axis=1),  # a two-pass scan
        "pad": lambda: jask.pad(a, ((3, 5), (0, 7)), mode="reflect"),  # one gather
        "isin": lambda: jask.isin(a, np.linspace(-1.0, 1.0, 64, dtype=np.float32)),
        # gathers (jask.engine.ops.gathers): by local runs, and by rows in a random order
        "flip": lambda: jask.flip(a),
        "take": lambda: jask.take(a, ROWS[:a.shape[0]] % a.shape[0], axis=0),
        "update_": lambda: b.update_(a),
        # last: zarr's codec threads keep their malloc arenas after a compressed write
        "to_zarr (zstd)": lambda: a.to_zarr(os.path.join(SAVED, "a.zarr"), compressor="zstd",
                                            overwrite=True),
    }


#: Ops run only when JASK_GRID_OPS names them (a product of two 4096^2
#: stores takes seconds per cell: python -m benchmarks.compressed measures it),
#: except in the cells (folders) named here: matmul by default on the cell
#: whose chunks cross its tiles (raw reads through row buffers).
ON_REQUEST = {"matmul"}
BY_DEFAULT_IN = {"matmul": {"mixed grids"}}
#: Ops not run on inputs at URLs: jask refuses update_ on a plain Zarr store in
#: object storage (no atomic replace: ObjectPrefix.check_in_place in
#: jask.store.kinds.objects.location).
NOT_AT_URLS = {"update_"}


def view_ops(a, b, X) -> dict:
    """Views (jask.store.views): read through, never copied; the Gram matrix reads X
    once; then the adam step. Measured in a process of their own
    (``JASK_GRID_PHASE=views``): after every op above, what the heap keeps (2-7 MB,
    growing op by op) would count against them, and they against the ops after them
    (the adam step rose past the budget in 7 cells)."""
    return {
        # starts inside chunks (315:3892, 102: on the grid)
        "slice": lambda: a[a.shape[0] // 13:a.shape[0] - a.shape[0] // 20, a.shape[1] // 40:],
        "transpose + add": lambda: a.T + b,
        "slice sum": lambda: jask.sum(a[5:, 3:], axis=0),
        "gram": lambda: X.T @ X,
        # last here, not after the other ops: the jit(grad) step's compiled program and
        # the heap they keep (7-10 MB by then) counted against it (15.5-17.5 MB on sharded)
        "adam step": _adam_step(a, b),
    }


def step_ops(X, y, w) -> dict:
    """One jitted training step on X, y, w (its w a small store), one band group
    over X. Measured in a process of its own (``JASK_GRID_PHASE=step``): after the ops
    above, the caches their first calls leave (4-5 MB, not growing op after op) and the
    step's compiled program (about 3 MB) took it to 13.2-15.5 MB on sharded chunks."""
    loss = lambda w: jask.sum(jask.square(X @ w - y))
    step = jax.jit(lambda w, lr: w.update_(w - jax.grad(loss)(w) * lr))
    return {"jit(grad) step": lambda: step(w, 1e-6), "minibatch epoch": lambda: _epoch(X, y)}


def second_order_ops(X, y) -> dict:
    """Forward over reverse and batches of a least-squares loss with in-memory
    parameters, each one band group over X (issue 28): a Hessian-vector
    product, the whole Hessian (a weighted Gram product X.T @ (c * X): its bands
    carry c * X beside X and a 128 x 128 float64 partial) and the loss of 16
    parameter vectors. Measured in a process of
    its own (``JASK_GRID_PHASE=second``), as the step is, one op a process
    (``JASK_GRID_OPS``): a compiled Hessian's program and JAX's caches of it
    stay after it returns, not tiles of the next op. Warmed up on tiny arrays
    like every op, so their first compile of each kind is the process's."""
    d = X.shape[1]
    loss = lambda w: jask.sum(jask.square(X @ w[:, None] - y))
    w, v = jnp.full(d, 0.01, jnp.float32), jnp.ones(d, jnp.float32)
    W = jnp.full((16, d), 0.01, jnp.float32)
    hvp = jax.jit(lambda w, v: jax.jvp(jax.grad(loss), (w,), (v,))[1])
    hessian = jax.jit(jax.hessian(loss))
    batched = jax.jit(jax.vmap(loss))
    return {"hvp": lambda: hvp(w, v), "hessian": lambda: hessian(w),
            "vmap loss": lambda: batched(W)}


def _epoch(X, y) -> float:
    """A shuffled epoch of jask.batches over X and y: its two windows, the
    batches ahead and the chunks being read. Its shuffle buffer is one chunk,
    or a sixteenth of the budget where a chunk is over an eighth; where a whole
    chunk does not fit with what decoding one holds (zstd at an eighth), the
    default buffer, which halves until the loader fits, as a user's would."""
    row = X.shape[1] * X.dtype.itemsize
    budget = jask.get_config().max_memory
    whole = X.chunks[0] * row <= budget // 8
    try:
        loader = jask.batches(X, y, batch_size=128, seed=0,
                              buffer=X.chunks[0] if whole else max(1, budget // 16 // row))
    except jask.BudgetError:
        loader = jask.batches(X, y, batch_size=128, seed=0)
    _modelled.append((loader.held_bytes, loader.held_bytes, 1, (loader.plan.unit,)))
    total = 0.0
    for xb, yb in loader:
        total += float(xb.flat[0]) + float(yb.flat[0])
    return total


def lazy_ops(a, b) -> dict:
    """Eager chains (eager ops are lazy, jask.engine.lazy), each one band group: to
    memory (the standardise-then-reduce of issue 19) and to a store. Measured in a
    process of their own (``JASK_GRID_PHASE=lazy``): a group leaves 3-5 MB in the heap
    (glibc arenas of its band tasks) that would count against the ops measured after."""
    return {"lazy chain": lambda: jask.sum(jask.square((a - a.mean(0)) / a.std(0)) * b),
            "lazy chain to store": lambda: jask.square(a - b) * 0.5 + a}


#: A random order of rows for take (every output tile reads from many chunks).
ROWS = np.random.default_rng(0).permutation(4096).astype(np.int32)


def _adam_step(a, b):
    """One jitted jask.optim.adam step (jask.optim.step: update and apply in
    one pass) on a parameter twice a's size (>= 8x the budget), its moments
    on disk. Built from copies in jask's own chunks: concatenating the
    inputs as given would read whole chunks of every layout of the grid."""
    a, b = a * 1.0, b * 1.0
    p, g = jask.concatenate([a, b]), jask.concatenate([b, a])
    adam = jask.optim.adam(1e-3)
    state = adam.init(p)
    step = jax.jit(lambda p, s, g: jask.optim.step(adam, g, s, p)[0])
    return lambda: step(p, state, g)


#: Ops measured on their second call: the first compiles them for these
#: shapes, and the compiled program stays in JAX's cache (fixed memory, not
#: tiles; the warm-up compiled them only for tiny shapes).
#: The order statistics run jax.numpy on their small per-lane values (counts,
#: ranks, weights) and XLA's interpolation on tiles (jask.map).
COMPILED = {"jit(grad) step", "adam step", "hvp", "hessian", "vmap loss", "quantile",
            "nanmedian"}


def _release() -> None:
    """Return freed heap pages to the system, so that each op's peak is its
    own and not what glibc kept from the op before (it keeps up to 32 MB
    per arena once large blocks have been freed)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _scratch_files(config) -> int:
    return len(glob.glob(os.path.join(config.scratch_dir, "*", "*")))


def order_ops(a) -> dict:
    """Order statistics, a sort then a gather (quantile) or per-lane picks
    (nanquantile), each in a process of its own (``JASK_GRID_OPS``): the
    programs XLA compiles for their lanes stay in the process (5-10 MB), and
    counted against the gathers measured after them (flip 9.3 MB on its own,
    16.9 MB after quantile, pad and isin; see the notes in
    tests/test_memory_bound.py)."""
    return {"quantile": lambda: jask.quantile(a, np.array([0.1, 0.5]), axis=0),
            "nanmedian": lambda: jask.nanmedian(a, axis=0)}


def run_cell(folder: str) -> dict:
    a = jask.open(source(folder, "a"))
    b = jask.open(source(folder, "b"))
    v = jask.from_numpy(np.ones((a.shape[1], 64), np.float32))
    X = jask.open(source(folder, "X"))
    y = jask.open(source(folder, "y"))
    w = jask.from_numpy(np.zeros((X.shape[1], 1), np.float32))
    results = {}
    only = os.environ.get("JASK_GRID_OPS")  # a comma-separated subset, to study one op
    phase = {"lazy": lambda: lazy_ops(a, b), "views": lambda: view_ops(a, b, X),
             "step": lambda: step_ops(X, y, w), "second": lambda: second_order_ops(X, y),
             "order": lambda: order_ops(a)}.get(
        os.environ.get("JASK_GRID_PHASE", ""), lambda: ops(a, b, v, X, y, w))()
    # inputs prepared (the adam step's parameter, gradient and moments are concatenated
    # copies, 2-3 MB left in the heap): the baseline of the ops is the process from here
    global baseline
    _release()
    baseline = max(baseline, current_rss())
    for name, op in phase.items():
        if only and name not in only.split(",") or not only and name in ON_REQUEST and (
                os.path.basename(os.path.normpath(folder)) not in BY_DEFAULT_IN.get(name, ())) or (
                os.environ.get("JASK_GRID_URL") and name in NOT_AT_URLS):
            continue
        before = _scratch_files(jask.get_config())
        try:
            if name in COMPILED:  # compile first: XLA's memory is no tile's
                jax.block_until_ready(op())
                jask.collect()
            del _modelled[:]
            _release()
            reset_peak_rss()
            start = time.perf_counter()
            result = op()
            jax.block_until_ready(result)  # a DiskArray too: an eager op's store is lazy
        except jask.BudgetError as err:
            assert _scratch_files(jask.get_config()) == before, "a refused op wrote a store"
            results[name] = {"refused": str(err)}
            continue
        except Exception as err:  # under jit the BudgetError arrives wrapped
            if "BudgetError" not in repr(err) and "memory budget" not in str(err):
                raise
            results[name] = {"refused": str(err).splitlines()[0]}
            continue
        seconds = time.perf_counter() - start
        peak = peak_rss() - baseline
        del result
        jask.collect()
        _release()
        top = max(_modelled, default=(0, 0, 0, ()))
        results[name] = {"peak": peak, "seconds": seconds, "modelled": top[0],
                         "task_bytes": top[1], "tasks_at_once": top[2], "tile": list(top[3]),
                         "graphs": len(_modelled), "kept": current_rss() - baseline}
    return results


def _tiny_stores(folder: str) -> list:
    """Tiny compressed, sharded and v2 stores: reading them starts Zarr's
    codec threads, a fixed cost of the process like Dask's pool."""
    import zarr
    kinds = {"zstd": {}, "sharded": {"shards": (8, 8)}, "v2": {"zarr_format": 2, "order": "F"}}
    stores = []
    for name, extra in kinds.items():
        path = os.path.join(folder, f"warm-{name}.zarr")
        z = zarr.create_array(store=path, shape=(16, 16), chunks=(4, 4), dtype="float32",
                              overwrite=True, **extra)
        z[:] = 1.0
        stores.append(jask.open(path))
    if os.environ.get("JASK_GRID_URL"):  # and at the URL: obstore's client and runtime
        z = zarr.create_array(store=os.path.join(folder, "warm-raw.zarr"), shape=(16, 16),
                              chunks=(4, 4), dtype="float32", compressors=None, overwrite=True)
        z[:] = 1.0
        url = os.environ["JASK_GRID_URL"].rstrip("/") + "/warm"
        upload(folder, url, {f"warm-{name}.zarr" for name in [*kinds, "raw"]})
        stores += [jask.open(f"{url}/warm-{name}.zarr") for name in [*kinds, "raw"]]
    return stores


def warm_up(folder: str, width: int) -> int:
    """Run every op on tiny arrays, and the lazy chains on a few rows of the cells'
    ``width``: their means and deviations are in-memory values of that width, and each
    new shape compiles XLA programs that JAX keeps (about 3.5 MB each, measured), a
    fixed cost of the process as in a notebook, not tiles."""
    for x in _tiny_stores(folder):
        if x.filename.startswith(os.sep):
            x.update_(x + x)
        else:  # (refused at a URL: NOT_AT_URLS)
            jax.block_until_ready(jask.sum(x + x))
        jask.collect()
    tiny = jask.from_numpy(np.ones((8, 8), np.float32))
    tX = jask.from_numpy(np.ones((16, 8), np.float32))
    ty = jask.from_numpy(np.ones((16, 1), np.float32))
    tw = jask.from_numpy(np.ones((8, 1), np.float32))
    tv = jask.from_numpy(np.ones((8, 4), np.float32))
    for name, op in {**ops(tiny, tiny + 1.0, tv, tX, ty, tw), **view_ops(tiny, tiny, tX),
                     **lazy_ops(tiny, tiny), **step_ops(tX, ty, tw),
                     **second_order_ops(tX, ty)}.items():
        result = jax.block_until_ready(op())
        del result
    rows = jask.from_numpy(np.ones((8, width), np.float32))
    # the order statistics' per-lane values (one per column) have the same width
    for op in {**lazy_ops(rows, rows + 1.0), **order_ops(rows)}.values():
        result = jax.block_until_ready(op())
        del result
    del rows
    jask.collect()
    _release()
    return current_rss()


def _warm_requests(x) -> int:
    """Sum one band of chunk rows of an input at a URL: requests of its real sizes
    leave HTTP buffers in obstore's connection pool, a fixed cost of a process that
    reads object storage (measured: 1.6 MB after its first op, then 2.0-2.3 MB op
    after op, not growing), as the XLA programs of the warm-up are."""
    jax.block_until_ready(jask.sum(x[:x.chunks[0]]))
    jask.collect()
    _release()
    return current_rss()


def main(data_dir: str, budget: str, cells) -> None:
    global baseline
    jask.set_memory_budget(budget, scratch_dir=os.path.join(data_dir, "scratch"),
                           lazy=os.environ.get("JASK_GRID_PHASE") == "lazy")
    jask.engine.execute.run = _recording(jask.engine.execute.run)
    first = source(os.path.join(data_dir, cells[0] if cells else ""), "a")
    baseline = warm_up(os.path.join(data_dir, "scratch"), jask.open(first).shape[1])
    if os.environ.get("JASK_GRID_URL"):
        baseline = _warm_requests(jask.open(first))
    report = {name or ".": run_cell(os.path.join(data_dir, name)) for name in cells or [""]}
    print(json.dumps({"baseline": baseline, "budget": jask.get_config().max_memory,
                      "cells": report}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
