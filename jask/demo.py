"""Train a linear model on data several times larger than the memory budget.

Run it as ``python -m jask.demo`` (``--help`` for sizes and budget). It writes
a synthetic regression data set to Zarr chunk by chunk, then fits it with
``jax.grad`` and ``optax.sgd`` inside one ``jax.jit``-compiled step that
carries its weights with ``update_``, printing the loss per step, the time,
and the process's peak memory against the budget.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import jax
import numpy as np
import optax
import zarr

import jask
from jask import memory
from jask.rss import current_rss, peak_rss, reset_peak_rss


def write_dataset(folder: str, rows: int, features: int, chunk_bytes: int, seed: int = 0):
    """Write X (rows x features) and y = X @ w_true + noise, chunk by chunk.

    Returns the paths of X and y and the true weights.
    """
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal((features, 1)).astype(np.float32)
    chunk_rows = memory.chunk_shape((rows, features), 4, chunk_bytes)[0]
    x_path, y_path = os.path.join(folder, "X.zarr"), os.path.join(folder, "y.zarr")
    X = zarr.create_array(store=x_path, shape=(rows, features), chunks=(chunk_rows, features),
                          dtype="float32", compressors=None)
    y = zarr.create_array(store=y_path, shape=(rows, 1), chunks=(chunk_rows, 1),
                          dtype="float32", compressors=None)
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        block = rng.standard_normal((stop - start, features)).astype(np.float32)
        X[start:stop] = block
        noise = rng.standard_normal((stop - start, 1)).astype(np.float32)
        y[start:stop] = block @ w_true + 0.1 * noise
    return x_path, y_path, w_true


def make_step(X, y, learning_rate: float):
    """One jitted SGD step on mean squared error; weights carried by update_."""
    rows = X.shape[0]
    opt = optax.sgd(learning_rate)

    def loss(w):
        return jask.sum(jask.square(X @ w - y)) / rows

    @jax.jit
    def step(w, state):
        value, grad = jax.value_and_grad(loss)(w)
        updates, state = opt.update(grad, state, w)
        return w.update_(w + updates), state, value

    return step, opt


def warm_up(features: int, learning_rate: float) -> None:
    """Run the same step on a tiny problem, so that what is fixed (the XLA
    compiler, thread pools) is in the baseline and only what scales with the
    data is measured against the budget."""
    rng = np.random.default_rng(1)
    X = jask.from_numpy(rng.standard_normal((16, features)).astype(np.float32))
    y = jask.from_numpy(rng.standard_normal((16, 1)).astype(np.float32))
    w = jask.from_numpy(np.zeros((features, 1), np.float32))
    step, opt = make_step(X, y, learning_rate)
    w, _, value = step(w, opt.init(w))
    float(value)
    del X, y, w
    jask.collect()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jask.demo",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000, help="samples (default 400000)")
    parser.add_argument("--features", type=int, default=64, help="features (default 64)")
    parser.add_argument("--budget", default="32MB", help="jask memory budget (default 32MB)")
    parser.add_argument("--steps", type=int, default=15, help="training steps (default 15)")
    parser.add_argument("--lr", type=float, default=0.3, help="learning rate (default 0.3)")
    parser.add_argument("--dir", default=None,
                        help="folder for data and scratch (default: a temporary folder on disk)")
    parser.add_argument("--progress", action="store_true", help="show a progress bar per op")
    args = parser.parse_args(argv)

    folder = args.dir or tempfile.mkdtemp(prefix="jask-demo-", dir=os.getcwd())
    os.makedirs(folder, exist_ok=True)
    try:
        return _run(args, folder)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


def _run(args, folder: str) -> int:
    jask.set_memory_budget(args.budget, scratch_dir=os.path.join(folder, "scratch"))
    config = jask.get_config()
    if args.progress:
        jask.show_progress(True)
    data_bytes = args.rows * args.features * 4
    print(f"jask demo: X is {args.rows} x {args.features} float32 = {data_bytes / 1e6:.0f} MB, "
          f"{data_bytes / config.max_memory:.1f}x the {config.max_memory / 1e6:.0f} MB budget")

    t0 = time.perf_counter()
    x_path, y_path, w_true = write_dataset(folder, args.rows, args.features,
                                           memory.chunk_bytes(config.max_memory, config.workers))
    print(f"wrote the data set to {folder} in {time.perf_counter() - t0:.1f} s")

    idle = current_rss()
    warm_up(args.features, args.lr)
    baseline = current_rss()
    reset_peak_rss()

    X, y = jask.open(x_path), jask.open(y_path)
    w = jask.from_numpy(np.zeros((args.features, 1), np.float32))
    step, opt = make_step(X, y, args.lr)
    state = opt.init(w)

    print(f"{'step':>4}  {'loss':>12}  {'seconds':>8}")
    elapsed = 0.0
    for i in range(args.steps):
        t = time.perf_counter()
        w, state, value = step(w, state)
        loss = float(value)
        took = time.perf_counter() - t
        print(f"{i:4d}  {loss:12.6f}  {took:8.2f}" + ("  (includes compiling)" if i == 0 else ""),
              flush=True)
        if i > 0:  # the first step compiles
            elapsed += took
    timed = max(args.steps - 1, 1)

    error = np.linalg.norm(w.to_numpy() - w_true) / np.linalg.norm(w_true)
    read = 2 * data_bytes * timed  # forward X @ w and backward X.T @ g
    peak = max(peak_rss() - baseline, 0)
    rows = [
        ("steps", f"{args.steps}"),
        ("time per step", f"{elapsed / timed:.2f} s (after the first, compiling step)"),
        ("throughput", f"{read / max(elapsed, 1e-9) / 1e9:.2f} GB/s of X read (2 passes a step)"),
        ("relative weight error", f"{error:.2e}"),
        ("warm-up", f"{(baseline - idle) / 1e6:.0f} MB (XLA compiler, thread pools: "
                    "fixed, not per tile)"),
        ("peak RSS over baseline", f"{peak / 1e6:.0f} MB = {peak / config.max_memory:.2f} "
                                   "of the budget (baseline: after the warm-up)"),
    ]
    print()
    for name, value in rows:
        print(f"{name:<26}{value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
