"""Object storage as a hostile user meets it (issue #17's promises under attack).

Every store lives on a real S3-compatible server (moto's server mode, a
separate process: tests/s3server.py), checked from outside with plain zarr
(over its ObjectStore), icechunk and obstore listings: URLs that carry secrets or name
other objects than zarr would, forged session markers and other people's
objects in a scratch prefix, saves into scratch, over a user's folder and
racing each other, an icechunk branch that does not exist.
"""
from __future__ import annotations

import json
import os
import threading

import icechunk
import numpy as np
import obstore
import pytest
import zarr
from s3server import ACCESS_KEY, SECRET_KEY, zarr_store

import jask
from jask.store import session_dir
from jask.store.kinds.objects import buckets, remote
from jask.store.kinds.objects import sessions as object_sessions


def _keys(url: str) -> list[str]:
    """Every key under ``url``, relative to it (obstore, not jask's listing)."""
    where = buckets.bucket_prefix(url)
    top = where.prefix + "/" if where.prefix else ""
    return sorted(o["path"][len(top):] for batch in obstore.list(where.client, prefix=top or None)
                  for o in batch)


def _put(url: str, name: str, data: bytes = b"user data") -> None:
    where = buckets.bucket_prefix(url)
    obstore.put(where.client, where.key(name), data)


def test_urls_that_would_show_secrets_or_name_other_objects_are_refused(s3_bucket, small_budget):
    """Credentials in a URL would show in every filename, repr and message; a
    query or fragment is part of the key for zarr (s3fs) but was dropped by
    jask, which read and wrote another object; '//', '.' and '..' segments
    name no key. Each is refused before any request, its secrets not shown."""
    x = np.arange(12.0).reshape(3, 4)
    zarr.create_array(store=zarr_store(f"{s3_bucket}/x.zarr"), data=x, chunks=(2, 2))
    bucket = s3_bucket.removeprefix("s3://")
    bad = [f"s3://{ACCESS_KEY}:{SECRET_KEY}@{bucket}/x.zarr",
           f"{s3_bucket}/x.zarr?X-Amz-Signature={SECRET_KEY}",
           f"{s3_bucket}/x.zarr#{SECRET_KEY}", f"{s3_bucket}/a//x.zarr",
           f"{s3_bucket}/a/../x.zarr"]
    for url in bad:
        for call in (lambda: jask.open(url), lambda: jask.open_group(url),
                     lambda: jask.save(jask.from_numpy(x), url.replace("x.zarr", "y.zarr")),
                     lambda: jask.set_memory_budget("1MB", scratch_dir=url),
                     lambda: jask.open_icechunk(url, "w")):
            with pytest.raises(ValueError, match="URL|scratch_dir") as err:
                call()
            text = str(err.value)
            assert SECRET_KEY not in text and ACCESS_KEY not in text and bucket in text
    assert _keys(s3_bucket) == ["x.zarr/c/0/0", "x.zarr/c/0/1", "x.zarr/c/1/0", "x.zarr/c/1/1",
                                "x.zarr/zarr.json"]  # (nothing written at 'y.zarr' nor 'x')
    # Spaces, unicode and '%' are keys like any other: the same objects as zarr's.
    url = f"{s3_bucket}/my data/ü%20+.zarr"
    jask.save(jask.from_numpy(x), url, chunks=(2, 3))
    np.testing.assert_array_equal(zarr.open_array(zarr_store(url), mode="r")[:], x)
    np.testing.assert_array_equal(jask.open(url).to_numpy(), x)


def test_bad_storage_options_are_named_with_the_bucket(s3_bucket, small_budget):
    """obstore's raw error (a misspelt option, a number for a key) or a Rust
    panic and backtrace (an endpoint with a space) became a ValueError naming
    the bucket, whatever secrets were given."""
    url = f"{s3_bucket}/x.zarr"
    for options, problem in [({"aws_secret": SECRET_KEY}, "'aws_secret' is not valid"),
                             ({"key": 5, "secret": SECRET_KEY}, "TypeError"),
                             ({"endpoint_url": "http://a b:1", "secret": SECRET_KEY}, "is no URL")]:
        with pytest.raises(ValueError, match=f"cannot reach '{s3_bucket}'.*{problem}") as err:
            jask.open(url, storage_options=options)
        assert SECRET_KEY not in str(err.value)


@pytest.fixture
def scratch_url(s3_bucket, jask_scratch):
    url = f"{s3_bucket}/scratch"
    jask.set_memory_budget("256KB", scratch_dir=url + "/")  # (a trailing slash: the same)
    yield url
    object_sessions.end(url)


def test_save_into_the_scratch_prefix_is_refused(scratch_url):
    """Locally a save inside the scratch folder is refused; at a URL it was
    saved, then deleted with the session at exit."""
    b = jask.from_numpy(np.arange(10.0)) + 1
    assert b.filename.startswith(scratch_url + "/session-")
    for url in (b.filename + "-mine.zarr", f"{scratch_url}/mine.zarr"):
        with pytest.raises(ValueError, match="inside jask's scratch prefix"):
            jask.save(b, url)
    assert not [k for k in _keys(scratch_url) if "mine" in k]
    saved = jask.save(b, scratch_url + "2/mine.zarr")  # a look-alike prefix is not scratch
    np.testing.assert_array_equal(saved.to_numpy(), np.arange(10.0) + 1)
    # In place, one of jask's own arrays there was refused with advice for a
    # user's store (icechunk, save to a new URL): now it gets a new version.
    b.update_(b + 1)
    np.testing.assert_array_equal((b - 2).to_numpy(), np.arange(10.0))


def test_a_scratch_prefix_on_a_dead_endpoint_is_named(s3_bucket, jask_scratch, monkeypatch):
    """Starting a session was three bare requests: the first op failed with
    obstore's raw error and HTTP dump, with no retry. Now its requests are
    retried and counted, then a RemoteStoreError names the session's URL."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{s.getsockname()[1]}")
    monkeypatch.setattr(object_sessions, "BACKOFF", 0.01)
    monkeypatch.setattr(object_sessions, "RETRIES", 2)
    jask.set_memory_budget("256KB", scratch_dir=f"{s3_bucket}/scratch")
    with jask.track() as t, pytest.raises(buckets.RemoteStoreError,
                                          match=f"scratch session.*'{s3_bucket}/scratch/session-"
                                          ".*after 3 attempts") as err:
        jask.from_numpy(np.ones(3))
    assert SECRET_KEY not in str(err.value) and t.total.retries == 2
    assert object_sessions.live_sessions() == []


def test_workers_get_the_scratch_prefixs_options(s3_bucket, jask_scratch):
    """use_private_scratch before the first op (the natural order) sent the
    workers no options for the scratch prefix: with credentials given only
    to set_memory_budget, every task failed (seen on a LocalCluster of
    processes). Checked here on the plugin a real scheduler holds."""
    import pickle

    from distributed import Client, LocalCluster

    from jask.engine import cluster

    options = {"key": ACCESS_KEY, "secret": SECRET_KEY}
    jask.set_memory_budget("1MB", scratch_dir=f"{s3_bucket}/scratch", storage_options=options)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as c, \
            Client(c) as client:
        cluster.use_private_scratch(client)
        plugin = client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.worker_plugins["jask-private-scratch"])
    plugin = pickle.loads(plugin) if isinstance(plugin, bytes) else plugin
    assert plugin.options[f"{s3_bucket}/scratch"] == options


def _marker(token: str, lease: str) -> bytes:
    return f"jask-object-session 1\nid {token}\npid 1\nstart 1\nhost h\nlease {lease}\n".encode()


def test_forged_markers_and_other_peoples_objects_are_never_deleted(s3_bucket, jask_scratch):
    """A marker with a lease of 0, -1 or nan made any session 'expired', so
    the next session deleted the whole prefix; and a proven but dead
    session's prefix lost every object, also those jask never writes there."""
    scratch = f"{s3_bucket}/scratch"
    forged = {"0": "0", "1": "-1", "2": "nan"}  # session suffix -> its marker's lease
    for n, lease in forged.items():
        token = n * 16
        _put(scratch, f"session-h-{n}-{token}/.jask-session", _marker(token, lease))
        _put(scratch, f"session-h-{n}-{token}/add-0123456789ab.zarr/c/0")
    dead = f"session-h-3-{'3' * 16}"  # proven, its lease gone: removed, but only jask's keys
    for name in (".jask-session", "notes.csv", "add-0123456789ab.zarr/c/0",
                 "add-0123456789ab.zarr/zarr.json"):
        _put(scratch, f"{dead}/{name}", _marker("3" * 16, "1") if "session" in name else b"x")
    before = _keys(scratch)
    try:
        mine = session_dir(scratch)  # starting a session removes dead ones
        left = [k for k in _keys(scratch) if not k.startswith(mine.rsplit("/", 1)[1])]
    finally:
        object_sessions.end(scratch)
    assert left == [k for k in before if not k.startswith(dead)] + [f"{dead}/notes.csv"]


def test_save_over_a_users_folder_deletes_nothing_of_theirs(s3_bucket, small_budget):
    """overwrite=True at a URL clears what a failed save left (chunk objects),
    never a user's objects: it deleted a whole folder with arrays in it."""
    x = np.arange(20.0).reshape(4, 5)
    zarr.create_array(store=zarr_store(f"{s3_bucket}/data/x.zarr"), data=x, chunks=(2, 5))
    _put(f"{s3_bucket}/data", "readme.txt")
    before = _keys(f"{s3_bucket}/data")
    with pytest.raises(FileExistsError, match="never deletes them"):
        jask.save(jask.from_numpy(x), f"{s3_bucket}/data", overwrite=True)
    assert _keys(f"{s3_bucket}/data") == before
    with pytest.raises(ValueError, match="whole bucket"):  # (it deleted every object in it)
        jask.save(jask.from_numpy(x), s3_bucket, overwrite=True)
    assert _keys(f"{s3_bucket}/data") == before
    _put(f"{s3_bucket}/cut", "c/0/0", b"\0" * 8)  # what a save cut short leaves
    with pytest.raises(FileExistsError, match="no Zarr metadata"):
        jask.save(jask.from_numpy(x), f"{s3_bucket}/cut")
    jask.save(jask.from_numpy(x), f"{s3_bucket}/cut", overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(zarr_store(f"{s3_bucket}/cut"), mode="r")[:], x)
    assert ".jask-save" not in _keys(f"{s3_bucket}/cut")


def test_two_saves_racing_to_one_url_make_one_array(s3_bucket, small_budget, monkeypatch):
    """Both found the URL empty, both wrote their chunks and metadata: an
    array of mixed chunks. Now the URL is claimed before any chunk is put,
    and the second save is refused, writing nothing."""
    listing, both_listed = remote.list_prefix, threading.Barrier(2, timeout=30)
    waited = threading.local()

    def list_then_wait(url):  # each save's first listing, then both go on at once
        keys = listing(url)
        if not getattr(waited, "done", False):
            waited.done = True
            both_listed.wait()
        return keys

    monkeypatch.setattr(remote, "list_prefix", list_then_wait)
    url, values = f"{s3_bucket}/raced.zarr", [np.full((30, 8), v) for v in (1.0, 2.0)]
    sources = [jask.from_numpy(v) for v in values]
    outcome: list = [None, None]

    def save(i):
        try:
            jask.save(sources[i], url, chunks=(3, 8))
        except Exception as err:  # noqa: BLE001 - kept for the assertion
            outcome[i] = err

    threads = [threading.Thread(target=save, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [e for e in outcome if e is not None]
    assert len(failed) == 1 and isinstance(failed[0], FileExistsError), outcome
    assert "under way" in str(failed[0])
    winner = outcome.index(None)
    np.testing.assert_array_equal(zarr.open_array(zarr_store(url), mode="r")[:], values[winner])


def test_a_branch_that_does_not_exist_is_named(s3_bucket, small_budget):
    """It was icechunk's raw 'ref not found' with a Rust backtrace; a wrong
    kind of repository or a group's path gave raw errors too. (And a guard:
    an update_ of the wrong shape or dtype commits nothing.)"""
    storage = icechunk.s3_storage(bucket=s3_bucket.removeprefix("s3://"), prefix="repo",
                                  endpoint_url=os.environ["AWS_ENDPOINT_URL"], allow_http=True,
                                  force_path_style=True, from_env=True)
    repo = icechunk.Repository.create(storage)
    session = repo.writable_session("main")
    zarr.create_array(session.store, name="w", shape=(3,), dtype="f4")[:] = 1
    repo.create_tag("v1", session.commit("w"))
    with pytest.raises(FileNotFoundError, match=r"no branch 'dev' in the icechunk repository "
                       rf"'{s3_bucket}/repo'; its branches: main"):
        jask.open_icechunk(f"{s3_bucket}/repo", "w", branch="dev")
    with pytest.raises(FileNotFoundError, match=r"'v1' \(a tag"):
        jask.open_icechunk(f"{s3_bucket}/repo", "w", branch="v1")
    # A session (or None) for the repository: AttributeError, or for None "handed
    # to jask in another process"; a group's path: zarr's NodeTypeValidationError.
    for wrong in (repo.readonly_session("main"), None):
        with pytest.raises(TypeError, match="must be an icechunk.Repository or its URL"):
            jask.open_icechunk(wrong, "w")
    with pytest.raises(FileNotFoundError, match=r"no Zarr array '' \(a group there\)"):
        jask.open_icechunk(f"{s3_bucket}/repo", "")
    w = jask.open_icechunk(f"{s3_bucket}/repo", "w")
    for wrong in (np.ones(4, np.float32), np.ones(3, np.float64), np.ones(3, np.int32)):
        with pytest.raises(ValueError, match="new_value has shape"):
            w.update_(jask.from_numpy(wrong))
    assert len(list(repo.ancestry(branch="main"))) == 2  # (the repository's first, and 'w')


def test_a_group_with_a_member_zarr_cannot_read_is_named(s3_bucket, small_budget):
    """It was zarr's bare TypeError ('Invalid type: zz'), naming nothing."""
    group = zarr.open_group(zarr_store(f"{s3_bucket}/g.zarr"), mode="w")
    group.create_array("x", shape=(5,), dtype="f4")[:] = 1
    meta = json.loads(remote.get(f"{s3_bucket}/g.zarr", "x/zarr.json"))
    _put(f"{s3_bucket}/g.zarr", "x/zarr.json", json.dumps(meta | {"fill_value": "zz"}).encode())
    with pytest.raises(FileNotFoundError, match=f"group '{s3_bucket}/g.zarr' holds an array "
                       "whose metadata zarr cannot read: TypeError"):
        jask.open_group(f"{s3_bucket}/g.zarr")


def test_a_fill_value_of_the_wrong_type_is_named_with_the_url(s3_bucket):
    """zarr raises TypeError for it; a local store says 'is not a Zarr array', naming it."""
    meta = {"zarr_format": 3, "node_type": "array", "shape": [10], "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": "hello", "codecs": [{"name": "bytes"}], "attributes": {}}
    _put(f"{s3_bucket}/f.zarr", "zarr.json", json.dumps(meta).encode())
    with pytest.raises(FileNotFoundError, match=f"'{s3_bucket}/f.zarr' is not a Zarr array"):
        jask.open(f"{s3_bucket}/f.zarr")


def test_a_session_that_cannot_start_raises_jasks_remote_store_error():
    """The error object_sessions raises (objects') is jask's public one."""
    assert buckets.RemoteStoreError is jask.RemoteStoreError
