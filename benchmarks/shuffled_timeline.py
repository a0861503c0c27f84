"""A cold shuffled epoch's timeline (issue 44): per window, when its reads are
submitted (its slot free), when they are all done, when the cutting thread
begins it (``--events``); beside it the disk's requests in flight
(``/proc/diskstats``, sampled every ~2 ms in a side thread) and the cutting
thread's own CPU and time waiting for a core (``/proc/self/task/*/schedstat``):
how long the disk idles, how long the cutting thread waits for reads, for a
core, or for neither (the GIL, the consumer).

``PYTHONPATH=$PWD python -m benchmarks.shuffled_timeline --data-dir .bench_data [--runs 3]
[--events] [--nice N] [--switch S]`` (Linux; the page cache dropped as root, else
by ``POSIX_FADV_DONTNEED``, as :mod:`benchmarks.minibatches` does)
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from benchmarks.minibatches import BATCH, _drop_cache, prepare


def _disk() -> str:
    """The block device holding the data (the busiest whole disk)."""
    best, name = -1, ""
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            # (whole disks only: /sys/block names them, not their partitions)
            if p[2].startswith(("loop", "ram")) or not os.path.exists(f"/sys/block/{p[2]}"):
                continue
            if int(p[5]) > best:
                best, name = int(p[5]), p[2]
    return name


def _sample(disk: str, stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if p[2] == disk:
                    out.append((time.perf_counter(), int(p[11]), int(p[5])))  # in flight, sectors
                    break
        time.sleep(0.002)


def run(paths: dict, nice: int | None = None, slots: int | None = None,
        threads: int | None = None) -> dict:
    """One cold shuffled epoch of X and y, timed (``nice``: the reading threads'
    niceness, set at their first read; ``slots``: host windows in place of
    ``jask.api.batches.SLOTS``, counted by the loader's memory as well;
    ``threads``: the loader's reading threads)."""
    import jask
    from jask.api import batches as B

    orig_slots = B.SLOTS
    if slots is not None:
        B.SLOTS = slots

    orig_read = B._read_runs
    niced: set = set()

    def read_runs(*a, **k):  # the reading threads below the cutting thread (an experiment)
        tid = threading.get_native_id()
        if nice is not None and tid not in niced:
            os.setpriority(os.PRIO_PROCESS, tid, nice)  # (set, not added to)
            niced.add(tid)
        return orig_read(*a, **k)
    B._read_runs = read_runs

    handed = [0.0]  # the cutting thread's time in handing batches over (a full queue, the GIL)
    orig_put = B._Feeder._put_batch

    def put_batch(self, item):
        t = time.perf_counter()
        try:
            return orig_put(self, item)
        finally:
            handed[0] += time.perf_counter() - t
    B._Feeder._put_batch = put_batch

    events: list = []  # (t, kind, window)
    cutter: list = []  # the cutting thread's (CPU, ran, waited for a core) at each window
    fills = [0]
    orig_fill, orig_order = B._Slot.fill, B.BatchPlan.window_order_into

    def fill(self, *a, **k):
        w = fills[0]
        fills[0] += 1
        events.append((time.perf_counter(), "submit", w))
        tasks = orig_fill(self, *a, **k)
        left = [len(tasks)]
        lock = threading.Lock()

        def done(_f, w=w):
            with lock:
                left[0] -= 1
                if not left[0]:
                    events.append((time.perf_counter(), "read", w))
        for t in tasks:
            t.add_done_callback(done)
        return tasks

    def order(self, epoch, w, out):
        events.append((time.perf_counter(), "cut", w))
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            ran, queued = f.read().split()[:2]
        cutter.append((time.thread_time(), int(ran) / 1e9, int(queued) / 1e9))
        return orig_order(self, epoch, w, out)

    B._Slot.fill, B.BatchPlan.window_order_into = fill, order
    disk, stop, samples = _disk(), threading.Event(), []
    try:
        X, y = jask.open(paths["X"]), jask.open(paths["y"])
        _drop_cache([paths["X"], paths["y"]])
        sampler = threading.Thread(target=_sample, args=(disk, stop, samples), daemon=True)
        sampler.start()
        cpu0, t0 = os.times(), time.perf_counter()
        for _xb, _yb in jask.batches(X, y, batch_size=BATCH, shuffle=True, seed=0,
                                      threads=threads):
            pass
        t1, cpu1 = time.perf_counter(), os.times()
        stop.set()
        sampler.join()
    finally:
        B._Slot.fill, B.BatchPlan.window_order_into = orig_fill, orig_order
        B._read_runs, B.SLOTS, B._Feeder._put_batch = orig_read, orig_slots, orig_put
    inside = [s for s in samples if t0 <= s[0] <= t1]
    idle = sum(b[0] - a[0] for a, b in zip(inside, inside[1:]) if a[1] == 0)
    cuts = sorted((t, w) for t, k, w in events if k == "cut")
    reads = {w: t for t, k, w in events if k == "read"}
    # the cutting thread's wait: from the time it finished the window before (or began
    # the window) to the window's reads done, where later
    waited = sum(max(0.0, reads.get(w, t) - t) for t, w in cuts)
    cut_cpu, cut_queued = cutter[-1][0] - cutter[0][0], cutter[-1][2] - cutter[0][2]
    return {"handing": handed[0], "cut cpu": cut_cpu, "cut queued": cut_queued,
            "cut span": cuts[-1][0] - cuts[0][0],
            "wall": t1 - t0, "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
            "disk idle": idle, "cut waits": waited, "events": events, "t0": t0,
            "MB read": (inside[-1][2] - inside[0][2]) * 512 / 1e6 if inside else 0.0,
            "load": os.getloadavg()[0]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=".bench_data")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", action="store_true", help="print each window's events")
    parser.add_argument("--switch", type=float, default=None,
                        help="sys.setswitchinterval (seconds) for the runs")
    parser.add_argument("--nice", type=int, default=None,
                        help="the reading threads' niceness (an experiment)")
    parser.add_argument("--slots", type=int, default=None,
                        help="host windows (jask.api.batches.SLOTS) for the runs")
    parser.add_argument("--threads", type=int, default=None, help="reading threads")
    args = parser.parse_args(argv)
    if args.switch is not None:
        import sys
        sys.setswitchinterval(args.switch)
    paths = prepare(args.data_dir, 2.0)
    for i in range(args.runs):
        r = run(paths, args.nice, args.slots, args.threads)
        print(f"run {i + 1}: wall {r['wall']:.2f} s, CPU {r['cpu']:.2f} s, disk idle "
              f"{r['disk idle']:.2f} s (no request in flight), cutting thread waiting for reads "
              f"{r['cut waits']:.2f} s, {r['MB read']:.0f} MB from the disk, load "
              f"{r['load']:.1f}; cutting thread, "
              f"windows 0-{len(r['events']) // 3 - 1} began over {r['cut span']:.2f} s: "
              f"{r['cut cpu']:.2f} CPU s, {r['cut queued']:.2f} s runnable waiting for a core, "
              f"{r['handing']:.2f} s in handing batches over")
        if args.events:
            for t, kind, w in sorted(r["events"]):
                print(f"  {t - r['t0']:7.3f} {kind:6s} {w}")


if __name__ == "__main__":
    main()
