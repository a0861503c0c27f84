"""A long session stays flat: jitted training steps (grad + update_), 250 in
every run and 1,000 in the slow one, leave the number of stores, the scratch
bytes and the RSS where they were.

Runs in a fresh child process (about 30 s a thousand steps); the scratch is on /dev/shm
when it exists, since this disk's folder operations would make it minutes.
"""
import os
import subprocess

import pytest

from helpers import run_script

#: Measured in child processes: run one after another on one xdist worker
#: (``--dist loadgroup``), never beside each other.
pytestmark = pytest.mark.xdist_group("measured")

#: RSS may wobble (allocator, XLA caches); a leak of one store per step would not.
MAX_RSS_GROWTH = 32 * 2**20


@pytest.mark.parametrize("steps", [250, pytest.param(1000, marks=pytest.mark.slow)])
def test_training_steps_stay_flat(tmp_path, steps):
    base = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path)
    scratch = os.path.join(base, f"jask-soak-{os.getpid()}")
    try:
        report = run_script("soak.py", scratch, steps, timeout=600)
    finally:
        subprocess.run(["rm", "-rf", scratch])
    before, after = report["before"], report["after"]
    print(f"per {steps} steps ({report['seconds']:.1f} s): stores "
          f"{after['stores'] - before['stores']:+d}, scratch bytes "
          f"{after['scratch_bytes'] - before['scratch_bytes']:+d}, RSS "
          f"{(after['rss'] - before['rss']) / 2**20:+.1f} MiB")
    assert after["stores"] == before["stores"]
    assert after["scratch_bytes"] == before["scratch_bytes"]
    assert after["rss"] - before["rss"] < MAX_RSS_GROWTH
