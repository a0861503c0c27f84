"""jask on an accelerator (issues 44 and 45): the host path and the chip path side by side.

Run on a machine with a GPU or TPU: ``python -m benchmarks.accelerator
[--quick] [--folder DIR] [--only SECTION] [--big-gib G] [--soak-steps N]``.
Sections:

* ``steps`` (:func:`benchmarks.chip_ops.logistic`, issue 45): a logistic
  ``value_and_grad`` step over X, eager and under ``jax.jit``, host path and
  chip path, against moving X once and the chip's step with X in its memory.
* ``ops`` (:mod:`benchmarks.chip_ops`, issue 45) measures ``jask.sum(X)``,
  ``X.T @ X`` (d = 128 and 1,024) on the host and on the chip, the time to
  move X once and the chip's step with X in its memory.
* ``second`` (:func:`benchmarks.chip_steps.second_order`, issue 45): a
  jitted Newton step, ``jit(hessian)`` and ``jit(vmap)`` over 64 parameter
  vectors of a logistic loss with 512 parameters (X of 1 GB quick, 4.1 GB
  else).
* ``soak`` (:func:`benchmarks.chip_steps.soak`): ``--soak-steps`` (1,000)
  jitted gradient steps on the chip, no hang.
* ``big`` (:func:`benchmarks.chip_steps.larger_than_memory`, only when named
  with ``--only``): the jitted logistic step and ``W.T @ W`` over a store of
  ``--big-gib`` GiB (18), larger than the chip's memory.
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

from benchmarks import chip_ops, chip_steps, loader_device

SECTIONS = ("steps", "ops", "second", "soak", "big", "loader")
#: Run when no section is named (``big`` writes a store of many GiB first).
DEFAULT = ("steps", "ops", "second", "soak", "loader")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--folder", default=None)
    parser.add_argument("--only", choices=SECTIONS, action="append",
                        help=f"run only these sections (default: {', '.join(DEFAULT)})")
    parser.add_argument("--big-gib", type=float, default=18.0)
    parser.add_argument("--soak-steps", type=int, default=1_000)
    args, rest = parser.parse_known_args(argv)
    folder = args.folder or tempfile.mkdtemp(prefix="jask-accelerator-")
    sections = args.only or DEFAULT
    if "steps" in sections:
        steps = chip_ops.logistic(folder, args.quick)
        print(json.dumps({"steps": steps}, indent=1), flush=True)
    if "ops" in sections:
        rows = chip_ops.measure(folder, args.quick)
        print(json.dumps({"ops": rows}, indent=1), flush=True)
    if "second" in sections:
        rows = chip_steps.second_order(folder, args.quick)
        print(json.dumps({"second": rows}, indent=1), flush=True)
    if "soak" in sections:
        print(json.dumps({"soak": chip_steps.soak(folder, args.soak_steps)}), flush=True)
    if "big" in sections:
        rows = chip_steps.larger_than_memory(folder, args.big_gib)
        print(json.dumps({"big": rows}, indent=1), flush=True)
    if "loader" in sections:
        print("\n## loader\n", flush=True)
        loader_device.main(rest + ["--data-dir", os.path.join(folder, "loader")]
                           + (["--quick"] if args.quick else []))


if __name__ == "__main__":
    main()
