"""The rewrite passes one at a time (jask.core.rewrite), each on the jaxpr of a
small program over real stores with jask's own rules: what the pass changes,
that it leaves a program it has nothing to do for as it is, and that the
rewritten program computes the values numpy gives."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from jask.core import ufuncs
from jask.core._jax_internals import dead_code_removed, hi_primitive, lowering_rewrite
from jask.core._jax_internals import jaxpr_core as core
from jask.core.array import DiskArrayType
from jask.core.primitives.elementwise import Blockwise
from jask.core.rewrite import Rules, rewritten_jaxpr
from jask.core.rewrite.centred_moments import centred_moments
from jask.core.rewrite.common_values import common_values
from jask.core.rewrite.defer import defer, returned_stores
from jask.core.rewrite.forget import forget_before_mutations
from jask.core.rewrite.host_arithmetic import host_arithmetic
from jask.core.rewrite.inline import inlined
from jask.core.rewrite.linear import unit_copy
from jask.core.rewrite.prune import rewrite


def _rules() -> Rules:
    return lowering_rewrite().rules  # jask's, installed on import


def _ours(jaxpr) -> list:
    """The names of jask's ops in a jaxpr, in order."""
    return [type(hi_primitive(e)).__name__ for e in jaxpr.eqns if hi_primitive(e) is not None]


def _run(closed, jaxpr, *args):
    """``jaxpr`` (``closed``'s, rewritten) run eagerly on ``args``."""
    return core.jaxpr_as_fun(core.ClosedJaxpr(jaxpr, closed.consts))(*args)


@pytest.fixture
def data(small_budget, rng):
    x = rng.standard_normal((300, 7)).astype(np.float32)
    return x, jask.from_numpy(x)


def test_a_value_written_twice_is_computed_once(data):
    x, X = data
    closed = jax.make_jaxpr(lambda X: (X * 2.0).sum() + (X * 2.0).sum())(X)
    once = dead_code_removed(common_values(closed.jaxpr, _rules()))
    assert _ours(closed.jaxpr) == ["Blockwise"] * 4
    assert _ours(once) == ["Blockwise"] * 2  # one product and its sum, not two of each
    np.testing.assert_allclose(_run(closed, once, X)[0], 4 * x.sum(dtype=np.float64), rtol=1e-5)


def test_a_value_written_twice_across_a_write_is_computed_twice(data):
    x, X = data

    def f(X, Y):
        a = (X * 2.0).sum()
        Y.update_(Y + 1.0)  # (X is not Y, but no pass looks that far)
        return a + (X * 2.0).sum()

    closed = jax.make_jaxpr(f)(X, jask.from_numpy(x))
    assert common_values(closed.jaxpr, _rules()) is closed.jaxpr


@pytest.mark.parametrize("program", [
    lambda X: (X * 2.0).sum() + (X * 3.0).sum(),  # different literals
    lambda X: (X * 2.0).sum(),
])
def test_without_a_repeat_common_values_leaves_the_jaxpr(data, program):
    closed = jax.make_jaxpr(program)(data[1])
    assert common_values(closed.jaxpr, _rules()) is closed.jaxpr


@pytest.mark.parametrize("reduce, scale", [(jask.sum, 1.0), (jask.mean, None)])
def test_a_centred_moment_is_one_reduction_of_x(data, reduce, scale):
    x, X = data
    closed = jax.make_jaxpr(lambda X: reduce(jask.square(X - jask.mean(X))))(X)
    moments = centred_moments(closed.jaxpr, _rules())
    assert moments is not closed.jaxpr
    lean = dead_code_removed(moments)
    assert len(_ours(lean)) == 1  # no mean first, no square, no difference
    (eqn,) = lean.eqns
    assert eqn.invars == closed.jaxpr.invars  # read from x itself
    want = x.astype(np.float64).var() * (x.size if scale else 1)
    np.testing.assert_allclose(_run(closed, lean, X)[0], want, rtol=1e-5)


def test_an_uncentred_moment_is_left(data):
    closed = jax.make_jaxpr(lambda X: jask.sum(jask.square(X - 1.0)))(data[1])
    assert centred_moments(closed.jaxpr, _rules()) is closed.jaxpr


def test_value_ops_read_later_run_as_one(data):
    x, X = data
    closed = jax.make_jaxpr(lambda X: (X * 2.0).sum() * 0.5 + jask.max(X) + jask.sum(X, 0))(X)
    merged = defer(closed.jaxpr, _rules())
    assert _ours(closed.jaxpr).count("Together") == 0
    assert _ours(merged).count("Together") == 1  # the three reductions: one pass
    got = _run(closed, merged, X)[0]
    want = x.sum(dtype=np.float64) + x.max() + x.sum(0, dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_defer_with_nothing_movable_leaves_the_jaxpr(data):
    closed = jax.make_jaxpr(lambda X: (X * 2.0).sum() + jask.max(X))(data[1])
    assert defer(closed.jaxpr, Rules(mutates=_rules().mutates)) is closed.jaxpr


def test_a_gradient_scaled_by_a_waiting_scalar_waits_with_the_forward_pass(data, rng):
    x, X = data
    w = rng.standard_normal(7).astype(np.float32)

    def loss(w, X):  # the cotangent 1 / (2 sqrt(m)) needs the forward value first
        r = X @ w
        return jnp.sqrt(jask.mean(r * r))

    closed = jax.make_jaxpr(jax.value_and_grad(loss))(w, X)
    lean = rewrite(closed, _rules())
    assert [n for n in _ours(lean.jaxpr) if n == "Together"] == ["Together"]  # one pass
    value, grad = core.jaxpr_as_fun(lean)(w, X)
    r = x.astype(np.float64) @ w
    m = np.mean(r * r)
    np.testing.assert_allclose(value, np.sqrt(m), rtol=1e-5)
    np.testing.assert_allclose(grad, x.T.astype(np.float64) @ r / (len(r) * np.sqrt(m)),
                               rtol=1e-4)


def test_a_whole_program_computes_the_stores_it_returns_with_its_values(data):
    x, X = data
    closed = jax.make_jaxpr(lambda X: ((X * 2.0).sum(), X + 1.0))(X)
    stores = returned_stores(closed.jaxpr, _rules())
    assert [v.aval.shape for v in stores] == [(300, 7)]
    whole = defer(closed.jaxpr, _rules(), stores)
    (together,) = [e for e in whole.eqns if type(hi_primitive(e)).__name__ == "Together"]
    assert stores[0] in together.invars
    assert "Together" not in _ours(defer(closed.jaxpr, _rules()))  # nested: stores as they are
    assert "Together" not in _ours(rewritten_jaxpr(closed, False).jaxpr)


def test_a_write_is_handed_the_values_made_before_it(data):
    x, X = data

    def f(X, Y):
        X * 2.0  # made, never read: the write computes it before overwriting
        Y.update_(Y + 1.0)
        return Y.sum()

    closed = jax.make_jaxpr(f)(X, jask.from_numpy(x))
    handed = forget_before_mutations(closed.jaxpr, _rules())
    names = _ours(handed)
    assert "Forgetting" in names and "Forgetting" not in _ours(closed.jaxpr)
    writes = [e for e in handed.eqns if type(hi_primitive(e)).__name__ == "Forgetting"]
    product = next(e for e in closed.jaxpr.eqns if hi_primitive(e) is not None)
    assert product.outvars[0] in writes[0].invars


def test_without_a_write_forget_leaves_the_jaxpr(data):
    closed = jax.make_jaxpr(lambda X: (X * 2.0).sum())(data[1])
    assert forget_before_mutations(closed.jaxpr, _rules()) is closed.jaxpr


@pytest.mark.parametrize("program, linear", [
    (lambda c: c * 3.0, True),
    (lambda c: -c, True),
    (lambda c: jnp.broadcast_to(c, (4,)), True),
    (lambda c: c / 2.0, True),
    (lambda c: 2.0 / c, False),
    (lambda c: c * c, False),
    (jnp.sin, False),
])
def test_arithmetic_linear_in_a_waiting_scalar_has_a_unit_copy(program, linear):
    jaxpr = jax.make_jaxpr(program)(np.float32(2.0)).jaxpr
    (c,), eqn = jaxpr.invars, jaxpr.eqns[-1]
    unit_of: dict = {}
    copy = unit_copy(eqn, {c}, unit_of)
    assert (copy is not None) == linear
    if linear:  # the same equation on 1, its output the unit of the original's
        assert c not in copy.invars
        assert unit_of[eqn.outvars[0]] == (copy.outvars[0], c)


def test_sums_restoring_a_result_are_finished_on_the_host():
    jaxpr = jax.make_jaxpr(lambda a, b: (a * 2.0 + b, jnp.sin(a)))(
        np.float32(1.0), np.float32(2.0)).jaxpr
    a, b = jaxpr.invars
    after = list(jaxpr.eqns)
    restoring = {id(e) for e in after if e.primitive.name == "add"}
    (described, outvars), rest = host_arithmetic([a, b], after, restoring)
    assert [d[0] for d in described] == ["mul", "add"]
    assert described[0][1] == (("value", 0), ("number", 2.0))
    assert described[1][1] == (("value", 2), ("value", 1))
    assert outvars == [e.outvars[0] for e in after if e.primitive.name in ("mul", "add")]
    assert [e.primitive.name for e in rest] == ["sin"]  # not restoring: JAX's, as written
    assert host_arithmetic([a, b], after) == ((), after)


def test_inlined_writes_out_nested_calls_with_fresh_variables():
    """A jitted helper closing over an array (a constant of its program),
    called twice and once more inside another jitted helper: all written
    out, each call's equations defining variables of their own, the
    values unchanged; a call whose program holds nothing worth it stays."""
    table = jnp.arange(3.0)
    helper = jax.jit(lambda x: jnp.sin(x) * table)
    outer = jax.jit(lambda x: helper(x) + 1.0)
    closed = jax.make_jaxpr(lambda x: helper(x) - outer(2.0 * x) + jax.jit(jnp.cos)(x))(
        jnp.ones(3))
    flat = inlined(closed, lambda jaxpr: any(e.primitive.name == "sin" for e in jaxpr.eqns)
                   or any(e.primitive.name == "jit" for e in jaxpr.eqns))
    names = [e.primitive.name for e in flat.jaxpr.eqns]
    assert names.count("sin") == 2 and names.count("jit") == 1  # cos's call kept
    defined = [v for e in flat.jaxpr.eqns for v in e.outvars]
    assert len(defined) == len(set(defined))
    x = jnp.linspace(0.1, 0.9, 3)
    np.testing.assert_allclose(core.jaxpr_as_fun(flat)(x), core.jaxpr_as_fun(closed)(x),
                               rtol=1e-6)
    assert inlined(flat, lambda jaxpr: False) is flat


def _blockwise(row: str, reducer=None):
    a = DiskArrayType((6, 4), np.float32)
    full = (0, 1)
    ufunc = ufuncs.TABLE[row]
    return Blockwise(ufunc, (a,) * ufunc.nin, (full,) * ufunc.nin, (None,) * ufunc.nin,
                     a.shape, full if reducer is None else (), np.float32, reducer=reducer)


@pytest.mark.parametrize("row, reducer, groups", [
    ("add", None, ({0: 1, 1: 1},)),
    ("subtract", None, ({0: 1, 1: -1},)),
    ("multiply", None, ({0: None}, {1: None})),
    ("multiply", "sum", ({0: None}, {1: None})),
    ("add", "sum", ()),  # a sum of a + b reduces both at once: not read as a signed sum
    ("maximum", None, ()),
    ("multiply", "max", ()),
    ("exp", None, ()),
])
def test_a_blockwise_declares_the_operands_it_is_linear_in(row, reducer, groups):
    """The band-group rewrite reads linearity only from what the op declares
    (:meth:`Blockwise.linear_operands`): a kernel or reducer not known linear
    is declared linear in nothing."""
    prim = _blockwise(row, reducer)
    assert prim.linear_operands() == groups
    assert prim.kernel_linear() == tuple(tuple(sorted(g)) for g in groups)
