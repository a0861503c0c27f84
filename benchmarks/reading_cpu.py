"""Where a cold shuffled epoch's reading CPU goes (issue 44): the CPU (user,
system) of ``jask.batches``' reading tasks over one cold shuffled epoch of X
and y, against a bare reader doing the same reads (the same runs of the same
files into buffers of the same size, on as many threads, a ``preadv`` per run
of consecutive rows, files opened beforehand; with and without a
``POSIX_FADV_WILLNEED`` per run first, as the loader asks) and against the
raw read of the chunk files whole (``benchmarks.minibatches.raw_read``).
Each after the page cache is dropped.

``PYTHONPATH=$PWD python -m benchmarks.reading_cpu --data-dir .bench_data [--runs 2]
[--profile]`` (``--profile``: cProfile of the reading tasks of one warm epoch)
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.minibatches import BATCH, _chunk_files, _drop_cache, prepare

THREADS = 8


def _cpu() -> tuple[float, float]:
    """(user, system) CPU seconds of the calling thread."""
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime, r.ru_stime


def _process_cpu() -> float:
    t = os.times()
    return t.user + t.system


def epoch(paths: dict, profiles: list | None = None) -> dict:
    """One shuffled epoch of X and y: wall, process CPU, and the reading
    tasks' CPU (user, system); the runs each task read (for :func:`bare`)."""
    import jask
    from jask.api import batches as B

    orig, lock = B._read_runs, threading.Lock()
    spent = [0.0, 0.0]
    tasks: list = []

    def timed(a, starts, stops, into, stamps, files=None):
        u0, s0 = _cpu()
        try:
            if profiles is not None:  # (a profiler per task: each profiles its own thread)
                mine = cProfile.Profile()
                mine.enable()
                try:
                    return orig(a, starts, stops, into, stamps, files)
                finally:
                    mine.disable()
                    with lock:
                        profiles.append(mine)
            return orig(a, starts, stops, into, stamps, files)
        finally:
            u1, s1 = _cpu()
            with lock:
                spent[0] += u1 - u0
                spent[1] += s1 - s0
                # (None: rows of an array held in memory whole, a take)
                tasks.append((a._store().path if hasattr(a, "_store") else None,
                              np.array(starts), np.array(stops), into.nbytes))

    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    B._read_runs = timed
    try:
        cpu, start = _process_cpu(), time.perf_counter()
        for _ in jask.batches(X, y, batch_size=BATCH, shuffle=True, seed=0):
            pass
        wall, cpu = time.perf_counter() - start, _process_cpu() - cpu
    finally:
        B._read_runs = orig
    return {"wall": wall, "cpu": cpu, "user": spent[0], "sys": spent[1], "tasks": tasks}


def bare(roots: dict, tasks: list, advise: bool) -> dict:
    """``tasks`` (from :func:`epoch`) read by plain ``preadv`` on
    :data:`THREADS` threads, each into a buffer of its task's size."""
    import json
    fds: dict = {}
    layouts = {}
    for root in roots:
        with open(os.path.join(root, "zarr.json")) as f:
            meta = json.load(f)
        per = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
        row = int(np.prod(meta["shape"][1:])) * np.dtype(meta["data_type"]).itemsize
        layouts[root] = (per, row, len(meta["shape"]))
    for root in roots:
        for name in _chunk_files(root):
            fds[name] = os.open(name, os.O_RDONLY)
    buffers = threading.local()
    spent, lock = [0.0, 0.0], threading.Lock()

    def one(task):
        root, starts, stops, nbytes = task
        per, row, ndim = layouts[root]
        buf = getattr(buffers, "buf", None)
        if buf is None or len(buf) < nbytes:
            buf = buffers.buf = memoryview(np.ones(max(nbytes, 64 << 20), np.uint8))
        u0, s0 = _cpu()
        at = 0
        for lo, hi in zip(starts.tolist(), stops.tolist()):
            c = lo // per
            fd = fds[os.path.join(root, "c", str(c), *["0"] * (ndim - 1))]
            if advise:
                os.posix_fadvise(fd, (lo - c * per) * row, (hi - lo) * row,
                                 os.POSIX_FADV_WILLNEED)
        for lo, hi in zip(starts.tolist(), stops.tolist()):
            c = lo // per
            fd = fds[os.path.join(root, "c", str(c), *["0"] * (ndim - 1))]
            n = (hi - lo) * row
            os.preadv(fd, [buf[at:at + n]], (lo - c * per) * row)
            at += n
        u1, s1 = _cpu()
        with lock:
            spent[0] += u1 - u0
            spent[1] += s1 - s0

    _drop_cache(list(roots))
    cpu, start = _process_cpu(), time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, [t for t in tasks if t[0] is not None]))
    wall, cpu = time.perf_counter() - start, _process_cpu() - cpu
    for fd in fds.values():
        os.close(fd)
    return {"wall": wall, "cpu": cpu, "user": spent[0], "sys": spent[1]}


def raw(paths: dict) -> dict:
    """X's and y's chunk files read whole (8 threads, reused buffers)."""
    files = _chunk_files(paths["X"], paths["y"])
    size = max(os.path.getsize(f) for f in files)
    mine = threading.local()
    spent, lock = [0.0, 0.0], threading.Lock()

    def one(name):
        if not hasattr(mine, "buf"):
            mine.buf = memoryview(np.ones(size, np.uint8))
        u0, s0 = _cpu()
        got = 0
        with open(name, "rb", buffering=0) as f:
            while n := f.readinto(mine.buf[got:]):
                got += n
        u1, s1 = _cpu()
        with lock:
            spent[0] += u1 - u0
            spent[1] += s1 - s0
        return got
    with ThreadPoolExecutor(THREADS) as pool:  # (buffers made before the clock starts)
        list(pool.map(one, files[:THREADS * 4]))
    spent[:] = [0.0, 0.0]
    _drop_cache([paths["X"], paths["y"]])
    cpu, start = _process_cpu(), time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, files))
    wall, cpu = time.perf_counter() - start, _process_cpu() - cpu
    return {"wall": wall, "cpu": cpu, "user": spent[0], "sys": spent[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=".bench_data")
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    paths = prepare(args.data_dir, args.gib)
    roots = {paths["X"]: None, paths["y"]: None}
    print("| run | reader | wall s | process CPU s | reading user s | reading sys s |")
    print("|---|---|---|---|---|---|")
    for k in range(args.runs):
        _drop_cache([paths["X"], paths["y"]])
        e = epoch(paths)
        rows = [("jask shuffled epoch", e),
                ("bare preadv, same runs", bare(roots, e["tasks"], False)),
                ("bare fadvise + preadv", bare(roots, e["tasks"], True)),
                ("raw whole files", raw(paths))]
        for name, r in rows:
            print(f"| {k + 1} | {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['user']:.2f} | "
                  f"{r['sys']:.2f} |", flush=True)
        runs = sum(len(t[1]) for t in e["tasks"])
        print(f"(epoch: {len(e['tasks'])} reading tasks, {runs} runs)")
    if args.profile:
        profiles: list = []
        epoch(paths, profiles)  # warm: the Python side alone
        pstats.Stats(*profiles).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
