"""float32 elementwise accuracy against jax.numpy, and what it costs.

``python -m benchmarks.float32_accuracy`` prints, for every float row of
``tests/test_float32_accuracy.py`` (same inputs, same float64 reference),
the largest error in ulps and the share of results not correctly rounded:
jax.numpy (jitted, XLA on CPU), jask's kernel on the tile, and jask through
a Zarr store. ``--cost`` times ``jask.exp(X).sum()`` over a 256 MiB float32
store, warm (run it once per checkout to compare two).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np
import zarr

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import jask  # noqa: E402
from jask.core import ufuncs  # noqa: E402
from tests.test_float32_accuracy import COMPLEX, DOMAINS, operands, ulps  # noqa: E402


def missed(got, reference) -> float:
    """The share of results that are not the reference rounded to 32 bits
    (over finite references)."""
    reference = np.asarray(reference)
    rounded = reference.astype(np.complex64 if reference.dtype.kind == "c" else np.float32)
    with np.errstate(all="ignore"):
        keep = np.isfinite(rounded)
    return float(np.mean(np.asarray(got)[keep] != rounded[keep]))


def row_errors(name: str, complex_: bool, folder: str) -> dict:
    args = operands(name, complex_)
    row = ufuncs.TABLE[name]
    with np.errstate(all="ignore"):
        reference = row.numpy(*(a.astype(np.result_type(a, np.float64)) for a in args))
        kernel = row.numpy(*args)
    stores = []
    for k, a in enumerate(args):
        path = os.path.join(folder, f"{name}{complex_}{k}.zarr")
        zarr.create_array(store=path, shape=a.shape, dtype=a.dtype, chunks=(700,))[...] = a
        stores.append(jask.open(path))
    f = getattr(jask.nn if name in ("sigmoid", "relu", "softplus") else jask, name)
    results = {"jax.numpy": np.asarray(jax.jit(row.jnp)(*args)), "kernel": kernel,
               "store": f(*stores).to_numpy()}
    return {who: (ulps(got, reference), missed(got, reference)) for who, got in results.items()}


def accuracy() -> None:
    print(f"jask from {jask.__file__}\n")
    print("| row | jax.numpy ulp (not c.r.) | jask kernel | jask store |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        cases = [(n, False) for n in sorted(DOMAINS)] + [(n, True) for n in COMPLEX]
        for name, complex_ in cases:
            e = row_errors(name, complex_, folder)
            cells = " | ".join(f"{u:.2f} ({m:.1%})" for u, m in e.values())
            print(f"| {name}{' c64' if complex_ else ''} | {cells} |", flush=True)


def cost(repeats: int) -> None:
    n = 256 * 2**20 // 4
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "x.zarr")
        z = zarr.create_array(store=path, shape=(n // 1024, 1024), dtype=np.float32,
                              chunks=(4096, 1024), compressors=None)
        rng = np.random.default_rng(0)
        for start in range(0, z.shape[0], 4096):
            z[start:start + 4096] = rng.uniform(-10, 10, (4096, 1024)).astype(np.float32)
        x = jask.open(path)
        float(jask.exp(x).sum())  # warm: page cache, compiled plans
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            float(jask.exp(x).sum())
            times.append(time.perf_counter() - t)
    print(f"jask.exp(X).sum(), 256 MiB float32, warm: median {statistics.median(times):.3f} s "
          f"(runs {', '.join(f'{t:.3f}' for t in times)}), jask from {jask.__file__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost", action="store_true", help="time jask.exp(X).sum() instead")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cost(args.repeats) if args.cost else accuracy()


if __name__ == "__main__":
    main()
