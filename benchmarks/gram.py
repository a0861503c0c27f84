"""The Gram matrix X.T @ X: jask (eager and jitted) against dask.array and a
numpy memmap, with passes over X and bytes written counted by jask.track.

Run: ``python -m benchmarks.gram [MiB ...]`` (default 50 and 1024). Each
run is a fresh process (``--one``), interleaved, median of 3 (JASK_BENCH_REPEAT); ``sync``
before each, the page cache dropped when running as root.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

COLS = 256


def _prepare(folder: str, mib: int) -> str:
    """X (rows x 256 float32, about ``mib`` MiB) as a Zarr store and a raw file."""
    import zarr

    rows = mib * 2**20 // (COLS * 4)
    path = os.path.join(folder, f"X-{mib}.zarr")
    if not os.path.exists(path):
        z = zarr.create_array(path, shape=(rows, COLS), chunks=(8192, COLS), dtype="float32",
                              compressors=None)
        raw = np.lib.format.open_memmap(os.path.join(folder, f"X-{mib}.npy"), "w+",
                                        np.float32, (rows, COLS))
        rng = np.random.default_rng(0)
        for s in range(0, rows, 65536):
            block = rng.standard_normal((min(65536, rows - s), COLS), dtype=np.float32)
            z[s:s + len(block)] = block
            raw[s:s + len(block)] = block
        raw.flush()
    return path


def _one(tool: str, path: str, budget: str) -> dict:
    """One timed Gram matrix in this process."""
    start = time.perf_counter()
    out: dict = {}
    if tool.startswith("jask"):
        import jax

        import jask
        jask.set_memory_budget(budget)
        X = jask.open(path)
        f = (lambda X: X.T @ X) if tool == "jask" else jax.jit(lambda X: X.T @ X)
        with jask.track() as t:
            start = time.perf_counter()
            G = f(X)
            G.to_numpy()
        out = {"passes": t.passes(X), "written": t.bytes_written}
    elif tool == "dask":
        import dask.array as da
        X = da.from_zarr(path)
        (X.T @ X).compute()
    else:  # numpy on a memmap, in row bands
        X = np.load(path.replace(".zarr", ".npy"), mmap_mode="r")
        G = np.zeros((COLS, COLS), np.float32)
        for s in range(0, X.shape[0], 65536):
            band = np.asarray(X[s:s + 65536])
            G += band.T @ band
    out["seconds"] = time.perf_counter() - start
    return out


def _drop_caches() -> None:
    subprocess.run(["sync"], check=False)
    if os.geteuid() == 0:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError:
            pass


def main(sizes) -> None:
    folder = os.environ.get("JASK_BENCH_DIR") or tempfile.mkdtemp(prefix="jask-gram-")
    for mib in sizes:
        path = _prepare(folder, mib)
        runs: dict = {}
        for _ in range(int(os.environ.get("JASK_BENCH_REPEAT", "3"))):
            for tool in ("jask", "jask-jit", "dask", "numpy-memmap"):
                _drop_caches()
                got = subprocess.run([sys.executable, "-m", "benchmarks.gram", "--one", tool,
                                      path, "256MB"], capture_output=True, text=True, check=True)
                runs.setdefault(tool, []).append(json.loads(got.stdout.splitlines()[-1]))
        for tool, rs in runs.items():
            line = {"MiB": mib, "tool": tool,
                    "median_s": round(statistics.median(r["seconds"] for r in rs), 3)}
            line.update({k: rs[0][k] for k in ("passes", "written") if k in rs[0]})
            print(json.dumps(line))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(_one(sys.argv[2], sys.argv[3], sys.argv[4])))
    else:
        main([int(a) for a in sys.argv[1:]] or [50, 1024])
