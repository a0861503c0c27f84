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

from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit

import jask

N, M = 97, 61  # odd sizes that tiles do not divide
L = 4001  # a 1-D length tiles do not divide (4 to 7 tiles at 64 KB)
K, P, Q = 7, 41, 23  # a 3-D shape: 7 to 14 tiles at 64 KB


@dataclass(frozen=True)
class Spec:
    kind: str  # "disk", "mem", "scalar" or "bool"
    shape: tuple = ()
    value: float = 0.0


def disk(*shape):
    return Spec("disk", shape)


def mem(*shape):
    return Spec("mem", shape)


def scalar(value):
    return Spec("scalar", (), value)


def mask(*shape):
    return Spec("bool", shape)


@dataclass(frozen=True)
class Case:
    id: str
    jask: Callable
    numpy: Callable
    jnp: Callable
    args: tuple
    domain: str = "real"          # "positive": operands shifted to > 0.5
    grad: tuple | None = None     # argnums to differentiate (default: every float operand)
    tags: tuple = field(default=())  # "every-mode": float64 gradients in all three modes
    exact: bool = False           # values equal numpy's exactly (no tolerance)

    @property
    def argnums(self) -> tuple:
        if self.grad is not None:
            return self.grad
        return tuple(i for i, a in enumerate(self.args) if a.kind in ("disk", "mem", "scalar"))


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


def make_inputs(case: Case, dtype, rng):
    """numpy values for a case's operands."""
    values = []
    for spec in case.args:
        if spec.kind == "scalar":
            values.append(dtype(spec.value))
        elif spec.kind == "bool":
            values.append(rng.standard_normal(spec.shape) > 0)
        else:
            v = rng.standard_normal(spec.shape).astype(dtype)
            if case.domain == "positive":
                v = np.abs(v) + 0.5
            values.append(v)
    return values


def as_jask(case: Case, values):
    """The operands as jask expects them: DiskArrays and in-memory JAX values."""
    return [jask.from_numpy(v) if spec.kind in ("disk", "bool") else jnp.asarray(v)
            for spec, v in zip(case.args, values)]
