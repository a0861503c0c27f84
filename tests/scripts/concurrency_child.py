"""Child processes for tests/test_concurrency.py; each prints JSON or lines.

``threads SCRATCH``: ops from four threads at once, checked against numpy.
``updater STORE FIRST N``: ``update_`` the store with full(FIRST + i), i < N.
``holder SCRATCH``: make stores, print their paths, wait for a line on
stdin, then print whether they all still read back right.
``starter SCRATCH``: start a session (one op) and exit.
"""
import json
import sys
import threading

import jax
import numpy as np

import jask


def threads(scratch):
    jax.config.update("jax_enable_x64", True)  # float64 sums, as numpy gives
    jask.set_memory_budget("1MB", scratch_dir=scratch)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 301, 157))
    a, b = jask.from_numpy(x), jask.from_numpy(y)
    errors = []

    def work(k):
        try:
            for _ in range(5):
                got = (a * float(k) + b).to_numpy()
                np.testing.assert_allclose(got, x * k + y, rtol=1e-12)
                np.testing.assert_allclose(float(jask.sum(a @ b.T)), (x @ y.T).sum(), rtol=1e-9)
        except Exception as err:  # noqa: BLE001
            errors.append(repr(err))
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print(json.dumps({"errors": errors}))


def updater(store, first, n):
    jask.set_memory_budget("4MB", scratch_dir=store + "-scratch-" + first)
    target = jask.open(store)
    for i in range(int(n)):
        target.update_(jask.from_numpy(np.full(target.shape, int(first) + i, target.dtype)))
    print("done", flush=True)


def holder(scratch):
    jask.set_memory_budget("4MB", scratch_dir=scratch)
    kept = [jask.from_numpy(np.full((50, 40), i, np.float32)) for i in range(3)]
    print(json.dumps([k.filename for k in kept]), flush=True)
    sys.stdin.readline()
    print(json.dumps(all((k.to_numpy() == i).all() for i, k in enumerate(kept))), flush=True)


def starter(scratch):
    jask.set_memory_budget("4MB", scratch_dir=scratch)
    print(float(jask.sum(jask.from_numpy(np.ones(10)))), flush=True)


if __name__ == "__main__":
    roles = {"threads": threads, "updater": updater, "holder": holder, "starter": starter}
    roles[sys.argv[1]](*sys.argv[2:])
