"""Many jitted training steps; print store count, scratch bytes and RSS, as JSON.

Run by tests/test_soak.py: ``python soak.py SCRATCH STEPS``. The figures are
taken after a warm-up of 100 steps and again after STEPS more. SCRATCH may
be on tmpfs: this disk's folder operations (about 1 ms per mkdir/rmdir here)
would otherwise make 1,000 steps take minutes.
"""
import json
import os
import sys
import time

import jax
import numpy as np

import jask
from jask.base.rss import current_rss


def scratch_bytes(folder):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def figures(session):
    jask.collect()
    return {"stores": len(jask.store.registry.live_paths()),
            "scratch_bytes": scratch_bytes(session), "rss": current_rss()}


def main(scratch, steps):
    jask.set_memory_budget("1MB", scratch_dir=scratch, allow_tmpfs=True)
    rng = np.random.default_rng(0)
    X = jask.from_numpy(rng.standard_normal((256, 16)).astype(np.float32))
    y = jask.from_numpy(rng.standard_normal((256, 1)).astype(np.float32))
    w = jask.from_numpy(np.zeros((16, 1), np.float32))
    loss = lambda w, X, y: jask.sum(jask.square(X @ w - y))
    step = jax.jit(lambda w, X, y: w.update_(w - jax.grad(loss)(w, X, y) * 1e-4))
    for _ in range(100):
        w = step(w, X, y)
    session = jask.store.kinds.local.sessions.session_dir(scratch)
    before, t0 = figures(session), time.perf_counter()
    for _ in range(int(steps)):
        w = step(w, X, y)
    seconds = time.perf_counter() - t0
    after = figures(session)
    print(json.dumps({"before": before, "after": after, "seconds": seconds,
                      "loss": float(loss(w, X, y))}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
