"""Test-wide setup shared by the doctests in jask/ and the tests in tests/.

jask's own suite uses its pytest plugin: every test and doctest gets its own
scratch directory and budget, and fails if it leaves stores alive.
"""
import numpy as np
import pytest

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
