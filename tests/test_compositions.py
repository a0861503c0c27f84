"""Random compositions of ops against numpy and jax.grad (hypothesis)."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jask

UNARY = {
    "square": (jask.square, jnp.square),
    "scale": (lambda a: a * 0.75, lambda a: a * 0.75),
    "rscale": (lambda a: -1.25 * a, lambda a: -1.25 * a),
    "shift": (lambda a: a + 0.5, lambda a: a + 0.5),
    "rsub": (lambda a: 2.0 - a, lambda a: 2.0 - a),
    "neg": (lambda a: -a, lambda a: -a),
    "double_transpose": (lambda a: jask.transpose(jask.transpose(a)), lambda a: a),
}
BINARY = {
    "add": (jask.add, jnp.add),
    "sub": (jask.sub, jnp.subtract),
    "mul": (jask.mul, jnp.multiply),
}

programs = st.lists(
    st.one_of(st.tuples(st.just("u"), st.sampled_from(sorted(UNARY))),
              st.tuples(st.just("b"), st.sampled_from(sorted(BINARY)))),
    min_size=1, max_size=5)


def run(program, x, y, table_index):
    """Apply the program to x (binary ops take y as the right operand)."""
    out = x
    for kind, name in program:
        if kind == "u":
            out = UNARY[name][table_index](out)
        else:
            out = BINARY[name][table_index](out, y)
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=programs, rows=st.integers(1, 70), cols=st.integers(1, 40), seed=st.integers(0, 99))
def test_random_programs_match_jax(small_budget, program, rows, cols, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = rng.standard_normal((rows, cols)).astype(np.float32)
    X, Y = jask.from_numpy(x), jask.from_numpy(y)

    got = run(program, X, Y, 0)
    want = run(program, jnp.asarray(x), jnp.asarray(y), 1)
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-4, atol=1e-4)

    disk_loss = lambda x, y: jask.sum(jask.square(run(program, x, y, 0)))
    ref_loss = lambda x, y: jnp.sum(jnp.square(run(program, x, y, 1)))
    gx, gy = jax.jit(jax.grad(disk_loss, argnums=(0, 1)))(X, Y)
    rx, ry = jax.grad(ref_loss, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(y))
    np.testing.assert_allclose(gx.to_numpy(), rx, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(gy.to_numpy(), ry, rtol=1e-3, atol=1e-3)
