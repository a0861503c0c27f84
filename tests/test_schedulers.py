"""jask on Dask's synchronous and threaded schedulers, and on a real
dask.distributed LocalCluster of two worker processes."""
import dataclasses
import math
import pickle

import cloudpickle
import dask
import dask.tokenize
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster, get_task_stream

import jask
from helpers import rand
from jask.core import ufuncs
from jask.core.primitives import VJP
from jask.engine import cluster as jask_cluster
from jask.store import buffers


@pytest.mark.parametrize("scheduler", ["synchronous", "threads"])
def test_local_schedulers_give_the_same_results(small_budget, rng, scheduler):
    x, w = rand(rng, (97, 13), np.float32), rand(rng, (13, 3), np.float32)
    with dask.config.set(scheduler=scheduler):
        X, W = jask.from_numpy(x), jask.from_numpy(w)
        np.testing.assert_allclose((X @ W).to_numpy(), x @ w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(float(jask.sum(X * X)), np.sum(x * x), rtol=1e-4)
        g = jax.jit(jax.grad(lambda w: jask.sum(jask.square(X @ w))))(W)
        np.testing.assert_allclose(g.to_numpy(), 2 * x.T @ (x @ w), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", memory_limit="1GB") as cluster:
        yield cluster


@pytest.fixture
def client(cluster, small_budget):
    with Client(cluster) as client:
        yield client


def _task_prefixes(client):
    return client.run_on_scheduler(lambda dask_scheduler: set(dask_scheduler.task_prefixes))


def test_ops_and_gradients_match_on_a_cluster(client, rng):
    x, w = rand(rng, (97, 13), np.float32), rand(rng, (13, 3), np.float32)
    y = rand(rng, (97, 3), np.float32)
    X, W, Y = jask.from_numpy(x), jask.from_numpy(w), jask.from_numpy(y)
    np.testing.assert_allclose((X @ W).to_numpy(), x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jask.transpose(X).to_numpy(), x.T)
    np.testing.assert_allclose(float(jask.sum(X * 2.0 + X)), 3 * x.sum(), rtol=1e-4)
    loss = lambda w: jask.sum(jask.square(X @ w - Y))
    g = jax.jit(jax.grad(loss))(W)
    want = jax.grad(lambda w: jnp.sum(jnp.square(x @ w - y)))(w)
    np.testing.assert_allclose(g.to_numpy(), want, rtol=1e-4, atol=1e-4)
    prefixes = _task_prefixes(client)
    # the jitted step runs as one band group: its tasks show under its own name
    # (a transpose is a view: no graph, read through by the graphs of the ops after it)
    assert {"jask-dot", "jask-sum", "jask-multiply", "jask-add",
            "jask-fused-dot"} <= prefixes, prefixes


def test_training_step_runs_on_the_cluster(client, rng):
    x, y = rand(rng, (97, 5), np.float32), rand(rng, (97, 1), np.float32)
    X, Y = jask.from_numpy(x), jask.from_numpy(y)
    w = jask.from_numpy(np.zeros((5, 1), np.float32))
    loss = lambda w: jask.sum(jask.square(X @ w - Y))
    step = jax.jit(lambda w: w.update_(w - jax.grad(loss)(w) * 0.002))
    before = _task_prefixes(client)
    for _ in range(3):
        w = step(w)
    ref = np.zeros((5, 1), np.float32)
    for _ in range(3):
        ref = ref - 0.002 * 2 * x.T @ (x @ ref - y)
    np.testing.assert_allclose(w.to_numpy(), ref, rtol=1e-4, atol=1e-5)
    assert "jask-update" not in before and "jask-update" in _task_prefixes(client)


def test_worker_memory_limit_below_a_task_is_a_clear_error(tmp_path, rng):
    jask.set_memory_budget("64MB", scratch_dir=str(tmp_path / "scratch"))
    x = rand(rng, (1000, 1000), np.float32)  # a task of tiles >= 1 MiB holds >= 4 MiB
    a = jask.from_numpy(x)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=":0", memory_limit="4MB") as small, Client(small):
        with pytest.raises(jask.BudgetError, match=r"jask.add: a task holds \d+ bytes.*"
                                                   r"memory limit of \d+ bytes \(.+\) for 2 "
                                                   r"threads"):
            a + a


def _share_of_an_epoch(x_path, y_path, index, count):
    """On a worker: its shard of one shuffled epoch, and how much of X it read."""
    import jask
    X, y = jask.open(x_path), jask.open(y_path)
    with jask.track() as t:
        rows = [int(r) for _, yb in jask.batches(X, y, batch_size=50, seed=3,
                                                 shard=(index, count)) for r in yb]
    return rows, t.passes(X)


def test_minibatch_shards_on_the_workers_are_disjoint(client, tmp_path):
    """Each worker takes its own share of every epoch, reading only its chunks."""
    import zarr
    x = np.arange(3000 * 4, dtype=np.float32).reshape(3000, 4)
    for name, value, chunks in [("X", x, (100, 4)), ("y", np.arange(3000), (100,))]:
        zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=value.shape, chunks=chunks,
                          dtype=value.dtype)[:] = value
    workers = list(client.scheduler_info()["workers"])
    futures = [client.submit(_share_of_an_epoch, str(tmp_path / "X.zarr"),
                             str(tmp_path / "y.zarr"), i, 2, workers=[w], pure=False)
               for i, w in enumerate(workers)]
    (a, pa), (b, pb) = client.gather(futures)
    assert not set(a) & set(b) and sorted(a + b) == list(range(3000))
    assert pa == pb == 0.5


def _logistic(params, X, y):
    w, b = params
    z = X @ w + b
    if isinstance(X, jax.Array):
        return (jnp.logaddexp(0.0, z) - y * z).mean()
    return (jask.logaddexp(0.0, z) - y * z).mean()


def test_a_jitted_step_is_one_graph_submitted_without_hashing_its_tasks(
        client, rng, tmp_path, monkeypatch):
    # a user's X of 3x the budget in 48 chunk rows (1/16 of the budget each, as
    # the object-storage notebook's): one band group, at most one task per
    # band and a fan-in tree, submitted under a fresh name (dask named a dict
    # graph by pickling every object of every task: 30 s for this step's 57
    # tasks where it ran in 0.1 s)
    jask.set_memory_budget("256KB", scratch_dir=str(tmp_path / "scratch"))
    x = rand(rng, (24_000, 8), np.float32)
    yv = (rand(rng, (24_000,), np.float32) > 0.5).astype(np.float32)
    for name, value, chunks in (("X", x, (500, 8)), ("y", yv, (500,))):
        zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=value.shape, chunks=chunks,
                          dtype=value.dtype, compressors=None)[...] = value
    X, y = jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr"))
    assert X.nbytes >= 3 * jask.get_config().requested_memory
    params = (jnp.linspace(-1, 1, 8, dtype=jnp.float32), jnp.float32(0.25))
    step = jax.jit(jax.value_and_grad(_logistic))
    step(params, X, y)  # compiled outside the counts
    hashed = []
    by_pickle = dask.tokenize._normalize_pickle
    monkeypatch.setattr(dask.tokenize, "_normalize_pickle",
                        lambda o: (hashed.append(type(o).__name__), by_pickle(o))[1])
    with jask.track() as t:
        value, grads = step(params, X, y)
    want_value, want_grads = jax.value_and_grad(_logistic)(params, jnp.asarray(x), jnp.asarray(yv))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert t.passes(X) == pytest.approx(1.0) and t.total.bytes_written == 0, t
    assert sum(c.graphs for c in t.by_op.values()) == 1, t.by_op
    bands = 48  # at most one task per chunk row, and the tree adding their partials
    assert t.total.tasks <= bands + math.ceil(bands / 8) + 1, t
    assert hashed == []
    # the workers' tile buffers live while the graph runs, not after it
    assert set(client.run(_buffers_held).values()) == {(0, 0, 0)}


def test_a_table_row_is_sent_by_name_and_a_users_function_by_value(client, rng):
    row = ufuncs.TABLE["logaddexp"]
    assert pickle.loads(cloudpickle.dumps(row)) is row
    # a VJP kernel (a bound method of a row's rule): no rule's lambda copied
    assert len(cloudpickle.dumps(VJP(row, 0).numpy)) < 1000
    x = rand(rng, (97, 13), np.float32)
    k = 3.0
    got = jask.map(lambda a: jnp.sin(a) * k, jask.from_numpy(x)).to_numpy()
    np.testing.assert_allclose(got, np.sin(x) * 3.0, rtol=1e-5)


def _buffers_held():
    """(scopes held, scopes running, buffers kept for the next task)"""
    return len(jask_cluster._held), buffers._running[0], sum(map(len, buffers._caches))


def _tile_address():
    return buffers.empty((1 << 20,), np.uint8).ctypes.data  # a tile-sized buffer, then freed


def test_a_workers_tasks_reuse_tile_buffers_until_the_graph_ends(client):
    # a worker's tasks reuse the pages of the tiles earlier tasks left, as a
    # local run's do (fresh pages fault in slowly: workers ran band tasks 2x
    # slower than in-process), and free them when the graph ends
    worker = sorted(client.scheduler_info()["workers"])[0]
    task = jask_cluster.ReusingBuffers(_tile_address)
    first = client.submit(task, pure=False, workers=[worker]).result()
    second = client.submit(task, pure=False, workers=[worker]).result()
    assert first == second
    assert client.run(_buffers_held, workers=[worker])[worker] == (1, 1, 1)  # one buffer, kept
    jask_cluster.after_graph(client)
    assert client.run(_buffers_held, workers=[worker])[worker] == (0, 0, 0)


def _lsq(params, X, y):
    w, b = params
    r = X @ w + b - y
    return (r * r).mean() if isinstance(X, jax.Array) else jask.sum(r * r) * (1 / X.shape[0])


def test_a_step_on_a_cluster_runs_bands_sized_for_one_workers_threads(
        client, rng, tmp_path, monkeypatch):
    # each worker process holds a budget of its own: a worker of 1 thread runs
    # one band task at a time, so its bands may be twice those of 2 threads
    # sharing one budget here (each task a round of the cluster's scheduling)
    from jask.base import config as jask_config
    from jask.engine import execute
    budget = 512 * 1024
    jask.set_memory_budget(budget, scratch_dir=str(tmp_path / "scratch"))
    monkeypatch.setattr(jask_config, "_active", dataclasses.replace(jask.get_config(), workers=2))
    x, yv = rand(rng, (24_000, 16), np.float32), rand(rng, (24_000,), np.float32)
    for name, value, chunks in (("X", x, (500, 16)), ("y", yv, (500,))):
        zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=value.shape, chunks=chunks,
                          dtype=value.dtype, compressors=None)[...] = value
    X, y = jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr"))
    params = (jnp.linspace(-1, 1, 16, dtype=jnp.float32), jnp.float32(0.25))
    step = jax.jit(jax.value_and_grad(_lsq))
    with dask.config.set(scheduler="threads"):
        assert execute.tasks_per_process(2) == 2
        step(params, X, y)  # compiled
        with jask.track() as here:
            step(params, X, y)
    assert execute.tasks_per_process(2) == 1  # the cluster's workers run 1 thread each
    step(params, X, y)  # the workers' first run: imports
    jask_cluster.reset_worker_peaks(client)
    baseline = jask_cluster.worker_memory(client)
    with jask.track() as there, get_task_stream(client) as stream:
        value, grads = step(params, X, y)
    peaks = jask_cluster.worker_memory(client)
    want_value, want_grads = jax.value_and_grad(_lsq)(params, jnp.asarray(x), jnp.asarray(yv))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert there.passes(X) == here.passes(X) == pytest.approx(1.0)
    # bands: half as many; their few partials combined here, not in a tree of
    # tasks on the workers (a hop between processes a level)
    assert 2 <= there.total.tasks <= math.ceil(here.total.tasks / 2), (here, there)
    ran = [str(task["key"]) for task in stream.data]
    assert len(ran) == there.total.tasks and not [k for k in ran if "combine" in k], ran
    # a worker's peak within its budget, beside its own per-graph state (comms,
    # results), as on object storage (tests/test_cluster_object_storage.py)
    growth = {a: peaks[a]["peak"] - baseline[a]["rss"] for a in peaks}
    assert all(g <= budget + 8 * 2**20 for g in growth.values()), growth


def test_a_step_on_a_cluster_is_one_task_per_worker_thread(client, rng, tmp_path):
    # distributed costs a few ms per task whatever it does: each worker thread
    # runs its share of the bands in one task (in order, each prefetching the
    # next) and returns one partial, added up here; one task per band was 11
    # tasks for the quick benchmark's step on 2 workers, each idle between them
    budget = 256 * 1024
    jask.set_memory_budget(budget, scratch_dir=str(tmp_path / "scratch"))
    x, yv, X, y = _stored_lsq_data(rng, tmp_path, rows=96_000)
    params = (jnp.linspace(-1, 1, 16, dtype=jnp.float32), jnp.float32(0.25))
    step = jax.jit(jax.value_and_grad(_lsq))
    with dask.config.set(scheduler="threads"):
        step(params, X, y)  # compiled
        with jask.track() as here:
            want = step(params, X, y)
    step(params, X, y)  # the workers' first run: imports
    jask_cluster.reset_worker_peaks(client)
    baseline = jask_cluster.worker_memory(client)
    with jask.track() as there, get_task_stream(client) as stream:
        _check_lsq_step(step, params, X, y, x, yv)
        got = step(params, X, y)
    peaks = jask_cluster.worker_memory(client)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    threads = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values())
    assert threads == 2 and here.total.tasks > 4
    assert there.total.tasks == 2 * threads, there  # two steps
    assert there.passes(X) == here.passes(X) * 2 == pytest.approx(2.0)
    assert there.total.bytes_read == 2 * here.total.bytes_read
    ran = [task["worker"] for task in stream.data]
    assert len(ran) == 2 * threads and len(set(ran)) == 2, ran  # each worker one a step
    # a task running several bands holds what one band does, and the next one's prefetch
    growth = {a: peaks[a]["peak"] - baseline[a]["rss"] for a in peaks}
    assert all(g <= budget + 8 * 2**20 for g in growth.values()), growth


def _counting(func, calls: list):
    def counted(*args, **kwargs):
        calls.append(args)
        return func(*args, **kwargs)
    return counted


def _stored_lsq_data(rng, tmp_path, rows=24_000):
    x, yv = rand(rng, (rows, 16), np.float32), rand(rng, (rows,), np.float32)
    for name, value, chunks in (("X", x, (500, 16)), ("y", yv, (500,))):
        zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=value.shape, chunks=chunks,
                          dtype=value.dtype, compressors=None)[...] = value
    X, y = jask.open(str(tmp_path / "X.zarr")), jask.open(str(tmp_path / "y.zarr"))
    return x, yv, X, y


def _check_lsq_step(step, params, X, y, x, yv):
    value, grads = step(params, X, y)
    want_value, want_grads = jax.value_and_grad(_lsq)(params, jnp.asarray(x), jnp.asarray(yv))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_a_step_on_a_cluster_asks_its_scheduler_once_a_graph(
        client, rng, tmp_path, monkeypatch):
    # the band plan (one worker's threads), where the partials combine and the
    # run (the workers' memory limits) all read one answer of the scheduler:
    # asking it for the workers is a round trip
    import distributed

    from jask.engine import execute
    jask.set_memory_budget(4 << 20, scratch_dir=str(tmp_path / "scratch"))
    x, yv, X, y = _stored_lsq_data(rng, tmp_path)
    params = (jnp.linspace(-1, 1, 16, dtype=jnp.float32), jnp.float32(0.25))
    step = jax.jit(jax.value_and_grad(_lsq))
    step(params, X, y)  # compiled, and the workers' imports
    schedulers, infos = [], []
    monkeypatch.setattr(execute, "_scheduler", _counting(execute._scheduler, schedulers))
    monkeypatch.setattr(distributed.Client, "scheduler_info",
                        _counting(distributed.Client.scheduler_info, infos))
    with jask.track() as there:
        _check_lsq_step(step, params, X, y, x, yv)
    graphs = sum(c.graphs for c in there.by_op.values())
    assert there.total.tasks >= 2 and graphs >= 1
    assert len(schedulers) == len(infos) == graphs, (schedulers, infos)


def test_bands_are_prefetched_as_far_ahead_as_one_worker_runs_at_once(
        rng, tmp_path, monkeypatch):
    # the plan sizes bands for a worker's 2 threads; the tasks taken to run at
    # once (which share the room for chunks asked for ahead, one run of bands
    # each) are those 2, not this process's 1
    from jask.base import config as jask_config
    from jask.engine import fusion
    jask.set_memory_budget(4 << 20, scratch_dir=str(tmp_path / "scratch"))
    monkeypatch.setattr(jask_config, "_active", dataclasses.replace(jask.get_config(), workers=1))
    x, yv, X, y = _stored_lsq_data(rng, tmp_path)
    params = (jnp.linspace(-1, 1, 16, dtype=jnp.float32), jnp.float32(0.25))
    step = jax.jit(jax.value_and_grad(_lsq))
    aheads = []
    group_graph = fusion.group_graph
    monkeypatch.setattr(fusion, "group_graph", lambda *a, **k: (
        aheads.append(k["ahead"]), group_graph(*a, **k))[1])
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=":0") as local, Client(local):
        _check_lsq_step(step, params, X, y, x, yv)
    assert aheads and set(aheads) == {2}, aheads


def test_a_local_step_asks_for_every_band_before_it_reads_it(rng, tmp_path, monkeypatch):
    # Dask's threaded scheduler starts band tasks out of band order (by its
    # priorities): the chunks asked for ahead follow the order the tasks start,
    # from the pass's first task on, so a cold first pass reads none on demand
    # (here X and y, 1.6 MB, all asked for before the first band reads)
    from jask.base import config as jask_config
    from jask.engine import fusion
    jask.set_memory_budget(512 * 1024, scratch_dir=str(tmp_path / "scratch"))
    monkeypatch.setattr(jask_config, "_active", dataclasses.replace(jask.get_config(), workers=2))
    x, yv, X, y = _stored_lsq_data(rng, tmp_path)
    log: list = []
    read = fusion.read
    monkeypatch.setattr(fusion, "prefetch", lambda store, region: log.append(
        ("asked", store.path, region[0].start, region[0].stop)))
    monkeypatch.setattr(fusion, "read", lambda store, region, *a, **k: (log.append(
        ("read", store.path, region[0].start, region[0].stop)), read(store, region, *a, **k))[1])
    _check_lsq_step(jax.jit(jax.value_and_grad(_lsq)), (
        jnp.linspace(-1, 1, 16, dtype=jnp.float32), jnp.float32(0.25)), X, y, x, yv)
    reads = [i for i, e in enumerate(log) if e[0] == "read" and e[1].endswith((".zarr"))]
    bands = {e[2:] for e in log if e[0] == "read" and e[1].endswith("X.zarr")}
    assert len(bands) >= 4, bands  # several bands, 2 at once
    covered: dict = {}
    for e in log[:reads[0]]:
        if e[0] == "asked":
            covered[e[1]] = covered.get(e[1], 0) + e[3] - e[2]
    assert {p.rsplit("/", 1)[-1]: c for p, c in covered.items()} == {
        "X.zarr": len(x), "y.zarr": len(x)}
    for i in reads:  # and every band (of every pass) asked for before it is read
        path, start, stop = log[i][1:]
        assert any(e[0] == "asked" and e[1] == path and e[2] <= start and stop <= e[3]
                   for e in log[:i]), log[i]
