"""Run every op on arrays far larger than the budget; print peak RSS as JSON.

Run by tests/test_memory_bound.py in a fresh process:
``python bounded_memory.py DATA_DIR BUDGET``. The inputs in DATA_DIR were
written by the parent process, so this process never held them. The
baseline is this process after importing jask and warming up on tiny arrays
(the XLA compiler, Dask's and Zarr's thread pools: fixed costs, not tiles).
"""
import atexit
import json
import os
import shutil
import sys
import tempfile

import jax
import numpy as np

import jask
from jask.rss import current_rss, peak_rss, reset_peak_rss

#: Where to_zarr writes (outside jask's scratch: a saved array is the user's).
SAVED = tempfile.mkdtemp(prefix="jask-rss-saved-")
atexit.register(shutil.rmtree, SAVED, True)


def ops(a, b, v, X, y, w):
    """Every op on a, b (and a @ v), and one jitted training step on X, y, w."""
    loss = lambda w: jask.sum(jask.square(X @ w - y))
    step = jax.jit(lambda w, lr: w.update_(w - jax.grad(loss)(w) * lr))
    return {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "mul by scalar": lambda: 0.5 * a,
        "square": lambda: jask.square(a),
        "transpose": lambda: jask.transpose(a),
        "sum": lambda: jask.sum(a),
        "dot": lambda: a @ v,
        "update_": lambda: b.update_(a),
        "jit(grad) step": lambda: step(w, 1e-6),
        # last: zarr's codec threads keep their malloc arenas after a compressed write
        "to_zarr (zstd)": lambda: a.to_zarr(os.path.join(SAVED, "a.zarr"), compressor="zstd",
                                            overwrite=True),
    }


def main(data_dir: str, budget: str) -> None:
    jask.set_memory_budget(budget, scratch_dir=os.path.join(data_dir, "scratch"))
    tiny = jask.from_numpy(np.ones((8, 8), np.float32))
    tX = jask.from_numpy(np.ones((16, 8), np.float32))
    ty = jask.from_numpy(np.ones((16, 1), np.float32))
    tw = jask.from_numpy(np.ones((8, 1), np.float32))
    tv = jask.from_numpy(np.ones((8, 4), np.float32))
    for name, op in ops(tiny, tiny + 1.0, tv, tX, ty, tw).items():
        result = op()
        del result
    jask.collect()
    baseline = current_rss()

    a = jask.open(os.path.join(data_dir, "a.zarr"))
    b = jask.open(os.path.join(data_dir, "b.zarr"))
    v = jask.from_numpy(np.ones((a.shape[1], 64), np.float32))
    X = jask.open(os.path.join(data_dir, "X.zarr"))
    y = jask.open(os.path.join(data_dir, "y.zarr"))
    w = jask.from_numpy(np.zeros((X.shape[1], 1), np.float32))
    peaks = {}
    for name, op in ops(a, b, v, X, y, w).items():
        reset_peak_rss()
        result = op()
        if not isinstance(result, jask.DiskArray):
            jax.block_until_ready(result)
        peaks[name] = peak_rss() - baseline
        del result
        jask.collect()
    print(json.dumps({"baseline": baseline, "budget": jask.get_config().max_memory,
                      "peaks": peaks}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
