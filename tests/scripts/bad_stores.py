"""Ops on damaged or read-only stores; print each outcome as JSON.

Run by tests/test_bad_stores.py: ``python bad_stores.py SCRATCH CASE=PATH ...``
(one process for many cases: starting one costs seconds); prints one JSON
object, the outcome of each case by its name.
"""
import json
import os
import shutil
import sys
import threading
import time

import numpy as np
import zarr

import jask
from jask.store.kinds.local import durability


def outcome(fn):
    try:
        return {"ok": True, "value": fn()}
    except Exception as err:  # noqa: BLE001 - the report is the point
        return {"ok": False, "type": type(err).__name__, "message": str(err)}


def run(case, path):
    kind = "open" if case.startswith("open") else case  # open-<anything>: read it whole
    if kind == "open":
        result = outcome(lambda: float(jask.sum(jask.open(path))))
    elif kind == "own-missing-chunk":  # a chunk file of jask's own store vanishes
        x = jask.from_numpy(np.ones((300, 200)))
        chunk = next(os.path.join(d, f) for d, _, fs in os.walk(x.filename) for f in fs
                     if f != "zarr.json")
        os.remove(chunk)
        result = outcome(lambda: float(jask.sum(x + 1.0)))
    elif kind == "changed-mid-op":  # another writer swaps in new values while we read
        a = jask.open(path)
        spare = path + "-spare"
        shutil.copytree(path, spare)
        new = zarr.open_array(spare, mode="r+")
        new[:] = -new[:] - 1.0  # the new version differs everywhere, and in sign

        session = jask.store.kinds.local.sessions.session_dir(jask.get_config().scratch_dir)
        before = set(os.listdir(session))

        def other_writer():
            while set(os.listdir(session)) == before:  # until the op made its output
                time.sleep(0.001)
            durability.replace(path, lambda p: os.rename(spare, p), lambda p: None,
                               durable=False)
        t = threading.Thread(target=other_writer)
        t.start()
        result = outcome(lambda: float(jask.sum(a * 2.0)))
        t.join()
    elif kind == "read-only":
        a = jask.open(path)
        result = {"sum": outcome(lambda: float(jask.sum(a))),
                  "add": outcome(lambda: float(jask.sum(a + 1.0))),
                  "update_": outcome(lambda: a.update_(a + 1.0).shape)}
    return result


def main(scratch, *cases):
    jask.set_memory_budget("1MB", scratch_dir=scratch)
    results = {}
    for item in cases:
        case, path = item.split("=", 1)
        results[case] = run(case, path)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
