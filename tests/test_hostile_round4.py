"""Issue 43, round four of hostile inputs: indexing and small values.

Each row is checked against numpy or jax.numpy on an in-memory copy:

- an index out of range raises IndexError naming the index and the axis, on
  every indexing path (basic ints, index arrays in memory and on disk,
  negative and mixed, several axes, ``take``/``take_along_axis``, the Array
  API's ``take``, a lookup ``table[L]`` streamed over a tiny budget, and under
  ``jit``, where the task that reads the indices raises), never NaN or
  -2147483648; ``mode="fill"`` still fills when asked for;
- ``isin`` never matches a test value by wrap-around: every integer dtype of
  ``x`` against test values past its range, negative ones for unsigned ``x``,
  fractions, NaN, infinities;
- ``xp.take(table, L)`` with labels on disk over the budget looks them up, as
  ``jask.take`` and ``table[L]`` do;
- ``pad`` keeps the sign of a zero (``constant_values=(0.0, -0.0)``), in every
  mode;
- ``unique_*`` return jax.numpy's dtypes, with x64 on and off.
"""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
import jask.array_api as xp

RNG = np.random.default_rng(43)


def _np(a):
    return np.asarray(a.to_numpy() if hasattr(a, "to_numpy") else a)


# --- out-of-range indices: IndexError naming the index and the axis --------------------------

#: (case id, index function of (X, extras), message): X is 4 x 3 (in memory: small) or
#: 400 x 30 (streamed: many tiles at 64 KB); every case is numpy's IndexError too
OUT_OF_RANGE = [
    ("cols-array", lambda X, n, m, d: X[:, [0, m]], r"index 3\d* is out of bounds for axis 1"),
    ("rows-negative", lambda X, n, m, d: X[[-n - 1, 0]], r"index -\d+ is out of bounds for axis 0"),
    ("rows-past-end", lambda X, n, m, d: X[[0, n]], r"index \d+ is out of bounds for axis 0"),
    ("rows-numpy-int64", lambda X, n, m, d: X[np.array([1, n + 7], np.int64)],
     r"index \d+ is out of bounds for axis 0"),
    ("rows-2**32", lambda X, n, m, d: X[np.array([2**32])],  # no wrap onto row 0
     r"index 4294967296 is out of bounds for axis 0"),
    ("rows--2**40", lambda X, n, m, d: X[np.array([-2**40])],
     r"index -1099511627776 is out of bounds for axis 0"),
    ("rows-uint64", lambda X, n, m, d: X[np.array([2**63 + 1], np.uint64)],
     r"index 9223372036854775809 is out of bounds for axis 0"),
    ("rows-jax-array", lambda X, n, m, d: X[jnp.array([0, n])],
     r"index \d+ is out of bounds for axis 0"),
    ("cols-2d-array", lambda X, n, m, d: X[:, np.array([[0], [m]])],
     r"index \d+ is out of bounds for axis 1"),
    ("ellipsis-cols", lambda X, n, m, d: X[..., [-m - 1]],
     r"index -\d+ is out of bounds for axis 1"),
    ("rows-on-disk", lambda X, n, m, d: X[d["rows"]], r"index \d+ is out of bounds for axis 0"),
    ("cols-on-disk", lambda X, n, m, d: X[:, d["cols"]], r"index \d+ is out of bounds for axis 1"),
    ("two-axes", lambda X, n, m, d: X[[0, 1], [0, m]], r"index \d+ is out of bounds for axis 1"),
    ("slice-and-array", lambda X, n, m, d: X[1:3, [0, m]],
     r"index \d+ is out of bounds for axis 1"),
    ("int-and-array", lambda X, n, m, d: X[0, [m]], r"index \d+ is out of bounds for axis 1"),
    ("basic-int", lambda X, n, m, d: X[-n - 1], r"index -\d+ is out of bounds for axis 0"),
    ("basic-ints", lambda X, n, m, d: X[0, m], r"index \d+ is out of bounds for axis 1"),
    ("jask.take", lambda X, n, m, d: jask.take(X, np.array([0, n]), axis=0),
     r"index \d+ is out of bounds for axis 0"),
    ("jask.take-axis1", lambda X, n, m, d: jask.take(X, np.array([-m - 1]), axis=1),
     r"index -\d+ is out of bounds for axis 1"),
    ("jask.take-flat", lambda X, n, m, d: jask.take(X, np.array([n * m])),
     r"index \d+ is out of bounds for axis 0"),
    ("jask.take-promise", lambda X, n, m, d: jask.take(X, np.array([n]), axis=0,
                                                       mode="promise_in_bounds"),
     r"index \d+ is out of bounds for axis 0"),
    ("xp.take", lambda X, n, m, d: xp.take(X, xp.asarray([0, n]), axis=0),
     r"index \d+ is out of bounds for axis 0"),
    ("xp.take-on-disk", lambda X, n, m, d: xp.take(X, d["cols"], axis=1),
     r"index \d+ is out of bounds for axis 1"),
    ("take_along_axis", lambda X, n, m, d: jask.take_along_axis(
        X, np.full((n, 1), m), axis=1), r"index \d+ is out of bounds for axis 1"),
    ("xp.take_along_axis", lambda X, n, m, d: xp.take_along_axis(
        X, xp.asarray(np.full((1, m), -n - 1)), axis=0), r"index -\d+ is out of bounds for axis 0"),
]

#: the same, as numpy indexes the in-memory copy (each must raise there too)
NUMPY = {
    "cols-array": lambda x, n, m: x[:, [0, m]], "rows-negative": lambda x, n, m: x[[-n - 1, 0]],
    "rows-past-end": lambda x, n, m: x[[0, n]], "rows-numpy-int64": lambda x, n, m: x[[1, n + 7]],
    "rows-2**32": lambda x, n, m: x[np.array([2**32])],
    "rows--2**40": lambda x, n, m: x[np.array([-2**40])],
    "rows-uint64": lambda x, n, m: x[np.array([2**63 + 1], np.uint64)],
    "rows-jax-array": lambda x, n, m: x[[0, n]], "cols-2d-array": lambda x, n, m: x[:, [[0], [m]]],
    "ellipsis-cols": lambda x, n, m: x[..., [-m - 1]], "rows-on-disk": lambda x, n, m: x[[0, n]],
    "cols-on-disk": lambda x, n, m: x[:, [0, m]], "two-axes": lambda x, n, m: x[[0, 1], [0, m]],
    "slice-and-array": lambda x, n, m: x[1:3, [0, m]], "int-and-array": lambda x, n, m: x[0, [m]],
    "basic-int": lambda x, n, m: x[-n - 1], "basic-ints": lambda x, n, m: x[0, m],
    "jask.take": lambda x, n, m: np.take(x, [0, n], axis=0),
    "jask.take-axis1": lambda x, n, m: np.take(x, [-m - 1], axis=1),
    "jask.take-flat": lambda x, n, m: np.take(x, [n * m]),
    "jask.take-promise": lambda x, n, m: np.take(x, [n], axis=0),
    "xp.take": lambda x, n, m: np.take(x, [0, n], axis=0),
    "xp.take-on-disk": lambda x, n, m: np.take(x, [0, m], axis=1),
    "take_along_axis": lambda x, n, m: np.take_along_axis(x, np.full((n, 1), m), axis=1),
    "xp.take_along_axis": lambda x, n, m: np.take_along_axis(x, np.full((1, m), -n - 1), axis=0),
}

SIZES = {"small": (4, 3), "streamed": (400, 30)}  # 48 KB float32: tiles at 64 KB


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("case", [c[0] for c in OUT_OF_RANGE])
def test_an_index_out_of_range_raises_naming_it_and_its_axis(case, size, dtype, small_budget):
    _, index, message = next(c for c in OUT_OF_RANGE if c[0] == case)
    n, m = SIZES[size]
    x = (RNG.integers(0, 200, (n, m)) % (2 if dtype == np.bool_ else 200)).astype(dtype)
    X = jask.from_numpy(x)
    on_disk = {"rows": jask.from_numpy(np.array([0, n], np.int32)),
               "cols": jask.from_numpy(np.array([0, m], np.int32))}
    with pytest.raises(IndexError):
        NUMPY[case](x, n, m)
    with pytest.raises(IndexError, match=message):
        _np(index(X, n, m, on_disk))


#: (case id, jask function of X, numpy function of x): in-range negative and mixed indices
IN_RANGE = [
    ("rows-negative-mixed", lambda X: X[[-4, 0, 3, -1]], lambda x: x[[-4, 0, 3, -1]]),
    ("cols-negative", lambda X: X[:, [-1, 0, -3]], lambda x: x[:, [-1, 0, -3]]),
    ("int64-rows", lambda X: X[np.array([-4, 2], np.int64)], lambda x: x[[-4, 2]]),
    ("two-axes-negative", lambda X: X[[-1, 0], [2, -3]], lambda x: x[[-1, 0], [2, -3]]),
    ("take-negative", lambda X: jask.take(X, np.array([-1, 0]), axis=1),
     lambda x: np.take(x, [-1, 0], axis=1)),
    ("xp.take-flat-negative", lambda X: xp.take(xp.reshape(X, (-1,)), xp.asarray([-12, 11])),
     lambda x: np.take(x, [-12, 11])),
    ("take_along_axis-negative", lambda X: jask.take_along_axis(X, np.array([[-1], [0], [2], [-3]]),
                                                                axis=1),
     lambda x: np.take_along_axis(x, np.array([[-1], [0], [2], [-3]]), axis=1)),
]


@pytest.mark.parametrize("case", [c[0] for c in IN_RANGE])
def test_negative_and_mixed_indices_in_range_give_numpys_values(case, small_budget):
    _, got, want = next(c for c in IN_RANGE if c[0] == case)
    x = np.arange(12, dtype=np.int32).reshape(4, 3) - 6
    np.testing.assert_array_equal(_np(got(jask.from_numpy(x))), want(x), err_msg=case)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint16, np.bool_])
def test_mode_fill_still_fills_when_asked_for(dtype, small_budget):
    x = (np.arange(12) % 2 if dtype == np.bool_ else np.arange(12)).astype(dtype).reshape(4, 3)
    X = jask.from_numpy(x)
    idx = np.array([0, 4, -5, 2**33])  # 2**33 fills, never wraps onto row 0
    # (jax.numpy with x64 off wraps 2**33 to 0 as it makes the indices int32: 4 stands in)
    want = jnp.take(jnp.asarray(x), jnp.asarray(np.array([0, 4, -5, 4])), axis=0, mode="fill")
    got = jask.take(X, idx, axis=0, mode="fill")
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(_np(got), np.asarray(want))
    got = jask.take(X, idx, axis=0, mode="fill", fill_value=7)
    np.testing.assert_array_equal(_np(got), np.asarray(
        jnp.take(jnp.asarray(x), jnp.asarray(np.array([0, 4, -5, 4])), axis=0, mode="fill",
                 fill_value=7)))
    along = np.array([[0], [3], [-4], [1]])
    np.testing.assert_array_equal(
        _np(jask.take_along_axis(X, along, axis=1, mode="fill")),
        np.asarray(jnp.take_along_axis(jnp.asarray(x), jnp.asarray(along), axis=1, mode="fill")))
    for mode in ("clip", "wrap"):
        np.testing.assert_array_equal(
            _np(jask.take(X, idx[:3], axis=0, mode=mode)),
            np.asarray(jnp.take(jnp.asarray(x), jnp.asarray(idx[:3]), axis=0, mode=mode)))
    with pytest.raises(ValueError, match="'raise' .*'fill'"):
        jask.take(X, idx, axis=0, mode="nearest")


def test_in_memory_arrays_follow_the_same_default(small_budget):
    x = np.arange(6.0, dtype=np.float32)
    with pytest.raises(IndexError, match="index 6 is out of bounds for axis 0 with size 6"):
        jask.take(x, np.array([6]))
    with pytest.raises(IndexError, match="index -7 is out of bounds for axis 0"):
        jask.take_along_axis(x, np.array([-7]), axis=0)
    np.testing.assert_array_equal(np.asarray(jask.take(x, np.array([6]), mode="fill")), [np.nan])
    # traced indices into an in-memory x are jax.numpy's, which cannot raise: they fill
    # (docs/promises.rst says so; a DiskArray's gather task raises instead)
    traced = jax.jit(lambda i: jask.take(x, i))(jnp.array([6]))
    np.testing.assert_array_equal(np.asarray(traced), [np.nan])


@pytest.mark.parametrize("size", list(SIZES))
def test_under_jit_the_task_that_reads_the_indices_raises(size, small_budget, monkeypatch):
    """Traced indices are known when the program runs: the gather's task
    checks them and raises (XLA wraps the error; its message is kept)."""
    # JAX logs the callback's error with its traceback, whose frames would keep X's store
    # alive in pytest's captured log past the test's leak check
    monkeypatch.setattr(logging.getLogger("jax._src.callback"), "disabled", True)
    n, m = SIZES[size]
    x = RNG.standard_normal((n, m)).astype(np.float32)
    X = jask.from_numpy(x)
    f = jax.jit(lambda X, i: jask.sum(jask.take(X, i, axis=0)))
    np.testing.assert_allclose(float(f(X, jnp.array([0, n - 1]))), x[[0, n - 1]].sum(),
                               rtol=1e-5)
    with pytest.raises(Exception, match=f"index {n} is out of bounds for axis 0 with size {n}"):
        f(X, jnp.array([0, n])).block_until_ready()
    g = jax.jit(lambda X, i: jask.sum(X[:, i]))
    with pytest.raises(Exception, match=f"index -{m + 1} is out of bounds for axis 1"):
        g(X, jnp.array([-m - 1])).block_until_ready()
    fill = jax.jit(lambda X, i: jask.sum(jask.take(X, i, axis=0, mode="fill", fill_value=0.0)))
    np.testing.assert_allclose(float(fill(X, jnp.array([0, n]))), x[0].sum(), rtol=1e-5)


# --- a lookup: a small table at labels on disk, over the budget ------------------------------

@pytest.mark.jask_budget("1MB")
def test_a_lookup_at_labels_on_disk_over_the_budget(jask_scratch):
    """200,000 int32 labels (800 KB) on disk, a 1 MB budget: ``xp.take``,
    ``jask.take`` and ``table[L]`` each stream the lookup; one label out of
    range raises IndexError from the task that reads it."""
    table = np.arange(10, dtype=np.float32) * 1.5 - 3
    labels = RNG.integers(-10, 10, 200_000).astype(np.int32)
    L = jask.from_numpy(labels)
    T = xp.asarray(table)
    want = table[labels]
    for name, got in (("xp.take", xp.take(T, L)), ("jask.take", jask.take(T, L)),
                      ("table[L]", T[L]), ("numpy-table", jask.take(table, L))):
        assert isinstance(got, jask.DiskArray), name
        np.testing.assert_array_equal(_np(got), want, err_msg=name)
    for bad in (10, -11, 2**31 - 1):
        labels_bad = labels.copy()
        labels_bad[123_456] = bad
        L_bad = jask.from_numpy(labels_bad)
        for name, f in (("xp.take", lambda: xp.take(T, L_bad)),
                        ("jask.take", lambda: jask.take(T, L_bad)), ("table[L]", lambda: T[L_bad])):
            with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 0 "
                                                 "with size 10"):
                _np(f())
        filled = _np(jask.take(T, L_bad, mode="fill"))
        assert np.isnan(filled[123_456]) and np.array_equal(np.delete(filled, 123_456),
                                                            np.delete(want, 123_456))


# --- isin: no match by wrap-around ------------------------------------------------------------

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.bool_]

#: test values, each alone and all together; the right answer is exact membership
TEST_VALUES = [2**8, 2**8 + 1, 2**16 + 1, 2**31, 2**32, 2**32 + 1, 2**32 - 1, 2**40, 2**63,
               2**64 - 1, -1, -255, -2**31 - 1, -2**63, 1.5, -0.5, 2.0, 1e30, float("nan"),
               float("inf"), float("-inf")]


def _x_values(dtype) -> np.ndarray:
    """0, 1, 2, the extremes, and -1 for signed dtypes: what wrap-around lands on."""
    if dtype == np.bool_:
        return np.array([False, True, False])
    info = np.iinfo(dtype)
    values = [0, 1, 2, info.max, info.min, info.max - 1] + ([-1, -2] if info.min < 0 else [])
    return np.array(values, dtype)


def _exact_isin(x: np.ndarray, test: list) -> np.ndarray:
    """Python's comparison of ints and floats is exact: no promotion, no wrap."""
    return np.array([any(int(v) == t for t in test) for v in x.tolist()])


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_isin_never_matches_by_wrap_around(dtype, x64, small_budget):
    stored = _x_values(dtype)
    with jax.enable_x64(x64):
        X = jask.from_numpy(stored)
        x = np.asarray(jnp.asarray(stored))  # X as a jax.Array: int32 for int64 with x64 off
        for value in TEST_VALUES:
            for spelled in (np.asarray([value]), [value]):
                got = _np(jask.isin(X, spelled))
                np.testing.assert_array_equal(got, _exact_isin(x, [value]),
                                              err_msg=f"{np.dtype(dtype)} in {spelled!r}")
                inverted = _np(jask.isin(X, spelled, invert=True))
                np.testing.assert_array_equal(inverted, ~_exact_isin(x, [value]))
        # every kind of test array at once: int64, uint64, float64, Python ints past 64 bits
        for spelled in (np.array([2**40, -1, 1, 2**32 + 1], np.int64),
                        np.array([2**64 - 1, 2**32, 2], np.uint64),
                        np.array([1.5, 2.0, 2.0**64, np.nan, -1.0]),
                        np.array([2**70, -2**70, 2], dtype=object)):
            np.testing.assert_array_equal(_np(jask.isin(X, spelled)),
                                          _exact_isin(x, spelled.tolist()),
                                          err_msg=f"{np.dtype(dtype)} in {spelled!r}")
        # numpy's answer where it is exact (test values it holds, or far from any it holds)
        np.testing.assert_array_equal(_np(xp.isin(X, np.array([1, 2**40]))),
                                      _exact_isin(x, [1, 2**40]))


def test_isin_of_floats_past_the_range_is_no_infinity(small_budget):
    x = np.array([np.inf, -np.inf, 1.0, 0.0], np.float32)
    got = _np(jask.isin(jask.from_numpy(x), np.array([1e300, -1e300, 1.0])))
    np.testing.assert_array_equal(got, np.isin(x, np.array([1e300, -1e300, 1.0])))
    got = _np(jask.isin(jask.from_numpy(x), np.array([np.inf])))
    np.testing.assert_array_equal(got, [True, False, False, False])


# --- pad: the sign of a zero ------------------------------------------------------------------

PADS = [
    ("after-minus-zero", 1, (2, 3), dict(constant_values=(0.0, -0.0))),
    ("before-minus-zero", 1, (2, 3), dict(constant_values=(-0.0, 0.0))),
    ("all-minus-zero", 1, (2, 3), dict(constant_values=-0.0)),
    ("per-axis", 2, ((1, 2), (2, 1)), dict(constant_values=((0.0, -0.0), (-0.0, 0.0)))),
    ("per-axis-corners", 2, ((1, 1), (1, 1)), dict(constant_values=((-0.0, -0.0), (0.0, 0.0)))),
    ("nan-and-minus-zero", 1, (1, 2), dict(constant_values=(np.nan, -0.0))),
    ("edge", 1, (2, 2), dict(mode="edge")),
    ("reflect", 1, (2, 2), dict(mode="reflect")),
    ("symmetric", 1, (2, 2), dict(mode="symmetric")),
    ("wrap", 1, (3, 3), dict(mode="wrap")),
    ("edge-2d", 2, ((1, 1), (2, 2)), dict(mode="edge")),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", [c[0] for c in PADS])
def test_pad_keeps_the_sign_of_zero(case, dtype, small_budget):
    _, ndim, width, kwargs = next(c for c in PADS if c[0] == case)
    x = np.array([-0.0, 1.0, 0.0, -2.0, -0.0], dtype)
    if ndim == 2:
        x = np.stack([x, -x, x[::-1]])
    with jax.enable_x64(dtype == np.float64):
        got = _np(jask.pad(jask.from_numpy(x), width, **kwargs))
        ref = np.asarray(jnp.pad(jnp.asarray(x), width, **kwargs))
    want = np.pad(x, width, **kwargs)
    assert got.dtype == want.dtype
    # byte for byte: -0.0 is not 0.0, and NaN is NaN
    assert got.tobytes() == want.tobytes(), (case, got, want)
    assert got.tobytes() == ref.tobytes(), (case, got, ref)


# --- unique_*: jax.numpy's dtypes -------------------------------------------------------------

UNIQUES = ["unique_values", "unique_counts", "unique_inverse", "unique_all"]


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint8, np.bool_, np.int64,
                                   np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(7,), (3, 4)], ids=["1d", "2d"])
def test_unique_returns_jax_numpys_dtypes(shape, dtype, x64, small_budget):
    x = (RNG.integers(0, 3, shape) % (2 if dtype == np.bool_ else 3)).astype(dtype)
    with jax.enable_x64(x64):
        X = jask.from_numpy(x)
        for name in UNIQUES:
            want = getattr(jnp, name)(jnp.asarray(x))
            fields = ("values",) if name == "unique_values" else want._fields
            wants = (want,) if name == "unique_values" else tuple(want)
            for ns in (jask, xp):
                got = getattr(ns, name)(X)
                if name == "unique_values":
                    got = (got,)
                else:
                    assert got._fields == fields, name
                for field, g, w in zip(fields, got, wants):
                    g = _np(g)
                    assert g.dtype == w.dtype, (name, field, g.dtype, w.dtype)
                    np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"{name} {field}")
