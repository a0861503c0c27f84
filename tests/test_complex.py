"""complex64 and complex128 DiskArrays beyond the op table's rows
(``ops_table.COMPLEX_OPS``): stores written by zarr, NaN and inf parts,
promotion with real operands, reductions at a tiny budget, the standard's
refusals, and derivatives through complex values refused naming the op."""
import jax
import jax.numpy as jnp
import numcodecs
import numpy as np
import pytest
from zarr.codecs import BloscCodec, ZstdCodec

import jask
import jask.array_api as xp
from helpers import to_numpy, user_store


def _complex(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _close(got, want, **kw):
    """assert_allclose part by part (numpy's compares complex infinities as a pair)."""
    got, want = np.asarray(got), np.asarray(want)
    for part in (np.real, np.imag):
        np.testing.assert_allclose(part(got), part(want), **kw)


def _rows(x, step=16):
    """A DiskArray's values read a band of rows at a time (within the budget)."""
    return np.concatenate([x[i:i + step].to_numpy() for i in range(0, x.shape[0], step)])


def _special(value):
    """NaN and inf in either part, signed zeros, in the first row."""
    value[0, :8] = [np.nan, complex(np.inf, -np.inf), complex(1, np.nan), complex(-np.inf, 0),
                    0, complex(-0.0, 0), complex(-1, -0.0), complex(np.nan, np.inf)]
    return value


@pytest.mark.parametrize("layout", [
    dict(zarr_format=3, chunks=(16, 24), compressors=[ZstdCodec()]),
    dict(zarr_format=3, chunks=(8, 8), shards=(16, 24), compressors=[BloscCodec()]),
    dict(zarr_format=2, chunks=(16, 16), compressors=[numcodecs.Blosc()]),
    dict(zarr_format=2, chunks=(16, 16), compressors=[numcodecs.Zlib()], dtype=">c16"),
], ids=["v3-zstd", "v3-sharded-blosc", "v2-blosc", "v2-zlib-big-endian"])
def test_compressed_stores_written_by_zarr(layout, small_budget, tmp_path, rng):
    """complex stores that zarr wrote, compressed, with NaN and inf parts: read
    bit for bit, and ops agree with jax.numpy (NaN where it has NaN)."""
    layout = dict(layout)
    dtype = np.complex64 if layout["zarr_format"] == 3 else np.complex128
    value = _special(_complex(rng, (64, 40), dtype))
    stored = value.astype(layout.pop("dtype", dtype))  # big-endian: as another tool wrote it
    x = user_store(tmp_path / "z.zarr", stored, **layout)
    assert x.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(_rows(x), value)
    with jax.enable_x64(True), np.errstate(all="ignore"):
        ref = jnp.asarray(value)
        np.testing.assert_array_equal(_rows(jask.isnan(x)), np.asarray(jnp.isnan(ref)))
        np.testing.assert_array_equal(_rows(jask.isinf(x)), np.asarray(jnp.isinf(ref)))
        # numpy's values, C99's special cases (the standard's): |nan + inf j| is inf,
        # where jax.numpy gives nan
        np.testing.assert_allclose(_rows(jask.abs(x)), np.abs(value), rtol=1e-6)
        assert _rows(jask.abs(x))[0, 7] == np.inf
        np.testing.assert_allclose(_rows(jask.abs(x))[1:], np.asarray(jnp.abs(ref))[1:],
                                   rtol=1e-6)
        np.testing.assert_allclose(_rows(x * x.conj()), value * value.conj(), rtol=1e-6)
        for name in ("sum", "mean", "var"):  # NaN where a NaN (or inf - inf) is
            f, g = getattr(jask, name), getattr(jnp, name)
            _close(to_numpy(f(x, axis=0)), g(ref, axis=0), rtol=1e-5, atol=1e-5, err_msg=name)
            _close(to_numpy(f(x[1:])), g(ref[1:]), rtol=1e-5, err_msg=name)


def test_mixed_with_real_operands_take_the_standard_and_jax_dtypes(small_budget, rng):
    """complex64 with a Python float, a float64 numpy array or a float32
    DiskArray: the dtype jax.numpy gives (a Python float keeps complex64; a
    float64 array makes complex128 under x64), and the namespace's own."""
    value = _complex(rng, (70, 40), np.complex64)
    row = rng.standard_normal(40)  # float64
    with jax.enable_x64(True):
        z, ref = jask.from_numpy(value), jnp.asarray(value)
        for got, want in [(z * 2.5, ref * 2.5), (1.5 - z, 1.5 - ref), (z + row, ref + row),
                          (z / jask.from_numpy(row.astype(np.float32)),
                           ref / row.astype(np.float32)), (z * 1j, ref * 1j),
                          (jask.from_numpy(row) * (2 - 1j), row * (2 - 1j))]:
            assert got.dtype == want.dtype
            np.testing.assert_allclose(_rows(got), np.asarray(want), rtol=1e-6)
        assert (z + row).dtype == np.complex128 and (z * 2.5).dtype == np.complex64
        # the namespace: the standard's promotion (real and complex floats mix)
        assert xp.add(z, xp.asarray(row)).dtype == xp.complex128
        assert (xp.asarray(row.astype(np.float32)) * 1j).dtype == xp.complex64
    with jax.enable_x64(False):  # as jnp: a float64 array is float32 in JAX's 32-bit mode
        assert (jask.from_numpy(value) + row).dtype == np.complex64


def test_reductions_at_a_tiny_budget(jask_scratch, rng):
    """complex128 reductions over many tiles at a 16 KB budget: sums, means and
    variances accumulate in complex128 (the moduli squared in float64) and agree
    with jax.numpy to float64's precision; a large common offset cancels."""
    jask.set_memory_budget("16KB", scratch_dir=jask_scratch.path)
    value = _complex(rng, (301, 13), np.complex128) + (1e6 + 1e6j)
    with jax.enable_x64(True):
        x, ref = jask.from_numpy(value), jnp.asarray(value)
        for name, axis in [("sum", None), ("mean", 0), ("var", None), ("var", 1), ("std", 0)]:
            got = to_numpy(getattr(jask, name)(x, axis=axis))
            want = np.asarray(getattr(jnp, name)(ref, axis=axis))
            assert got.dtype == want.dtype, name
            np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=f"{name} {axis}")
        # the variance of the parts: var(z) = var(real) + var(imag), real
        np.testing.assert_allclose(to_numpy(jask.var(x, axis=0, ddof=1)),
                                   np.var(value.real, 0, ddof=1) + np.var(value.imag, 0, ddof=1),
                                   rtol=1e-9)
        small = value[:40, :4] - (1e6 + 1e6j)
        np.testing.assert_allclose(complex(jask.prod(jask.from_numpy(small) / 2)),
                                   complex(jnp.prod(jnp.asarray(small) / 2)), rtol=1e-9)


def test_real_only_functions_refuse_complex_by_name(small_budget, rng):
    """The standard's real-only functions refuse a complex operand (as
    array-api-strict does), before anything is written."""
    z = jask.from_numpy(_complex(rng, (20, 10), np.complex64))
    calls = {"less": lambda: z < 1.0, "maximum": lambda: jask.maximum(z, z),
             "clip": lambda: jask.clip(z, 0, 1), "floor": lambda: jask.floor(z),
             "remainder": lambda: z % 2, "floor_divide": lambda: z // 2,
             "arctan2": lambda: jask.arctan2(z, z), "signbit": lambda: jask.signbit(z),
             "hypot": lambda: jask.hypot(z, 1.0), "sigmoid": lambda: jask.nn.sigmoid(z),
             "max": lambda: jask.max(z), "min": lambda: jask.min(z, axis=0),
             "argmax": lambda: jask.argmax(z), "logsumexp": lambda: jask.logsumexp(z),
             "nanmean": lambda: jask.nanmean(z), "astype": lambda: jask.astype(z, np.float32)}
    with jask.track() as t:
        for name, call in calls.items():
            with pytest.raises(TypeError, match=rf"jask\.{name}: .*complex.*(real-valued|to real)"):
                call()
    assert t.bytes_written == 0 and t.graphs == 0
    with pytest.raises(TypeError, match=r"jask\.less: complex operands \(complex\)"):
        jask.less(jask.from_numpy(np.ones(3, np.float32)), 1j)  # a Python complex scalar


@pytest.mark.parametrize("mode", ["grad", "jit(grad)", "jvp"])
def test_derivatives_through_complex_values_are_refused_naming_the_op(mode, small_budget, rng):
    z = jask.from_numpy(_complex(rng, (30, 20), np.complex64))
    w = jnp.ones(20, jnp.float32)

    def loss(w):
        return jask.sum(jask.abs(z * w))

    run = {"grad": lambda: jax.grad(loss)(w), "jit(grad)": lambda: jax.jit(jax.grad(loss))(w),
           "jvp": lambda: jax.jvp(loss, (w,), (w,))}[mode]
    with pytest.raises(NotImplementedError, match=r"jask\.multiply: derivatives through "
                                                  r"complex values are not supported"):
        run()
    # a complex constant's real part times a differentiated real array: real derivatives
    got = jax.grad(lambda w: jask.sum(jask.real(z) * w))(w)
    np.testing.assert_allclose(to_numpy(got), np.real(z.to_numpy()).sum(0), rtol=1e-5)


def test_methods_and_namespace_inspection(small_budget, rng):
    value = _complex(rng, (30, 20), np.complex128)
    z = jask.from_numpy(value)
    with jax.enable_x64(True):  # complex128 kept (with x64 off: complex64, float32 parts)
        np.testing.assert_array_equal(z.real.to_numpy(), value.real)
        np.testing.assert_array_equal(z.imag.to_numpy(), value.imag)
        np.testing.assert_array_equal(z.conj().to_numpy(), value.conj())
        np.testing.assert_array_equal(z.conjugate().to_numpy(), value.conj())
    jitted = jax.jit(lambda a: a.imag)(z)  # float32 with x64 off, as jax.numpy's
    assert jitted.dtype == jnp.imag(jnp.asarray(value)).dtype
    np.testing.assert_allclose(jitted.to_numpy(), value.imag, rtol=1e-6)
    small = xp.sum(xp.asarray(value), axis=0)  # an in-memory result of the namespace
    assert isinstance(small, xp.InMemoryArray) and small.real.dtype == np.float32
    np.testing.assert_allclose(np.asarray(small.real), value.sum(0).real, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(small.conj()), np.conj(np.asarray(small)))
    assert xp.isdtype(xp.complex64, "complex floating") and xp.isdtype(z.dtype, "numeric")
    assert not xp.isdtype(xp.complex128, "real floating")
    info = xp.__array_namespace_info__()
    assert set(info.dtypes(kind="complex floating")) == {"complex64", "complex128"}


def test_special_values_follow_the_standard(small_budget):
    """C99's special cases, the standard's, where jax.numpy's differ: numpy's
    kernels give them, and expm1 keeps an imaginary zero on the real axis."""
    z = jask.from_numpy(np.array([complex(np.nan, np.inf), complex(np.inf, 0.0),
                                  complex(-1.0, -0.0)], np.complex64))
    with np.errstate(all="ignore"):
        assert jask.abs(z).to_numpy()[0] == np.inf  # jax.numpy: nan
        assert complex(jask.expm1(z).to_numpy()[1]) == complex(np.inf, 0.0)  # numpy: inf+nanj
        assert complex(jask.sqrt(z).to_numpy()[2]) == -1j  # jax.numpy: 1j


#: (function, argument, the standard's value): C99's special cases for complex
#: arguments with NaN or infinite parts, where jax.numpy (or numpy) differ.
_INF, _NAN, _PI = np.inf, np.nan, np.pi
STANDARD_VALUES = [
    ("acos", complex(0.0, _NAN), complex(_PI / 2, _NAN)),
    ("acos", complex(-0.0, -_NAN), complex(_PI / 2, _NAN)),
    ("acosh", complex(0.0, _NAN), complex(_NAN, _PI / 2)),
    ("acosh", complex(2.5, _NAN), complex(_NAN, _NAN)),
    ("asinh", complex(_NAN, 0.0), complex(_NAN, 0.0)),
    ("asinh", complex(_NAN, -0.0), complex(_NAN, -0.0)),
    ("atanh", complex(0.0, _NAN), complex(0.0, _NAN)),
    ("atanh", complex(_INF, _NAN), complex(0.0, _NAN)),
    ("atanh", complex(_NAN, 1.0), complex(_NAN, _NAN)),
    ("atanh", complex(_NAN, _NAN), complex(_NAN, _NAN)),
    ("cosh", complex(0.0, _INF), complex(_NAN, 0.0)),
    ("cosh", complex(_INF, _NAN), complex(_INF, _NAN)),
    ("sinh", complex(0.0, _NAN), complex(0.0, _NAN)),
    ("sinh", complex(_INF, _INF), complex(_INF, _NAN)),
    ("tanh", complex(0.0, _INF), complex(0.0, _NAN)),
    ("tanh", complex(_INF, -3.0), complex(1.0, -0.0)),
    ("exp", complex(-_INF, _INF), complex(0.0, 0.0)),
    ("exp", complex(-_INF, -_INF), complex(0.0, -0.0)),
    ("exp", complex(_INF, _NAN), complex(_INF, _NAN)),
    ("expm1", complex(-_INF, _NAN), complex(-1.0, 0.0)),
    ("expm1", complex(_INF, _INF), complex(_INF, _NAN)),
    ("log", complex(-_INF, _NAN), complex(_INF, _NAN)),
    ("log", complex(_NAN, _INF), complex(_INF, _NAN)),
    ("log1p", complex(_INF, _NAN), complex(_INF, _NAN)),
    ("sqrt", complex(-_INF, _NAN), complex(_NAN, _INF)),
    ("sqrt", complex(_INF, _NAN), complex(_INF, _NAN)),
    ("sqrt", complex(_NAN, -_INF), complex(_INF, -_INF)),
]


def _same(got: complex, want: complex) -> bool:
    """Equal part by part, NaN matching NaN and zeros matching in sign."""
    def part(g, w):
        if np.isnan(w):
            return bool(np.isnan(g))
        return g == w and (w != 0 or np.signbit(g) == np.signbit(w))
    return part(got.real, want.real) and part(got.imag, want.imag)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name,z,want", STANDARD_VALUES,
                         ids=[f"{n}({z})" for n, z, _ in STANDARD_VALUES])
def test_nan_and_infinite_parts_give_the_standard_s_values(small_budget, name, z, want, dtype):
    """On disk (numpy's kernels) and in memory (jax.numpy's), through jask's
    top level and the namespace; finite elements beside them keep their values."""
    with jax.enable_x64(dtype == np.complex128), np.errstate(all="ignore"):
        values = np.array([z, 0.5 + 0.25j] * 40, dtype)
        f = getattr(xp, name)
        on_disk = f(xp.asarray(values)).to_numpy()
        in_memory = np.asarray(getattr(jask, name)(jnp.asarray(values)))
        zero_d = complex(f(xp.asarray(z, dtype=dtype)))
        finite = getattr(np, name.replace("a", "arc", 1) if name[0] == "a" else name)(values[1])
    want = complex(np.asarray(want, dtype))  # pi/2 rounded to the dtype
    for got in (complex(on_disk[0]), complex(in_memory[0]), zero_d):
        assert _same(got, want), (got, want)
    np.testing.assert_allclose(on_disk[1::2], finite, rtol=1e-6)
    np.testing.assert_allclose(in_memory[1::2], finite, rtol=1e-6)


def test_standard_values_leave_real_tiles_to_numpy_s_ufunc(rng):
    """The special-value wrapper costs real tiles nothing: the engine still lets
    numpy's ufunc write into the tile it read (exp's, computed in float64 and
    rounded once); a complex tile written into keeps the standard's values (the
    rules read each strip's widened copy, not the tile being overwritten)."""
    from types import SimpleNamespace

    from jask.core import ufuncs
    from jask.engine import blockwise
    kernel = ufuncs.TABLE["exp"].numpy
    operand = SimpleNamespace(on_disk=True)
    real = rng.standard_normal((4, 5)).astype(np.float32)
    assert blockwise._reusable(kernel, [real], [operand], real.shape) is real
    want = np.exp(real.astype(np.float64)).astype(np.float32)
    assert kernel(real, out=real) is real
    np.testing.assert_array_equal(real, want)
    z = np.array([complex(-np.inf, np.inf), 1 + 2j], np.complex64)
    got = kernel(z, out=z)
    assert got[0] == 0 and got[1] == np.complex64(np.exp(1 + 2j))
