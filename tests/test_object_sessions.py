"""Sessions in object storage (jask.store.kinds.objects.sessions) on a real S3 server
(moto's server mode, a separate process): proof by content read back, a
lease instead of flock, and deletion only under prefixes a session proved.
Checked from outside with obstore listings."""
import os
import signal
import subprocess
import sys
import time

import obstore
import pytest
from s3server import environment_for, zarr_store

import jask
from jask.store import location_of, session_dir, trash
from jask.store.kinds.objects import buckets
from jask.store.kinds.objects import sessions as object_sessions


def _keys(url: str) -> list[str]:
    where = buckets.bucket_prefix(url)
    return sorted(o["path"] for batch in obstore.list(where.client, prefix=where.prefix + "/")
                  for o in batch)


def _put(url: str, data: bytes = b"x") -> None:
    where = buckets.bucket_prefix(url.rsplit("/", 1)[0])
    obstore.put(where.client, where.key(url.rsplit("/", 1)[1]), data)


@pytest.fixture
def scratch_url(s3_bucket):
    url = f"{s3_bucket}/scratch"
    yield url
    object_sessions.end(url)


def test_a_session_is_a_proven_prefix_and_owns_only_its_stores(scratch_url):
    url = session_dir(scratch_url)
    assert url == session_dir(scratch_url)  # one per process and scratch URL
    assert url.startswith(scratch_url + "/session-")
    marker = _keys(url)
    prefix = buckets.bucket_prefix(url).prefix
    assert marker == [f"{prefix}/.jask-lease", f"{prefix}/.jask-session"]
    text = bytes(obstore.get(buckets.bucket_prefix(url).client, f"{prefix}/.jask-session").bytes())
    assert f"pid {os.getpid()}" in text.decode() and url.endswith(
        text.decode().split("id ", 1)[1].split()[0])
    assert location_of(url + "/add-1.zarr").owned()
    assert not location_of(scratch_url + "/add-1.zarr").owned()    # beside the session
    assert not location_of(url + "x/add-1.zarr").owned()            # a prefix that only starts so
    assert not location_of(url + "/add-1.zarr/c/0").owned()         # inside a store, not a store
    assert location_of(url + "/add-1.zarr").holds_jask_stores()
    assert not location_of(scratch_url + "/add-1.zarr").holds_jask_stores()

    for name in ("a.zarr/zarr.json", "a.zarr/c.0", "a.zarr2/zarr.json"):
        _put(f"{url}/{name}")
    trash.remove_now(url + "/a.zarr")
    assert [k.rsplit("/", 2)[-2] for k in _keys(url) if "zarr" in k] == ["a.zarr2"]
    location_of(url + "/a.zarr2").keep()  # opened by path: never deleted
    trash.remove(url + "/a.zarr2")
    trash.wait()
    assert any("a.zarr2" in k for k in _keys(url))
    object_sessions.end(scratch_url)
    assert _keys(url) == []  # the session's end deletes its whole prefix


# The child loads jask's store modules without the package's __init__ (which
# imports JAX: seconds per process on this machine); they import no JAX.
_CHILD = """
import os, sys, time, types
package = types.ModuleType("jask")
package.__path__ = [sys.argv[2]]
sys.modules["jask"] = package
from jask.store.kinds.objects import sessions as object_sessions
object_sessions.LEASE_SECONDS = 1.0
url = object_sessions.session_url(sys.argv[1])
print(url, flush=True)
time.sleep(60)
"""


def test_a_killed_session_is_removed_once_its_lease_expires_and_nothing_else(
        scratch_url, s3_server):
    package = os.path.dirname(os.path.abspath(jask.__file__))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, scratch_url, package], text=True,
                             stdout=subprocess.PIPE, env=environment_for(s3_server))
    try:
        dead = child.stdout.readline().strip()
        assert dead.startswith(scratch_url + "/session-")
        _put(dead + "/add-1.zarr/c.0")
        # A live session is never removed: its heartbeat renews the lease.
        time.sleep(1.5)
        mine = session_dir(scratch_url)
        assert _keys(dead) and dead not in object_sessions.remove_dead(scratch_url)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Prefixes that only look like sessions are never touched.
    lookalikes = [f"{scratch_url}/session-h-1-abc/a.zarr/c.0",      # no marker
                  f"{scratch_url}/session-h-2-abc/.jask-session",   # a marker of another id
                  f"{scratch_url}/notes.txt"]                        # not a session at all
    for key in lookalikes:
        _put(key, b"jask-object-session 1\nid zzz\npid 1\nstart 1\nhost h\nlease 0\n")
    deadline = time.monotonic() + 15
    removed: list = []
    while dead not in removed and time.monotonic() < deadline:
        time.sleep(0.5)
        removed = object_sessions.remove_dead(scratch_url)
    assert removed == [dead] and _keys(dead) == []
    assert all(_keys(key.rsplit("/", 1)[0]) for key in lookalikes)
    assert _keys(mine)  # its own session stays


def test_storage_options_alone_reach_the_scratch_stores(s3_server, jask_scratch, monkeypatch,
                                                        rng):
    import numpy as np
    from s3server import ACCESS_KEY, SECRET_KEY

    import jask

    bucket = s3_server.make_bucket()
    for key in s3_server.env:  # no environment variables: only the options given
        monkeypatch.delenv(key, raising=False)
    options = {"endpoint_url": s3_server.endpoint, "key": ACCESS_KEY, "secret": SECRET_KEY,
               "region_name": "us-east-1"}
    scratch_url = f"{bucket}/scratch"
    jask.set_memory_budget("256KB", scratch_dir=scratch_url, storage_options=options)
    try:
        x = rng.normal(size=(301, 37)).astype(np.float32)
        a = jask.from_numpy(x)
        b = a * 2.0 + a
        assert b.filename.startswith(scratch_url + "/session-")
        np.testing.assert_allclose(b.to_numpy(), 3 * x, rtol=1e-6)
        np.testing.assert_allclose(float(jask.sum(b)), 3 * x.sum(), rtol=1e-4)
        assert SECRET_KEY not in repr(jask.get_config()) + repr(b)
        where = buckets.bucket_prefix(b.filename)
        assert obstore.list(where.client, prefix=where.prefix + "/").collect()
        del b
        jask.collect()
        assert obstore.list(where.client, prefix=where.prefix + "/").collect() == []
    finally:
        object_sessions.end(scratch_url)
    with pytest.raises(ValueError, match="storage_options apply to a scratch_dir in object"):
        jask.set_memory_budget("1MB", scratch_dir=jask_scratch.path, storage_options=options)


def test_a_failed_op_leaves_no_keys_in_the_scratch_prefix(scratch_url, s3_bucket, jask_scratch):
    import numpy as np
    import zarr

    import jask

    x = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    zarr.create_array(zarr_store(f"{s3_bucket}/data/x.zarr"), shape=x.shape, chunks=(8, 30),
                      dtype=x.dtype, compressors=None)[...] = x
    _put(f"{s3_bucket}/data/x.zarr/c/4/0", b"\0" * 10)  # the last chunk: damaged
    jask.set_memory_budget("256KB", scratch_dir=scratch_url)
    a = jask.open(f"{s3_bucket}/data/x.zarr")
    session = session_dir(scratch_url)
    with pytest.raises(jask.DamagedStoreError, match="x.zarr"):
        (a * 2.0).block_until_ready()  # lazy: the error comes where the result is read
    jask.collect()
    assert [k.rsplit("/", 1)[-1] for k in _keys(session)] == [".jask-lease", ".jask-session"]


def test_jasks_own_arrays_in_a_bucket_are_updated_by_new_versions(
        scratch_url, s3_bucket, jask_scratch):
    """Object storage has no rename: update_ and jask.optim's in-place steps
    write a new store and hand it the array's handle in one step. Values
    match numpy and optax; a view keeps the old values; the old version is
    deleted; a failed update leaves the array as it was and no new keys."""
    import jax
    import numpy as np
    import optax
    import zarr

    import jask

    jask.set_memory_budget("256KB", scratch_dir=scratch_url)
    session = session_dir(scratch_url)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((301, 37)).astype(np.float32)
    w = jask.from_numpy(x)
    old, view = w.filename, w[5:9]
    assert old.startswith(session)
    w.update_(w * 2.0 + 1.0)
    np.testing.assert_allclose(w.to_numpy(), x * 2 + 1, rtol=1e-6)
    np.testing.assert_array_equal(view.to_numpy(), x[5:9])
    assert w.filename != old and w.filename.startswith(session)
    del view
    jask.collect()
    assert not [k for k in _keys(session) if old.rsplit("/", 1)[1] in k]

    # a source with a damaged chunk: the update fails, w is as it was, nothing is left
    zarr.create_array(zarr_store(f"{s3_bucket}/data/s.zarr"), shape=x.shape, chunks=(64, 37),
                      dtype=x.dtype, compressors=None)[...] = x
    _put(f"{s3_bucket}/data/s.zarr/c/2/0", b"\0" * 10)
    before = _keys(session)
    with pytest.raises(jask.DamagedStoreError, match="s.zarr"):
        w.update_(jask.open(f"{s3_bucket}/data/s.zarr"))
    jask.collect()
    assert _keys(session) == before
    np.testing.assert_allclose(w.to_numpy(), x * 2 + 1, rtol=1e-6)

    # adam, jitted, in place: against optax on the same numbers
    g0 = rng.standard_normal(x.shape).astype(np.float32)
    p, g = jask.from_numpy(x), jask.from_numpy(g0)
    adam = jask.optim.adam(1e-2)
    state = adam.init(p)
    step = jax.jit(lambda p, s, g: jask.optim.step(adam, g, s, p))
    ref, ref_state, tx = x, None, optax.adam(1e-2)
    ref_state = tx.init(ref)
    for _ in range(2):
        p, state = step(p, state, g)
        updates, ref_state = tx.update(g0, ref_state, ref)
        ref = optax.apply_updates(ref, updates)
    np.testing.assert_allclose(p.to_numpy(), np.asarray(ref), rtol=1e-5, atol=1e-6)
