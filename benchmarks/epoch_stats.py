"""The ``stat`` calls of ``jask.batches`` over a store of many small chunk files.

``python -m benchmarks.epoch_stats [--quick] [--files 20000] [--rows 64] [--epochs 3]
[--against PATH ...]``

One uncompressed Zarr store X (``files`` chunk files of ``rows`` rows x 4
float32) and its labels in memory, read by a host feed (numpy batches,
shuffled, ``epochs`` epochs in one iteration): the ``os.stat`` calls on X's
chunk files per epoch (each epoch keeps to one version of the store: a check
after each window's reads, and at an epoch's start of the files held open),
and the iteration's wall time, best of 3 (a run of its own, no counting).
``--against``: the same measured with each other checkout's ``jask`` (a
repository root), one run after another, side by side in one table.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time


def _child(folder: str, epochs: int, repeats: int) -> dict:
    import numpy as np

    import jask

    assert jask.__file__.startswith(os.environ["PYTHONPATH"]), jask.__file__
    X = jask.open(os.path.join(folder, "X.zarr"))
    y = np.arange(X.shape[0])
    batch = 4096

    def iterate() -> int:
        loader = jask.batches(X, y, batch_size=batch, seed=0, epochs=epochs)
        n = sum(1 for _ in loader)
        loader.close()
        return n

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = iterate()
        times.append(time.perf_counter() - t0)
    # counted in a run of its own: the count's wrapper is not timed
    import jask.store.chunkio as chunkio
    root = os.path.join(folder, "X.zarr", "c")
    counts: collections.Counter = collections.Counter()
    stat = os.stat

    def counted(path, *args, **kwargs):
        if isinstance(path, str) and path.startswith(root):
            counts[path] += 1
        return stat(path, *args, **kwargs)

    chunkio.os.stat = counted
    try:
        iterate()
    finally:
        chunkio.os.stat = stat
    return {"batches": n, "best_s": min(times), "times_s": times, "stats": sum(counts.values()),
            "files_stated": len(counts)}


def _make(folder: str, files: int, rows: int) -> None:
    import numpy as np
    import zarr

    z = zarr.create_array(os.path.join(folder, "X.zarr"), shape=(files * rows, 4),
                          chunks=(rows, 4), dtype="f4", compressors=None)
    z[:] = np.arange(files * rows * 4, dtype=np.float32).reshape(-1, 4)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.epoch_stats",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2,000 chunk files")
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--against", nargs="*", default=[], help="other checkouts' roots")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.epochs, 3)))
        return
    files = 2000 if args.quick else args.files
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as folder:
        _make(folder, files, args.rows)
        print(f"X: {files} chunk files of {args.rows} rows x 4 float32; host feed, "
              f"{args.epochs} epochs in one iteration")
        print(f"{'jask from':<40} {'stats':>8} {'per epoch':>10} {'best s':>8}  times s")
        for root in [here, *args.against]:
            # run as a script (not -m, which puts the working folder first): jask from root
            env = dict(os.environ, PYTHONPATH=root)
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", folder,
                 "--epochs", str(args.epochs)], env=env, cwd=folder, check=True,
                capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"{root:<40} {r['stats']:>8} {r['stats'] / args.epochs:>10.0f} "
                  f"{r['best_s']:>8.3f}  {' '.join(f'{t:.3f}' for t in r['times_s'])}")


if __name__ == "__main__":
    main()
