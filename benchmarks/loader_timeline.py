"""Where a fed epoch's time goes (issue 44): a stage timeline of a shuffled
and an in-order epoch of ``jask.batches(..., device=d)`` feeding the jitted MLP step of
benchmarks/loader_device.py, and a jax-only check of whether host -> device
copies overlap a jitted step's execution on this device.

Run: ``python -m benchmarks.loader_timeline [--gib G] [--buffer ROWS]``; prints
a report (``--buffer``: the loader's rows mixed, its window, else the default).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks import loader_device as ld


def jax_only(device, n_steps: int, n_puts: int, block_bytes: int = 32 * 2**20) -> dict:
    """Seconds of ``n_steps`` MLP steps alone, of ``n_puts`` device_puts of
    ``block_bytes`` (reused host buffers, waited one by one, in a thread)
    alone, and of both at once."""
    import jax
    step, params, state, held = ld.compiled_step(device, 4)
    host = [np.ones(block_bytes // 4, np.float32) for _ in range(4)]
    jax.block_until_ready(jax.device_put(host[0], device))

    def steps():
        p, s, v = params, state, None
        for i in range(n_steps):
            p, s, v = step(p, s, *held[i % 4])
        jax.block_until_ready(v)

    def puts(out=None):
        t = time.perf_counter()
        for i in range(n_puts):
            jax.block_until_ready(jax.device_put(host[i % 4], device))
        if out is not None:
            out.append(time.perf_counter() - t)

    res = {}
    t = time.perf_counter()
    steps()
    res["steps alone"] = time.perf_counter() - t
    t = time.perf_counter()
    puts()
    res["puts alone"] = time.perf_counter() - t
    done: list = []
    th = threading.Thread(target=puts, args=(done,))
    t = time.perf_counter()
    th.start()
    steps()
    th.join()
    res["both"] = time.perf_counter() - t
    res["puts while stepping"] = done[0]
    return res


def timeline(paths: dict, device, shuffle: bool,
             buffer: int | None = None) -> tuple[float, list]:
    """An epoch (after an untimed one) of the step fed by the loader, with
    every stage's (thread, what, start, end)."""
    import jax

    import jask
    from jask.api import batches as B
    events: list = []
    lock = threading.Lock()

    def log(what, t0, t1):
        with lock:
            events.append((threading.current_thread().name[:12], what, t0, t1))

    def wrap(fn, what):
        def inner(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                log(what, t0, time.perf_counter())
        return inner

    orig = (B._read_runs, B._cut_window, jax.device_put, jax.block_until_ready, B._put_unless)
    B._read_runs = wrap(B._read_runs, "read")
    B._cut_window = wrap(B._cut_window, "cut")
    B._put_unless = wrap(B._put_unless, "hand")
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    step, params, state = ld.mlp(device)
    xb0, yb0 = np.zeros((ld.BATCH, ld.COLS), np.float32), np.zeros(ld.BATCH, np.float32)
    jax.block_until_ready(step(params, state, *jax.device_put((xb0, yb0), device)))
    loader = jask.batches(X, y, batch_size=ld.BATCH, shuffle=shuffle, seed=0, device=device,
                          buffer=buffer)
    seconds = 0.0
    for rep in range(2):
        if rep == 1:
            events.clear()
            jax.device_put = wrap(orig[2], "put")
            jax.block_until_ready = wrap(orig[3], "wait")
        p, s, value = params, state, None
        start = time.perf_counter()
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            item = next(it, None)
            t1 = time.perf_counter()
            if item is None:
                break
            if rep == 1:
                log("next", t0, t1)
            p, s, value = step(p, s, *item)
            if rep == 1:
                log("step", t1, time.perf_counter())
        t0 = time.perf_counter()
        orig[3](value)
        if rep == 1:
            log("drain", t0, time.perf_counter())
        seconds = time.perf_counter() - start
    jax.device_put, jax.block_until_ready = orig[2], orig[3]
    B._read_runs, B._cut_window, B._put_unless = orig[0], orig[1], orig[4]
    loader.close()
    return seconds, [(n, w, a - start, b - start) for n, w, a, b in events]


def summary(events: list) -> list[str]:
    """Busy seconds per (thread, stage), and the first events in time order."""
    busy: dict = {}
    for n, w, a, b in events:
        key = ("reader" if n.startswith("jask-loader") else n, w)
        busy.setdefault(key, [0.0, 0, None, 0.0])
        e = busy[key]
        e[0] += b - a
        e[1] += 1
        e[2] = a if e[2] is None else min(e[2], a)
        e[3] = max(e[3], b)
    lines = ["| thread | stage | busy s | count | first start | last end |",
             "|---|---|---|---|---|---|"]
    for (n, w), (t, c, a, b) in sorted(busy.items(), key=lambda kv: kv[1][2]):
        lines.append(f"| {n} | {w} | {t:.3f} | {c} | {a:.3f} | {b:.3f} |")
    lines.append("")
    lines.append("stager/consumer events in order (thread, stage, start, end):")
    for n, w, a, b in sorted(events, key=lambda e: e[2]):
        if not n.startswith("jask-loader") and w not in ("next",):
            lines.append(f"  {n:12s} {w:6s} {a:7.3f} {b:7.3f} ({(b - a) * 1e3:6.1f} ms)")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--buffer", type=int, default=None, help="the loader's rows mixed")
    p.add_argument("--orders", choices=["both", "shuffled", "in-order"], default="both")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "jask-loader"))
    args = p.parse_args(argv)
    import jax

    import jask
    jask.set_memory_budget("8GB")
    device = jax.devices()[0]
    paths = ld.prepare(args.data_dir, args.gib)
    n_batches = paths["rows"] // ld.BATCH
    r = jax_only(device, n_batches, n_batches // 8)
    print("jax only (no jask):", {k: round(v, 3) for k, v in r.items()})
    print("steps alone s", round(ld.steps_alone(device, n_batches, 2), 3))
    orders = {"both": (True, False), "shuffled": (True,), "in-order": (False,)}[args.orders]
    for shuffle in orders:
        alone, _ = ld.loader_alone(paths, device, shuffle, 2, args.buffer)
        both = ld.together(paths, device, shuffle, 2, args.buffer)
        print(f"shuffle={shuffle}: loader alone {alone:.3f} s, together {both:.3f} s")
    for shuffle in orders:
        seconds, events = timeline(paths, device, shuffle, args.buffer)
        steps = [(b - a, a) for n, w, a, b in events if w == "step"]
        longest = max(steps, default=(0.0, 0.0))
        print(f"\ntimeline shuffle={shuffle}: epoch {seconds:.3f} s; longest step dispatch "
              f"{longest[0] * 1e3:.1f} ms (at {longest[1]:.3f} s)")
        print("\n".join(summary(events)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
