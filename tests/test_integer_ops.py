"""Elementwise ops at the values where numpy and jax.numpy part ways: integer
division by zero and overflow, shifts by the width or more, signed zeros,
infinities and NaNs. jax.numpy is the reference, bit for bit (values,
dtypes, the sign of zero), on every pair of edge values."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
from helpers import stores_on_disk

INT_OPS = ["floor_divide", "remainder", "left_shift", "right_shift", "power", "bitwise_and",
           "bitwise_or", "bitwise_xor"]
INT_DTYPES = ["int8", "uint8", "int32", "uint32", "int64"]


def _edges(dtype):
    info = np.iinfo(dtype)
    bits = info.bits
    values = {info.min, info.min + 1, -1, 0, 1, 2, 3, 7, bits - 1, bits, bits + 1, 100,
              info.max - 1, info.max}
    return np.array(sorted(v for v in values if info.min <= v <= info.max), dtype)


def _pairs(values):
    a, b = zip(*itertools.product(values, values))
    return np.array(a, values.dtype), np.array(b, values.dtype)


def _same(got, want, rtol=0.0, name=""):
    """Equal values and dtypes (within ``rtol`` for an op numpy's and XLA's math
    libraries round differently), NaNs and infinities in the same places,
    zeros of the same sign."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    if rtol:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0, err_msg=name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)
    if got.dtype.kind == "f":
        zeros = want == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]),
                                      err_msg=name)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_ops_match_jax_on_every_pair_of_edge_values(dtype, small_budget):
    with jax.enable_x64(np.dtype(dtype).itemsize == 8):
        a, b = _pairs(_edges(dtype))
        A, B = jask.from_numpy(a), jask.from_numpy(b)
        for name in INT_OPS:
            _same(getattr(jask, name)(A, B).to_numpy(), getattr(jnp, name)(a, b), name=name)
        _same(jask.invert(A).to_numpy(), jnp.invert(a))
        for name in ("sign", "floor", "round", "abs", "negative", "square"):
            _same(getattr(jask, name)(A).to_numpy(), getattr(jnp, name)(a), name=name)


#: operators with an in-memory array (m), a numpy array (b) or a scalar on either side
OPERATORS = [lambda A, m, b: A // m, lambda A, m, b: m // A, lambda A, m, b: A % m,
             lambda A, m, b: m % A, lambda A, m, b: A << m, lambda A, m, b: m >> A,
             lambda A, m, b: A & m, lambda A, m, b: m | A, lambda A, m, b: m ^ A,
             lambda A, m, b: ~A, lambda A, m, b: 7 // A, lambda A, m, b: A % 3,
             lambda A, m, b: np.int32(5) << A, lambda A, m, b: b & A, lambda A, m, b: -A]


def test_integer_operators_with_in_memory_and_scalar_operands(small_budget):
    a, b = _pairs(_edges("int32"))
    A, m = jask.from_numpy(a), jnp.asarray(b)
    for i, f in enumerate(OPERATORS):
        _same(f(A, m, b).to_numpy(), f(jnp.asarray(a), m, b), name=f"operator {i}")


def test_float_ops_match_jax_on_signed_zeros_infinities_and_nans(small_budget):
    values = np.array([-np.inf, -2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.0, np.inf, np.nan],
                      np.float32)
    a, b = _pairs(values)
    A, B = jask.from_numpy(a), jask.from_numpy(b)
    with np.errstate(all="ignore"):
        for name in ("floor_divide", "remainder", "copysign", "nextafter"):
            _same(getattr(jask, name)(A, B).to_numpy(), getattr(jnp, name)(a, b), name=name)
        for name in ("hypot", "logaddexp", "arctan2"):
            _same(getattr(jask, name)(A, B).to_numpy(), getattr(jnp, name)(a, b), 3e-7, name)
        for name in ("sign", "round", "floor", "ceil", "trunc", "signbit", "isnan", "isinf",
                     "isfinite", "positive", "conj", "real", "imag", "logical_not"):
            _same(getattr(jask, name)(A).to_numpy(), getattr(jnp, name)(a), name=name)


@pytest.mark.parametrize("name, args", [
    ("abs", [[0.0, -0.0, 2.0, -3.0]]),  # jax: d|x|/dx is 1 at 0
    ("logaddexp", [[-np.inf, np.inf, 1.0, -np.inf], [-np.inf, 1.0, np.inf, 2.0]]),
    ("copysign", [[0.0, -0.0, 2.0, -3.0], [-1.0, 1.0, -0.0, 0.0]]),
    ("floor_divide", [[5.5, -5.5], [2.0, 2.0]]),
    ("remainder", [[5.5, -5.5, 4.0, -4.0], [2.0, 2.0, -2.0, 2.0]]),
])
def test_gradients_at_edge_values_match_jax(name, args, small_budget):
    arrays = [np.array(x, np.float32) for x in args]
    argnums = tuple(range(len(arrays)))
    got = jax.grad(lambda *a: jask.sum(getattr(jask, name)(*a)), argnums)(
        *[jask.from_numpy(x) for x in arrays])
    want = jax.grad(lambda *a: jnp.sum(getattr(jnp, name)(*a)), argnums)(*arrays)
    for g, w in zip(got, want):  # NaNs in the same places; values to the last bit or so
        np.testing.assert_allclose(g.to_numpy(), w, rtol=3e-7, atol=0)


def test_complex_operands_of_real_only_ops_are_refused_before_anything_is_written(
        small_budget):
    x = jask.from_numpy(np.ones((5, 3), np.float32))
    before = stores_on_disk(small_budget)
    with pytest.raises(TypeError, match=r"jask.less: complex operands \(complex\) are refused"):
        x < 1j
    with pytest.raises(TypeError, match=r"jask.maximum: complex.*complex64"):
        jask.maximum(x, np.ones(3, np.complex64))
    assert stores_on_disk(small_budget) == before
    # elsewhere complex numbers are values as any (tests/test_complex.py)
    assert (x * 1j).dtype == np.complex64
    assert float(jask.imag(jnp.asarray(2j))) == 2.0


def test_bitwise_ops_on_floats_are_refused_naming_the_dtypes(small_budget):
    x = jask.from_numpy(np.ones((5, 3), np.float32))
    before = stores_on_disk(small_budget)
    for op in (lambda: x & x, lambda: x << 1, lambda: ~x, lambda: jask.bitwise_xor(x, 1)):
        with pytest.raises(TypeError, match=r"jask\.\w+: operands of dtypes float32.*refused"):
            op()
    assert stores_on_disk(small_budget) == before


def test_array_api_names_are_the_same_functions():
    assert jask.acos is jask.arccos and jask.atan2 is jask.arctan2
    assert jask.bitwise_left_shift is jask.left_shift and jask.bitwise_invert is jask.invert
    assert jask.pow is jask.power
