"""Kill processes in the middle of ``update_``, at many moments; report each.

Run by tests/test_durability.py: ``python kill_updates.py STORE SCRATCH MODE``
with MODE ``exchange`` (the atomic swap) or ``renames`` (the fallback for
filesystems without it). This process imports jask once, then for each line
``TRIAL SEED WHEN`` read from stdin forks a child that loops
``target.update_(full(k))`` for k = TRIAL*1000, TRIAL*1000+1, ... and kills it
with SIGKILL: after a random delay (WHEN=random) or right as it starts a
swap (WHEN=swap). It prints one JSON line per kill: the last k whose
``update_`` returned, the k in progress, and the phase the child was in.
The test reads the store with plain zarr after each line; nothing here
checks anything.

The swap is slowed by a few milliseconds before and after (a sleep around
the real ``_swap``) so that kills land inside it, not only around it.
"""
import json
import os
import random
import select
import signal
import sys
import time

import numpy as np

import jask
from jask import durability


class _SlowRenames:
    """``os`` with a pause after each rename, so kills land between them."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def rename(src, dst):
        os.rename(src, dst)
        time.sleep(0.003)


def child(store: str, first: int, out_fd: int, mode: str) -> None:
    def say(msg: str) -> None:
        os.write(out_fd, (msg + "\n").encode())

    real_swap = durability._swap
    if mode == "renames":  # as on a filesystem without RENAME_EXCHANGE
        durability._renameat2 = None
        durability.os = _SlowRenames()

    def slow_swap(staging, target, durable=True):
        say(f"swap {k}")
        time.sleep(0.004)
        real_swap(staging, target, durable)
        say(f"swapped {k}")

    durability._swap = slow_swap
    target = jask.open(store)
    k = first
    while True:
        value = jask.from_numpy(np.full(target.shape, k, target.dtype))
        say(f"start {k}")
        target.update_(value)
        say(f"done {k}")
        k += 1


def trial(store: str, number: int, seed: int, when: str, mode: str) -> dict:
    rng = random.Random(seed)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            child(store, number * 1000, write_fd, mode)
        finally:
            os._exit(1)
    os.close(write_fd)
    lines, buf = [], b""
    deadline = None
    delay = rng.uniform(0.0, 0.6)
    while True:
        ready, _, _ = select.select([read_fd], [], [], 0.001)
        if ready:
            data = os.read(read_fd, 4096)
            buf += data
            *done, buf = buf.split(b"\n")
            lines += [d.decode() for d in done]
        if deadline is None:
            if when == "swap" and any(line.startswith("swap") for line in lines):
                deadline = time.monotonic() + rng.uniform(0.0, 0.012)
            elif when != "swap" and any(line.startswith("start") for line in lines):
                deadline = time.monotonic() + delay  # counted from the first update_
        if deadline is not None and time.monotonic() >= deadline:
            break
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while data := os.read(read_fd, 4096):  # what it said just before dying
        buf += data
    lines += [d.decode() for d in buf.split(b"\n") if d]
    os.close(read_fd)
    done = [int(line.split()[1]) for line in lines if line.startswith("done")]
    last = lines[-1].split()[0] if lines else ""
    phase = {"start": "copy", "swap": "swap", "swapped": "cleanup", "done": "between"}.get(last, "")
    first = number * 1000
    return {"done": done[-1] if done else first - 1, "next": (done[-1] + 1) if done else first,
            "phase": phase}


def main(store: str, scratch: str, mode: str) -> None:
    jask.set_memory_budget("4MB", scratch_dir=scratch)
    print("ready", flush=True)
    for line in sys.stdin:
        number, seed, when = line.split()
        print(json.dumps(trial(store, int(number), int(seed), when, mode)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
