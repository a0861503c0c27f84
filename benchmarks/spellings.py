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
1e-3). dask.array is not a column: each spelling would need its gradient
written by hand (``benchmarks.passes`` compares the least-squares step).

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


def _spellings(np_, softplus):
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

    return {"quickstart: sum(r*r) * (1/N)": quickstart,
            "sum(r*r)/N + L2 penalty": l2_penalty,
            "mean(r*r) + 0.1 mean(|r|)": two_terms,
            "huber through where": huber,
            "sqrt(mean(r*r))": rmse,
            "logistic on (X - mu) / sd": logistic_standardised,
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
    loss = _spellings(jask, jask.nn.softplus)[params["case"]]
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
    loss = _spellings(jnp, jax.nn.softplus)[params["case"]]
    step = jax.jit(jax.value_and_grad(loss))
    w = jnp.asarray(_w(X.shape[1]))
    np.asarray(step(w, X, y)[1])

    def op():
        return np.asarray(step(w, X, y)[1])

    return op, lambda g: float(np.linalg.norm(g)), lambda: {"passes": 0.0, "written": 0,
                                                             "cache": "in memory"}


def _row(case: str, impl: str, r: dict, reference: dict) -> list:
    if "error" in r:
        return [case, impl, r["error"][:60], "", "", "", ""]
    check = "-"
    if impl == "jask" and "sample" in reference:
        ok = abs(r["sample"] - reference["sample"]) <= REL_TOL * max(abs(reference["sample"]),
                                                                    1e-12)
        check = "ok" if ok else "DIFF"
    return [case, impl, fmt_seconds(r["wall_s"]),
            f"{r['passes']:.2f}" if impl == "jask" else "in memory",
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
        cache |= {r["cache"] for r in (j,) if "cache" in r}
        table.append(_row(case, "jask", j, ref))
        if ref:
            table.append(_row(case, "jax.numpy", ref, {}))
    print(f"before each timed jask run: {', '.join(sorted(cache)) or 'n/a'}\n")
    print(text_table(["spelling", "impl", "s/step", "passes X", "written", "graphs", "check"],
                     table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
