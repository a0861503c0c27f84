"""Small-array latency: jask vs jax.numpy on 4x4 and 256x256 float32 inputs.

For every op, the median latency of many calls is measured four ways: jask
eagerly, jask inside ``jax.jit``, ``jax.numpy`` eagerly and ``jax.numpy``
inside ``jax.jit``.  Each call blocks until its result is ready; one warm-up
call (which also compiles the jitted variants) is excluded.  Runs in its own
process via :func:`benchmarks.measure.run_json`.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks.cases import SCALAR
from benchmarks.measure import first_line


def _mul(module):
    """``jask.mul`` or ``jax.numpy.multiply``."""
    return getattr(module, "mul", None) or module.multiply


OPS = {
    "add": lambda m, a, b: m.add(a, b),
    "mul-by-scalar": lambda m, a, b: _mul(m)(a, SCALAR),
    "square": lambda m, a, b: m.square(a),
    "transpose": lambda m, a, b: m.transpose(a),
    "sum": lambda m, a, b: m.sum(a),
    "dot": lambda m, a, b: m.dot(a, b),
}


def _block(value):
    """Wait for a result (jax arrays, or DiskArrays if they support it)."""
    if hasattr(value, "block_until_ready"):
        value.block_until_ready()
    return value


def median_latency(call, min_calls: int, max_calls: int, max_seconds: float) -> float:
    """Median seconds per ``call()`` after one warm-up call."""
    _block(call())
    times = []
    start = time.perf_counter()
    while len(times) < max_calls and (
            len(times) < min_calls or time.perf_counter() - start < max_seconds):
        t0 = time.perf_counter()
        _block(call())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _variants(module, a, b, op):
    """The eager and jitted call for one (library, op)."""
    import jax

    fn = OPS[op]
    jitted = jax.jit(lambda a, b: fn(module, a, b))
    return {"eager": lambda: fn(module, a, b), "jit": lambda: jitted(a, b)}


def _inputs(n: int):
    rng = np.random.default_rng(n)
    return rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)


def _libraries(params):
    """(name, module, array constructor) for jnp and, if importable, jask."""
    import jax.numpy as jnp

    libs = [("jnp", jnp, jnp.asarray, None)]
    try:
        import jask

        jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
        libs.insert(0, ("jask", jask, jask.DiskArray.from_numpy, None))
    except BaseException as exc:
        libs.insert(0, ("jask", None, None, first_line(exc)))
    return libs


def run_small(params) -> list:
    """Return rows {op, n, '<lib> <mode>': seconds or error string}."""
    rows = []
    libs = _libraries(params)
    timing = params["timing"]
    for n in params["sizes"]:
        x, y = _inputs(n)
        for op in OPS:
            row = {"op": op, "n": n}
            for name, module, make, err in libs:
                try:
                    if err is None:
                        for mode, call in _variants(module, make(x), make(y), op).items():
                            row[f"{name} {mode}"] = _cell(call, timing)
                except BaseException as exc:
                    err = first_line(exc)
                for mode in ("eager", "jit"):
                    row.setdefault(f"{name} {mode}", err)
            rows.append(row)
    return rows


def _cell(call, timing):
    """Latency in seconds, or the error's first line."""
    try:
        return median_latency(call, **timing)
    except BaseException as exc:
        return first_line(exc)
