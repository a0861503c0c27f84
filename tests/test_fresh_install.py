"""Each install line of the README resolves in a fresh environment, fast.

Opt-in (``JASK_FRESH_INSTALL=1``): it downloads every dependency with pip's
cache off, several minutes. ``.ci/run`` itself installs the test extra into a
fresh virtual environment on every run, so CI fails exactly when a new
machine would; this check adds the other extras, the time limit and the
search for backtracking.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "scripts" / "fresh_install.py"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("JASK_FRESH_INSTALL") != "1",
                    reason="downloads every dependency (set JASK_FRESH_INSTALL=1)")
def test_every_extra_installs_fresh_within_five_minutes_without_backtracking():
    done = subprocess.run([sys.executable, str(SCRIPT), "--limit", "300"],
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout + done.stderr
