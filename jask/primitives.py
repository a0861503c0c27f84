"""One hijax primitive per op: its forward (``expand``) and its VJP side by side.

``expand`` hands the op's disk work (:mod:`jask.work`) to :mod:`jask.dispatch`,
which runs it now or stages it into the compiled program. Backward rules are
written with the same primitives, flagged ``grad=True`` so the stores they
make end in ``.grad``; a cotangent is computed only for inputs that need one.

The small functions at the bottom bind a primitive; :mod:`jask.ops` checks the
user's arguments and calls them.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.experimental.hijax import ShapedArray, VJPHiPrimitive, Zero

from jask import dispatch, work
from jask._jax_internals import wants_cotangent
from jask.array import DiskArrayType
from jask.config import Config


def _accum(accum, make) -> None:
    """Add a cotangent to an input's accumulator, computing it only if wanted."""
    if wants_cotangent(accum):
        accum.accum(make())


def _scalar_aval(dtype) -> ShapedArray:
    return ShapedArray((), np.dtype(dtype))


class DiskPrimitive(VJPHiPrimitive):
    """Base: set the avals and hashable params, then let hijax check them."""

    def __init__(self, in_avals, out_aval, **params):
        self.in_avals = tuple(in_avals)
        self.out_aval = out_aval
        self.params = params
        super().__init__()

    def vjp_fwd(self, nzs_in, *args):
        return self(*args), args

    def vjp_bwd(self, res, g, *accums):
        if isinstance(g, Zero):  # nothing flows back
            return
        self.backward(res, g, *accums)

    def backward(self, res, g, *accums):
        """Add each input's cotangent to its accumulator (see :func:`_accum`)."""
        raise NotImplementedError(f"{type(self).__name__} is not differentiable")

    def batch_dim_rule(self, axis_data, dims):
        raise NotImplementedError(
            "jax.vmap over DiskArrays is not supported: jask ops work on whole arrays; "
            "use a leading batch axis with jask.dot, or a Python loop")

    @property
    def _in(self):
        return self.in_avals[0]

    # Equal primitives must agree on types too, not only on params.
    def __hash__(self):
        return hash((type(self), self.in_avals, self.out_aval, tuple(self.params.items())))

    def __eq__(self, other):
        return (type(self) is type(other) and self.in_avals == other.in_avals
                and self.out_aval == other.out_aval and self.params == other.params)


# --- elementwise -------------------------------------------------------------

class Binary(DiskPrimitive):
    """a + b, a - b or a * b, elementwise (``kernel``: add, sub, mul)."""

    def __init__(self, kernel: str, aval: DiskArrayType, grad: bool, config: Config | None):
        super().__init__((aval, aval), aval, kernel=kernel, grad=grad, config=config)

    def expand(self, a, b):
        return dispatch.to_store(work.elementwise(self.kernel, grad=self.grad),
                                 [a, b], [], self.out_aval, self.config)

    def backward(self, res, g, ca, cb):
        a, b = res
        cfg = self.config
        if self.kernel == "add":
            _accum(ca, lambda: g)
            _accum(cb, lambda: g)
        elif self.kernel == "sub":
            _accum(ca, lambda: g)
            _accum(cb, lambda: scalar_op("scale", g, -1, config=cfg, grad=True))
        else:  # mul
            _accum(ca, lambda: mul(g, b, config=cfg, grad=True))
            _accum(cb, lambda: mul(g, a, config=cfg, grad=True))


class Square(DiskPrimitive):
    """a ** 2."""

    def __init__(self, aval: DiskArrayType, grad: bool, config: Config | None):
        super().__init__((aval,), aval, grad=grad, config=config)

    def expand(self, a):
        return dispatch.to_store(work.elementwise("square", grad=self.grad), [a], [],
                                 self.out_aval, self.config)

    def backward(self, res, g, ca):
        (a,) = res
        _accum(ca, lambda: SquareVJP(self.out_aval, self.config)(a, g))


class SquareVJP(DiskPrimitive):
    """2 * a * g: the cotangent of a square, in one pass."""

    def __init__(self, aval: DiskArrayType, config: Config | None):
        super().__init__((aval, aval), aval, config=config)

    def expand(self, a, g):
        return dispatch.to_store(work.elementwise("square_vjp", grad=True),
                                 [a, g], [], self.out_aval, self.config)

    def backward(self, res, h, ca, cg):
        a, g = res
        _accum(ca, lambda: scalar_op("scale", mul(h, g, config=self.config, grad=True), 2,
                                     config=self.config, grad=True))
        _accum(cg, lambda: scalar_op("scale", mul(h, a, config=self.config, grad=True), 2,
                                     config=self.config, grad=True))


class ScalarOp(DiskPrimitive):
    """An array with a scalar: ``scale`` a*s, ``shift`` a+s, ``rsub`` s-a."""

    def __init__(self, kernel: str, aval: DiskArrayType, grad: bool, config: Config | None):
        super().__init__((aval, _scalar_aval(aval.dtype)), aval, kernel=kernel, grad=grad,
                         config=config)

    def expand(self, a, s):
        return dispatch.to_store(work.elementwise(self.kernel, grad=self.grad),
                                 [a], [s], self.out_aval, self.config)

    def backward(self, res, g, ca, cs):
        a, s = res
        cfg = self.config
        if self.kernel == "scale":
            _accum(ca, lambda: scalar_op("scale", g, s, config=cfg, grad=True))
            _accum(cs, lambda: vdot(g, a, config=cfg))
        elif self.kernel == "shift":
            _accum(ca, lambda: g)
            _accum(cs, lambda: total(g, config=cfg))
        else:  # rsub
            _accum(ca, lambda: scalar_op("scale", g, -1, config=cfg, grad=True))
            _accum(cs, lambda: total(g, config=cfg))


class Fill(DiskPrimitive):
    """An array of ``aval`` with every element ``s`` (seeds a sum's cotangent)."""

    def __init__(self, aval: DiskArrayType, grad: bool, config: Config | None):
        super().__init__((_scalar_aval(aval.dtype),), aval, grad=grad, config=config)

    def expand(self, s):
        aval = self.out_aval
        return dispatch.to_store(work.fill(aval.shape, aval.dtype, grad=self.grad), [], [s],
                                 aval, self.config)

    def backward(self, res, g, cs):
        _accum(cs, lambda: total(g, config=self.config))


# --- layout ------------------------------------------------------------------

class Transpose(DiskPrimitive):
    """Axes permuted by ``axes``."""

    def __init__(self, aval: DiskArrayType, axes: tuple, grad: bool, config: Config | None):
        out = DiskArrayType(tuple(aval.shape[i] for i in axes), aval.dtype)
        super().__init__((aval,), out, axes=tuple(axes), grad=grad, config=config)

    def expand(self, a):
        return dispatch.to_store(work.transpose(self.axes, grad=self.grad), [a], [],
                                 self.out_aval, self.config)

    def backward(self, res, g, ca):
        inverse = tuple(int(i) for i in np.argsort(self.axes))
        _accum(ca, lambda: transpose(g, inverse, config=self.config, grad=True))


class Update(DiskPrimitive):
    """target.update_(new): new's data written into target's own store.

    Never dead-code eliminated: its effect is the point, even when the
    returned value is unused.
    """

    def __init__(self, aval: DiskArrayType, config: Config | None):
        super().__init__((aval, aval), aval, config=config)

    def expand(self, target, new):
        return dispatch.to_store(work.update, [target, new], [], self.out_aval, self.config)

    def dce(self, used_outs):
        return True, True, self

    def backward(self, res, g, ctarget, cnew):
        _accum(cnew, lambda: g)


# --- products and reductions ---------------------------------------------------

class Dot(DiskPrimitive):
    """op(a) @ op(b) with batch dimensions; ``ta``/``tb`` transpose the last
    two axes of an operand as it is read (no transposed copy is made)."""

    def __init__(self, a: DiskArrayType, b: DiskArrayType, ta: bool, tb: bool, grad: bool,
                 config: Config | None):
        m = a.shape[-1] if ta else a.shape[-2]
        n = b.shape[-2] if tb else b.shape[-1]
        out = DiskArrayType(a.shape[:-2] + (m, n), a.dtype)
        super().__init__((a, b), out, ta=ta, tb=tb, grad=grad, config=config)

    def expand(self, a, b):
        return dispatch.to_store(work.dot(self.ta, self.tb, grad=self.grad), [a, b], [],
                                 self.out_aval, self.config)

    def backward(self, res, g, ca, cb):
        # C = A @ B with A = op(a), B = op(b): dA = G @ B.T and dB = A.T @ G.
        a, b = res
        ta, tb, cfg = self.ta, self.tb, self.config
        if ta:  # da = dA.T = B @ G.T
            _accum(ca, lambda: dot(b, g, ta=tb, tb=True, config=cfg, grad=True))
        else:
            _accum(ca, lambda: dot(g, b, ta=False, tb=not tb, config=cfg, grad=True))
        if tb:  # db = dB.T = G.T @ A
            _accum(cb, lambda: dot(g, a, ta=True, tb=ta, config=cfg, grad=True))
        else:
            _accum(cb, lambda: dot(a, g, ta=not ta, tb=False, config=cfg, grad=True))


class Sum(DiskPrimitive):
    """Sum of every element, as an in-memory scalar."""

    def __init__(self, aval: DiskArrayType, config: Config | None):
        super().__init__((aval,), _scalar_aval(aval.dtype), config=config)

    def expand(self, a):
        return dispatch.to_value(work.total, [a], [], jax.ShapeDtypeStruct((), self._in.dtype),
                                 self.config)

    def backward(self, res, g, ca):
        _accum(ca, lambda: Fill(self._in, True, self.config)(g))


class Vdot(DiskPrimitive):
    """sum(a * b) as an in-memory scalar (the cotangent of a scale factor)."""

    def __init__(self, aval: DiskArrayType, config: Config | None):
        super().__init__((aval, aval), _scalar_aval(aval.dtype), config=config)

    def expand(self, a, b):
        return dispatch.to_value(work.vdot, [a, b], [],
                                 jax.ShapeDtypeStruct((), self._in.dtype), self.config)

    def backward(self, res, g, ca, cb):
        a, b = res
        _accum(ca, lambda: scalar_op("scale", b, g, config=self.config, grad=True))
        _accum(cb, lambda: scalar_op("scale", a, g, config=self.config, grad=True))


# --- between disk and memory ------------------------------------------------------

class Materialize(DiskPrimitive):
    """The whole array as an in-memory jax.Array."""

    def __init__(self, aval: DiskArrayType, config: Config | None):
        super().__init__((aval,), ShapedArray(aval.shape, aval.dtype), config=config)

    def expand(self, a):
        return dispatch.to_value(work.read_all, [a], [],
                                 jax.ShapeDtypeStruct(self._in.shape, self._in.dtype),
                                 self.config)

    def backward(self, res, g, ca):
        _accum(ca, lambda: FromValue(self._in, True, self.config)(g))


class FromValue(DiskPrimitive):
    """An in-memory array written to a new store."""

    def __init__(self, aval: DiskArrayType, grad: bool, config: Config | None):
        super().__init__((ShapedArray(aval.shape, aval.dtype),), aval, grad=grad, config=config)

    def expand(self, x):
        return dispatch.to_store(work.write_value(grad=self.grad), [], [x], self.out_aval,
                                 self.config)

    def backward(self, res, g, cx):
        _accum(cx, lambda: Materialize(self.out_aval, self.config)(g))


# --- binding helpers (arguments already checked by jask.ops) -----------------------

def _aval(x) -> DiskArrayType:
    return jax.typeof(x)


def add(a, b, *, config=None, grad=False):
    return Binary("add", _aval(a), grad, config)(a, b)


def sub(a, b, *, config=None, grad=False):
    return Binary("sub", _aval(a), grad, config)(a, b)


def mul(a, b, *, config=None, grad=False):
    return Binary("mul", _aval(a), grad, config)(a, b)


def square(a, *, config=None, grad=False):
    return Square(_aval(a), grad, config)(a)


def scalar_op(kernel, a, s, *, config=None, grad=False):
    aval = _aval(a)
    return ScalarOp(kernel, aval, grad, config)(a, jax.numpy.asarray(s).astype(aval.dtype))


def fill(value, aval, *, config=None, grad=False):
    return Fill(aval, grad, config)(jax.numpy.asarray(value, aval.dtype))


def transpose(a, axes, *, config=None, grad=False):
    return Transpose(_aval(a), tuple(axes), grad, config)(a)


def update(target, new, *, config=None):
    return Update(_aval(target), config)(target, new)


def dot(a, b, *, ta=False, tb=False, config=None, grad=False):
    return Dot(_aval(a), _aval(b), ta, tb, grad, config)(a, b)


def total(a, *, config=None):
    return Sum(_aval(a), config)(a)


def vdot(a, b, *, config=None):
    return Vdot(_aval(a), config)(a, b)


def materialize(a, *, config=None):
    return Materialize(_aval(a), config)(a)


def from_value(x, *, config=None, grad=False):
    x = jax.numpy.asarray(x)
    return FromValue(DiskArrayType(x.shape, x.dtype), grad, config)(x)
