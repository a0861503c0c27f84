"""Notebook work, eagerly and under ``jax.jit``, against dask.array on one store.

``python -m benchmarks.notebook [--size 64MiB] [--budget 16MB] [--reps 3]``

What people do in a notebook, on X (n x 64 float32, one uncompressed Zarr
store, chunks of budget/16 as in ``benchmarks.passes``):

* ``standardise``: ``mu, sd = X.mean(0), X.std(0); Z = (X - mu) / sd;
  float(jask.sum(Z * Z))``;
* ``gram``: ``X.T @ X`` (brought into memory, 64 x 64);
* ``pca``: power iteration, ``--pca-steps`` steps of ``v = X.T @ (X @ v)``
  normalised, from the same start vector.

Each case runs three ways: jask eagerly (``eager``: the lines as typed in a
cell), the same function under ``jax.jit`` (``jit``: compiled in the untimed
setup, ``jax.jit(f).lower(X).compile()``), and dask.array on the same store
(``dask``: ``da.from_array`` over the ``zarr.Array``, counting the bytes its
blocks read; the threaded scheduler). Every run is a fresh process
(``benchmarks.measure.run_case``); the runs are interleaved (rep by rep, case
by case, way by way) and each figure is the median of ``--reps``. Right
before the timed op the page cache is dropped (``sync; echo 3 >
/proc/sys/vm/drop_caches`` as root, else the store's files are evicted with
``posix_fadvise``; the header says which).

Columns: median seconds of each way; the ratios eager/dask, eager/jit,
jit/dask (< 1: the first is faster); passes over X (array bytes read from
X's store / X's size: ``jask.track`` for jask, the counting wrapper for
dask); array bytes jask wrote (scratch and results, ``jask.track``); and
``check``: jask's result agrees with dask's to 1e-3 (relative).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

import numpy as np
from dask.utils import format_bytes, parse_bytes

from benchmarks.measure import run_case
from benchmarks.passes import CountingArray, drop_page_cache
from benchmarks.report import REL_TOL, fmt_seconds, text_table
from benchmarks.workloads import write_data

CASES = ("standardise", "gram", "pca")
WAYS = ("eager", "jit", "dask")
FEATURES = 64


def _start(features: int) -> np.ndarray:
    """The power iteration's start vector, the same for every way."""
    v = np.random.default_rng(2).standard_normal(features).astype(np.float32)
    return v / np.linalg.norm(v)


# --- jask, eagerly and under jit -------------------------------------------------

def _jask_functions(jask, jax, jnp, pca_steps: int):
    """The three cases as a reader writes them: ``f(X) -> result``."""
    def standardise(X):
        mu, sd = X.mean(0), X.std(0)
        Z = (X - mu) / sd
        return jask.sum(Z * Z)

    def gram(X):
        return X.T @ X

    def pca_eager(X):
        v = jnp.asarray(_start(X.shape[1]))
        for _ in range(pca_steps):
            u = X.T @ (X @ v)
            u = jnp.asarray(np.asarray(u))  # 64 numbers: in memory for the norm
            v = u / jnp.linalg.norm(u)
        return v

    def pca_jit(X):
        v = jnp.asarray(_start(X.shape[1]))
        for _ in range(pca_steps):
            u = X.T @ (X @ v)
            v = u / jask.sqrt(jask.sum(u * u))
        return v

    return {"standardise": (standardise, standardise), "gram": (gram, gram),
            "pca": (pca_eager, pca_jit)}


def _sample(case: str, result) -> float:
    """One number to compare the ways by (a power iteration's sign is fixed by v0)."""
    value = np.asarray(result, dtype=np.float64)
    return float(value) if case == "standardise" else float(np.abs(value).sum())


def jask_case(params: dict):
    import jax
    import jax.numpy as jnp

    import jask
    jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
    X = jask.open(params["X"])
    eager, jitted = _jask_functions(jask, jax, jnp, params["pca_steps"])[params["case"]]
    if params["way"] == "jit":
        run = jax.jit(jitted).lower(X).compile()  # compiling is setup, not the timed op
    else:
        small = jask.from_numpy(np.ones((64, X.shape[1]), np.float32))
        _sample(params["case"], _observe(eager(small)))  # first-call costs, on a tiny X
        del small
        run = eager
    how = drop_page_cache([params["X"]])
    track = jask.track()

    def op():
        with track:
            return _observe(run(X))

    def counted() -> dict:
        return {"passes": track.passes(X), "written": track.bytes_written, "cache": how}
    return op, lambda r: _sample(params["case"], r), counted


def _observe(result):
    """The result in memory, as a notebook shows it (so lazy work is counted)."""
    return np.asarray(result)


# --- dask.array ------------------------------------------------------------------

def dask_case(params: dict):
    import dask.array as da
    import zarr
    zx = zarr.open_array(params["X"], mode="r")
    counting = CountingArray(zx)
    X = da.from_array(counting, chunks=zx.chunks, name="X", lock=False)
    case = params["case"]

    def run():
        if case == "standardise":
            mu, sd = X.mean(0), X.std(0)
            Z = (X - mu) / sd
            return float((Z * Z).sum())
        if case == "gram":
            return (X.T @ X).compute()
        v = _start(X.shape[1])
        for _ in range(params["pca_steps"]):
            u = (X.T @ (X @ v)).compute()
            v = u / np.linalg.norm(u)
        return v

    how = drop_page_cache([params["X"]])

    def op():
        counting.read = 0
        return run()

    def counted() -> dict:
        return {"passes": counting.read / zx.nbytes, "written": 0, "cache": how}
    return op, lambda r: _sample(case, r), counted


# --- the table -------------------------------------------------------------------

def _median(runs: list, key: str):
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else None


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def _check(runs: dict) -> str:
    ref = _median(runs["dask"], "sample")
    if ref is None:
        return "-"
    marks = []
    for way in ("eager", "jit"):
        got = _median(runs[way], "sample")
        ok = got is not None and abs(got - ref) <= REL_TOL * max(abs(ref), 1e-12)
        marks.append("ok" if ok else f"DIFF({way})")
    return "ok" if marks == ["ok", "ok"] else " ".join(m for m in marks if m != "ok")


def _row(case: str, runs: dict) -> list:
    t = {way: _median(runs[way], "wall_s") for way in WAYS}
    passes = {way: _median(runs[way], "passes") for way in WAYS}
    written = {way: _median(runs[way], "written") for way in ("eager", "jit")}
    errors = [f"{way}: {r['error'][:50]}" for way in WAYS for r in runs[way][:1] if "error" in r]
    return [case] + [fmt_seconds(t[w]) if t[w] is not None else "n/a" for w in WAYS] + [
        _ratio(t["eager"], t["dask"]), _ratio(t["eager"], t["jit"]), _ratio(t["jit"], t["dask"]),
        " / ".join(f"{passes[w]:.2f}" if passes[w] is not None else "n/a" for w in WAYS),
        " / ".join(format_bytes(written[w]) if written[w] is not None else "n/a"
                   for w in ("eager", "jit")),
        _check(runs) if not errors else "; ".join(errors)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.notebook",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", default="64MiB",
                        help="size of X (default 64MiB: a few minutes, mostly process start-up; "
                             "1GiB for the issue's figures)")
    parser.add_argument("--budget", default="16MB", help="jask's memory budget (default 16MB)")
    parser.add_argument("--reps", type=int, default=3, help="runs per case and way (median)")
    parser.add_argument("--pca-steps", type=int, default=3, help="power iteration steps")
    parser.add_argument("--only", default=",".join(CASES), help="cases, comma-separated")
    parser.add_argument("--data-dir", default=os.path.join(os.getcwd(), ".bench_data",
                                                           "notebook"))
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.only.split(",") if c.strip()]
    for case in cases:
        if case not in CASES:
            parser.error(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    budget = parse_bytes(args.budget)
    rows = max(1, parse_bytes(args.size) // (FEATURES * 4))
    folder = os.path.join(args.data_dir, f"{rows}x{FEATURES}-{budget}")
    os.makedirs(folder, exist_ok=True)
    chunk_rows = max(1, budget // 16 // (FEATURES * 4))
    paths = write_data(folder, rows, FEATURES, chunk_rows)
    data_bytes = rows * FEATURES * 4
    print(f"X: {rows} x {FEATURES} float32 = {format_bytes(data_bytes)} "
          f"({data_bytes / budget:.1f}x the {format_bytes(budget)} budget), chunks of "
          f"{chunk_rows} rows; median of {args.reps} fresh processes per case and way, "
          f"interleaved; pca: {args.pca_steps} steps")
    runs = {case: {way: [] for way in WAYS} for case in cases}
    cache = set()
    scratch = os.path.join(folder, "scratch")
    for _ in range(args.reps):
        for case in cases:
            for way in WAYS:
                common = dict(paths, case=case, way=way, budget=budget, scratch=scratch,
                              pca_steps=args.pca_steps)
                func = "dask_case" if way == "dask" else "jask_case"
                result = run_case("benchmarks.notebook", func, common, timeout=3600)
                shutil.rmtree(scratch, ignore_errors=True)
                cache |= {result["cache"]} if "cache" in result else set()
                runs[case][way].append(result)
    print(f"before each timed run: {', '.join(sorted(cache)) or 'n/a'}\n")
    print(text_table(["case", "eager s", "jit s", "dask s", "eager/dask", "eager/jit",
                      "jit/dask", "passes X (eager/jit/dask)", "written (eager/jit)", "check"],
                     [_row(case, runs[case]) for case in cases]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
