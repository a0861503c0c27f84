"""Every op exposes its plan, from one planner (jask.engine.plan): each
primitive answers ``plan(stores, config)`` with the plan its work runs
with, or says clearly that it has none; jask.visualize shows exactly that
plan, and it is what the op then really runs with."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.hijax import ShapedArray

import jask
from jask.base import memory
from jask.core import primitives as P
from jask.core import ufuncs
from jask.core.array import DiskArrayType
from jask.engine import execute
from jask.engine.plan import Plan
from jask.store.spec import StoreSpec

F32 = np.dtype("float32")
A = DiskArrayType((300, 40), F32)
B = DiskArrayType((40, 5), F32)
SCALAR = ShapedArray((), F32)
FULL = (0, 1)


def _kernel(x, y):
    return x + y


#: One representative instance per primitive class of jask.core.primitives.
EXAMPLES = {
    P.Blockwise: lambda: P.Blockwise(ufuncs.MUL, (A, SCALAR), (FULL, ()), (F32, F32),
                                     A.shape, FULL, F32),
    P.Transpose: lambda: P.Transpose(A, (1, 0), False, None),
    P.Slice: lambda: P.Slice(A, ((100, 1), (40, 1)), False, None),
    P.Scatter: lambda: P.Scatter(A, ((100, 1), (40, 1)), None),
    P.Concatenate: lambda: P.Concatenate((A, A), 0, False, False, None),
    P.Reshape: lambda: P.Reshape(A, (600, 20), False, None),
    P.Update: lambda: P.Update(A, None),
    P.Dot: lambda: P.Dot(A, B, False, False, F32),
    P.Materialize: lambda: P.Materialize(A, None),
    P.FromValue: lambda: P.FromValue(A, False, None),
    P.Together: lambda: P.Together((P.Materialize(A, None),)),
    P.Forgetting: lambda: P.Forgetting(P.Update(A, None), (A,)),
    P.Fused: lambda: P.Fused(_kernel, (A, A), A.shape, F32, (F32,)),
    P.Cumsum: lambda: P.Cumsum(A, 0, F32),
    P.Sort: lambda: P.Sort((A,), 0, "sort", F32),
    P.Search: lambda: P.Search(A, DiskArrayType((1000,), F32), "left", F32,
                               np.dtype("int32")),
    P.Gather: lambda: P.Gather(A, (ShapedArray((500,), np.dtype("int32")),), (0,)),
    P.ScatterAdd: lambda: P.ScatterAdd(A, DiskArrayType((500, 40), F32),
                                       (ShapedArray((500,), np.dtype("int32")),), (0,)),
    P.FFT: lambda: P.FFT(A, 1, "fft", 40, "backward", (300, 40), np.dtype("complex64")),
}

#: Primitives that run several ops and so have no plan of their own.
NO_PLAN = {P.Together}


def _primitive_classes():
    """Every primitive jask defines, in the package or a family's module
    (``primitives/gathers.py``, ...), whether or not the package re-exports it."""
    found, todo = [], list(P.DiskPrimitive.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__ == P.__name__ or cls.__module__.startswith(P.__name__ + "."):
            found.append(cls)
    return sorted(set(found), key=lambda cls: cls.__name__)


def _stores(prim, config):
    return [StoreSpec("<new store>", a.shape, a.dtype,
                      memory.default_chunks(a.shape, a.dtype, config.max_memory,
                                            config.workers), managed=True)
            for a in prim.in_avals if isinstance(a, DiskArrayType)]


@pytest.mark.parametrize("cls", _primitive_classes(), ids=lambda c: c.__name__)
def test_every_primitive_answers_its_plan_or_says_it_has_none(cls, small_budget):
    assert cls in EXAMPLES, (f"add a representative {cls.__name__} to EXAMPLES in "
                             "tests/test_plans.py")
    prim = EXAMPLES[cls]()
    stores = _stores(prim, small_budget)
    if cls in NO_PLAN:
        with pytest.raises(NotImplementedError, match=str(prim.params["op"])):
            prim.plan(stores, small_budget)
        return
    plan = prim.plan(stores, small_budget)
    assert isinstance(plan, Plan)
    # a view (jask.store.views) is answered with no task and nothing held
    views = cls in (P.Transpose, P.Slice, P.Reshape) and plan.tasks == 0 and plan.held == 0
    assert (plan.tasks >= 1 or views) and plan.held == plan.cost.total
    out = prim.out_aval
    if isinstance(out, DiskArrayType) and plan.into is None:
        assert plan.chunks is not None and len(plan.chunks) == len(out.shape)
    # the primitive's plan is its work's
    if cls is P.Forgetting:  # the op it wraps, without the handles it forgets
        assert prim.prim.plan(stores[:len(stores) - prim.dead], small_budget) == plan
        return
    mem = [a for a in prim.in_avals if not isinstance(a, DiskArrayType)]
    assert prim.disk_work().plan(stores, mem, small_budget) == plan


def test_an_op_without_a_plan_says_so_by_name(small_budget):
    class Mystery(P.DiskPrimitive):
        def __init__(self):
            super().__init__((A,), A, op="mystery")

    with pytest.raises(NotImplementedError, match="jask.mystery"):
        Mystery().plan(_stores(Mystery(), small_budget), small_budget)


@pytest.fixture
def runs(monkeypatch):
    """The costs the graphs an op runs were checked with."""
    seen = []
    real = execute.run

    def spy(graph, keys, workers, cost=None):
        seen.append(cost)
        return real(graph, keys, workers, cost)

    monkeypatch.setattr(execute, "run", spy)
    return seen


def _data(rng):
    X = jask.from_numpy(rng.standard_normal((3000, 40)).astype(np.float32))
    w = jask.from_numpy(rng.standard_normal((40, 5)).astype(np.float32))
    return X, w


OPS = {
    "multiply": (lambda X, w: X * 2.0, True),
    "sum": (lambda X, w: jask.sum(X), False),
    "sum over an axis": (lambda X, w: jask.sum(X, axis=1), False),
    "transpose": (lambda X, w: X.T, True),
    "dot": (lambda X, w: X @ w, True),
    "dot with an in-memory operand": (lambda X, w: X @ jnp.ones((40, 3), jnp.float32), True),
    "slice": (lambda X, w: X[10:2000:2], True),
    "reshape": (lambda X, w: X.reshape((6000, 20)), True),
    "concatenate": (lambda X, w: jask.concatenate([X, X]), True),
    "update_": (lambda X, w: w.update_(w * 3.0), False),
    "slice as a view": (lambda X, w: X[10:2000, 3:9], True),
    "reshape as a view": (lambda X, w: X.reshape((3000, 1, 40)), True),
}
VIEWS = ("transpose", "slice as a view", "reshape as a view")


@pytest.mark.parametrize("name", list(OPS))
def test_visualize_shows_the_plan_the_op_runs_with(name, small_budget, rng, runs):
    X, w = _data(rng)
    f, writes_tiles = OPS[name]
    plan = jask.visualize(f, X, w)
    step = plan.steps[-1]
    assert step.tile is not None, step.note
    runs.clear()
    result = jax.block_until_ready(f(X, w))  # an eager op's store is computed when read
    if name in VIEWS:  # a view of X: no task, nothing held (jask.store.views)
        assert not runs and step.held == 0 and tuple(result.chunks) == step.tile
        return
    assert runs, "the op ran no graph"
    # the op's last graph ran with the cost visualize showed
    assert runs[-1].total == step.held
    if writes_tiles:  # a new store chunked by the planned tile
        assert tuple(result.chunks) == tuple(step.tile[-len(result.chunks):])


def test_visualize_asks_the_primitive(small_budget, rng, monkeypatch):
    """No guessing from params: a primitive's plan is what visualize shows."""
    X, w = _data(rng)
    real = P.Transpose.plan
    asked = []

    def plan(self, stores, config=None):
        asked.append(self)
        return real(self, stores, config)

    monkeypatch.setattr(P.Transpose, "plan", plan)
    (step,) = jask.visualize(lambda X: X.T, X).steps
    assert len(asked) == 1 and step.tile is not None


def test_a_jitted_grad_lists_the_plans_of_its_ops(small_budget, rng):
    X, w = _data(rng)
    y = jask.from_numpy(rng.standard_normal((3000, 5)).astype(np.float32))
    plan = jask.visualize(jax.jit(jax.grad(lambda w: jask.sum(jask.square(X @ w - y)))), w)
    assert all(s.tile is not None and s.held <= small_budget.max_memory for s in plan.steps)
