"""Train logistic regression on data several times larger than the memory budget.

Run it as ``python -m jask.demo`` (``--help`` for sizes and budget). It writes
a synthetic classification data set to Zarr chunk by chunk, then fits it
with ``jax.value_and_grad`` and ``optax.adam`` inside one
``jax.jit``-compiled step. The data stays on disk; the parameters are
ordinary in-memory JAX arrays, so optax works on them unmodified. It prints
the loss per step, the time, the passes over X each step made (measured with
``jask.track``), the accuracy, and the process's peak memory against the
budget.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import zarr

import jask
from jask.base import memory
from jask.base.rss import current_rss, peak_rss, reset_peak_rss
from jask.base.sizes import format_bytes


def write_dataset(folder: str, rows: int, features: int, chunk_bytes: int, seed: int = 0):
    """Write X (rows x features) and labels y = [X @ w_true + noise > 0], chunk by chunk.

    Returns the paths of X and y and the true weights.
    """
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal(features).astype(np.float32)
    chunk_rows = memory.chunk_shape((rows, features), 4, chunk_bytes)[0]
    x_path, y_path = os.path.join(folder, "X.zarr"), os.path.join(folder, "y.zarr")
    X = zarr.create_array(store=x_path, shape=(rows, features), chunks=(chunk_rows, features),
                          dtype="float32", compressors=None)
    y = zarr.create_array(store=y_path, shape=(rows,), chunks=(chunk_rows,),
                          dtype="float32", compressors=None)
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        block = rng.standard_normal((stop - start, features)).astype(np.float32)
        X[start:stop] = block
        noise = rng.standard_normal(stop - start).astype(np.float32)
        y[start:stop] = (block @ w_true + noise > 0).astype(np.float32)
    return x_path, y_path, w_true


def loss(params, X, y):
    """Mean logistic loss of logits X @ w + b against labels y."""
    logits = X @ params["w"] + params["b"]
    return jask.mean(jask.nn.softplus(logits) - y * logits)


def accuracy(params, X, y) -> float:
    logits = X @ params["w"] + params["b"]
    return float(jask.mean(jask.equal(logits > 0, y)))


def make_step(learning_rate: float):
    """One jitted adam step; parameters are in-memory JAX arrays."""
    opt = optax.adam(learning_rate)

    @jax.jit
    def step(params, state, X, y):
        value, grads = jax.value_and_grad(loss)(params, X, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    return step, opt


def init_params(features: int) -> dict:
    return {"w": jnp.zeros(features, jnp.float32), "b": jnp.zeros((), jnp.float32)}


def warm_up(step, opt, features: int, x_path: str, y_path: str) -> None:
    """Run one step and the accuracy pass on empty arrays shaped and chunked as
    X and y (no chunk written: they read as zeros, from no file), so that what
    is fixed (the XLA compiler and the program it compiles for these shapes,
    thread pools) is in the baseline and only what scales with the data is
    measured against the budget."""
    folder = os.path.dirname(x_path)
    empty = []
    for path in (x_path, y_path):
        like = zarr.open_array(path, mode="r")
        name = os.path.join(folder, "empty-" + os.path.basename(path))
        zarr.create_array(store=name, shape=like.shape, chunks=like.chunks, dtype=like.dtype,
                          compressors=None, overwrite=True)
        empty.append(jask.open(name))
    params = init_params(features)
    _, _, value = step(params, opt.init(params), *empty)
    float(value)
    accuracy(params, *empty)
    del empty
    jask.collect()
    for path in (x_path, y_path):  # nothing left beside the data (--dir is the user's)
        shutil.rmtree(os.path.join(folder, "empty-" + os.path.basename(path)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jask.demo",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000, help="samples (default 400000)")
    parser.add_argument("--features", type=int, default=64, help="features (default 64)")
    parser.add_argument("--budget", default="32MB", help="jask memory budget (default 32MB)")
    parser.add_argument("--steps", type=int, default=15, help="training steps (default 15)")
    parser.add_argument("--lr", type=float, default=0.1, help="adam learning rate (default 0.1)")
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
    print(f"jask demo: X is {args.rows} x {args.features} float32 = {format_bytes(data_bytes)}, "
          f"{data_bytes / config.max_memory:.1f}x the {format_bytes(config.max_memory)} budget")

    t0 = time.perf_counter()
    x_path, y_path, w_true = write_dataset(folder, args.rows, args.features,
                                           memory.chunk_bytes(config.max_memory, config.workers))
    print(f"wrote the data set to {folder} in {time.perf_counter() - t0:.1f} s")

    idle = current_rss()
    step, opt = make_step(args.lr)
    warm_up(step, opt, args.features, x_path, y_path)
    baseline = current_rss()
    reset_peak_rss()

    X, y = jask.open(x_path), jask.open(y_path)
    params = init_params(args.features)
    state = opt.init(params)

    print(f"{'step':>4}  {'loss':>12}  {'seconds':>8}  {'passes over X':>13}")
    elapsed, read, passes = 0.0, 0, []
    for i in range(args.steps):
        t = time.perf_counter()
        with jask.track() as counted:  # what the step really read, not what we expect
            params, state, value = step(params, state, X, y)
            loss_value = float(value)
        took = time.perf_counter() - t
        print(f"{i:4d}  {loss_value:12.6f}  {took:8.2f}  {counted.passes(X):13.2f}", flush=True)
        elapsed += took
        read += counted.store(X).bytes_read
        passes.append(counted.passes(X))
    timed = max(args.steps, 1)
    per_step = sum(passes) / len(passes) if passes else float("nan")

    w = np.asarray(params["w"])
    cosine = float(w @ w_true / (np.linalg.norm(w) * np.linalg.norm(w_true) + 1e-30))
    acc = accuracy(params, X, y)
    peak = max(peak_rss() - baseline, 0)
    rows = [
        ("steps", f"{args.steps} of optax.adam, parameters in memory"),
        ("time per step", f"{elapsed / timed:.2f} s (compiled in the warm-up)"),
        ("passes over X", f"{per_step:.2f} a step (jask.track: bytes read from X / X.nbytes)"),
        ("throughput", f"{format_bytes(read / max(elapsed, 1e-9))}/s of X read"),
        ("training accuracy", f"{acc:.3f}"),
        ("cosine(w, w_true)", f"{cosine:.3f}"),
        ("warm-up", f"{format_bytes(baseline - idle)} (XLA compiler and the step's program, "
                    "thread pools: fixed, not per tile)"),
        ("peak RSS over baseline", f"{format_bytes(peak)} = {peak / config.max_memory:.2f} "
                                   "of the budget (baseline: after the warm-up)"),
    ]
    print()
    for name, value in rows:
        print(f"{name:<26}{value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
