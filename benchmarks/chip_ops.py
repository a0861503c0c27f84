"""Ops on the accelerator: jask's host path and its device path side by side.

For ``benchmarks.accelerator`` (issue 45): in one process, over Zarr stores
written to a local folder first (page cache warm, as after the write),
``jask.sum(X)``, ``X.T @ X`` (d = 128) and ``W.T @ W`` (d = 1,024) with
``jask.set_device("host")`` and with the default backend's first device;
the time to move X once (jask's reads into one reused buffer + ``device_put``,
asynchronous, nothing computed); the chip's own step with X already in its
memory; relative errors against float64 at ``highest``, of the chip path and
of jax.numpy's own op on the chip. Best of 3 each.

:func:`logistic` measures a logistic ``value_and_grad`` step over X the same
way: eagerly on the host path and on the chip path, under ``jax.jit`` (the
host-driven band group inside the compiled program's callback), against
moving X once and the chip's jitted step with X in its memory.
"""
from __future__ import annotations

import os
import time

import numpy as np


def _store(folder: str, name: str, rows: int, cols: int):
    import zarr

    import jask

    path = os.path.join(folder, f"{name}-{rows}x{cols}.zarr")
    if not os.path.exists(path):
        z = zarr.create_array(path, shape=(rows, cols), chunks=(max(8, 2**23 // cols), cols),
                              dtype="float32", compressors=None)
        rng = np.random.default_rng(0)
        step = max(8, 2**25 // cols)
        for s in range(0, rows, step):
            z[s:s + step] = rng.standard_normal((min(step, rows - s), cols), dtype=np.float32)
    return jask.open(path)


def _best(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _move_once(X, repeat: int = 3) -> float:
    """Seconds to read X's row bands (jask's reads) and device_put each."""
    import jax

    from jask.store import registry
    from jask.store.tiles import read

    spec = registry.spec(X._handle)
    rows, cols = spec.shape
    band = max(8, 2**25 // (cols * 4))
    bufs = [np.empty((band, cols), np.float32) for _ in range(3)]

    def run():
        held = []
        for i, r in enumerate(range(0, rows, band)):
            tile = read(spec, (slice(r, min(r + band, rows)), slice(0, cols)),
                        out=bufs[i % 3][:min(band, rows - r)])
            held.append(jax.device_put(tile))
            if len(held) > 2:
                held.pop(0).block_until_ready()
        for h in held:
            h.block_until_ready()

    return _best(run, repeat)[0]


def rows_of(quick: bool) -> list[tuple[str, int, int]]:
    """(name, rows, cols) of the stores measured."""
    if quick:
        return [("X", 2_000_000, 128), ("W", 250_000, 1024)]
    return [("X", 8_000_000, 128), ("W", 1_000_000, 1024)]


def measure(folder: str, quick: bool) -> list[dict]:
    """One dict per op: host seconds, chip seconds, GB/s, errors."""
    import jax
    import jax.numpy as jnp

    import jask

    jask.set_memory_budget("8GB", scratch_dir=os.path.join(folder, "scratch"))
    chip = jax.devices()[0]
    out = []
    for name, rows, cols in rows_of(quick):
        X = _store(folder, name, rows, cols)
        gb = rows * cols * 4 / 1e9
        x = np.asarray(X.to_numpy())
        x64 = x.astype(np.float64)
        moved = _move_once(X)
        jx = jax.device_put(x, chip)
        ref_g = x64.T @ x64
        for op, fn, ref, mem in [
            (f"jask.sum({name})", lambda X=X: jask.sum(X), x64.sum(), lambda jx=jx: jnp.sum(jx)),
            (f"{name}.T @ {name} (d={cols})", lambda X=X: np.asarray(X.T @ X), ref_g,
             lambda jx=jx: jnp.matmul(jx.T, jx)),
        ]:
            row = dict(op=op, gb=round(gb, 3), move_s=round(moved, 3))
            with jax.default_matmul_precision("highest"):
                for where in ("host", chip):
                    jask.set_device(where)
                    t, value = _best(lambda fn=fn: np.asarray(fn()))
                    key = "host" if where == "host" else "chip"
                    row[f"{key}_s"] = round(t, 3)
                    row[f"{key}_err"] = float(np.abs(np.asarray(value, np.float64) - ref).max()
                                              / np.abs(ref).max())
                t, value = _best(lambda mem=mem: mem().block_until_ready())
                row["in_hbm_s"] = round(t, 4)
                row["in_hbm_err"] = float(np.abs(np.asarray(value, np.float64) - ref).max()
                                          / np.abs(ref).max())
            jask.set_device()
            row["chip_vs_move"] = round(row["chip_s"] / moved, 2)
            row["host_vs_chip"] = round(row["host_s"] / row["chip_s"], 2)
            out.append(row)
            print(row, flush=True)
        del jx
    return out


def _logistic(w, X, y, m):
    z = X @ w
    return m.mean(m.logaddexp(0.0, z) - y * z)


def _rel(value, ref) -> float:
    value = np.asarray(value, np.float64)
    return float(np.abs(value - ref).max() / np.abs(ref).max())


def _gradient_errors(jx, jy, w, z, y64, ref_g, band: int = 65_536) -> dict:
    """Where a logistic gradient's error on the chip comes from: the
    residuals ``expit(X @ w) - y`` in float32 (as ``jax.nn.sigmoid`` and in
    the form of logaddexp's VJP), the product ``X.T @ r`` with exact
    residuals: over all rows at once, by bands of ``band`` rows added in
    float64, and each band as 16 shorter products added in float32."""
    import jax
    import jax.numpy as jnp

    rows = jx.shape[0]
    r64 = 1 / (1 + np.exp(-z)) - y64
    zj = jx @ jnp.asarray(w)
    exact = jnp.asarray(r64.astype(np.float32))

    def blocked(a, b):
        if a.shape[0] % (16 * 8):
            return jnp.matmul(a.T, b)
        return jnp.einsum("kri,kr->ki", a.reshape(16, -1, a.shape[1]), b.reshape(16, -1)).sum(0)

    def by_bands(product):
        return sum(np.asarray(product(jx[s:s + band], exact[s:s + band]), np.float64)
                   for s in range(0, rows, band)) / rows

    return dict(op="logistic gradient's error on the chip, by source",
                residual_err=_rel(jax.nn.sigmoid(zj) - jy, r64),
                residual_err_vjp_form=_rel(jnp.exp(zj - jnp.logaddexp(0.0, zj)) - jy, r64),
                product_err=_rel(np.asarray(jnp.matmul(jx.T, exact), np.float64) / rows, ref_g),
                banded_product_err=_rel(by_bands(lambda a, b: jnp.matmul(a.T, b)), ref_g),
                blocked_product_err=_rel(by_bands(blocked), ref_g))


def logistic(folder: str, quick: bool) -> list[dict]:
    """A logistic ``value_and_grad`` step over X (and y, a store), eagerly and
    under ``jax.jit``, on the host path and on the chip path."""
    import jax
    import jax.numpy as jnp

    import jask

    jask.set_memory_budget("8GB", scratch_dir=os.path.join(folder, "scratch"))
    chip = jax.devices()[0]
    name, rows, cols = rows_of(quick)[0]
    X = _store(folder, name, rows, cols)
    x = np.asarray(X.to_numpy())
    rng = np.random.default_rng(1)
    w = (rng.standard_normal(cols) * 0.05).astype(np.float32)
    y = (x @ w + rng.standard_normal(rows, dtype=np.float32) > 0).astype(np.float32)
    Y = jask.from_numpy(y)
    x64, y64, w64 = x.astype(np.float64), y.astype(np.float64), w.astype(np.float64)
    z = x64 @ w64
    ref_v = np.mean(np.logaddexp(0, z) - y64 * z)
    ref_g = x64.T @ (1 / (1 + np.exp(-z)) - y64) / rows
    moved = _move_once(X)
    jx, jy = jax.device_put(x, chip), jax.device_put(y, chip)
    del x, x64
    step = jax.value_and_grad(_logistic)
    jitted = jax.jit(step, static_argnums=3)
    with jax.default_matmul_precision("highest"):
        t_mem, (mv, mg) = _best(lambda: jax.block_until_ready(jitted(w, jx, jy, jnp)))
        out = [_gradient_errors(jx, jy, w, z, y64, ref_g)]
        print(out[0], flush=True)
        for mode, fn in [("eager", step), ("jit", jitted)]:
            row = dict(op=f"{mode} value_and_grad(logistic) over {name} ({rows}x{cols})",
                       gb=round(rows * cols * 4 / 1e9, 3), move_s=round(moved, 3),
                       in_hbm_s=round(t_mem, 4), in_hbm_err=_rel(mg, ref_g),
                       in_hbm_err_value=abs(float(mv) - ref_v) / abs(ref_v))
            for where in ("host", chip):
                jask.set_device(where)
                key = "host" if where == "host" else "chip"
                try:
                    t, (v, g) = _best(lambda fn=fn: jax.block_until_ready(fn(w, X, Y, jask)))
                except Exception as err:  # a row that fails still reports the others
                    row[f"{key}_s"] = f"failed: {type(err).__name__}: {err}"[:200]
                    continue
                row[f"{key}_s"] = round(t, 3)
                row[f"{key}_err"] = _rel(g, ref_g)
                row[f"{key}_err_value"] = abs(float(v) - ref_v) / abs(ref_v)
            jask.set_device()
            if isinstance(row.get("chip_s"), float):
                row["chip_vs_move"] = round(row["chip_s"] / moved, 2)
                if isinstance(row.get("host_s"), float):
                    row["host_vs_chip"] = round(row["host_s"] / row["chip_s"], 2)
            out.append(row)
            print(row, flush=True)
    return out
