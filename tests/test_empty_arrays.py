"""Arrays with no elements answer every op as jax.numpy does.

One table: each row is (name, the op on jask, the op on jax.numpy), run on
each shape of ``SHAPES`` (a size-0 axis first, last, in the middle). The
results must agree in shape, dtype and values (a sum of nothing is 0, a mean
NaN, a product of shape (3, 0) @ (0, 4) zeros), and so must the warnings;
where jax.numpy raises (the max of nothing), jask raises the same type.
"""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
import jask.array_api as xp

SHAPES = [(0,), (0, 5), (5, 0), (2, 0, 3)]


def last(x):
    return x.shape[-1]


def right(x):
    """An in-memory operand of ones for ``x @ it``: a vector, or for a batch
    a batch of matrices (jask multiplies a batch by a batch, not by a vector)."""
    return jnp.ones((last(x),) if x.ndim < 3 else (*x.shape[:-2], last(x), 2), jnp.float32)


def left(x):
    """An in-memory operand of ones for ``it @ x``."""
    return jnp.ones((x.shape[0],) if x.ndim < 3 else (*x.shape[:-2], 2, x.shape[-2]),
                    jnp.float32)


def same(name, f):
    """A row whose op is spelled the same on jask and jax.numpy: ``f(module, x)``."""
    return name, lambda x: f(jask, x), lambda x: f(jnp, x)


def grad_of(loss):
    return lambda x: jax.grad(loss)(x)


ROWS = [
    # elementwise and broadcasting
    same("add scalar", lambda m, x: x + 1.0),
    same("mul self", lambda m, x: x * x),
    same("sqrt", lambda m, x: m.sqrt(x)),
    same("negative", lambda m, x: -x),
    same("greater", lambda m, x: x > 0.0),
    same("maximum", lambda m, x: m.maximum(x, 0.0)),
    same("clip", lambda m, x: m.clip(x, 0.0, 1.0)),
    same("exp", lambda m, x: m.exp(x)),
    same("astype", lambda m, x: x.astype(jnp.int32)),
    same("where", lambda m, x: m.where(x > 0.0, x, -x)),
    same("add row in memory", lambda m, x: x + jnp.ones(x.shape[-1:], jnp.float32)),
    same("add ones of rank", lambda m, x: x + jnp.ones((1,) * x.ndim, jnp.float32)),
    same("add self sliced", lambda m, x: x + x[..., :1] if last(x) else x + x),
    same("broadcast_to", lambda m, x: m.broadcast_to(x, (3, *x.shape))),
    # reductions
    same("sum", lambda m, x: m.sum(x)),
    same("sum axis 0", lambda m, x: m.sum(x, axis=0)),
    same("sum axis -1", lambda m, x: m.sum(x, axis=-1)),
    same("mean", lambda m, x: m.mean(x)),
    same("mean axis 0", lambda m, x: m.mean(x, axis=0)),
    same("mean axis -1", lambda m, x: m.mean(x, axis=-1)),
    same("var", lambda m, x: m.var(x)),
    same("std axis -1", lambda m, x: m.std(x, axis=-1)),
    same("prod", lambda m, x: m.prod(x)),
    same("max", lambda m, x: m.max(x)),
    same("max axis 0", lambda m, x: m.max(x, axis=0)),
    same("min axis -1", lambda m, x: m.min(x, axis=-1)),
    same("argmax", lambda m, x: m.argmax(x)),
    same("argmin axis -1", lambda m, x: m.argmin(x, axis=-1)),
    same("all", lambda m, x: m.all(x > 0.0)),
    same("any axis 0", lambda m, x: m.any(x > 0.0, axis=0)),
    same("count_nonzero", lambda m, x: m.count_nonzero(x)),
    same("nansum", lambda m, x: m.nansum(x)),
    same("nanmean axis 0", lambda m, x: m.nanmean(x, axis=0)),
    ("logsumexp", lambda x: jask.logsumexp(x), lambda x: jax.nn.logsumexp(x)),
    # products
    same("matmul vector", lambda m, x: x @ right(x)),
    same("vector matmul", lambda m, x: left(x) @ x),
    same("matmul self.T", lambda m, x: x @ m.matrix_transpose(x) if x.ndim > 1 else x @ x),
    same("self.T matmul", lambda m, x: m.matrix_transpose(x) @ x if x.ndim > 1 else x @ x),
    same("dot", lambda m, x: m.dot(x, right(x)) if x.ndim < 3 else m.dot(x[0], right(x[0]))),
    same("tensordot", lambda m, x: m.tensordot(x, x, axes=x.ndim)),
    # indexing and slicing
    same("index 0", lambda m, x: x[0]),
    same("slice :3", lambda m, x: x[:3]),
    same("slice 1:", lambda m, x: x[1:]),
    same("slice ..., :2", lambda m, x: x[..., :2]),
    same("slice ::2", lambda m, x: x[::2]),
    same("slice ..., -1:", lambda m, x: x[..., -1:]),
    same("newaxis", lambda m, x: x[None]),
    same("take none", lambda m, x: m.take(x, jnp.zeros((0,), jnp.int32), axis=-1)),
    same("take first", lambda m, x: m.take(x, jnp.zeros((2,), jnp.int32), axis=0)),
    # joining and reshaping
    same("concatenate", lambda m, x: m.concatenate([x, x])),
    same("concatenate axis -1", lambda m, x: m.concatenate([x, x], axis=-1)),
    same("stack", lambda m, x: m.stack([x, x])),
    same("reshape -1", lambda m, x: m.reshape(x, (-1,))),
    same("reshape reversed", lambda m, x: m.reshape(x, x.shape[::-1])),
    same("reshape 0, -1", lambda m, x: m.reshape(x, (0, -1))),
    same("transpose", lambda m, x: m.transpose(x)),
    same(".T", lambda m, x: x.T),
    same("expand_dims", lambda m, x: m.expand_dims(x, 0)),
    same("flip", lambda m, x: m.flip(x, axis=0)),
    same("roll", lambda m, x: m.roll(x, 1, axis=-1)),
    same("repeat", lambda m, x: m.repeat(x, 2, axis=-1)),
    same("tile", lambda m, x: m.tile(x, (2,) * x.ndim)),
    same("diff", lambda m, x: m.diff(x, axis=-1)),
    # sorting and scans
    same("sort", lambda m, x: m.sort(x)),
    same("sort axis 0", lambda m, x: m.sort(x, axis=0)),
    same("argsort", lambda m, x: m.argsort(x)),
    same("cumsum axis 0", lambda m, x: m.cumsum(x, axis=0)),
    same("cumsum axis -1", lambda m, x: m.cumsum(x, axis=-1)),
    same("cumprod axis -1", lambda m, x: m.cumprod(x, axis=-1)),
    # the Array API namespace
    ("xp.sum", lambda x: xp.sum(x), lambda x: jnp.sum(x)),
    ("xp.mean axis 0", lambda x: xp.mean(x, axis=0), lambda x: jnp.mean(x, axis=0)),
    ("xp.matmul", lambda x: xp.matmul(x, xp.ones(right(x).shape)),
     lambda x: jnp.matmul(x, jnp.ones(right(x).shape))),
    ("xp.concat", lambda x: xp.concat([x, x], axis=-1), lambda x: jnp.concatenate([x, x], -1)),
    ("xp.permute_dims", lambda x: xp.permute_dims(x, tuple(range(x.ndim))[::-1]),
     lambda x: jnp.transpose(x)),
    ("xp.zeros_like", lambda x: xp.zeros_like(x), lambda x: jnp.zeros_like(x)),
    ("xp.ones_like", lambda x: xp.ones_like(x), lambda x: jnp.ones_like(x)),
    ("xp.full_like", lambda x: xp.full_like(x, 2.0), lambda x: jnp.full_like(x, 2.0)),
    ("xp.unique_values", lambda x: xp.unique_values(x), lambda x: jnp.unique(x)),
    ("xp.nonzero", lambda x: xp.nonzero(x), lambda x: jnp.nonzero(x)),
    ("xp.vecdot", lambda x: xp.vecdot(x, x), lambda x: jnp.vecdot(x, x)),
    ("xp.cumulative_sum", lambda x: xp.cumulative_sum(x, axis=0),
     lambda x: jnp.cumulative_sum(x, axis=0)),
    ("xp.searchsorted", lambda x: xp.searchsorted(xp.reshape(x, (-1,)), xp.ones(3)),
     lambda x: jnp.searchsorted(jnp.reshape(x, (-1,)), jnp.ones(3))),
    # gradients and compiled calls
    same("grad sum", lambda m, x: grad_of(lambda x: m.sum(x * x))(x)),
    same("grad mean", lambda m, x: grad_of(lambda x: m.mean(x))(x)),
    same("grad matmul", lambda m, x: grad_of(lambda x: m.sum(x @ right(x)))(x)),
    same("grad of the vector", lambda m, x: jax.grad(lambda v: m.sum(x @ v))(right(x))),
    same("jit sum", lambda m, x: jax.jit(lambda x: m.sum(x * 2.0))(x)),
    same("jit matmul", lambda m, x: jax.jit(lambda x: x @ right(x))(x)),
    same("jit mean axis 0", lambda m, x: jax.jit(lambda x: m.mean(x + 1.0, axis=0))(x)),
    same("jit grad mean", lambda m, x: jax.jit(grad_of(lambda x: m.mean(x * x)))(x)),
    # value ops merged into one callback (they would share a band group)
    same("jit value_and_grad of two reductions", lambda m, x: jax.jit(jax.value_and_grad(
        lambda v: m.sum(x * v) + m.mean(x)))(jnp.ones(last(x)))),
    same("jit value_and_grad centred", lambda m, x: jax.jit(jax.value_and_grad(
        lambda v: m.sum(m.square(x * v - m.mean(x * v)))))(jnp.ones(last(x)))),
]


#: Rows where jask raises where jax.numpy answers or raises otherwise, and why.
RAISES_INSTEAD = {
    # jnp divides by the known lengths' product and raises ZeroDivisionError;
    # jask raises numpy's ValueError (any length would do for the -1)
    "reshape 0, -1": ValueError,
}


def _numpy(value):
    """A result as numpy values (a tuple as a tuple of them)."""
    if isinstance(value, (tuple, list)):
        return tuple(_numpy(v) for v in value)
    if isinstance(value, jask.DiskArray):
        return value.to_numpy()
    return np.asarray(value)


def _outcome(f, x):
    """(the result as numpy, or the type of the exception raised; the
    warnings' categories)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = _numpy(f(x))
        except Exception as err:  # noqa: BLE001 - compared with jax.numpy's
            got = type(err)
    return got, sorted({w.category.__name__ for w in caught
                        if not issubclass(w.category, DeprecationWarning)})


def _agree(got, want) -> None:
    if isinstance(want, type):
        assert got is want or (isinstance(got, type) and issubclass(got, want)), \
            f"jax.numpy raises {want.__name__}, jask gave {got!r}"
        return
    assert not isinstance(got, type), f"jask raised {got.__name__}, jax.numpy gave {want!r}"
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _agree(g, w)
        return
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name, on_jask, on_jnp", ROWS, ids=[r[0] for r in ROWS])
def test_an_empty_array_answers_as_jax_numpy(small_budget, name, on_jask, on_jnp, shape):
    data = np.zeros(shape, np.float32)
    want, want_warnings = _outcome(on_jnp, jnp.asarray(data))
    got, got_warnings = _outcome(on_jask, jask.from_numpy(data))
    want = RAISES_INSTEAD.get(name, want)
    _agree(got, want)
    assert got_warnings == want_warnings


MADE = [
    ("from_numpy", lambda shape: jask.from_numpy(np.zeros(shape, np.float32))),
    ("xp.asarray", lambda shape: xp.asarray(np.empty(shape, np.float32))),
    ("xp.zeros", lambda shape: xp.zeros(shape, dtype=xp.float32)),
    ("xp.ones", lambda shape: xp.ones(shape, dtype=xp.float32)),
    ("xp.empty", lambda shape: xp.empty(shape, dtype=xp.float32)),
    ("xp.full", lambda shape: xp.full(shape, 2.0, dtype=xp.float32)),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("made", MADE, ids=[m[0] for m in MADE])
def test_an_empty_array_however_made_works_in_later_ops(small_budget, made, shape):
    x = made[1](shape)
    assert isinstance(x, jask.DiskArray) and x.shape == shape and x.dtype == np.float32
    assert x.to_numpy().shape == shape
    assert float(jask.sum(x + 1.0)) == 0.0
    assert (x @ right(x)).shape == (jnp.zeros(shape) @ right(x)).shape
    assert jask.concatenate([x, x], axis=-1).to_numpy().shape == (*shape[:-1], 2 * shape[-1])
    assert jask.transpose(x).to_numpy().shape == shape[::-1]


CREATED = [
    ("zeros", lambda m: m.zeros((2, 0)), lambda: jnp.zeros((2, 0))),
    ("ones", lambda m: m.ones((0, 3)), lambda: jnp.ones((0, 3))),
    ("full", lambda m: m.full((0,), 7.0), lambda: jnp.full((0,), 7.0)),
    ("arange", lambda m: m.arange(0), lambda: jnp.arange(0)),
    ("arange empty range", lambda m: m.arange(5, 2), lambda: jnp.arange(5, 2)),
    ("linspace", lambda m: m.linspace(0.0, 1.0, 0), lambda: jnp.linspace(0.0, 1.0, 0)),
    ("eye", lambda m: m.eye(0), lambda: jnp.eye(0)),
    ("eye 0 x 3", lambda m: m.eye(0, 3), lambda: jnp.eye(0, 3)),
    ("tril", lambda m: m.tril(m.zeros((0, 4))), lambda: jnp.tril(jnp.zeros((0, 4)))),
]


@pytest.mark.parametrize("name, on_xp, on_jnp", CREATED, ids=[c[0] for c in CREATED])
def test_creating_an_empty_array_answers_as_jax_numpy(small_budget, name, on_xp, on_jnp):
    want, want_warnings = _outcome(lambda _: on_jnp(), None)
    got, got_warnings = _outcome(lambda _: on_xp(xp), None)
    _agree(got, want)
    assert got_warnings == want_warnings
