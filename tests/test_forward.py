"""Forward mode through every op of the table (``ops_table.OPS``): ``jax.jvp``
of each jask function against ``jax.jvp`` of its jax.numpy reference, and
forward over reverse (``jax.jvp`` of ``jax.grad``, the Hessian-vector
product) against the same of the reference, in float32 (and float64, marked
slow). CI's run checks every row's tangents, and the Hessian-vector products
and vmap of each op's first row; the slow set every row of each. A new row of
the table is tested here without new code."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ops_table import OPS, as_jask, first_of_each_op, make_inputs, of_argnums

import jask
from helpers import to_numpy, tolerance

JVP_CASES = [c for c in OPS if c.argnums]

#: Cases whose tangents jask refuses (naming the op) rather than computes.
NO_FORWARD = ("cumprod[",)
#: Cases whose second derivatives jask refuses (naming the op) rather than computes.
NO_SECOND = NO_FORWARD + ("prod[", "nanprod[", "map")  # (map: a user's function)


@pytest.fixture(params=[np.float32, pytest.param(np.float64, marks=pytest.mark.slow)],
                ids=lambda d: np.dtype(d).name)
def dtype(request):
    """float32 in CI's run; float64 (x64 on, a second compile of every case) in
    the slow set."""
    if request.param == np.float64:
        with jax.enable_x64(True):
            yield request.param
    else:
        yield request.param


def _tangents(case, values, rng):
    """A random tangent per differentiated operand, as jask and jnp take it."""
    jask_t, jnp_t = [], []
    for i in case.argnums:
        v = np.asarray(values[i])
        t = rng.standard_normal(v.shape).astype(v.dtype)
        jnp_t.append(jnp.asarray(t))
        jask_t.append(jask.from_numpy(t) if case.args[i].kind == "disk" else jnp.asarray(t))
    return jask_t, jnp_t


@pytest.mark.parametrize("case", JVP_CASES, ids=lambda c: c.id)
def test_tangents_match_jax(case, small_budget, dtype, rng):
    values = make_inputs(case, dtype, rng)
    args = as_jask(case, values)
    jask_t, jnp_t = _tangents(case, values, rng)
    argnums = case.argnums
    ref_args = [jnp.asarray(v) for v in values]
    if case.id.startswith(NO_FORWARD):
        with pytest.raises(NotImplementedError, match="forward-mode.*not supported"):
            jax.jvp(of_argnums(case.jask, args, argnums), tuple(args[i] for i in argnums),
                    tuple(jask_t))
        return
    want_out, want = jax.jvp(of_argnums(case.jnp, ref_args, argnums),
                             tuple(ref_args[i] for i in argnums), tuple(jnp_t))
    out, got = jax.jvp(of_argnums(case.jask, args, argnums), tuple(args[i] for i in argnums),
                       tuple(jask_t))
    assert got.shape == want.shape and np.dtype(got.dtype) == np.dtype(want.dtype)
    assert isinstance(got, jask.DiskArray) == isinstance(out, jask.DiskArray)
    np.testing.assert_allclose(to_numpy(out), want_out, **tolerance(dtype))
    np.testing.assert_allclose(to_numpy(got), want, **tolerance(dtype))


@pytest.mark.parametrize("case", first_of_each_op(JVP_CASES))
def test_hessian_vector_products_match_jax(case, small_budget, dtype, rng):
    """jax.jvp(jax.grad(loss)): forward mode over each row's VJP (its second
    derivatives), for a loss weighting the op's output."""
    values = make_inputs(case, dtype, rng)
    args = as_jask(case, values)
    out = case.jask(*args)
    weights = rng.standard_normal(out.shape).astype(out.dtype)
    W = jask.from_numpy(weights) if isinstance(out, jask.DiskArray) else jnp.asarray(weights)
    del out
    argnums = case.argnums
    jask_t, jnp_t = _tangents(case, values, rng)
    ref_args = [jnp.asarray(v) for v in values]

    def loss(*diff):
        return jask.sum(jask.multiply(of_argnums(case.jask, args, argnums)(*diff), W))

    def reference(*diff):
        return jnp.sum(of_argnums(case.jnp, ref_args, argnums)(*diff) * weights)

    primals = tuple(args[i] for i in argnums)
    grad = jax.grad(loss, argnums=tuple(range(len(argnums))))
    if case.id.startswith(NO_SECOND):
        with pytest.raises(NotImplementedError, match="not supported"):
            jax.jvp(grad, primals, tuple(jask_t))
        return
    ref_grad = jax.grad(reference, argnums=tuple(range(len(argnums))))
    _, want = jax.jvp(ref_grad, tuple(ref_args[i] for i in argnums), tuple(jnp_t))
    _, got = jax.jvp(grad, primals, tuple(jask_t))
    for g, w in zip(got, want):
        np.testing.assert_allclose(to_numpy(g), w, **tolerance(dtype))


#: Batched (jax.vmap over a leading axis of the first DiskArray operand) or
#: refused naming the op with no batching rule: never a wrong value.
VMAP_CASES = [c for c in OPS if any(a.kind == "disk" for a in c.args)]


@pytest.mark.parametrize("case", first_of_each_op(VMAP_CASES))
def test_vmap_over_a_disk_operand_matches_jax_or_is_refused(case, small_budget, rng):
    first = next(i for i, a in enumerate(case.args) if a.kind == "disk")
    batch = [make_inputs(case, np.float32, rng) for _ in range(2)]
    values = batch[0]
    stacked = np.stack([b[first] for b in batch])
    args = as_jask(case, values)
    ref_args = [jnp.asarray(v) for v in values]
    in_axes = tuple(0 if i == first else None for i in range(len(args)))
    want = jax.vmap(case.jnp, in_axes=in_axes)(
        *[jnp.asarray(stacked) if i == first else v for i, v in enumerate(ref_args)])
    try:
        got = jax.vmap(case.jask, in_axes=in_axes)(
            *[jask.from_numpy(stacked) if i == first else v for i, v in enumerate(args)])
    except NotImplementedError as e:
        assert "jax.vmap through" in str(e) and "is not supported" in str(e), str(e)
        pytest.skip(f"refused: {str(e)[:60]}")
    np.testing.assert_allclose(to_numpy(got), want, **tolerance(np.float32))
