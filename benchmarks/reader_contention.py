"""Which work in the loader's reading threads starves a jitted step's dispatch
(issue 44): a jitted step loop timed alone and while ``--threads`` threads
each do one kind of work the loader's readers do, and the main thread's
wake-up latency (a 0.2 ms sleep's overshoot) beside it.

Kinds: ``sleep`` (threads that only sleep), ``python`` (a pure-Python
loop: holds the GIL but for the interpreter's switch), ``copy`` (``np.copyto``
of 4 MiB), ``take`` (``np.take(..., out=, mode="clip")`` of runs of 128 rows
from memory), ``take-mmap`` (the same from a ``np.memmap`` of a file in the
page cache), ``take-pieces`` (that take in pieces of 1 MiB), ``mmap-cycle``
(what ``jask.store.chunkio._copy_if_cached`` does per chunk: map, take,
unmap), ``preadv`` (a ``preadv`` of 64 KiB each), ``rows`` (the index of
runs, ``rows_of_runs``, alone), ``jask-X`` / ``jask-y`` (what a loader's reading
task does: ``jask.store.tiles.read_runs`` of 2,048 runs of 128 rows of a
store of benchmarks/loader_device.py, its X or its y, files held open).

Where the workers run (``--where``, a list): ``thread`` (threads of this
process, beside the timed loop: the loader's case), ``process`` (the same
threads in ONE child process, started with ``spawn``), ``processes`` (one
child process a worker, one thread each). The children never start a JAX
backend (``JAX_PLATFORMS=cpu``). If the slowdown goes away in a child, the
cost is this process's GIL, not the system calls or the machine.

Run: ``python -m benchmarks.reader_contention [--steps N] [--small] [--kinds a,b]
[--where thread,process] [--timed step|take]``. A kind ``k:N`` runs ``N``
workers instead of ``--threads``. ``--small``: a small step (a CPU here);
else the MLP step of benchmarks/loader_device.py on the default device.
``--timed take``: the timed work is a cutting thread's, ``np.take`` of
batches of 1,024 shuffled rows of 64 float32 from a 64 MiB window, not a step.
"""
from __future__ import annotations

import argparse
import mmap
import multiprocessing
import os
import tempfile
import threading
import time

import numpy as np

ROW = 512  # bytes a row (128 float32)
FILE_ROWS = 65_536  # a chunk: 32 MiB
RUN = 128


def _runs(rng) -> tuple[np.ndarray, np.ndarray]:
    starts = np.sort(rng.choice(FILE_ROWS // RUN, 128, replace=False)) * RUN
    return starts, starts + RUN


def jask_reads(store_path: str, seed: int):
    """A loader task's read of one array: a call reading its runs."""
    import jask
    from jask.store.tiles import OpenFiles, read_runs
    a = jask.open(store_path)
    store, files = a._store(), OpenFiles()
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(a.shape[0] // RUN, 2048, replace=False)) * RUN
    stops = starts + RUN
    out = np.empty((2048 * RUN,) + a.shape[1:], a.dtype)
    return lambda: read_runs(store, starts, stops, out, files)


def worker(kind: str, path: str, stop: threading.Event, seed: int,
           stores: dict | None = None) -> None:
    from jask.store.chunkio import rows_of_runs
    rng = np.random.default_rng(seed)
    read = jask_reads(stores[kind[5:]], seed) if kind.startswith("jask-") else None
    starts, stops = _runs(rng)
    index = rows_of_runs(starts, stops)
    into = np.empty((len(index), ROW), np.uint8)
    src = np.ones((FILE_ROWS, ROW), np.uint8)
    mapped = np.memmap(path, np.uint8, "r", shape=(FILE_ROWS, ROW))
    big_src, big_dst = np.ones(4 << 20, np.uint8), np.empty(4 << 20, np.uint8)
    fd = os.open(path, os.O_RDONLY)
    buf = np.empty(RUN * ROW, np.uint8)
    try:
        while not stop.is_set():
            if kind == "sleep":
                time.sleep(0.001)
            elif kind == "python":
                x = 0
                for i in range(2000):
                    x += i
            elif kind == "copy":
                np.copyto(big_dst, big_src)
            elif kind == "take":
                np.take(src, index, axis=0, out=into, mode="clip")
            elif kind == "take-mmap":
                np.take(mapped, index, axis=0, out=into, mode="clip")
            elif kind == "take-pieces":
                step = (1 << 20) // ROW
                for lo in range(0, len(index), step):
                    np.take(mapped, index[lo:lo + step], axis=0, out=into[lo:lo + step],
                            mode="clip")
            elif kind == "mmap-cycle":
                m = mmap.mmap(fd, FILE_ROWS * ROW, access=mmap.ACCESS_READ)
                rows = np.frombuffer(m, np.uint8).reshape(-1, ROW)
                np.take(rows, rows_of_runs(starts, stops), axis=0, out=into, mode="clip")
                del rows
                m.close()
            elif kind == "preadv":
                for lo in starts[:32].tolist():
                    os.preadv(fd, [buf], lo * ROW)
            elif read is not None:
                read()
            elif kind == "rows":
                rows_of_runs(starts, stops)
            else:
                raise ValueError(kind)
    finally:
        os.close(fd)


def _child(kind: str, path: str, threads: int, stores: dict, stop, ready, seed: int) -> None:
    """A child process: ``threads`` workers of ``kind`` until ``stop`` is set."""
    os.environ["JAX_PLATFORMS"] = "cpu"  # never open the chip the parent holds
    done = threading.Event()
    workers = [threading.Thread(target=worker, args=(kind, path, done, seed + i, stores),
                                daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    ready.set()
    stop.wait()
    done.set()
    for t in workers:
        t.join()


class Workers:
    """``n`` workers of ``kind`` in threads here, or in spawned child processes."""

    def __init__(self, kind: str, n: int, where: str, path: str, stores: dict):
        self.threads: list = []
        self.children: list = []
        if kind == "none":
            return
        if where == "thread":
            self.stop = threading.Event()
            self.threads = [threading.Thread(target=worker, args=(kind, path, self.stop, i, stores),
                                             daemon=True) for i in range(n)]
            for t in self.threads:
                t.start()
            return
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        shares = [n] if where == "process" else [1] * n
        readies = [ctx.Event() for _ in shares]
        self.children = [ctx.Process(target=_child, daemon=True,
                                     args=(kind, path, k, stores, self.stop, r, 100 * i))
                         for i, (k, r) in enumerate(zip(shares, readies))]
        for c in self.children:
            c.start()
        for r in readies:
            if not r.wait(120):
                raise RuntimeError("a worker process did not start")

    def close(self) -> None:
        if not (self.threads or self.children):
            return
        self.stop.set()
        for t in self.threads:
            t.join()
        for c in self.children:
            c.join(30)
            if c.exitcode != 0:
                raise RuntimeError(f"a worker process ended with {c.exitcode}")


def take_loop():
    """A cutting thread's work: ``np.take`` of shuffled batches from a window."""
    rng = np.random.default_rng(2)
    window = rng.standard_normal(((64 << 20) // 256, 64), dtype=np.float32)
    index = [np.sort(rng.choice(len(window), 1024, replace=False)) for _ in range(8)]
    out = np.empty((1024, 64), np.float32)

    def step(p, s, i):
        np.take(window, index[i], axis=0, out=out, mode="clip")
        return p, s, None
    return step, None, None, list(range(8))


def small_step(device):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(p, s, xb, yb):
        return p + 1e-3 * (xb @ p).sum(), s, (xb @ p).sum() + yb.sum()

    p = jax.device_put(jnp.ones(64), device)
    return step, p, 0, [jax.device_put((np.ones((256, 64), np.float32),
                                        np.ones(256, np.float32)), device)]


def mlp_step(device):
    import jax

    from benchmarks import loader_device as ld
    step, params, state = ld.mlp(device)
    rng = np.random.default_rng(1)
    held = [jax.device_put((rng.standard_normal((ld.BATCH, ld.COLS), dtype=np.float32),
                            (rng.random(ld.BATCH) > 0.5).astype(np.float32)), device)
            for _ in range(4)]
    return step, params, state, held


def run_steps(step, params, state, held, n: int) -> tuple[float, float]:
    """Seconds of ``n`` steps, and the longest dispatch (s)."""
    import jax
    p, s, v = params, state, None
    longest = 0.0
    t = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        batch = held[i % len(held)]
        p, s, v = step(p, s, *batch) if isinstance(batch, tuple) else step(p, s, batch)
        longest = max(longest, time.perf_counter() - t0)
    if v is not None:
        jax.block_until_ready(v)
    return time.perf_counter() - t, longest


def wake_latency(seconds: float) -> tuple[float, float]:
    """Median and 90th percentile (ms) of a 0.2 ms sleep's overshoot."""
    late = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        time.sleep(0.0002)
        late.append(time.perf_counter() - t - 0.0002)
    return float(np.median(late)) * 1e3, float(np.percentile(late, 90)) * 1e3


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--switch", type=float, default=None,
                        help="sys.setswitchinterval (s) while measuring")
    parser.add_argument("--where", default="thread",
                        help="a list of thread, process (one child, the threads in it), "
                             "processes (a child a worker)")
    parser.add_argument("--timed", default="step", choices=["step", "take"])
    parser.add_argument("--kinds", default="none,sleep,python,copy,take,take-mmap,take-pieces,"
                                           "mmap-cycle,preadv,rows,jask-X,jask-y")
    args = parser.parse_args(argv)
    import jax
    device = jax.devices()[0]
    step, params, state, held = (take_loop() if args.timed == "take" else
                                 (small_step if args.small else mlp_step)(device))
    run_steps(step, params, state, held, 4)
    if args.switch:
        import sys
        sys.setswitchinterval(args.switch)
    with tempfile.TemporaryDirectory() as d:
        from benchmarks import loader_device as ld
        stores = ld.prepare(d, 0.25) if "jask-" in args.kinds else {}
        path = os.path.join(d, "chunk")
        np.ones((FILE_ROWS, ROW), np.uint8).tofile(path)
        print(f"device {device}, timed {args.timed}, {args.threads} workers, {args.steps} "
              f"steps, switch interval {args.switch or 'default'}", flush=True)
        print("| workers doing | where | workers | steps s | x alone | longest dispatch ms "
              "| wake median / p90 ms |")
        print("|---|---|---|---|---|---|---|")
        alone = None
        for spec in args.kinds.split(","):
            kind, _, n = spec.partition(":")
            for where in (["-"] if kind == "none" else args.where.split(",")):
                workers = Workers(kind, int(n or args.threads), where, path, stores)
                time.sleep(0.05)
                secs, longest = run_steps(step, params, state, held, args.steps)
                wake = wake_latency(0.3)
                workers.close()
                alone = secs if alone is None else alone
                print(f"| {kind} | {where} | {0 if kind == 'none' else int(n or args.threads)} | "
                      f"{secs:.3f} | {secs / alone:.2f} | {longest * 1e3:.1f} | "
                      f"{wake[0]:.2f} / {wake[1]:.2f} |", flush=True)

if __name__ == "__main__":
    main()
