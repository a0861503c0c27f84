"""Three models on data larger than the budget, jask against dask.array.

``python -m benchmarks.workloads [--rows N] [--features K] [--budget 32MB]``

Writes X (rows x features float32, at least 8x the budget by default) and
labels y as uncompressed Zarr stores, then times, each in a fresh process
(``benchmarks.measure.run_case``): ``--steps`` training steps of logistic
regression with adam on in-memory parameters, of a two-layer tanh MLP with
adam, and power iterations of PCA on standardised data. jask runs each as
written with jax.grad under jax.jit; dask.array runs the same maths with
hand-written gradients (dask has no autodiff), optimizer steps in numpy.
Compiling (jask) and graph building (dask) for the first step happen in the
untimed setup. The table gives seconds, peak RSS over the pre-run RSS, and
jask's RSS against the budget.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np
from dask.utils import format_bytes, parse_bytes

from benchmarks.measure import run_case

HIDDEN = 16
LR = 0.05


def write_data(folder: str, rows: int, features: int, chunk_rows: int) -> dict:
    """X and y = [X @ w + noise > 0] as Zarr stores, written a block at a time."""
    import zarr
    paths = {"X": os.path.join(folder, "X.zarr"), "y": os.path.join(folder, "y.zarr")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    rng = np.random.default_rng(0)
    w = rng.standard_normal(features).astype(np.float32)
    X = zarr.create_array(store=paths["X"], shape=(rows, features),
                          chunks=(chunk_rows, features), dtype="float32", compressors=None,
                          overwrite=True)
    y = zarr.create_array(store=paths["y"], shape=(rows,), chunks=(chunk_rows,),
                          dtype="float32", compressors=None, overwrite=True)
    for start in range(0, rows, chunk_rows):
        stop = min(start + chunk_rows, rows)
        block = rng.standard_normal((stop - start, features)).astype(np.float32)
        X[start:stop] = block
        y[start:stop] = (block @ w + rng.standard_normal(stop - start) > 0).astype(np.float32)
    return paths


def _init(features: int) -> dict:
    rng = np.random.default_rng(1)
    return {"w": np.zeros(features, np.float32), "b": np.float32(0),
            "W1": (rng.standard_normal((features, HIDDEN)) * 0.1).astype(np.float32),
            "b1": np.zeros(HIDDEN, np.float32),
            "w2": (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32),
            "b2": np.float32(0)}


# --- jask ---------------------------------------------------------------------------

def jask_case(params: dict):
    import jax
    import jax.numpy as jnp
    import optax

    import jask
    jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
    X, y = jask.open(params["X"]), jask.open(params["y"])
    p0 = {k: jnp.asarray(v) for k, v in _init(X.shape[1]).items()}
    opt = optax.adam(LR)

    def logistic(p, X, y):
        logits = X @ p["w"] + p["b"]
        return jask.mean(jask.nn.softplus(logits) - y * logits)

    def mlp(p, X, y):
        h = jask.tanh(X @ p["W1"] + p["b1"])
        return jask.mean(jask.square(h @ p["w2"] + p["b2"] - y))

    if params["model"] in ("logistic", "mlp"):
        loss = logistic if params["model"] == "logistic" else mlp
        keys = ("w", "b") if params["model"] == "logistic" else ("W1", "b1", "w2", "b2")
        p = {k: p0[k] for k in keys}

        @jax.jit
        def step(p, state, X, y):
            value, grads = jax.value_and_grad(loss)(p, X, y)
            updates, state = opt.update(grads, state, p)
            return optax.apply_updates(p, updates), state, value

        state = opt.init(p)
        p, state, value = step(p, state, X, y)  # compile (untimed)
        float(value)

        def op():
            nonlocal p, state
            for _ in range(params["steps"]):
                p, state, value = step(p, state, X, y)
            return float(value)
        return op, lambda v: v

    mu, sigma = X.mean(axis=0), X.std(axis=0)
    Z = (X - mu) / sigma

    def power(steps):
        v = jnp.ones(X.shape[1], jnp.float32)
        for _ in range(steps):
            v = jask.materialize(Z.T @ (Z @ v))
            v = v / jnp.linalg.norm(v)
        return float(jnp.abs(v).max())

    power(1)  # compile the in-memory steps (untimed), as the models' setup does
    return (lambda: power(params["steps"])), lambda v: v


# --- dask.array ---------------------------------------------------------------------

def _adam(p, g, state, t):
    """One adam step in numpy, as optax.adam(LR) computes it."""
    m, v = state
    for k in g:
        m[k] = 0.9 * m[k] + 0.1 * g[k]
        v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
        mhat, vhat = m[k] / (1 - 0.9 ** t), v[k] / (1 - 0.999 ** t)
        p[k] = p[k] - LR * mhat / (np.sqrt(vhat) + 1e-8)
    return p


def dask_case(params: dict):
    import dask
    import dask.array as da
    X, y = da.from_zarr(params["X"]), da.from_zarr(params["y"])
    n = X.shape[0]
    p = _init(X.shape[1])

    def logistic_grads(p):
        logits = X @ p["w"] + p["b"]
        r = (1 / (1 + da.exp(-logits)) - y) / n
        loss = da.mean(da.logaddexp(logits, 0) - y * logits)
        return dask.compute(loss, {"w": X.T @ r, "b": r.sum()})

    def mlp_grads(p):
        h = da.tanh(X @ p["W1"] + p["b1"])
        out = h @ p["w2"] + p["b2"]
        r = 2 * (out - y) / n
        dh = r[:, None] * p["w2"][None, :] * (1 - h * h)
        loss = da.mean((out - y) ** 2)
        return dask.compute(loss, {"W1": X.T @ dh, "b1": dh.sum(0), "w2": h.T @ r,
                                   "b2": r.sum()})

    if params["model"] in ("logistic", "mlp"):
        grads = logistic_grads if params["model"] == "logistic" else mlp_grads
        keys = ("w", "b") if params["model"] == "logistic" else ("W1", "b1", "w2", "b2")
        p = {k: p[k] for k in keys}
        state = ({k: np.zeros_like(v) for k, v in p.items()},
                 {k: np.zeros_like(v) for k, v in p.items()})
        _, g = grads(p)  # warm up (untimed)

        def op():
            nonlocal p
            value = 0.0
            for t in range(1, params["steps"] + 1):
                value, g = grads(p)
                p = _adam(p, g, state, t)
            return float(value)
        return op, lambda v: v

    mu, sigma = dask.compute(X.mean(axis=0), X.std(axis=0))
    Z = (X - mu) / sigma  # standardised on the fly: dask reads X in every product

    def op():
        v = np.ones(X.shape[1], np.float32)
        for _ in range(params["steps"]):
            v = (Z.T @ (Z @ v)).compute()
            v = v / np.linalg.norm(v)
        return float(np.abs(v).max())
    return op, lambda v: v


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workloads",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=1 << 20)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--budget", default="32MB")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--data-dir", default=os.path.join(os.getcwd(), ".bench_data",
                                                           "workloads"))
    args = parser.parse_args(argv)
    budget = parse_bytes(args.budget)
    os.makedirs(args.data_dir, exist_ok=True)
    chunk_rows = max(1, budget // 16 // (args.features * 4))
    paths = write_data(args.data_dir, args.rows, args.features, chunk_rows)
    data_bytes = args.rows * args.features * 4
    print(f"X: {args.rows} x {args.features} float32 = {format_bytes(data_bytes)}, "
          f"{data_bytes / budget:.1f}x the {format_bytes(budget)} budget; "
          f"{args.steps} steps per model\n")
    header = ("model", "jask s", "jask RSS", "RSS/budget", "dask s", "dask RSS", "jask/dask")
    rows = []
    for model in ("logistic", "mlp", "pca"):
        scratch = os.path.join(args.data_dir, "scratch")
        common = dict(paths, model=model, steps=args.steps, budget=budget, scratch=scratch)
        j = run_case("benchmarks.workloads", "jask_case", common, timeout=1800)
        d = run_case("benchmarks.workloads", "dask_case", common, timeout=1800)
        shutil.rmtree(scratch, ignore_errors=True)
        def cell(r, k):
            if "error" in r:
                return r["error"][:40]
            return f"{r[k]:.2f}" if k == "wall_s" else format_bytes(r[k])
        ratio = (f"{j['wall_s'] / d['wall_s']:.2f}"
                 if "wall_s" in j and "wall_s" in d else "")
        rows.append((model, cell(j, "wall_s"), cell(j, "peak_rss"),
                     f"{j['peak_rss'] / budget:.2f}" if "peak_rss" in j else "",
                     cell(d, "wall_s"), cell(d, "peak_rss"), ratio))
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
