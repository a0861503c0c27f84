"""Random compositions of the table's ops against jax.numpy (hypothesis).

Programs are drawn from ``ops_table.OPS``: every elementwise row whose
operands are real-valued, in every broadcasting layout the table lists, and
a reduction at the end; values and jit(grad) gradients with respect to the
data and an in-memory parameter are compared with the same program in
jax.numpy: equal within a tolerance, or (the project's standard) no farther
from the program's float64 value than jax.numpy's float32 one, since a chain
such as ``exp`` then ``sin`` turns one ulp of ``exp(x)`` (jask's and XLA's
differ there) into any difference at all.
"""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ops_table import OPS, Spec

import jask

FULL = "disk"


def _steps():
    """(id, position of the running value, other operand specs, case) for
    every real-domain elementwise row with a full-shape disk operand."""
    steps = []
    for case in OPS:
        if case.domain != "real" or not case.argnums or case.id.startswith(
                ("dot", "vecdot", "getitem", "concatenate", "stack", "transpose", "astype",
                 "operators", "map", "reshape", "materialize", "composed")) or "axis=" in case.id:
            continue
        if any(len(a.shape) > 2 for a in case.args):  # the 3-D layouts
            continue
        full = [i for i, a in enumerate(case.args) if a.kind == FULL and len(a.shape) == 2
                and a.shape[1] > 1 and a.shape[0] > 1]
        if full:
            steps.append((case.id, full[-1], case))
    return steps


STEPS = _steps()
REDUCTIONS = {
    "sum": (lambda x: jask.sum(x), jnp.sum),
    "mean0": (lambda x: jask.sum(jask.mean(x, axis=0)), lambda x: jnp.sum(jnp.mean(x, axis=0))),
    "logsumexp1": (lambda x: jask.sum(jask.logsumexp(x, axis=1)),
                   lambda x: jnp.sum(jax.nn.logsumexp(x, axis=1))),
}


def _operand(spec: Spec, rows, cols, rng, dtype):
    shape = tuple(rows if d == 97 else cols if d == 61 else d for d in spec.shape)
    if spec.kind == "scalar":
        return dtype(spec.value)
    if spec.kind == "bool":
        return rng.standard_normal(shape) > 0
    return rng.standard_normal(shape).astype(dtype)


def _wide(v):
    """A float operand in float64 (the reference's), others as they are."""
    if isinstance(v, (np.ndarray, np.floating)) and np.issubdtype(v.dtype, np.floating):
        return np.asarray(v, np.float64)
    return v


def _no_worse(got, want, exact, rtol, atol):
    """``got`` (jask, float32) within tolerance of ``want`` (jax.numpy, float32),
    or no farther from ``exact`` (the float64 program) than ``want`` is."""
    got, want, exact = (np.asarray(a, np.float64) for a in (got, want, exact))
    close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    no_worse = np.abs(got - exact) <= np.abs(want - exact) + atol
    # where jax.numpy's float32 program gives NaN and the float64 one does not (exp of a
    # sum overflowing to inf, then inf * 0), jask close to the float64 value is the better
    with np.errstate(invalid="ignore"):
        better = np.isnan(want) & ~np.isnan(exact) & np.isclose(got, exact, rtol=rtol,
                                                                atol=atol)
    bad = ~(close | no_worse | better)
    assert not bad.any(), (f"{bad.sum()} of {bad.size} elements: jask {got[bad][:5]}, "
                           f"jax.numpy {want[bad][:5]}, float64 {exact[bad][:5]}")


def run(program, x, others, w, lib):
    """Apply ``program`` to x; in-memory parameter w scales it first."""
    out = x * w if lib == "jnp" else jask.multiply(x, w)
    for (_, position, case), args in zip(program, others):
        fn = case.jnp if lib == "jnp" else case.jask
        args = list(args)
        args.insert(position, out)
        out = fn(*args)
    return out


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(st.sampled_from(STEPS), min_size=1, max_size=5),
       reduction=st.sampled_from(sorted(REDUCTIONS)),
       rows=st.integers(1, 70), cols=st.integers(2, 40), seed=st.integers(0, 99))
def test_random_programs_match_jax(small_budget, program, reduction, rows, cols, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float32
    x = rng.standard_normal((rows, cols)).astype(dtype)
    w = rng.standard_normal(cols).astype(dtype)
    others = []
    for _, position, case in program:
        specs = [s for i, s in enumerate(case.args) if i != position]
        others.append([_operand(s, rows, cols, rng, dtype) for s in specs])
    disk_others = [[jask.from_numpy(v) if isinstance(v, np.ndarray) and v.shape == (rows, cols)
                    else jnp.asarray(v) for v in args] for args in others]
    X = jask.from_numpy(x)

    got = run(program, X, disk_others, jnp.asarray(w), "jask")
    want = run(program, jnp.asarray(x), others, jnp.asarray(w), "jnp")
    wide = [[_wide(v) for v in args] for args in others]
    with jax.enable_x64(True):
        exact = np.asarray(run(program, jnp.asarray(_wide(x)), wide, jnp.asarray(_wide(w)), "jnp"))
    _no_worse(got.to_numpy(), want, exact, rtol=1e-4, atol=1e-4)

    disk_loss, ref_loss = REDUCTIONS[reduction]
    gx, gw = jax.jit(jax.grad(lambda x, w: disk_loss(run(program, x, disk_others, w, "jask")),
                              argnums=(0, 1)))(X, jnp.asarray(w))
    rx, rw = jax.grad(lambda x, w: ref_loss(run(program, x, others, w, "jnp")),
                      argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w))
    with jax.enable_x64(True):
        ex, ew = (np.asarray(g) for g in jax.grad(
            lambda x, w: ref_loss(run(program, x, wide, w, "jnp")),
            argnums=(0, 1))(jnp.asarray(_wide(x)), jnp.asarray(_wide(w))))
    assert not isinstance(gw, jask.DiskArray)
    _no_worse(gx.to_numpy(), rx, ex, rtol=1e-3, atol=1e-3)
    _no_worse(gw, rw, ew, rtol=1e-3, atol=1e-3)
