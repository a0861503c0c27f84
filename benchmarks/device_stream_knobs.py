"""The device stream's reader threads and bands in flight, on the chip.

``jax.jit(jax.hessian(loss))`` and ``jax.jit(jax.value_and_grad(loss))`` of a
512-parameter logistic loss over a store of ``--rows`` rows (written under
``--folder`` first, page cache warm), with ``jask.engine.device``'s reader count
and the bands its plan keeps in flight set between rounds, three calls each
after compiling. Run on an accelerator machine:
``python -m benchmarks.device_stream_knobs``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from benchmarks.chip_ops import _logistic, _move_once, _store

#: (readers, bands in flight) in the order measured; repeats show the drift
ROUNDS = [(8, 2), (8, 4), (4, 2), (8, 2), (8, 4), (8, 6)]


def _timed(fn, n: int = 3) -> list[float]:
    import jax

    took = []
    for _ in range(n):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        took.append(round(time.perf_counter() - start, 3))
    return took


def main(argv=None) -> None:
    import jax

    import jask
    from jask.engine import device

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--folder", default="/tmp/jask-knobs")
    args = parser.parse_args(argv)
    os.makedirs(args.folder, exist_ok=True)
    jask.set_memory_budget("8GB", scratch_dir=os.path.join(args.folder, "scratch"))
    X = _store(args.folder, "N", args.rows, 512)
    rng = np.random.default_rng(2)
    w = (rng.standard_normal(512) * 0.05).astype(np.float32)
    y = jask.from_numpy((rng.random(args.rows) > 0.5).astype(np.float32))
    print(f"X {X.shape}, moved once in {_move_once(X):.3f} s", flush=True)
    hessian = jax.jit(jax.hessian(_logistic), static_argnums=3)
    value_and_grad = jax.jit(jax.value_and_grad(_logistic), static_argnums=3)
    jask.set_device(jax.devices()[0])
    defaults = device.MAX_READERS, device.plan.__defaults__
    try:
        with jax.default_matmul_precision("highest"):
            for fn in (hessian, value_and_grad):  # compiled outside the rounds
                _timed(lambda fn=fn: fn(w, X, y, jask), 1)
            for readers, in_flight in ROUNDS:
                device.MAX_READERS = readers
                device.plan.__defaults__ = (in_flight, 0)
                print(f"readers {readers}, in flight {in_flight}: hessian "
                      f"{_timed(lambda: hessian(w, X, y, jask))}, value_and_grad "
                      f"{_timed(lambda: value_and_grad(w, X, y, jask))}", flush=True)
    finally:
        device.MAX_READERS, device.plan.__defaults__ = defaults
        jask.set_device()


if __name__ == "__main__":
    main()
