"""Band groups without JAX: the graph layer against numpy, and its planner."""
import weakref

import dask
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import jask
from helpers import user_spec, write_store
from jask.engine import execute, fusion
from jask.engine.builders import FAN_IN
from jask.engine.plan import bands
from jask.store.spec import StoreSpec


def _store(path, data, chunks, codec):
    kwargs = {} if codec else {"compressors": None}
    return user_spec(write_store(path, data, chunks=chunks, **kwargs))


def _least_squares_group(X, y, w):
    """r = X @ w, d = r - y, loss = sum(d * d), grad = X.T @ (2 d): the nodes
    of a least-squares step, as jask.engine.lazy builds them."""
    f = np.dtype(X.dtype)
    r = fusion.Node("dot", "dot", [X, w], (X.shape[0],), f,
                    dict(ta=False, tb=False, vectors=(None, "col")))
    d = fusion.Node("subtract", "map", [r, y], r.shape, f,
                    dict(kernel=np.subtract, axes=((0,), (0,)), dtypes=(f, f),
                         full_shape=r.shape, out_axes=(0,), reducer=None))
    loss = fusion.Node("sum", "map", [d], (), f,
                       dict(kernel=np.square, axes=((0,),), dtypes=(f,), full_shape=r.shape,
                            out_axes=(), reducer="sum"))
    twice = fusion.Node("multiply", "map", [d, np.asarray(2, f)], r.shape, f,
                        dict(kernel=np.multiply, axes=((0,), ()), dtypes=(f, f),
                             full_shape=r.shape, out_axes=(0,), reducer=None))
    grad = fusion.Node("dot", "dot", [X, twice], (X.shape[1],), f,
                       dict(ta=True, tb=False, vectors=(None, "col")))
    return [r, d, loss, twice, grad]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 300), k=st.integers(1, 9), chunk_rows=st.integers(1, 120),
       chunk_cols=st.integers(1, 9), rows=st.integers(1, 200), codec=st.booleans(),
       f64=st.booleans(), strip=st.integers(0, 60), w_stored=st.booleans(),
       ahead=st.integers(0, 3))
def test_a_band_group_computes_what_numpy_does(tmp_path_factory, n, k, chunk_rows, chunk_cols,
                                               rows, codec, f64, strip, w_stored, ahead):
    """Whatever the band, the strips a band computes at once (0: whole), the
    bands asked for ahead, and ``w`` in memory or a store read whole."""
    dtype = np.float64 if f64 else np.float32
    rng = np.random.default_rng(n * 31 + k)
    Xn, yn, w = (rng.standard_normal(s).astype(dtype) for s in ((n, k), (n,), (k,)))
    folder = tmp_path_factory.mktemp("g")
    X = _store(folder / "X", Xn, (chunk_rows, chunk_cols), codec)
    y = _store(folder / "y", yn, (max(1, chunk_rows // 2),), False)
    order = _least_squares_group(X, y, _store(folder / "w", w, (k,), False) if w_stored else w)
    out_path = folder / "d"
    d_store = _store(out_path, np.zeros(n, dtype), (min(rows, n),), False)
    dsk, keys = fusion.group_graph("test", tuple(order), ((order[1], d_store),), (2, 4),
                                   n, min(rows, n), strip, ahead)
    loss, grad = dask.get(dsk, keys[-1])
    d = Xn @ w - yn
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == np.float32 else dict(rtol=1e-10)
    np.testing.assert_allclose(fusion.finish(order[2], loss), np.sum(d * d), **tol)
    np.testing.assert_allclose(fusion.finish(order[4], grad), Xn.T @ (2 * d), **tol)
    np.testing.assert_allclose(zarr.open_array(str(out_path))[...], d, **tol)


@settings(max_examples=200, deadline=None)
# found by hypothesis: the bound was taken from the band's share of the budget
@example(n=48, k=44, chunk_rows=1, chunk_cols=1, budget=552961, workers=3)
@given(n=st.integers(1, 10**7), k=st.integers(1, 5000), chunk_rows=st.integers(1, 10**6),
       chunk_cols=st.integers(1, 5000), budget=st.integers(10**5, 10**10),
       workers=st.integers(1, 4))
def test_a_band_plan_fits_the_budget_or_is_refused(n, k, chunk_rows, chunk_cols, budget,
                                                   workers):
    f = np.dtype("float32")
    X = StoreSpec("", (n, k), f, (min(chunk_rows, n), min(chunk_cols, k)))
    y = StoreSpec("", (n,), f, (min(chunk_rows, n),))
    order = _least_squares_group(X, y, np.zeros(k, f))
    try:
        plan = bands.plan_bands("test", order, [X, y], 4 * k, n, budget, workers,
                                keep={id(order[2]), id(order[4])})
    except jask.BudgetError as err:  # refused: more bands than one op may run
        assert "MAX_TASKS" in str(err)
        return
    if plan is None:
        return
    assert 1 <= plan.rows <= n
    assert plan.cost.total <= budget
    assert 1 <= plan.cost.tasks_at_once <= workers
    assert -(-n // plan.rows) <= jask.base.memory.task_bound(X.shape[0] * k * 4 + n * 4, budget)


def _recording(monkeypatch, log: list) -> None:
    """Log each chunk-row range asked for ahead and each read, in order."""
    read = fusion.read
    monkeypatch.setattr(fusion, "prefetch", lambda store, region: log.append(
        ("asked", store.path, region[0].start, region[0].stop)))
    monkeypatch.setattr(fusion, "read", lambda store, region, *a, **k: (log.append(
        ("read", store.path, region[0].start, region[0].stop)), read(store, region, *a, **k))[1])


def _lsq_stores(tmp_path, n, k, rows):
    rng = np.random.default_rng(0)
    X = _store(tmp_path / "X", rng.standard_normal((n, k)).astype("f4"), (rows, k), False)
    y = _store(tmp_path / "y", rng.standard_normal(n).astype("f4"), (rows,), False)
    w = _store(tmp_path / "w", np.ones(k, "f4"), (k,), False)
    return X, y, w


def test_a_pass_asks_for_its_first_bands_before_it_reads_one(tmp_path, monkeypatch):
    """A cold pass asks the kernel for the chunks of the bands it runs first,
    in the order their tasks start (Dask's, not band order), before its
    first band reads (10 bands of 160 bytes: all of them, well within the
    room ahead); each band is asked for once."""
    n, k, rows = 100, 3, 10
    X, y, w = _lsq_stores(tmp_path, n, k, rows)
    log: list = []
    _recording(monkeypatch, log)
    where = execute.placement(2, with_workers=False)
    started: list = []
    dsk, keys = fusion.group_graph(
        "test", tuple(_least_squares_group(X, y, w)), (), (2, 4), n, rows, ahead=2,
        run_order=lambda graph: started.extend(execute.run_order(graph, 2, where)) or started)
    execute.run(dsk, keys, 2, where=where)
    first_read = next(i for i, e in enumerate(log) if e[0] == "read")
    asked = [e[1:] for e in log if e[0] == "asked"]
    in_order = [(p, dsk[key][1].start, dsk[key][1].stop) for key in started
                if dsk[key][0] is not fusion.combine_bands for p in (X.path, y.path)]
    assert sorted(in_order) == sorted((p, b, b + rows) for b in range(0, n, rows)
                                      for p in (X.path, y.path))
    assert [e[1:] for e in log[:first_read]] == in_order
    assert asked == in_order


@pytest.mark.parametrize("room_bands, distance", [(0, 2), (1, 2), (2, 2), (5, 5), (9, 9),
                                                  (50, 50)])
def test_each_band_asks_for_the_band_room_bytes_ahead(tmp_path, monkeypatch, room_bands,
                                                      distance):
    """With ``ahead`` tasks at once and ``room`` bytes, band 0 asks for the
    chunks of bands 0 to ``distance`` in order and band i for band
    i + distance, of every store read by bands (not of ``w``, read whole),
    the distance the bands ``room`` holds, at least ``ahead``."""
    n, k, rows = 100, 3, 10
    X, y, w = _lsq_stores(tmp_path, n, k, rows)
    order = tuple(_least_squares_group(X, y, w))
    per_band = rows * k * 4 + rows * 4
    room = room_bands * per_band + per_band // 2
    assert fusion.advice_distance(order, rows, 2, room) == distance
    log: list = []
    _recording(monkeypatch, log)
    dsk, _ = fusion.group_graph("test", order, (), (2, 4), n, rows, ahead=2, room=room)
    tasks = sorted((t for t in dsk.values() if t[0] is not fusion.combine_bands),
                   key=lambda t: t[1].start)
    assert len(tasks) == n // rows
    for i, (compute, band, ahead) in enumerate(tasks):
        log.clear()
        compute(band, ahead)
        bands = range(0, min(n // rows, distance + 1)) if i == 0 else [
            b for b in [i + distance] if b < n // rows]
        assert [e[1:] for e in log if e[0] == "asked"] == [
            (p, b * rows, (b + 1) * rows) for b in bands for p in (X.path, y.path)]


def test_a_pass_asks_for_nothing_ahead_with_no_tasks_at_once(tmp_path, monkeypatch):
    n, k, rows = 40, 3, 10
    X, y, w = _lsq_stores(tmp_path, n, k, rows)
    log: list = []
    _recording(monkeypatch, log)
    dsk, keys = fusion.group_graph("test", tuple(_least_squares_group(X, y, w)), (), (2, 4),
                                   n, rows, ahead=0)
    dask.get(dsk, keys[-1])
    assert log and all(e[0] == "read" for e in log)


def test_the_room_ahead_is_bounded_by_the_memory_available(monkeypatch):
    """Advice past what the page cache holds evicts what it just read."""
    class Memory:
        available = 40 << 20
    monkeypatch.setattr(fusion.psutil, "virtual_memory", lambda: Memory)
    assert fusion.advice_room() == 10 << 20
    Memory.available = 1 << 40
    assert fusion.advice_room() == fusion.ADVICE_BYTES == 64 << 20


@pytest.mark.parametrize("runs, bands, room_bands", [
    (1, 10, 0), (2, 10, 0), (3, 10, 0), (4, 10, 0), (16, 10, 0), (2, 1, 0), (3, 2, 0),
    (1, 10, 3), (2, 10, 3), (2, 10, 50)])
def test_runs_of_bands_add_up_to_the_bands_partials_and_prefetch_ahead(
        tmp_path, monkeypatch, runs, bands, room_bands):
    """With ``runs``, a task runs a contiguous run of the bands (sizes within
    one band of each other): its first band asks for the chunks of itself
    and the ``distance`` bands after it in its run (the bands its share of
    the room holds, at least 1), each later band for the one ``distance``
    after it in its run; the runs' partials add up to the bands'."""
    n, k, rows = bands * 10, 3, 10
    rng = np.random.default_rng(0)
    x, yv = rng.standard_normal((n, k)).astype("f4"), rng.standard_normal(n).astype("f4")
    X = _store(tmp_path / "X", x, (10, k), False)
    y = _store(tmp_path / "y", yv, (10,), False)
    w = _store(tmp_path / "w", np.ones(k, "f4"), (k,), False)
    order = tuple(_least_squares_group(X, y, w))
    asked = []
    monkeypatch.setattr(fusion, "prefetch", lambda store, region: asked.append(
        (store.path, region[0].start, region[0].stop)))
    dsk, keys = fusion.group_graph("test", order, (), (2, 4), n, rows, ahead=2, tree=False,
                                   runs=runs, room=room_bands * (rows * k * 4 + rows * 4) * 2)
    assert list(dsk) == keys and len(keys) == min(runs, bands)
    spans = [dsk[key][1:] for key in keys]
    assert spans[0][0] == 0 and spans[-1][1] == bands
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert max(b - a for a, b in spans) - min(b - a for a, b in spans) <= 1
    results = []
    for key in keys:
        asked.clear()
        results.append(dsk[key][0](*dsk[key][1:]))
        first, stop = dsk[key][1:]
        distance = max(1, room_bands)  # the room shared by the 2 runs at once
        assert asked == [(p, i * rows, (i + 1) * rows) for i in range(
            first, min(stop, first + distance + 1)) for p in (X.path, y.path)] + [
            (p, i * rows, (i + 1) * rows) for i in range(first + distance + 1, stop)
            for p in (X.path, y.path)]
    reducers = fusion.reducers_of(order, (2, 4))
    got = fusion.combine_bands(reducers, *results)
    per_band, _ = fusion.group_graph("test", order, (), (2, 4), n, rows, tree=False)
    want = fusion.combine_bands(reducers, *(t[0](*t[1:]) for t in per_band.values()))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    r = x @ np.ones(k, "f4") - yv
    np.testing.assert_allclose(fusion.finish(order[4], got[1]), 2 * x.T @ r, rtol=1e-4,
                               atol=1e-4)


def test_a_band_graph_lists_each_combine_right_after_its_inputs():
    """Run in the listed order (one worker, jask.engine.execute._run_inline), a
    graph of many bands holds at most FAN_IN partials per level of its tree,
    not every band's until the first combine (a Hessian's 128 x 128 float64
    partials: 34 MB over 262 bands, under a 16 MB budget)."""
    f = np.dtype("float32")
    n, k = 5000, 3
    X = StoreSpec("", (n, k), f, (10, k))
    y = StoreSpec("", (n,), f, (10,))
    order = _least_squares_group(X, y, np.zeros(k, f))
    dsk, keys = fusion.group_graph("test", tuple(order), (), (2, 4), n, 10)
    assert len(keys) == 1 and list(dsk)[-1] == keys[0]
    waiting, most = set(), 0
    for key, task in dsk.items():
        inputs = [a for a in task[1:] if isinstance(a, tuple) and a in dsk]
        assert all(a in waiting for a in inputs), "a task listed before its inputs"
        waiting -= set(inputs)
        waiting.add(key)
        most = max(most, len(waiting))
    levels = int(np.ceil(np.log(n // 10) / np.log(FAN_IN)))
    assert most <= (FAN_IN - 1) * levels + 1, most


def test_finished_tasks_results_are_released_before_the_graph_ends():
    """execute.run keeps the futures of the tasks still running only: a done
    future holds its task's result, and keeping them all held every band's
    partial to the end of the graph, where Dask had long released it."""
    made, alive = [], []

    def band(i):
        if i == 150:  # how many of the first 100 bands' partials are still held
            alive.append(sum(r() is not None for r in made[:100]))
        part = np.full(1000, float(i))
        made.append(weakref.ref(part))
        return (part,)

    def combine(*parts):
        return (sum(p[0] for p in parts),)

    graph, keys = {}, []
    for i in range(200):
        graph[("jask-band-test", i)] = (band, i)
        keys.append(("jask-band-test", i))
    level = 0
    while len(keys) > 1:
        nxt = []
        for i in range(0, len(keys), FAN_IN):
            graph[("jask-band-test-combine", level, i)] = (combine, *keys[i:i + FAN_IN])
            nxt.append(("jask-band-test-combine", level, i))
        keys, level = nxt, level + 1
    (total,) = execute.run(graph, keys, workers=2)
    assert total[0][0] == sum(range(200))
    assert len(made) == 200 and alive[0] <= 2 * FAN_IN, alive


def test_a_band_too_wide_for_whole_chunk_rows_is_computed_in_strips(tmp_path):
    """X @ V carries 512 values a row, X 16: no band of whole compressed chunk
    rows (each read once) fits with its nodes, so the band is read whole and its
    nodes computed in strips of rows, within the budget, with numpy's values."""
    f = np.dtype("float32")
    rng = np.random.default_rng(1)
    xn, v = rng.standard_normal((20_000, 16)).astype(f), rng.standard_normal((16, 512)).astype(f)
    X = _store(tmp_path / "X", xn, (10_000, 16), True)
    xv = fusion.Node("dot", "dot", [X, v], (20_000, 512), f,
                     dict(ta=False, tb=False, vectors=(None, None)))
    total = fusion.Node("sum", "map", [xv], (512,), f,
                        dict(kernel=np.square, axes=((0, 1),), dtypes=(f,),
                             full_shape=xv.shape, out_axes=(1,), reducer="sum"))
    order = [xv, total]
    budget = 8 * 10**6
    plan = bands.plan_bands("test", order, [X], v.nbytes, 20_000, budget, 2,
                            keep={id(total)})
    assert plan is not None and plan.rows == 10_000 and 0 < plan.strip < plan.rows, plan
    assert plan.cost.total <= budget * bands.BAND_SHARE
    dsk, keys = fusion.group_graph("test", tuple(order), (), (1,), 20_000, plan.rows, plan.strip)
    (got,) = dask.get(dsk, keys[-1])
    np.testing.assert_allclose(fusion.finish(total, got), np.sum(np.square(xn @ v), 0),
                               rtol=1e-4)


def _map(op, kernel, inputs, axes, full, out_axes, linear, reducer=None):
    f = np.dtype("float64")
    shape = tuple(1 if a is None else full[a] for a in out_axes)
    return fusion.Node(op, "map", inputs, shape, f,
                       dict(kernel=kernel, axes=axes, dtypes=(f,) * len(inputs),
                            full_shape=full, out_axes=out_axes, reducer=reducer,
                            linear=linear))


def _tangent_chains(X, Xn, y, M, tb):
    """name -> (G, whether X.T @ G is a weighted Gram product, G in numpy of
    (T, y)): maps of the tangent product T = X @ M (M.T with ``tb``)."""
    n = X.shape[0]
    k = M.shape[0] if tb else M.shape[1]
    T = fusion.Node("dot", "dot", [X, M], (n, k), np.dtype("float64"),
                    dict(ta=False, tb=tb, vectors=(None, None)))
    full = (n, k)
    mul = lambda a, b, axes: _map("multiply", np.multiply, [a, b], axes, full, (0, 1),  # noqa: E731
                                  ((0,), (1,)))
    add = lambda a, b: _map("add", np.add, [a, b], ((0, 1), (0, 1)), full, (0, 1),  # noqa: E731
                            ((0, 1),))
    scaled = mul(T, y, ((0, 1), (0,)))
    rowsum = _map("sum", np.positive, [T], ((0, 1),), full, (0,), (), reducer="sum")
    # a weight from another product with a matrix (a forward X @ w[:, None]): not T's
    other = fusion.Node("dot", "dot", [X, np.full((X.shape[1], 1), 0.5)], (n, 1),
                        np.dtype("float64"), dict(ta=False, tb=False, vectors=(None, None)))
    residual = _map("subtract", np.subtract, [other, y], ((0, 1), (0,)), (n, 1), (0, 1),
                    ((0, 1),))
    return T, {
        "c * T": (scaled, True, lambda t, y: y[:, None] * t),
        "T itself": (T, True, lambda t, y: t),
        "c * T + T": (add(scaled, T), True, lambda t, y: y[:, None] * t + t),
        "c * T + c": (add(scaled, _map("copy", np.positive, [y], ((0,),), full, (0, 1),
                                       ((0,),))), False, lambda t, y: y[:, None] * t + y[:, None]),
        "T * (X @ v - y)": (mul(T, residual, ((0, 1), (0, None))), True,
                            lambda t, y: t * (0.5 * Xn.sum(1, keepdims=True) - y[:, None])),
        "T * T": (mul(T, T, ((0, 1), (0, 1))), False, lambda t, y: t * t),
        "T * rowsum(T)": (mul(T, rowsum, ((0, 1), (0,))), False,
                          lambda t, y: t * t.sum(1, keepdims=True)),
    }


@pytest.mark.parametrize("tb", [True, False])
@pytest.mark.parametrize("name", ["c * T", "T itself", "c * T + T", "T * (X @ v - y)",
                                  "c * T + c", "T * T", "T * rowsum(T)"])
def test_a_contraction_with_a_batch_of_tangents_is_a_weighted_gram_product_only_when_linear(
        tmp_path, name, tb):
    """X.T @ G, G computed from the tangents T = X @ M (jax.hessian's X @ I):
    rewritten as (X.T @ (c * X)) @ M (jask.engine.gram) exactly when G is c * T
    for a weight c per row, with numpy's value either way; never for a few
    tangents, where the products as written are cheaper."""
    from jask.engine import gram
    rng = np.random.default_rng(1)
    n, p = 301, 6
    Xn, yn = rng.standard_normal((n, p)), rng.standard_normal(n)
    X = _store(tmp_path / "X", Xn, (50, p), False)
    y = _store(tmp_path / "y", yn, (50,), False)
    for k, cheaper in [(p, True), (1, False)]:
        M = rng.standard_normal((k, p) if tb else (p, k))
        T, chains = _tangent_chains(X, Xn, y, M, tb)
        G, weighted, numpy_g = chains[name]
        top = fusion.Node("dot", "dot", [X, G], (p, k), np.dtype("float64"),
                          dict(ta=True, tb=False, vectors=(None, None)))
        order = [T] + [x for x in _inputs_first(G) if x is not T] + [top]
        assert all(x in order for x in _inputs_first(G))
        new, swaps = gram.rewrite(order, {id(top)})
        assert bool(swaps) == (weighted and cheaper), (name, k)
        final = swaps.get(id(top), top)
        assert final is new[-1] and all(id(x) not in swaps for x in new)
        if swaps:  # the tangents are gone: nothing a row wider than X's own
            assert T not in new and [x.op for x in new if x.rows and x.shape[1:] not in
                                     ((), (1,))] == (["weighted_gram"] if G is not T else [])
        dsk, keys = fusion.group_graph("test", tuple(new), (), (len(new) - 1,), n, 64)
        (partial,) = dask.get(dsk, keys[-1])
        t = Xn @ (M.T if tb else M)
        np.testing.assert_allclose(fusion.finish(final, partial), Xn.T @ numpy_g(t, yn),
                                   rtol=1e-10, atol=1e-10)


def _inputs_first(node) -> list:
    out: list = []

    def visit(x):
        if isinstance(x, fusion.Node) and all(x is not y for y in out):
            for i in x.inputs:
                visit(i)
            out.append(x)
    visit(node)
    return out
