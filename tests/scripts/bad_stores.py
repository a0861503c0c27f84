"""Ops on damaged or read-only stores; print each outcome as JSON.

Run by tests/test_bad_stores.py: ``python bad_stores.py CASE PATH SCRATCH``.
"""
import json
import os
import shutil
import sys
import threading
import time

import numpy as np

import jask
from jask import durability


def outcome(fn):
    try:
        return {"ok": True, "value": fn()}
    except Exception as err:  # noqa: BLE001 - the report is the point
        return {"ok": False, "type": type(err).__name__, "message": str(err)}


def main(case, path, scratch):
    jask.set_memory_budget("1MB", scratch_dir=scratch)
    if case == "open":
        result = outcome(lambda: float(jask.sum(jask.open(path))))
    elif case == "own-missing-chunk":  # a chunk file of jask's own store vanishes
        x = jask.from_numpy(np.ones((300, 200)))
        chunk = next(os.path.join(d, f) for d, _, fs in os.walk(x.filename) for f in fs
                     if f != "zarr.json")
        os.remove(chunk)
        result = outcome(lambda: float(jask.sum(x + 1.0)))
    elif case == "changed-mid-op":  # another writer swaps in new values while we read
        a = jask.open(path)
        spare = path + "-spare"
        shutil.copytree(path, spare)

        def other_writer():
            time.sleep(0.8)  # after the op has started (its first call compiles)
            durability.replace(path, lambda p: os.rename(spare, p), lambda p: None,
                               durable=False)
        t = threading.Thread(target=other_writer)
        t.start()
        result = outcome(lambda: float(jask.sum(a * 2.0)))
        t.join()
    elif case == "read-only":
        a = jask.open(path)
        result = {"sum": outcome(lambda: float(jask.sum(a))),
                  "add": outcome(lambda: float(jask.sum(a + 1.0))),
                  "update_": outcome(lambda: a.update_(a + 1.0).shape)}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
