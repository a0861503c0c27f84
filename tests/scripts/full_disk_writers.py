"""Every writer on a full disk: jask.save / to_zarr (refused up front, and
compressed: mid-write), jask.optim.step and optax.apply_updates with the
scratch folder full, jask.optim.apply_updates into a compressed user store
on a full disk (mid-write). Reports each outcome and what is left, as JSON.

Run by tests/test_full_disk.py: ``python full_disk_writers.py MOUNT SCRATCH``.
MOUNT is a small tmpfs; SCRATCH is on another disk.
"""
import json
import os
import sys

import numpy as np
import optax
import zarr

import jask


def outcome(fn):
    try:
        fn()
        return {"ok": True}
    except Exception as err:  # noqa: BLE001 - the report is the point
        return {"ok": False, "type": type(err).__name__, "message": str(err)}


def fill_up(mount: str, leave: int) -> None:
    stats = os.statvfs(mount)
    with open(os.path.join(mount, "ballast"), "wb") as f:
        os.posix_fallocate(f.fileno(), 0, stats.f_bavail * stats.f_frsize - leave)


def main(mount: str, scratch: str) -> None:
    rng = np.random.default_rng(0)
    report = {}
    # the user's arrays on the small disk, scratch elsewhere
    jask.set_memory_budget("8MB", scratch_dir=scratch)
    zarr.create_array(os.path.join(mount, "p.zarr"), data=np.ones((300, 300), np.float32),
                      chunks=(100, 100), compressors=zarr.codecs.ZstdCodec(), zarr_format=3)
    p = jask.open(os.path.join(mount, "p.zarr"))
    g = jask.from_numpy(rng.random((300, 300), dtype=np.float32))   # incompressible
    fill_up(mount, 100_000)
    report["save"] = outcome(lambda: jask.save(g, os.path.join(mount, "s.zarr")))
    report["to_zarr zstd"] = outcome(
        lambda: g.to_zarr(os.path.join(mount, "z.zarr"), compressor="zstd"))
    report["apply_updates"] = outcome(lambda: jask.optim.apply_updates(p, g))
    report["left_beside"] = sorted(os.listdir(mount))
    os.remove(os.path.join(mount, "ballast"))
    # the scratch folder on the small disk
    small = os.path.join(mount, "scratch")
    jask.set_memory_budget("8MB", scratch_dir=small, allow_tmpfs=True)
    q = jask.from_numpy(np.ones((300, 300), np.float32))
    tx = optax.adam(0.1)
    state = tx.init(q)
    fill_up(mount, 200_000)
    report["optim.step"] = outcome(lambda: jask.optim.step(tx, g, state, q))
    report["optax.apply_updates"] = outcome(lambda: optax.apply_updates(q, g))
    report["scratch"] = jask.store.kinds.local.sessions.session_dir(small)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
