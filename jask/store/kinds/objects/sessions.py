"""Sessions in object storage: this process's prefix of a scratch URL.

With ``set_memory_budget(B, scratch_dir="s3://bucket/prefix")`` every store
jask makes lives under ``prefix/session-<host>-<pid>-<id>/`` in the bucket,
where every worker of a cluster can read it. What the local
:mod:`jask.store.kinds.local.sessions` gets from the filesystem, it gets here from
objects (the reasons, mechanism by mechanism, are in ``jask/DESIGN.md``):

* **A session is proven by content, never by name.** Its ``.jask-session``
  marker holds a random id, the host, pid and process start time; it is
  made by a *conditional put* (``If-None-Match: *``: fails if the key
  exists), then read back and compared, so two processes can never both
  believe they made one session. A prefix whose marker is missing, unreadable
  or names another id than the prefix's is never touched.
* **A lease, not a lock.** Object stores have no ``flock`` and a process on
  another machine cannot be asked whether it is alive, so a live session
  rewrites its ``.jask-lease`` object every :data:`HEARTBEAT` of its
  :data:`LEASE_SECONDS` (a daemon thread). Another session removes a proven
  one whose lease is older than the lease it declares, measured by the
  *server's* clock (the lease's ``Last-Modified`` against that of a lease
  just written), so clocks of different machines never matter. The lease is
  written before the marker, so a proven session always has one; one
  without (its removal was cut short) is removed.
* **Deleting is deleting keys under a proven prefix**: this process deletes
  only under its own session's prefix (``owns``), others' only when proven
  (a 16-digit hex id matching the prefix's name, a positive finite lease)
  and expired, and there only the keys jask writes (marker, lease, ``*.zarr``
  and ``*.grad`` stores); the marker goes last, so a removal cut short
  leaves a prefix that is still proven, and removed later.

Nothing here knows of JAX or Dask.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import math
import os
import random
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field

from jask.base import counters, forks

from . import buckets

__all__ = ["session_url", "owns", "keep", "holds_jask_stores", "remove", "remove_dead",
           "live_sessions", "LEASE_SECONDS", "MARKER", "LEASE"]

#: Name of the proof object under every session prefix.
MARKER = ".jask-session"
#: Name of the object a live session rewrites (its heartbeat).
LEASE = ".jask-lease"
#: How long a session's lease lasts without a heartbeat before others may
#: remove it (seconds; declared in its marker, so the holder decides).
LEASE_SECONDS = 120.0
#: Heartbeats per lease period (a heartbeat every LEASE_SECONDS / HEARTBEAT).
HEARTBEAT = 6
_PROOF_TAG = "jask-object-session 1"
_TOKEN = re.compile(r"[0-9a-f]{16}")  # a session's random id, as _make writes it
# What jask puts under a session prefix: its marker and lease, and stores
# (``<op>-<id>.zarr``, gradients ``.grad``); only these go with another's session.
_JASK_KEY = re.compile(r"(\.jask-(session|lease)|[^/]+\.(zarr|grad)/.+)")
_DELETE_BATCH = 1000  # S3's DeleteObjects takes at most 1000 keys
#: Retries of a transient error in starting a session, and the first wait
#: (doubled each time, with jitter, at most BACKOFF_MAX), as jask.store.kinds.objects.remote's.
RETRIES = 5
BACKOFF = 0.1
BACKOFF_MAX = 2.0

_lock = forks.lock()
_owner_pid = [os.getpid()]


@dataclass
class _Session:
    url: str                         # s3://bucket/prefix/session-host-pid-id
    where: buckets.BucketPrefix
    proof: str
    stop: threading.Event = field(default_factory=threading.Event)
    kept: set = field(default_factory=set)


_sessions: dict[str, _Session] = {}  # scratch URL -> this process's session


def session_url(scratch_url: str, storage_options: dict | None = None) -> str:
    """This process's session prefix under ``scratch_url``, made on first use.

    Making it writes the lease, then the marker by a conditional put, and
    reads the marker back; then proven sessions under ``scratch_url`` whose
    lease expired (their process died, on whatever machine) are removed.

    Example (needs an object store; with moto's server running):
      >>> url = session_url("s3://bucket/scratch")  # doctest: +SKIP
      >>> owns(url + "/add-1.zarr"), owns("s3://bucket/x.zarr")  # doctest: +SKIP
      (True, False)
    """
    scratch_url = scratch_url.rstrip("/")
    with _lock:
        _forget_if_forked()
        found = _sessions.get(scratch_url)
        if found is not None:
            return found.url
        if storage_options:  # every store under it reached with them (.remote)
            buckets.register_options(scratch_url, storage_options)
        session = _make(scratch_url, storage_options)
        _sessions[scratch_url] = session
    import obstore

    try:  # housekeeping: an endpoint failing a moment here fails no op (the next sweeps)
        remove_dead(scratch_url, storage_options, now=_server_now(session))
    except (OSError, obstore.exceptions.BaseError):
        pass
    return session.url


def _proof(token: str, lease: float) -> str:
    pid = os.getpid()
    return (f"{_PROOF_TAG}\nid {token}\npid {pid}\nstart {_start_time(pid)}\n"
            f"host {socket.gethostname()}\nlease {lease:g}\n")


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _request(what: str, url: str, name: str, call):
    """``call()``, a transient error (no connection, a timeout, 5xx, a bucket
    not found) retried with backoff and counted; then a RemoteStoreError
    naming the URL and key, credentials redacted."""
    import obstore

    for attempt in itertools.count():
        counters.requested(url)
        try:
            return call()
        except (obstore.exceptions.GenericError, ConnectionError, TimeoutError,
                FileNotFoundError) as err:
            if isinstance(err, FileNotFoundError) and "NoSuchBucket" not in str(err):
                raise  # a missing key is an answer
            if attempt >= RETRIES:
                cause = str(err).split("\n\nDebug source:")[0].strip()
                raise buckets.RemoteStoreError(buckets.redact(
                    f"{what} at {url!r} key {name!r} failed (after {attempt + 1} attempts): "
                    f"{type(err).__name__}: {cause}", buckets.secrets_for(url))) from None
            counters.retried(url)
            time.sleep(min(BACKOFF_MAX, BACKOFF * 2**attempt) * (0.5 + random.random() / 2))


def _make(scratch_url: str, storage_options: dict | None) -> _Session:
    import obstore

    token = uuid.uuid4().hex[:16]
    url = f"{scratch_url}/session-{socket.gethostname()}-{os.getpid()}-{token}"
    where = buckets.bucket_prefix(url, storage_options)
    proof = _proof(token, LEASE_SECONDS)
    start = "start of a scratch session"
    # Lease first, marker second: a proven session always has a lease.
    _request(start, url, LEASE, lambda: obstore.put(where.client, where.key(LEASE),
                                                    proof.encode()))
    with contextlib.suppress(obstore.exceptions.AlreadyExistsError):  # (a retry of a put
        _request(start, url, MARKER, lambda: obstore.put(  # that went through)
            where.client, where.key(MARKER), proof.encode(), mode="create"))
    if _request(start, url, MARKER, lambda: _read(where, MARKER)) != proof:  # proof: read back
        raise PermissionError(f"jask could not prove its scratch session at "
                              f"{buckets.redact(url)}: its marker reads back otherwise")
    session = _Session(url, where, proof)
    threading.Thread(target=_heartbeat, args=(session,), daemon=True,
                     name="jask-session-lease").start()
    return session


def _heartbeat(session: _Session) -> None:
    """Rewrite the lease until the session ends (or the process forks away)."""
    import obstore

    proof = _parse(session.proof)
    assert proof is not None  # written by _proof
    period = float(proof["lease"]) / HEARTBEAT
    while not session.stop.wait(period):
        with contextlib.suppress(Exception):  # an endpoint down a moment: next beat
            obstore.put(session.where.client, session.where.key(LEASE), session.proof.encode())


def _read(where: buckets.BucketPrefix, name: str) -> str | None:
    import obstore

    try:
        data = bytes(obstore.get(where.client, where.key(name)).bytes())
    except FileNotFoundError:
        return None
    return data.decode(errors="replace") if len(data) <= 4096 else None


def _parse(text: str | None) -> dict[str, str] | None:
    if not text or not text.startswith(_PROOF_TAG + "\n"):
        return None
    fields = dict(line.split(" ", 1) for line in text.splitlines()[1:] if " " in line)
    if not {"id", "pid", "start", "host", "lease"} <= fields.keys():
        return None
    try:
        lease = float(fields["lease"])
    except ValueError:
        return None
    # jask writes a 16-digit hex id and a positive lease: anything else
    # (a lease of 0, -1 or nan would make any session "expired") is not its
    ok = _TOKEN.fullmatch(fields["id"]) and math.isfinite(lease) and lease > 0
    return fields if ok else None


def _server_now(session: _Session):
    """The object store's clock: the Last-Modified of a lease written now."""
    import obstore

    obstore.put(session.where.client, session.where.key(LEASE), session.proof.encode())
    return obstore.head(session.where.client, session.where.key(LEASE))["last_modified"]


def remove_dead(scratch_url: str, storage_options: dict | None = None, *, now=None) -> list[str]:
    """Remove every proven session under ``scratch_url`` whose lease expired
    by ``now`` (the server's time; by default read from this process's own
    session there, and with none nothing is removed); return their URLs.
    Prefixes that are no proven session of jask's are never touched.

    Example:
      >>> remove_dead("s3://bucket/no-session-of-ours-here")
      []
    """
    import obstore

    if now is None:  # the server's time, from this process's own lease there
        own = _sessions.get(scratch_url.rstrip("/"))
        if own is None:
            return []  # no clock to judge leases by: remove nothing
        now = _server_now(own)
    top = buckets.bucket_prefix(scratch_url, storage_options)
    listing = obstore.list_with_delimiter(top.client, prefix=top.prefix + "/" if top.prefix
                                          else None)
    mine = {s.url for s in _sessions.values()}
    removed = []
    for prefix in listing["common_prefixes"]:
        name = prefix.rstrip("/").rsplit("/", 1)[-1]
        url = f"{top.url}/{name}"
        if not name.startswith("session-") or url in mine:
            continue
        where = buckets.bucket_prefix(url, storage_options)
        proof = _parse(_read(where, MARKER))
        if proof is None or not name.endswith("-" + proof["id"]):
            continue  # not jask's: never touched
        if not _expired(where, proof, now):
            continue
        _delete_prefix(where, only_jask=True)
        removed.append(url)
    return removed


def _expired(where: buckets.BucketPrefix, proof: dict[str, str], now) -> bool:
    import obstore

    try:
        beat = obstore.head(where.client, where.key(LEASE))["last_modified"]
    except FileNotFoundError:
        return True  # a proven session without lease: its removal was cut short
    return (now - beat).total_seconds() > float(proof["lease"])  # (checked by _parse)


def _delete_prefix(where: buckets.BucketPrefix, *, only_jask: bool = False) -> None:
    """Delete every key under ``where`` (a whole prefix, never a key that
    merely starts with its name), the lease and marker last; ``only_jask``:
    only the keys a session of jask's makes (another process's session: an
    object someone else put there stays, and with it the prefix, unproven)."""
    import obstore

    top = where.prefix + "/"
    keys = [obj["path"] for batch in obstore.list(where.client, prefix=top) for obj in batch]
    if only_jask:
        keys = [k for k in keys if _JASK_KEY.fullmatch(k[len(top):])]
    last = {where.key(LEASE), where.key(MARKER)}
    rest = [k for k in keys if k not in last]
    for start in range(0, len(rest), _DELETE_BATCH):
        obstore.delete(where.client, rest[start:start + _DELETE_BATCH])
    for name in (LEASE, MARKER):
        with contextlib.suppress(FileNotFoundError):
            obstore.delete(where.client, where.key(name))


# --- what this process may delete ------------------------------------------------

def _session_of(url: str) -> _Session | None:
    for session in _sessions.values():
        if url.startswith(session.url + "/"):
            return session
    return None


def owns(url: str) -> bool:
    """Whether the store at ``url`` lies directly under a session prefix of
    this very process and was not opened by path (:func:`keep`).

    Example:
      >>> owns("s3://bucket/data/features.zarr")
      False
    """
    _forget_if_forked()
    url = url.rstrip("/")
    session = _session_of(url)
    return (session is not None and url.rsplit("/", 1)[0] == session.url
            and url not in session.kept)


def holds_jask_stores(url: str, storage_options: dict | None = None) -> bool:
    """Whether the store at ``url`` lies directly under a proven session
    prefix (this process's, or another's proven by its marker: a worker
    reading a store the client made), so every chunk of it was written.

    Example:
      >>> holds_jask_stores("s3://bucket/data/features.zarr")  # doctest: +SKIP
      False
    """
    parent, _, _ = url.rstrip("/").rpartition("/")
    if any(parent == s.url for s in _sessions.values()):
        return True
    return _proven_prefix(parent, tuple(sorted((storage_options or {}).items())))


@functools.lru_cache(maxsize=256)
def _proven_prefix(url: str, options: tuple) -> bool:
    name = url.rsplit("/", 1)[-1]
    if not name.startswith("session-"):
        return False
    try:
        proof = _parse(_read(buckets.bucket_prefix(url, dict(options) or None), MARKER))
    except Exception:  # noqa: BLE001 - unreadable: not proven
        return False
    return proof is not None and name.endswith("-" + proof["id"])


def keep(url: str) -> None:
    """Never delete the store at ``url`` in this process (opened by path)."""
    session = _session_of(url.rstrip("/"))
    if session is not None:
        session.kept.add(url.rstrip("/"))


def remove(url: str, storage_options: dict | None = None) -> None:
    """Delete the store at ``url`` (every key under it) if :func:`owns` it."""
    if owns(url):
        session = _session_of(url.rstrip("/"))
        assert session is not None
        options = dict(session.where.options) if storage_options is None else storage_options
        _delete_prefix(buckets.bucket_prefix(url.rstrip("/"), options))


def live_sessions() -> list[str]:
    """This process's session URLs (for tests and debugging)."""
    return [s.url for s in _sessions.values()]


# --- the end of a session, and forks ---------------------------------------------

def _forget_if_forked() -> None:
    if _owner_pid[0] != os.getpid():
        _after_fork_in_child()


def _after_fork_in_child() -> None:
    _sessions.clear()  # the parent's: its heartbeat thread did not survive the fork
    _owner_pid[0] = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def end(scratch_url: str) -> None:
    """End this process's session under ``scratch_url``: delete its prefix."""
    session = _sessions.pop(scratch_url.rstrip("/"), None)
    if session is not None:
        session.stop.set()
        with contextlib.suppress(Exception):  # an endpoint gone: the lease expires instead
            _delete_prefix(session.where)


@atexit.register
def _end_all() -> None:
    if _owner_pid[0] != os.getpid():
        return
    for scratch_url in list(_sessions):
        end(scratch_url)
