"""Every float row of the op table is as accurate in float32 (and complex64)
as jax.numpy: its largest error in ulps against a float64 reference (numpy's
float64 function, or jax.grad in float64, rounded to float32) is no larger
than jax.numpy's on the same inputs, for values through a DiskArray on a real
Zarr store (eager and under jax.jit) and for jax.grad of sum(f(x)).

Errors are counted where the rounded reference is a finite normal number:
XLA on CPU flushes subnormal results to zero, which would make jax.numpy's
error there huge and the comparison empty. ``python -m
benchmarks.float32_accuracy`` prints the table of both errors.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import write_store
from jask.core import ufuncs

N = 3000
#: row -> the ranges its operands are drawn from (both ends included); each
#: operand mixes magnitudes spread evenly in log scale over the range (tiny
#: ones down to 1e-30) with values uniform over it, and 0, +-1, 0.5, 1 +- 1e-7.
DOMAINS = {
    "add": [(-1e30, 1e30)] * 2, "subtract": [(-1e30, 1e30)] * 2,
    "multiply": [(-1e18, 1e18)] * 2, "divide": [(-1e18, 1e18)] * 2,
    "power": [(0, 100), (-10, 10)], "negative": [(-1e30, 1e30)], "square": [(-1e18, 1e18)],
    "maximum": [(-1e30, 1e30)] * 2, "minimum": [(-1e30, 1e30)] * 2, "abs": [(-1e30, 1e30)],
    "exp": [(-87, 88)], "expm1": [(-87, 88)], "log": [(0, 3e38)], "log1p": [(-0.999, 3e38)],
    "log2": [(0, 3e38)], "log10": [(0, 3e38)], "sqrt": [(0, 3e38)], "tanh": [(-20, 20)],
    "arctan": [(-1e30, 1e30)], "sin": [(-1e4, 1e4)], "cos": [(-1e4, 1e4)],
    "tan": [(-1e4, 1e4)], "arcsin": [(-0.9999, 0.9999)], "arccos": [(-0.9999, 0.9999)],
    "sinh": [(-88, 88)], "cosh": [(-88, 88)], "arcsinh": [(-1e18, 1e18)],
    "arccosh": [(1.0001, 1e18)], "arctanh": [(-0.9999, 0.9999)],
    "reciprocal": [(-1e30, 1e30)], "positive": [(-1e30, 1e30)],
    "floor": [(-1e9, 1e9)], "ceil": [(-1e9, 1e9)], "trunc": [(-1e9, 1e9)],
    "round": [(-1e9, 1e9)], "sign": [(-1e30, 1e30)],
    "arctan2": [(-1e10, 1e10)] * 2, "hypot": [(-1e18, 1e18)] * 2,
    "logaddexp": [(-80, 80)] * 2, "copysign": [(-1e30, 1e30)] * 2,
    "remainder": [(-1e6, 1e6), (0.1, 100)], "floor_divide": [(-1e6, 1e6), (0.1, 100)],
    "sigmoid": [(-80, 80)], "relu": [(-1e30, 1e30)], "softplus": [(-80, 80)],
}
#: rows that take complex operands in jax.numpy and jask, over the same real
#: and imaginary ranges (of the unary rows, where their values stay finite)
COMPLEX = ("add", "subtract", "multiply", "divide", "negative", "square", "exp", "expm1",
           "log", "log1p", "log2", "log10", "sqrt", "tanh", "sin", "cos", "tan", "sinh",
           "cosh", "arcsinh", "arctanh", "arctan", "reciprocal")
#: float rows not in DOMAINS: a selection or a bit operation, exact in any dtype
EXACT = ("clip", "where", "nextafter", "conj", "real", "imag", "angle")


def spread(lo: float, hi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    top = max(abs(lo), abs(hi))
    mags = np.exp(rng.uniform(np.log(1e-30), np.log(top), N // 2))
    sign = np.where(rng.random(N // 2) < 0.5, -1.0, 1.0) if lo < 0 else 1.0
    special = [0.0, 1.0, -1.0, 0.5, 1 - 1e-7, 1 + 1e-7, lo, hi]
    values = np.concatenate([mags * sign, rng.uniform(lo, hi, N - N // 2 - 8), special])
    return np.clip(values, lo, hi).astype(np.float32)


def operands(name: str, complex_: bool = False) -> list[np.ndarray]:
    ranges = DOMAINS[name]
    if complex_ and len(ranges) == 1:  # keep |z| where the function stays finite
        ranges = [(max(lo, -20.0), min(hi, 20.0)) for lo, hi in ranges]
    out = [spread(lo, hi, 2 * k) for k, (lo, hi) in enumerate(ranges)]
    if complex_:
        out = [(x + 1j * spread(lo, hi, 2 * k + 1)[::-1]).astype(np.complex64)
               for k, (x, (lo, hi)) in enumerate(zip(out, ranges))]
    return out


def ulps(got, reference) -> float:
    """The largest error of ``got`` in ulps of float32 at the reference, over
    the elements whose rounded reference is a finite normal number (a complex
    one: both parts against the spacing at the larger part)."""
    reference = np.asarray(reference)
    got = np.asarray(got).astype(reference.dtype)
    if reference.dtype.kind == "c":
        scale = np.maximum(np.abs(reference.real), np.abs(reference.imag))
        err = np.maximum(np.abs(got.real - reference.real), np.abs(got.imag - reference.imag))
    else:
        scale, err = np.abs(reference), np.abs(got - reference)
    with np.errstate(all="ignore"):
        rounded = scale.astype(np.float32)
        keep = np.isfinite(rounded) & (rounded >= np.finfo(np.float32).tiny)
        keep &= np.isfinite(reference.real) & np.isfinite(reference.imag)
        err = np.where(np.isnan(err), np.inf, err)[keep]
        return float(np.max(err / np.spacing(rounded[keep]).astype(np.float64), initial=0.0))


def _jnp(name):
    return ufuncs.TABLE[name].jnp


def _jask(name):
    return getattr(jask.nn if name in ("sigmoid", "relu", "softplus") else jask, name)


def value_errors(name, args, tmp_path) -> dict:
    """{"jax.numpy", "jask", "jask under jit"}: each one's max ulps on ``args``."""
    with np.errstate(all="ignore"):
        reference = ufuncs.TABLE[name].numpy(*(a.astype(np.result_type(a, np.float64))
                                              for a in args))
    stores = [jask.open(write_store(tmp_path / f"{name}{k}.zarr", a, chunks=(700,)))
              for k, a in enumerate(args)]
    f = _jask(name)
    return {"jax.numpy": ulps(jax.jit(_jnp(name))(*args), reference),
            "jask": ulps(f(*stores).to_numpy(), reference),
            "jask under jit": ulps(jax.jit(f)(*stores).to_numpy(), reference)}


def gradient_errors(name, args, tmp_path) -> dict:
    """{"jax.numpy", "jask"}: max ulps of jax.grad of sum(f(x)) in each operand."""
    nin = len(args)
    with jax.enable_x64(True):
        wide = [jnp.asarray(a, jnp.float64) for a in args]
        reference = jax.grad(lambda *a: jnp.sum(_jnp(name)(*a)), argnums=tuple(range(nin)))(*wide)
        reference = [np.asarray(r) for r in reference]
    theirs = jax.grad(lambda *a: jnp.sum(_jnp(name)(*a)), argnums=tuple(range(nin)))(*args)
    stores = [jask.open(write_store(tmp_path / f"g{name}{k}.zarr", a, chunks=(700,)))
              for k, a in enumerate(args)]
    f = _jask(name)
    mine = jax.grad(lambda *a: jask.sum(f(*a)), argnums=tuple(range(nin)))(*stores)
    return {"jax.numpy": max(ulps(t, r) for t, r in zip(theirs, reference)),
            "jask": max(ulps(np.asarray(m.to_numpy() if hasattr(m, "to_numpy") else m), r)
                        for m, r in zip(mine, reference))}


def _takes_floats(row) -> bool:
    try:
        out = jax.eval_shape(row.jnp, *[jax.ShapeDtypeStruct((2,), np.float32)] * row.nin)
    except TypeError:  # an integer or bool op
        return False
    return bool(jnp.issubdtype(out.dtype, jnp.floating))


def test_every_float_row_is_in_the_table():
    float_rows = {name for name, row in ufuncs.TABLE.items() if row.public and _takes_floats(row)}
    assert float_rows == set(DOMAINS) | set(EXACT)


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_float32_values_are_as_accurate_as_jax_numpy(name, tmp_path):
    errors = value_errors(name, operands(name), tmp_path)
    assert errors["jask"] <= errors["jax.numpy"], errors
    assert errors["jask under jit"] == errors["jask"], errors


@pytest.mark.parametrize("name", COMPLEX)
def test_complex64_values_are_as_accurate_as_jax_numpy(name, tmp_path):
    errors = value_errors(name, operands(name, complex_=True), tmp_path)
    assert errors["jask"] <= errors["jax.numpy"], errors
    assert errors["jask under jit"] == errors["jask"], errors


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_float32_gradients_are_as_accurate_as_jax_numpy(name, tmp_path):
    errors = gradient_errors(name, operands(name), tmp_path)
    assert errors["jask"] <= errors["jax.numpy"], errors
