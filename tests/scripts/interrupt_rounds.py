"""Rounds of long ops, each stopped by one SIGINT; a JSON report per round.

Run by tests/test_interrupts.py: ``python interrupt_rounds.py MODE SCRATCH``.
MODE is ``eager`` (long eager ops: a fused chain observed, then an op that
computes a store), ``jit`` (a jitted function) or ``drops`` (many small ops
whose results are dropped at once: finalizers run all the time, in the main
thread). The script prints "ready", then for each line "go" read from stdin
prints "running" and loops the op until a KeyboardInterrupt (or anything
else) arrives. With SIGINT ignored it then reports, as one JSON line: when
the exception arrived, its type, what its scratch session holds beyond its
inputs after ``jask.collect()`` (partial or orphaned output), and whether
the next op gives the right values.
"""
import json
import os
import re
import signal
import sys
import time

import jax
import numpy as np

import jask
from jask.store import registry
from jask.store.kinds.local import sessions


def main(mode: str, scratch: str) -> None:
    jask.set_memory_budget("4MB", scratch_dir=scratch)
    step = jax.jit(lambda a: jask.sum(jask.square(a + 1.0) * 3.0))
    small = jask.from_numpy(np.ones((40, 40), np.float32))
    big = jask.from_numpy(np.ones((2000, 2000), np.float32))
    tiny = jask.from_numpy(np.ones((4, 4), np.float32))

    def eager():
        float(jask.sum(jask.square(big + 1.0) * 3.0))  # one band group
        jask.transpose(big * 2.0).filename  # noqa: B018 - computes big * 2 then its transpose

    def jitted():
        float(step(big))

    def drops():
        for _ in range(50):
            r = tiny + 1.0
            r = jask.square(r) * 2.0
            del r

    work = {"eager": eager, "jit": jitted, "drops": drops}[mode]
    float(step(small)), eager() if mode == "eager" else None  # compile, make the first stores
    jask.collect()
    folder = sessions.session_dir(scratch)
    inputs, live = set(os.listdir(folder)), registry.live_paths()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("running", flush=True)
        caught, kind, landed = None, None, None
        try:
            while True:
                work()
        except BaseException as err:  # noqa: B036 - the point is what arrives
            caught, kind = time.time(), type(err).__name__
            if kind != "KeyboardInterrupt" and "KeyboardInterrupt" in str(err):
                # JAX's wrapper: its message holds the traceback of where it landed
                landed = re.findall(r'File "([^"]+)", line (\d+), in (\w+)', str(err))[-3:]
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late second press: not here
            del err  # its traceback would keep the interrupted op's operands alive
        jask.collect()
        left = sorted(set(os.listdir(folder)) - inputs)
        leaked = sorted(set(registry.live_paths()) - set(live))
        next_ok = [float(jask.sum(small + 1.0)), float(step(small))] == [3200.0, 19200.0]
        print(json.dumps({"caught": caught, "type": kind, "landed": landed, "left": left,
                          "leaked": leaked, "next_ok": next_ok}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
