"""One loss, many spellings: passes over X per jitted step (issue 30).

``python -m benchmarks.spellings [--quick] [--rows N] [--features K] [--budget B] [--only ...]``

On one uncompressed Zarr store X (rows x features float32, 8x the budget or
more; written by ``benchmarks.workloads.write_data``) and its labels y, each
spelling of a loss in :data:`SPELLINGS` runs as ``jax.jit(jax.value_and_grad(loss))``
with ``w`` in memory: in jask over the stores, and in jax.numpy over X and y
loaded into memory where they fit (``--in-memory-limit``, default 4 GiB),
each in a fresh process (``benchmarks.measure.run_case``), compiled in the
untimed setup, the page cache dropped before the timed step as in
``benchmarks.passes``. Columns: seconds per step, passes over X (array bytes
read from X's store over X's size, ``jask.track``), bytes written per step,
graphs per step, ``check`` (the gradient's norm agrees with jax.numpy's to
1e-3, or with dask's where jax.numpy did not run). The dask.array rows
compute the same loss and its gradient, written by hand
(:func:`_dask_spellings`), from the same store in one ``dask.compute``
each (the scalars a gradient needs are computed beside the products they
scale, so dask too reads X once); passes count the bytes its ``from_array``
read.

The "worst case of the grammar" row is the deepest loss
``tests/test_loss_grammar.py`` pins: two terms over three row-wise chains,
a square root and a ratio of reductions.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np
from dask.utils import format_bytes, parse_bytes

from benchmarks.measure import run_case
from benchmarks.passes import drop_page_cache
from benchmarks.report import REL_TOL, fmt_seconds, text_table
from benchmarks.workloads import write_data


def _spellings(np_, softplus, logsumexp=None):
    """Loss name -> loss(w, X, y) written with ``np_`` (jask or jax.numpy)."""
    import jax.numpy as jnp

    def quickstart(w, X, y):
        r = X @ w - y
        return np_.sum(r * r) * (1 / X.shape[0])

    def l2_penalty(w, X, y):
        r = X @ w - y
        return np_.sum(r * r) / X.shape[0] + 0.01 * jnp.sum(w * w)

    def two_terms(w, X, y):
        r = X @ w - y
        return np_.mean(r * r) + 0.1 * np_.mean(np_.abs(r))

    def huber(w, X, y):
        r = X @ w - y
        a = np_.abs(r)
        return np_.mean(np_.where(a < 1, 0.5 * r * r, a - 0.5))

    def rmse(w, X, y):
        return jnp.sqrt(np_.mean(np_.square(X @ w - y)))

    def logistic_standardised(w, X, y):
        z = ((X - 0.01) / 1.5) @ w
        return np_.mean(softplus(z) - y * z)

    def grammar_worst(w, X, y):
        z = X @ w
        t = np_.tanh(X * w)
        first = jnp.sqrt(np_.mean(np_.square(z - y)) + 1)
        second = np_.sum(np_.where(y > 0, softplus(z), 0.5 * z)) / (
            jnp.sum(np_.sum(t, axis=0) * w) ** 2 + 1)
        return first + 0.5 * second + 0.01 * jnp.sum(w * w)

    def softmax_cross_entropy(w, X, y):  # two classes (y > 0), logits X @ [w, -w/2]
        L = X @ jnp.stack([w, -0.5 * w], axis=1)
        picked = np_.where(y > 0, X @ w, X @ (-0.5 * w))
        return np_.mean(logsumexp(L, axis=1) - picked)

    return {"quickstart: sum(r*r) * (1/N)": quickstart,
            "sum(r*r)/N + L2 penalty": l2_penalty,
            "mean(r*r) + 0.1 mean(|r|)": two_terms,
            "huber through where": huber,
            "sqrt(mean(r*r))": rmse,
            "logistic on (X - mu) / sd": logistic_standardised,
            "softmax cross-entropy (logsumexp)": softmax_cross_entropy,
            "grammar's worst case": grammar_worst}


SPELLINGS = tuple(_spellings(None, None))


def _w(features: int):
    return (np.random.default_rng(1).standard_normal(features) * 0.1).astype(np.float32)


def jask_case(params: dict):
    import jax
    import jax.numpy as jnp

    import jask
    jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
    X, y = jask.open(params["X"]), jask.open(params["y"])
    loss = _spellings(jask, jask.nn.softplus, jask.logsumexp)[params["case"]]
    step = jax.jit(jax.value_and_grad(loss))
    w = jnp.asarray(_w(X.shape[1]))
    np.asarray(step(w, X, y)[1])  # compiled and run once (untimed)
    how = drop_page_cache([params["X"], params["y"]])
    track = jask.track()

    def op():
        with track:
            return np.asarray(step(w, X, y)[1])

    def counted() -> dict:
        return {"passes": track.passes(X), "written": track.bytes_written,
                "graphs": track.graphs, "cache": how}
    return op, lambda g: float(np.linalg.norm(g)), counted


def jnp_case(params: dict):
    import jax
    import jax.numpy as jnp
    import zarr

    X = jnp.asarray(zarr.open_array(params["X"], mode="r")[...])
    y = jnp.asarray(zarr.open_array(params["y"], mode="r")[...])
    loss = _spellings(jnp, jax.nn.softplus, jax.nn.logsumexp)[params["case"]]
    step = jax.jit(jax.value_and_grad(loss))
    w = jnp.asarray(_w(X.shape[1]))
    np.asarray(step(w, X, y)[1])

    def op():
        return np.asarray(step(w, X, y)[1])

    return op, lambda g: float(np.linalg.norm(g)), lambda: {"passes": 0.0, "written": 0,
                                                             "cache": "in memory"}


def _dask_spellings(X, y, w):
    """Loss name -> (dask arrays to compute together, finish(values) -> (loss,
    gradient)): the same losses as :func:`_spellings`, their gradients by hand."""
    import dask.array as da

    n = X.shape[0]
    z = X @ w
    r = z - y

    def softplus(v):
        return da.logaddexp(0, v)

    def sigmoid(v):
        return 1 / (1 + da.exp(-v))

    def both(loss, dz, extra=0.0):
        return [loss, X.T @ dz], lambda v: (float(v[0]), v[1] + extra)

    t = da.tanh(X * w)
    a = abs(r)
    S = (X - 0.01) / 1.5
    zs = S @ w
    return {
        "quickstart: sum(r*r) * (1/N)": lambda: both((r * r).sum() / n, 2 * r / n),
        "sum(r*r)/N + L2 penalty": lambda: both((r * r).sum() / n, 2 * r / n, 0.02 * w),
        "mean(r*r) + 0.1 mean(|r|)": lambda: both((r * r).mean() + 0.1 * a.mean(),
                                                   (2 * r + 0.1 * da.sign(r)) / n),
        "huber through where": lambda: both(da.where(a < 1, 0.5 * r * r, a - 0.5).mean(),
                                            da.where(a < 1, r, da.sign(r)) / n),
        "sqrt(mean(r*r))": lambda: ([(r * r).mean(), X.T @ r],
                                    lambda v: (float(np.sqrt(v[0])),
                                               v[1] / (n * np.sqrt(v[0])))),
        "logistic on (X - mu) / sd": lambda: ([(softplus(zs) - y * zs).mean(),
                                               S.T @ ((sigmoid(zs) - y) / n)],
                                              lambda v: (float(v[0]), v[1])),
        "softmax cross-entropy (logsumexp)": lambda: _softmax_ce(X, y, w),
        "grammar's worst case": lambda: (
            [(r * r).mean(), da.where(y > 0, softplus(z), 0.5 * z).sum(), (t * w).sum(),
             X.T @ r, X.T @ da.where(y > 0, sigmoid(z), 0.5), t.sum(axis=0),
             (X * (1 - t * t)).sum(axis=0)],
            lambda v: _worst_finish(v, n, w)),
    }


def _softmax_ce(X, y, w):
    """Softmax cross-entropy over logits ``X @ [w, -w/2]`` and its gradient
    in ``w``: ``X.T @ (softmax - onehot) / N`` folded back onto ``w``."""
    import dask.array as da

    n = X.shape[0]
    W = np.stack([w, -0.5 * w], axis=1)
    L = X @ W
    lse = da.logaddexp(L[:, 0], L[:, 1])
    onehot = da.stack([y > 0, y <= 0], axis=1).astype(np.float32)
    loss = (lse - (L * onehot).sum(axis=1)).mean()
    g = X.T @ ((da.exp(L - lse[:, None]) - onehot) / n)
    return [loss, g], lambda v: (float(v[0]), v[1][:, 0] - 0.5 * v[1][:, 1])


def _worst_finish(v, n, w):
    """The grammar's worst case from its reductions: ``first + 0.5 * S / (Q**2 + 1)
    + 0.01 |w|**2``, ``first = sqrt(mean(r**2) + 1)``, ``Q = sum(tanh(X * w) * w)``."""
    mse, s, q, u, v2, ct, cx = v
    first = np.sqrt(mse + 1)
    loss = first + 0.5 * s / (q * q + 1) + 0.01 * float(np.sum(w * w))
    grad = (u / (n * first) + 0.5 / (q * q + 1) * v2
            - s * q / (q * q + 1) ** 2 * (ct + w * cx) + 0.02 * w)
    return float(loss), grad


def dask_case(params: dict):
    import dask
    import dask.array as da
    import zarr

    from benchmarks.passes import CountingArray

    zx, zy = zarr.open_array(params["X"], mode="r"), zarr.open_array(params["y"], mode="r")
    cx, cy = CountingArray(zx), CountingArray(zy)
    X = da.from_array(cx, chunks=zx.chunks, name="X", lock=False)
    y = da.from_array(cy, chunks=zy.chunks, name="y", lock=False)
    w = _w(X.shape[1])

    def run():
        arrays, finish = _dask_spellings(X, y, w)[params["case"]]()
        return finish(dask.compute(*arrays))[1]

    run()  # warm up (untimed)
    how = drop_page_cache([params["X"], params["y"]])
    cx.read = cy.read = 0

    def counted() -> dict:
        return {"passes": cx.read / zx.nbytes, "written": 0, "graphs": 1, "cache": how}
    return run, lambda g: float(np.linalg.norm(g)), counted


def _row(case: str, impl: str, r: dict, reference: dict) -> list:
    if "error" in r:
        return [case, impl, r["error"][:60], "", "", "", ""]
    check = "-"
    if impl != "jax.numpy" and "sample" in reference:
        ok = abs(r["sample"] - reference["sample"]) <= REL_TOL * max(abs(reference["sample"]),
                                                                    1e-12)
        check = "ok" if ok else "DIFF"
    return [case, impl, fmt_seconds(r["wall_s"]),
            f"{r['passes']:.2f}" if impl != "jax.numpy" else "in memory",
            format_bytes(r["written"]), f"{r['graphs']:.0f}" if "graphs" in r else "", check]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spellings",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="X of 2**19 x 64 (128 MiB) under a 16MB budget")
    parser.add_argument("--rows", type=int, default=None, help="default 2**24 (4 GiB X)")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--budget", default=None, help="default 256MB (16MB with --quick)")
    parser.add_argument("--in-memory-limit", default="4GiB",
                        help="run jax.numpy in memory when X is at most this")
    parser.add_argument("--only", default=None, help="spellings, '|'-separated")
    parser.add_argument("--data-dir", default=os.path.join(os.getcwd(), ".bench_data",
                                                           "passes"))
    args = parser.parse_args(argv)
    rows = args.rows or (1 << 19 if args.quick else 1 << 24)
    budget = parse_bytes(args.budget or ("16MB" if args.quick else "256MB"))
    folder = os.path.join(args.data_dir, f"{rows}x{args.features}-{budget}")
    os.makedirs(folder, exist_ok=True)
    chunk_rows = max(1, budget // 16 // (args.features * 4))
    paths = write_data(folder, rows, args.features, chunk_rows)
    data_bytes = rows * args.features * 4
    in_memory = data_bytes <= parse_bytes(args.in_memory_limit)
    print(f"X: {rows} x {args.features} float32 = {format_bytes(data_bytes)} "
          f"({data_bytes / budget:.1f}x the {format_bytes(budget)} budget), chunks of "
          f"{chunk_rows} rows; jit(value_and_grad), one step per fresh process")
    cases = SPELLINGS if args.only is None else [c.strip() for c in args.only.split("|")]
    table, cache = [], set()
    for case in cases:
        if case not in SPELLINGS:
            parser.error(f"unknown spelling {case!r}; choose from {' | '.join(SPELLINGS)}")
        scratch = os.path.join(folder, "scratch")
        common = dict(paths, case=case, budget=budget, scratch=scratch)
        ref = run_case("benchmarks.spellings", "jnp_case", common, 3600) if in_memory else {}
        j = run_case("benchmarks.spellings", "jask_case", common, timeout=3600)
        shutil.rmtree(scratch, ignore_errors=True)
        d = run_case("benchmarks.spellings", "dask_case", common, timeout=3600)
        cache |= {r["cache"] for r in (j, d) if "cache" in r}
        table.append(_row(case, "jask", j, ref or d))
        table.append(_row(case, "dask.array", d, ref))
        if ref:
            table.append(_row(case, "jax.numpy", ref, {}))
    print(f"before each timed jask and dask run: {', '.join(sorted(cache)) or 'n/a'}\n")
    print(text_table(["spelling", "impl", "s/step", "passes X", "written", "graphs", "check"],
                     table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
