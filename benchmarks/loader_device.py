"""The loader on an accelerator: does ``jask.batches(..., device=d)`` keep the
chip busy? (issue 44)

On the machine with the chip (or on the CPU, where it measures the same
path on JAX's CPU device), with X (rows x 128 float32, chunks of 65,536
rows, uncompressed) and y written to ``--data-dir`` (page cache warm, as
after writing them):

1. jask's own read rate (``jask.sum(X)``);
2. the host -> device copy: ``jax.device_put`` of 32 MiB blocks from reused
   host buffers, one at a time and dispatched together;
3. the loader alone, shuffled and in order: batches of 8,192 rows put on
   the device, against min(1, 2);
4. a jitted MLP step (128-1024-1024-1, optax Adam) alone, on batches already
   in device memory, for an epoch's number of batches;
5. both together: the epoch's time against max(3, 4).

Run: ``python -m benchmarks.loader_device [--quick] [--gib G] [--readers threads|processes]``
(``--quick``: 1 GiB of X, under 3 minutes on a TPU v5e host; ``--readers``: default jask's).
Prints a markdown report.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

COLS = 128
CHUNK_ROWS = 65_536
BATCH = 8192
BLOCK = 32 * 2**20  # bytes of a host -> device block
#: the loaders' ``readers`` (``--readers``; None: jask's default, a child process
#: where the batches go to an accelerator)
READERS: str | None = None


def prepare(folder: str, gib: float) -> dict:
    """X (rows x 128 float32, ``gib`` GiB) and y, uncompressed Zarr stores."""
    import zarr
    rows = int(gib * 2**30) // (COLS * 4) // BATCH * BATCH
    paths = {"X": os.path.join(folder, f"X-{rows}.zarr"),
             "y": os.path.join(folder, f"y-{rows}.zarr"), "rows": rows}
    if not os.path.exists(os.path.join(paths["y"], "zarr.json")):
        X = zarr.create_array(paths["X"], shape=(rows, COLS), chunks=(CHUNK_ROWS, COLS),
                              dtype="float32", compressors=None, overwrite=True)
        y = zarr.create_array(paths["y"], shape=(rows,), chunks=(CHUNK_ROWS,), dtype="float32",
                              compressors=None, overwrite=True)
        rng = np.random.default_rng(0)
        w = rng.standard_normal(COLS).astype(np.float32)
        for s in range(0, rows, 4 * CHUNK_ROWS):
            block = rng.standard_normal((min(4 * CHUNK_ROWS, rows - s), COLS), dtype=np.float32)
            X[s:s + len(block)] = block
            y[s:s + len(block)] = block @ w > 0
    return paths


def read_rate(paths: dict, repeat: int) -> float:
    """GB/s of ``jask.sum(X)`` (jask's readers, one pass)."""
    import jask
    X = jask.open(paths["X"])
    float(jask.sum(X))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        float(jask.sum(X))
        times.append(time.perf_counter() - start)
    return X.nbytes / statistics.median(times) / 1e9


def file_rate(paths: dict, threads: int = 8) -> float:
    """GB/s of the chunk files of X read whole with ``threads`` threads into
    reused, touched buffers (``readinto``): what the page cache gives."""
    from concurrent.futures import ThreadPoolExecutor
    files = sorted(os.path.join(root, f) for root, _, names in os.walk(os.path.join(
        paths["X"], "c")) for f in names)
    buffers = [bytearray(os.path.getsize(files[0])) for _ in range(threads)]
    free = list(range(threads))

    def one(name: str) -> int:
        i = free.pop()
        try:
            with open(name, "rb", buffering=0) as f:
                return f.readinto(buffers[i])
        finally:
            free.append(i)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, files[:threads]))  # the buffers touched
        start = time.perf_counter()
        total = sum(pool.map(one, files))
    return total / (time.perf_counter() - start) / 1e9


def loader_reads(paths: dict, threads: int = 8) -> float:
    """GB/s of the loader's own reads: an epoch's windows read into its two
    host slots in turn by its reading threads, nothing put anywhere."""
    from concurrent.futures import ThreadPoolExecutor

    import jask
    from jask.api.batches import _Slot
    from jask.store.space import stamp
    from jask.store.tiles import OpenFiles
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    loader = jask.batches(X, y, batch_size=BATCH, seed=0)
    plan, arrays = loader.plan, loader._arrays
    slots = [_Slot(arrays, plan.unit * plan.window) for _ in range(2)]
    stamps = stamp([a._store() for a in arrays], "benchmark")
    windows = plan.windows(0)
    files, whole = OpenFiles(), [None] * len(arrays)  # every array read by runs

    def fill(slot, units):
        return slot.fill(pool, threads, units, plan, stamps, whole, files)
    with ThreadPoolExecutor(threads) as pool:
        for f in fill(slots[0], windows[0]) + fill(slots[1], windows[1 % len(windows)]):
            f.result()  # touched
        start = time.perf_counter()
        pending = [fill(slots[0], windows[0])]
        for w in range(1, len(windows) + 1):
            if w < len(windows):
                pending.append(fill(slots[w % 2], windows[w]))
            for f in pending.pop(0):
                f.result()
        seconds = time.perf_counter() - start
    files.close()
    return (X.nbytes + y.nbytes) / seconds / 1e9


def transfer_rates(device, total_bytes: int) -> dict:
    """GB/s of ``device_put`` of 32 MiB blocks from 8 reused, touched host
    buffers: one at a time (each waited for) and all dispatched, then waited for."""
    import jax
    blocks = [np.full(BLOCK // 4, i, np.float32) for i in range(8)]
    n = max(8, total_bytes // BLOCK)
    jax.block_until_ready(jax.device_put(blocks[0], device))
    start = time.perf_counter()
    for i in range(n):
        jax.block_until_ready(jax.device_put(blocks[i % 8], device))
    one = n * BLOCK / (time.perf_counter() - start) / 1e9
    start = time.perf_counter()
    for i in range(0, n, 8):
        jax.block_until_ready(jax.device_put(blocks[:min(8, n - i)], device))
    together = n * BLOCK / (time.perf_counter() - start) / 1e9
    return {"one at a time": one, "8 at once": together}


def loader_alone(paths: dict, device, shuffle: bool, repeat: int,
                 buffer: int | None = None) -> tuple[float, object]:
    """Seconds of an epoch of ``jask.batches(..., device=device)`` with nothing
    done with the batches but the last waited for; and the loader (``buffer``:
    its rows mixed, else the default)."""
    import jax

    import jask
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    for _ in zip(range(3), jask.batches(X, y, batch_size=BATCH, shuffle=shuffle, seed=0,
                                         device=device, buffer=buffer, readers=READERS)):
        pass  # its compiled takes compiled
    times = []
    # one loader, an epoch per loop, as a training loop uses it (its reading threads are
    # started in the first, untimed epoch and kept)
    loader = jask.batches(X, y, batch_size=BATCH, shuffle=shuffle, seed=0, device=device,
                          buffer=buffer, readers=READERS)
    for _ in range(repeat + 1):
        start = time.perf_counter()
        last = None
        for last in loader:
            pass
        jax.block_until_ready(last)
        times.append(time.perf_counter() - start)
    loader.close()
    return statistics.median(times[1:]), loader


def mlp(device):
    """A jitted Adam step of an MLP 128-1024-1024-1 (logistic loss), its
    parameters and optimizer state on ``device``."""
    import jax
    import jax.numpy as jnp
    import optax
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    sizes = [(COLS, 1024), (1024, 1024), (1024, 1)]
    params = [(jax.random.normal(k, s) / np.sqrt(s[0]), jnp.zeros(s[1]))
              for k, s in zip(keys, sizes)]
    params = jax.device_put(params, device)
    opt = optax.adam(1e-3)

    def loss(p, xb, yb):
        h = xb
        for w, b in p[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = p[-1]
        return optax.sigmoid_binary_cross_entropy((h @ w + b)[:, 0], yb).mean()

    @jax.jit
    def step(p, s, xb, yb):
        value, g = jax.value_and_grad(loss)(p, xb, yb)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, value

    return step, params, jax.device_put(opt.init(params), device)


def compiled_step(device, n_held: int) -> tuple:
    """The MLP step, its parameters and optimizer state, and ``n_held``
    random batches already on ``device``; the step compiled and run once."""
    import jax
    step, params, state = mlp(device)
    rng = np.random.default_rng(1)
    held = [jax.device_put((rng.standard_normal((BATCH, COLS), dtype=np.float32),
                            (rng.random(BATCH) > 0.5).astype(np.float32)), device)
            for _ in range(n_held)]
    jax.block_until_ready(step(params, state, *held[0]))
    return step, params, state, held


def steps_alone(device, n_batches: int, repeat: int) -> float:
    """Seconds of ``n_batches`` steps on 16 batches already on the device."""
    import jax
    step, params, state, held = compiled_step(device, 16)
    times = []
    for _ in range(repeat):
        p, s = params, state
        start = time.perf_counter()
        for i in range(n_batches):
            p, s, value = step(p, s, *held[i % 16])
        jax.block_until_ready(value)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def together(paths: dict, device, shuffle: bool, repeat: int,
             buffer: int | None = None) -> float:
    """Seconds of an epoch of the step fed by the loader (``buffer`` as
    :func:`loader_alone`'s)."""
    import jax

    import jask
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    step, params, state = mlp(device)
    xb0, yb0 = np.zeros((BATCH, COLS), np.float32), np.zeros(BATCH, np.float32)
    jax.block_until_ready(step(params, state, *jax.device_put((xb0, yb0), device)))
    times = []
    loader = jask.batches(X, y, batch_size=BATCH, shuffle=shuffle, seed=0, device=device,
                          buffer=buffer, readers=READERS)
    for _ in range(repeat + 1):  # (the first epoch, which starts the threads, untimed)
        p, s, value = params, state, None
        start = time.perf_counter()
        for xb, yb in loader:
            p, s, value = step(p, s, xb, yb)
        jax.block_until_ready(value)
        times.append(time.perf_counter() - start)
    loader.close()
    return statistics.median(times[1:])


def run(paths: dict, device, repeat: int) -> dict:
    """Every figure of the report, as a dict."""
    import jask
    X = jask.open(paths["X"])
    nbytes = X.nbytes + paths["rows"] * 4
    out = {"rows": paths["rows"], "X bytes": X.nbytes, "device": str(device),
           "read GB/s": read_rate(paths, repeat), "files GB/s": file_rate(paths),
           "loader reads GB/s": loader_reads(paths)}
    seconds, _ = loader_alone(paths, None, True, repeat)
    out["numpy batches GB/s"] = nbytes / seconds / 1e9
    out.update({f"device_put {k} GB/s": v for k, v in transfer_rates(device, 2**30).items()})
    n_batches = -(-paths["rows"] // BATCH)
    out["steps alone s"] = steps_alone(device, n_batches, repeat)
    for shuffle in (True, False):
        name = "shuffled" if shuffle else "in order"
        seconds, loader = loader_alone(paths, device, shuffle, repeat)
        out[f"loader {name} s"] = seconds
        out[f"loader {name} GB/s"] = nbytes / seconds / 1e9
        out[f"both {name} s"] = together(paths, device, shuffle, repeat)
        out["window rows"] = loader.plan.unit * loader.plan.window
        out["device bytes"] = loader.device_bytes
        out["host bytes"] = loader.held_bytes
    return out


def report(r: dict) -> str:
    link = min(max(r["read GB/s"], r["loader reads GB/s"]), r["device_put 8 at once GB/s"])
    lines = [
        f"X: {r['rows']:,} x {COLS} float32 ({r['X bytes'] / 2**30:.2f} GiB), {CHUNK_ROWS:,}-row "
        f"uncompressed chunks, page cache warm; batches of {BATCH:,} on {r['device']}; windows "
        f"of {r['window rows']:,} rows; the loader holds {r['device bytes'] / 2**20:.0f} MiB "
        f"on the device at most, {r['host bytes'] / 2**20:.0f} MiB on the host.",
        "",
        "| measured | figure |", "|---|---|",
        f"| jask's own read rate (`jask.sum(X)`) | {r['read GB/s']:.2f} GB/s |",
        f"| X's chunk files read whole, 8 threads, reused buffers | {r['files GB/s']:.2f} GB/s |",
        f"| the loader's reads alone (its windows into its two host slots) | "
        f"{r['loader reads GB/s']:.2f} GB/s |",
        f"| the loader with numpy batches (`device=None`), shuffled | "
        f"{r['numpy batches GB/s']:.2f} GB/s |",
        f"| host -> device, `device_put` of 32 MiB blocks, one at a time | "
        f"{r['device_put one at a time GB/s']:.2f} GB/s |",
        f"| host -> device, 8 blocks at once | {r['device_put 8 at once GB/s']:.2f} GB/s |",
    ]
    for name in ("shuffled", "in order"):
        lines.append(f"| the loader alone, {name} | {r[f'loader {name} GB/s']:.2f} GB/s = "
                     f"{r[f'loader {name} GB/s'] / link:.2f} x min(read, copy) "
                     f"({r[f'loader {name} s']:.2f} s) |")
    lines.append(f"| an epoch of the MLP step (128-1024-1024-1, Adam) on batches in device "
                 f"memory | {r['steps alone s']:.2f} s |")
    for name in ("shuffled", "in order"):
        bound = max(r["steps alone s"], r[f"loader {name} s"])
        lines.append(f"| the same epoch fed by `jask.batches`, {name} | "
                     f"{r[f'both {name} s']:.2f} s = {r[f'both {name} s'] / bound:.2f} x "
                     f"max(steps, loader) |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loader_device")
    p.add_argument("--quick", action="store_true", help="1 GiB of X, 1 repeat")
    p.add_argument("--gib", type=float, default=None, help="size of X (GiB; default 4)")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "jask-loader"))
    p.add_argument("--budget", default="8GB", help="jask's memory budget")
    p.add_argument("--readers", default=None, choices=["threads", "processes"],
                   help="the loaders' readers (jask.batches(..., readers=); default: jask's)")
    args = p.parse_args(argv)
    global READERS
    READERS = args.readers
    gib = args.gib or (1.0 if args.quick else 4.0)
    repeat = args.repeat or (1 if args.quick else 3)
    import jax

    import jask
    os.makedirs(args.data_dir, exist_ok=True)
    jask.set_memory_budget(args.budget, scratch_dir=os.path.join(args.data_dir, "scratch"))
    device = jax.devices()[0]
    start = time.perf_counter()
    paths = prepare(args.data_dir, gib)
    print(f"(data written in {time.perf_counter() - start:.0f} s; load "
          f"{os.getloadavg()[0]:.1f}; {os.cpu_count()} cores)\n", flush=True)
    print(report(run(paths, device, repeat)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
