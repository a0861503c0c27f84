"""update_ and optimizer steps on arrays in object storage: all old or all new.

Against a real S3-compatible server (moto's server mode, ``s3_bucket``):
arrays in an icechunk repository are replaced by one commit, checked from
outside with plain icechunk + zarr readers, in this process and in others (a
reader running throughout, a writer SIGKILLed before its commit); a plain
Zarr store at a URL is refused, naming the URL, with nothing written.
"""
from __future__ import annotations

import os
import subprocess
import sys

import icechunk
import jax
import numpy as np
import optax
import pytest
import zarr
from s3server import environment_for, zarr_store

import jask
from jask.store.kinds.icechunk import repositories as icechunk_stores

SHAPE, CHUNKS = (37, 23), (8, 5)  # chunks that do not divide the shape


def _storage(bucket: str):
    return icechunk.s3_storage(bucket=bucket.removeprefix("s3://"), prefix="repo",
                               endpoint_url=os.environ["AWS_ENDPOINT_URL"], allow_http=True,
                               force_path_style=True, from_env=True)


def _repo(bucket: str, values: dict) -> icechunk.Repository:
    """A repository at ``bucket/repo`` holding ``values`` (name -> array), one commit."""
    repo = icechunk.Repository.create(_storage(bucket))
    session = repo.writable_session("main")
    for name, value in values.items():
        zarr.create_array(session.store, name=name, shape=value.shape, chunks=CHUNKS,
                          dtype=value.dtype)[:] = value
    session.commit("data")
    return repo


def _outside(bucket: str, name: str = "w") -> np.ndarray:
    """The array as a reader of the branch's newest snapshot sees it (no jask)."""
    repo = icechunk.Repository.open(_storage(bucket))
    return zarr.open_array(repo.readonly_session("main").store, path=name, mode="r")[:]


def _commits(bucket: str) -> int:
    repo = icechunk.Repository.open(_storage(bucket))
    return len(list(repo.ancestry(branch="main")))


def test_update_is_one_commit(s3_bucket, small_budget, dtype):
    rng = np.random.default_rng(0)
    w0, g = rng.standard_normal(SHAPE).astype(dtype), rng.standard_normal(SHAPE).astype(dtype)
    _repo(s3_bucket, {"w": w0, "g": g})
    before = _commits(s3_bucket)
    w = jask.open_icechunk(f"{s3_bucket}/repo", "w")
    gd = jask.open_icechunk(f"{s3_bucket}/repo", "g")
    assert w.dtype == dtype and w.shape == SHAPE

    w.update_(w - 0.5 * gd)  # eager
    np.testing.assert_allclose(_outside(s3_bucket), w0 - 0.5 * g, rtol=1e-6)
    assert _commits(s3_bucket) == before + 1

    step = jax.jit(lambda w, g: w.update_(w * 2.0 + g))  # compiled: the commit in a callback
    w = step(w, gd)
    np.testing.assert_allclose(_outside(s3_bucket), (w0 - 0.5 * g) * 2 + g, rtol=1e-5)
    np.testing.assert_allclose(w.to_numpy(), _outside(s3_bucket))
    assert _commits(s3_bucket) == before + 2
    assert w.filename.startswith("icechunk+s3://") and "secret" not in w.filename


def test_optimizer_steps_commit_and_match_optax(s3_bucket, small_budget):
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(SHAPE).astype(np.float32)
    grads = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2)]
    _repo(s3_bucket, {"w": p0})
    before = _commits(s3_bucket)
    w = jask.open_icechunk(f"{s3_bucket}/repo", "w")

    tx, ref = jask.optim.adam(0.1), optax.adam(0.1)
    state, ref_state, ref_p = tx.init(w), ref.init(jax.numpy.asarray(p0)), jax.numpy.asarray(p0)
    for g in grads:
        w, state = jask.optim.step(tx, jask.from_numpy(g), state, w)  # one fused pass, in place
        updates, ref_state = ref.update(jax.numpy.asarray(g), ref_state, ref_p)
        ref_p = optax.apply_updates(ref_p, updates)
    np.testing.assert_allclose(_outside(s3_bucket), np.asarray(ref_p), rtol=1e-5, atol=1e-6)

    apply = jax.jit(jask.optim.apply_updates)
    w = apply(w, jask.from_numpy(grads[0]))
    np.testing.assert_allclose(_outside(s3_bucket), np.asarray(ref_p) + grads[0], rtol=1e-5,
                               atol=1e-6)
    assert _commits(s3_bucket) == before + 3


def test_a_commit_racing_another_writer_is_refused(s3_bucket, small_budget, monkeypatch):
    w0 = np.zeros(SHAPE, np.float32)
    repo = _repo(s3_bucket, {"w": w0})
    w = jask.open_icechunk(repo, "w")  # a Repository object this time

    def other_writer(step):
        if step == "commit":  # another process commits to the same array first
            session = icechunk.Repository.open(_storage(s3_bucket)).writable_session("main")
            zarr.open_array(session.store, path="w", mode="r+")[:] = 7.0
            session.commit("the other writer")

    monkeypatch.setattr(icechunk_stores, "on_step", other_writer)
    with pytest.raises(jask.StoreChangedError, match=r"another writer committed.*branch 'main'"):
        w.update_(jask.from_numpy(np.ones(SHAPE, np.float32)))
    monkeypatch.setattr(icechunk_stores, "on_step", None)
    np.testing.assert_array_equal(_outside(s3_bucket), np.full(SHAPE, 7.0, np.float32))
    w.update_(jask.from_numpy(np.ones(SHAPE, np.float32)))  # the next one goes through
    np.testing.assert_array_equal(_outside(s3_bucket), np.ones(SHAPE, np.float32))


def test_missing_array_is_named(s3_bucket):
    _repo(s3_bucket, {"w": np.zeros(SHAPE, np.float32)})
    with pytest.raises(FileNotFoundError, match="'nope' on branch 'main'"):
        jask.open_icechunk(f"{s3_bucket}/repo", "nope")


_READER = """
import sys, numpy as np, zarr, icechunk, os
storage = icechunk.s3_storage(bucket={bucket!r}, prefix="repo", from_env=True, allow_http=True,
                              endpoint_url=os.environ["AWS_ENDPOINT_URL"], force_path_style=True)
repo = icechunk.Repository.open(storage)
seen = {{}}
print("ready", flush=True)
while not os.path.exists({stop!r}):
    a = zarr.open_array(repo.readonly_session("main").store, path="w", mode="r")[:]
    key = str(a.flat[0]) if np.all(a == a.flat[0]) else "mixed"
    seen[key] = seen.get(key, 0) + 1
print(seen, flush=True)
"""


def test_a_reader_in_another_process_sees_old_or_new(s3_bucket, s3_server, small_budget,
                                                     tmp_path):
    _repo(s3_bucket, {"w": np.zeros(SHAPE, np.float32)})
    w = jask.open_icechunk(f"{s3_bucket}/repo", "w")
    stop = str(tmp_path / "stop")
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER.format(bucket=s3_bucket.removeprefix("s3://"), stop=stop)],
        env=environment_for(s3_server), stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready"
        for value in (1.0, 2.0, 3.0, 4.0):  # each update_ rewrites every chunk
            w.update_(jask.from_numpy(np.full(SHAPE, value, np.float32)))
        open(stop, "w").close()
        seen = eval(reader.communicate(timeout=60)[0])  # noqa: S307 - our own child's dict
    finally:
        reader.kill()
    assert "mixed" not in seen and sum(seen.values()) >= 1, seen
    assert set(seen) <= {"0.0", "1.0", "2.0", "3.0", "4.0"}, seen


_KILLED_WRITER = """
import os, signal, numpy as np, jask
from jask.store.kinds.icechunk import repositories as icechunk_stores
w = jask.open_icechunk({url!r}, "w")
jask.set_memory_budget(64 * 1024)  # many tiles, many chunk objects written before the commit
icechunk_stores.on_step = (lambda step: os.kill(os.getpid(), signal.SIGKILL)
                           if step == "commit" else None)
w.update_(jask.from_numpy(np.full({shape!r}, 5.0, np.float32)))
print("not killed")
"""


def test_a_writer_killed_before_its_commit_leaves_the_old_snapshot(s3_bucket, s3_server,
                                                                  small_budget):
    w0 = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    _repo(s3_bucket, {"w": w0})
    before = _commits(s3_bucket)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER.format(url=f"{s3_bucket}/repo", shape=SHAPE)],
        env=environment_for(s3_server), capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr[-2000:]  # SIGKILL, with every chunk written
    np.testing.assert_array_equal(_outside(s3_bucket), w0)
    assert _commits(s3_bucket) == before
    w = jask.open_icechunk(f"{s3_bucket}/repo", "w")  # and the next writer goes on
    w.update_(w + 1.0)
    np.testing.assert_array_equal(_outside(s3_bucket), w0 + 1)


def test_a_plain_store_at_a_url_is_refused_naming_it(s3_bucket, small_budget):
    url = f"{s3_bucket}/w.zarr"
    z = zarr.create_array(store=zarr_store(url), shape=SHAPE, chunks=CHUNKS, dtype="f4")
    z[:] = 1.0
    w = jask.open(url)
    refused = rf"{url}.*plain Zarr store in object storage.*icechunk.*new URL"
    with pytest.raises(NotImplementedError, match=refused) as refusal:
        w.update_(w * 2.0)
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in str(refusal.value)
    del refusal  # (its traceback holds the DiskArrays)
    tx = jask.optim.sgd(0.1)
    with pytest.raises(NotImplementedError, match=refused):
        jask.optim.step(tx, jask.from_numpy(np.ones(SHAPE, np.float32)), tx.init(w), w)
    with pytest.raises(Exception, match=refused):  # compiled: refused when the call runs
        jax.jit(lambda w: w.update_(w * 2.0))(w)
    written = zarr.open_array(zarr_store(url), mode="r")[:]
    np.testing.assert_array_equal(written, 1.0)  # nothing written


def test_an_update_computed_from_a_replaced_snapshot_is_refused(s3_bucket, small_budget):
    _repo(s3_bucket, {"w": np.zeros(SHAPE, np.float32), "other": np.zeros(SHAPE, np.float32)})
    w = jask.open_icechunk(f"{s3_bucket}/repo", "w")
    new = w + 1.0  # computed from the snapshot this process read

    def commit(name, value):
        session = icechunk.Repository.open(_storage(s3_bucket)).writable_session("main")
        zarr.open_array(session.store, path=name, mode="r+")[:] = value
        session.commit(f"another process writes {name}")

    commit("other", 5.0)  # another array changing is no conflict
    w.update_(new)
    np.testing.assert_array_equal(_outside(s3_bucket), 1.0)
    new = w + 1.0
    commit("w", 7.0)  # but w itself changing after we read it is
    with pytest.raises(jask.StoreChangedError, match="after this process read it"):
        w.update_(new)
    np.testing.assert_array_equal(_outside(s3_bucket), 7.0)
    del new


def test_a_view_keeps_its_values_when_the_array_is_committed(s3_bucket, small_budget):
    """``w.T`` and ``w[1:]`` are views of the icechunk array: its update copies them first."""
    w0 = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    _repo(s3_bucket, {"w": w0})
    w = jask.open_icechunk(f"{s3_bucket}/repo", "w")
    T, S = w.T, w[1:]
    w.update_(w * 3.0)
    np.testing.assert_allclose(_outside(s3_bucket), w0 * 3.0, rtol=1e-6)
    np.testing.assert_array_equal(T.to_numpy(), w0.T)
    np.testing.assert_array_equal(S.to_numpy(), w0[1:])
