"""Accuracy of reductions against jax.numpy's, and what float64 accumulation costs.

``python -m benchmarks.reduction_accuracy [--sizes 1e3,1e5,1e6] [--no-speed]``

Part one runs every case of ``tests/accuracy_table.py`` (the table
``tests/test_reduction_accuracy.py`` checks) and prints, per reduction, its
worst error over dtypes, sizes, data, chunkings, budgets and modes, in ulps
of the result's dtype against a float64 numpy reference, beside jax.numpy's
error on the same case, and the worst ratio jask / jax.numpy over all cases
(jax.numpy's error counted as at least half an ulp, the error of a
correctly rounded result, so that an exact jax.numpy gives a finite ratio).

Part two times a tile's partial sum over its rows: float64 accumulation
(``np.add.reduce(tile, axis, dtype=np.float64)``, what jask does) against
the float32 sum it replaced, on 4 MiB float32 tiles; then ``jask.sum(X,
axis=0)`` of a 256 MiB store in the page cache with each of the two, in
interleaved runs (the median of each).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import timeit

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import accuracy_table as table  # noqa: E402

import jask  # noqa: E402
from jask.engine.ops import reductions as reducers  # noqa: E402


def accuracy(sizes: tuple, folder: str) -> None:
    worst: dict = {}
    for row, dtype, size, data in table.cases(sizes):
        m = table.measure(row, dtype, size, data, folder, os.path.join(folder, "scratch"))
        ratio = m.worst / max(m.jnp, 0.5)
        best = worst.get(row.name)
        if best is None or ratio > best[0]:
            worst[row.name] = (ratio, m)
    print(f"sizes {', '.join(f'{s:.0e}' for s in sizes)} elements; "
          f"chunkings x budgets {table.BUDGETS} x eager/jit")
    print(f"{'reduction':16s} {'worst jask/jnp':>14s}  {'jask ulps':>9s} {'jnp ulps':>9s}  case")
    for name, (ratio, m) in worst.items():
        print(f"{name:16s} {ratio:14.2f}  {m.worst:9.2f} {m.jnp:9.2f}  "
              f"{m.dtype} {m.size:.0e} {m.data}")


def _float32_sum(block, axis):
    """The partial sum jask used before: in the block's own dtype, then widened."""
    total = np.sum(block, axis=axis, keepdims=True)
    return total.astype(np.float64 if total.dtype.kind == "f" else total.dtype, copy=False)


def tile_speed() -> None:
    rng = np.random.default_rng(0)
    print("\ntile of 4 MiB float32: partial sum, float64 accumulation vs float32 sum")
    for columns in (4, 64, 1024):
        tile = rng.random(((1 << 20) // columns, columns), dtype=np.float32)
        for axis in ((0,), (1,)):
            new = min(timeit.repeat(lambda: reducers._wide_sum(tile, axis), number=5,
                                    repeat=7)) / 5
            old = min(timeit.repeat(lambda: _float32_sum(tile, axis), number=5, repeat=7)) / 5
            print(f"  {tile.shape!s:>14s} axis {axis[0]}: float64 {new * 1e3:6.2f} ms, "
                  f"float32 {old * 1e3:6.2f} ms, ratio {new / old:4.2f}")


def store_speed(folder: str, reps: int = 5) -> None:
    rows, columns = 1 << 24, 4  # 256 MiB of float32
    path = os.path.join(folder, "speed.zarr")
    jask.set_memory_budget("64MB", scratch_dir=os.path.join(folder, "scratch"))
    import zarr
    z = zarr.create_array(store=path, shape=(rows, columns), chunks=(1 << 18, columns),
                          dtype="f4", compressors=None)
    step = 1 << 20
    for i in range(0, rows, step):
        z[i:i + step] = np.random.default_rng(i).random((step, columns), dtype=np.float32)
    X = jask.open(path)
    new = reducers.REDUCERS["sum"]
    old = new._replace(reduce=_float32_sum)
    times: dict = {"float64": [], "float32": []}
    float(jask.sum(X, axis=0)[0])  # the page cache, and jask's caches, warm
    for _ in range(reps):
        for name, reducer in (("float64", new), ("float32", old)):
            reducers.REDUCERS["sum"] = reducer
            start = time.perf_counter()
            float(jask.sum(X, axis=0)[0])
            times[name].append(time.perf_counter() - start)
    reducers.REDUCERS["sum"] = new
    f64, f32 = statistics.median(times["float64"]), statistics.median(times["float32"])
    print(f"\njask.sum(X, axis=0), X {rows} x {columns} float32 (256 MiB, page cache), "
          f"median of {reps}: float64 {f64 * 1e3:.0f} ms, float32 {f32 * 1e3:.0f} ms, "
          f"ratio {f64 / f32:.2f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e3,1e5,1e6",
                        help="sizes in elements, comma separated (default 1e3,1e5,1e6)")
    parser.add_argument("--no-speed", action="store_true", help="skip the timings")
    args = parser.parse_args(argv)
    sizes = tuple(int(float(s)) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory() as folder:
        accuracy(sizes, folder)
        if not args.no_speed:
            tile_speed()
            store_speed(folder)


if __name__ == "__main__":
    main()
