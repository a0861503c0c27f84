"""Second order and batches over data on disk: Hessian-vector products,
jax.hessian, jax.jacfwd, jax.linearize and jax.vmap of GLM losses reading a
DiskArray X, against jax.numpy on the in-memory copy, with the passes over X
they take (jask.track)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask

#: Reads of X that count as one pass (a chunk cut at a band's edge is read twice).
ONE_PASS = 1.2
N, D = 3001, 12


@pytest.fixture
def data(small_budget, rng, dtype):
    """float32 and float64 (x64 on) data, labels and parameters."""
    x = rng.standard_normal((N, D)).astype(dtype)
    y = (x @ rng.standard_normal(D) + rng.standard_normal(N) > 0).astype(dtype)
    w = (0.1 * rng.standard_normal(D)).astype(dtype)
    return x, y, jask.from_numpy(x), jask.from_numpy(y), jnp.asarray(w)


def losses(X, Y):
    """(least squares, logistic regression through the op table) on jask or jnp."""
    if isinstance(X, jask.DiskArray):
        square, softplus, total = jask.square, jask.nn.softplus, jask.sum
    else:
        square, softplus, total = jnp.square, jax.nn.softplus, jnp.sum
    return {"least-squares": lambda w: total(square(X @ w - Y)),
            "logistic": lambda w: total(softplus(X @ w) - Y * (X @ w)) / N}


LOSSES = ["least-squares", "logistic"]


@pytest.mark.parametrize("name", LOSSES)
def test_hessian_vector_product_reads_X_once(data, name, rng):
    x, y, X, Y, w = data
    loss, ref = losses(X, Y)[name], losses(x, y)[name]
    v = jnp.asarray(rng.standard_normal(D).astype(w.dtype))
    want = jax.jvp(jax.grad(ref), (w,), (v,))[1]
    hvp = jax.jit(lambda w, v: jax.jvp(jax.grad(loss), (w,), (v,))[1])
    np.testing.assert_allclose(jax.jvp(jax.grad(loss), (w,), (v,))[1], want, rtol=2e-4,
                               atol=1e-5)
    np.testing.assert_allclose(hvp(w, v), want, rtol=2e-4, atol=1e-5)
    with jask.track() as counts:
        got = hvp(w, v).block_until_ready()
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5)
    assert 0.99 <= counts.passes(X) <= ONE_PASS, counts


def _mean_loss(X, Y):
    """A mean, not a sum: the other linear reducer (on jask or jnp)."""
    if isinstance(X, jask.DiskArray):
        return lambda w: jask.mean(jask.square(X @ w - Y))
    return lambda w: jnp.mean(jnp.square(X @ w - Y))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", LOSSES + ["mean of squares"])
def test_loss_and_its_tangent_read_X_once(data, name, jit, rng):
    """jax.jvp(loss, (w,), (v,)): the loss and its directional derivative in one
    band group, eagerly too (the value's and the tangent's sums run together)."""
    x, y, X, Y, w = data
    if name == "mean of squares":
        loss, ref = _mean_loss(X, Y), _mean_loss(x, y)
    else:
        loss, ref = losses(X, Y)[name], losses(x, y)[name]
    v = jnp.asarray(rng.standard_normal(D).astype(w.dtype))
    want = jax.jvp(ref, (w,), (v,))
    both = lambda w, v: jax.jvp(loss, (w,), (v,))  # noqa: E731
    if jit:
        both = jax.jit(both)
        both(w, v)  # compiled outside the count
    with jask.track() as counts:
        got = [np.asarray(g) for g in both(w, v)]
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=1e-5)
    assert 0.99 <= counts.passes(X) <= ONE_PASS, counts


@pytest.mark.parametrize("name", LOSSES)
def test_hessian_matches_jax_numpy(data, name):
    """jax.hessian (jacfwd of jacrev: a vmap of forward over reverse) of a GLM
    loss; jitted it reads X once (X.T @ (c * X) in one band group: see below)."""
    x, y, X, Y, w = data
    loss, ref = losses(X, Y)[name], losses(x, y)[name]
    want = jax.hessian(ref)(w)
    np.testing.assert_allclose(jax.hessian(loss)(w), want, rtol=2e-4, atol=1e-5)
    compiled = jax.jit(jax.hessian(loss))
    np.testing.assert_allclose(compiled(w), want, rtol=2e-4, atol=1e-5)
    with jask.track() as counts:
        compiled(w).block_until_ready()
    assert 0.99 <= counts.passes(X) <= ONE_PASS, counts


#: jax.hessian's programs as a Newton step compiles them: (loss, program, budget). The
#: value and gradient beside the Hessian make a larger group, which needs a band of more
#: than 64 KB (at 64 KB no band of it fits, with or without the Hessian: op by op).
HESSIAN_PROGRAMS = [
    ("least-squares", "hessian", "64KB"),
    ("logistic", "hessian", "64KB"),
    # X @ w[:, None]: the forward product is a product with a matrix too (one column)
    ("least-squares, w a column", "hessian", "64KB"),
    ("least-squares", "value, gradient and hessian", "128KB"),
    ("logistic", "value, gradient and hessian", "128KB"),
]


def _program(kind: str, loss):
    if kind == "hessian":
        return jax.hessian(loss)
    return lambda w: (jax.value_and_grad(loss)(w), jax.hessian(loss)(w))


@pytest.mark.parametrize("name, kind, budget", HESSIAN_PROGRAMS)
def test_a_jitted_hessian_is_one_weighted_gram_product_in_one_pass(
        data, jask_scratch, monkeypatch, name, kind, budget):
    """jit(jax.hessian(loss)) of a GLM: X.T @ (c * (X @ I)), the d tangents of
    forward over reverse through the loss's kernels, is computed as the
    weighted Gram matrix X.T @ (c * X) per band (c: each row's weight, the
    loss's kernels on one column): in the one band group no node carries more
    than one value a row but c * X itself, X is read once, and the values are
    jax.numpy's (x64 off and on)."""
    from jask.engine.plan import bands
    x, y, X, Y, w = data
    jask.set_memory_budget(budget, scratch_dir=jask_scratch.path)
    if name == "least-squares, w a column":
        Yc, yc = jask.from_numpy(y[:, None]), y[:, None]
        loss = lambda w: jask.sum(jask.square(X @ w[:, None] - Yc))  # noqa: E731
        ref = lambda w: jnp.sum(jnp.square(x @ w[:, None] - yc))  # noqa: E731
    else:
        loss, ref = losses(X, Y)[name], losses(x, y)[name]
    compiled = jax.jit(_program(kind, loss))
    want = _program(kind, ref)(w)
    planned = []
    plan_bands = bands.plan_bands

    def recording(name, nodes, *args, **kwargs):
        plan = plan_bands(name, nodes, *args, **kwargs)
        planned.append((list(nodes), plan))
        return plan

    monkeypatch.setattr(bands, "plan_bands", recording)
    compiled(w)
    planned.clear()
    with jask.track() as counts:
        got = jax.block_until_ready(compiled(w))
    jax.tree.map(lambda g, r: np.testing.assert_allclose(g, r, rtol=2e-4, atol=1e-5), got, want)
    assert 0.99 <= counts.passes(X) <= ONE_PASS, counts
    assert len(counts.ran) == 1 and counts.ran[0].startswith("fused_"), counts.ran
    (nodes, plan), = planned
    assert plan is not None
    wide = [node.op for node in nodes if node.rows and int(np.prod(node.shape[1:])) > 1]
    assert wide == ["weighted_gram"], [(node.op, node.shape) for node in nodes]


#: strip_product's weighted Gram matrix: (band rows in the whole operand, its length,
#: dtype of X, dtype of the weights, weights broadcast from one value).
WEIGHTED_BANDS = [
    (slice(0, 700), 700, np.float32, np.float32, False),           # one strip: float64 throughout
    (slice(1000, 4906), 524_288, np.float32, np.float32, False),  # strips cut at 1,024's multiples
    (slice(2048, 3072), 8192, np.float64, np.float32, False),     # exactly one strip, float64 X
    (slice(0, 5000), 5000, np.float32, np.float64, False),        # wider weights: float64 strips
    (slice(300, 2900), 10_000, np.float32, np.float32, True),     # one weight broadcast (2 / n)
]


@pytest.mark.parametrize("rows, length, dtype, wdtype, constant", WEIGHTED_BANDS)
def test_a_weighted_gram_band_is_scaled_a_strip_at_a_time(rows, length, dtype, wdtype, constant,
                                                          rng):
    """strip_product(X.T, X, row_weights=c) is X.T @ (c * X) over the band,
    negative weights included, to float32's precision (partials in float64)."""
    from jask.engine.tasks import strip_product
    n = rows.stop - rows.start
    x = rng.standard_normal((n, 12)).astype(dtype)
    c = (np.full((1, 1), -0.25, wdtype) if constant
         else rng.standard_normal((n, 1)).astype(wdtype))
    weights = np.broadcast_to(c, (n, 1))
    got = strip_product(x.T, x, rows, length, row_weights=weights)
    x64 = x.astype(np.float64)
    want = x64.T @ (weights.astype(np.float64) * x64)
    assert got.dtype == np.float64 and got.shape == (12, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


#: One weight on every row (least squares' Hessian: 2 / n), multiplied once into
#: X.T @ X: (the weights, X's scale, the right operand X itself or a copy, X's dtype).
ONE_WEIGHT = [
    (np.full((5000, 1), 3.8e-6, np.float32), 1.0, True, np.float32),    # a column, all equal
    (np.broadcast_to(np.float32(-2.0), (5000, 1)), 1.0, True, np.float32),  # one broadcast
    (np.full((5000, 1), 0.5, np.float32), 1.0, False, np.float32),      # two operands: gemm
    (np.full((5000, 1), 0.5, np.float64), 1.0, True, np.float32),       # wider: scaled strips
    (np.full((5000, 1), 1e-30, np.float32), 1e20, True, np.float32),    # X.T @ X overflows
    (np.full((5000, 1), np.inf, np.float32), 1.0, True, np.float32),    # inf * 0 where exact
    (np.full((5000, 1), np.nan, np.float32), 1.0, True, np.float32),    # NaN: never equal
    (np.r_[np.full((4999, 1), 2.0), [[2.5]]].astype(np.float32), 1.0, True, np.float32),
    (np.full((5000, 1), 3, np.int32), 1, True, np.int32),               # integers wrap alike
]


@pytest.mark.parametrize("weights, scale, same, dtype", ONE_WEIGHT)
def test_one_weight_on_every_row_scales_the_gram_matrix_once(weights, scale, same, dtype, rng):
    """strip_product(X.T, X, row_weights=c) with every weight equal is
    c (X.T @ X), the product of numpy's weighted rows wherever that is finite."""
    from jask.engine.tasks import strip_product
    x = (rng.standard_normal((5000, 6)) * 4 * scale).astype(dtype)
    x[:, 0] = 0  # a zero column: inf * 0 is NaN in the scaled rows, as in c * X
    right = x if same else x.copy()
    got = strip_product(x.T, right, slice(0, 5000), 5000, row_weights=weights)
    with np.errstate(all="ignore"):
        if np.issubdtype(dtype, np.integer):
            want = x.T.astype(np.int64) @ (weights * right).astype(np.int64)
            np.testing.assert_array_equal(got, want)
            return
        want = x.T.astype(np.float64) @ (weights.astype(np.float64) * right)
    assert got.dtype == np.float64 and got.shape == (6, 6)
    finite = np.abs(want[np.isfinite(want)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * finite.max(initial=0))


@pytest.mark.parametrize("name", LOSSES)
def test_vmap_over_parameter_vectors_reads_X_once(data, name, rng):
    """16 parameter vectors (an ensemble, a regularisation path): one X @ W.T."""
    x, y, X, Y, _ = data
    W = jnp.asarray(0.1 * rng.standard_normal((16, D)).astype(x.dtype))
    loss, ref = losses(X, Y)[name], losses(x, y)[name]
    want = jax.vmap(ref)(W)
    for label, f in [("eager", jax.vmap(loss)), ("jit", jax.jit(jax.vmap(loss)))]:
        f(W)
        with jask.track() as counts:
            got = f(W).block_until_ready()
        np.testing.assert_allclose(got, want, rtol=2e-4, err_msg=label)
        assert 0.99 <= counts.passes(X) <= ONE_PASS, (label, counts)
    # in_axes over the parameters only, X passed in, and the gradients batched too
    per = jax.vmap(jax.value_and_grad(lambda w, X: losses(X, Y)[name](w)), in_axes=(0, None))
    values, grads = per(W, X)
    want_v, want_g = jax.vmap(jax.value_and_grad(ref))(W)
    np.testing.assert_allclose(values, want_v, rtol=2e-4)
    np.testing.assert_allclose(grads, want_g, rtol=2e-4, atol=1e-5)


def test_jvp_linearize_and_jacfwd_match_jax_numpy(data, rng):
    x, y, X, Y, w = data
    loss, ref = losses(X, Y)["logistic"], losses(x, y)["logistic"]
    v = jnp.asarray(rng.standard_normal(D).astype(w.dtype))
    out, tangent = jax.jvp(loss, (w,), (v,))
    want_out, want = jax.jvp(ref, (w,), (v,))
    np.testing.assert_allclose(out, want_out, rtol=1e-5)
    np.testing.assert_allclose(tangent, want, rtol=1e-4, atol=1e-6)
    out, f = jax.linearize(loss, w)
    np.testing.assert_allclose(out, want_out, rtol=1e-5)
    np.testing.assert_allclose(f(v), want, rtol=1e-4, atol=1e-6)
    # the Jacobian of an in-memory vector function of w, and a DiskArray tangent
    jac = jax.jacfwd(lambda w: jask.sum(X * w, axis=0) + jask.max(X @ w))
    np.testing.assert_allclose(jac(w), jax.jacfwd(lambda w: jnp.sum(x * w, 0) + jnp.max(x @ w))(w),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match=r"jax\.jacfwd of a function returning a DiskArray.*"
                                         r"jax\.jvp along each direction"):
        jax.jacfwd(lambda w: X @ w)(w)
    _, t = jax.jvp(lambda w: jask.exp(X @ w), (w,), (v,))
    assert isinstance(t, jask.DiskArray)
    np.testing.assert_allclose(t.to_numpy(), np.exp(x @ w) * (x @ v), rtol=1e-4, atol=1e-6)


def test_vmap_through_an_op_with_no_batching_rule_says_what_to_do(small_budget):
    a = jask.from_numpy(np.ones((3, 4), np.float32))
    for f in (lambda x: x[0], lambda x: x.T @ x):
        with pytest.raises(NotImplementedError, match=r"jax\.vmap through .* is not supported.*"
                                                      r"leading axis"):
            jax.vmap(f)(a)


def test_newtons_method_on_a_store_four_times_the_budget_converges_in_one_pass_a_step(
        small_budget, rng):
    """Logistic regression with a small ridge on an X of 240 kB under a 64 kB
    budget: each Newton step's gradient and Hessian come from one jitted
    program reading X once; |g| <= 1e-6 |g0| within 15 passes, at numpy's
    optimum (float64 Newton on the in-memory copy)."""
    from scipy.special import expit

    n, d, ridge = 6000, 10, 1e-3
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x @ rng.standard_normal(d) + rng.standard_normal(n) > 0).astype(np.float32)
    X, Y = jask.from_numpy(x), jask.from_numpy(y)
    assert x.nbytes > 3 * small_budget.max_memory

    def loss(w):
        z = X @ w
        return jask.sum(jask.nn.softplus(z) - Y * z) / n + 0.5 * ridge * jnp.sum(w * w)

    step = jax.jit(lambda w: (jax.grad(loss)(w), jax.hessian(loss)(w)))
    w = jnp.zeros(d, jnp.float32)
    with jask.track() as counts:
        g, H = step(w)
        g0, steps = float(jnp.linalg.norm(g)), 1
        while float(jnp.linalg.norm(g)) > 1e-6 * g0 and steps < 15:
            w = w - jnp.linalg.solve(H, g)
            g, H = step(w)
            steps += 1
    assert float(jnp.linalg.norm(g)) <= 1e-6 * g0, steps
    assert counts.passes(X) <= steps * ONE_PASS and counts.passes(X) <= 15, counts
    ref, xd, yd = np.zeros(d), x.astype(np.float64), y.astype(np.float64)
    for _ in range(20):
        p = expit(xd @ ref)
        grad = xd.T @ (p - yd) / n + ridge * ref
        hess = (xd * (p * (1 - p))[:, None]).T @ xd / n + ridge * np.eye(d)
        ref = ref - np.linalg.solve(hess, grad)
    np.testing.assert_allclose(w, ref, rtol=1e-4, atol=1e-5)


def test_newton_cg_with_hessian_vector_products_in_a_compiled_loop(small_budget, rng):
    """Newton-CG: each step's direction from 4 conjugate-gradient iterations of
    Hessian-vector products inside lax.fori_loop under jit; each product is one
    pass over X, the gradient another. (jax.scipy.sparse.linalg.cg does not run:
    its custom_linear_solve takes no hi-typed constant such as a DiskArray.)"""
    n, d, ridge, iterations = 6000, 10, 1e-3, 4
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x @ rng.standard_normal(d) + rng.standard_normal(n) > 0).astype(np.float32)
    X, Y = jask.from_numpy(x), jask.from_numpy(y)

    def loss(w):
        z = X @ w
        return jask.sum(jask.nn.softplus(z) - Y * z) / n + 0.5 * ridge * jnp.sum(w * w)

    @jax.jit
    def newton_cg(w):
        g = jax.grad(loss)(w)

        def cg(i, state):
            step, r, p, rr = state
            hp = jax.jvp(jax.grad(loss), (w,), (p,))[1]
            alpha = rr / (p @ hp)
            step, r = step + alpha * p, r - alpha * hp
            return step, r, r + (r @ r / rr) * p, r @ r

        step, *_ = jax.lax.fori_loop(0, iterations, cg, (jnp.zeros_like(g), g, g, g @ g))
        return w - step, jnp.linalg.norm(g)

    w = jnp.zeros(d, jnp.float32)
    with jask.track() as counts:
        norms = []
        for _ in range(8):
            w, norm = newton_cg(w)
            norms.append(float(norm))
    assert norms[-1] <= 1e-6 * norms[0], norms
    assert 0.99 * 8 * (1 + iterations) <= counts.passes(X) <= 8 * (1 + iterations) * ONE_PASS
    from scipy.special import expit  # numpy's gradient there, in float64: ~0 (float32's w)
    wd, xd = np.asarray(w, np.float64), x.astype(np.float64)
    exact = xd.T @ (expit(xd @ wd) - y) / n + ridge * wd
    assert np.linalg.norm(exact) <= 1e-5 * norms[0]


def test_conjugate_gradients_of_jax_scipy_run_eagerly_and_are_refused_clearly_under_jit(
        data, rng):
    """jax.scipy.sparse.linalg.cg with a Hessian-vector product as its matrix:
    eagerly it runs (jax.numpy's answer); under jax.jit JAX lowers its
    custom_linear_solve without jask's types, and jask says so at lowering,
    naming the loop that works (JAX's own error was AttributeError: 'val')."""
    x, y, X, Y, w = data
    loss, ref = losses(X, Y)["logistic"], losses(x, y)["logistic"]
    b = jnp.asarray(rng.standard_normal(D).astype(w.dtype))

    def solve(loss):
        return lambda w, b: jax.scipy.sparse.linalg.cg(
            lambda v: jax.jvp(jax.grad(loss), (w,), (v,))[1], b, maxiter=4)[0]

    np.testing.assert_allclose(solve(loss)(w, b), solve(ref)(w, b), rtol=1e-3, atol=1e-4)
    with pytest.raises(NotImplementedError, match=r"jax\.jit of custom_linear_solve with a "
                                                  r"DiskArray.*jax\.scipy\.sparse\.linalg\.cg"
                                                  r".*lax\.while_loop"):
        jax.jit(solve(loss))(w, b)


def test_the_band_is_planned_for_the_tangents_and_vectors_it_carries(jask_scratch, monkeypatch):
    """The band planner counts what a band carries: for the Hessian a strip
    of the weighted rows c * X_b (d wide, beside X_b) and the d x d partial
    X_b.T @ (c * X_b) and the partials waiting to be added, k values for vmap
    (X_b @ W.T): the band shrinks as d or k grows and stays within the budget."""
    from jask.engine.plan import bands
    budget = 4 * 10**6
    jask.set_memory_budget(budget, scratch_dir=jask_scratch.path)
    rng = np.random.default_rng(0)
    n, d = 40_000, 64
    x = rng.standard_normal((n, d)).astype(np.float32)
    X = jask.from_numpy(x)
    Y = jask.from_numpy(rng.standard_normal(n).astype(np.float32))
    loss = losses(X, Y)["least-squares"]
    planned = []
    plan_bands = bands.plan_bands

    def recording(*args, **kwargs):
        plan = plan_bands(*args, **kwargs)
        planned.append(plan)
        return plan

    monkeypatch.setattr(bands, "plan_bands", recording)

    def band_of(f, *args):
        planned.clear()
        jax.block_until_ready(f(*args))
        (plan,) = planned
        assert plan.cost.total <= budget * bands.BAND_SHARE
        return plan

    w = jnp.zeros(d, jnp.float32)
    hvp = band_of(jax.jit(lambda w, v: jax.jvp(jax.grad(loss), (w,), (v,))[1]), w, w)
    hessian = band_of(jax.jit(jax.hessian(loss)), w)
    # the same X, the same budget: the Hessian's band holds c * X_b, d values a row
    assert hessian.rows < hvp.rows, (hessian.rows, hvp.rows)
    # its task holds X_b, one strip of c * X_b (scaled as it is multiplied, never
    # the whole band) and the d x d float64 partial
    from jask.engine.tasks import STRIP
    held = hessian.rows * d * 4 + min(hessian.rows, STRIP) * d * 4 + d * d * 8
    assert held <= hessian.cost.task_bytes < held + hessian.rows * d * 4
    batched = jax.jit(jax.vmap(loss))
    few = band_of(batched, jnp.zeros((4, d), jnp.float32))
    many = band_of(batched, jnp.zeros((256, d), jnp.float32))
    assert many.rows < few.rows / 4, (many.rows, few.rows)


def test_a_hessian_whose_one_row_band_cannot_fit_runs_op_by_op(jask_scratch):
    """512 parameters under 4 MB: a 2 MiB float64 partial per band, two held
    at once at least, whatever the band: no band group can hold it, so the
    Hessian's ops run one by one, each within the budget (X read more than
    once), with jax.numpy's values."""
    budget = 4 * 10**6
    jask.set_memory_budget(budget, scratch_dir=jask_scratch.path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2_000, 512)).astype(np.float32)
    wide, zeros = jask.from_numpy(x), np.zeros(2_000, np.float32)
    loss = losses(wide, jask.from_numpy(zeros))["least-squares"]
    ref = losses(jnp.asarray(x), jnp.asarray(zeros))["least-squares"]
    w = jnp.zeros(512, jnp.float32)
    with jask.track() as counts:
        got = jax.block_until_ready(jax.jit(jax.hessian(loss))(w))
    assert counts.graphs > 1, counts  # op by op, not one band group
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.hessian(ref)(w)),
                               rtol=1e-4, atol=1e-2)
