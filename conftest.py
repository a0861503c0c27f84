"""Test-wide setup shared by the doctests in jask/ and the tests in tests/.

jask's own suite uses its pytest plugin: every test and doctest gets its own
scratch directory and budget, and fails if it leaves stores alive.
"""
import signal
import threading

import numpy as np
import pytest

from jask.base import interrupts

pytest_plugins = ["jask.testing"]


@pytest.fixture(autouse=True)
def _isolated(jask_scratch, tmp_path, monkeypatch):
    """Run in tmp_path, so the default ./.jask_scratch lands there too."""
    monkeypatch.chdir(tmp_path)
    return jask_scratch


@pytest.fixture(autouse=True, scope="session")
def _numpy_scalar_repr():
    # The API reference shows scalars as numpy 1.x printed them (``2.0``,
    # not ``np.float32(2.0)``); its examples must run as written.
    with np.printoptions(legacy="1.25"):
        yield


# jask.array_api's ~80 doctest examples run as one test (tests/test_array_api.py):
# as items, each paid ~0.6 s of leak-check teardown for ~0.05 s of example.
collect_ignore_glob = ["jask/array_api/*.py"]


def _sigint_state() -> tuple:
    """What decides whether a Ctrl-C reaches this process's main thread."""
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handler = signal.getsignal(signal.SIGINT)
    # Python's handler and jask's stand-in for it (a notebook kernel puts
    # Python's back) both raise KeyboardInterrupt: the same state.
    return blocked, "Python's" if interrupts._pythons(handler) else handler, interrupts._depth


@pytest.fixture(autouse=True)
def _sigint_as_at_a_terminal():
    """Run each test with Ctrl-C as at a terminal, and fail the test that
    leaves it otherwise.

    A suite started in the background (``cmd &``, ``nohup``) inherits SIGINT
    ignored, and Python keeps it so: the tests of Ctrl-C would then see no
    KeyboardInterrupt, and their children would ignore it too. A test that
    leaves SIGINT blocked, ignored, rerouted or inside an unfinished
    ``interrupts.deferred`` block would make every later test in its worker
    lose its Ctrl-Cs, far from the cause."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler, blocked = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if not interrupts._pythons(handler):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    before = _sigint_state()
    try:
        yield
        after = _sigint_state()
    finally:
        interrupts._depth = 0
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if after != before:
        pytest.fail(f"the test changed how SIGINT reaches the main thread: (blocked, handler, "
                    f"deferred depth) {before} -> {after}", pytrace=False)
