"""The fed epoch of ``jask.batches(..., device=d)`` (issue 44) with the
loader's knobs set between rounds: the bytes of a ``device_put`` piece
(``jask.api.batches.TRANSFER_BYTES``) and the interpreter's switch interval
(``sys.setswitchinterval``: how long a thread holding the GIL keeps it while
another waits, 5 ms by default; the consumer's step dispatches wait behind
the stager's and the reading child's collector threads). Each setting: the
loader alone and fed to the MLP step of benchmarks/loader_device.py, shuffled
and in order, against the steps alone, rounds interleaved so that drift hits
all alike.

Run: ``python -m benchmarks.loader_knobs [--gib 1] [--rounds 2]``; prints a
markdown table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from benchmarks import loader_device as ld

#: (name, transfer piece bytes, switch interval s) in the order measured
SETTINGS = [
    ("default (32 MiB pieces, 5 ms)", 32 * 2**20, 0.005),
    ("16 MiB pieces", 16 * 2**20, 0.005),
    ("8 MiB pieces", 8 * 2**20, 0.005),
    ("switch interval 0.5 ms", 32 * 2**20, 0.0005),
    ("8 MiB pieces, 0.5 ms", 8 * 2**20, 0.0005),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loader_knobs")
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2, help="epochs timed per measure")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "jask-loader"))
    args = p.parse_args(argv)
    import jax

    import jask
    from jask.api import batches as B
    jask.set_memory_budget("8GB")
    device = jax.devices()[0]
    paths = ld.prepare(args.data_dir, args.gib)
    steps = ld.steps_alone(device, paths["rows"] // ld.BATCH, args.repeat)
    got: dict = {}
    for _ in range(args.rounds):
        for name, piece, interval in SETTINGS:
            B.TRANSFER_BYTES = piece
            sys.setswitchinterval(interval)
            for shuffle in (True, False):
                alone, _ = ld.loader_alone(paths, device, shuffle, args.repeat)
                fed = ld.together(paths, device, shuffle, args.repeat)
                got.setdefault((name, shuffle), []).append((alone, fed))
                print(f"{name} shuffle={shuffle}: alone {alone:.3f} s, fed {fed:.3f} s",
                      flush=True)
    sys.setswitchinterval(0.005)
    print(f"\n{args.gib} GiB, {device.device_kind}; steps alone {steps:.3f} s; medians of "
          f"{args.rounds} rounds\n")
    print("| setting | order | loader alone s | fed s | fed / max(steps, loader) |\n"
          "|---|---|---|---|---|")
    for (name, shuffle), runs in got.items():
        alone = statistics.median(a for a, _ in runs)
        fed = statistics.median(f for _, f in runs)
        print(f"| {name} | {'shuffled' if shuffle else 'in order'} | {alone:.3f} | {fed:.3f} "
              f"| {fed / max(steps, alone):.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
