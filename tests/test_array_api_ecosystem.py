"""What other projects' Array API code calls on jask.array_api: ``linalg``,
``x[key] = v`` and ``x.at``, ``unique_*``.

Each family is one table of cases, each a function of a namespace and its
input arrays, run on DiskArrays (through ``jask.array_api``) and on the
in-memory copy (through ``jax.numpy``); values and dtypes are compared.
Inputs have shapes the 64 KB budget splits into many tiles.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
import jask.array_api as xp

RNG = np.random.default_rng(0)
DATA = {
    "X": RNG.standard_normal((3000, 7)).astype(np.float32),   # 84 KB: tall, over the budget
    "S": (lambda a: a @ a.T + 7 * np.eye(7))(RNG.standard_normal((7, 7))).astype(np.float32),
    "B": RNG.standard_normal((7, 3)).astype(np.float32),
    "v": RNG.standard_normal(7).astype(np.float32),
    "w": RNG.standard_normal((60, 50)).astype(np.float32),   # 12 KB: several tiles
    "c": RNG.integers(0, 5, 5000).astype(np.int32) * 3,       # labels, 20 KB
    "f": np.round(RNG.standard_normal((90, 40)), 1).astype(np.float32),  # repeats, signs
}


def _inputs(ns):
    return {k: ns.asarray(v) for k, v in DATA.items()}


def _np(x):
    if isinstance(x, jask.DiskArray):
        return x.to_numpy()
    return np.asarray(x)


def _check(got, want, name, rtol=2e-5, atol=2e-5):
    got = list(got) if isinstance(got, tuple) else [got]
    want = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want), name
    for g, w in zip(got, want):
        w = np.asarray(w)
        # the namespace's arrays: DiskArrays, small results in memory behind its type
        assert isinstance(g, xp.Array) and not isinstance(g, jax.Array), (name, type(g))
        assert _np(g).dtype == w.dtype, (name, _np(g).dtype, w.dtype)
        assert _np(g).shape == w.shape, (name, _np(g).shape, w.shape)
        np.testing.assert_allclose(_np(g), w, rtol=rtol, atol=atol, err_msg=name)


def _reconstructs(ns, q_r):
    """Q @ R (and Q's orthogonality), which is unique where Q and R are not."""
    q, r = q_r
    return q @ r, ns.matrix_transpose(q) @ q if ns is jnp else xp.matrix_transpose(q) @ q


#: (case id, function of (namespace, its linalg, inputs)); jnp's linalg is the reference
LINALG = [
    ("cholesky", lambda ns, la, d: la.cholesky(d["S"])),
    ("cholesky-upper", lambda ns, la, d: la.cholesky(d["S"], upper=True)),
    ("det", lambda ns, la, d: la.det(d["S"])),
    ("eigh-gram", lambda ns, la, d: la.eigh(ns.matmul(ns.matrix_transpose(d["X"]), d["X"]))[0]),
    ("eigvalsh", lambda ns, la, d: la.eigvalsh(d["S"])),
    ("inv", lambda ns, la, d: la.inv(d["S"])),
    ("solve", lambda ns, la, d: la.solve(d["S"], d["B"])),
    ("solve-vector", lambda ns, la, d: la.solve(d["S"], d["v"])),
    ("slogdet", lambda ns, la, d: tuple(la.slogdet(d["S"]))),
    ("pinv", lambda ns, la, d: la.pinv(d["B"])),
    ("matrix_rank", lambda ns, la, d: la.matrix_rank(d["B"])),
    ("matrix_power", lambda ns, la, d: la.matrix_power(d["S"], 3)),
    ("svdvals", lambda ns, la, d: la.svdvals(d["w"][:30, :40])),
    ("svd-S", lambda ns, la, d: la.svd(d["w"][:30, :40], full_matrices=False)[1]),
    ("qr-small", lambda ns, la, d: ns.matmul(*la.qr(d["B"]))),
    ("diagonal", lambda ns, la, d: la.diagonal(d["S"], offset=1)),
    ("trace", lambda ns, la, d: la.trace(d["S"])),
    ("outer", lambda ns, la, d: la.outer(d["v"], d["X"][:50, 0])),
    ("cross", lambda ns, la, d: la.cross(d["X"][:, :3], d["X"][:, 3:6])),
    ("vector_norm-2", lambda ns, la, d: la.vector_norm(d["X"], axis=1)),
    ("vector_norm-all", lambda ns, la, d: la.vector_norm(d["X"])),
    ("vector_norm-1-keep", lambda ns, la, d: la.vector_norm(d["w"], axis=0, ord=1,
                                                           keepdims=True)),
    ("vector_norm-inf", lambda ns, la, d: la.vector_norm(d["X"], axis=0, ord=float("inf"))),
    ("vector_norm-3", lambda ns, la, d: la.vector_norm(d["w"], axis=(0, 1), ord=3)),
    ("vector_norm-0", lambda ns, la, d: la.vector_norm(d["f"], axis=1, ord=0)),
    ("matrix_norm-fro", lambda ns, la, d: la.matrix_norm(d["X"])),
    ("matrix_norm-nuc", lambda ns, la, d: la.matrix_norm(d["S"], ord="nuc")),
    ("matmul", lambda ns, la, d: la.matmul(d["X"], d["B"])),
    ("vecdot", lambda ns, la, d: la.vecdot(d["X"], d["v"])),
    ("tensordot", lambda ns, la, d: la.tensordot(d["X"], d["B"], axes=1)),
]


@pytest.mark.parametrize("case", [c[0] for c in LINALG])
def test_linalg_matches_jax_numpy(case, small_budget):
    f = dict(LINALG)[case]
    want = f(jnp, jnp.linalg, {k: jnp.asarray(v) for k, v in DATA.items()})
    got = f(xp, xp.linalg, _inputs(xp))
    _check(got, want, case, rtol=2e-4, atol=2e-4)


#: (case id, the tall or wide data): qr and svd out of core, by tall-skinny QR
TALL = [
    ("tall", DATA["X"]),                                            # 3000 x 7, float32
    ("tall-scaled", DATA["X"] * np.logspace(0, 3, 7, dtype=np.float32)),  # condition 1e3
    ("tall-float64", RNG.standard_normal((2000, 5))),
    ("wide", np.ascontiguousarray(DATA["X"].T)),                    # svd only
    ("tall-20-columns", RNG.standard_normal((100, 20))),  # scikit-learn's PCA (mle) tests
]


@pytest.mark.parametrize("case", [c[0] for c in TALL])
def test_tall_qr_and_svd_out_of_core(case, small_budget):
    data = dict(TALL)[case]
    x = xp.asarray(data)
    assert data.nbytes > 8000  # over the in-memory share of the 64 KB budget: out of core
    ref = np.linalg.svd(data.astype(np.float64), compute_uv=False)
    u, s, vh = xp.linalg.svd(x, full_matrices=False)
    # DiskArrays or small ones in memory: all the namespace's, never a bare jax.Array
    assert all(isinstance(a, xp.Array) and not isinstance(a, jax.Array) for a in (u, s, vh))
    assert (u.shape, s.shape, vh.shape) == tuple(
        np.shape(a) for a in jnp.linalg.svd(jnp.asarray(data), full_matrices=False))
    eps = np.finfo(u.dtype).eps
    np.testing.assert_allclose(s.to_numpy(), ref, rtol=50 * eps, atol=0)  # as numpy's, to ulps
    U, S, Vh = u.to_numpy(), s.to_numpy(), vh.to_numpy()
    np.testing.assert_allclose((U * S) @ Vh, data, atol=200 * eps * ref[0])
    k = min(data.shape)
    cond = ref[0] / ref[-1]
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=50 * eps * cond)
    np.testing.assert_allclose(Vh @ Vh.T, np.eye(k), atol=50 * eps)
    if data.shape[0] < data.shape[1]:
        return
    q, r = xp.linalg.qr(x)
    Q, R = q.to_numpy(), r.to_numpy()
    np.testing.assert_allclose(Q @ R, data, atol=200 * eps * ref[0])
    np.testing.assert_allclose(Q.T @ Q, np.eye(k), atol=50 * eps)  # refined: orthonormal
    np.testing.assert_array_equal(np.triu(R), R)
    _, want_r = np.linalg.qr(data.astype(np.float64))
    np.testing.assert_allclose(np.abs(R), np.abs(want_r), rtol=1e-3, atol=1e-3 * ref[0])


def test_tall_factorizations_refuse_what_they_cannot_do(small_budget):
    x = xp.asarray(DATA["X"])
    with pytest.raises(ValueError, match="full_matrices=False only"):
        xp.linalg.svd(x)
    with pytest.raises(ValueError, match="mode 'reduced' only"):
        xp.linalg.qr(x, mode="complete")
    # rank deficient: factorized still, Q and U orthonormal (as jax.numpy's)
    deficient = np.concatenate([DATA["X"][:, :3], DATA["X"][:, :3]], axis=1)
    q = xp.linalg.qr(xp.asarray(deficient)).Q.to_numpy()
    np.testing.assert_allclose(q.T @ q, np.eye(6), atol=1e-5)
    u, s, _ = xp.linalg.svd(xp.asarray(deficient), full_matrices=False)
    np.testing.assert_allclose(s.to_numpy()[:3],
                               np.linalg.svd(deficient, compute_uv=False)[:3], rtol=1e-5)
    np.testing.assert_allclose(u.to_numpy().T @ u.to_numpy(), np.eye(6), atol=1e-5)


def test_linalg_accepts_jax_arrays_and_refuses_what_does_not_fit(small_budget):
    S = jnp.asarray(DATA["S"])
    inv = xp.linalg.inv(S)  # jax arrays in, the namespace's out (small: in memory)
    assert isinstance(inv, xp.InMemoryArray) and inv.__array_namespace__() is xp
    w, v = xp.linalg.eigh(xp.asarray(DATA["S"]))  # a named tuple, fields kept
    assert xp.linalg.eigh(S).eigenvalues.shape == (7,)
    big = xp.asarray(RNG.standard_normal((3000, 70)).astype(np.float32))  # 820 KB, wide enough
    with pytest.raises(MemoryError, match=r"linalg\.inv: a DiskArray of shape \(3000, 70\).*"
                                          r"X\.T @ X"):
        xp.linalg.inv(big)
    with pytest.raises(TypeError, match="inside jax.jit"):
        jax.jit(lambda a: xp.linalg.inv(a).shape)(xp.asarray(DATA["S"]))


#: (case id, key, value): x[key] = value on a copy of w (60 x 50)
WRITES = [
    ("int", 3, 1.5),
    ("negative-int", (-1, -2), 7.0),
    ("row-slice", slice(10, 40), np.arange(50, dtype=np.float32)),
    ("strided", (slice(1, None, 7), slice(None, None, 3)), -2.0),
    ("column", (slice(None), 4), np.arange(60, dtype=np.float32)),
    ("ellipsis", (Ellipsis, slice(45, None)), np.ones((60, 5), np.float32) * 4),
    ("int-array", (np.array([5, 0, 59, 5]), slice(None)), 9.0),
    ("int-array-values", (slice(None), np.array([1, 3, 49])), np.arange(3, dtype=np.float32)),
    ("mask-1d-values", (np.arange(60) % 3 == 0,), np.arange(20 * 50, dtype=np.float32)
     .reshape(20, 50)),
    ("bool-axis", (slice(None), np.arange(50) % 4 == 0), np.arange(13, dtype=np.float32)),
    ("mask-numpy", DATA["w"] > 0.5, 0.0),
    ("mask-disk", "disk-mask", -1.0),
    ("mask-size-1-value", DATA["w"] < -1, np.full((1,), 8.0, np.float32)),
    ("everything", slice(None), 3.0),
    ("int-value-cast", (0, slice(None)), 2),  # a Python int into float32
    ("disk-value", slice(0, 60, 2), "disk-value"),
]


def _numpy_key(key, w):
    if isinstance(key, str):
        return w > 0.0
    return key


@pytest.mark.parametrize("case", [c[0] for c in WRITES])
def test_setitem_matches_numpy(case, small_budget):
    _, key, value = next(c for c in WRITES if c[0] == case)
    w = DATA["w"]
    want = w.copy()
    if isinstance(value, str):  # a DiskArray value: every other row of -w
        value_np = -w[::2]
        value = xp.asarray(value_np)
    else:
        value_np = value
    want[_numpy_key(key, w)] = value_np
    x = xp.asarray(w)
    key_jask = xp.asarray(w) > 0.0 if isinstance(key, str) else key
    before, view = x.to_numpy(), x[5:20]
    filename = x.filename
    x[key_jask] = value
    np.testing.assert_array_equal(x.to_numpy(), want, err_msg=case)
    assert x.dtype == np.float32 and x.filename == filename
    np.testing.assert_array_equal(view.to_numpy(), before[5:20])  # views keep their values
    # the functional form gives the same, inside jit too (for keys known at trace time)
    y = xp.asarray(w)
    np.testing.assert_array_equal(y.at[key_jask].set(value).to_numpy(), want, err_msg=case)
    np.testing.assert_array_equal(y.to_numpy(), w)
    if not isinstance(key, str):
        got = jax.jit(lambda y, v: y.at[key].set(v))(y, value)
        np.testing.assert_array_equal(got.to_numpy(), want, err_msg=case)


#: (case id, data, mask (a function of the data; jask's mask is a DiskArray when
#: "disk"), empty value): x[mask] = v selecting nothing, a no-op in numpy and jax.numpy
EMPTY_WRITES = [
    ("2d-numpy-mask", "w", lambda a: np.zeros(a.shape, bool), np.zeros(0, np.float32)),
    ("2d-disk-mask", "w", "disk", np.zeros(0, np.float32)),
    ("2d-value-2d", "w", lambda a: np.zeros(a.shape, bool), np.zeros((0, 50), np.float32)),
    ("1d-numpy-mask", "v", lambda a: a > 100, np.zeros(0, np.float32)),
    ("1d-disk-mask", "c", "disk", np.zeros(0, np.int32)),
    ("3d-numpy-mask", "f3", lambda a: np.zeros(a.shape, bool), np.zeros(0, np.float32)),
]


@pytest.mark.parametrize("case", [c[0] for c in EMPTY_WRITES])
def test_empty_writes_selecting_nothing_are_no_ops(case, small_budget):
    """scikit-learn's ``p[p == 0] += tiny`` with no zeros: the gather is
    empty and writing it back changes nothing (numpy's, jax.numpy's no-op)."""
    _, name, make_mask, value = next(c for c in EMPTY_WRITES if c[0] == case)
    data = DATA["f"].reshape(30, 12, 10) if name == "f3" else DATA[name]
    x = xp.asarray(data)
    mask = x > 100 if make_mask == "disk" else make_mask(data)
    mask_np = data > 100 if make_mask == "disk" else mask
    want = data.copy()
    want[mask_np] = value.reshape(-1)  # numpy takes a 1-D value here
    jnp_want = jnp.asarray(data).at[mask_np].set(jnp.asarray(value))
    filename = x.filename
    with jask.track() as t:
        x[mask] = value
    assert t.bytes_written == 0 and x.filename == filename
    np.testing.assert_array_equal(x.to_numpy(), want)
    np.testing.assert_array_equal(x.at[mask].set(value).to_numpy(), np.asarray(jnp_want))
    x[mask] += value.dtype.type(1)  # scikit-learn's spelling: x[mask] = x[mask] + 1
    np.testing.assert_array_equal(x.to_numpy(), want)


@pytest.mark.parametrize("method", ["add", "multiply", "min", "max", "subtract", "power"])
def test_at_methods_match_jax(method, small_budget):
    w = DATA["w"]
    key = (slice(3, 50, 2), np.array([0, 7, 49]))
    value = np.float32(1.5)
    want = getattr(jnp.asarray(w).at[key], method)(value)
    got = getattr(xp.asarray(w).at[key], method)(value)
    np.testing.assert_allclose(got.to_numpy(), np.asarray(want), rtol=1e-6)


def test_pending_results_keep_their_values(small_budget):
    x = xp.asarray(DATA["w"])
    pending = x * 2.0  # lazy: computed when first read
    x[0] = 100.0
    np.testing.assert_array_equal(pending.to_numpy(), DATA["w"] * 2.0)
    assert float(x.to_numpy()[0, 0]) == 100.0
    y = xp.asarray(DATA["w"]) * 2.0  # writing into a pending result itself
    z = y + 1.0
    y[0] = 5.0
    np.testing.assert_array_equal(y.to_numpy()[0], np.full(50, 5.0, np.float32))
    np.testing.assert_array_equal(y.to_numpy()[1:], DATA["w"][1:] * 2.0)
    np.testing.assert_array_equal(z.to_numpy(), DATA["w"] * 2.0 + 1.0)


def test_bad_writes_are_refused_before_writing(small_budget):
    x = xp.asarray(DATA["w"])
    stamp = x.to_numpy()
    cases = [
        ((slice(None), 2), np.ones(59), ValueError, r"shape \(59,\) does not broadcast"),
        ((70, 0), 1.0, IndexError, "out of bounds"),
        ((np.array([0, 60]), slice(None)), 1.0, IndexError, "index 60 is out of bounds"),
        (DATA["w"] > 0, np.ones(3), ValueError, "must be a scalar here"),
        (DATA["w"] > 0, np.ones(0), ValueError, "0 values but the mask has True"),
        ((np.array([0, 1]), np.array([2, 3])), 1.0, IndexError, "several axes"),
        ((None, 0), 1.0, IndexError, "newaxis"),
        ((np.ones((2, 2), int), 0), 1.0, IndexError, "1-D integer or boolean"),
    ]
    for key, value, error, match in cases:
        with pytest.raises(error, match=match):
            x[key] = value
        np.testing.assert_array_equal(x.to_numpy(), stamp)  # nothing was written
    with pytest.raises(IndexError, match="repeated indices"):
        x.at[np.array([1, 1]), 0].add(1.0)
    with pytest.raises(TypeError, match=r"x\.at\[index\]\.set\(value\)"):
        jax.jit(lambda y: y.__setitem__(0, 1.0))(x)
    with pytest.raises(AttributeError, match="no method 'frobnicate'"):
        x.at[0].frobnicate(1.0)


def _with_nans():
    f = DATA["f"].copy()
    f[3, 4] = f[80, 0] = f[80, 1] = np.nan
    f[0, 0], f[0, 1] = 0.0, -0.0
    return f


#: (case id, the data): unique_* of each, through jask.array_api and jax.numpy
UNIQUE = [
    ("labels-1d", DATA["c"]),                     # 20 KB: several bands
    ("floats-2d", DATA["f"]),                     # many values, one row per band or more
    ("nans-and-zeros", _with_nans()),
    ("bool", DATA["f"] > 0),
    ("int8-3d", DATA["c"][:4800].reshape(40, 12, 10).astype(np.int8)),
    ("one-value", np.full((70, 90), 2, np.uint16)),
    ("wide-rows", np.tile(DATA["c"][:3], (2, 4000))),  # a row over a band: the flat copy
]


#: unique_all (every output) on every input; the other three, which share its
#: sort and counting pass, on two of them in CI's run and on all in the slow set.
UNIQUE_PARAMS = [
    pytest.param(function, case, id=f"{function}-{case}",
                 marks=pytest.mark.slow if function != "unique_all" and i >= 2 else ())
    for function in ("unique_values", "unique_counts", "unique_inverse", "unique_all")
    for i, (case, _) in enumerate(UNIQUE)]


@pytest.mark.parametrize("function, case", UNIQUE_PARAMS)
def test_unique_matches_jax_numpy(case, function, small_budget):
    data = dict(UNIQUE)[case]
    want = getattr(jnp, function)(jnp.asarray(data))
    got = getattr(xp, function)(xp.asarray(data))
    want = tuple(want) if isinstance(want, tuple) else (want,)
    got = tuple(got) if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, xp.Array) and not isinstance(g, jax.Array), (case, function)
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (case, function, g.shape, w.shape)
        np.testing.assert_array_equal(g.to_numpy(), w, err_msg=f"{case} {function}")
        if w.dtype.kind == "f":  # the zero's sign too: the one at its first position
            np.testing.assert_array_equal(np.signbit(g.to_numpy()), np.signbit(w))
    # jask's top level keeps jax.numpy's habits: the values in memory
    assert isinstance(jask.unique_values(xp.asarray(data)), jax.Array)


def test_unique_refusals(small_budget):
    many = xp.asarray(np.arange(5000, dtype=np.float32))  # 5,000 values: 20 KB x 5 held
    with pytest.raises(MemoryError, match=r"unique_values: a DiskArray of shape \(5000,\) has "
                                          r"more unique values"):
        xp.unique_values(many)
    with pytest.raises(TypeError, match="inside jax.jit"):
        jax.jit(lambda x: jask.unique_values(x))(xp.asarray(DATA["c"]))


#: (case id, the data, the mask): x[mask] with the mask a DiskArray, against numpy
DISK_MASKS = [
    ("rows", DATA["X"], DATA["X"][:, 0] > 0.3),
    ("vector", DATA["v"], DATA["v"] > 0),
    ("none-true", DATA["v"], DATA["v"] > 99),
    ("columns", DATA["w"], (slice(None), DATA["w"][0] > 0)),
]


@pytest.mark.parametrize("case", [c[0] for c in DISK_MASKS])
def test_disk_masks_match_numpy(case, small_budget):
    _, data, mask = next(c for c in DISK_MASKS if c[0] == case)
    key = (tuple(xp.asarray(m) if isinstance(m, np.ndarray) else m for m in mask)
           if isinstance(mask, tuple) else xp.asarray(mask))
    got = xp.asarray(data)[key]
    np.testing.assert_array_equal(_np(got), data[mask], err_msg=case)


def test_disk_masks_over_the_in_memory_share_are_refused(small_budget):
    big = xp.asarray(np.ones((300, 70), np.float32))
    with pytest.raises(IndexError, match=r"over the in-memory share.*jask\.where"):
        big[big > 0]  # a 21,000-element mask: over 8 KB
    with pytest.raises(IndexError, match="inside jit"):
        jax.jit(lambda x, m: x[m])(xp.asarray(DATA["v"]), xp.asarray(DATA["v"] > 0))


def test_zero_d_bounds_and_disk_indices(small_budget):
    x, w = xp.asarray(DATA["w"]), DATA["w"]
    n = xp.sum(xp.asarray(DATA["v"] > 0))  # a 0-d integer result, as clients slice with
    np.testing.assert_array_equal(x[:n, n:].to_numpy(), w[:int(n), int(n):])
    idx = np.array([3, 0, 59, 3])
    np.testing.assert_array_equal(_np(x[xp.asarray(idx)]), w[idx])
    np.testing.assert_array_equal(_np(xp.take(x, xp.asarray(idx), axis=0)), w[idx])
    with pytest.raises(IndexError, match="slice bounds must be Python ints"):
        x[:1.5]


@pytest.mark.parametrize("case", ["vector", "rows-small", "rows-large", "3d"])
def test_iteration_matches_numpy(case, small_budget):
    data = {"vector": DATA["v"], "rows-small": DATA["X"][:40], "rows-large": DATA["w"].T,
            "3d": DATA["c"][:600].reshape(5, 6, 20)}[case]
    got = [_np(r) for r in xp.asarray(data)]
    assert len(got) == len(data)
    for g, w in zip(got, data):
        np.testing.assert_array_equal(g, w, err_msg=case)


def test_iteration_refusals(small_budget):
    with pytest.raises(TypeError, match="not iterable"):  # JAX's own refusal of a tracer
        jax.jit(lambda x: [r for r in x][0])(xp.asarray(DATA["v"]))


#: (case id, table, mode): take of a small table at 20,000 indices on disk (over the share)
LOOKUPS = [
    ("classes", np.array([3, 7, 11], np.int32), None),
    ("floats-fill", np.array([0.5, -1.0, 2.0, 8.0], np.float32), "fill"),
    ("clip", np.array([0.5, -1.0, 2.0], np.float32), "clip"),
    ("wrap", np.array([True, False, True]), "wrap"),
]


@pytest.mark.parametrize("case", [c[0] for c in LOOKUPS])
def test_take_of_a_small_table_at_disk_indices(case, small_budget):
    _, table, mode = next(c for c in LOOKUPS if c[0] == case)
    idx = RNG.integers(-5, 6, 20000).astype(np.int32)  # out of range ones too
    if mode is None:  # the default: an index out of range raises, as numpy's (issue 43)
        with pytest.raises(IndexError, match=f"out of bounds for axis 0 with size {len(table)}"):
            jask.take(xp.asarray(table), xp.asarray(idx)).to_numpy()
        idx = np.clip(idx, -len(table), len(table) - 1)
    want = jnp.take(jnp.asarray(table), idx, mode=mode)
    for t in (xp.asarray(table), jnp.asarray(table)):
        got = jask.take(t, xp.asarray(idx), mode=mode)
        assert isinstance(got, jask.DiskArray), case
        assert got.dtype == want.dtype, case
        np.testing.assert_array_equal(got.to_numpy(), np.asarray(want), err_msg=case)
    inside = np.clip(idx, -3, 2)  # x[indices] as scikit-learn's classes_[pred] does
    np.testing.assert_array_equal(xp.asarray(table)[xp.asarray(inside)].to_numpy(),
                                  np.asarray(jnp.asarray(table)[inside]))


#: (case id, function of the inputs): results of every kind that are 0-d or small, each an
#: array of jask.array_api (a DiskArray or an InMemoryArray), never a bare jax.Array
CLOSED = [
    ("sum-all", lambda d: xp.sum(d["X"])),
    ("mean-axis", lambda d: xp.mean(d["X"], axis=0)),
    ("var-keepdims", lambda d: xp.var(d["w"], axis=1, keepdims=True)),
    ("max", lambda d: xp.max(d["c"])),
    ("argmax", lambda d: xp.argmax(d["X"], axis=0)),
    ("all", lambda d: xp.all(d["X"] > -100.0)),
    ("count_nonzero", lambda d: xp.count_nonzero(d["c"])),
    ("vecdot-scalar", lambda d: xp.vecdot(d["v"], d["v"])),
    ("matmul-vectors", lambda d: d["v"] @ d["v"]),
    ("matmul-gram", lambda d: xp.matrix_transpose(d["X"]) @ d["X"]),
    ("linalg-inv", lambda d: xp.linalg.inv(d["S"])),
    ("linalg-det", lambda d: xp.linalg.det(d["S"])),
    ("linalg-eigh", lambda d: xp.linalg.eigh(d["S"]).eigenvalues),
    ("linalg-norm", lambda d: xp.linalg.vector_norm(d["X"])),
    ("index-scalar", lambda d: d["X"][3, 2]),
    ("index-row", lambda d: d["X"][3]),
    ("index-small-scalar", lambda d: xp.mean(d["X"], axis=0)[2]),
    ("asarray-0d", lambda d: xp.asarray(2.5)),
    ("full-0d", lambda d: xp.full((), 3, dtype=xp.int32)),
    ("reshape-0d", lambda d: xp.reshape(xp.asarray([1.5]), ())),
    ("compare-0d", lambda d: xp.sum(d["X"]) > 0.0),
    ("compare-operator", lambda d: xp.mean(d["X"]) == xp.mean(d["X"])),
    ("arithmetic-0d", lambda d: 2.0 * xp.sum(d["X"]) - 1),
    ("elementwise-small", lambda d: xp.sqrt(xp.abs(xp.mean(d["X"], axis=0)))),
    ("unique", lambda d: xp.unique_values(d["c"])),
    ("where-small", lambda d: xp.where(xp.mean(d["X"], axis=0) > 0, 1.0, 0.0)),
    ("iterate-row", lambda d: next(iter(d["X"]))),
]


@pytest.mark.parametrize("case", [c[0] for c in CLOSED])
def test_the_namespace_is_closed(case, small_budget):
    import array_api_compat
    f = dict(CLOSED)[case]
    data = _inputs(xp)
    got = f(data)
    assert isinstance(got, xp.Array) and not isinstance(got, jax.Array), (case, type(got))
    assert got.__array_namespace__() is xp
    # beside the DiskArray it came from, one namespace and one device
    assert array_api_compat.array_namespace(got, data["X"]) is xp, case
    assert got.device == data["X"].device == xp.DISK
    assert array_api_compat.device(got) == xp.DISK
    # and the namespace takes it back, with DiskArrays and jax arrays alike
    again = xp.add(got, jnp.zeros(got.shape, got.dtype)) if got.dtype != np.bool_ \
        else xp.logical_or(got, jnp.zeros(got.shape, bool))
    assert isinstance(again, xp.Array) and not isinstance(again, jax.Array), case
    np.testing.assert_array_equal(_np(again), _np(got))


def test_in_memory_arrays_behave_as_arrays(small_budget):
    X = xp.asarray(DATA["X"])
    m = xp.mean(X, axis=0)                      # (7,), in memory
    assert isinstance(m, xp.InMemoryArray) and m.shape == (7,) and m.dtype == xp.float32
    want = DATA["X"].astype(np.float64).mean(0)
    np.testing.assert_allclose(np.asarray(m), want, rtol=1e-5)
    np.testing.assert_allclose(np.from_dlpack(m), want, rtol=1e-5)
    np.testing.assert_allclose(jnp.asarray(m), want, rtol=1e-5)   # __jax_array__
    np.testing.assert_allclose(jnp.sin(m), np.sin(want), rtol=1e-5)
    s = xp.sum(xp.asarray(DATA["c"]))
    assert int(s) == int(DATA["c"].sum()) and [0, 1, 2][s - s + 1] == 1   # __index__
    assert float(m[0]) == pytest.approx(want[0], rel=1e-5) and bool(m[0] == m[0])
    assert isinstance(X - m, jask.DiskArray)     # broadcast against the disk: streamed
    assert isinstance(m - X, jask.DiskArray)
    assert isinstance(X @ m, jask.DiskArray) and isinstance(m @ m, xp.InMemoryArray)
    assert isinstance(np.float32(2) * m, xp.InMemoryArray)  # numpy defers, as to jax.Array
    assert isinstance(np.ones(7, np.float32) + m, xp.InMemoryArray)
    S = xp.linalg.inv(xp.asarray(DATA["S"]))
    assert S.mT.shape == (7, 7) and S.T.shape == (7, 7) and S.to_device(xp.DISK) is S
    np.testing.assert_array_equal(_np(X[:, xp.argmax(m)]), DATA["X"][:, int(np.argmax(want))])
    k = xp.sum(xp.asarray(DATA["v"] > 0))
    assert X[:k].shape == (int(k), 7)           # a 0-d result as a slice bound
    m2 = xp.asarray(m)
    assert m2 is m                              # asarray of the namespace's own array
    m2 = xp.asarray(m, copy=True)
    m2[0] = 100.0                               # __setitem__ rebinds: no one else sees it
    assert float(m2[0]) == 100.0 and float(m[0]) != 100.0
    assert float(m.at[1].set(5.0)[1]) == 5.0 and isinstance(m.at[1].set(5.0), xp.InMemoryArray)
    assert [float(v) for v in xp.asarray(m)][:2] == [float(m[0]), float(m[1])]
    with pytest.raises(ValueError, match="live on"):
        m.to_device("cpu")
    # jask's top level keeps jax.numpy's habit: small results as jax.Arrays
    assert isinstance(jask.mean(X, axis=0), jax.Array) and isinstance(jask.sum(m), jax.Array)


def test_in_jit_the_namespace_stays_closed(small_budget):
    X = xp.asarray(DATA["X"])

    @jax.jit
    def f(X, b):
        m = xp.mean(X, axis=0)                  # a tracer behind the namespace's type
        assert isinstance(m, xp.InMemoryArray) and m.__array_namespace__() is xp
        assert isinstance(b, xp.InMemoryArray)  # taken in as a pytree
        return xp.sum(m * b), X - m

    b = xp.mean(X, axis=0)
    total, centred = f(X, b)
    assert isinstance(total, xp.InMemoryArray) and isinstance(centred, jask.DiskArray)
    mean = DATA["X"].astype(np.float64).mean(0)
    np.testing.assert_allclose(float(total), float(np.sum(mean * mean)), rtol=1e-4)
    np.testing.assert_allclose(centred.to_numpy(), DATA["X"] - mean, atol=1e-5)
    # jax.grad needs its function's value as a jax value: a 0-d result being differentiated
    # is the tracer itself (under jit too, and through jit's outputs)
    w = jnp.ones(7, jnp.float32)
    want = DATA["X"].astype(np.float64).sum(0)
    for grad in (jax.grad(lambda w: xp.sum(X @ w)), jax.jit(jax.grad(lambda w: xp.sum(X @ w))),
                 jax.grad(jax.jit(lambda w: xp.sum(X @ w)))):
        np.testing.assert_allclose(np.asarray(grad(w)), want, rtol=1e-4)


@pytest.mark.parametrize("function", ["var", "std"])
@pytest.mark.parametrize("kwargs", [{}, {"correction": 1}, {"ddof": 1}, {"axis": 0, "ddof": 0},
                                    {"axis": 1, "correction": 2.0}], ids=str)
def test_var_and_std_take_correction_or_numpys_ddof(function, kwargs, small_budget):
    """xarray's ``std``/``var`` pass ``ddof``; the standard names it ``correction``."""
    data = DATA["f"]
    want = getattr(jnp, function)(jnp.asarray(data), **kwargs)
    got = getattr(xp, function)(xp.asarray(data), **kwargs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=1e-6)


def test_correction_and_ddof_together_are_refused(small_budget):
    with pytest.raises(ValueError, match="correction or ddof, not both"):
        xp.var(xp.asarray(DATA["f"]), correction=1, ddof=1)


#: float32 with NaNs, a column of them all NaN (90 x 40: several tiles under the budget)
NANS = np.where(RNG.random((90, 40)) < 0.1, np.nan, DATA["f"]).astype(np.float32)
NANS[:, 5] = np.nan

#: (case id, function of (namespace, data)): what xarray calls on the namespace beyond the
#: standard (its skipna=True reductions, ``cross``, ``differentiate``'s ``gradient``)
XARRAY_CALLS = [
    ("nansum", lambda ns, d: ns.nansum(d["n"], axis=0)),
    ("nansum-all", lambda ns, d: ns.nansum(d["n"])),
    ("nanprod-keepdims", lambda ns, d: ns.nanprod(d["n"][:, :8] * 0.5 + 1.0, axis=1,
                                                  keepdims=True)),
    ("nanmean", lambda ns, d: ns.nanmean(d["n"], axis=1)),
    ("nanmean-all", lambda ns, d: ns.nanmean(d["n"])),
    ("nanvar-ddof", lambda ns, d: ns.nanvar(d["n"], axis=0, ddof=1)),
    ("nanstd", lambda ns, d: ns.nanstd(d["n"], axis=1)),
    ("nanmax", lambda ns, d: ns.nanmax(d["n"], axis=0)),
    ("nanmin-keepdims", lambda ns, d: ns.nanmin(d["n"], axis=1, keepdims=True)),
    ("nanargmax", lambda ns, d: ns.nanargmax(d["n"][:, 6:], axis=0)),
    ("nanargmin", lambda ns, d: ns.nanargmin(d["n"][:, :5], axis=1)),
    ("nanmax-ints", lambda ns, d: ns.nanmax(d["c"])),
    ("cross", lambda ns, d: ns.cross(d["X"][:, :3], d["X"][:, 3:6])),
    ("cross-axis0", lambda ns, d: ns.cross(d["w"][:3], d["w"][3:6], axis=0)),
    ("gradient", lambda ns, d: ns.gradient(d["f"])),
    ("gradient-axis", lambda ns, d: ns.gradient(d["X"], axis=0)),
    ("gradient-spacing", lambda ns, d: ns.gradient(d["w"], 0.5, axis=-1)),
    ("gradient-per-axis", lambda ns, d: ns.gradient(d["w"], 2.0, d["u"])),
    ("gradient-ints", lambda ns, d: ns.gradient(d["c"][:300])),
]


def _xarray_call_data(ns):
    data = {k: ns.asarray(v) for k, v in DATA.items() if k in ("X", "w", "f", "c")}
    data["n"] = ns.asarray(NANS)
    data["u"] = np.arange(50.0) ** 2 / 64  # coordinates (exact in float32), in memory as xarray's
    return data


@pytest.mark.parametrize("case", [c[0] for c in XARRAY_CALLS])
def test_what_xarray_calls_matches_jax_numpy(case, small_budget):
    f = dict(XARRAY_CALLS)[case]
    want = f(jnp, {k: v if k == "u" else jnp.asarray(v)
                   for k, v in _xarray_call_data(np).items()})
    got = f(xp, _xarray_call_data(xp))
    _check(got, tuple(want) if isinstance(want, list) else want,  # jnp.gradient: a list
           case, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("coordinates", [False, True], ids=["uniform", "coordinates"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_matches_numpy_in_float64(edge_order, axis, coordinates, small_budget):
    """jax.numpy has no ``edge_order=2`` and takes coordinates in float32 without x64 (their
    differences lose digits); numpy's formulas in float64 are the reference."""
    spacing = (np.cumsum(RNG.uniform(0.5, 2.0, DATA["X"].shape[axis])),) if coordinates else ()
    X = DATA["X"].astype(np.float64)
    with jax.enable_x64(True):
        got = xp.gradient(xp.asarray(X), *spacing, axis=axis, edge_order=edge_order)
        assert isinstance(got, jask.DiskArray) and got.dtype == np.float64
        want = np.gradient(X, *spacing, axis=axis, edge_order=edge_order)
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-9, atol=1e-9)


def test_gradient_refusals(small_budget):
    x = xp.asarray(DATA["w"])
    with pytest.raises(ValueError, match="edge_order must be 1 or 2"):
        xp.gradient(x, edge_order=3)
    with pytest.raises(ValueError, match="at least 3"):
        xp.gradient(x[:2], axis=0, edge_order=2)
    with pytest.raises(ValueError, match="1-D of length 60"):
        xp.gradient(x, np.arange(5.0), axis=0)
    with pytest.raises(TypeError, match="one per axis"):
        xp.gradient(x, 1.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="out of range"):
        xp.gradient(x, axis=2)


def test_in_memory_searchsorted_answers_the_namespace(small_budget):
    row = xp.asarray(np.sort(DATA["X"][:40, 0])[None])[0]  # x[i] of a small row: in memory
    assert isinstance(row, xp.InMemoryArray)
    for v in (xp.asarray(DATA["v"]), DATA["v"], 0.25):
        got = row.searchsorted(v, side="right")
        assert isinstance(got, xp.Array) and not isinstance(got, jax.Array)
        np.testing.assert_array_equal(_np(got), np.searchsorted(_np(row), v, side="right"))


def test_opt_einsum_answers_the_namespace(small_budget):
    """xarray's ``dot`` calls opt_einsum (when installed), which takes a backend from the
    array's module: jask's arrays name this namespace."""
    opt_einsum = pytest.importorskip("opt_einsum")
    X, v = xp.asarray(DATA["X"]), xp.asarray(DATA["v"])
    got = opt_einsum.contract("ij,j->", X, v)
    assert isinstance(got, xp.InMemoryArray)
    np.testing.assert_allclose(float(got), float(DATA["X"].astype(np.float64).sum(0) @ DATA["v"]),
                               rtol=1e-4)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_take_of_an_in_memory_matrix_at_small_indices_on_disk(axis, small_budget):
    # scikit-learn's svd_flip: take(reshape(Vt, (-1,)), argmax(...) + arange(k) * d), the
    # arange on disk, Vt in memory (PCA's fit under Array API dispatch)
    table = DATA["S"]
    idx = np.array([6, 0, -1, 3], np.int32)
    want = jnp.take(jnp.asarray(table), idx, axis=axis)
    for t in (jnp.asarray(table), xp.asarray(table), np.asarray(table)):
        got = xp.take(t, xp.asarray(idx), axis=axis)
        np.testing.assert_array_equal(_np(got), np.asarray(want))
    with pytest.raises(IndexError, match="out of bounds"):
        xp.take(jnp.asarray(table), xp.asarray(np.array([49 if axis is None else 7])), axis=axis)
