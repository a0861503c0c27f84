"""Passes over X per training step: jask against dask.array on one store.

``python -m benchmarks.passes [--quick] [--rows N] [--features K] [--budget B] [--steps S]``

Writes X (rows x features float32, uncompressed Zarr, chunks of budget/16 as
in ``benchmarks.workloads``) and y, then runs, each in a fresh process
(``benchmarks.measure.run_case``) with the page cache dropped right before
the timed steps (``sync; echo 3 > /proc/sys/vm/drop_caches`` as root, else
``posix_fadvise(DONTNEED)`` on every file of the stores, which the header
says):

* ``lstsq grad``: ``jax.jit(jax.grad(lambda w: sum(square(X @ w - y))))(w)``,
  ``w`` an in-memory ``jax.Array``; dask computes ``2 X.T @ (X @ w - y)``;
* ``lstsq value_and_grad``: the same with ``jax.value_and_grad``; dask
  computes the loss and the gradient in one ``dask.compute``;
* ``lstsq jvp (eager)``: ``jax.jvp(lambda w: sum(square(X @ w - y)), (w,), (v,))``
  not compiled, the loss and its derivative along ``v``; dask computes
  ``sum(r * r)`` and ``2 sum(r * (X @ v))`` in one ``dask.compute``;
* ``logistic step``: one SGD step of logistic regression (``jask.nn.softplus``
  loss, ``w`` and ``b`` in memory) under ``jax.jit``; dask computes the
  hand-written gradient and numpy updates the parameters.

Columns: seconds per step, passes over X per step (bytes read from X's store
over X's size: jask's own counters, ``jask.track``; for dask, the bytes of
every block ``da.from_array`` reads through a counting wrapper of the same
``zarr.Array`` that ``da.from_zarr`` would read), array bytes read and
written per step, graphs per step (jask), peak RSS of the timed steps above
the RSS before them, and for jask RSS against the budget. ``check``: the
gradient's norm agrees with dask's to 1e-3. Compiling (jask) and a first
step (dask) happen in the untimed setup.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading

import numpy as np
from dask.utils import format_bytes, parse_bytes

from benchmarks.data import evict
from benchmarks.measure import run_case
from benchmarks.report import REL_TOL, fmt_seconds, text_table
from benchmarks.workloads import write_data

CASES = ("lstsq grad", "lstsq value_and_grad", "lstsq jvp (eager)", "logistic step")
LR = 0.1


def drop_page_cache(paths) -> str:
    """Empty the page cache (as root), else evict the stores' files; say which."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "page cache dropped"
    except OSError:
        for path in paths:
            for folder, _, files in os.walk(path):
                for name in files:
                    evict(os.path.join(folder, name))
        return "store files evicted (posix_fadvise)"


def _init(features: int):
    rng = np.random.default_rng(1)
    return (rng.standard_normal(features) * 0.1).astype(np.float32), np.float32(0.1)


# --- jask ---------------------------------------------------------------------------

def jask_case(params: dict):
    import jax
    import jax.numpy as jnp

    import jask
    jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
    X, y = jask.open(params["X"]), jask.open(params["y"])
    w0, b0 = _init(X.shape[1])
    state = {"p": (jnp.asarray(w0), jnp.asarray(b0))}

    def lstsq(w):
        return jask.sum(jask.square(X @ w - y))

    def logistic(p):
        w, b = p
        z = X @ w + b
        return jask.mean(jask.nn.softplus(z) - y * z)

    case = params["case"]
    if case == "lstsq grad":
        f = jax.jit(jax.grad(lstsq))
        run = lambda: f(state["p"][0])  # noqa: E731
    elif case == "lstsq value_and_grad":
        f = jax.jit(jax.value_and_grad(lstsq))
        run = lambda: f(state["p"][0])[1]  # noqa: E731
    elif case == "lstsq jvp (eager)":
        v = jnp.ones_like(state["p"][0])
        run = lambda: jnp.stack(jax.jvp(lstsq, (state["p"][0],), (v,)))  # noqa: E731
    else:
        @jax.jit
        def f(p):
            g = jax.grad(logistic)(p)
            return jax.tree.map(lambda p, g: p - LR * g, p, g), g[0]

        def run():
            state["p"], g = f(state["p"])
            return g
    np.asarray(run())  # compile and run once (untimed)
    state["p"] = (jnp.asarray(w0), jnp.asarray(b0))
    how = drop_page_cache([params["X"], params["y"]])
    track = jask.track()

    def op():
        with track:
            for _ in range(params["steps"]):
                g = np.asarray(run())
        return g

    def counted() -> dict:
        steps = params["steps"]
        return {"passes": track.passes(X) / steps, "read": track.bytes_read / steps,
                "written": track.bytes_written / steps, "graphs": track.graphs / steps,
                "cache": how}
    return op, lambda g: float(np.linalg.norm(g)), counted


# --- dask.array ---------------------------------------------------------------------

class CountingArray:
    """A ``zarr.Array`` for ``da.from_array`` that counts the bytes read."""

    def __init__(self, arr):
        self.arr, self.shape, self.dtype, self.ndim = arr, arr.shape, arr.dtype, arr.ndim
        self.read = 0
        self._lock = threading.Lock()

    def __getitem__(self, index):
        block = self.arr[index]
        with self._lock:
            self.read += block.nbytes
        return block


def dask_case(params: dict):
    import dask
    import dask.array as da
    import zarr
    zx, zy = zarr.open_array(params["X"], mode="r"), zarr.open_array(params["y"], mode="r")
    cx, cy = CountingArray(zx), CountingArray(zy)
    X = da.from_array(cx, chunks=zx.chunks, name="X", lock=False)
    y = da.from_array(cy, chunks=zy.chunks, name="y", lock=False)
    n = X.shape[0]
    w0, b0 = _init(X.shape[1])
    state = {"p": (w0, b0)}
    case = params["case"]

    def run():
        w, b = state["p"]
        if case == "lstsq grad":
            return (2 * X.T @ (X @ w - y)).compute()
        if case == "lstsq value_and_grad":
            r = X @ w - y
            _, g = dask.compute((r * r).sum(), 2 * X.T @ r)
            return g
        if case == "lstsq jvp (eager)":
            r = X @ w - y
            return np.stack(dask.compute((r * r).sum(), 2 * (r * (X @ np.ones_like(w))).sum()))
        z = X @ w + b
        r = (1 / (1 + da.exp(-z)) - y) / n
        gw, gb = dask.compute(X.T @ r, r.sum())
        state["p"] = (w - LR * gw, b - LR * gb)
        return gw

    run()  # warm up (untimed)
    state["p"] = (w0, b0)
    how = drop_page_cache([params["X"], params["y"]])
    cx.read = cy.read = 0

    def op():
        for _ in range(params["steps"]):
            g = run()
        return g

    def counted() -> dict:
        steps = params["steps"]
        return {"passes": cx.read / zx.nbytes / steps, "read": (cx.read + cy.read) / steps,
                "written": 0, "cache": how}
    return op, lambda g: float(np.linalg.norm(g)), counted


# --- the table ----------------------------------------------------------------------

def _row(case: str, impl: str, r: dict, budget: int, reference: dict) -> list:
    if "error" in r:
        return [case, impl, r["error"][:60]] + [""] * 7
    check = "-"
    if impl == "jask" and "sample" in reference:
        ok = abs(r["sample"] - reference["sample"]) <= REL_TOL * max(abs(reference["sample"]),
                                                                    1e-12)
        check = "ok" if ok else "DIFF"
    return [case, impl, fmt_seconds(r["wall_s"]), f"{r['passes']:.2f}",
            format_bytes(r["read"]), format_bytes(r["written"]),
            f"{r['graphs']:.0f}" if "graphs" in r else "1",
            format_bytes(r["peak_rss"]),
            f"{r['peak_rss'] / budget:.2f}" if impl == "jask" else "", check]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.passes",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="X of 2**19 x 64 (128 MiB) under a 16MB budget: about a minute")
    parser.add_argument("--rows", type=int, default=None, help="default 2**24 (4 GiB X)")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--budget", default=None, help="default 256MB (16MB with --quick)")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--only", default=",".join(CASES), help="cases, comma-separated")
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
    print(f"X: {rows} x {args.features} float32 = {format_bytes(data_bytes)} "
          f"({data_bytes / budget:.1f}x the {format_bytes(budget)} budget), chunks of "
          f"{chunk_rows} rows; {args.steps} step(s) per run, one fresh process per run")
    table, cache = [], set()
    for case in [c.strip() for c in args.only.split(",") if c.strip()]:
        if case not in CASES:
            parser.error(f"unknown case {case!r}; choose from {', '.join(CASES)}")
        scratch = os.path.join(folder, "scratch")
        common = dict(paths, case=case, steps=args.steps, budget=budget, scratch=scratch)
        d = run_case("benchmarks.passes", "dask_case", common, timeout=3600)
        j = run_case("benchmarks.passes", "jask_case", common, timeout=3600)
        shutil.rmtree(scratch, ignore_errors=True)
        cache |= {r["cache"] for r in (d, j) if "cache" in r}
        table.append(_row(case, "jask", j, budget, d))
        table.append(_row(case, "dask", d, budget, {}))
    print(f"before each timed run: {', '.join(sorted(cache)) or 'n/a'}\n")
    print(text_table(["case", "impl", "s/step", "passes X", "read/step", "written/step",
                      "graphs", "peak RSS", "RSS/budget", "check"], table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
