"""CLI: ``python -m benchmarks [--quick] [--budget 512MB] [--out FILE]``.

Measures jask, dask.array and a numpy/memmap loop side by side on the same
inputs, next to the machine's raw I/O and BLAS limits, and prints one table.
See ``benchmarks/README.md`` for what every column means.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from dask.utils import parse_bytes

from benchmarks import cases, data, limits, report
from benchmarks.measure import run_case, run_json

IMPLS = ("jask", "dask", "numpy")
MODES = {
    "quick": {"side": 4096, "dot_side": 2048, "budget": "32MB", "timeout": 600,
              "timing": {"min_calls": 5, "max_calls": 200, "max_seconds": 0.2}},
    "full": {"side": 32768, "dot_side": 16384, "budget": "512MB", "timeout": 7200,
             "timing": {"min_calls": 20, "max_calls": 2000, "max_seconds": 1.0}},
}
LR = 0.01


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="~64 MiB arrays, 32MB budget")
    p.add_argument("--budget", help="memory budget, e.g. 512MB (default per mode)")
    p.add_argument("--out", help="also write the report as markdown to this file")
    p.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), ".bench_data"), help="inputs/outputs/scratch (on disk)")
    p.add_argument("--side", type=int, help="override square array side")
    p.add_argument("--dot-side", type=int, help="override dot operand side")
    p.add_argument("--only", help="comma-separated row labels to run (e.g. add,dot)")
    p.add_argument("--impls", default=",".join(IMPLS), help="subset of jask,dask,numpy")
    p.add_argument("--no-small", action="store_true", help="skip the small-array section")
    p.add_argument("--clean-data", action="store_true", help="delete inputs at the end")
    return p.parse_args(argv)


def make_config(args) -> dict:
    """Resolve sizes, budget and paths for this run."""
    mode = dict(MODES["quick" if args.quick else "full"])
    side = args.side or mode["side"]
    dot_side = args.dot_side or mode["dot_side"]
    root = os.path.abspath(args.data_dir)
    budget = parse_bytes(args.budget or mode["budget"])
    # The shared inputs are chunked as jask would chunk them for this budget,
    # so every implementation reads the same, budget-sized chunks.
    chunk = _jask_chunk(side, budget)
    dot_chunk = _jask_chunk(dot_side, budget)
    return {
        "mode": "quick" if args.quick else "full",
        "budget": budget,
        "root": root, "out": os.path.join(root, "out"),
        "scratch": os.path.join(root, "scratch"),
        "specs": data.input_specs(os.path.join(root, "inputs"), side, chunk,
                                  dot_side, dot_chunk),
        "timeout": mode["timeout"], "timing": mode["timing"],
        "impls": [i for i in args.impls.split(",") if i],
        "rows": [r for r in cases.ROWS if not args.only or r.label in args.only.split(",")],
    }


def _jask_chunk(side: int, budget: int) -> int:
    """Side of the square chunk jask gives a side x side float32 store."""
    from jask.base import memory
    return memory.chunk_shape((side, side), 4, memory.chunk_bytes(budget, os.cpu_count() or 1))[0]


def fresh_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def run_one(cfg: dict, row, impl: str) -> dict:
    """Prepare clean out/scratch dirs (and target copy), evict inputs, run one case."""
    fresh_dir(cfg["out"])
    fresh_dir(cfg["scratch"])
    inputs = {n: cfg["specs"][n].params() for n in row.inputs}
    params = {"op": row.op, "inputs": inputs, "out": cfg["out"], "budget": cfg["budget"],
              "scratch": cfg["scratch"], "lr": LR, "target": None}
    if row.target:
        params["target"] = data.copy_input(cfg["specs"][row.target].params(), cfg["out"])
    for spec in inputs.values():
        data.evict(spec["zarr"])
        data.evict(spec["raw"])
    try:
        return run_case("benchmarks.cases", cases.CASE_FUNCS[impl], params, cfg["timeout"])
    finally:
        shutil.rmtree(cfg["out"], ignore_errors=True)
        shutil.rmtree(cfg["scratch"], ignore_errors=True)


def row_work(cfg: dict, row) -> tuple:
    """(bytes read, bytes written, flops) that any implementation must do."""
    specs = cfg["specs"]
    read = sum(specs[n].nbytes for n in row.inputs)
    first = specs[row.inputs[0]]
    if row.op == "sum":
        return read, 0, 0
    if row.op == "train":
        n, d = first.shape
        w = specs["w0"].nbytes
        return read + w, w, 4 * n * d
    flops = 2 * first.shape[0] ** 3 if row.op == "dot" else 0
    return read, first.nbytes, flops


def limit_seconds(cfg: dict, lim: dict, row) -> float:
    """Lower bound time: max(raw I/O of the row's bytes, its flops at BLAS speed)."""
    read, written, flops = row_work(cfg, row)
    io = read / 1e9 / lim["io"]["read_cold_GBps"] + written / 1e9 / lim["io"]["write_GBps"]
    return max(io, flops / 1e9 / lim["blas"]["GFLOPs"])


def measure_limits(cfg: dict) -> dict:
    log("measuring raw I/O and BLAS limits ...")
    os.makedirs(cfg["root"], exist_ok=True)
    n_io = cfg["specs"]["x"].nbytes
    return {"io": limits.raw_io(cfg["root"], n_io),
            "blas": limits.blas_gflops(min(cfg["specs"]["a"].shape[0], 4096))}


MAIN_HEADERS = ["op", "shape", "jask s", "jask RSS", "dask s", "dask RSS", "numpy s",
                "numpy RSS", "limit s", "jask/dask", "jask/limit", "RSS/budget", "check"]


def main_row(cfg, lim, row, results, notes) -> list:
    """Table cells for one row (time, RSS per impl, then the ratios)."""
    cells = [row.label, "x".join(map(str, cfg["specs"][row.inputs[0]].shape))]
    for impl in IMPLS:
        r = results.get(impl, {"error": "not run"})
        if "error" in r:
            cells += [notes.mark(f"{impl}: {r['error']}"), "n/a"]
        else:
            cells += [report.fmt_seconds(r["wall_s"]), report.fmt_mib(r["peak_rss"])]
    t_lim = limit_seconds(cfg, lim, row)
    jask, dask = results.get("jask", {}), results.get("dask", {})
    tj = jask.get("wall_s")
    cells += [report.fmt_seconds(t_lim),
              report.fmt_ratio(tj / dask["wall_s"] if tj and "wall_s" in dask else None),
              report.fmt_ratio(t_lim / tj if tj else None, percent=True),
              report.fmt_ratio(jask["peak_rss"] / cfg["budget"] if tj else None),
              report.check_samples(results)]
    return cells


SMALL_COLS = ["jask eager", "jask jit", "jnp eager", "jnp jit"]


def small_rows(cfg: dict, notes) -> list:
    """Run the small-array section in its own process; return table rows."""
    log("small-array latency ...")
    fresh_dir(cfg["scratch"])
    params = {"sizes": [4, 100, 256], "budget": cfg["budget"], "scratch": cfg["scratch"],
              "timing": cfg["timing"]}
    try:
        res = run_json("benchmarks.small", "run_small", params, cfg["timeout"])
    finally:
        shutil.rmtree(cfg["scratch"], ignore_errors=True)
    if isinstance(res, dict):
        return [["all", "-"] + [notes.mark(f"small: {res['error']}")] * 4 + ["n/a"] * 2]
    rows = []
    for r in res:
        vals = [r.get(c) for c in SMALL_COLS]
        cells = [report.fmt_seconds(v) if isinstance(v, float)
                 else notes.mark(f"small {c.split()[0]}: {v}") for v, c in zip(vals, SMALL_COLS)]
        ratio = [v[0] / v[1] if all(isinstance(x, float) for x in v) else None
                 for v in ((vals[0], vals[2]), (vals[1], vals[3]))]
        rows.append([r["op"], f"{r['n']}x{r['n']}"] + cells + [report.fmt_ratio(x) for x in ratio])
    return rows


def render(cfg, lim, main, small, notes, idle_rss, markdown=False) -> str:
    """The full report as text (or markdown)."""
    table = report.markdown_table if markdown else report.text_table
    io, blas = lim["io"], lim["blas"]
    lines = [
        f"jask benchmark ({cfg['mode']} mode), budget {cfg['budget'] / 1e6:.0f} MB, "
        f"{os.cpu_count()} cores, data in {cfg['root']}",
        f"limits: write {io['write_GBps']:.2f} GB/s (with fsync {io['write_fsync_GBps']:.2f}), "
        f"cold read {io['read_cold_GBps']:.2f} GB/s (warm {io['read_warm_GBps']:.2f}) "
        f"over {io['bytes'] / 2**20:.0f} MiB; numpy BLAS sgemm {blas['GFLOPs']:.1f} GFLOP/s "
        f"(n={blas['n']})",
        f"idle RSS after importing jax+dask+zarr: {report.fmt_mib(idle_rss)}; "
        "RSS columns are peak RSS of the timed op above the RSS just before it",
        "", table(MAIN_HEADERS, main), ""]
    if small:
        lines += ["small arrays: median latency per call", "",
                  table(["op", "shape"] + SMALL_COLS + ["eager jask/jnp", "jit jask/jnp"], small),
                  ""]
    if notes.notes:
        lines += ["notes:", notes.render()]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = make_config(args)
    t0 = time.perf_counter()
    log(f"preparing inputs in {cfg['specs']['x'].root} ...")
    data.prepare_inputs(cfg["specs"], log=log)
    lim = measure_limits(cfg)
    notes, main_table, idle = report.Footnotes(), [], None
    for row in cfg["rows"]:
        results = {}
        for impl in cfg["impls"]:
            log(f"{row.label:14s} {impl:5s} ...")
            results[impl] = run_one(cfg, row, impl)
            idle = idle or results[impl].get("idle_rss")
        main_table.append(main_row(cfg, lim, row, results, notes))
    small = [] if args.no_small else small_rows(cfg, notes)
    print(render(cfg, lim, main_table, small, notes, idle))
    if args.out:
        with open(args.out, "w") as f:
            f.write(render(cfg, lim, main_table, small, notes, idle, markdown=True) + "\n")
    if args.clean_data:
        shutil.rmtree(cfg["root"], ignore_errors=True)
    log(f"done in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
