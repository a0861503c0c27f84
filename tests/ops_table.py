"""One table of ops under test (as optax's ``_OPTIMIZERS_UNDER_TEST``).

Each :class:`Case` names a jask function, its numpy reference (values) and
its jax.numpy reference (gradients), and the operands to call them with.
An operand is a spec: ``disk(shape)`` a DiskArray, ``mem(shape)`` an
in-memory jax.Array, ``scalar(value)`` a (traced) scalar. Adding an op to
jask means adding rows here; the tests in ``test_table.py`` check values,
gradients in every mode, and random compositions from the rows.

Layouts come in 1-D (``L``), 2-D (``N, M``) and 3-D (``K, P, Q``) shapes
that tiles do not divide. A case with ``exact=True`` must match numpy bit
for bit (data movement: transposes, materialize); one tagged
``"every-mode"`` checks its gradients in all three modes for float64 too.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import expit

import jask

N, M = 97, 61  # odd sizes that tiles do not divide
L = 4001  # a 1-D length tiles do not divide (4 to 7 tiles at 64 KB)
K, P, Q = 7, 41, 23  # a 3-D shape: 7 to 14 tiles at 64 KB


@dataclass(frozen=True)
class Spec:
    kind: str  # "disk", "mem", "scalar", "bool", "int", or complex "cdisk", "cmem", "cscalar"
    shape: tuple = ()
    value: float = 0.0
    low: int = -50  # an "int" operand's values: low <= v < high
    high: int = 50
    dtype: str | None = None  # an "int" operand's dtype (default: int32, int64 under x64)


def disk(*shape):
    return Spec("disk", shape)


def mem(*shape):
    return Spec("mem", shape)


def scalar(value):
    return Spec("scalar", (), value)


def mask(*shape):
    return Spec("bool", shape)


def ints(*shape, low=-50, high=50, dtype=None):
    """An integer DiskArray (int32 with float32 cases, int64 with float64 ones)."""
    return Spec("int", shape, low=low, high=high, dtype=dtype)


@dataclass(frozen=True)
class Case:
    id: str
    jask: Callable
    numpy: Callable
    jnp: Callable
    args: tuple
    domain: str = "real"          # "positive": operands shifted to > 0.5; "unit": in
    # (-0.9, 0.9); "above-one": > 1.5
    grad: tuple | None = None     # argnums to differentiate (default: every float operand)
    tags: tuple = field(default=())  # "every-mode": float64 gradients in all three modes
    exact: bool = False           # values equal numpy's exactly (no tolerance)

    @property
    def argnums(self) -> tuple:
        if self.grad is not None:
            return self.grad
        return tuple(i for i, a in enumerate(self.args) if a.kind in ("disk", "mem", "scalar"))


def op_name(case: Case) -> str:
    return case.id.split("[", 1)[0]


def first_of_each_op(cases: list[Case]) -> list:
    """``cases`` as pytest params, the first case of each op in CI's run and
    the rest marked slow: a table whose every row costs a compile of a
    forward-over-reverse or batched trace keeps one check per op (its rule)
    in the default suite and every layout of it in ``pytest -m slow``."""
    seen: set[str] = set()
    params = []
    for case in cases:
        marks = pytest.mark.slow if op_name(case) in seen else ()
        seen.add(op_name(case))
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


LAYOUTS = {  # operand layouts of binary elementwise ops: numpy broadcasting cases
    "disk-disk": (disk(N, M), disk(N, M)),
    "disk-row": (disk(N, M), mem(M)),
    "column-disk": (disk(N, 1), disk(N, M)),
    "scalar-disk": (scalar(1.3), disk(N, M)),
    "mem-disk": (mem(1, M), disk(N, M)),
}


LAYOUTS_1D = {  # the same five broadcasting cases on vectors (an in-memory one of
    # length L would be over the budget's share for in-memory operands)
    "1d:disk-disk": (disk(L), disk(L)),
    "1d:disk-one": (disk(L), disk(1)),
    "1d:one-disk": (disk(1), disk(L)),
    "1d:scalar-disk": (scalar(1.3), disk(L)),
    "1d:mem-disk": (mem(1), disk(L)),
}

LAYOUTS_3D = {  # and on a 3-D array, broadcast over its middle, last and first axes
    "3d:disk-disk": (disk(K, P, Q), disk(K, P, Q)),
    "3d:disk-middle": (disk(K, P, Q), disk(K, 1, Q)),
    "3d:column-disk": (disk(K, P, 1), disk(K, P, Q)),
    "3d:scalar-disk": (scalar(1.3), disk(K, P, Q)),
    "3d:mem-disk": (mem(P, 1), disk(K, P, Q)),
}


def _binary(name, numpy=None, jnp_fn=None, domain="real", layouts=LAYOUTS):
    return [Case(f"{name}[{layout}]", getattr(jask, name), numpy or getattr(np, name),
                 jnp_fn or getattr(jnp, name), args, domain) for layout, args in layouts.items()]


def _unary(name, numpy=None, jnp_fn=None, domain="real", fn=None, shape=(N, M)):
    label = {1: "[1d]", 2: "", 3: "[3d]"}[len(shape)]
    return Case(name + label, fn or getattr(jask, name), numpy or getattr(np, name),
                jnp_fn or getattr(jnp, name), (disk(*shape),), domain)


AXES_2D = [(None, False), (0, False), (1, True), ((0, 1), False)]
AXES_1D = [(None, False), (0, True), (-1, False)]
AXES_3D = [(None, False), (0, True), (1, True), (2, False), ((0, 2), True), ((1, 2), False)]


def _reductions(name, numpy=None, jnp_fn=None, shape=(N, M), axes=AXES_2D):
    label = {1: "1d,", 2: "", 3: "3d,"}[len(shape)]
    out = []
    for axis, keepdims in axes:
        kw = dict(axis=axis, keepdims=keepdims)
        out.append(Case(f"{name}[{label}axis={axis},keepdims={keepdims}]",
                        lambda x, kw=kw, f=getattr(jask, name): f(x, **kw),
                        lambda x, kw=kw, f=numpy or getattr(np, name): f(x, **kw),
                        lambda x, kw=kw, f=jnp_fn or getattr(jnp, name): f(x, **kw),
                        (disk(*shape),)))
    return out


def _np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


#: Every operator between two arrays, or with a Python or numpy scalar on
#: either side: the same expression runs on DiskArrays, numpy and jax.numpy.
OPERATORS = {
    "a+b": lambda a, b: a + b, "a-b": lambda a, b: a - b, "a*b": lambda a, b: a * b,
    "2.5*a": lambda a: 2.5 * a, "a*2.5": lambda a: a * 2.5,
    "float32(3)*a": lambda a: np.float32(3) * a,
    "a+1.5": lambda a: a + 1.5, "1.5+a": lambda a: 1.5 + a,
    "a-1.5": lambda a: a - 1.5, "1.5-a": lambda a: 1.5 - a, "-a": lambda a: -a,
}


def _operators(label, shape):
    return [Case(f"operators[{name},{label}]", f, f, f,
                 (disk(*shape),) * f.__code__.co_argcount) for name, f in OPERATORS.items()]


def _dot_and_matmul(label, a_shape, b_shape):
    """``jask.dot`` and the ``@`` operator on two DiskArrays, stacked."""
    return Case(f"dot[{label}]", lambda a, b: jask.stack([jask.dot(a, b), a @ b]),
                lambda a, b: np.stack([a @ b, a @ b]), lambda a, b: jnp.stack([a @ b, a @ b]),
                (disk(*a_shape), disk(*b_shape)))


def _transpose(label, shape, axes):
    return Case(f"transpose[{label}]", lambda a: jask.transpose(a, axes=axes),
                lambda a: np.transpose(a, axes), lambda a: jnp.transpose(a, axes),
                (disk(*shape),), exact=True)


#: Elementwise ops, unary ops and reductions on 1-D and 3-D layouts.
LAYOUT_CASES = [
    *[c for name in ("add", "subtract", "multiply", "maximum")
      for c in _binary(name, layouts=LAYOUTS_1D) + _binary(name, layouts=LAYOUTS_3D)],
    *_binary("divide", domain="positive", layouts=LAYOUTS_3D),
    *[_unary(n, shape=s) for n in ("square", "exp") for s in [(L,), (K, P, Q)]],
    _unary("log", domain="positive", shape=(K, P, Q)),
    *[c for name in ("sum", "max") for c in _reductions(name, shape=(L,), axes=AXES_1D)],
    *[c for name in ("sum", "mean", "max", "var") for c in
      _reductions(name, shape=(K, P, Q), axes=AXES_3D)],
    *_reductions("logsumexp", _np_logsumexp, jax.nn.logsumexp, shape=(K, P, Q), axes=AXES_3D),
]

#: Cases that were hand-written tests before the table (test_ops.py, test_grad.py).
FOLDED_CASES = [
    *[c for label, shape in [("1d", (301,)), ("2d", (N, M)), ("3d", (5, 33, 19))]
      for c in _operators(label, shape)],
    _transpose("2d-default", (N, M), None),
    _transpose("1d", (301,), None),
    *[_transpose(str(axes), (5, 33, 19), axes) for axes in [(1, 0, 2), (-1, 1, 0)]],
    Case("transpose[.T]", lambda a: a.T, lambda a: a.T, lambda a: a.T, (disk(N, M),),
         exact=True),
    _dot_and_matmul("wide", (N, M), (M, 43)),
    _dot_and_matmul("batched-3d", (3, 37, 29), (3, 29, 41)),
    _dot_and_matmul("to-column", (257, 3), (3, 1)),
    _dot_and_matmul("row-column", (1, 200), (200, 1)),
    _dot_and_matmul("batched-4d", (2, 2, 17, 9), (2, 2, 9, 13)),
    Case("materialize", jask.materialize, lambda a: a, lambda a: a, (disk(N, M),), exact=True),
    Case("materialize[composed]", lambda a: jnp.sin(jask.materialize(a * 2.0)),
         lambda a: np.sin(a * 2.0), lambda a: jnp.sin(a * 2.0), (disk(N, M),),
         tags=("every-mode",)),
    Case("composed[elementwise]", lambda a, b: jask.square(a - b) * a + b,
         lambda a, b: np.square(a - b) * a + b, lambda a, b: jnp.square(a - b) * a + b,
         (disk(N, M), disk(N, M)), tags=("every-mode",)),
    Case("composed[least-squares]", lambda x, w, y: jask.square(x @ w - y),
         lambda x, w, y: np.square(x @ w - y), lambda x, w, y: jnp.square(x @ w - y),
         (disk(N, 13), disk(13, 3), disk(N, 3)), tags=("every-mode",)),
    Case("composed[batched-dot]", lambda a, b: jask.square(jask.dot(a, b)),
         lambda a, b: np.square(a @ b), lambda a, b: jnp.square(a @ b),
         (disk(3, 17, 11), disk(3, 11, 5)), tags=("every-mode",)),
    Case("composed[transpose]", lambda a, c: jask.transpose(a, (2, 0, 1)) * c,
         lambda a, c: np.transpose(a, (2, 0, 1)) * c, lambda a, c: jnp.transpose(a, (2, 0, 1)) * c,
         (disk(5, 33, 19), disk(19, 5, 33)), tags=("every-mode",)),
    Case("composed[scalar-operands]",  # the scalar of mul (either side), add and sub
         lambda a, s: jask.square(jask.mul(s, a) + s) - s * a + (jask.mul(a, s) - s),
         lambda a, s: np.square(s * a + s) - s * a + (a * s - s),
         lambda a, s: jnp.square(s * a + s) - s * a + (a * s - s),
         (disk(N, M), scalar(1.7)), tags=("every-mode",)),
    Case("composed[rsub-neg]", lambda a: jask.square(2.0 - a) + (-a),
         lambda a: np.square(2.0 - a) + (-a), lambda a: jnp.square(2.0 - a) + (-a),
         (disk(31, 7),), tags=("every-mode",)),
]


OPS = [
    *LAYOUT_CASES, *FOLDED_CASES,
    *_binary("add"), *_binary("subtract"), *_binary("multiply"),
    *_binary("divide", domain="positive"), *_binary("maximum"), *_binary("minimum"),
    Case("power[disk-scalar]", jask.power, np.power, jnp.power, (disk(N, M), scalar(3.0)),
         "positive"),
    Case("power[disk-disk]", jask.power, np.power, jnp.power, (disk(N, M), disk(N, M)),
         "positive"),
    *[_unary(n) for n in ("negative", "square", "exp", "tanh", "abs")],
    *[_unary(n, domain="positive") for n in ("log", "log1p", "sqrt")],
    _unary("sigmoid", expit, jax.nn.sigmoid, fn=jask.nn.sigmoid),
    _unary("relu", lambda a: np.maximum(a, 0), jax.nn.relu, fn=jask.nn.relu),
    _unary("softplus", lambda a: np.logaddexp(a, 0), jax.nn.softplus, fn=jask.nn.softplus),
    Case("clip", jask.clip, np.clip, jnp.clip, (disk(N, M), mem(M), scalar(0.8))),
    Case("where", jask.where, np.where, jnp.where, (mask(N, M), disk(N, M), mem(M))),
    *[Case(f"{n}[disk-row]", getattr(jask, n), getattr(np, n), getattr(jnp, n),
           (disk(N, M), mem(M)), grad=()) for n in
      ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal")],
    Case("astype", lambda x: jask.astype(x, np.float32), lambda x: x.astype(np.float32),
         lambda x: x.astype(np.float32), (disk(N, M),)),
    Case("operators", lambda a, b: (-a + b * 2.0 - 1.5 / (abs(b) + 1.0)) ** 2 @ b.T,
         lambda a, b: (-a + b * 2.0 - 1.5 / (abs(b) + 1.0)) ** 2 @ b.T,
         lambda a, b: (-a + b * 2.0 - 1.5 / (abs(b) + 1.0)) ** 2 @ b.T,
         (disk(N, M), disk(N, M))),
    *_reductions("sum"), *_reductions("mean"), *_reductions("max"), *_reductions("min"),
    *_reductions("var"), *_reductions("std"),
    *_reductions("logsumexp", _np_logsumexp, jax.nn.logsumexp),
    Case("dot[disk-disk]", jask.dot, np.matmul, jnp.matmul, (disk(N, 13), disk(13, 7))),
    Case("dot[disk-mem]", jask.dot, np.matmul, jnp.matmul, (disk(N, M), mem(M, 3))),
    Case("dot[disk-vector]", jask.dot, np.matmul, jnp.matmul, (disk(N, M), mem(M))),
    Case("dot[mem-disk]", jask.dot, np.matmul, jnp.matmul, (mem(5, N), disk(N, M))),
    Case("dot[vector-disk]", jask.dot, np.matmul, jnp.matmul, (disk(N), disk(N, M))),
    Case("dot[batched]", jask.dot, np.matmul, jnp.matmul, (disk(3, 17, 11), disk(3, 11, 5))),
    Case("transpose", lambda a: jask.transpose(a, (2, 0, 1)),
         lambda a: np.transpose(a, (2, 0, 1)), lambda a: jnp.transpose(a, (2, 0, 1)),
         (disk(5, 33, 19),), exact=True),
    *[Case(f"getitem[{label}]", lambda a, i=index: a[i], lambda a, i=index: a[i],
           lambda a, i=index: a[i], (disk(N, M),)) for label, index in [
        ("rows", np.s_[10:41]), ("strided", np.s_[3:90:4, 5::3]), ("row", np.s_[-2]),
        ("column", np.s_[:, 7]), ("ellipsis", np.s_[..., -5:])]],
    Case("reshape[merge]", lambda a: a.reshape(5 * 33, 19), lambda a: a.reshape(5 * 33, 19),
         lambda a: a.reshape(5 * 33, 19), (disk(5, 33, 19),)),
    Case("reshape[split]", lambda a: jask.reshape(a, (-1, 4, 5)),
         lambda a: np.reshape(a, (-1, 4, 5)), lambda a: jnp.reshape(a, (-1, 4, 5)),
         (disk(99, 20),)),
    Case("concatenate", lambda a, b: jask.concatenate([a, b], axis=1),
         lambda a, b: np.concatenate([a, b], axis=1),
         lambda a, b: jnp.concatenate([a, b], axis=1), (disk(N, M), disk(N, 5))),
    Case("stack", lambda a, b: jask.stack([a, b]), lambda a, b: np.stack([a, b]),
         lambda a, b: jnp.stack([a, b]), (disk(N, M), disk(N, M))),
    Case("map", lambda a, b: jask.map(lambda x, y: jnp.sin(x) * y, a, b),
         lambda a, b: np.sin(a) * b, lambda a, b: jnp.sin(a) * b, (disk(N, M), mem(M))),
]

# --- arctan, argmax / argmin, cumsum (one block, kept at the end of the cases) ---------

def _arg_cases(name):
    """argmax/argmin: axes and keepdims, ties (int32 and bool values: the
    first occurrence wins) and NaNs (the first NaN wins); not differentiable."""
    f, nf, jf = getattr(jask, name), getattr(np, name), getattr(jnp, name)
    cases = [Case(f"{name}[axis={axis},keepdims={keepdims}]",
                  lambda x, kw=dict(axis=axis, keepdims=keepdims): f(x, **kw),
                  lambda x, kw=dict(axis=axis, keepdims=keepdims): nf(x, **kw),
                  lambda x, kw=dict(axis=axis, keepdims=keepdims): jf(x, **kw),
                  (disk(N, M),), grad=())
             for axis, keepdims in [(None, False), (0, False), (1, True), (None, True)]]
    return cases + [
        Case(f"{name}[int32-ties,axis=0]", lambda x: f(jask.astype(x * 2.0, np.int32), axis=0),
             lambda x: nf((x * 2).astype(np.int32), axis=0),
             lambda x: jf((x * 2).astype(jnp.int32), axis=0), (disk(N, M),), grad=()),
        Case(f"{name}[bool-ties,axis=1]", lambda m: f(m, axis=1), lambda m: nf(m, axis=1),
             lambda m: jf(m, axis=1), (mask(N, M),), grad=()),
        Case(f"{name}[nan,axis=None]", lambda x: f(jask.where(x > 1.5, np.nan, x)),
             lambda x: nf(np.where(x > 1.5, np.nan, x)),
             lambda x: jf(jnp.where(x > 1.5, jnp.nan, x)), (disk(N, M),), grad=()),
        Case(f"{name}[nan,axis=0]", lambda x: f(jask.where(x > 1.5, np.nan, x), axis=0),
             lambda x: nf(np.where(x > 1.5, np.nan, x), axis=0),
             lambda x: jf(jnp.where(x > 1.5, jnp.nan, x), axis=0), (disk(N, M),), grad=()),
    ]


def _np_cumsum(x, axis=None):
    """numpy's cumsum, floats summed in float64 (numpy's float32 running sum
    drifts further from the exact one than jask's tiles do)."""
    return np.cumsum(x, axis=axis, dtype=np.float64 if x.dtype.kind == "f" else None)


def _cumsum_cases():
    """cumsum along each axis and flattened (values and gradients: the
    reverse cumsum of the cotangent), and of int32 and bool inputs."""
    return [
        *[Case(f"cumsum[axis={axis}]", lambda x, a=axis: jask.cumsum(x, axis=a),
               lambda x, a=axis: _np_cumsum(x, a), lambda x, a=axis: jnp.cumsum(x, axis=a),
               (disk(N, M),)) for axis in (0, 1, None, -1)],
        Case("cumsum[tiles-across,axis=1]", lambda x: jask.cumsum(x, axis=1),
             lambda x: _np_cumsum(x, 1), lambda x: jnp.cumsum(x, axis=1), (disk(53, 401),)),
        Case("cumsum[int32,axis=0]", lambda x: jask.cumsum(jask.astype(x * 3.0, np.int32), 0),
             lambda x: np.cumsum((x * 3).astype(np.int32), 0),
             lambda x: jnp.cumsum((x * 3).astype(jnp.int32), 0), (disk(N, M),), grad=()),
        Case("cumsum[bool,axis=None]", jask.cumsum, np.cumsum, jnp.cumsum, (mask(N, M),),
             grad=()),
        Case("cumsum[bool,axis=1]", lambda m: jask.cumsum(m, axis=1),
             lambda m: np.cumsum(m, axis=1), lambda m: jnp.cumsum(m, axis=1), (mask(N, M),),
             grad=()),
    ]


OPS += [
    _unary("arctan"),
    *_arg_cases("argmax"), *_arg_cases("argmin"),
    *_cumsum_cases(),
]

# --- issue 18: prod, all, any, count_nonzero, matrix_transpose, sort, scans, search, products ---

def _near_one(x):  # products of many factors stay in range
    return x * 0.1 + 1.0


def _with_zeros(x, where=jask.where):  # lanes with no zero, one zero, several
    return where(x > 2.0, 0.0, _near_one(x))


def _np_prod(x, axis=None):
    return np.prod(x.astype(np.float64), axis=axis).astype(x.dtype)


def _issue18_cases():
    return [
        Case("prod[axis=None]", lambda x: jask.prod(_near_one(x)),
             lambda x: _np_prod(_near_one(x)), lambda x: jnp.prod(_near_one(x)),
             (disk(N, M),), grad=()),
        Case("prod[zeros,axis=1,keepdims]", lambda x: jask.prod(_with_zeros(x), 1, True),
             lambda x: np.prod(_with_zeros(x, np.where), 1, keepdims=True),
             # (jitted: jax.grad of an eager jnp.prod took 10 s to compile here)
             jax.jit(lambda x: jnp.prod(_with_zeros(x, jnp.where), 1, keepdims=True)),
             (disk(N, M),)),
        Case("prod[int32,axis=0]", lambda x: jask.prod(jask.astype(x * 2.0, np.int32), 0),
             lambda x: np.prod((x * 2).astype(np.int32), 0, dtype=np.int32),
             lambda x: jnp.prod((x * 2).astype(jnp.int32), 0), (disk(N, M),), grad=()),
        Case("all[axis=0]", lambda x: jask.all(x > -2.5, axis=0),
             lambda x: np.all(x > -2.5, axis=0), lambda x: jnp.all(x > -2.5, axis=0),
             (disk(N, M),), grad=()),
        Case("any[bool,axis=1,keepdims]", lambda m: jask.any(m, axis=1, keepdims=True),
             lambda m: np.any(m, axis=1, keepdims=True),
             lambda m: jnp.any(m, axis=1, keepdims=True), (mask(N, M),), grad=()),
        Case("count_nonzero[axis=0]", lambda x: jask.count_nonzero(_with_zeros(x), axis=0),
             lambda x: np.count_nonzero(_with_zeros(x, np.where), axis=0),
             lambda x: jnp.count_nonzero(_with_zeros(x, jnp.where), axis=0),
             (disk(N, M),), grad=()),
        Case("matrix_transpose[.mT,3d]", lambda a: a.mT, lambda a: np.swapaxes(a, -1, -2),
             jnp.matrix_transpose, (disk(5, 33, 19),), grad=(), exact=True),
    ]


def _nan_above(x, where):
    return where(x > 1.0, np.nan, x)


def _sort_cases():
    """sort and argsort: gradients (a gather by the order) and, exactly as
    jax.numpy, ties (int32 values) and NaNs, ascending and descending."""
    ties = lambda x: jask.astype(x * 2.0, np.int32)  # noqa: E731
    return [
        Case("sort[axis=0]", lambda x: jask.sort(x, axis=0), lambda x: np.sort(x, axis=0),
             lambda x: jnp.sort(x, axis=0), (disk(N, M),)),
        Case("sort[axis=None,descending]", lambda x: jask.sort(x, axis=None, descending=True),
             lambda x: np.sort(x, axis=None)[::-1],
             lambda x: jnp.sort(x, axis=None, descending=True), (disk(37, 23),), grad=()),
        Case("sort[nan,axis=1,descending]",
             lambda x: jask.sort(_nan_above(x, jask.where), axis=1, descending=True),
             lambda x: np.flip(np.sort(_nan_above(x, np.where), axis=1), 1),
             lambda x: jnp.sort(_nan_above(x, jnp.where), axis=1, descending=True),
             (disk(N, M),), grad=(), exact=True),
        Case("argsort[int32-ties,axis=1,descending]",
             lambda x: jask.argsort(ties(x), axis=1, descending=True),
             lambda x: np.asarray(jnp.argsort((x * 2).astype(np.int32), axis=1,
                                              descending=True)),
             lambda x: jnp.argsort((x * 2).astype(jnp.int32), axis=1, descending=True),
             (disk(N, M),), grad=(), exact=True),
        Case("argsort[nan-ties,axis=0]",
             lambda x: jask.argsort(_nan_above(x, jask.where), axis=0),
             lambda x: np.argsort(_nan_above(x, np.where), axis=0, kind="stable"),
             lambda x: jnp.argsort(_nan_above(x, jnp.where), axis=0),
             (disk(N, M),), grad=(), exact=True),
    ]


def _np_cumprod(x, axis=None):
    return np.cumprod(x.astype(np.float64), axis=axis).astype(x.dtype)


def _scan_cases():
    """cumprod (values and gradients, zeros included) and the Array API's
    cumulative_sum / cumulative_prod with include_initial."""
    return [
        Case("cumprod[zeros,axis=0]", lambda x: jask.cumprod(_with_zeros(x), axis=0),
             lambda x: _np_cumprod(_with_zeros(x, np.where), 0),
             lambda x: jnp.cumprod(_with_zeros(x, jnp.where), axis=0), (disk(N, M),),
             tags=("rule",)),
        Case("cumulative_sum[axis=1,include_initial]",
             lambda x: jask.cumulative_sum(x, axis=1, include_initial=True),
             lambda x: np.concatenate([np.zeros((N, 1), x.dtype), _np_cumsum(x, 1)], 1),
             lambda x: jnp.cumulative_sum(x, axis=1, include_initial=True), (disk(N, M),),
             grad=()),
        Case("cumulative_prod[1d,include_initial]",
             lambda x: jask.cumulative_prod(_near_one(x), include_initial=True),
             lambda x: np.concatenate([np.ones(1, x.dtype), _np_cumprod(_near_one(x))]),
             lambda x: jnp.cumulative_prod(_near_one(x), include_initial=True), (disk(L),),
             grad=()),
    ]


def _search_and_product_cases():
    """searchsorted (ties and NaNs exactly as jax.numpy, either operand on
    disk; a sorted length whose float64 lane sorts within 64 KB), tensordot
    and vecdot (values and gradients)."""
    def ints(x, astype):
        return astype(x * 2.0, np.int32)

    return [
        Case("searchsorted[disk-disk,int32-ties,right]",
             lambda a, v: jask.searchsorted(jask.sort(ints(a, jask.astype)),
                                            ints(v, jask.astype), side="right"),
             lambda a, v: np.searchsorted(np.sort((a * 2).astype(np.int32)),
                                          (v * 2).astype(np.int32), side="right"),
             lambda a, v: jnp.searchsorted(jnp.sort((a * 2).astype(jnp.int32)),
                                           (v * 2).astype(jnp.int32), side="right"),
             (disk(1201), disk(N, M)), grad=(), exact=True),
        Case("searchsorted[disk-mem,nan,left]",
             lambda a, v: jask.searchsorted(jask.sort(_nan_above(a, jask.where)), v),
             lambda a, v: np.searchsorted(np.sort(_nan_above(a, np.where)), v),
             lambda a, v: jnp.searchsorted(jnp.sort(_nan_above(a, jnp.where)), v),
             (disk(1201), mem(5, 7)), grad=(), exact=True),
        Case("tensordot[axes=pairs]",
             lambda a, b: jask.tensordot(a, b, axes=([0, 2], [2, 0])),
             lambda a, b: np.tensordot(a, b, axes=([0, 2], [2, 0])),
             lambda a, b: jnp.tensordot(a, b, axes=([0, 2], [2, 0])),
             (disk(K, P, Q), disk(Q, 3, K)), grad=()),
        Case("tensordot[axes=1,disk-mem]", lambda a, b: jask.tensordot(a, b, axes=1),
             lambda a, b: np.tensordot(a, b, axes=1), lambda a, b: jnp.tensordot(a, b, axes=1),
             (disk(K, P, Q), mem(Q, 5)), tags=("rule",)),
        Case("vecdot[disk-row]", jask.vecdot, lambda a, b: np.sum(a * b, axis=-1), jnp.vecdot,
             (disk(N, M), mem(M)), tags=("rule",)),
        Case("vecdot[disk-disk,axis=0]", lambda a, b: jask.vecdot(a, b, axis=0),
             lambda a, b: np.sum(a * b, axis=0), lambda a, b: jnp.vecdot(a, b, axis=0),
             (disk(N, M), disk(N, M)), grad=()),
    ]


OPS += _issue18_cases()
OPS += _sort_cases()
OPS += _scan_cases()
OPS += _search_and_product_cases()


# --- the rest of the Array API's elementwise functions: one cheap layout each ---------

def _jnp_values(f):
    """jax.numpy itself as the value reference, where numpy's answer differs by
    design (an integer divided by 0, a shift by the width or more, -0.0)."""
    return lambda *a: np.asarray(f(*a))


def _quiet(f):
    def run(*a):
        with np.errstate(all="ignore"):
            return f(*a)
    return run


def _int_binary(name, a=None, b=None, numpy=None):
    f = getattr(jnp, name)
    return Case(f"{name}[int-int]", getattr(jask, name), numpy or _jnp_values(f), f,
                (a or ints(N, M), b or ints(N, M)))


ELEMENTWISE_CASES = [
    *[_unary(n) for n in ("sin", "cos", "sinh", "cosh", "arcsinh", "expm1", "positive",
                          "conj", "real", "imag", "angle", "floor", "ceil", "trunc",
                          "round")],
    _unary("sign"),
    *[_unary(n, domain="unit") for n in ("tan", "arcsin", "arccos", "arctanh")],
    _unary("arccosh", domain="above-one"),
    *[_unary(n, domain="positive") for n in ("log2", "log10", "reciprocal")],
    *[c for n in ("arctan2", "hypot", "logaddexp", "copysign", "remainder")
      for c in _binary(n, layouts={k: LAYOUTS[k] for k in ("disk-disk", "scalar-disk")})],
    Case("floor_divide[disk-disk]", jask.floor_divide, np.floor_divide, jnp.floor_divide,
         (disk(N, M), disk(N, M))),
    Case("nextafter[disk-scalar]", jask.nextafter, np.nextafter, jnp.nextafter,
         (disk(N, M), scalar(1.3)), grad=()),
    # predicates: x / floor(x) is inf (x in (0, 1)) or nan (x in [0, 1)), log(x < 0) nan
    *[Case(f"{n}[inf-nan]", lambda x, f=getattr(jask, n): f(x / jask.floor(x)),
           _quiet(lambda x, f=getattr(np, n): f(x / np.floor(x))),
           lambda x, f=getattr(jnp, n): f(x / jnp.floor(x)), (disk(N, M),), grad=())
      for n in ("isfinite", "isinf", "isnan")],
    Case("signbit", jask.signbit, np.signbit, jnp.signbit, (disk(N, M),), grad=()),
    # integers and bools (no gradients): jax.numpy's results where numpy's differ
    Case("sign[int]", jask.sign, np.sign, jnp.sign, (ints(N, M, low=-2, high=3),)),
    Case("floor[int]", jask.floor, lambda a: a, jnp.floor, (ints(N, M),)),
    Case("isnan[int]", jask.isnan, np.isnan, jnp.isnan, (ints(N, M),)),
    Case("invert[int]", jask.invert, np.invert, jnp.invert, (ints(N, M),)),
    Case("invert[bool]", jask.invert, np.invert, jnp.invert, (mask(N, M),)),
    Case("logical_not[bool]", jask.logical_not, np.logical_not, jnp.logical_not, (mask(N, M),)),
    Case("logical_and[bool-bool]", jask.logical_and, np.logical_and, jnp.logical_and,
         (mask(N, M), mask(N, M))),
    Case("logical_or[bool-int]", jask.logical_or, np.logical_or, jnp.logical_or,
         (mask(N, M), ints(N, M, low=-1, high=2))),
    Case("logical_xor[int-bool]", jask.logical_xor, np.logical_xor, jnp.logical_xor,
         (ints(N, M, low=-1, high=2), mask(N, M))),
    *[_int_binary(n, numpy=getattr(np, n)) for n in ("bitwise_and", "bitwise_or",
                                                      "bitwise_xor")],
    Case("bitwise_xor[bool-bool]", jask.bitwise_xor, np.bitwise_xor, jnp.bitwise_xor,
         (mask(N, M), mask(N, M))),
    # shifts by -3 .. 69: beyond every width, and negative
    _int_binary("left_shift", b=ints(N, M, low=-3, high=70)),
    _int_binary("right_shift", b=ints(N, M, low=-3, high=70)),
    Case("right_shift[uint32]", jask.right_shift, _jnp_values(jnp.right_shift), jnp.right_shift,
         (ints(N, M, low=0, high=2**32 - 1, dtype=np.uint32),
          ints(N, M, low=0, high=40, dtype=np.uint32))),
    # divisors -4 .. 4, zero included
    _int_binary("floor_divide", b=ints(N, M, low=-4, high=5)),
    _int_binary("remainder", b=ints(N, M, low=-4, high=5)),
    Case("power[int-int]", jask.power, _jnp_values(jnp.power), jnp.power,
         (ints(N, M, low=-5, high=6), ints(N, M, low=-2, high=12))),
    Case("operators[int]",
         lambda a, b: ((a & b) | (a ^ 3)) + ~a + (a << 2) + (b >> 1) + a // b + a % b
         + 7 // b + 5 % b + (3 & a) + (1 << b) - (a | 8) + (-9 ^ b),
         lambda a, b: ((a & b) | (a ^ 3)) + ~a + (a << 2) + (b >> 1) + a // b + a % b
         + 7 // b + 5 % b + (3 & a) + (1 << b) - (a | 8) + (-9 ^ b),
         lambda a, b: ((a & b) | (a ^ 3)) + ~a + (a << 2) + (b >> 1) + a // b + a % b
         + 7 // b + 5 % b + (3 & a) + (1 << b) - (a | 8) + (-9 ^ b),
         (ints(N, M), ints(N, M, low=1, high=10))),
    Case("operators[bool]", lambda m, n: (m & n) | (~m ^ n) | (m & True),
         lambda m, n: (m & n) | (~m ^ n) | (m & True),
         lambda m, n: (m & n) | (~m ^ n) | (m & True), (mask(N, M), mask(N, M))),
    Case("operators[float-floordiv-mod]", lambda a, b: a // b + a % b + 2.5 // b - 1.5 % a,
         lambda a, b: a // b + a % b + 2.5 // b - 1.5 % a,
         lambda a, b: a // b + a % b + 2.5 // b - 1.5 % a, (disk(N, M), disk(N, M)), grad=()),
]
# their gradients: each rule once (the "rule" tag), one case per row
ELEMENTWISE_CASES = [
    c if not c.argnums else replace(c, tags=c.tags + ("rule",)) if c.id.split("[")[0] in (
        "sin", "cos", "sinh", "cosh", "arcsinh", "expm1", "floor", "real", "tan", "arcsin",
        "arccos", "arctanh", "arccosh", "log2", "log10", "reciprocal") or "[disk-disk]" in c.id
    else replace(c, grad=()) for c in ELEMENTWISE_CASES]
OPS += ELEMENTWISE_CASES


# --- manipulation and indexing (jask.api.manipulation, jask.api.indexing) ----------------

# int32 indices: jax.numpy caches its programs across x64 modes by the
# indices' values, and an int64 array then reaches an int32 program
_TAKE = np.array([5, -1, 0, 5, 96, 40, -97], np.int32)  # repeats, negatives, both ends
_ALONG = np.random.default_rng(1).integers(-M, M, (N, 4), dtype=np.int32)  # 4 picks a row
_MASK = np.random.default_rng(2).standard_normal((N, M)) > 0.3
_REPEATS = np.arange(M) % 3  # zeros and repeats per column


def _manipulation_cases():
    """One layout per function (odd shapes, many tiles at 64 KB): values
    exactly as numpy's, dtypes as jax.numpy's; gradients in every mode for
    one row per kind of VJP (a gather by a permutation: flip; a
    scatter-add: take; an elementwise copy summed back: squeeze; a 0-d
    value: getitem[int,int]); tests/test_manipulation.py checks the other
    rows' gradients in one mode (the suite's time budget)."""
    return [
        Case("flip[axis=1]", lambda a: jask.flip(a, axis=1), lambda a: np.flip(a, 1),
             lambda a: jnp.flip(a, 1), (disk(N, M),), exact=True),
        Case("roll[(3,-70),(0,1)]", lambda a: jask.roll(a, (3, -70), (0, 1)),
             lambda a: np.roll(a, (3, -70), (0, 1)), lambda a: jnp.roll(a, (3, -70), (0, 1)),
             (disk(N, M),), exact=True, grad=()),
        Case("moveaxis[0,-1]", lambda a: jask.moveaxis(a, 0, -1),
             lambda a: np.moveaxis(a, 0, -1), lambda a: jnp.moveaxis(a, 0, -1),
             (disk(K, P, Q),), exact=True, grad=()),
        Case("expand_dims[(0,2)]", lambda a: jask.expand_dims(a, (0, 2)),
             lambda a: np.expand_dims(a, (0, 2)), lambda a: jnp.expand_dims(a, (0, 2)),
             (disk(N, M),), exact=True, grad=()),
        Case("squeeze", jask.squeeze, np.squeeze, jnp.squeeze, (disk(N, 1, M),), exact=True),
        Case("broadcast_arrays[column-row]",
             lambda a, b: jask.stack(jask.broadcast_arrays(a, b)),
             lambda a, b: np.stack(np.broadcast_arrays(a, b)),
             lambda a, b: jnp.stack(jnp.broadcast_arrays(a, b)), (disk(N, 1), mem(M)),
             exact=True, grad=()),
        Case("broadcast_to", lambda a: jask.broadcast_to(a, (3, N, M)),
             lambda a: np.broadcast_to(a, (3, N, M)), lambda a: jnp.broadcast_to(a, (3, N, M)),
             (disk(N, M),), exact=True, grad=()),
        Case("repeat[per-column,axis=1]", lambda a: jask.repeat(a, _REPEATS, axis=1),
             lambda a: np.repeat(a, _REPEATS, axis=1),
             lambda a: jnp.repeat(a, _REPEATS, axis=1), (disk(N, M),), exact=True, grad=()),
        Case("tile[(2,1,3)]", lambda a: jask.tile(a, (2, 1, 3)), lambda a: np.tile(a, (2, 1, 3)),
             lambda a: jnp.tile(a, (2, 1, 3)), (disk(N, M),), exact=True, grad=()),
        Case("unstack[axis=1]", lambda a: jask.stack(jask.unstack(a, axis=1)[::2]),
             lambda a: np.stack([a[:, i] for i in range(0, a.shape[1], 2)]),
             lambda a: jnp.stack(jnp.unstack(a, axis=1)[::2]), (disk(31, 5),), exact=True, grad=()),
        Case("concat[axis=None]", lambda a, b: jask.concat([a, b], axis=None),
             lambda a, b: np.concatenate([a, b], axis=None),
             lambda a, b: jnp.concat([a.ravel(), b.ravel()]), (disk(N, M), disk(5, 3)),
             exact=True, grad=()),
        Case("stack[11-arrays]", lambda *a: jask.stack(a), lambda *a: np.stack(a),
             lambda *a: jnp.stack(a), (disk(N, M),) * 11, grad=(), exact=True),
        Case("diff[n=2,axis=0,prepend]", lambda a, p: jask.diff(a, 2, 0, prepend=p),
             lambda a, p: np.diff(a, 2, 0, prepend=p),
             lambda a, p: jnp.diff(a, 2, 0, prepend=p), (disk(N, M), mem(1, M)), grad=()),
        Case("take[axis=0]", lambda a: jask.take(a, _TAKE, axis=0),
             lambda a: np.take(a, _TAKE, axis=0), lambda a: jnp.take(a, _TAKE, axis=0),
             (disk(N, M),), exact=True),
        Case("take_along_axis[axis=1]", lambda a: jask.take_along_axis(a, _ALONG, axis=1),
             lambda a: np.take_along_axis(a, _ALONG, axis=1),
             lambda a: jnp.take_along_axis(a, _ALONG, axis=1), (disk(N, M),), exact=True, grad=()),
        Case("getitem[int,int]", lambda a: a[3, -4], lambda a: a[3, -4], lambda a: a[3, -4],
             (disk(N, M),), exact=True),
        Case("getitem[mask]", lambda a: a[_MASK], lambda a: a[_MASK], lambda a: a[_MASK],
             (disk(N, M),), exact=True, grad=()),
    ]


OPS += _manipulation_cases()

BY_ID = {case.id: case for case in OPS}
assert len(BY_ID) == len(OPS), "case ids must be unique"


# --- complex operands (complex64 beside float32 cases, complex128 beside float64) -------
# Values only: derivatives through complex values are refused (tests/test_complex.py).
# Rows run grouped by family (tests/test_table.py::test_complex_values_match_jax), one
# test per family, dtype and sample (each op's first row, or the others), not per row.

def cdisk(*shape):
    """A complex DiskArray (complex64 with float32 cases, complex128 with float64)."""
    return Spec("cdisk", shape)


def cmem(*shape):
    """A complex in-memory jax.Array."""
    return Spec("cmem", shape)


def cscalar(value):
    """A complex numpy scalar of the case's complex type."""
    return Spec("cscalar", (), value)


CN, CM = 37, 29  # complex64 37 x 29: 8.4 KB, several tiles at 64 KB once operands add up

#: the rows the Array API standard defines for complex operands, each on a complex DiskArray
COMPLEX_UNARY = ("negative", "positive", "square", "exp", "expm1", "log", "log1p", "log2",
                 "log10", "sqrt", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh",
                 "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "reciprocal", "conj", "real",
                 "imag", "abs", "angle", "sign", "round", "isfinite", "isinf", "isnan",
                 "logical_not")


def _complex_binary(name, layouts):
    return [Case(f"complex:{name}[{label}]", getattr(jask, name), getattr(np, name),
                 getattr(jnp, name), args, grad=()) for label, args in layouts.items()]


_C_LAYOUTS = {
    "cdisk-cdisk": (cdisk(CN, CM), cdisk(CN, CM)),
    "cdisk-real-row": (cdisk(CN, CM), mem(CM)),        # complex with real: complex
    "real-disk-cscalar": (disk(CN, CM), cscalar(0.5)),
    "cmem-cdisk": (cmem(1, CM), cdisk(CN, CM)),
}

COMPLEX_OPS = [
    *[Case(f"complex:{n}", getattr(jask, n), getattr(np, n), getattr(jnp, n),
           (cdisk(CN, CM),), grad=()) for n in COMPLEX_UNARY],
    *[c for n in ("add", "subtract", "multiply", "divide", "equal", "not_equal")
      for c in _complex_binary(n, _C_LAYOUTS)],
    *_complex_binary("power", {"cdisk-cdisk": (cdisk(CN, CM), cdisk(CN, CM)),
                               "cdisk-cscalar": (cdisk(CN, CM), cscalar(2.0))}),
    Case("complex:where", jask.where, np.where, jnp.where,
         (mask(CN, CM), cdisk(CN, CM), mem(CM)), grad=()),
    Case("complex:astype", lambda z: jask.astype(z, np.complex64),
         lambda z: z.astype(np.complex64), lambda z: z.astype(jnp.complex64),
         (cdisk(CN, CM),), grad=()),
    Case("complex:operators", lambda a, b: (a + 1.5) * b - 2.0 / (a * 1j + 3.0) + abs(b) ** 2,
         lambda a, b: (a + 1.5) * b - 2.0 / (a * 1j + 3.0) + abs(b) ** 2,
         lambda a, b: (a + 1.5) * b - 2.0 / (a * 1j + 3.0) + abs(b) ** 2,
         (cdisk(CN, CM), cdisk(CN, CM)), grad=()),
    Case("complex:methods", lambda z: jask.stack([z.real, z.imag, z.conj().imag,
                                                  z.conjugate().real]),
         lambda z: np.stack([z.real, z.imag, z.conj().imag, z.conjugate().real]),
         lambda z: jnp.stack([z.real, z.imag, z.conj().imag, z.conjugate().real]),
         (cdisk(CN, CM),), grad=()),
    *[replace(c, id="complex:" + c.id, args=(cdisk(N, M),), grad=())
      for name in ("sum", "mean", "var", "std") for c in _reductions(name)],
    *[replace(c, id="complex:" + c.id, args=(cdisk(K, P, Q),), grad=())
      for c in _reductions("var", shape=(K, P, Q), axes=AXES_3D)],
    *[Case(f"complex:prod[axis={axis}]", lambda x, a=axis: jask.prod(x / 1.5 + 0.5, axis=a),
           lambda x, a=axis: np.prod(x / 1.5 + 0.5, axis=a),
           lambda x, a=axis: jnp.prod(x / 1.5 + 0.5, axis=a), (cdisk(CN, CM),), grad=())
      for axis in (0, 1)],
    Case("complex:dot[cdisk-cdisk]", jask.dot, np.matmul, jnp.matmul,
         (cdisk(N, 13), cdisk(13, 7)), grad=()),
    Case("complex:matmul[cdisk-real-disk]", lambda a, b: a @ b, np.matmul, jnp.matmul,
         (cdisk(N, M), disk(M, 5)), grad=()),
    Case("complex:vecdot[cdisk-cdisk]", jask.vecdot,
         lambda a, b: np.sum(np.conj(a) * b, axis=-1), jnp.vecdot,
         (cdisk(N, M), cdisk(N, M)), grad=()),
    Case("complex:vecdot[cmem-cdisk,axis=0]", lambda a, b: jask.vecdot(a, b, axis=0),
         lambda a, b: np.sum(np.conj(a) * b, axis=0), lambda a, b: jnp.vecdot(a, b, axis=0),
         (cmem(N, 1), cdisk(N, M)), grad=()),
    Case("complex:cumsum[axis=0]", lambda x: jask.cumsum(x, axis=0),
         lambda x: np.cumsum(x, axis=0), lambda x: jnp.cumsum(x, axis=0),
         (cdisk(CN, CM),), grad=()),
    Case("complex:transpose", lambda a: jask.transpose(a), np.transpose, jnp.transpose,
         (cdisk(N, M),), exact=True, grad=()),
]
assert len({c.id for c in COMPLEX_OPS}) == len(COMPLEX_OPS), "case ids must be unique"


def complex_family(case: Case) -> str:
    """The group a complex row is tested in: elementwise, reduction or product."""
    name = op_name(case)[len("complex:"):]
    if name in ("sum", "mean", "var", "std", "prod", "cumsum"):
        return "reduction"
    if name in ("dot", "matmul", "vecdot", "transpose"):
        return "product"
    return "elementwise"


def complex_of(dtype) -> np.dtype:
    """complex64 beside float32, complex128 beside float64."""
    return np.dtype(np.complex64 if np.dtype(dtype) == np.float32 else np.complex128)


def of_argnums(f, args, argnums):
    """``f`` as a function of the arguments at ``argnums`` only, the others
    fixed at ``args``' values (what jax.grad and jax.jvp are handed)."""
    def g(*diff):
        full = list(args)
        for i, d in zip(argnums, diff):
            full[i] = d
        return f(*full)
    return g


def make_inputs(case: Case, dtype, rng):
    """numpy values for a case's operands."""
    values = []
    for spec in case.args:
        if spec.kind == "scalar":
            values.append(dtype(spec.value))
        elif spec.kind == "cscalar":
            values.append(complex_of(dtype).type(complex(spec.value, -0.75)))
        elif spec.kind in ("cdisk", "cmem"):
            values.append((rng.standard_normal(spec.shape)
                           + 1j * rng.standard_normal(spec.shape)).astype(complex_of(dtype)))
        elif spec.kind == "bool":
            values.append(rng.standard_normal(spec.shape) > 0)
        elif spec.kind == "int":
            int_dtype = spec.dtype or (np.int32 if np.dtype(dtype) == np.float32 else np.int64)
            values.append(rng.integers(spec.low, spec.high, spec.shape).astype(int_dtype))
        else:
            v = rng.standard_normal(spec.shape).astype(dtype)
            if case.domain == "positive":
                v = np.abs(v) + 0.5
            elif case.domain == "unit":
                v = (np.tanh(v) * 0.9).astype(dtype)
            elif case.domain == "above-one":
                v = np.abs(v) + 1.5
            values.append(v)
    return values


def as_jask(case: Case, values):
    """The operands as jask expects them: DiskArrays and in-memory JAX values."""
    on_disk = ("disk", "bool", "int", "cdisk")
    return [jask.from_numpy(v) if spec.kind in on_disk else jnp.asarray(v)
            for spec, v in zip(case.args, values)]
