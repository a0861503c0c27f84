"""Shared helpers for jask's tests."""
import contextlib
import subprocess

import numpy as np
import pytest

#: Small enough that the odd shapes used in the tests span many tiles.
SMALL_BUDGET = "64KB"


def tolerance(dtype):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=2e-4, atol=2e-4)
    return dict(rtol=1e-10, atol=1e-10)


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@contextlib.contextmanager
def tmpfs_mount(folder, size: str):
    """A real size-limited tmpfs at ``folder`` (we run as root), unmounted
    afterwards; the test is skipped, saying why, where mounting fails."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
