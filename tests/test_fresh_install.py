"""Each install line of the README resolves in a fresh environment, fast.

Opt-in (``JASK_FRESH_INSTALL=1``): it downloads every dependency with pip's
cache off, several minutes. ``.ci/run`` itself installs the test extra into a
fresh virtual environment on every run, so CI fails exactly when a new
machine would; this check adds the other extras, the time limit and the
search for backtracking.
"""
import ast
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

TESTS = Path(__file__).resolve().parent
SCRIPT = TESTS / "scripts" / "fresh_install.py"


def _installed_by(root, extras):
    """The distributions ``pip install root[extras]`` brings, read from this
    environment's metadata: what a fresh environment would have."""
    seen, todo = set(), [(root, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        dist = metadata.distribution(name)
        key = (dist.metadata["Name"].lower().replace("_", "-"), wanted)
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e})
                                      for e in (wanted or {""})):
                continue
            try:
                metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                continue  # not for this platform or Python
            todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in seen}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def test_every_module_the_suite_imports_comes_with_the_test_extra():
    # A module installed here by hand but missing from the extra passes every
    # local run and fails CI's fresh environment (array_api_compat, stop 38).
    # Scripts under tests/scripts/ run other projects' suites and say their
    # own requirements; importorskip is not an import statement.
    local = ({p.stem for p in TESTS.glob("*.py")} | {p.stem for p in SCRIPT.parent.glob("*.py")}
             | {"jask", "benchmarks"})
    owners = metadata.packages_distributions()
    extra = _installed_by("jask", {"test"})
    missing = {}
    for path in sorted(TESTS.glob("*.py")):
        for name in _imports(path):
            if name in sys.stdlib_module_names or name in local:
                continue
            dists = {d.lower().replace("_", "-") for d in owners.get(name, [])}
            if not dists & extra:
                missing.setdefault(name, path.name)
    assert not missing, f"imported by the suite, not installed by .[test]: {missing}"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("JASK_FRESH_INSTALL") != "1",
                    reason="downloads every dependency (set JASK_FRESH_INSTALL=1)")
def test_every_extra_installs_fresh_within_five_minutes_without_backtracking():
    done = subprocess.run([sys.executable, str(SCRIPT), "--limit", "300"],
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout + done.stderr
