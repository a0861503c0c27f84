"""Transposes, basic slices, unit-axis reshapes and gathers by runs are
views over the same store (jask.store.views): made without reading or
writing, read through by every op, copied before their base changes, and
differentiated as jax.numpy."""
from __future__ import annotations

import gc
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import jask
from jask.store import registry


def _make(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    return x, jask.from_numpy(x)


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-10)


def test_transposes_and_slices_write_nothing(small_budget, rng):
    x, X = _make(rng, (300, 41), np.float32)
    x3, X3 = _make(rng, (3, 300, 41), np.float32)  # an integer drops an axis: X3[1] is large
    with jask.track() as t:
        views = [X.T, jask.transpose(X), jask.permute_dims(X, (1, 0)), X.mT, X[10:200],
                 X[:, 2:9], X3[1], X3[1, 7:250], X.reshape((300, 1, 41)), X[None],
                 X.T[3:9, 1:250], jask.permute_dims(X3, (2, 0, 1))]
        shapes = [v.shape for v in views]
    assert t.bytes_written == 0 and t.bytes_read == 0 and t.graphs == 0
    assert shapes[0] == (41, 300) and shapes[-2] == (6, 249)
    refs = [x.T, x.T, x.T, x.T, x[10:200], x[:, 2:9], x3[1], x3[1, 7:250],
            x.reshape((300, 1, 41)), x[None], x.T[3:9, 1:250], np.transpose(x3, (2, 0, 1))]
    for v, ref in zip(views, refs):
        np.testing.assert_array_equal(v.to_numpy(), ref)
    assert all(registry.spec(v._handle).view is not None for v in views)


def _planned_passes(config, a, b, vectors=(None, None)):
    """Passes over ``a`` that the plan of ``a.T @ b`` states."""
    from jask.engine.ops import products
    plan = products.dot(True, False, (True, True), vectors, a.dtype).plan(
        [registry.spec(a._handle), registry.spec(b._handle)], [], config)
    return plan.passes[0]


@pytest.mark.parametrize("shape", [(2000, 30), (777, 13)])
def test_gram_and_friends_read_x_once(small_budget, rng, dtype, shape):
    """X.T @ X, X.T @ y, X.T @ W: X read once (bytes read from X's store =
    its nbytes) and only the result written."""
    x, X = _make(rng, shape, dtype)
    w, W = _make(rng, (shape[0], 3), dtype)
    y = jask.from_numpy(w[:, 0].copy())
    cases = [(lambda: X.T @ X, x.T @ x, X), (lambda: X.T @ y, x.T @ w[:, 0], y),
             (lambda: X.T @ W, x.T @ w, W),
             (lambda: jask.matmul(jask.matrix_transpose(X), X), x.T @ x, X)]
    for f, ref, b in cases:
        with jask.track() as t:
            out = f().block_until_ready()  # eager ops are lazy: run it inside the block
        np.testing.assert_allclose(out.to_numpy(), ref, **_tol(dtype))
        assert t.passes(X) == 1.0
        assert t.bytes_written == out.nbytes  # no copy of X, no scratch
        if b is not X:
            assert t.passes(b) == 1.0
    assert _planned_passes(small_budget, X, X) == 1
    # a slice of X: its Gram matrix reads the slice's bytes once
    H = X[7:shape[0] - 5]
    with jask.track() as t:
        G = (H.T @ H).block_until_ready()
    np.testing.assert_allclose(G.to_numpy(), x[7:-5].T @ x[7:-5], **_tol(dtype))
    # (the passes its plan states: once, unless the output tiles must be narrower than X)
    planned = _planned_passes(small_budget, H, H)
    assert t.passes(X) * X.nbytes == pytest.approx(planned * H.nbytes)
    assert t.bytes_written == G.nbytes
    # compiled, with a budget where a band group could hold it: the same one pass
    jask.set_memory_budget("4MB", scratch_dir=small_budget.scratch_dir)
    with jask.track() as t:
        out = jax.jit(lambda X: X.T @ X)(X)
    assert t.passes(X) == 1.0 and t.bytes_written == out.nbytes


@pytest.mark.parametrize("shape", [(2000, 30), (777, 13)])
def test_power_iteration_reads_x_once_per_step(small_budget, rng, dtype, shape):
    """``X.T @ (X @ v)`` (a power iteration step): ``X @ v`` and the product
    with the transposed view run in one band group, eagerly and under jit,
    so X is read once and ``X @ v`` never written; on a slice of X too."""
    x, X = _make(rng, shape, dtype)
    v = rng.standard_normal(shape[1]).astype(dtype)
    V = rng.standard_normal((shape[1], 2)).astype(dtype)
    H, h = X[7:shape[0] - 5], x[7:-5]
    step = jax.jit(lambda X, v: X.T @ (X @ v))
    for way in (lambda X, v: X.T @ (X @ v), step, lambda X, v: jask.matrix_transpose(X) @ (X @ v)):
        for A, a, u in ((X, x, v), (X, x, V), (H, h, v)):
            with jask.track() as t:
                out = np.asarray(way(A, u))
            np.testing.assert_allclose(out, a.T @ (a @ u), **_tol(dtype))
            assert t.passes(X) * X.nbytes == pytest.approx(A.nbytes)
            assert t.bytes_written <= out.nbytes
    # three steps, normalised on disk between them: X @ v reads v whole (computed first)

    def iterate(X, v):
        for _ in range(3):
            u = X.T @ (X @ v)
            v = u / jask.sqrt(jask.sum(u * u))
        return v
    ref = v
    for _ in range(3):
        ref = x.T @ (x @ ref)
        ref = ref / np.sqrt(np.sum(ref * ref))
    for way in (iterate, jax.jit(iterate)):
        with jask.track() as t:
            out = np.asarray(way(X, v))
        np.testing.assert_allclose(out, ref, **_tol(dtype))
        assert t.passes(X) == 3.0 and t.bytes_written < X.nbytes / 20


def test_gram_of_a_wide_x_states_its_passes(small_budget, rng):
    """An output too large for the budget goes in column blocks: as many
    passes over X as the plan says."""
    x, X = _make(rng, (1500, 150), np.float32)
    step = jask.visualize(lambda X: X.T @ X, X).steps[-1]
    with jask.track() as t:
        G = (X.T @ X).block_until_ready()
    np.testing.assert_allclose(G.to_numpy(), x.T @ x, rtol=1e-4, atol=1e-3)
    assert t.passes(X) == _planned_passes(small_budget, X, X) > 1
    assert t.bytes_written == G.nbytes
    assert step.held <= small_budget.max_memory


def test_ops_read_through_views(small_budget, rng, dtype, tmp_path):
    x, X = _make(rng, (301, 37), dtype)
    T, S, R = X.T, X[13:250, 5:31], X[:, 3:4].reshape((301,))
    tol = _tol(dtype)
    np.testing.assert_allclose((T * 2.0 + 1.0).to_numpy(), x.T * 2 + 1, **tol)
    np.testing.assert_allclose(np.asarray(jask.sum(S, axis=0)), x[13:250, 5:31].sum(0), **tol)
    np.testing.assert_allclose(np.asarray(T.mean(1)), x.T.mean(1), **tol)
    np.testing.assert_allclose((S.T @ S).to_numpy(), x[13:250, 5:31].T @ x[13:250, 5:31],
                               **tol)
    np.testing.assert_allclose((T @ X).to_numpy(), x.T @ x, **tol)
    H = X[:100]  # starts at 0: not the whole of X
    np.testing.assert_allclose((H.T @ H).to_numpy(), x[:100].T @ x[:100], **tol)
    np.testing.assert_allclose((X[:, :20].T @ X).to_numpy(), x[:, :20].T @ x, **tol)
    np.testing.assert_allclose((X @ T).to_numpy(), x @ x.T, **tol)
    np.testing.assert_allclose(jask.cumsum(R).to_numpy(), np.cumsum(x[:, 3]), **tol)
    np.testing.assert_allclose(jask.sort(S, axis=0).to_numpy(), np.sort(x[13:250, 5:31], 0))
    np.testing.assert_allclose(jask.flip(T, axis=1).to_numpy(), x.T[:, ::-1])
    np.testing.assert_allclose(T.reshape((37 * 301,)).to_numpy(), x.T.reshape(-1))
    np.testing.assert_allclose(jask.concatenate([T, T]).to_numpy(), np.concatenate([x.T, x.T]))
    np.testing.assert_allclose(T[::3].to_numpy(), x.T[::3])  # a step: a copy
    np.testing.assert_allclose(np.asarray(T.to_dask()), x.T)
    S.T.to_zarr(os.fspath(tmp_path / "s.zarr"))
    np.testing.assert_array_equal(zarr.open_array(os.fspath(tmp_path / "s.zarr"))[...],
                                  x[13:250, 5:31].T)
    np.testing.assert_array_equal(np.asarray(S), x[13:250, 5:31])


def test_views_of_views_and_unit_axes(small_budget, rng):
    x, X = _make(rng, (40, 1, 30), np.float32)
    V = X.reshape((40, 30))[3:33].T[2:20, None][:, :, 4:9]
    ref = x.reshape((40, 30))[3:33].T[2:20, None][:, :, 4:9]
    assert V.shape == ref.shape
    np.testing.assert_array_equal(V.to_numpy(), ref)
    np.testing.assert_array_equal((V + 0).to_numpy(), ref)
    view = registry.spec(V._handle).view
    assert view.base.handle == X._handle  # flattened onto the one base


def test_user_stores_read_through_views(small_budget, rng, tmp_path):
    """Stores chunked by plain zarr: ragged, compressed, Zarr v2."""
    # A budget where X.T @ X is one pass over X: with narrower output tiles a
    # compressed X is decoded once into a copy first (plan.ops._decoded_first).
    jask.set_memory_budget(160 * 1024, scratch_dir=small_budget.scratch_dir)
    x = rng.standard_normal((203, 57)).astype(np.float32)
    for name, kwargs in [("ragged", dict(chunks=(50, 23))),
                         ("zstd", dict(chunks=(64, 20), compressors=zarr.codecs.ZstdCodec())),
                         ("v2", dict(chunks=(33, 57), zarr_format=2))]:
        path = os.fspath(tmp_path / f"{name}.zarr")
        arr = zarr.create_array(path, shape=x.shape, dtype=x.dtype, **kwargs)
        arr[...] = x
        X = jask.open(path)
        with jask.track() as t:
            G = (X.T @ X).block_until_ready()
        np.testing.assert_allclose(G.to_numpy(), x.T @ x, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose((X[7:190, 3:50].T + 0).to_numpy(), x[7:190, 3:50].T)
        np.testing.assert_allclose(np.asarray(jask.sum(X.T[:, 11], axis=0)), x[11].sum(),
                                   rtol=1e-5)
        assert t.bytes_written == G.nbytes


def test_update_after_a_view_keeps_its_values(small_budget, rng):
    x, X = _make(rng, (120, 30), np.float32)
    T, S = X.T, X[10:20]
    X.update_(X * 2.0)
    np.testing.assert_array_equal(T.to_numpy(), x.T)
    np.testing.assert_array_equal(S.to_numpy(), x[10:20])
    np.testing.assert_array_equal(X.to_numpy(), x * 2)
    # an optimizer step writes X's store in place too
    w, Wd = _make(rng, (30, 4), np.float32)
    V = Wd[:, 1:3]
    opt = jask.optim.sgd(0.5)
    state = opt.init(Wd)
    g = jask.from_numpy(np.ones_like(w))
    path = Wd.filename
    Wd, state = jask.optim.step(opt, g, state, Wd)
    assert Wd.filename == path  # stepped in place
    np.testing.assert_array_equal(V.to_numpy(), w[:, 1:3])
    np.testing.assert_allclose(Wd.to_numpy(), w - 0.5)


def test_update_of_a_view_writes_its_own_copy(small_budget, rng):
    x, X = _make(rng, (50, 50), np.float32)
    T = X.T
    T.update_(X + 1.0)  # T's own values change, X's never
    np.testing.assert_array_equal(T.to_numpy(), x + 1)
    np.testing.assert_array_equal(X.to_numpy(), x)
    assert T.filename != X.filename
    X.update_(X.T)  # a store updated from a view of itself
    np.testing.assert_array_equal(X.to_numpy(), x.T)
    np.testing.assert_array_equal(T.to_numpy(), x + 1)


def test_filename_and_to_memmap_of_a_view_copy_it(small_budget, rng):
    x, X = _make(rng, (60, 7), np.float32)
    T = X[5:40].T
    with jask.track() as t:
        path = T.filename
    assert path != X.filename and t.bytes_written == T.nbytes
    np.testing.assert_array_equal(zarr.open_array(path)[...], x[5:40].T)
    m = T.to_memmap()
    m[0, 0] = 123.0  # writes the copy, never X
    assert X.to_numpy()[5, 0] == x[5, 0] and T.to_numpy()[0, 0] == 123.0


def test_a_view_keeps_its_base_alive(small_budget, rng):
    x, X = _make(rng, (80, 9), np.float32)
    base = X.filename
    T = X.T
    del X
    jask.collect()
    assert os.path.isdir(base)
    np.testing.assert_array_equal(T.to_numpy(), x.T)
    del T
    jask.collect()
    assert base not in registry.live_paths()


#: views whose base's only DiskArray is dropped: the view alone holds the base
VIEWS = {"transposed": lambda a: a.T, "slice of a slice": lambda a: a[1:][::2],
         "strided": lambda a: a[::2, ::2], "slice of a transpose": lambda a: a.T[1:, :3]}
#: pending (lazy) reads of a view, as jask and as numpy
READERS = {"where": (lambda v: jask.where(v > 0, 1.0, v), lambda v: np.where(v > 0, 1.0, v)),
           "arithmetic": (lambda v: v * 2.0 + 1.0, lambda v: v * 2.0 + 1.0)}
#: writes into the view (it gets its own copy; its base is then read only by the reader)
WRITES = {"setitem": lambda v: v.__setitem__((0, 0), 9.0),
          "setitem twice": lambda v: (v.__setitem__((0, 0), 9.0), v.__setitem__((1, 1), 8.0)),
          "update_": lambda v: v.update_(v + 1.0)}


def _write_numpy(name, v):
    v = v.copy()
    if name == "update_":
        return v + 1.0
    v[0, 0] = 9.0
    if name == "setitem twice":
        v[1, 1] = 8.0
    return v


def _settle():
    gc.collect()
    jask.collect()


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("view", list(VIEWS))
def test_a_pending_read_of_a_view_keeps_its_base(small_budget, rng, view, reader, write):
    """A deferred op reading a view reads its base: the base's store lives
    until the op is computed or dropped, even once the view is written (and
    so has a copy of its own) and nothing else holds the base (scikit-learn's
    _fill_diagonal on x.T: FileNotFoundError)."""
    x = rng.standard_normal((9, 6)).astype(np.float32)
    X = jask.from_numpy(x)
    base = X.filename
    V, v = VIEWS[view](X), VIEWS[view](x)
    del X
    _settle()
    lazy_read, numpy_read = READERS[reader]
    R = lazy_read(V)
    _settle()
    WRITES[write](V)
    _settle()
    np.testing.assert_array_equal(R.to_numpy(), numpy_read(v))
    np.testing.assert_array_equal(V.to_numpy(), _write_numpy(write, v))
    del R, V
    _settle()
    assert base not in registry.live_paths()


def test_fill_diagonal_of_a_transposed_array(small_budget):
    """scikit-learn's _fill_diagonal on the namespace: x[i, i] = 1 on a
    transposed array whose base nothing else holds."""
    import jask.array_api as xp
    for shape in [(4, 5), (5, 4), (6, 6)]:
        x = np.zeros(shape)
        t = xp.asarray(x.copy()).T
        for i in range(min(shape)):
            t[i, i] = xp.asarray(1.0)
            _settle()
        expected = x.T.copy()
        np.fill_diagonal(expected, 1.0)
        np.testing.assert_array_equal(np.asarray(t), expected)


def test_jit_and_grad_through_views(small_budget, rng, dtype):
    """VJPs of views: transposed back, scattered into zeros, reshaped back."""
    x, X = _make(rng, (90, 12), dtype)
    w = jnp.asarray(rng.standard_normal((6,)).astype(dtype))

    def loss(X, w):
        R = X[10:80, 2:8].T.reshape((6, 1, 70))[:, 0]  # (6, 70), a view of X
        return jask.sum(jask.square(R.T @ w))

    def ref(x, w):
        return jnp.sum(jnp.square(x[10:80, 2:8].T.reshape((6, 1, 70))[:, 0].T @ w))

    rx, rw = jax.grad(ref, argnums=(0, 1))(jnp.asarray(x), w)
    modes = [jax.grad] + ([lambda f, **kw: jax.jit(jax.grad(f, **kw))]
                          if np.dtype(dtype) == np.float32 else [])  # (compiling is slow)
    for mode in modes:
        gx, gw = mode(loss, argnums=(0, 1))(X, w)
        np.testing.assert_allclose(gx.to_numpy(), rx, **_tol(dtype))
        np.testing.assert_allclose(gw, rw, **_tol(dtype))
    # a view returned by a compiled function outlives the call and reads right
    T = jax.jit(lambda X: X.T[1:5])(X)
    np.testing.assert_array_equal(T.to_numpy(), x.T[1:5])


def test_a_band_group_reads_two_views_of_one_store(small_budget, rng):
    """Under jit, views of the same store in one band group are not confused
    (they share the base's path)."""
    x, X = _make(rng, (400, 12), np.float32)
    u, v = rng.standard_normal((5,)).astype(np.float32), rng.standard_normal((5,)).astype(
        np.float32)

    def f(X, u, v):
        return jask.sum(jask.square(X[:, :5] @ u - X[:, 5:10] @ v))

    want = np.sum(np.square(x[:, :5] @ u - x[:, 5:10] @ v))
    np.testing.assert_allclose(float(jax.jit(f)(X, u, v)), want, rtol=1e-4)
    gu = jax.jit(jax.grad(f, argnums=1))(X, u, v)
    ref = jax.grad(lambda x, u, v: jnp.sum(jnp.square(x[:, :5] @ u - x[:, 5:10] @ v)),
                   argnums=1)(x, u, v)
    np.testing.assert_allclose(gu, ref, rtol=1e-4, atol=1e-3)


RUNS = {  # positions along axis 0 of 300 rows: runs of consecutive rows
    "months of two years": np.r_[31:59, 196:224],
    "out of order, repeated": np.r_[250:300, 0:40, 20:60],
    "negative": np.arange(-60, -10),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_gather_by_runs_is_a_view(small_budget, rng, name):
    """``X[idx]`` and ``take`` by runs of consecutive positions (a groupby's
    days of one month, year after year) write nothing, and every op reads
    through them; a later write to X leaves them as they were, and the
    gradient scatters back as jax.numpy's. Short runs (a random order) are
    copied, as before."""
    x, X = _make(rng, (300, 41), np.float32)
    idx = RUNS[name]
    with jask.track() as t:
        views = [X[idx], jask.take(X, idx, axis=0), X.T[:, idx]]
    assert t.bytes_written == 0 and t.bytes_read == 0, t
    refs = [x[idx], x[idx], x.T[:, idx]]
    for v, ref in zip(views, refs):
        np.testing.assert_array_equal(v.to_numpy(), ref)
    g = views[0]
    np.testing.assert_array_equal(g[5:70, 3:9].to_numpy(), x[idx][5:70, 3:9])
    np.testing.assert_array_equal(g[np.r_[0:20, 30:45]].to_numpy(), x[idx][np.r_[0:20, 30:45]])
    np.testing.assert_allclose(np.nanmean(g, 0), x[idx].mean(0), rtol=1e-5)
    with jask.track() as t:
        total = float(jask.sum(g * g))
    assert t.bytes_written == 0 and t.passes(X) <= len(idx) / 300 + 0.01, t
    np.testing.assert_allclose(total, float((x[idx].astype(np.float64) ** 2).sum()), rtol=1e-5)
    X[:] = 0.0
    np.testing.assert_array_equal(g.to_numpy(), x[idx])
    w = jnp.asarray(x)
    want = jax.grad(lambda a: jnp.sum(a[idx] ** 2))(w)
    got = jax.grad(lambda a: jask.sum(a[idx] ** 2))(jask.from_numpy(x))
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_gather_by_short_runs_is_copied(small_budget, rng):
    x, X = _make(rng, (300, 41), np.float32)
    idx = rng.permutation(300)[:100]
    with jask.track() as t:
        got = X[idx]
    assert t.bytes_written > 0
    np.testing.assert_array_equal(got.to_numpy(), x[idx])
