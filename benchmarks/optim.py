"""Optimizer steps on DiskArray parameters: bytes moved, time, disk, RSS.

``python -m benchmarks.optim [--side 4096] [--budget 16MB] [--steps 3]``

A side x side float32 parameter (and its gradient, a fixed DiskArray) at
least 8x the budget; each optimizer of :mod:`jask.optim` runs ``--steps``
jitted steps of ``update`` + ``apply_updates`` after one compiling step.
Per step it counts the bytes every task read and wrote (``jask.track``),
against the least a step must move: one read of the gradient, the state and
the parameter (if the step needs it) and one write of the state and the
parameter, both for ``tx.update`` + ``apply_updates`` and for
``jask.optim.step`` (one fused pass). It also prints the time per step, the
bytes it moved per second, the scratch bytes after each step (flat: no
growing scratch) and the peak RSS above the start of the step.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import jax
import numpy as np
from dask.utils import format_bytes, parse_bytes

import jask
from jask.base.rss import current_rss, peak_rss, reset_peak_rss

#: name -> (transformation, arrays of the param's size the least step reads, writes)
OPTIMIZERS = {
    "sgd": (lambda: jask.optim.sgd(1e-3), 2, 1),
    "sgd momentum": (lambda: jask.optim.sgd(1e-3, momentum=0.9), 3, 2),
    "adam": (lambda: jask.optim.adam(1e-3), 4, 3),
    "adamw": (lambda: jask.optim.adamw(1e-3, weight_decay=1e-4), 4, 3),
}


def _disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f))
               for root, _, files in os.walk(path) for f in files)


def _gradient(path: str, side: int) -> str:
    """A side x side float32 Zarr store of normal noise, written in row bands."""
    import zarr
    if not os.path.exists(path):
        rng = np.random.default_rng(0)
        rows = max(1, 2**20 // side)
        z = zarr.create_array(store=path, shape=(side, side), chunks=(rows, side),
                              dtype="float32", compressors=None)
        for start in range(0, side, rows):
            z[start:start + rows] = rng.standard_normal((min(rows, side - start), side))
    return path


def run(name: str, side: int, steps: int, scratch: str, fused: bool) -> dict:
    make, reads, writes = OPTIMIZERS[name]
    g = jask.open(_gradient(os.path.join(scratch, "g.zarr"), side))
    w = g * 0.0  # a store of jask's own, never whole in memory
    tx = make()
    state = tx.init(w)

    @jax.jit
    def step(w, state, g):
        if fused:
            return jask.optim.step(tx, g, state, w)
        updates, state = tx.update(g, state, w)
        return jask.optim.apply_updates(w, updates), state

    w, state = step(w, state, g)  # compile
    jask.collect()
    nbytes = w.size * 4
    times, moved, disk, rss = [], [], [], []
    for _ in range(steps):
        base = current_rss()
        reset_peak_rss()
        with jask.track() as c:
            start = time.perf_counter()
            w, state = step(w, state, g)
            w.shape  # noqa: B018 - waits for the step
            jax.effects_barrier()
            times.append(time.perf_counter() - start)
        rss.append(peak_rss() - base)
        moved.append((c.bytes_read, c.bytes_written))
        jask.collect()
        disk.append(_disk_bytes(scratch) - _disk_bytes(os.path.join(scratch, "g.zarr")))
    r, wr = moved[-1]
    return {"name": name + (" step" if fused else ""), "param": nbytes, "read": r, "written": wr,
            "ratio": (r + wr) / ((reads + writes) * nbytes), "least": (reads, writes),
            "seconds": float(np.median(times)), "disk": disk, "rss": max(rss)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=4096)
    parser.add_argument("--budget", default="16MB")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated optimizer names")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="jask-bench-optim-")
    try:
        jask.set_memory_budget(args.budget, scratch_dir=scratch)
        budget = parse_bytes(args.budget)
        names = [n for n in OPTIMIZERS if not args.only or n in args.only.split(",")]
        print(f"parameter {args.side}x{args.side} float32 = {format_bytes(args.side**2 * 4)}"
              f" ({args.side**2 * 4 / budget:.1f}x the budget of {args.budget}), "
              f"{args.steps} jitted steps each")
        print("rows: tx.update + apply_updates; '... step': jask.optim.step (one pass)")
        print(f"{'optimizer':>18} {'read':>9} {'written':>9} {'least R+W':>9} {'ratio':>6} "
              f"{'s/step':>7} {'MB/s':>6} {'RSS MB':>7}  scratch bytes after each step")
        for name, fused in [(n, f) for n in names for f in (False, True)]:
            r = run(name, args.side, args.steps, scratch, fused)
            least = f"{r['least'][0]}R+{r['least'][1]}W"
            rate = (r["read"] + r["written"]) / r["seconds"] / 1e6
            print(f"{r['name']:>18} {format_bytes(r['read']):>9} {format_bytes(r['written']):>9} "
                  f"{least:>9} {r['ratio']:6.2f} {r['seconds']:7.2f} {rate:6.0f} "
                  f"{r['rss'] / 1e6:7.1f}  {r['disk']}")
            jask.collect()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
