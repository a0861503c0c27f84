"""Round four of hostile inputs (issue 43), the numerical rows: factorizations
of matrices with a wide spread of singular values against jax.numpy's own
error, quantiles with ``q`` out of range, and an eager ``vmap`` within the
budget.

Accuracy is judged as the issue asks: jask's error against a float64 numpy
reference is no larger than jax.numpy's error on the in-memory copy of the
same data (with a few ulps of slack, ``_SLACK``, for rounding that differs).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jask
import jask.array_api as xp


def _spread(m: int, n: int, singular_values, dtype, seed: int = 0) -> np.ndarray:
    """An m x n matrix (m >= n) with exactly these singular values, as ``dtype``."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((m, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return ((u * np.asarray(singular_values)) @ v.T).astype(dtype)


def _on_disk(data: np.ndarray, tmp_path, chunks) -> xp.Array:
    """``data`` in a Zarr store with these (ragged) chunks, as the namespace's array."""
    stored = jask.save(jask.from_numpy(data), tmp_path / "x.zarr", chunks=chunks)
    return xp.asarray(stored)


def _svd_errors(data: np.ndarray, u, s, vh) -> dict:
    """A thin SVD's errors against the float64 reference, relative to the
    largest singular value where that is the scale."""
    ref = data.astype(np.float64)
    u, s, vh = (np.asarray(a, np.float64) for a in (u, s, vh))
    want_s = np.linalg.svd(ref, compute_uv=False)
    k = s.size
    scale = max(want_s[0], 1e-30)
    return {"reconstruction": np.abs((u * s) @ vh - ref).max() / scale,
            "U orthonormal": np.abs(u.T @ u - np.eye(k)).max(),
            "Vh orthonormal": np.abs(vh @ vh.T - np.eye(k)).max(),
            "singular values": np.abs(s - want_s).max() / scale}


def _qr_errors(data: np.ndarray, q, r) -> dict:
    ref = data.astype(np.float64)
    q, r = np.asarray(q, np.float64), np.asarray(r, np.float64)
    scale = max(np.linalg.norm(ref, 2), 1e-30)
    return {"reconstruction": np.abs(q @ r - ref).max() / scale,
            "Q orthonormal": np.abs(q.T @ q - np.eye(q.shape[1])).max(),
            "R triangular": np.abs(np.tril(r, -1)).max() / scale}


#: a few ulps: rounding that differs between two correct routes
_SLACK = 8


def _no_worse(got: dict, want: dict, dtype, case: str):
    eps = np.finfo(dtype).eps
    for name in want:
        assert got[name] <= 2 * want[name] + _SLACK * eps, (case, name, got, want)


def _deficient(kind: str):
    a = np.random.default_rng(1).standard_normal((20_000, 3)).astype(np.float32)
    return {"duplicated-columns": np.concatenate([a, a], axis=1),
            "zero-column": np.concatenate([a, np.zeros_like(a[:, :1])], axis=1),
            "all-zero": np.zeros_like(a)}[kind]


#: (case id, m, n, singular values (or the data), dtype, chunks): tall matrices
#: over the in-memory share of the 1 MB budget, factorized out of core
TALL = [
    ("issue-100-50-10-0.1", 20_000, 4, [100, 50, 10, 0.1], np.float32, (3001, 4)),
    ("spread-1e-3", 20_000, 4, np.logspace(0, -3, 4), np.float32, (4999, 3)),
    ("spread-1e-6", 20_000, 6, np.logspace(0, -6, 6), np.float32, (2777, 5)),
    ("spread-1e-6-one-tiny", 30_000, 5, [1, 1, 1, 1, 1e-6], np.float32, (4001, 5)),
    ("below-rounding-1e-9", 20_000, 4, [1, 0.5, 0.1, 1e-9], np.float32, (3001, 4)),
    ("equal", 20_000, 4, [3, 3, 3, 3], np.float32, (3001, 2)),
    ("float64-spread-1e-12", 12_000, 5, np.logspace(0, -12, 5), np.float64, (2501, 5)),
    ("float64-one-tiny", 12_000, 4, [1e3, 1, 1, 1e-10], np.float64, (1999, 3)),
    # exactly rank deficient: X v is exactly zero, no rounding gives U a direction there
    *[(kind, 20_000, None, _deficient(kind), np.float32, (3001, 2))
      for kind in ("duplicated-columns", "zero-column", "all-zero")],
]


def _tall_data(case: str):
    _, m, n, sv, dtype, chunks = next(c for c in TALL if c[0] == case)
    data = sv if n is None else _spread(m, n, sv, dtype)
    return data, dtype, chunks


@pytest.mark.parametrize("wide", [False, True], ids=["tall", "wide"])
@pytest.mark.parametrize("case", [c[0] for c in TALL])
def test_svd_out_of_core_at_jax_numpys_error(case, wide, tmp_path, jask_scratch):
    data, dtype, chunks = _tall_data(case)
    with jax.enable_x64(dtype == np.float64):
        if wide:
            data, chunks = np.ascontiguousarray(data.T), chunks[::-1]
        x = _on_disk(data, tmp_path, chunks)
        jask.set_memory_budget("1MB", scratch_dir=jask_scratch.path)
        assert not jask.api.interop.fits_in_memory(data.shape, dtype)  # out of core
        u, s, vh = xp.linalg.svd(x, full_matrices=False)
        got = _svd_errors(data, u.to_numpy(), s.to_numpy(), vh.to_numpy())
        want = _svd_errors(data, *jnp.linalg.svd(jnp.asarray(data), full_matrices=False))
        print(case, wide, got, want)
        _no_worse(got, want, dtype, case)


@pytest.mark.parametrize("case", [c[0] for c in TALL])
def test_qr_out_of_core_at_jax_numpys_error(case, tmp_path, jask_scratch):
    data, dtype, chunks = _tall_data(case)
    with jax.enable_x64(dtype == np.float64):
        x = _on_disk(data, tmp_path, chunks)
        jask.set_memory_budget("1MB", scratch_dir=jask_scratch.path)
        q, r = xp.linalg.qr(x)
        got = _qr_errors(data, q.to_numpy(), r.to_numpy())
        want = _qr_errors(data, *jnp.linalg.qr(jnp.asarray(data)))
        print(case, got, want)
        _no_worse(got, want, dtype, case)


# --- quantiles: q out of range ------------------------------------------------------------

#: (function, the top of q's range)
QUANTILE_FUNCTIONS = [(jask.quantile, 1), (jask.nanquantile, 1), (jask.percentile, 100),
                      (jask.nanpercentile, 100)]

#: (case id, q as a fraction of the top of the range): every one has an element outside
#: [0, top] or NaN
BAD_Q = [
    ("above", 1.5),
    ("below", -0.25),
    ("just-above", 1.0001),
    ("nan", np.nan),
    ("inf", np.inf),
    ("array-one-above", np.array([0.0, 0.5, 1.01])),
    ("array-one-below", np.array([-1e-6, 0.5])),
    ("array-one-nan", np.array([0.25, np.nan])),
    ("jax-array", jnp.asarray([0.5, 2.0])),
]


@pytest.mark.parametrize("method", jask.api.quantiles.METHODS)
@pytest.mark.parametrize("case", [c[0] for c in BAD_Q])
@pytest.mark.parametrize("function", [f for f, _ in QUANTILE_FUNCTIONS],
                         ids=lambda f: f.__name__)
def test_quantile_q_out_of_range_raises_as_numpy(function, case, method, small_budget):
    top = dict((f.__name__, t) for f, t in QUANTILE_FUNCTIONS)[function.__name__]
    q = dict(BAD_Q)[case] * top
    data = np.random.default_rng(2).standard_normal((30, 7)).astype(np.float32)
    with pytest.raises(ValueError):  # numpy's answer: the reference
        getattr(np, function.__name__)(data, np.asarray(q), axis=0, method=method)
    for x in (jask.from_numpy(data), jnp.asarray(data)):  # on disk and in memory alike
        with pytest.raises(ValueError, match=rf"{function.__name__}: q must be in the range "
                                             rf"\[0, {top}\]"):
            function(x, q, axis=0, method=method)


@pytest.mark.parametrize("function", [f for f, _ in QUANTILE_FUNCTIONS],
                         ids=lambda f: f.__name__)
def test_quantile_q_at_the_ends_of_its_range(function, small_budget):
    top = dict((f.__name__, t) for f, t in QUANTILE_FUNCTIONS)[function.__name__]
    data = np.random.default_rng(3).standard_normal((30, 7)).astype(np.float32)
    q = np.array([0.0, 1.0]) * top
    got = function(jask.from_numpy(data), q, axis=0)
    want = getattr(jnp, function.__name__)(jnp.asarray(data), q, axis=0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(got), [data.min(0), data.max(0)])


def test_quantile_traced_q(small_budget):
    """A traced q has no values to check: refused with a DiskArray x (its
    values fix what is read); with an in-memory x, jax.numpy's clamp."""
    data = np.arange(5.0, dtype=np.float32)
    with pytest.raises(TypeError, match="q must be known outside jit"):
        jax.jit(lambda q: jask.quantile(jask.from_numpy(data), q))(0.5)
    clamped = jax.jit(lambda q: jask.quantile(jnp.asarray(data), q))(1.5)
    assert float(clamped) == float(jnp.quantile(data, 1.5)) == 4.0


# --- eager vmap within the budget ---------------------------------------------------------

def _least_squares(ns, X, y):
    return lambda w: ns.sum(ns.square(X @ w - y))


def _logistic(ns, X, y):
    softplus = jask.nn.softplus if ns is jask else jax.nn.softplus
    return lambda w: ns.mean(softplus(X @ w) - y * (X @ w))


def _elementwise(ns, X, y):
    return lambda w: ns.sum(ns.abs(X * w))


#: (case id, X's chunks): narrow chunks of few rows, column chunks holding every row,
#: X's own chunks; each once made the eager product's tile every row x 16 x 6
VMAP_CHUNKS = [("rows-1250", (1250, 6)), ("rows-1000-cols-1", (1000, 1)),
               ("cols-1", (20_000, 1)), ("cols-3", (20_000, 3)), ("whole", (20_000, 6))]


@pytest.mark.parametrize("loss", [_least_squares, _logistic, _elementwise],
                         ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("case", [c[0] for c in VMAP_CHUNKS])
def test_eager_vmap_runs_within_the_budget_as_jit_does(case, loss, tmp_path, jask_scratch):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20_000, 6)).astype(np.float32)
    y = (rng.standard_normal(20_000) > 0).astype(np.float32)
    W = jnp.asarray(0.1 * rng.standard_normal((16, 6)).astype(np.float32))
    X = jask.save(jask.from_numpy(x), tmp_path / "X.zarr", chunks=dict(VMAP_CHUNKS)[case])
    Y = jask.from_numpy(y)
    jask.set_memory_budget("4MB", scratch_dir=jask_scratch.path)
    want = jax.vmap(loss(jnp, jnp.asarray(x), jnp.asarray(y)))(W)
    eager = jax.vmap(loss(jask, X, Y))(W)
    compiled = jax.jit(jax.vmap(loss(jask, X, Y)))(W)
    np.testing.assert_allclose(eager, want, rtol=2e-5)
    np.testing.assert_array_equal(eager, compiled)


@pytest.mark.parametrize("chunks", [(1000, 6), (400_000, 1)], ids=["rows", "cols"])
def test_narrow_products_plan_bands_within_the_budget(chunks, tmp_path, jask_scratch):
    """X @ w and X @ W.T on a narrow X of small chunks (each too small to be
    worth a read, the whole product over the budget): bands of chunk rows.
    The peak resident memory stays within the budget (X is 9.6 MB, 2.4 x it)."""
    from jask.base.rss import current_rss, peak_rss, reset_peak_rss

    x = np.random.default_rng(5).standard_normal((400_000, 6)).astype(np.float32)
    X = jask.save(jask.from_numpy(x), tmp_path / "X.zarr", chunks=chunks)
    w, W = np.ones(6, np.float32), np.linspace(-1, 1, 96, dtype=np.float32).reshape(16, 6)
    jask.set_memory_budget("4MB", scratch_dir=jask_scratch.path)
    del x
    jask.sum(X @ w)  # compiled once before measuring
    base = current_rss()
    measured = reset_peak_rss()
    got = float(jask.sum(X @ w))
    batched = jax.vmap(lambda v: jask.sum(X @ v))(jnp.asarray(W))
    if measured:
        assert peak_rss() - base < 4_000_000, (peak_rss() - base)
    x = X.to_numpy().astype(np.float64)
    np.testing.assert_allclose(got, (x @ w).sum(), rtol=1e-5)
    np.testing.assert_allclose(batched, (x @ W.T.astype(np.float64)).sum(0), rtol=1e-4)


#: (case id, function of (its linalg, a square matrix S, a tall matrix T)): the
#: factorizations run in memory on what jask reads, so their values are jax.numpy's own
IN_MEMORY = [
    ("cholesky", lambda la, S, T: la.cholesky(S)),  # S positive definite for this case
    ("eigh", lambda la, S, T: la.eigh(S + S.T)[0]),
    ("eigvalsh", lambda la, S, T: la.eigvalsh(S + S.T)),
    ("inv", lambda la, S, T: la.inv(S)),
    ("solve", lambda la, S, T: la.solve(S, S[:, :2])),
    ("det", lambda la, S, T: la.det(S)),
    ("slogdet", lambda la, S, T: la.slogdet(S)[1]),
    ("pinv", lambda la, S, T: la.pinv(T)),
    ("matrix_rank", lambda la, S, T: la.matrix_rank(T)),
    ("svdvals", lambda la, S, T: la.svdvals(T)),
    ("svd-small", lambda la, S, T: la.svd(T, full_matrices=False)[1]),
    ("qr-small-R", lambda la, S, T: la.qr(T)[1]),
    ("matrix_norm-2", lambda la, S, T: la.matrix_norm(T, ord=2)),
    ("matrix_norm-nuc", lambda la, S, T: la.matrix_norm(T, ord="nuc")),
    ("matrix_norm--2", lambda la, S, T: la.matrix_norm(T, ord=-2)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", [c[0] for c in IN_MEMORY])
def test_in_memory_factorizations_of_a_wide_spread_are_jax_numpys(case, dtype, tmp_path,
                                                                    small_budget):
    spread = np.logspace(0, -6 if dtype == np.float32 else -12, 6)
    with jax.enable_x64(dtype == np.float64):
        s, t = _spread(6, 6, spread, dtype, seed=6), _spread(40, 6, spread, dtype, seed=7)
        if case == "cholesky":  # positive definite, its eigenvalues the spread
            v = _spread(6, 6, np.ones(6), np.float64, seed=6)
            s = ((v * spread) @ v.T).astype(dtype)
        (tmp_path / "s").mkdir()
        (tmp_path / "t").mkdir()
        S = _on_disk(s, tmp_path / "s", (4, 5))
        T = _on_disk(t, tmp_path / "t", (7, 4))
        f = dict(IN_MEMORY)[case]
        got, want = f(xp.linalg, S, T), f(jnp.linalg, jnp.asarray(s), jnp.asarray(t))
        got = np.asarray(got.to_numpy() if hasattr(got, "to_numpy") else got)
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=50 * np.finfo(dtype).eps,
                                   atol=50 * np.finfo(dtype).eps * np.abs(want).max())
