"""Run other projects' own test suites against jask.array_api; print their counts.

``python tests/scripts/external_suites.py [--only sklearn,array-api-extra,xarray]
[--timeout 1500] [--budget 64KB] [--json out.json] [--keep DIR]``

Each client's suite is the one shipped with the installed version (the wheels
of array-api-extra, scikit-learn and xarray carry their tests: the script
prints the versions it ran), run by ``python -m pytest`` in a subprocess of its
own, one suite at a time, single-process, bounded by ``--timeout`` seconds,
with this checkout's jask first on the path. Every suite loads the plugin
``tests/scripts/external/jask_budget.py``: JAX's x64 mode on (as the suites do
for their JAX backend) and ``jask.set_memory_budget(--budget)``, jask's own
tests' small budget (64KB) by default, with a scratch directory of its own, so
the suites' small arrays take the disk-backed paths.

"Adapted only to name the namespace" means, per client:

- array-api-extra (``--pyargs array_api_extra.tests.main -k jask``): the
  plugin ``external/aae_jask_backend.py`` adds ``JASK = "jask.array_api"`` to
  the ``Backend`` enum that the suite's conftest parametrizes its ``library``
  and ``xp`` fixtures over; the conftest makes the namespace as for any backend
  without a special case (``array_namespace(jask.array_api.empty(0))``). No
  test file is copied or changed. This is issue 27's "whole suite, jask as
  the backend" (1,237 parametrizations on 0.11.1; ``tests/vendoring`` and
  ``run_deps`` take no backend and are left out).
- scikit-learn (``--pyargs`` of the five modules of issue 27's count, ``-k
  jask``): the plugin ``external/sklearn_jask_namespace.py`` makes
  ``sklearn.utils._array_api.yield_namespaces`` yield ``"jask.array_api"``
  only, which every Array API parametrization
  (``yield_namespace_device_dtype_combinations``, the estimator checks'
  ``check_array_api_input``) goes through, and checks that
  ``_array_api_for_tests`` answers jask's namespace: scikit-learn's helper
  takes it as ``get_namespace(module.asarray(1))``, which before jask's
  namespace was closed was a ``jax.Array`` (a first run here "passed" 182 of
  279 on jax.numpy); the check stops the run rather than count jax.numpy's.
  ``SCIPY_ARRAY_API=1``. No test file is changed. Modules:
  ``sklearn.tests.test_common`` (``check_array_api_input`` over every estimator whose
  tags declare support),
  ``sklearn.metrics.tests.test_common`` (metric compliance),
  ``sklearn.utils.tests.test_array_api`` (helpers),
  ``sklearn.decomposition.tests.test_pca``,
  ``sklearn.preprocessing.tests.test_data`` (scalers). ``--sklearn-all`` runs
  every scikit-learn test module that imports ``yield_namespace*`` instead.
- xarray: copies of two of its test files in a scratch folder, with only the
  namespace's name changed, run with xarray's installed ``xarray.tests``
  package (its conftest, helpers) importable. ``test_duck_array_wrapping.py``:
  one entry added to its ``NAMESPACE_ARRAYS`` table, namespace
  ``jask.array_api`` (array type ``Array``, the namespace's type of every
  result, DiskArray or InMemoryArray; constructor ``asarray``; no xfails), and to
  ``NAMESPACE_REQUIREMENTS``; ``-k jask`` selects its parametrizations.
  ``test_array_api.py``: its two lines naming ``array_api_strict`` (the
  namespace ``xp`` and its array type ``Array``) name ``jask.array_api`` and
  ``jask.array_api.Array``. Issue 27's "duck-array and Array API tests" (130 there;
  these two files give 98 + 13 = 111 today; ``test_namedarray.py`` takes no
  namespace parameter and is not run).

The table counts pytest's outcomes from its JUnit XML: passed, failed, errors
(in setup or teardown), skipped (xfails included: only xarray's table and
array-api-extra's markers name expected failures, none of them jask's), and
the top failure causes: failures and errors grouped by their message's first
line (pytest writes ``ExceptionType: message``), counted.
"""
from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PLUGINS = os.path.join(HERE, "external")

SKLEARN_MODULES = [
    "sklearn.tests.test_common",
    "sklearn.metrics.tests.test_common",
    "sklearn.utils.tests.test_array_api",
    "sklearn.decomposition.tests.test_pca",
    "sklearn.preprocessing.tests.test_data",
]

XARRAY_JASK_ENTRY = '''
# external_suites.py: jask's namespace (the only change to this copy)
NAMESPACE_ARRAYS["jask.array_api"] = {
    "attrs": {"array": "Array", "constructor": "asarray"},
    "xfails": {},
}
'''


def _package_dir(name):
    import importlib.util
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin)


def _sklearn_all_modules():
    root = _package_dir("sklearn")
    mods = []
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if f.startswith("test_") and f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    if "yield_namespace" in fh.read():
                        rel = os.path.relpath(path, os.path.dirname(root))[:-3]
                        mods.append(rel.replace(os.sep, "."))
    return sorted(mods)


def _substitute(text, old, new):
    if old not in text:
        raise RuntimeError(f"the suite's file changed: {old!r} not found")
    return text.replace(old, new, 1)


def prepare_xarray(work):
    """Copy xarray's two files with the namespace named; return the paths."""
    tests = os.path.join(_package_dir("xarray"), "tests")
    with open(os.path.join(tests, "test_duck_array_wrapping.py")) as fh:
        text = fh.read()
    text = _substitute(text, "\nNAMESPACE_REQUIREMENTS = {",
                       XARRAY_JASK_ENTRY + "\nNAMESPACE_REQUIREMENTS = {")
    text = _substitute(text, '    "sparse": requires_sparse,\n}',
                       '    "sparse": requires_sparse,\n'
                       '    "jask.array_api": pytest.mark.jask,\n}')
    wrapping = os.path.join(work, "test_duck_array_wrapping.py")
    with open(wrapping, "w") as fh:
        fh.write(text)
    with open(os.path.join(tests, "test_array_api.py")) as fh:
        text = fh.read()
    text = _substitute(text, 'xp = pytest.importorskip("array_api_strict")',
                       'xp = pytest.importorskip("jask.array_api")')
    text = _substitute(text, "from array_api_strict._array_object import Array",
                       "from jask.array_api import Array")
    api = os.path.join(work, "test_array_api.py")
    with open(api, "w") as fh:
        fh.write(text)
    return [wrapping, api]


def client_commands(args, work):
    """{client: (distribution, pytest arguments, extra environment)}."""
    base = ["-p", "jask_budget"]
    sk_mods = _sklearn_all_modules() if args.sklearn_all else SKLEARN_MODULES
    return {
        "array-api-extra": ("array-api-extra",
                            base + ["-p", "aae_jask_backend", "--pyargs",
                                    "array_api_extra.tests.main", "-k", "jask"], {}),
        "sklearn": ("scikit-learn",
                    base + ["-p", "sklearn_jask_namespace", "--pyargs", *sk_mods,
                            "-k", "jask"], {"SCIPY_ARRAY_API": "1"}),
        "xarray": ("xarray", base + ["-k", "jask or test_array_api"]
                   + [os.path.relpath(p, work) for p in prepare_xarray(work)], {}),
    }


def parse_junit(path):
    counts = collections.Counter()
    causes = collections.Counter()
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        bad = case.find("failure")
        kind = "failed"
        if bad is None:
            bad = case.find("error")
            kind = "errors"
        if bad is not None:
            counts[kind] += 1
            msg = (bad.get("message") or bad.text or "").strip().splitlines()
            first = msg[0] if msg else "(no message)"
            if re.fullmatch(r"(AssertionError: )?assert (False|True)", first):
                # a bare assert: name it by its source line (pytest marks it with ">")
                src = [ln[1:].strip() for ln in (bad.text or "").splitlines()
                       if ln.startswith(">")]
                if src:
                    first = f"{first}: {src[-1]}"
            first = re.sub(r"0x[0-9a-f]+", "0x...", first)
            causes[first[:160]] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    counts["total"] = sum(counts[k] for k in ("passed", "failed", "errors", "skipped"))
    return counts, causes


def run_client(name, dist, pytest_args, extra_env, work, args):
    junit = os.path.join(work, f"{name}.xml")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO, PLUGINS, work] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["JASK_EXTERNAL_BUDGET"] = args.budget
    env["JASK_EXTERNAL_SCRATCH"] = os.path.join(work, f"{name}-scratch")
    env.update(extra_env)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "-o", "addopts=", "-o", "filterwarnings=", "-W", "ignore::DeprecationWarning",
           f"--junitxml={junit}", *pytest_args]
    log = os.path.join(work, f"{name}.log")
    t0 = time.time()
    timed_out = False
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
    wall = time.time() - t0
    row = {"client": name, "version": importlib.metadata.version(dist), "wall_s": round(wall),
           "returncode": rc, "timed_out": timed_out, "log": log, "command": cmd}
    if os.path.exists(junit):
        counts, causes = parse_junit(junit)
        row.update({k: counts[k] for k in ("passed", "failed", "errors", "skipped", "total")})
        row["causes"] = causes.most_common(args.causes)
    else:
        row.update({k: None for k in ("passed", "failed", "errors", "skipped", "total")})
        with open(log) as fh:
            row["causes"] = [("no JUnit XML; log tail: " + fh.read()[-300:], 0)]
    return row


def print_table(rows):
    cols = ["client", "version", "passed", "failed", "errors", "skipped", "total", "wall_s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |"
              + (" TIMED OUT" if r["timed_out"] else ""))
    for r in rows:
        print(f"\n{r['client']} {r['version']}: top failure causes")
        for msg, n in r["causes"]:
            print(f"  {n:5d}  {msg}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="sklearn,array-api-extra,xarray")
    p.add_argument("--timeout", type=float, default=1500)
    p.add_argument("--budget", default="64KB")
    p.add_argument("--causes", type=int, default=12, help="how many causes to list")
    p.add_argument("--sklearn-all", action="store_true")
    p.add_argument("--json")
    p.add_argument("--keep", help="folder for logs, XML and copies (default: a temp folder)")
    args = p.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="jask-external-")
    os.makedirs(work, exist_ok=True)
    commands = client_commands(args, work)
    rows = []
    for name in args.only.split(","):
        dist, pytest_args, extra_env = commands[name]
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.append(run_client(name, dist, pytest_args, extra_env, work, args))
        print(f"  {name}: {rows[-1]['wall_s']} s", file=sys.stderr, flush=True)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"\nlogs and JUnit XML in {work}")


if __name__ == "__main__":
    main()
