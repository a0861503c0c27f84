"""Ops on a scratch folder that is (almost) full; report what happened, as JSON.

Run by tests/test_full_disk.py: ``python full_disk.py MOUNT INPUT``. MOUNT
is a 12 MiB tmpfs holding a ballast file (the user's own) and a user store
``MOUNT/target.zarr``; INPUT is a (1000, 1000) float32 store on disk. Each
step's outcome is printed; the parent checks the stores with plain zarr.
"""
import json
import os
import sys
import threading

import numpy as np

import jask


def outcome(fn):
    try:
        value = fn()
        return {"ok": True, "value": value}
    except Exception as err:  # noqa: BLE001 - the report is the point
        return {"ok": False, "type": type(err).__name__, "message": str(err)}


def stores_in(session: str) -> list[str]:
    """The session folder's entries but jask's proof of it (its marker file)."""
    return [n for n in os.listdir(session) if n != jask.store.kinds.local.sessions.MARKER]


def main(mount: str, input_path: str) -> None:
    scratch = os.path.join(mount, "scratch")
    jask.set_memory_budget("8MB", scratch_dir=scratch, allow_tmpfs=True)
    a = jask.open(input_path)
    session = jask.store.kinds.local.sessions.session_dir(scratch)
    report = {"session": session}
    # 1. the output (4 MB) cannot fit: refused before writing
    report["refused"] = outcome(lambda: (a + 1.0).shape)
    report["left_after_refused"] = stores_in(session)
    # 2. two outputs that fit one at a time, at once: one fills the disk
    results = [None, None]
    barrier = threading.Barrier(2)

    def run(i):
        barrier.wait()
        # each writes its product (lazy, the chain would run in one pass writing nothing)
        results[i] = outcome(lambda: float(jask.sum((a * float(i + 2)).block_until_ready())))
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    os.truncate(os.path.join(mount, "ballast"), 6 * 2**20)   # ~6 MiB free: one fits
    [t.start() for t in threads]
    [t.join() for t in threads]
    report["racing"] = results
    jask.collect()
    report["left_after_racing"] = stores_in(session)
    # 3. update_ of a user store on the full disk: refused, target intact
    target = jask.open(os.path.join(mount, "target.zarr"))
    small = jask.from_numpy(np.full(target.shape, 7.0, np.float32))  # 1.44 MB, in scratch
    with open(os.path.join(mount, "ballast"), "r+b") as f:
        os.posix_fallocate(f.fileno(), 0, 8 * 2**20)
    report["update"] = outcome(lambda: target.update_(small).shape)
    report["from_numpy"] = outcome(lambda: jask.from_numpy(np.ones((1000, 1000), np.float32)).shape)
    # 4. once space is freed, the next op works
    os.remove(os.path.join(mount, "ballast"))
    report["after_freeing"] = outcome(lambda: float(jask.sum(a + 1.0)))
    report["update_after_freeing"] = outcome(lambda: target.update_(small).shape)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
