"""jask on an accelerator (issue 45): the host path and the chip path side by side.

Run on a machine with a GPU or TPU: ``python -m benchmarks.accelerator
[--quick] [--folder DIR]``. The ops section (:mod:`benchmarks.chip_ops`)
measures ``jask.sum(X)``, ``X.T @ X`` (d = 128 and 1,024) on the host and on
the chip, the time to move X once and the chip's step with X in its memory.
``--quick``: 1 GiB stores (under 3 minutes on a TPU v5e).
"""
from __future__ import annotations

import argparse
import json
import tempfile

from benchmarks import chip_ops


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--folder", default=None)
    args = parser.parse_args(argv)
    folder = args.folder or tempfile.mkdtemp(prefix="jask-accelerator-")
    rows = chip_ops.measure(folder, args.quick)
    print(json.dumps({"ops": rows}, indent=1))


if __name__ == "__main__":
    main()
