"""Kill processes in the middle of ``update_``, at many moments; report each.

Run by tests/test_durability.py: ``python kill_updates.py STORE SCRATCH MODE``
with MODE ``exchange`` (the atomic swap) or ``renames`` (the fallback for
filesystems without it). This process imports jask once, then for each line
``TRIAL SEED WHEN`` read from stdin forks a child that loops
``target.update_(full(k))`` for k = TRIAL*1000, TRIAL*1000+1, ... and kills it
with SIGKILL: after a random delay (WHEN=random), or exactly inside the step
of ``update_`` named WHEN (``copy``, ``sync``, ``swap``, ``cleanup``,
``renamed-*``: see ``jask.store.kinds.local.durability.on_step``), where the child pauses, in
its first, second or third ``update_``. It prints one JSON line per kill: the
last k whose ``update_`` returned, the k in progress, and the step the child
was in. The test reads the store with plain zarr after each line; nothing here
checks anything.
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
from jask.store.kinds.local import durability


def child(store: str, first: int, out_fd: int, mode: str, pause_at: str, nth: int) -> None:
    def say(msg: str) -> None:
        os.write(out_fd, (msg + "\n").encode())

    if mode == "renames":  # as on a filesystem without RENAME_EXCHANGE
        durability._renameat2 = None
    reached = 0

    def on_step(step: str) -> None:
        nonlocal reached
        say(f"{step} {k}")
        if step == pause_at:
            reached += 1
            if reached == nth:  # wait here for the SIGKILL
                say("paused")
                time.sleep(3600)

    durability.on_step = on_step
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
            child(store, number * 1000, write_fd, mode, when, rng.randint(1, 3))
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
            if not data:  # the child died on its own: the test sees it in the report
                break
            buf += data
            *done, buf = buf.split(b"\n")
            lines += [d.decode() for d in done]
        if when != "random" and "paused" in lines:
            break
        if when == "random" and deadline is None and any(
                line.startswith("start") for line in lines):
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
    steps = [line.split()[0] for line in lines if line != "paused"]
    last = steps[-1] if steps else ""
    phase = {"start": "copy", "done": "between"}.get(last, last)
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
