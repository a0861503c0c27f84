"""Second order, batched losses, a store larger than the chip's memory and a
long jitted loop: jask's host path and its device path side by side.

For ``benchmarks.accelerator`` (issue 45), each over Zarr stores written to a
local folder first (page cache warm, as after the write), at
``jax.default_matmul_precision("highest")``:

* :func:`second_order`: logistic regression with 512 parameters, one Newton
  step (``jax.jit`` of ``w - solve(hessian, grad)``), ``jax.jit(jax.hessian(
  loss))`` alone and ``jax.jit(jax.vmap(loss))`` over 64 parameter vectors,
  host path and chip path, against the chip's own with X in its memory;
  relative errors against float64.
* :func:`larger_than_memory`: a store larger than the chip's memory (written
  raw, chunk files straight from numpy: the benchmark's time is mostly the
  write otherwise), the jitted logistic step and ``W.T @ W`` on the host and
  on the chip against moving W once.
* :func:`soak`: a jitted gradient-descent loop of many steps on the chip (no
  hang), its weights against jax.numpy's loop with X in the chip's memory.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.chip_ops import _best, _logistic, _move_once, _rel, _store

PARAMETERS = 512
VECTORS = 64


def _sides(row: dict, fn, ref, repeat: int) -> None:
    """``row``'s host and chip seconds and errors of ``fn()``."""
    import jax

    import jask

    chip = jax.devices()[0]
    for where in ("host", chip):
        key = "host" if where == "host" else "chip"
        jask.set_device(where)
        try:
            t, value = _best(lambda: jax.block_until_ready(fn()), repeat)
        except Exception as err:  # a row that fails still reports the others
            row[f"{key}_s"] = f"failed: {type(err).__name__}: {err}"[:300]
            continue
        finally:
            jask.set_device()
        row[f"{key}_s"] = round(t, 3)
        if ref is not None:
            row[f"{key}_err"] = _rel(value, ref)
    if isinstance(row.get("host_s"), float) and isinstance(row.get("chip_s"), float):
        row["host_vs_chip"] = round(row["host_s"] / row["chip_s"], 2)
        if "move_s" in row:
            row["chip_vs_move"] = round(row["chip_s"] / row["move_s"], 2)
    print(row, flush=True)


def second_order(folder: str, quick: bool, rows: int | None = None) -> list[dict]:
    """Newton's step, ``jit(hessian)`` and ``jit(vmap)`` of a logistic loss with
    :data:`PARAMETERS` parameters over X (1 GB quick, 4.1 GB else)."""
    import jax
    import jax.numpy as jnp

    import jask

    jask.set_memory_budget("8GB", scratch_dir=os.path.join(folder, "scratch"))
    rows, cols = rows or (500_000 if quick else 2_000_000), PARAMETERS
    X = _store(folder, "N", rows, cols)
    x = np.asarray(X.to_numpy())
    rng = np.random.default_rng(2)
    w = (rng.standard_normal(cols) * 0.05).astype(np.float32)
    y = (x @ w + rng.standard_normal(rows, dtype=np.float32) > 0).astype(np.float32)
    Y = jask.from_numpy(y)
    ws = (w + rng.standard_normal((VECTORS, cols)) * 0.02).astype(np.float32)
    x64, w64, ws64, y64 = (a.astype(np.float64) for a in (x, w, ws, y))
    z = x64 @ w64
    p = 1 / (1 + np.exp(-z))
    ref_g = x64.T @ (p - y64) / rows
    ref_h = x64.T @ (x64 * (p * (1 - p))[:, None]) / rows
    ref_step = w64 - np.linalg.solve(ref_h, ref_g)
    zs = x64 @ ws64.T
    ref_vmap = np.mean(np.logaddexp(0, zs) - y64[:, None] * zs, axis=0)
    del x64, zs
    moved = _move_once(X)
    chip = jax.devices()[0]
    jx, jy = jax.device_put(x, chip), jax.device_put(y, chip)
    del x

    def newton(w, X, y, m):
        return w - jnp.linalg.solve(jax.hessian(_logistic)(w, X, y, m),
                                    jax.grad(_logistic)(w, X, y, m))

    works = [
        (f"jit Newton step, logistic, p = {cols}", jax.jit(newton, static_argnums=3),
         lambda: (w,), ref_step),
        (f"jit(hessian(logistic)), p = {cols}", jax.jit(jax.hessian(_logistic), static_argnums=3),
         lambda: (w,), ref_h),
        (f"jit(vmap(logistic)) over {VECTORS} vectors, p = {cols}",
         jax.jit(jax.vmap(_logistic, in_axes=(0, None, None, None)), static_argnums=3),
         lambda: (ws,), ref_vmap),
    ]
    out = []
    with jax.default_matmul_precision("highest"):
        for op, fn, first, ref in works:
            row = dict(op=f"{op} over X ({rows}x{cols})", gb=round(rows * cols * 4 / 1e9, 3),
                       move_s=round(moved, 3))
            t, value = _best(lambda fn=fn, first=first: jax.block_until_ready(
                fn(*first(), jx, jy, jnp)))
            row["in_hbm_s"], row["in_hbm_err"] = round(t, 4), _rel(value, ref)
            _sides(row, lambda fn=fn, first=first: fn(*first(), X, Y, jask), ref, repeat=2)
            out.append(row)
    return out


def _raw_store(path: str, rows: int, cols: int) -> None:
    """An uncompressed float32 Zarr store of ``rows x cols`` (whole chunks of
    8 MiB), its chunk files
    written straight from numpy (a standard normal block, each chunk a
    rolled and scaled copy of it), on 8 threads."""
    import zarr

    chunk = 2**23 // (cols * 4)
    if rows % chunk:
        raise ValueError(f"{rows} rows are not whole chunks of {chunk}")
    if os.path.exists(os.path.join(path, "zarr.json")):
        return
    zarr.create_array(path, shape=(rows, cols), chunks=(chunk, cols), dtype="float32",
                      compressors=None)
    base = np.random.default_rng(3).standard_normal((chunk, cols), dtype=np.float32)
    os.makedirs(os.path.join(path, "c"), exist_ok=True)

    def write(i: int) -> None:
        block = np.roll(base, i, axis=0) * np.float32(1 + (i % 7) / 10)
        folder = os.path.join(path, "c", str(i))
        os.makedirs(folder, exist_ok=True)
        block.tofile(os.path.join(folder, "0"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(rows // chunk)))


def larger_than_memory(folder: str, gib: float) -> list[dict]:
    """The jitted logistic step and ``W.T @ W`` over a ``gib`` GiB store, W =
    rows x 1,024 float32: host path once, chip path best of 2, against moving
    W once. No float64 reference (it would not fit the host's memory)."""
    import jax
    import jax.numpy as jnp

    import jask

    jask.set_memory_budget("8GB", scratch_dir=os.path.join(folder, "scratch"))
    cols = 1024
    chunk = 2**23 // (cols * 4)
    rows = int(gib * 2**30 // (cols * 4)) // chunk * chunk  # whole chunks only
    path = os.path.join(folder, f"big-{rows}x{cols}.zarr")
    t = time.perf_counter()
    _raw_store(path, rows, cols)
    written = time.perf_counter() - t
    W = jask.open(path)
    rng = np.random.default_rng(4)
    w = (rng.standard_normal(cols) * 0.02).astype(np.float32)
    Y = jask.from_numpy((rng.random(rows) > 0.5).astype(np.float32))
    t = time.perf_counter()
    moved = _move_once(W, repeat=1)
    print(json.dumps({"store": path, "gib": round(rows * cols * 4 / 2**30, 2),
                      "write_s": round(written, 1), "move_s": round(moved, 2),
                      "first_move_s": round(time.perf_counter() - t, 2)}), flush=True)
    step = jax.jit(jax.value_and_grad(_logistic), static_argnums=3)
    out = []
    with jax.default_matmul_precision("highest"):
        for op, fn in [(f"jit value_and_grad(logistic) over W ({rows}x{cols})",
                        lambda: step(w, W, Y, jask)),
                       (f"W.T @ W (d={cols}), W {rows}x{cols}", lambda: jnp.asarray(W.T @ W))]:
            row = dict(op=op, gb=round(rows * cols * 4 / 1e9, 2), move_s=round(moved, 3))
            _sides_once(row, fn)
            out.append(row)
    return out


def _sides_once(row: dict, fn) -> None:
    """Host path once, chip path best of 2 (the first compiles)."""
    import jax

    import jask

    chip = jax.devices()[0]
    for where, repeat in (("host", 1), (chip, 2)):
        key = "host" if where == "host" else "chip"
        jask.set_device(where)
        try:
            t, _ = _best(lambda: jax.block_until_ready(fn()), repeat)
            row[f"{key}_s"] = round(t, 3)
        except Exception as err:
            row[f"{key}_s"] = f"failed: {type(err).__name__}: {err}"[:300]
        finally:
            jask.set_device()
    if isinstance(row.get("host_s"), float) and isinstance(row.get("chip_s"), float):
        row["host_vs_chip"] = round(row["host_s"] / row["chip_s"], 2)
        row["chip_vs_move"] = round(row["chip_s"] / row["move_s"], 2)
    print(row, flush=True)


def soak(folder: str, steps: int, rows: int = 200_000) -> dict:
    """``steps`` jitted gradient steps of a logistic loss on the chip (one
    compiled split program, a band group streamed each step); the weights
    against jax.numpy's loop with X in the chip's memory."""
    import jax
    import jax.numpy as jnp

    import jask

    jask.set_memory_budget("2GB", scratch_dir=os.path.join(folder, "scratch"))
    cols = 32
    X = _store(folder, "S", rows, cols)
    x = np.asarray(X.to_numpy())
    y = (x @ np.linspace(-1, 1, cols, dtype=np.float32) > 0).astype(np.float32)
    Y = jask.from_numpy(y)
    jx, jy = jnp.asarray(x), jnp.asarray(y)

    def train(X, y, m):
        step = jax.jit(lambda w: w - 0.5 * jax.grad(_logistic)(w, X, y, m))
        w = jnp.zeros(cols, jnp.float32)
        for _ in range(steps):
            w = step(w)
        return jax.block_until_ready(w)

    with jax.default_matmul_precision("highest"):
        jask.set_device(jax.devices()[0])
        t = time.perf_counter()
        got = train(X, Y, jask)
        took = time.perf_counter() - t
        jask.set_device()
        want = train(jx, jy, jnp)
    row = dict(op=f"{steps} jitted gradient steps over X ({rows}x{cols}) on the chip",
               chip_s=round(took, 2), per_step_ms=round(took / steps * 1e3, 2),
               err_vs_jnp=_rel(got, np.asarray(want, np.float64)))
    print(row, flush=True)
    return row
