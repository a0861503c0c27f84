"""One table of ops under test (as optax's ``_OPTIMIZERS_UNDER_TEST``).

Each :class:`Case` names a jask function, its numpy reference (values) and
its jax.numpy reference (gradients), and the operands to call them with.
An operand is a spec: ``disk(shape)`` a DiskArray, ``mem(shape)`` an
in-memory jax.Array, ``scalar(value)`` a (traced) scalar. Adding an op to
jask means adding rows here; the tests in ``test_table.py`` check values,
gradients in every mode, and random compositions from the rows.
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
    tags: tuple = field(default=())

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


def _binary(name, numpy=None, jnp_fn=None, domain="real", layouts=tuple(LAYOUTS)):
    return [Case(f"{name}[{layout}]", getattr(jask, name), numpy or getattr(np, name),
                 jnp_fn or getattr(jnp, name), LAYOUTS[layout], domain) for layout in layouts]


def _unary(name, numpy=None, jnp_fn=None, domain="real", fn=None):
    return Case(name, fn or getattr(jask, name), numpy or getattr(np, name),
                jnp_fn or getattr(jnp, name), (disk(N, M),), domain)


def _reductions(name, numpy=None, jnp_fn=None):
    out = []
    for axis, keepdims in [(None, False), (0, False), (1, True), ((0, 1), False)]:
        kw = dict(axis=axis, keepdims=keepdims)
        out.append(Case(f"{name}[axis={axis},keepdims={keepdims}]",
                        lambda x, kw=kw, f=getattr(jask, name): f(x, **kw),
                        lambda x, kw=kw, f=numpy or getattr(np, name): f(x, **kw),
                        lambda x, kw=kw, f=jnp_fn or getattr(jnp, name): f(x, **kw),
                        (disk(N, M),)))
    return out


def _np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


OPS = [
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
         (disk(5, 33, 19),)),
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
