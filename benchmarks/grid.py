"""The chunking grid: time and peak RSS per input chunking, jask against
dask.array on the same stores, with jask's modelled bytes (the calibration
of :mod:`jask.base.memory`).

``python -m benchmarks.grid [--budget 16MB] [--side 4096] [--cells "B/4,zstd B/8"]``

Each cell of ``tests/scripts/chunk_grid.py`` (chunks of budget/64 to
budget/2, zstd, sharded, v2 F-order, two grids) is written once; jask runs
every op of ``tests/scripts/bounded_memory.py`` in one fresh process per
cell and group of ops (as tests/test_memory_bound.py), dask.array the same
ops (``from_zarr`` -> op -> ``to_zarr``, threaded scheduler) in another.
Peaks are above each process's warmed-up baseline, after returning freed
heap pages (``malloc_trim``) before every op.
``--urls``: jask reads the cells' inputs from s3:// URLs on a local moto
server (``tests/s3server.py``; ``tests/scripts/url_grid.py`` uploads them), no dask columns.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time

from dask.utils import parse_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(os.path.dirname(HERE), "tests", "scripts")
sys.path.insert(0, SCRIPTS)
import chunk_grid  # noqa: E402

DASK_OPS = ("add", "sub", "mul", "mul by scalar", "square", "transpose", "sum", "dot", "update_")


def dask_cell(folder: str) -> dict:
    """The grid's ops with dask.array on one cell's stores (run in a fresh process)."""
    import dask
    import dask.array as da
    import numpy as np
    import zarr

    from jask.base.rss import current_rss, peak_rss, reset_peak_rss

    def trim():
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass

    a = da.from_zarr(os.path.join(folder, "a.zarr"))
    b = da.from_zarr(os.path.join(folder, "b.zarr"))
    v = da.ones((a.shape[1], 64), dtype=np.float32, chunks=(a.chunks[1][0], 64))
    out = os.path.join(folder, "dask-out")

    def store(x):
        shutil.rmtree(out, ignore_errors=True)
        return da.to_zarr(x, out, overwrite=True)

    ops = {"add": lambda: store(a + b), "sub": lambda: store(a - b), "mul": lambda: store(a * b),
           "mul by scalar": lambda: store(0.5 * a), "square": lambda: store(da.square(a)),
           "transpose": lambda: store(a.T), "sum": lambda: float(a.sum()),
           "dot": lambda: store(a @ v), "update_": lambda: store(a.rechunk(b.chunksize))}
    with dask.config.set(scheduler="threads"):
        (da.ones((8, 8), chunks=4) + 1).sum().compute()  # warm the pool
        trim()
        baseline = current_rss()
        results = {}
        for name in DASK_OPS:
            trim()
            reset_peak_rss()
            start = time.perf_counter()
            ops[name]()
            results[name] = {"seconds": time.perf_counter() - start,
                             "peak": peak_rss() - baseline}
    shutil.rmtree(out, ignore_errors=True)
    zarr  # noqa: B018 - imported for from_zarr's sake
    return results


def _run(args: list[str], timeout: int = 1800, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "PYTHONPATH": os.path.dirname(HERE),
                                               **(env or {})})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.grid")
    p.add_argument("--budget", default="16MB")
    p.add_argument("--side", type=int, default=4096)
    p.add_argument("--cells", help="comma-separated cell names (default: all)")
    p.add_argument("--data-dir", default=os.path.join(os.path.dirname(HERE), ".bench_data", "grid"))
    p.add_argument("--dask-cell", help=argparse.SUPPRESS)
    p.add_argument("--urls", action="store_true",
                   help="read the inputs from s3:// URLs on a local moto server (no dask)")
    args = p.parse_args(argv)
    if args.dask_cell:
        print(json.dumps(dask_cell(args.dask_cell)))
        return 0
    budget = parse_bytes(args.budget)
    grid = chunk_grid.cells(budget, args.side)
    names = args.cells.split(",") if args.cells else list(grid)
    print(f"chunking grid: {args.side}x{args.side} float32 inputs, budget {budget / 1e6:.0f} MB; "
          "peak RSS above the warmed-up baseline; model = jask's planned bytes "
          "(per task x tasks at once + fixed), the largest of the op's graphs")
    print(f"{'cell':>12} {'chunks':>12} {'op':>15} {'jask s':>7} {'jask MB':>8} {'model MB':>8} "
          f"{'meas/model':>10} {'dask s':>7} {'dask MB':>8}")
    server, bucket = None, ""
    if args.urls:  # a moto S3 server process on 127.0.0.1, stopped at exit
        import atexit

        import url_grid
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
        from s3server import S3Server
        server = S3Server().start()
        atexit.register(server.stop)
        os.environ.update(server.env)
        bucket = server.make_bucket()
    for name in names:
        folder = os.path.join(args.data_dir, name.replace("/", "_"))
        chunk_grid.write_cell(folder, grid[name], args.side)
        if server:
            url_grid.upload_cell(folder, bucket)
        jask: dict = {}
        for phase in ("", "lazy", "views", "step"):  # each in a fresh process, as the test
            jask.update(_run([os.path.join(SCRIPTS, "bounded_memory.py"), args.data_dir,
                              str(budget), name.replace("/", "_")],
                             env={"JASK_GRID_URL": bucket, "JASK_GRID_PHASE": phase}
                             )["cells"][name.replace("/", "_")])
        dask = {} if server else _run(["-m", "benchmarks.grid", "--dask-cell", folder])
        chunks = "x".join(map(str, grid[name]["a"]["chunks"]))
        for op, r in jask.items():
            d = dask.get(op, {})
            dcols = (f"{d['seconds']:7.2f} {d['peak'] / 1e6:8.1f}" if d else f"{'-':>7} {'-':>8}")
            if "refused" in r:
                print(f"{name:>12} {chunks:>12} {op:>15} {'refused':>7} {'':>8} {'':>8} {'':>10} "
                      f"{dcols}")
                continue
            print(f"{name:>12} {chunks:>12} {op:>15} {r['seconds']:7.2f} {r['peak'] / 1e6:8.1f} "
                  f"{r['modelled'] / 1e6:8.1f} {r['peak'] / max(r['modelled'], 1):10.2f} {dcols}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
