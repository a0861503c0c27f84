"""Every write path touches only what it names and keeps the store's dtype
(issue 43): ``x[key] = v``, ``update_``, ``x.at[...]`` then ``update_``,
writes through ``to_memmap()`` and saves over an existing store, on every
dtype Zarr holds, with JAX's x64 mode off and on. The store is compared byte
for byte with numpy's result of the same assignment on a copy."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jask

SHAPE, CHUNKS = (7, 5), (3, 2)  # ragged chunks on both axes


def _data(dtype) -> np.ndarray:
    """Values of ``dtype`` a 32-bit pass would change: 2**40 + k, 0.1 + k 1e-12,
    the integer limits, NaN, -0.0, inf."""
    dtype = np.dtype(dtype)
    n = int(np.prod(SHAPE))
    rng = np.random.default_rng(dtype.num)
    if dtype == np.bool_:
        return rng.random(SHAPE) > 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        a[:2] = info.min, info.max
        return a.reshape(SHAPE)
    real = dtype if dtype.kind == "f" else np.dtype(f"f{dtype.itemsize // 2}")
    a = (0.1 + np.arange(n) * 1e-12 + rng.standard_normal(n)).astype(real)
    a[:3] = np.nan, -0.0, np.inf
    if dtype.kind == "c":
        a = a + 1j * (0.3 + np.arange(n) * 1e-13).astype(real)
    return a.astype(dtype).reshape(SHAPE)


DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128", "bool"]
WIDE = ("int64", "uint64", "float64", "complex128")  # what JAX narrows with x64 off


def _modes(dtypes):
    """(dtype, x64) for every dtype with x64 off and on; x64 on of the dtypes
    it does not change in the slow set."""
    return [pytest.param(d, x64, id=f"{d}-x64-{'on' if x64 else 'off'}",
                         marks=pytest.mark.slow if x64 and d not in WIDE else ())
            for d in dtypes for x64 in (False, True)]

#: (id, key, value): the value is a Python scalar numpy casts into every dtype but bool
KEYS = [
    ("int", 0, 5),
    ("negative", (-1, -2), 7),
    ("strided", (slice(1, None, 3), slice(None, None, 2)), 3),
    ("int-array", (np.array([4, 0, 6]), slice(None)), 2),
    ("column-values", (slice(None), 1), "row-values"),
    ("bool-axis", (slice(None), np.array([True, False, True, False, True])), 1),
    ("mask", "mask", 6),
    ("everything", slice(None), 4),
]


def _value(dtype, value):
    if value == "row-values":  # one value per selected element, in the store's dtype
        return _data(dtype)[::-1, 0].copy()
    return bool(value % 2) if np.dtype(dtype) == np.bool_ else value


def _key(key, data):
    return data.real > 0.5 if isinstance(key, str) else key


def _store(tmp_path, data, name="a.zarr") -> str:
    path = str(tmp_path / name)
    zarr.create_array(path, data=data, chunks=CHUNKS)
    return path


def assert_bytes_equal(path, want: np.ndarray, what: str) -> None:
    got = zarr.open_array(path)[...]
    assert got.dtype == want.dtype, f"{what}: the store's dtype became {got.dtype}"
    assert got.tobytes() == want.tobytes(), f"{what}:\n{got}\nwant\n{want}"


def _setitem(x, key, value):
    x[key] = value


def _update(x, key, value):
    x.update_(x.at[key].set(value))


def _functional_update(x, key, value):
    jask.update_(x, x.at[key].set(value))


def _memmap(x, key, value):
    view = x.to_memmap()
    if isinstance(key, tuple) and any(isinstance(k, np.ndarray) for k in key):
        view.oindex[key] = value  # zarr takes index arrays by .oindex
    else:
        view[key] = value


#: every way to write a value into a user's store
WRITES = [("setitem", _setitem), ("update_", _update), ("jask.update_", _functional_update),
          ("to_memmap", _memmap)]


@pytest.mark.parametrize(("dtype", "x64"), _modes(DTYPES))
def test_every_write_touches_only_what_it_names(dtype, x64, tmp_path, small_budget):
    data = _data(dtype)
    with jax.enable_x64(x64):
        for wid, write in WRITES:
            for kid, key, value in KEYS:
                if wid == "to_memmap" and kid == "mask":  # zarr takes a mask by .vindex
                    continue
                path = _store(tmp_path, data, f"{wid}-{kid}.zarr")
                key_ = _key(key, data)
                value_ = _value(dtype, value)
                want = data.copy()
                want[key_] = value_
                write(jask.open(path), key_, value_)
                assert_bytes_equal(path, want, f"{wid} {kid} {dtype} x64={x64}")


@pytest.mark.parametrize(("dtype", "x64"), _modes(DTYPES))
def test_a_save_over_a_store_keeps_every_byte(dtype, x64, tmp_path, small_budget):
    data = _data(dtype)
    with jax.enable_x64(x64):
        source = jask.open(_store(tmp_path, data))
        target = _store(tmp_path, np.zeros_like(data), "b.zarr")
        jask.save(source, target, overwrite=True)
        assert_bytes_equal(target, data, f"save {dtype}")
        written = source.at[2].set(_value(dtype, 1))
        jask.save(written, target, overwrite=True)
        want = data.copy()
        want[2] = _value(dtype, 1)
        assert_bytes_equal(target, want, f"save of a write {dtype}")


#: .at methods and a value each, compared with jax.numpy in the store's dtype (x64 on)
AT = [("add", 3), ("subtract", 2), ("multiply", 3), ("min", 0), ("max", 4),
      ("power", 2), ("divide", 2), ("add", 2.5), ("multiply", 2.5)]
NUMERIC = [d for d in DTYPES if d not in ("bool", "float16")]


def _reference(data, method, key, value):
    """jax.numpy's ``.at[key].method(value)`` on the data in their own dtype."""
    with jax.enable_x64(True):
        return np.asarray(getattr(jnp.asarray(data).at[key], method)(value))


@pytest.mark.parametrize(("dtype", "x64"), _modes(NUMERIC))
def test_at_methods_then_update_touch_only_what_they_name(dtype, x64, tmp_path, small_budget):
    data = _data(dtype)
    if np.dtype(dtype).kind in "iu":  # no overflow in power and multiply
        data = (data % 5).astype(dtype)
    key = (slice(1, None, 3), np.array([0, 2]))
    with jax.enable_x64(x64), np.errstate(all="ignore"):
        for method, value in AT:
            if method in ("power", "divide") and np.dtype(dtype).kind in "iu" \
                    and not isinstance(value, int):
                continue
            path = _store(tmp_path, data, f"{method}-{value}.zarr")
            x = jask.open(path)
            new = getattr(x.at[key], method)(value)
            want = _reference(data, method, key, value)
            if np.dtype(new.dtype) != data.dtype:  # divide of integers: jax.numpy's float dtype
                assert method == "divide" and np.dtype(new.dtype).kind == "f"
                square = jax.ShapeDtypeStruct(SHAPE, dtype)
                assert new.dtype == jax.eval_shape(jnp.divide, square, square).dtype
                np.testing.assert_array_equal(new.to_numpy(), want.astype(new.dtype))
                with pytest.raises(ValueError, match="dtype"):
                    x.update_(new)  # a float into an integer store: refused
                assert_bytes_equal(path, data, f"refused {method} {dtype}")
                continue
            x.update_(new)
            outside = np.ones(SHAPE, bool)
            outside[key] = False
            got = zarr.open_array(path)[...]
            assert got.dtype == data.dtype
            assert got[outside].tobytes() == data[outside].tobytes(), f"{method} {dtype}"
            inexact = np.dtype(dtype).kind in "fc"  # numpy's kernels round as jax's, or by an ulp
            np.testing.assert_allclose(got[~outside], want.astype(data.dtype)[~outside],
                                       rtol=8 * np.finfo(dtype).eps if inexact else 0,
                                       err_msg=f"{method} {value} {dtype} x64={x64}")


def test_the_dtype_of_an_update_is_jax_numpys(small_budget):
    a = np.array([-7, 7, -8], np.int32)
    x = jask.from_numpy(a)
    for method, value in [("divide", 2), ("divide", 2.5), ("power", 2), ("power", 2.5),
                          ("add", 2.5), ("multiply", 2.5), ("subtract", 2.5), ("min", 2),
                          ("max", 2), ("set", 2.5)]:
        got = getattr(x.at[np.array([0, 2])], method)(value)
        want = getattr(jnp.asarray(a).at[np.array([0, 2])], method)(value)
        assert np.dtype(got.dtype) == want.dtype, (method, value)
        np.testing.assert_array_equal(got.to_numpy(), np.asarray(want), err_msg=method)
    with pytest.raises(AttributeError, match="no method 'apply'"):
        x.at[0].apply(jnp.negative)
    b = jask.from_numpy(np.array([True, False]))
    with pytest.raises(TypeError, match="add.*bool"):
        b.at[0].add(True)
    np.testing.assert_array_equal(b.at[1].max(True).to_numpy(), [True, True])


#: (dtype, value numpy refuses for a[k] = value, error, what the message names)
REFUSED = [
    ("int8", 300, OverflowError, "300.*int8"),
    ("uint8", -1, OverflowError, "-1.*uint8"),
    ("int64", 2**64, OverflowError, "int64"),
    ("uint64", -5, OverflowError, "uint64"),
    ("int32", float("nan"), ValueError, "nan.*int32"),
    ("int16", float("inf"), OverflowError, "inf.*int16"),
    ("float32", 1 + 2j, TypeError, "complex.*float32"),
    ("int64", np.array([1.0, np.nan]), ValueError, "shape \\(2,\\).*int64"),
]


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
@pytest.mark.parametrize("case", range(len(REFUSED)))
def test_a_value_numpy_refuses_is_refused_before_writing(case, x64, tmp_path, small_budget):
    dtype, value, error, match = REFUSED[case]
    data = _data(dtype)
    path = _store(tmp_path, data)
    with jax.enable_x64(x64):
        x = jask.open(path)
        with pytest.raises(error, match=match):
            x[0, :2] = value
    assert_bytes_equal(path, data, f"refused {value!r} into {dtype}")


#: keys hypothesis draws for one axis of length n
def _axis_keys(n):
    ints = st.integers(-n, n - 1)
    slices = st.builds(slice, st.none() | st.integers(-n - 1, n + 1),
                       st.none() | st.integers(-n - 1, n + 1),
                       st.none() | st.integers(1, 3))  # negative steps: refused (IndexError)
    arrays = st.lists(st.integers(-n, n - 1), min_size=1, max_size=n, unique=True) \
        .map(lambda i: np.array(i))
    masks = st.lists(st.booleans(), min_size=n, max_size=n).map(np.array)
    return ints | slices | arrays | masks


@st.composite
def _writes(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = (draw(st.integers(1, 6)), draw(st.integers(1, 5)))
    chunks = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    steps = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            key = (draw(_axis_keys(shape[0])), draw(_axis_keys(shape[1])))
            if sum(isinstance(k, np.ndarray) for k in key) > 1:  # numpy pairs them: refused
                key = (key[0], slice(None))
        else:
            key = np.array(draw(st.lists(st.booleans(), min_size=shape[0] * shape[1],
                                         max_size=shape[0] * shape[1]))).reshape(shape)
        scalar = draw(st.booleans())
        steps.append((key, scalar, draw(st.integers(0, 2**31))))
    return dtype, shape, chunks, steps, draw(st.booleans())


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(_writes())
def test_random_writes_equal_numpys(tmp_path_factory, small_budget, case):
    dtype, shape, chunks, steps, x64 = case
    data = np.resize(_data(dtype).reshape(-1), shape)
    path = str(tmp_path_factory.mktemp("w") / "a.zarr")
    zarr.create_array(path, data=data, chunks=chunks)
    want = data.copy()
    with jax.enable_x64(x64):
        x = jask.open(path)
        for key, scalar, seed in steps:
            region = np.shape(want[key])
            if scalar or isinstance(key, np.ndarray):  # a mask of x's shape takes a scalar
                value = _data(dtype).reshape(-1)[seed % 35]
            else:
                value = np.resize(_data(dtype)[::-1].reshape(-1), region)
            want[key] = value
            x[key] = value
    assert_bytes_equal(path, want, f"{dtype} {shape} {steps} x64={x64}")


@pytest.mark.parametrize("write", ["setitem", "at-add"])
def test_a_write_on_a_full_disk_leaves_every_old_byte(write, tmp_path, small_budget):
    """``x[key] = v`` and ``update_(x.at[key].add(v))`` (the where in the
    store's dtype, a float64 value a small store of its own) on a disk with no
    room for the replacement: DiskFullError, and the store holds every old
    byte, nothing left beside it."""
    import os

    from helpers import tmpfs_mount

    data = _data("float64").repeat(60, axis=0).repeat(60, axis=1)  # 420 x 300: 1 MB
    with tmpfs_mount(tmp_path / "small", "2m") as mount:
        path = str(mount / "a.zarr")
        zarr.create_array(path, data=data, chunks=(50, 50), compressors=None)
        with open(mount / "ballast", "wb") as f:  # room for half a copy
            stat = os.statvfs(mount)
            os.posix_fallocate(f.fileno(), 0, stat.f_bavail * stat.f_frsize - data.nbytes // 2)
        x = jask.open(path)
        with pytest.raises(jask.DiskFullError):
            if write == "setitem":
                # float64 0.1: no 32-bit value holds it; every chunk met (a key meeting a
                # few chunks writes only those: tests/test_region_writes.py), so no room
                x[::7, :] = 0.1
            else:
                x.update_(x.at[:, np.array([0, 7])].add(0.1))
        assert_bytes_equal(path, data, f"{write} on a full disk")
        assert sorted(os.listdir(mount)) == ["a.zarr", "ballast"]
        del x


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
def test_a_float_past_a_float_stores_range_is_infinity_as_numpy(x64, tmp_path, small_budget):
    """numpy writes 1e300 into float32 as inf (with its overflow warning), and
    so does jax.numpy: no refusal, which is for integers only."""
    data = _data("float32")
    path = _store(tmp_path, data)
    want = data.copy()
    with np.errstate(over="ignore"):
        want[0, :2] = 1e300
        want[1, :2] = np.array([-1e300, 1.0])
    with jax.enable_x64(x64), pytest.warns(RuntimeWarning, match="overflow"):  # numpy's own
        x = jask.open(path)
        x[0, :2] = 1e300
        x[1, :2] = np.array([-1e300, 1.0])
    assert np.isinf(want[0, :2]).all() and np.isneginf(want[1, 0])
    assert_bytes_equal(path, want, "1e300 into float32")
