"""update_ survives SIGKILL at any moment: the store, read by plain zarr, holds
all old or all new values, never torn, never missing.

A real child process (forked from one that imported jask once, so that many
kills fit in seconds) loops ``target.update_(full(k))`` and is killed with
SIGKILL inside each step of ``update_`` (it pauses there through the test hook
``jask.store.kinds.local.durability.on_step``: every step is hit on every run, on any machine),
then at random moments; after every kill this process reads the store with
plain zarr.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import zarr

from helpers import script_command
from jask.store.kinds.local import durability


def _user_store(path, layout):
    if layout == "v2-compressed":
        z = zarr.create_array(path, shape=(70, 50), chunks=(16, 16), dtype="f4",
                              zarr_format=2, fill_value=0)
    else:  # uncompressed v3 with ragged chunks: jask's raw chunk path
        z = zarr.create_array(path, shape=(70, 50), chunks=(16, 24), dtype="f8",
                              compressors=None, zarr_format=3, fill_value=0)
    z[:] = -1
    return z


def _kill_trials(tmp_path, layout, mode, whens):
    store = str(tmp_path / "target.zarr")
    _user_store(store, layout)
    proc = subprocess.Popen(script_command("kill_updates.py", store, tmp_path / "scratch", mode),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    current, phases = -1.0, []
    try:
        for number, when in enumerate(whens, 1):
            proc.stdin.write(f"{number} {number} {when}\n")
            proc.stdin.flush()
            kill = json.loads(proc.stdout.readline())
            phases.append(kill["phase"])
            assert when == "random" or kill["phase"] == when, (when, kill)
            if mode == "renames":  # the fallback needs jask's recovery first
                assert durability.recover(store)
            values = zarr.open_array(store, mode="r")[:]  # raises if missing
            assert values.shape == (70, 50)
            seen = np.unique(values)
            old = kill["done"] if kill["done"] >= number * 1000 else current
            assert len(seen) == 1 and seen[0] in (old, kill["next"]), (kill, seen, old)
            current = float(seen[0])
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert durability.recover(store)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".target")] == []
    return phases


@pytest.mark.parametrize("layout", ["v2-compressed", "v3-raw"])
def test_sigkill_during_update_never_tears_or_loses_the_store(tmp_path, layout):
    steps = ["copy", "sync", "swap", "cleanup"]
    phases = _kill_trials(tmp_path, layout, "exchange", steps + ["random"] * 4)
    assert phases[:4] == steps and len(phases) == 8, phases


def test_sigkill_during_the_fallback_swap_is_recovered(tmp_path):
    """Without RENAME_EXCHANGE the swap is three renames; a kill between them
    leaves names from which jask's recovery (at the next update_ or open)
    finishes it."""
    steps = ["copy", "swap", "renamed-ready", "renamed-old", "renamed-in", "cleanup"]
    phases = _kill_trials(tmp_path, "v3-raw", "renames", steps + ["random"] * 2)
    assert phases[:6] == steps, phases


def test_recovery_removes_only_update_leftovers(tmp_path):
    store = str(tmp_path / "a.zarr")
    _user_store(store, "v3-raw")
    os.makedirs(tmp_path / ".a.zarr.jask-update-0123")
    (tmp_path / "mine.txt").write_text("the user's")
    os.makedirs(tmp_path / ".a.zarr.backup")
    assert durability.recover(store)
    assert sorted(os.listdir(tmp_path)) == [".a.zarr.backup", "a.zarr", "mine.txt"]
    assert (zarr.open_array(store, mode="r")[:] == -1).all()
