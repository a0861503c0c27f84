"""Install jask and each of its extras into fresh virtual environments, as a
new machine would, and time each install.

Each install gets a new ``venv`` and pip's cache is off (``--no-cache-dir``),
so nothing this machine downloaded before is used; pip's resolver output is
kept and searched for backtracking ("is looking at multiple versions"). The
base install then runs the README's first command's demo at small sizes, and
each extra imports what it brings.

Run: ``python tests/scripts/fresh_install.py [--limit 300] [EXTRA ...]``
(no extras named: all of them). ``tests/test_fresh_install.py`` runs it when
``JASK_FRESH_INSTALL=1`` (it takes minutes and the network).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: extra -> what it must make importable (and the base install: the demo).
EXTRAS = {
    "": ["jask"],
    "notebook": ["jask", "jupyterlab", "ipykernel", "ipywidgets", "matplotlib", "bokeh"],
    "xarray": ["jask.xarray"],
    "cloud": ["jask", "obstore", "icechunk"],
    "test": ["jask.xarray", "obstore", "icechunk", "pytest", "xdist", "hypothesis", "sphinx",
             "nbclient", "ruff", "mypy", "importlinter", "array_api_strict", "moto", "boto3"],
}
BACKTRACKING = "is looking at multiple versions"


def install(extra: str, limit: float) -> dict:
    """One fresh venv, one ``pip install -e .[extra]``: its time and what it found."""
    with tempfile.TemporaryDirectory(prefix="jask-fresh-") as tmp:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        python = os.path.join(venv, "bin", "python")
        target = f".[{extra}]" if extra else "."
        start = time.monotonic()
        done = subprocess.run([python, "-m", "pip", "install", "--no-cache-dir", "-e", target],
                              cwd=ROOT, capture_output=True, text=True, timeout=limit * 3)
        seconds = time.monotonic() - start
        log = done.stdout + done.stderr
        result = {"extra": extra or "(none)", "seconds": round(seconds, 1),
                  "ok": done.returncode == 0, "backtracked": BACKTRACKING in log}
        if not result["ok"]:
            result["error"] = log[-2000:]
            return result
        imports = "; ".join(f"import {m}" for m in EXTRAS[extra])
        subprocess.run([python, "-c", imports], check=True, cwd=tmp)
        if not extra:  # the README's first command, the demo (small sizes: it is a check)
            subprocess.run([python, "-m", "jask.demo", "--rows", "20000", "--steps", "3"],
                           check=True, cwd=tmp, capture_output=True, timeout=600)
        return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", default=list(EXTRAS))
    parser.add_argument("--limit", type=float, default=300.0, help="seconds an install may take")
    args = parser.parse_args(argv)
    failed = False
    for extra in args.extras:
        r = install("" if extra in ("", "base", "none") else extra, args.limit)
        print(f"{r['extra']:10s} {r['seconds']:7.1f} s  ok={r['ok']}  "
              f"backtracked={r['backtracked']}", flush=True)
        if not r["ok"] or r["backtracked"] or r["seconds"] > args.limit:
            failed = True
            print(r.get("error", ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
