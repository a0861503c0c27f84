"""Small-array latency: jask vs jax.numpy on 4x4, 100x100 and 256x256 float32 inputs.

For every op, the median latency of many calls is measured four ways: jask
eagerly, jask inside ``jax.jit``, ``jax.numpy`` eagerly and ``jax.numpy``
inside ``jax.jit``.  Each call blocks until its result is ready; one warm-up
call (which also compiles the jitted variants) is excluded.  Runs in its own
process via :func:`benchmarks.measure.run_json`.

``python -m benchmarks.small [--budget 32MB] [--size 100] [--calls 300]``
prints only the eager per-op overhead (ms per op, jask and jax.numpy) on
one size: the figure issue 12 tracks (add, sum, a product with an
in-memory vector, ...), without the rest of the benchmark.
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
    "add": lambda m, a, b, v: m.add(a, b),
    "mul-by-scalar": lambda m, a, b, v: _mul(m)(a, SCALAR),
    "square": lambda m, a, b, v: m.square(a),
    "transpose": lambda m, a, b, v: m.transpose(a),
    "sum": lambda m, a, b, v: m.sum(a),
    "dot": lambda m, a, b, v: m.dot(a, b),
    # a product with a parameter vector in memory (jax.Array), the common case
    "dot-vector": lambda m, a, b, v: m.dot(a, v),
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
    v = jax.numpy.ones((a.shape[1],), a.dtype)
    jitted = jax.jit(lambda a, b, v: fn(module, a, b, v))
    return {"eager": lambda: fn(module, a, b, v), "jit": lambda: jitted(a, b, v)}


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


def main(argv=None) -> None:
    """Print eager ms per op of jask and jax.numpy on one small size."""
    import argparse
    import tempfile

    from dask.utils import parse_bytes

    p = argparse.ArgumentParser(prog="python -m benchmarks.small", description=main.__doc__)
    p.add_argument("--budget", default="32MB")
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args(argv)
    import jax.numpy as jnp

    import jask

    with tempfile.TemporaryDirectory() as scratch:
        jask.set_memory_budget(parse_bytes(args.budget), scratch_dir=scratch)
        x, y = _inputs(args.size)
        inputs = {"jask": (jask, jask.DiskArray.from_numpy), "jnp": (jnp, jnp.asarray)}
        print(f"eager ms per op on {args.size}x{args.size} float32 (median of {args.calls})")
        print(f"{'op':14s} {'jask':>8s} {'jnp':>8s}")
        for op in OPS:
            cells = []
            for module, make in inputs.values():
                call = _variants(module, make(x), make(y), op)["eager"]
                cells.append(median_latency(call, args.calls, args.calls, 0) * 1e3)
            print(f"{op:14s} {cells[0]:8.2f} {cells[1]:8.2f}")


if __name__ == "__main__":
    main()
