"""A dask.distributed LocalCluster of two worker processes that share no
folder, only an object store (moto's S3 server, a separate process), trains
a model end to end: data in the bucket (written by plain zarr from
outside), jask's scratch in the bucket, the trained parameters saved to the
bucket and read back by plain zarr; compared with the same optax training in
memory. Workers' memory and jask.track counts are collected from them."""
import os
import urllib.request

import jax
import jax.numpy as jnp
import numpy as np
import obstore
import optax
import pytest
import zarr
from distributed import Client, LocalCluster, get_task_stream
from s3server import SECRET_KEY, zarr_store

import jask
from jask.engine import cluster as jask_cluster
from jask.store.kinds.objects import buckets
from jask.store.kinds.objects import sessions as object_sessions

BUDGET = 2 * 2**20
STEPS = 4


def _keys(url: str) -> list[str]:
    where = buckets.bucket_prefix(url)
    return [o["path"] for batch in obstore.list(where.client, prefix=where.prefix + "/")
            for o in batch]


def _loss(X, y, w, b):
    """Logistic regression's mean loss, written once for jask and jax.numpy."""
    z = X @ w + b
    return (jnp.logaddexp(0.0, z) - y * z).mean() if isinstance(X, jax.Array) else \
        (jask.logaddexp(0.0, z) - y * z).mean()


def _train(X, y, params, steps):
    opt = optax.adam(0.05)
    state = opt.init(params)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(lambda p: _loss(X, y, *p))(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for _ in range(steps):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    return params, losses


def test_a_cluster_with_no_shared_disk_trains_on_object_storage(
        s3_bucket, jask_scratch, tmp_path, monkeypatch, rng):
    monkeypatch.chdir(tmp_path)  # a local scratch of the driver's would appear here
    n, d = 24_000, 40  # X: 3.8 MB float32, twice the budget, odd row chunks
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0).astype(np.float32)
    for name, value, chunks in (("X", x, (3000, d)), ("y", y, (3000,))):
        zarr.create_array(zarr_store(f"{s3_bucket}/data/{name}.zarr"), shape=value.shape,
                          chunks=chunks, dtype=value.dtype)[...] = value
    scratch_url = f"{s3_bucket}/scratch"
    jask.set_memory_budget(BUDGET, scratch_dir=scratch_url)
    workers_root = tmp_path / "workers"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0", memory_limit="1GB",
                      local_directory=str(workers_root)) as cluster, Client(cluster) as client:
        folders = jask_cluster.use_private_scratch(client)
        try:
            X, Y = jask.open(f"{s3_bucket}/data/X.zarr"), jask.open(f"{s3_bucket}/data/y.zarr")
            params0 = (jnp.zeros((d,), jnp.float32), jnp.zeros((), jnp.float32))
            _train(X, Y, params0, 1)  # compiles; workers import jask: their baseline
            jask_cluster.reset_worker_peaks(client)
            baseline = jask_cluster.worker_memory(client)
            with jask.track() as t, get_task_stream(client) as stream:
                params, losses = _train(X, Y, params0, STEPS)
                pred = X @ params[0]  # eager: a scratch store the workers write
                session = object_sessions.live_sessions()[0]
                assert pred.filename.startswith(session + "/")
                assert any(k.endswith("/zarr.json") for k in _keys(pred.filename))
                accuracy = float(((pred + params[1] > 0) == (Y > 0.5)).mean())
                jask.save(jask.from_numpy(np.asarray(params[0])), f"{s3_bucket}/results/w.zarr")
            peaks = jask_cluster.worker_memory(client)
            with urllib.request.urlopen(client.dashboard_link, timeout=10) as page:
                assert page.status == 200
            worker_pids = {w["pid"] for w in folders.values()}
            task_workers = {task["worker"] for task in stream.data}
        finally:
            client.unregister_worker_plugin("jask-private-scratch")

    # The same training in memory: jax.numpy and optax, nobody's code of ours.
    want, want_losses = _train(jnp.asarray(x), jnp.asarray(y), params0, STEPS)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    np.testing.assert_allclose(params[0], want[0], rtol=1e-3, atol=1e-5)
    saved = zarr.open_array(zarr_store(f"{s3_bucket}/results/w.zarr"), mode="r")[...]  # plain zarr
    np.testing.assert_array_equal(saved, np.asarray(params[0]))
    z = x @ np.asarray(want[0]) + float(want[1])
    assert accuracy == pytest.approx(np.mean((z > 0) == (y > 0.5)), abs=5 / n)
    assert accuracy > 0.8

    # Only the object store was shared: each worker's scratch is its own
    # folder in its own local directory, no jask store was made in any local
    # folder, and the driver's scratch is the bucket.
    assert jask.get_config().scratch_dir == scratch_url
    assert len({w["scratch_dir"] for w in folders.values()}) == 2 and os.getpid() not in worker_pids
    for where in folders.values():
        assert str(workers_root) in where["scratch_dir"]
    made_locally = [os.path.join(root, f) for root, dirs, files in os.walk(tmp_path)
                    for f in dirs + files if f.startswith("session-") or f.endswith(".zarr")]
    assert made_locally == []
    assert task_workers == set(folders)  # both workers ran tasks, the driver none

    # Counts come from the workers' processes: every step read X at least once.
    assert t.passes(X) >= STEPS and t.store(pred).bytes_written == pred.nbytes
    assert t.total.tasks > 0 and SECRET_KEY not in repr(t)
    growth = {a: peaks[a]["peak"] - baseline[a]["rss"] for a in peaks}
    print("worker peak RSS over baseline (MB):", {a: g / 2**20 for a, g in growth.items()},
          "budget", BUDGET / 2**20)
    # the budget bounds jask's tiles; a worker adds its own per-graph state
    # (comms, task results) and requests in flight (measured: 3.8-4.1 MB in all)
    assert all(g <= BUDGET + 8 * 2**20 for g in growth.values()), growth

    # Sweeping in object storage: once nothing refers to a store, its keys go.
    pred_url = pred.filename
    del pred
    jask.collect()
    assert _keys(pred_url) == []
    object_sessions.end(scratch_url)
    assert _keys(session) == []  # the session's end deletes its prefix, proof last
