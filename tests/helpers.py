"""Shared helpers for jask's tests."""
import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

import jask

#: Small enough that the odd shapes used in the tests span many tiles.
SMALL_BUDGET = "64KB"

#: The child-process scripts some tests run (tests/scripts/).
SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")
#: The checkout these tests belong to: what child processes import jask from.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tolerance(dtype):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=2e-4, atol=2e-4)
    return dict(rtol=1e-10, atol=1e-10)


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def to_numpy(x):
    """A DiskArray's values, or an in-memory value as a numpy array."""
    return x.to_numpy() if isinstance(x, jask.DiskArray) else np.asarray(x)


def write_store(path, value, **layout) -> str:
    """``value`` written by zarr itself at ``path`` (chunked, compressed...
    as ``layout`` says, as another tool would); returns the path."""
    z = zarr.create_array(store=str(path), shape=value.shape, dtype=value.dtype, **layout)
    z[...] = value
    return str(path)


def user_store(path, value, **layout):
    """:func:`write_store`, opened with ``jask.open``."""
    return jask.open(write_store(path, value, **layout))


def user_spec(path):
    """A store on disk as jask's planner sees it (a StoreSpec jask does not own)."""
    from jask.store.spec import StoreSpec
    z = zarr.open_array(str(path), mode="r")
    return StoreSpec(str(path), tuple(z.shape), np.dtype(z.dtype), tuple(z.chunks),
                     managed=False)


def stores_on_disk(config) -> list[str]:
    """Every store (``.zarr`` or ``.grad`` folder) under the scratch directory."""
    found = []
    for root, dirs, _ in os.walk(config.scratch_dir):
        found += [os.path.join(root, d) for d in dirs if d.endswith((".zarr", ".grad"))]
        dirs[:] = [d for d in dirs if not d.endswith((".zarr", ".grad"))]
    return sorted(found)


def bytes_on_disk(path, metadata=True) -> int:
    """Bytes of the files under ``path``; ``metadata=False`` counts a store's
    chunk files only (``zarr.json``, ``.zarray``, jask's ``.jask-version``... left out)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files
               if metadata or not f.startswith(("zarr.json", ".z", ".jask-")))


def last_json(stdout: str):
    """The report a child script prints as its last line of output."""
    return json.loads(stdout.strip().splitlines()[-1])


def script_command(name, *args) -> list[str]:
    """The command line that runs tests/scripts/``name`` with ``args``."""
    return [sys.executable, os.path.join(SCRIPTS, name), *map(str, args)]


def run_script(name, *args, timeout, env=None):
    """Run tests/scripts/``name`` to the end in a child process (``env``: more
    environment variables); fail with the end of its stderr unless it exits 0,
    else return its last-line report."""
    # the child imports the jask under test (this checkout's), not an installed one
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run(script_command(name, *args), capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, **(env or {}), "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr[-3000:]
    return last_json(out.stdout)


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


def wait_for_fork(pid: int, seconds: float) -> int | None:
    """The exit code of the forked child ``pid``, or None once it has run
    ``seconds`` (then it is killed: a hung child must not hang the suite)."""
    import time
    deadline = time.time() + seconds
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None
