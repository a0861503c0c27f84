"""jask on an accelerator (issues 44 and 45): the host path and the chip path side by side.

Run on a machine with a GPU or TPU: ``python -m benchmarks.accelerator
[--quick] [--folder DIR] [--only steps|ops|loader]``. Sections:

* ``steps`` (:func:`benchmarks.chip_ops.logistic`, issue 45): a logistic
  ``value_and_grad`` step over X, eager and under ``jax.jit``, host path and
  chip path, against moving X once and the chip's step with X in its memory.
* ``ops`` (:mod:`benchmarks.chip_ops`, issue 45) measures ``jask.sum(X)``,
  ``X.T @ X`` (d = 128 and 1,024) on the host and on the chip, the time to
  move X once and the chip's step with X in its memory.
* ``loader`` (:mod:`benchmarks.loader_device`, issue 44): ``jask.batches(...,
  device=chip)`` against jask's read rate and the host -> device copy, alone
  and feeding a jitted MLP step; its own options pass through (``--gib``,
  ``--repeat``, ``--budget``).

``--quick``: 1 GiB stores (under 3 minutes on a TPU v5e).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

from benchmarks import chip_ops, loader_device

SECTIONS = ("steps", "ops", "loader")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--folder", default=None)
    parser.add_argument("--only", choices=SECTIONS, action="append",
                        help="run only these sections (default: all)")
    args, rest = parser.parse_known_args(argv)
    folder = args.folder or tempfile.mkdtemp(prefix="jask-accelerator-")
    sections = args.only or SECTIONS
    if "steps" in sections:
        steps = chip_ops.logistic(folder, args.quick)
        print(json.dumps({"steps": steps}, indent=1), flush=True)
    if "ops" in sections:
        rows = chip_ops.measure(folder, args.quick)
        print(json.dumps({"ops": rows}, indent=1), flush=True)
    if "loader" in sections:
        print("\n## loader\n", flush=True)
        loader_device.main(rest + ["--data-dir", os.path.join(folder, "loader")]
                           + (["--quick"] if args.quick else []))


if __name__ == "__main__":
    main()
