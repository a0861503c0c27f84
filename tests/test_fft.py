"""jask.fft and jask.array_api.fft over DiskArrays split into many tiles:
values against numpy.fft in float64 (no further off than jax.numpy's), dtypes
and shapes as jax.numpy's, and the refusal of a lane over the budget."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
import jask.array_api as xp
from helpers import stores_on_disk

#: (function, input kind, n, axis, norm): the one-axis transforms.
ONE_AXIS = [
    ("fft", "complex", None, -1, None),
    ("fft", "real", 29, 0, "ortho"),
    ("ifft", "complex", 17, 1, "forward"),
    ("ifft", "complex", None, 0, "backward"),
    ("rfft", "real", None, 1, None),
    ("rfft", "real", 40, 0, "forward"),
    ("irfft", "complex", None, 1, "ortho"),
    ("irfft", "complex", 31, 0, None),
    ("hfft", "complex", None, -1, None),
    ("hfft", "complex", 9, 0, "forward"),
    ("ihfft", "real", None, 1, "ortho"),
    ("ihfft", "real", 12, 0, None),
]

#: (function, s, axes, norm): the multi-axis ones, over a 3-D array.
N_AXES = [
    ("fftn", None, None, None),
    ("fftn", (5, 8), (2, 0), "ortho"),
    ("ifftn", None, (1, 2), "forward"),
    ("rfftn", None, None, None),
    ("rfftn", (6, 9), (0, 1), "ortho"),
    ("irfftn", None, None, None),
    ("irfftn", (7, 10), (2, 1), "forward"),
    ("fft2", None, (-2, -1), None),
    ("irfft2", (6, 6), (-2, -1), None),
]


def _data(rng, shape, kind, dtype):
    x = rng.standard_normal(shape)
    if kind == "complex":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(np.result_type(dtype, np.complex64) if kind == "complex" else dtype)


def _check(got, expected_jax, exact):
    """Same dtype and shape as jax.numpy; off numpy's float64 values by no
    more than jax.numpy is (or a few rounding steps of the dtype)."""
    got = got.to_numpy()
    assert got.dtype == expected_jax.dtype and got.shape == expected_jax.shape
    scale = max(float(np.abs(exact).max()), 1.0)
    ours = float(np.abs(got - exact).max())
    theirs = float(np.abs(np.asarray(expected_jax) - exact).max())
    assert ours <= max(theirs, 4 * np.finfo(got.dtype).eps * scale), (ours, theirs)


@pytest.mark.parametrize("name,kind,n,axis,norm", ONE_AXIS)
def test_one_axis_transforms_match_numpy_within_jax_numpy_s_error(small_budget, rng, name, kind,
                                                                  n, axis, norm):
    a = _data(rng, (37, 24), kind, np.float32)
    x = jask.from_numpy(a)
    got = getattr(jask.fft, name)(x, n=n, axis=axis, norm=norm)
    assert isinstance(got, jask.DiskArray)
    assert got.chunks != got.shape  # streamed: several tiles of whole lanes
    wide = a.astype(np.complex128 if kind == "complex" else np.float64)
    _check(got, getattr(jnp.fft, name)(a, n=n, axis=axis, norm=norm),
           getattr(np.fft, name)(wide, n=n, axis=axis, norm=norm))


@pytest.mark.parametrize("name,kind", [("fft", "complex"), ("rfft", "real"), ("irfft", "complex")])
def test_double_precision_in_x64_mode(small_budget, rng, name, kind):
    with jax.enable_x64(True):
        a = _data(rng, (20, 33), kind, np.float64)
        got = getattr(jask.fft, name)(jask.from_numpy(a), axis=0)
        _check(got, getattr(jnp.fft, name)(a, axis=0), getattr(np.fft, name)(a, axis=0))


@pytest.mark.parametrize("name,s,axes,norm", N_AXES)
def test_multi_axis_transforms_are_one_pass_per_axis(small_budget, rng, name, s, axes, norm):
    kind = "real" if name.startswith("rfft") else "complex"
    a = _data(rng, (6, 11, 8), kind, np.float32)
    got = getattr(jask.fft, name)(jask.from_numpy(a), s=s, axes=axes, norm=norm)
    wide = a.astype(np.complex128 if kind == "complex" else np.float64)
    _check(got, getattr(jnp.fft, name)(a, s=s, axes=axes, norm=norm),
           getattr(np.fft, name)(wide, s=s, axes=axes, norm=norm))


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_no_axes_is_no_transform_in_jax_numpy_s_dtype(small_budget, name):
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    got = getattr(jask.fft, name)(jask.from_numpy(a), axes=())
    want = getattr(jnp.fft, name)(a, axes=())
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.to_numpy(), np.asarray(want))


@pytest.mark.parametrize("axes", [None, 0, (1,), (0, 1)])
def test_shifts_are_rolls_as_numpy_s(small_budget, axes):
    a = np.arange(35.0).reshape(5, 7)
    x = jask.from_numpy(a)
    np.testing.assert_array_equal(jask.fft.fftshift(x, axes).to_numpy(), np.fft.fftshift(a, axes))
    np.testing.assert_array_equal(jask.fft.ifftshift(x, axes).to_numpy(),
                                  np.fft.ifftshift(a, axes))


def test_a_lane_larger_than_the_budget_is_refused_naming_it_before_writing(small_budget):
    X = jask.from_numpy(np.zeros((3, 20000), np.float32))  # one lane: 80 kB, budget 64 kB
    before = stores_on_disk(small_budget)
    with pytest.raises(jask.BudgetError, match=r"jask.fft: one lane along axis 1 .* needs "
                                               r".*memory budget of 64000.*Fourier"):
        jask.fft.fft(X)
    with pytest.raises(jask.BudgetError, match=r"jask.rfft: one lane along axis 1"):
        xp.fft.rfftn(X)
    assert stores_on_disk(small_budget) == before
    # along the short axis it runs, tile by tile
    np.testing.assert_array_equal(jask.fft.rfft(X, axis=0).to_numpy(), np.zeros((2, 20000)))


def test_bad_arguments_are_refused_by_name(small_budget):
    x = jask.from_numpy(np.ones((4, 3), np.complex64))
    with pytest.raises(ValueError, match="norm must be one of"):
        jask.fft.fft(x, norm="both")
    with pytest.raises(ValueError, match="n must be a positive int"):
        jask.fft.ifft(x, n=0)
    with pytest.raises(ValueError, match="out of range"):
        jask.fft.fft(x, axis=2)
    with pytest.raises(ValueError, match="repeat an axis"):
        jask.fft.fftn(x, axes=(0, 0))
    with pytest.raises(ValueError, match="same length"):
        jask.fft.fftn(x, s=(2, 2), axes=(0,))


def test_in_memory_inputs_are_jax_numpy_s():
    a = np.arange(8.0, dtype=np.float32)
    got = jask.fft.rfft(a, norm="ortho")
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(got, jnp.fft.rfft(a, norm="ortho"))


def test_the_standard_s_namespace_keeps_its_dtypes_and_types(small_budget, rng):
    a = rng.standard_normal((9, 16)).astype(np.float32)
    x = xp.asarray(a)
    spectrum = xp.fft.rfft(x, axis=0, norm="ortho")
    assert isinstance(spectrum, xp.Array) and spectrum.dtype == xp.complex64
    back = xp.fft.irfft(spectrum, n=9, axis=0, norm="ortho")
    assert back.dtype == xp.float32
    np.testing.assert_allclose(back.to_numpy(), a, atol=1e-5)
    assert x.__array_namespace__().fft is xp.fft
    freq = xp.fft.fftfreq(10, d=0.5, dtype=xp.float32)
    assert isinstance(freq, xp.Array) and freq.dtype == xp.float32
    np.testing.assert_allclose(freq.to_numpy(), np.fft.fftfreq(10, 0.5), rtol=1e-6)
    np.testing.assert_allclose(xp.fft.rfftfreq(9).to_numpy(), np.fft.rfftfreq(9), rtol=1e-6)
    np.testing.assert_array_equal(xp.fft.fftshift(x, axes=(0,)).to_numpy(),
                                  np.fft.fftshift(a, axes=0))
