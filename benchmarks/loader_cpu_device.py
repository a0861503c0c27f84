"""The loader on JAX's CPU device, before and after issue 44's host cut.

``jask.batches(..., device=jax.devices("cpu")[0])`` used to copy whole
windows to the CPU device and gather each batch there with compiled takes,
its device windows counted in the host's half of the budget; it now cuts
batches on the host as numpy ones and puts each there
(``jask.api.batches.HOST_CUT_PLATFORMS``). This runs, in one process and
interleaved, a shuffled epoch of numpy batches, of the device feed
(``HOST_CUT_PLATFORMS = ()``, the path before) and of the host cut, at the
sizes of ``notebooks/accelerator_training.ipynb`` on a CPU machine: X
1,000,000 x 64 float32 (244 MiB, uncompressed, chunks of 1/64 of the budget),
y float32, batches of 1,024, page cache warm.

Run: ``python -m benchmarks.loader_cpu_device [--budget 64MB 32MB] [--repeat 3]``.
Prints a markdown table.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROWS, FEATURES, BATCH = 1_000_000, 64, 1024


def prepare(folder: str, budget: int) -> tuple[str, str]:
    """X (sorted by nothing: the rate does not depend on the values) and y."""
    import zarr
    chunk = max(1024, budget // 64 // (FEATURES * 4))
    x_path = os.path.join(folder, f"X-{chunk}.zarr")
    y_path = os.path.join(folder, f"y-{chunk}.zarr")
    if not os.path.exists(os.path.join(y_path, "zarr.json")):
        X = zarr.create_array(x_path, shape=(ROWS, FEATURES), chunks=(chunk, FEATURES),
                              dtype="float32", compressors=None, overwrite=True)
        y = zarr.create_array(y_path, shape=(ROWS,), chunks=(chunk,), dtype="float32",
                              compressors=None, overwrite=True)
        rng = np.random.default_rng(0)
        for start in range(0, ROWS, 100_000):
            x = rng.standard_normal((100_000, FEATURES)).astype(np.float32)
            X[start:start + 100_000] = x
            y[start:start + 100_000] = x[:, 0] > 0
    return x_path, y_path


def run(folder: str, budget_text: str, repeat: int) -> list[str]:
    import jax

    import jask
    import jask.api.batches as loader_module
    jask.set_memory_budget(budget_text, scratch_dir=os.path.join(folder, "scratch"))
    budget = jask.get_config().max_memory
    X, y = (jask.open(p) for p in prepare(folder, budget))
    cpu = jax.devices("cpu")[0]
    cases = [("numpy batches (`device=None`)", None, ("cpu",)),
             ("`device=cpu`, windows copied and gathered on the device (before)", cpu, ()),
             ("`device=cpu`, cut on the host and put (after)", cpu, ("cpu",))]
    rates: dict[str, list[float]] = {}
    held: dict[str, str] = {}
    saved = loader_module.HOST_CUT_PLATFORMS
    try:
        for _ in range(repeat):
            for name, device, platforms in cases:
                loader_module.HOST_CUT_PLATFORMS = platforms
                loader = jask.batches(X, y, batch_size=BATCH, shuffle=True, seed=0,
                                      device=device)
                start, last = time.perf_counter(), None
                for xb, _yb in loader:
                    last = xb
                if device is not None:
                    jax.block_until_ready(last)
                seconds = time.perf_counter() - start
                rates.setdefault(name, []).append((X.nbytes + y.nbytes) / seconds / 1e6)
                p = loader.plan
                held[name] = (f"runs of {p.unit} rows, windows of {p.unit * p.window} rows; "
                              f"{loader.held_bytes / 1e6:.1f} MB host, "
                              f"{loader.device_bytes / 1e6:.1f} MB device")
    finally:
        loader_module.HOST_CUT_PLATFORMS = saved
    return [f"| {budget_text} | {name} | {min(r):.0f}-{max(r):.0f} MB/s | {held[name]} |"
            for name, r in rates.items()]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loader_cpu_device")
    p.add_argument("--budget", nargs="+", default=["64MB", "32MB"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "jask-loader-cpu"))
    args = p.parse_args(argv)
    os.makedirs(args.data_dir, exist_ok=True)
    print(f"(load {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores; X {ROWS} x {FEATURES} "
          f"float32, batches of {BATCH}, shuffled; min-max of {args.repeat} epochs)\n")
    print("| budget | loader | rate (X + y) | what it holds |\n|---|---|---|---|")
    for budget in args.budget:
        for line in run(args.data_dir, budget, args.repeat):
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
