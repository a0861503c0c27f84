"""Run one benchmark case in a fresh Python process; return wall time and peak RSS.

The parent calls :func:`run_case`, which starts ``python -c`` in the repository
root.  The child imports jax, dask and zarr (and starts the jax CPU backend),
so its *idle baseline* already contains those libraries.  It then calls the
case function, which does untimed setup (open stores, set the jask budget,
prepare targets) and returns ``(op, sample)`` (or ``(op, sample, extra)``,
``extra()`` giving a dict of more results, such as bytes counted during the
op).  Right before ``op()`` the child resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``), so the reported ``peak_rss`` is the high-water
mark *of the timed op* minus the RSS just before it.  ``sample(result)`` is
then called (untimed) to produce one float used to cross-check
implementations.

The result travels back as one JSON line prefixed with ``RESULT_TAG``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

# The same measurements as jask's demo and its memory-bound test.
from jask.base.rss import current_rss, peak_rss, reset_peak_rss

RESULT_TAG = "BENCH_RESULT:"
REPO_ROOT = Path(__file__).resolve().parent.parent


def first_line(exc: BaseException) -> str:
    """``TypeName: first line of message`` for compact error reporting."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    if "Traceback" in text and len(lines) > 1:  # wrapped error: show its cause
        text = f"{text.split('Traceback')[0].strip()} ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}".strip()


def _import_baseline() -> int:
    """Import the common heavy libraries and return the idle RSS (bytes)."""
    import dask.array  # noqa: F401
    import jax.numpy as jnp
    import numpy  # noqa: F401
    import zarr  # noqa: F401

    jnp.zeros(1).block_until_ready()  # start the CPU backend as jask would
    return current_rss()


def _child(spec_json: str) -> None:
    """Entry point inside the fresh process (see module docstring)."""
    import gc
    import importlib

    spec = json.loads(spec_json)
    out = {"idle_rss": _import_baseline()}
    stage = "setup"
    try:
        module = importlib.import_module(spec["module"])
        op, sample, *extra = getattr(module, spec["func"])(spec["params"])
        stage = "op"
        gc.collect()
        exact = reset_peak_rss()
        before = current_rss() if exact else peak_rss()
        t0 = time.perf_counter()
        result = op()
        out["wall_s"] = time.perf_counter() - t0
        out["peak_rss"] = max(peak_rss() - before, 0)
        out["peak_exact"] = exact
        stage = "sample"
        out["sample"] = float(sample(result))
        for counted in extra:  # a case may report more: counters of the op (dict)
            out.update(counted())
    except BaseException as exc:  # report, never crash the benchmark
        out["error"] = ("" if stage == "op" else f"[in {stage}] ") + first_line(exc)
    print(RESULT_TAG + json.dumps(out), flush=True)


def _child_json(spec_json: str) -> None:
    """Entry point for :func:`run_json`: print ``module.func(params)`` as JSON."""
    import importlib

    spec = json.loads(spec_json)
    try:
        out = getattr(importlib.import_module(spec["module"]), spec["func"])(spec["params"])
    except BaseException as exc:
        out = {"error": first_line(exc)}
    print(RESULT_TAG + json.dumps(out), flush=True)


def run_case(module: str, func: str, params: dict, timeout: float) -> dict:
    """Run case ``module.func(params)`` in a fresh interpreter; return its result.

    Keys: ``wall_s``, ``peak_rss`` (bytes above the pre-op RSS), ``idle_rss``,
    ``sample``; or ``error`` (first line) if anything failed.
    """
    return _spawn("_child", module, func, params, timeout)


def run_json(module: str, func: str, params: dict, timeout: float) -> dict:
    """Run ``module.func(params)`` in a fresh interpreter; return its JSON result."""
    return _spawn("_child_json", module, func, params, timeout)


def _spawn(entry: str, module: str, func: str, params: dict, timeout: float) -> dict:
    """Start ``python -c`` running ``benchmarks.measure.<entry>`` on the spec."""
    spec = json.dumps({"module": module, "func": func, "params": params})
    code = f"import sys; from benchmarks.measure import {entry}; {entry}(sys.argv[1])"
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, spec],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {proc.returncode}: {tail}"}
