"""Reverse over reverse: ``jax.grad`` and ``jax.jacrev`` of a gradient over
DiskArrays, against the same of jax.numpy on the in-memory copy; the GLM
losses users write (least squares, logistic regression, a scalar parameter)
with the passes over X they take (jask.track), and every op of the table
(``ops_table.OPS``): computed, or refused naming the op where a backward
pass's piece has no derivative rule of its own, never a wrong value."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ops_table import OPS, as_jask, make_inputs, of_argnums
from test_second_order import LOSSES, ONE_PASS, N, losses

import jask
from helpers import to_numpy, tolerance


@pytest.fixture
def data(small_budget, rng):
    x = rng.standard_normal((N, 12)).astype(np.float32)
    y = (x @ rng.standard_normal(12) + rng.standard_normal(N) > 0).astype(np.float32)
    w = (0.1 * rng.standard_normal(12)).astype(np.float32)
    return x, y, jask.from_numpy(x), jask.from_numpy(y), jnp.asarray(w)


@pytest.mark.parametrize("name", LOSSES)
def test_jacrev_of_grad_and_grad_of_grad_match_jax_numpy(data, name, rng):
    x, y, X, Y, w = data
    loss, ref = losses(X, Y)[name], losses(jnp.asarray(x), jnp.asarray(y))[name]
    v = jnp.asarray(rng.standard_normal(12).astype(np.float32))
    scale = float(np.abs(jax.hessian(ref)(w)).max())
    tol = dict(rtol=1e-4, atol=1e-5 * scale)
    with jask.track() as eager:
        hessian = jax.jacrev(jax.grad(loss))(w)
    np.testing.assert_allclose(hessian, jax.jacrev(jax.grad(ref))(w), **tol)
    assert eager.passes(X) <= 4 * ONE_PASS  # (jax.hessian, forward over reverse: 4 too)
    hv = jax.grad(lambda w: jax.grad(loss)(w) @ v)  # a Hessian-vector product, H symmetric
    np.testing.assert_allclose(hv(w), jax.grad(lambda w: jax.grad(ref)(w) @ v)(w), **tol)
    compiled = jax.jit(hv)
    compiled(w)
    with jask.track() as jitted:
        got = compiled(w)
    np.testing.assert_allclose(got, jax.jvp(jax.grad(ref), (w,), (v,))[1], **tol)
    assert jitted.passes(X) <= ONE_PASS


def test_second_derivative_in_a_scalar_parameter_matches_jax_numpy(data):
    x, y, X, Y, _ = data
    def loss(a):
        return jask.sum(jask.nn.softplus(X[:, 0] * a) - Y * a)

    def ref(a):
        return jnp.sum(jax.nn.softplus(x[:, 0] * a) - y * a)

    a = jnp.float32(0.3)
    np.testing.assert_allclose(jax.grad(jax.grad(loss))(a), jax.grad(jax.grad(ref))(a),
                               rtol=1e-4)
    np.testing.assert_allclose(jax.jit(jax.grad(jax.grad(loss)))(a),
                               jax.grad(jax.grad(ref))(a), rtol=1e-4)


#: Cases whose second derivatives in reverse mode jask refuses, naming the op:
#: prod's and cumprod's rules at a zero element have no derivative; a user's
#: function (map) has no second derivatives.
NO_REVERSE_SECOND = ("cumprod[", "prod[", "nanprod[", "map")
#: The rows checked in CI's run (the rest of each op's first case is marked slow).
IN_CI = ("multiply[1d:disk-disk]", "softplus", "logsumexp[3d,axis=None,keepdims=False]",
         "max[1d,axis=None,keepdims=False]", "dot[wide]", "flip[axis=1]",
         "cumprod[zeros,axis=0]", "getitem[rows]", "take[axis=0]", "sort[axis=0]",
         "prod[zeros,axis=1,keepdims]")


def _first_of_each_op() -> list:
    seen, params = set(), []
    for case in OPS:
        op = case.id.split("[", 1)[0]
        if not case.argnums or op in seen:
            continue
        seen.add(op)
        marks = () if case.id in IN_CI else pytest.mark.slow
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


def _dot(a, b):
    return jask.sum(jask.multiply(a, b)) if isinstance(b, jask.DiskArray) else jnp.sum(a * b)


@pytest.mark.parametrize("case", _first_of_each_op())
def test_grad_of_a_gradient_matches_jax_or_is_refused_naming_the_op(case, small_budget, rng):
    """jax.grad of <grad(loss), u>, for a loss weighting the op's output:
    reverse mode over each row's VJP, against jax.numpy's."""
    dtype = np.float32
    values = make_inputs(case, dtype, rng)
    args = as_jask(case, values)
    out = case.jask(*args)
    weights = rng.standard_normal(out.shape).astype(out.dtype)
    W = jask.from_numpy(weights) if isinstance(out, jask.DiskArray) else jnp.asarray(weights)
    del out
    argnums = case.argnums
    ref_args = [jnp.asarray(v) for v in values]
    us = [rng.standard_normal(np.shape(values[i])).astype(dtype) for i in argnums]
    jask_us = [jask.from_numpy(u) if case.args[i].kind == "disk" else jnp.asarray(u)
               for u, i in zip(us, argnums)]

    def loss(*diff):
        return jask.sum(jask.multiply(of_argnums(case.jask, args, argnums)(*diff), W))

    def reference(*diff):
        return jnp.sum(of_argnums(case.jnp, ref_args, argnums)(*diff) * weights)

    n = tuple(range(len(argnums)))

    def along(grad, inner):
        return lambda *d: sum(inner(g, u) for g, u in zip(grad(*d), jask_us if inner is _dot
                                                          else us))

    second = jax.grad(along(jax.grad(loss, argnums=n), _dot), argnums=n)
    primals = tuple(args[i] for i in argnums)
    if case.id.startswith(NO_REVERSE_SECOND):
        with pytest.raises(NotImplementedError, match=r"jask.*not (supported|differentiable)"):
            second(*primals)
        return
    want = jax.grad(along(jax.grad(reference, argnums=n), lambda g, u: jnp.sum(g * u)),
                    argnums=n)(*(ref_args[i] for i in argnums))
    got = second(*primals)
    for g, w in zip(got, want):
        np.testing.assert_allclose(to_numpy(g), w, **tolerance(dtype))
