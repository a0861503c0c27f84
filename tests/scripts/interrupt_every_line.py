"""Raise KeyboardInterrupt at each line of jask's store bookkeeping in turn.

Run by tests/test_interrupts.py: ``python interrupt_every_line.py SCRATCH``.
A signal's KeyboardInterrupt lands between two lines of Python, any two: a
trace function raises it at the N-th line run inside the functions of
:mod:`jask.store.registry` that create, register and delete stores, for N = 1, 2,
... until the ops finish untouched. After each, ``jask.collect()`` must leave the
scratch folder and jask's records as they were before the ops, and the next
op must work. Prints one JSON line: how many lines were tried and where a
store was left behind.
"""
import json
import os
import shutil
import sys

import numpy as np

import jask
from jask.store import registry
from jask.store.kinds.local import sessions

#: The module functions that make, register and delete stores, and every
#: transition of a store's lifetime record (registry.Record).
TRACED = {"create", "new_store", "register", "register_view", "discard", "_delete", "sweep",
          "_sweep_once", "_empty_trash", "_doom_dead_owners", "register_deferred", "fulfil",
          "repoint", "claim", "made", "unclaimed", "discarded", "owner_died", "replace",
          "recomputed", "to_trash", "drop", "take_out", "deleted"}


def ops(a):
    r = jask.square(a + 1.0)  # sweeps the garbage left before, makes some
    r.filename  # noqa: B018 - computes it (eager ops are lazy)
    t = jask.square(a)
    jask.transpose(t).filename  # noqa: B018 - not fusable: computes t first
    del r, t


def main(scratch: str) -> None:
    jask.set_memory_budget("4MB", scratch_dir=scratch)
    a = jask.from_numpy(np.ones((40, 30), np.float32))
    ops(a)
    jask.collect()
    folder = sessions.session_dir(scratch)
    inputs, live = set(os.listdir(folder)), registry.live_paths()
    count, target, where, leaks = 0, 0, None, []

    def tracer(frame, event, arg):
        nonlocal count, where
        code = frame.f_code
        if code.co_filename != registry.__file__ or code.co_name not in TRACED:
            return None
        if event == "line":
            count += 1
            if count == target:
                where = f"registry.{code.co_name}:{frame.f_lineno}"
                raise KeyboardInterrupt
        return tracer

    while True:
        target, count, where = target + 1, 0, None
        garbage = a * 2.0
        del garbage  # for the traced op's sweep
        sys.settrace(tracer)
        try:
            ops(a)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        if where is None:  # ran to the end: every line was tried
            break
        jask.collect()
        left = sorted(set(os.listdir(folder)) - inputs)
        if left or registry.live_paths() != live:
            leaks.append([where, left])
            for name in left:
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    next_ok = float(jask.sum(a + 1.0)) == 2400.0
    print(json.dumps({"lines": target - 1, "leaks": leaks, "next_ok": next_ok}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
