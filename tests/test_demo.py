"""The README's first command: the demo trains on data larger than its budget."""
import os
import re
import subprocess
import sys


def test_demo_trains_on_data_larger_than_the_budget(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run(
        [sys.executable, "-m", "jask.demo", "--rows", "30000", "--features", "16",
         "--budget", "1MB", "--steps", "4", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    ratio = float(re.search(r"([\d.]+)x the 0.95 MiB budget", out).group(1))  # 1MB: 1e6 bytes
    assert ratio > 1.5, out
    steps = re.findall(r"^\s+\d+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)", out, re.M)
    losses = [float(loss) for loss, _ in steps]
    assert len(losses) == 4 and losses[-1] < losses[0], out
    # the passes are measured (jask.track), not assumed: a jitted step reads X once
    assert [float(p) for _, p in steps] == [1.0] * 4, out
    assert re.search(r"passes over X\s+1.00 a step", out), out
    assert re.search(r"throughput\s+[\d.]+ [kMG]iB/s of X read", out), out
    assert float(re.search(r"training accuracy\s+([\d.]+)", out).group(1)) > 0.7, out
    assert "peak RSS over baseline" in out
    # the warm-up's empty look-alikes of X and y are gone: the folder holds the data only
    assert sorted(os.listdir(tmp_path)) == ["X.zarr", "y.zarr"], os.listdir(tmp_path)
