"""Test-wide setup shared by the doctests in jask/ and the tests in tests/."""
import numpy as np
import pytest

import jask


@pytest.fixture(autouse=True)
def _scratch_and_budget(tmp_path, monkeypatch):
    """Each test and doctest gets its own scratch directory and budget."""
    monkeypatch.chdir(tmp_path)  # so the default ./.jask_scratch lands here too
    jask.set_memory_budget("64MB", scratch_dir=str(tmp_path / "scratch"))
    yield
    jask.collect()


@pytest.fixture(autouse=True, scope="session")
def _numpy_scalar_repr():
    # The API reference shows scalars as numpy 1.x printed them (``2.0``,
    # not ``np.float32(2.0)``); its examples must run as written.
    with np.printoptions(legacy="1.25"):
        yield
