"""A pytest plugin for code that uses jask: scratch space, a budget, no leaks.

Load it in your ``conftest.py`` with ``pytest_plugins = ["jask.testing"]``
(or run ``pytest -p jask.testing``); it is not registered automatically, so
that installing jask does not import JAX into every pytest run. It adds one
fixture, :func:`jask_scratch`, which
gives the test its own scratch directory and a small memory budget, restores
the previous configuration afterwards, and fails the test at teardown if
stores it made are still alive::

    def test_double(jask_scratch):
        x = jask.from_numpy(np.ones(4)) * 2
        assert float(jask.sum(x)) == 8.0

    @pytest.mark.jask_budget("4MB")          # a smaller budget for this test
    def test_tiles(jask_scratch): ...

    @pytest.mark.jask_allow_leaks            # keeps stores on purpose
    def test_cache(jask_scratch): ...

What counts as left behind: after the test returns, its local variables are
gone, so the fixture runs :func:`jask.collect` and every store made in the
test's scratch directory that is still alive is held by something that
outlives the test: a module global, a cache, a still-running thread. Those
are reported as leaks (with their paths, whose names start with the op that
made them). DiskArrays that are values of the test's fixtures (or leaves of
pytrees that are) do not count: pytest keeps those until after teardown. A
test that failed is not checked: its traceback keeps its locals alive.
Stores opened with :func:`jask.open` belong to the user and never count.

The budget comes from, in order: the ``jask_budget`` marker, the
``jask_budget`` ini option, ``64MB``.
"""
from __future__ import annotations

import dataclasses
import os

import pytest

from jask.base.config import Config, get_config, set_memory_budget
from jask.core.lifetime import collect
from jask.store import registry
from jask.store.recycle import clear as clear_recycled

__all__ = ["Scratch", "jask_scratch", "leaked_stores", "DEFAULT_BUDGET"]

#: Budget of a test that sets none.
DEFAULT_BUDGET = "64MB"

_FAILED = pytest.StashKey[bool]()


@dataclasses.dataclass(frozen=True)
class Scratch:
    """What :func:`jask_scratch` gives a test.

    Attributes:
      path: the test's own scratch directory (inside ``tmp_path``).
      config: the :class:`~jask.Config` active during the test.

    Example:
      >>> import numpy as np, jask
      >>> jask.set_memory_budget("8MB", scratch_dir="/tmp/jask-scratch-example")
      >>> scratch = Scratch("/tmp/jask-scratch-example", jask.get_config())
      >>> x = jask.from_numpy(np.ones(3))
      >>> [os.path.basename(p)[:11] for p in scratch.live_paths()]
      ['from_numpy-']
    """

    path: str
    config: Config

    def live_paths(self) -> list[str]:
        """Paths of the stores made in this scratch directory still alive."""
        return _inside(registry.live_paths(), self.path)


def _inside(paths: list[str], folder: str) -> list[str]:
    prefix = os.path.abspath(folder).rstrip(os.sep) + os.sep
    return [p for p in paths if p.startswith(prefix)]


def leaked_stores(scratch_dir: str) -> list[str]:
    """Delete unreachable stores, then list those still alive in ``scratch_dir``.

    A lazy eager result still owned is computed first, so it is listed too.

    Example:
      >>> import numpy as np, jask
      >>> jask.set_memory_budget("8MB", scratch_dir="/tmp/jask-leak-example")
      >>> kept = jask.from_numpy(np.ones(3))
      >>> len(leaked_stores("/tmp/jask-leak-example"))
      1
      >>> del kept
      >>> leaked_stores("/tmp/jask-leak-example")
      []
    """
    collect()
    kept = [waiting for waiting in registry.owned_deferred()  # pending results alive: leaked
            if _inside([os.path.join(getattr(waiting, "config").scratch_dir, "")], scratch_dir)]
    if kept:
        for waiting in kept:
            try:
                waiting.compute()  # so it has a path to report
            except Exception:  # noqa: BLE001 - it fails (kept by its own error's traceback
                pass           # in a log record, say): nothing written, nothing to report
        collect()  # (the inputs it held)
    return _inside(registry.live_paths(), scratch_dir)


def _fixture_paths(item) -> set[str]:
    """Stores of the DiskArrays among the test's fixture values."""
    import jax

    from jask.core.array import DiskArray
    values = list((getattr(item, "funcargs", None) or {}).values())
    leaves = jax.tree.leaves(values, is_leaf=lambda x: isinstance(x, DiskArray))
    return {x.filename for x in leaves if isinstance(x, DiskArray) and x._owner is not None}


def _budget(request) -> str | int:
    marker = request.node.get_closest_marker("jask_budget")
    if marker is not None:
        if len(marker.args) != 1:
            raise pytest.UsageError("jask_budget takes one budget, e.g. "
                                    "@pytest.mark.jask_budget('4MB')")
        return marker.args[0]
    return request.config.getini("jask_budget") or DEFAULT_BUDGET


@pytest.fixture
def jask_scratch(request, tmp_path):
    """A scratch directory and budget for one test; fails it if stores leak.

    Yields a :class:`Scratch`. See the module docstring for what counts as a
    leak and how to choose the budget.
    """
    previous = get_config()
    path = str(tmp_path / "jask_scratch")
    # The pool of garbage stores kept for reuse is the process's, with a cap:
    # an earlier test's stores, freed after it ended, would decide which of
    # this test's are kept (and so what its scratch holds). Each starts with none.
    clear_recycled()
    set_memory_budget(_budget(request), scratch_dir=path)
    try:
        yield Scratch(path, get_config())
    finally:
        set_memory_budget(previous.requested_memory, scratch_dir=previous.scratch_dir,
                          allow_tmpfs=previous.allow_tmpfs, lazy=previous.lazy)
    if request.node.stash.get(_FAILED, False):
        return
    leaks = sorted(set(leaked_stores(path)) - _fixture_paths(request.node))
    if leaks and request.node.get_closest_marker("jask_allow_leaks") is None:
        names = "\n  ".join(os.path.basename(p) for p in leaks)
        pytest.fail(f"{len(leaks)} jask store(s) made by this test are still alive after "
                    f"it ended (held by a global, a cache or a wider fixture?):\n  {names}\n"
                    "Drop the references, or mark the test with "
                    "@pytest.mark.jask_allow_leaks.", pytrace=False)


def pytest_addoption(parser):
    parser.addini("jask_budget", "memory budget of tests using the jask_scratch fixture "
                  f"(default {DEFAULT_BUDGET})", default="")


def pytest_configure(config):
    config.addinivalue_line("markers", "jask_budget(budget): memory budget for the "
                            "jask_scratch fixture in this test, e.g. '4MB'")
    config.addinivalue_line("markers", "jask_allow_leaks: jask_scratch does not fail the "
                            "test for stores still alive at its end")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report
