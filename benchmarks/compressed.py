"""Compressed and sharded stores against dask.array on the same stores.

``python -m benchmarks.compressed [--size 4096] [--budget 32MB] [--kinds zstd,sharded,plain]
[--ops sum,matmul] [--engines jask,dask] [--jask /path/to/other/checkout]``

The same data (``a``, ``b``: size x size float32, low mantissa bits zeroed
so that zstd has something to compress) is written three ways: zstd
512x512 chunks, zstd 512x512 inner chunks in 2048x2048 shards, and
uncompressed 512x512 chunks. For each, one fresh process runs every op with
jask under the budget and another with dask.array (``da.from_zarr``,
threaded scheduler; results written uncompressed as jask's scratch is,
``save`` with zstd in both, then synced to disk as ``jask.save`` syncs it).
Per op: seconds, the ratio jask / dask (wall clock, and CPU time of the
process: on a shared machine the CPU ratio drifts less), chunk decodes per
input chunk (jask's stored bytes read from the inputs, from ``jask.track``,
over the bytes of their chunks: 1.0 means each chunk was decoded once) and
peak RSS above the warmed-up baseline against the budget. Default size
(inputs twice the budget) runs in about two minutes on two cores;
``--size 8192`` is the 8x-budget case of issue 19.
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

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ("sum", "elementwise", "dot X@w", "X.T@g", "matmul", "slice+sum", "save")
KINDS = {
    "zstd": dict(chunks=(512, 512), compressors="zstd"),
    "sharded": dict(chunks=(512, 512), shards=(2048, 2048), compressors="zstd"),
    "plain": dict(chunks=(512, 512), compressors=None),
}
#: Columns of the in-memory operands (``w`` for ``X @ w``, ``g`` for ``X.T @ g``).
COLS = 64


def _codecs(spec: dict) -> dict:
    import zarr
    spec = dict(spec)
    if spec.get("compressors") == "zstd":
        spec["compressors"] = zarr.codecs.ZstdCodec(level=3)
    return spec


def write_data(folder: str, kind: str, size: int) -> None:
    """``a`` and ``b`` of one kind, written once (the same numbers every kind)."""
    import numpy as np
    import zarr
    os.makedirs(folder, exist_ok=True)
    for seed, name in enumerate(("a", "b")):
        path = os.path.join(folder, f"{name}.zarr")
        if os.path.exists(path):
            continue
        z = zarr.create_array(store=path + ".tmp", shape=(size, size), dtype="float32",
                              **_codecs(KINDS[kind]))
        rng = np.random.default_rng(seed)
        band = 2048
        for start in range(0, size, band):
            stop = min(start + band, size)
            x = rng.standard_normal((stop - start, size), dtype=np.float32)
            z[start:stop] = (x.view(np.uint32) & np.uint32(0xFFFFF000)).view(np.float32)
        os.rename(path + ".tmp", path)


def chunk_bytes(path: str) -> int:
    """Bytes of a store's chunks as stored (a shard's index left out)."""
    import zarr
    z = zarr.open_array(path, mode="r")
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            if not f.startswith("zarr.json") and not f.startswith("."):
                total += os.path.getsize(os.path.join(root, f))
    if getattr(z, "shards", None):
        per = 1
        for s, c in zip(z.shards, z.chunks):
            per *= s // c
        shards = 1
        for n, s in zip(z.shape, z.shards):
            shards *= -(-n // s)
        total -= shards * (16 * per + 4)
    return total


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _inputs(size: int):
    import numpy as np
    rng = np.random.default_rng(7)
    return (rng.standard_normal((size, COLS), dtype=np.float32),
            rng.standard_normal((size, COLS), dtype=np.float32))


def _rows(size: int) -> slice:
    """A slice of rows that starts and ends inside chunks."""
    return slice(size // 8 + 100, size - size // 8 - 100)


def jask_child(folder: str, budget: int, ops: list[str]) -> dict:
    import jax.numpy as jnp
    import numpy as np

    import jask
    from jask.base.rss import current_rss, peak_rss, reset_peak_rss
    jask.set_memory_budget(budget)
    a = jask.open(os.path.join(folder, "a.zarr"))
    b = jask.open(os.path.join(folder, "b.zarr"))
    w, g = (jnp.asarray(v) for v in _inputs(a.shape[0]))
    rows = _rows(a.shape[0])
    out = os.path.join(folder, "jask-out")
    sizes = {"a": chunk_bytes(a.filename), "b": chunk_bytes(b.filename)}

    def save():
        jask.save(a, out, compressor="zstd", overwrite=True)

    def done(x):  # an eager result: its store exists once its filename does
        return x.filename

    run = {"sum": lambda: float(jask.sum(a)), "elementwise": lambda: done(a + b),
           "dot X@w": lambda: np.asarray(a @ w), "X.T@g": lambda: np.asarray(a.T @ g),
           "matmul": lambda: done(a @ b), "slice+sum": lambda: float(jask.sum(a[rows])),
           "save": save}
    float(jask.sum(jask.from_numpy(np.ones((8, 8), np.float32))))  # warm up
    _trim()
    baseline = current_rss()
    results = {}
    for name in ops:
        shutil.rmtree(out, ignore_errors=True)
        jask.collect()
        os.sync()  # the last op's dirty pages would throttle this one's writes
        _trim()
        reset_peak_rss()
        with jask.track() as t:
            start, cpu = time.perf_counter(), time.process_time()
            run[name]()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        stored = t.store(a).stored_read + t.store(b).stored_read
        read = sizes["a"] * (t.store(a).stored_read > 0) + sizes["b"] * (t.store(b).stored_read > 0)
        if name == "slice+sum":
            read = sizes["a"] * (rows.stop - rows.start) / a.shape[0]
        results[name] = {"seconds": seconds, "cpu": cpu, "peak": peak_rss() - baseline,
                         "decodes": stored / max(read, 1)}
    shutil.rmtree(out, ignore_errors=True)
    return results


def dask_child(folder: str, budget: int, ops: list[str]) -> dict:
    import dask
    import dask.array as da
    import numpy as np
    import zarr

    from jask.base.rss import current_rss, peak_rss, reset_peak_rss
    a = da.from_zarr(os.path.join(folder, "a.zarr"))
    b = da.from_zarr(os.path.join(folder, "b.zarr"))
    w, g = _inputs(a.shape[0])
    rows = _rows(a.shape[0])
    out = os.path.join(folder, "dask-out")

    def store(x, compressors=None):
        shutil.rmtree(out, ignore_errors=True)
        z = zarr.create_array(store=out, shape=x.shape, dtype=x.dtype,
                              chunks=tuple(c[0] for c in x.chunks), compressors=compressors)
        da.store(x, z, lock=False)

    run = {"sum": lambda: float(a.sum()), "elementwise": lambda: store(a + b),
           "dot X@w": lambda: (a @ w).compute(), "X.T@g": lambda: (a.T @ g).compute(),
           "matmul": lambda: store(a @ b), "slice+sum": lambda: float(a[rows].sum()),
           "save": lambda: (store(a, zarr.codecs.ZstdCodec(level=3)), os.sync())}
    results = {}
    with dask.config.set(scheduler="threads"):
        (da.ones((8, 8), chunks=4) + 1).sum().compute()
        _trim()
        baseline = current_rss()
        for name in ops:
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            _trim()
            reset_peak_rss()
            start, cpu = time.perf_counter(), time.process_time()
            run[name]()
            results[name] = {"seconds": time.perf_counter() - start,
                             "cpu": time.process_time() - cpu, "peak": peak_rss() - baseline}
    shutil.rmtree(out, ignore_errors=True)
    np  # noqa: B018
    return results


def _run(args: list[str], jask_path: str) -> dict:
    # the file itself, so that --jask can point at another checkout's jask
    env = {**os.environ, "PYTHONPATH": jask_path}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                         capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    from dask.utils import parse_bytes
    p = argparse.ArgumentParser(prog="python -m benchmarks.compressed")
    p.add_argument("--size", type=int, default=4096, help="side of the square inputs")
    p.add_argument("--budget", default="32MB")
    p.add_argument("--jask", default=os.path.dirname(HERE),
                   help="the checkout whose jask runs (default: this one)")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--engines", default="jask,dask")
    p.add_argument("--data-dir", default=os.path.join(os.path.dirname(HERE), ".bench_data",
                                                       "compressed"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    budget = parse_bytes(args.budget)
    ops = args.ops.split(",")
    if args.child:
        child = jask_child if args.child == "jask" else dask_child
        print(json.dumps(child(args.folder, budget, ops)))
        return 0
    engines = args.engines.split(",")
    data = args.size * args.size * 4
    print(f"{args.size}x{args.size} float32 inputs ({data / 1e6:.0f} MB each, "
          f"{data / budget:.1f}x the budget of {budget / 1e6:.0f} MB); peak RSS above the "
          "warmed-up baseline; decodes = stored bytes read / stored bytes of the inputs")
    print(f"{'store':>8} {'op':>12} {'jask s':>8} {'dask s':>8} {'ratio':>6} {'cpu ratio':>9} "
          f"{'decodes':>8} {'jask MB':>8} {'dask MB':>8} {'/budget':>7}")
    for kind in args.kinds.split(","):
        folder = os.path.join(args.data_dir, f"{kind}-{args.size}")
        write_data(folder, kind, args.size)
        child = ["--folder", folder, "--budget", str(budget), "--ops", args.ops]
        subprocess.run(["sync"], check=False)
        j = _run(["--child", "jask", *child], args.jask) if "jask" in engines else {}
        d = _run(["--child", "dask", *child], args.jask) if "dask" in engines else {}
        for op in ops:
            r, q = j.get(op), d.get(op)
            js = f"{r['seconds']:8.2f}" if r else f"{'-':>8}"
            ds = f"{q['seconds']:8.2f}" if q else f"{'-':>8}"
            ratio = f"{r['seconds'] / q['seconds']:6.2f}" if r and q else f"{'-':>6}"
            cpu = f"{r['cpu'] / max(q['cpu'], 1e-9):9.2f}" if r and q else f"{'-':>9}"
            dec = f"{r['decodes']:8.2f}" if r else f"{'-':>8}"
            jm = f"{r['peak'] / 1e6:8.1f}" if r else f"{'-':>8}"
            dm = f"{q['peak'] / 1e6:8.1f}" if q else f"{'-':>8}"
            frac = f"{r['peak'] / budget:7.2f}" if r else f"{'-':>7}"
            print(f"{kind:>8} {op:>12} {js} {ds} {ratio} {cpu} {dec} {jm} {dm} {frac}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
