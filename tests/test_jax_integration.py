"""DiskArray as a JAX value: pytrees, jit caching, optax."""
import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jask
from helpers import rand, to_numpy


def test_is_a_pytree_leaf(small_budget):
    a = jask.from_numpy(np.ones((3, 4), np.float32))
    tree = {"w": a, "b": [a, 1.0]}
    leaves = jax.tree_util.tree_leaves(tree)
    assert len(leaves) == 3 and leaves[0] is a and leaves[1] == 1.0 and leaves[2] is a
    doubled = jax.tree.map(lambda x: x * 2, {"w": a})
    np.testing.assert_array_equal(doubled["w"].to_numpy(), 2 * np.ones((3, 4)))


def test_jax_typeof_and_jnp_rejection(small_budget):
    a = jask.from_numpy(np.ones((3, 4), np.float32))
    assert jax.typeof(a) == jask.DiskArrayType((3, 4), np.float32)
    with pytest.raises(TypeError):
        jnp.sum(a)


def test_jit_compiles_once_per_shape(small_budget, rng):
    traces = []

    @jax.jit
    def f(a, b):
        traces.append(1)
        return jask.sum(a * b)

    for _ in range(3):
        a, b = rand(rng, (9, 7), np.float32), rand(rng, (9, 7), np.float32)
        f(jask.from_numpy(a), jask.from_numpy(b))
    assert len(traces) == 1
    a, b = rand(rng, (9, 8), np.float32), rand(rng, (9, 8), np.float32)
    f(jask.from_numpy(a), jask.from_numpy(b))
    assert len(traces) == 2


def test_traced_methods_and_properties(small_budget, rng):
    x = rand(rng, (9, 7), np.float32)

    @jax.jit
    def f(a, lr):
        return (lr * a).T, a.nbytes, a.shape, a.ndim

    t, nbytes, shape, ndim = f(jask.from_numpy(x), 0.5)
    np.testing.assert_allclose(t.to_numpy(), 0.5 * x.T)
    assert (int(nbytes), shape, ndim) == (x.nbytes, (9, 7), 2)

    with pytest.raises(AttributeError, match="no filename yet"):
        jax.jit(lambda a: a.filename)(jask.from_numpy(x))


def _loss(params, X, Y):
    return jask.sum(jask.square(X @ params["w"] + params["b"] - Y))


def test_optax_sgd_on_a_dict_of_diskarrays(small_budget, rng):
    x, y = rand(rng, (97, 5), np.float32), rand(rng, (97, 1), np.float32)
    w0, b0 = rand(rng, (5, 1), np.float32), rand(rng, (97, 1), np.float32)
    X, Y = jask.from_numpy(x), jask.from_numpy(y)
    params = {"w": jask.from_numpy(w0), "b": jask.from_numpy(b0)}
    paths = {k: v.filename for k, v in params.items()}
    opt = optax.sgd(0.01)
    state = opt.init(params)

    @jax.jit
    def step(params, state):
        grads = jax.grad(_loss)(params, X, Y)
        updates, state = opt.update(grads, state, params)
        params = jax.tree.map(lambda p, u: p.update_(p + u), params, updates)
        return params, state

    ref = {"w": jnp.asarray(w0), "b": jnp.asarray(b0)}
    ref_state = opt.init(ref)
    ref_loss = lambda p: jnp.sum(jnp.square(x @ p["w"] + p["b"] - y))
    for _ in range(3):
        params, state = step(params, state)
        updates, ref_state = opt.update(jax.grad(ref_loss)(ref), ref_state, ref)
        ref = optax.apply_updates(ref, updates)
    for k in params:
        assert params[k].filename == paths[k]
        np.testing.assert_allclose(params[k].to_numpy(), ref[k], rtol=1e-4, atol=1e-5)


def test_vmap_over_a_disk_arrays_leading_axis_and_a_closure(small_budget):
    """Elementwise ops and reductions batch over a DiskArray's leading axis (the
    batch is an axis of the same op), and over an in-memory operand closing
    over a DiskArray; an op with no batching rule is refused naming it."""
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    a = jask.from_numpy(x)
    got = jax.vmap(lambda r: r * 2.0 + 1.0)(a)
    assert isinstance(got, jask.DiskArray)
    np.testing.assert_array_equal(got.to_numpy(), x * 2 + 1)
    np.testing.assert_array_equal(jax.vmap(jask.sum)(a), x.sum(1))
    np.testing.assert_allclose(jax.vmap(lambda s: jask.sum(a * s))(jnp.arange(3.0)),
                               x.sum() * np.arange(3.0))
    with pytest.raises(NotImplementedError,
                       match=r"jax\.vmap through jask\.slice is not supported"):
        jax.vmap(lambda r: r[0])(a)


_BATCH_IN_A_STORE = r"jax\.vmap through jask\.dot is not supported.*a batch of matrices in a store"
_TRANSPOSE = r"jax\.vmap through jask\.transpose is not supported"

#: jax.vmap of a product of a batch with an operand not batched: (id, batch size,
#: the batch's item shape and place, the other operand's shape and place, the
#: product of an item and the other, the refusal expected or None). A batch of
#: several matrices in a store is refused (only a copy lays it out); a batch
#: of one is a view of one matrix, as the product without vmap.
VMAP_PRODUCTS = [
    ("r@w-of-one", 1, (5, 3), "disk", (3, 2), "memory", lambda b, o: b @ o, None),
    ("r@w-of-four", 4, (5, 3), "disk", (3, 2), "memory", lambda b, o: b @ o, _BATCH_IN_A_STORE),
    ("r@W-stored-of-one", 1, (5, 3), "disk", (3, 2), "disk", lambda b, o: b @ o, None),
    ("r.T@w-of-one", 1, (3, 5), "disk", (3, 2), "memory", lambda b, o: b.T @ o, _TRANSPOSE),
    ("X@w-of-one", 1, (3, 2), "memory", (5, 3), "disk", lambda b, o: o @ b, None),
    ("X@w-of-four", 4, (3, 2), "memory", (5, 3), "disk", lambda b, o: o @ b, None),
    ("X.T@w-of-one", 1, (3, 2), "memory", (3, 5), "disk", lambda b, o: o.T @ b, None),
    ("X.T@w-of-four", 4, (3, 2), "memory", (3, 5), "disk", lambda b, o: o.T @ b, None),
    ("x@W-stored-of-one", 1, (3, 2), "disk", (5, 3), "memory", lambda b, o: o @ b, None),
    ("x@W-stored-of-four", 4, (3, 2), "disk", (5, 3), "memory", lambda b, o: o @ b,
     _BATCH_IN_A_STORE),
]


@pytest.mark.parametrize("row", VMAP_PRODUCTS, ids=lambda r: r[0])
def test_vmap_of_a_product_matches_jax_or_is_refused(row, small_budget, rng):
    """Eager and under jit, and the gradient of its sum in the operand in
    memory: the values of jax.vmap of the same product in memory, or the
    refusal naming the op; never a wrong value."""
    _, size, shape, place, other_shape, other_place, product, refused = row
    batch = rng.standard_normal((size,) + shape).astype(np.float32)
    other = rng.standard_normal(other_shape).astype(np.float32)
    stacked = jask.from_numpy(batch) if place == "disk" else jnp.asarray(batch)
    fixed = jask.from_numpy(other) if other_place == "disk" else jnp.asarray(other)

    def batched(b, o):
        return jax.vmap(lambda item: product(item, o))(b)

    for label, f in [("eager", batched), ("jit", jax.jit(batched))]:
        if refused:
            with pytest.raises(NotImplementedError, match=refused):
                f(stacked, fixed)
            continue
        got = f(stacked, fixed)
        np.testing.assert_allclose(np.asarray(to_numpy(got)),
                                   batched(jnp.asarray(batch), jnp.asarray(other)),
                                   rtol=1e-5, atol=1e-6, err_msg=label)
    if refused:
        return
    at = 0 if place == "memory" else 1  # the operand in memory: a gradient jax returns
    grad = jax.grad(lambda b, o: jask.sum(batched(b, o)), argnums=at)(stacked, fixed)
    want = jax.grad(lambda b, o: jnp.sum(batched(b, o)), argnums=at)(jnp.asarray(batch),
                                                                     jnp.asarray(other))
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-5)


def test_loops_with_disk_arrays_in_the_body_run_and_a_scan_over_one_is_refused(small_budget):
    """fori_loop, while_loop and scan over in-memory values run with DiskArrays
    in the body (a DiskArray carry too); lax.scan and lax.map over a
    DiskArray are refused at trace time naming the alternatives."""
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    a = jask.from_numpy(x)
    total = float(x.sum())
    assert float(jax.lax.fori_loop(0, 3, lambda i, c: c + jask.sum(a * i), 0.0)) == 3 * total
    assert float(jax.lax.while_loop(lambda c: c < 100, lambda c: c + jask.sum(a), 0.0)) == 2 * total
    carry, _ = jax.lax.scan(lambda c, s: (c + jask.sum(a * s), None), 0.0, jnp.arange(3.0))
    assert float(carry) == 3 * total
    doubled = jax.lax.fori_loop(0, 3, lambda i, d: d * 2.0, a)
    np.testing.assert_array_equal(doubled.to_numpy(), x * 8)
    for loop in (lambda: jax.lax.scan(lambda c, r: (c + jask.sum(r), None), 0.0, a),
                 lambda: jax.lax.scan(lambda c, r: (c, None), 0.0, a, length=3),
                 lambda: jax.lax.map(jask.sum, a)):
        with pytest.raises(NotImplementedError, match=r"lax\.scan.*over a DiskArray is not "
                                                      r"supported.*closed over.*jitted step"):
            loop()


def test_64_bit_values_cross_a_callback_run_on_a_thread_without_x64(jask_scratch):
    """JAX converts a callback's operands and results under the x64 setting
    of the thread the callback runs on, which need not be the thread that
    turned x64 on: a compiled float64 step run from another thread must keep
    64 bits going in (the min residual, the scalar) and coming out (dw)."""
    jask.set_memory_budget("64KB", scratch_dir=jask_scratch.path)
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        x, w = rng.standard_normal((97, 61)), jnp.asarray(rng.standard_normal(61))
        X = jask.from_numpy(x)
        third = 1.0 / 3.0
        loss = lambda X, w: (jask.sum(jask.multiply(jask.min(X, axis=0), w))
                             + jask.sum(jask.divide(third, X)))
        compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(X, w).compile()
        ref = lambda x, w: jnp.sum(jnp.min(x, axis=0) * w) + jnp.sum(third / x)
        want = jax.grad(ref, argnums=(0, 1))(jnp.asarray(x), w)
    got: dict = {}
    thread = threading.Thread(target=lambda: got.update(g=compiled(X, w)))  # x64 off there
    thread.start()
    thread.join()
    g_X, g_w = got.pop("g")
    assert g_X.dtype == np.float64 and g_w.dtype == np.float64
    np.testing.assert_allclose(g_X.to_numpy(), want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(g_w), want[1], rtol=1e-12, atol=1e-12)
