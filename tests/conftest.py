"""Fixtures for jask's own tests: small budgets that force many tiles."""
import gc

import jax
import numpy as np
import pytest
from s3server import s3_bucket, s3_server  # noqa: F401  (fixtures: a real S3 server)

import jask
from helpers import SMALL_BUDGET

#: Scripts the doctest collection must not import: sklearn_estimators.py needs
#: scikit-learn (not in the test extra: a fresh environment has none) and sets
#: SCIPY_ARRAY_API for its own process, which would leak into the tests'.
#: scripts/external/ holds pytest plugins for other projects' suites
#: (external_suites.py), which import array-api-extra and scikit-learn.
#: reader_process_unguarded.py is a script without a ``__main__`` guard on
#: purpose (it trains at import, as such scripts do).
collect_ignore = ["scripts/sklearn_estimators.py", "scripts/external",
                  "scripts/reader_process_unguarded.py"]

DTYPES = [np.float32, np.float64]


@pytest.fixture
def small_budget(jask_scratch):
    """A budget small enough to split the test arrays into many tiles, in
    the test's own (leak-checked) scratch directory."""
    jask.set_memory_budget(SMALL_BUDGET, scratch_dir=jask_scratch.path)
    return jask.get_config()


@pytest.fixture(params=DTYPES, ids=lambda d: np.dtype(d).name)
def dtype(request):
    """float32 and float64; float64 runs with JAX's x64 mode on."""
    if request.param == np.float64:
        with jax.enable_x64(True):
            yield request.param
    else:
        yield request.param



@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Freeze what outlived the test (imported libraries, JAX's caches): every
    test's leak check runs a full garbage collection, which then scans only
    the objects made since (0.1 s per test with JAX's heap, a third of the
    op table's time; gc.freeze keeps reference counting, so nothing frozen
    leaks unless it sits in a cycle)."""
    yield
    gc.freeze()


@pytest.fixture
def device_feed(monkeypatch):
    """The device feed (windows copied whole, batches gathered on the device)
    on JAX's CPU device, which otherwise gets batches cut on the host: the
    path an accelerator takes, tested where CI has none."""
    monkeypatch.setattr(jask.api.batches, "HOST_CUT_PLATFORMS", ())
