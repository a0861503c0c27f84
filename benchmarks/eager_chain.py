"""Issue 19's notebook chain, eager vs jit vs dask.array, each run in a fresh process.

    mu, sd = X.mean(0), X.std(0); Z = (X - mu) / sd; float(jask.sum(Z * Z))

``python benchmarks/eager_chain.py DIR [GIB] [REPEATS]`` writes ``DIR/X.zarr``
(float32, 1024 columns, GIB GiB, chunks as jask makes them), then runs each
mode in its own process, interleaved, ``sync`` before each run, and prints
one JSON line per run and the medians: seconds, passes over X and bytes
written (``jask.track``; dask.array's are not counted). Modes: ``eager``
(lazy, the default), ``eager-off`` (``lazy=False``: every op at its call),
``jit`` and ``dask``. The page cache is left warm (the machine is shared).
"""
import json
import os
import statistics
import subprocess
import sys
import time

BUDGET = "1GiB"
COLS = 1024
MODES = ("eager", "eager-off", "jit", "dask")


def make(path: str, gib: float) -> None:
    import numpy as np
    import zarr

    import jask
    from jask.base import memory
    rows = int(gib * 2**30) // (COLS * 4)
    jask.set_memory_budget(BUDGET, scratch_dir=os.path.join(os.path.dirname(path), "scratch"))
    cfg = jask.get_config()
    chunks = memory.default_chunks((rows, COLS), np.float32, cfg.max_memory, cfg.workers)
    z = zarr.create_array(path, shape=(rows, COLS), chunks=chunks, dtype="float32",
                          compressors=None, overwrite=True)
    rng = np.random.default_rng(0)
    band = max(chunks[0], 2**26 // (COLS * 4) // chunks[0] * chunks[0])
    for start in range(0, rows, band):
        n = min(band, rows - start)
        z[start:start + n] = rng.standard_normal((n, COLS), np.float32) * 2 + 3


def run(path: str, mode: str) -> dict:
    start = time.perf_counter()
    if mode == "dask":
        import dask.array as da
        X = da.from_zarr(path)
        mu, sd = X.mean(0), X.std(0)
        Z = (X - mu) / sd
        value = float((Z * Z).sum())
        return {"mode": mode, "seconds": time.perf_counter() - start, "value": value}
    import jax

    import jask
    jask.set_memory_budget(BUDGET, scratch_dir=os.path.join(os.path.dirname(path), "scratch"),
                           lazy=mode == "eager")
    X = jask.open(path)

    def chain(X):
        mu, sd = X.mean(0), X.std(0)
        Z = (X - mu) / sd
        return jask.sum(Z * Z)

    start = time.perf_counter()
    with jask.track() as t:
        value = float(jax.jit(chain)(X) if mode == "jit" else chain(X))
    return {"mode": mode, "seconds": time.perf_counter() - start, "value": value,
            "passes": t.passes(X), "written": t.bytes_written, "ran": t.ran}


def main(folder: str, gib: float = 1.0, repeats: int = 3) -> None:
    path = os.path.join(folder, "X.zarr")
    if not os.path.exists(path):
        make(path, gib)
    runs: dict = {m: [] for m in MODES}
    for _ in range(repeats):
        for mode in MODES:
            subprocess.run(["sync"])
            out = subprocess.run([sys.executable, __file__, "--run", path, mode],
                                 capture_output=True, text=True, check=True)
            report = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(report), flush=True)
            runs[mode].append(report)
    print(json.dumps({m: {"median_s": statistics.median(r["seconds"] for r in rs),
                          "passes": rs[0].get("passes"), "written": rs[0].get("written")}
                      for m, rs in runs.items()}))


if __name__ == "__main__":
    if sys.argv[1] == "--run":
        print(json.dumps(run(sys.argv[2], sys.argv[3])))
    else:
        main(sys.argv[1], *(float(a) for a in sys.argv[2:3]), *(int(a) for a in sys.argv[3:4]))
