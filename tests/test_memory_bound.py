"""The budget is a promise about the process: peak RSS stays within
baseline + budget while every op runs on arrays 8x the budget (measured in
a fresh process, as Cubed does)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

BUDGET = 32 * 10**6
SIDE = 8192  # 8192 x 8192 float32 = 268 MB, 8.4x the budget


def _write(path, shape, chunks, seed):
    """A random Zarr array written chunk row by chunk row (never whole)."""
    z = zarr.create_array(store=path, shape=shape, chunks=chunks, dtype="float32",
                          compressors=None)
    rng = np.random.default_rng(seed)
    for start in range(0, shape[0], chunks[0]):
        stop = min(start + chunks[0], shape[0])
        z[start:stop] = rng.standard_normal((stop - start,) + shape[1:]).astype(np.float32)


@pytest.mark.slow
def test_peak_rss_stays_within_budget(tmp_path):
    data = str(tmp_path)
    _write(os.path.join(data, "a.zarr"), (SIDE, SIDE), (512, 512), 0)
    _write(os.path.join(data, "b.zarr"), (SIDE, SIDE), (512, 512), 1)
    rows = SIDE * SIDE // 128  # X: rows x 128 float32, also 268 MB
    _write(os.path.join(data, "X.zarr"), (rows, 128), (8192, 128), 2)
    _write(os.path.join(data, "y.zarr"), (rows, 1), (8192, 1), 3)
    script = os.path.join(os.path.dirname(__file__), "scripts", "bounded_memory.py")
    out = subprocess.run([sys.executable, script, data, str(BUDGET)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    peaks = report["peaks"]
    table = "\n".join(f"{name:>16}: {peak / 1e6:7.1f} MB" for name, peak in peaks.items())
    print(f"budget {report['budget'] / 1e6:.0f} MB, baseline {report['baseline'] / 1e6:.0f} MB\n{table}")
    assert set(peaks) >= {"add", "sub", "mul", "mul by scalar", "square", "transpose", "sum",
                          "dot", "update_", "jit(grad) step"}
    over = {name: peak for name, peak in peaks.items() if peak > report["budget"]}
    assert not over, f"over the budget of {report['budget']} bytes:\n{table}"
