"""Run ops in a loop until SIGINT arrives; report how it ended, as JSON.

Run by tests/test_interrupts.py: ``python interrupt_op.py MODE SCRATCH`` with
MODE ``eager`` (ops one by one) or ``jit`` (a jitted function). After
"running" is printed, the parent sends SIGINT (again, until "stopped" is
printed). This process then reports when the exception arrived, its type
(and, for JAX's wrapper of a KeyboardInterrupt, the file it was raised in),
what is left in its scratch session beyond its inputs, and whether the next
op gives the right value.
"""
import json
import os
import re
import sys
import time

import jax
import numpy as np

import jask


def main(mode: str, scratch: str) -> None:
    jask.set_memory_budget("4MB", scratch_dir=scratch)
    step = jax.jit(lambda a: jask.sum(jask.square(a + 1.0) * 3.0))
    small = jask.from_numpy(np.ones((40, 40), np.float32))
    float(step(small)), jask.square(small + 1.0) * 3.0  # compile before the clock starts
    a = jask.from_numpy(np.ones((3000, 3000), np.float32))
    inputs = set(os.listdir(jask.store.kinds.local.sessions.session_dir(scratch)))
    print("running", flush=True)
    caught, kind, landed = None, None, None
    try:
        while True:
            if mode == "jit":
                float(step(a))
            else:
                r = jask.square(a + 1.0) * 3.0
                del r
    except BaseException as err:  # noqa: B036 - the point is what arrives
        caught, kind = time.time(), type(err).__name__
        print("stopped", flush=True)  # the parent stops pressing Ctrl-C
        if kind != "KeyboardInterrupt" and "KeyboardInterrupt" in str(err):
            # JAX's wrapper: its message holds the traceback of where the
            # KeyboardInterrupt was raised; the innermost file is the last one
            landed = re.findall(r'File "([^"]+)", line', str(err))[-1:] or ["?"]
            landed = landed[0]
        del err  # its traceback would keep the interrupted op's operands alive
    jask.collect()
    left = sorted(set(os.listdir(jask.store.kinds.local.sessions.session_dir(scratch))) - inputs)
    next_ok = [float(jask.sum(small + 1.0)), float(step(small))] == [3200.0, 19200.0]
    print(json.dumps({"caught": caught, "type": kind, "landed": landed,
                      "left": left, "next_ok": next_ok}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
