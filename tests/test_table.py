"""Every op of the table (``ops_table.OPS``) against numpy for values and
jax.numpy + jax.grad for gradients, eager, jit(grad) and grad(jit), with
float32 and float64, broadcasting and in-memory operands, and a budget that
forces many tiles. A new row in the table is tested here without new code."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ops_table import (
    COMPLEX_OPS,
    OPS,
    as_jask,
    complex_family,
    first_of_each_op,
    make_inputs,
)

import jask
from helpers import stores_on_disk, to_numpy, tolerance

MODES = {
    "eager": lambda f, **kw: jax.grad(f, **kw),
    "jit(grad)": lambda f, **kw: jax.jit(jax.grad(f, **kw)),
    "grad(jit)": lambda f, **kw: jax.grad(jax.jit(f), **kw),
}


@pytest.mark.parametrize("case", OPS, ids=lambda c: c.id)
def test_values_match_numpy(case, small_budget, dtype, rng):
    values = make_inputs(case, dtype, rng)
    got = case.jask(*as_jask(case, values))
    want = case.numpy(*values)
    expected_dtype = jax.eval_shape(case.jnp, *values).dtype
    assert got.shape == np.shape(want)
    assert np.dtype(got.dtype) == np.dtype(expected_dtype), (got.dtype, expected_dtype)
    if case.exact:
        np.testing.assert_array_equal(to_numpy(got), want)
    else:
        np.testing.assert_allclose(to_numpy(got), want, **tolerance(dtype))


def _complex_params():
    """Per family: each op's first row with complex64 in CI; its other rows,
    and complex128, in the slow set (but for the products, cheap in both)."""
    params = []
    for family in ("elementwise", "reduction", "product"):
        cheap = () if family == "product" else pytest.mark.slow
        params += [pytest.param(family, np.float32, "first", id=f"{family}-complex64-first"),
                   pytest.param(family, np.float64, "first", marks=cheap,
                                id=f"{family}-complex128-first")]
        params += [pytest.param(family, dtype, "rest", marks=pytest.mark.slow,
                                id=f"{family}-{np.dtype(dtype).name}-rest")
                   for dtype in (np.float32, np.float64)]
    return params


@pytest.mark.parametrize("family, dtype, sample", _complex_params(), indirect=["dtype"])
def test_complex_values_match_jax(family, dtype, sample, small_budget, rng):
    """The complex rows (complex64 beside float32, complex128 beside float64):
    dtypes as jax.numpy's, values as numpy's and jax.numpy's within the
    tolerance of the real rows. One test per family and sample (each test's
    scratch check costs about a second), naming the row that fails."""
    first = {p.values[0].id for p in first_of_each_op(COMPLEX_OPS) if not p.marks}
    cases = [c for c in COMPLEX_OPS if complex_family(c) == family
             and (c.id in first) == (sample == "first")]
    assert cases
    for case in cases:
        values = make_inputs(case, dtype, rng)
        got = case.jask(*as_jask(case, values))
        reference = case.jnp(*[jnp.asarray(v) for v in values])
        assert np.dtype(got.dtype) == np.dtype(reference.dtype), case.id
        assert tuple(got.shape) == tuple(reference.shape), case.id
        values_got = to_numpy(got)
        if case.exact:
            np.testing.assert_array_equal(values_got, case.numpy(*values), err_msg=case.id)
            continue
        with np.errstate(all="ignore"):
            want = case.numpy(*values)
        np.testing.assert_allclose(values_got, want, **tolerance(dtype), err_msg=case.id)
        np.testing.assert_allclose(values_got, np.asarray(reference), **tolerance(dtype),
                                   err_msg=case.id + " (jax.numpy)")


GRAD_CASES = [c for c in OPS if c.argnums and "rule" not in c.tags]
RULE_CASES = [c for c in OPS if c.argnums and "rule" in c.tags]


#: float32 for every row; float64 (x64 on: a second compile of every case) for
#: each op's first row, the rest of float64 in the slow set.
GRAD_PARAMS = [pytest.param(c, np.float32, id=f"{c.id}-float32") for c in GRAD_CASES] + [
    pytest.param(*p.values, np.float64, id=f"{p.id}-float64", marks=p.marks)
    for p in first_of_each_op(GRAD_CASES)]


@pytest.mark.parametrize("case, dtype", GRAD_PARAMS, indirect=["dtype"])
def test_gradients_match_jax(case, small_budget, dtype, rng):
    """float32 in all three modes; float64 (slower to compile) under jit(grad),
    or in all three modes too for a case tagged "every-mode"."""
    every = dtype == np.float32 or "every-mode" in case.tags
    check_gradients(case, dtype, rng, list(MODES) if every else ["jit(grad)"])


@pytest.mark.parametrize("case", RULE_CASES, ids=lambda c: c.id)
def test_gradient_rules_match_jax(case, small_budget, rng):
    """A case tagged "rule" checks its row's VJP rule once, eagerly in float64
    (the tightest tolerance): the rule is the same kernel in every mode, and
    the modes are the rest of the table's to check."""
    with jax.enable_x64(True):
        check_gradients(case, np.float64, rng, ["eager"])


def check_gradients(case, dtype, rng, modes):
    values = make_inputs(case, dtype, rng)
    args = as_jask(case, values)
    out = case.jask(*args)
    weights = rng.standard_normal(out.shape).astype(out.dtype)
    W = jask.from_numpy(weights) if isinstance(out, jask.DiskArray) else jnp.asarray(weights)
    del out

    def loss(*a):
        return jask.sum(jask.multiply(case.jask(*a[:-1]), a[-1]))

    def reference(*a):
        return jnp.sum(case.jnp(*a[:-1]) * a[-1])

    argnums = case.argnums
    want = jax.grad(reference, argnums=argnums)(*[jnp.asarray(v) for v in values], weights)
    for mode in modes:
        got = MODES[mode](loss, argnums=argnums)(*args, W)
        for i, g, w in zip(argnums, got, want):
            if case.args[i].kind == "disk":
                assert isinstance(g, jask.DiskArray) and g.filename.endswith(".grad"), mode
            else:  # an in-memory operand's gradient stays an in-memory array
                assert not isinstance(g, jask.DiskArray), mode
            assert g.shape == w.shape and np.dtype(g.dtype) == np.dtype(w.dtype), mode
            np.testing.assert_allclose(to_numpy(g), w, **tolerance(dtype), err_msg=mode)
        del got


# --- errors -----------------------------------------------------------------------

#: Every elementwise binary op of the table (its rows in the "disk-disk" or
#: "disk-row" layouts), the first release's names of two of them, and where.
BINARY_NAMES = sorted({c.id.split("[")[0] for c in OPS
                       if c.id.endswith(("[disk-disk]", "[disk-row]")) and len(c.args) == 2}
                      - {"dot"} | {"sub", "mul", "where"})


def test_first_release_names_are_the_table_ops():
    assert jask.sub is jask.subtract and jask.mul is jask.multiply


@pytest.mark.parametrize("other", ["disk", "mem"])
@pytest.mark.parametrize("op", BINARY_NAMES)
def test_broadcast_mismatch_names_both_shapes(op, other, small_budget):
    """Refused before anything is written: no store appears."""
    a = jask.from_numpy(np.ones((9, 7), np.float32))
    if other == "disk":
        b, shapes = jask.from_numpy(np.ones((7, 9), np.float32)), r"\(9, 7\).*\(7, 9\)"
    else:
        b, shapes = np.ones(5, np.float32), r"\(9, 7\).*\(5,\)"
    args = (a > 0, a, b) if op == "where" else (a, b)
    before = stores_on_disk(small_budget)
    with pytest.raises(ValueError, match=shapes):
        getattr(jask, op)(*args)
    assert stores_on_disk(small_budget) == before


@pytest.mark.parametrize("index, message", [
    # (index arrays on several axes and masks within the in-memory share are answered:
    # tests/test_numpy_extras.py, over the share and inside jit they are refused)
    ((slice(None, None, -1),), "positive step"),
    ((0, 0, 0), "too many indices"),
    ((12,), "out of bounds"),
])
def test_unsupported_indexing_says_what_is_supported(index, message, small_budget):
    a = jask.from_numpy(np.ones((9, 7), np.float32))
    with pytest.raises(IndexError, match=message):
        a[index]


def test_in_memory_operand_too_large_is_refused_with_the_numbers(small_budget):
    a = jask.from_numpy(np.ones((200, 300), np.float32))
    big = np.ones((200, 300), np.float32)  # 240 kB against a 64 kB budget
    with pytest.raises(jask.BudgetError, match=r"\(200, 300\).*240000 bytes.*budget"):
        a + big


def test_in_memory_inputs_use_jax_numpy():
    x = np.array([1.0, 2.0], np.float32)
    assert isinstance(jask.exp(x), jax.Array)
    np.testing.assert_allclose(jask.exp(x), np.exp(x), rtol=1e-6)
    assert float(jask.sum(x)) == 3.0 and float(jask.multiply(2.0, 3.0)) == 6.0
    np.testing.assert_allclose(jask.dot(np.eye(2), x), x)


def test_asarray_materializes_small_arrays_and_refuses_large(small_budget):
    a = jask.from_numpy(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(a), np.arange(6.0).reshape(2, 3))
    big = jask.from_numpy(np.zeros((200, 100)))  # 160 kB against a 64 kB budget
    with pytest.raises(MemoryError, match=r"\(200, 100\).*budget"):
        np.asarray(big)


def test_methods_as_on_jax_arrays(small_budget, rng):
    x = rng.standard_normal((31, 9)).astype(np.float32)
    a = jask.from_numpy(x)
    np.testing.assert_allclose(a.sum(0), x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(a.mean(), x.mean(), rtol=1e-5)
    np.testing.assert_allclose(a.max(axis=1), x.max(1))
    np.testing.assert_allclose(a.std(0), x.std(0), rtol=1e-4)
    assert a.astype(np.float64).dtype == np.float64
    jitted = jax.jit(lambda a: (a.sum(0), a.T.mean(1), a.astype(jnp.float32)[2:5].min()))
    s, m, lo = jitted(a)
    np.testing.assert_allclose(s, x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(m, x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(lo, x[2:5].min())


def test_row_minibatches_compile_once_per_batch_shape(small_budget, rng):
    x = rng.standard_normal((50, 4)).astype(np.float32)
    X = jask.from_numpy(x)
    traces = []

    @jax.jit
    def step(w, batch):
        traces.append(1)
        return w - 0.1 * jax.grad(lambda w: jask.mean(jask.square(batch @ w)))(w)

    w = jnp.ones(4, np.float32)
    for i in range(0, 40, 10):
        w = step(w, X[i:i + 10])
    assert len(traces) == 1
    ref = jnp.ones(4, np.float32)
    for i in range(0, 40, 10):
        ref = ref - 0.1 * jax.grad(lambda w: jnp.mean(jnp.square(x[i:i + 10] @ w)))(ref)
    np.testing.assert_allclose(w, ref, rtol=1e-5)


def test_dynamic_slice_in_jit_compiles_once(small_budget, rng):
    x = rng.standard_normal((40, 3)).astype(np.float32)
    X = jask.from_numpy(x)
    traces = []

    @jax.jit
    def f(X, i):
        traces.append(1)
        return jask.sum(jask.dynamic_slice(X, (i, 0), (8, 3)))

    for i in (0, 5, 32, 39):
        j = min(i, 32)  # clamped so the slice fits, as in jax.lax.dynamic_slice
        np.testing.assert_allclose(f(X, i), x[j:j + 8].sum(), rtol=1e-5)
    assert len(traces) == 1


def test_every_public_row_is_exported_and_tested():
    from ops_table import OPS

    from jask.core import ufuncs
    public = {n for n, u in ufuncs.TABLE.items() if u.public}
    nn = {"sigmoid", "relu", "softplus"}
    assert public - nn <= set(jask.__all__)
    assert all(callable(getattr(jask.nn, n)) for n in nn)
    tested = {case.id.split("[")[0] for case in OPS}
    assert public <= tested, public - tested


def test_every_public_row_carries_its_doc_example():
    """A row is self-contained: its doc example is a field of the row, and
    the public function's docstring runs it (pytest runs the doctests)."""
    from jask.core import ufuncs
    for name, u in ufuncs.TABLE.items():
        if u.public:
            assert u.example is not None, name
            fn = getattr(jask.nn, name) if name in ("sigmoid", "relu", "softplus") else getattr(
                jask, name)
            assert u.example[1] in fn.__doc__, name
