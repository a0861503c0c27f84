"""Arrays in icechunk repositories: an ``update_`` is one commit.

Object storage has no rename, so the atomic folder exchange of
:mod:`jask.store.kinds.local.durability` cannot exist there: a plain Zarr store at a URL
is rewritten one object at a time, and a reader (or a crash) mid-update sees
a mix. An icechunk repository gives snapshot isolation instead: every write
goes into a *writable session* that no reader sees, and one ``commit`` moves
the branch to the new snapshot, all of it or nothing.

jask names an array in a repository by a string, the store's ``path``
everywhere else in jask (:class:`jask.store.spec.StoreSpec`)::

    icechunk+s3://bucket/prefix?branch=main#path/of/array

Reading it opens the branch's newest snapshot once per process (cached with
the other open stores in :mod:`jask.store.chunkio`), so an op reads one
snapshot throughout. :func:`replace` writes the new chunks in a writable
session of the branch and commits once; a commit by another writer that
changed the same array, after this process read it or while the update
ran, makes it raise :class:`jask.StoreChangedError` with nothing committed
(the update may have been computed from the values that writer replaced).
A repository handed in as an ``icechunk.Repository`` object is
kept in this process (``icechunk+repo://N...``); one named by URL is opened
again from the URL and the environment in any process (a Dask worker).
Nothing here knows of JAX or Dask.
"""
from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import parse_qs, urlencode, urlsplit

from jask.base import forks
from jask.store.kinds.objects.buckets import check_url, is_url, redact
from jask.store.spec import ICECHUNK_PREFIX

__all__ = ["PREFIX", "is_icechunk", "name", "open_array", "replace", "describe", "Conflict"]

#: What every icechunk store path of jask's begins with (the kind's one test:
#: jask.store.spec.kind_of).
PREFIX = ICECHUNK_PREFIX

#: Test hook, None in normal use: called with "write" and "commit" as each
#: step of :func:`replace` begins (a test SIGKILLs a writer inside them).
on_step: Callable[[str], None] | None = None

_repos: dict[str, Any] = {}          # "repo://N" or a URL -> icechunk.Repository
_options: dict[str, dict] = {}       # URL -> storage options given to open_icechunk
_writing: dict[str, Any] = {}        # staging token -> writable icechunk.Session
_read_at: dict[str, str] = {}        # store path -> snapshot id this process reads it at
_numbers = itertools.count(1)
_lock = forks.lock()


def is_icechunk(path: object) -> bool:
    """Whether ``path`` names an array in an icechunk repository.

    Example:
      >>> is_icechunk("icechunk+s3://b/repo?branch=main#x"), is_icechunk("s3://b/x.zarr")
      (True, False)
    """
    return isinstance(path, str) and path.startswith(PREFIX)


@dataclass(frozen=True)
class Where:
    """The parts of an icechunk store path."""

    repo: str      # a URL (s3://bucket/prefix, a local folder) or repo://N
    branch: str
    array: str     # the array's path inside the repository
    session: str = ""  # a staging token: the writable session of an update

    @property
    def path(self) -> str:
        query = {"branch": self.branch, **({"session": self.session} if self.session else {})}
        return f"{PREFIX}{self.repo}?{urlencode(query)}#{self.array}"


def parse(path: str) -> Where:
    """The parts of ``path``.

    Example:
      >>> parse("icechunk+s3://b/repo?branch=dev#g/x")
      Where(repo='s3://b/repo', branch='dev', array='g/x', session='')
    """
    rest = path[len(PREFIX):]
    parts = urlsplit(rest)
    query = parse_qs(parts.query)
    repo = rest.split("?", 1)[0].split("#", 1)[0]
    return Where(repo, query.get("branch", ["main"])[0], parts.fragment,
                 query.get("session", [""])[0])


def name(repo, array: str, branch: str = "main", storage_options: dict | None = None) -> str:
    """The store path of ``array`` on ``branch`` of ``repo`` (an
    ``icechunk.Repository``, a URL such as ``s3://bucket/prefix``, or a
    local folder).

    Example:
      >>> name("s3://bucket/repo", "/X")
      'icechunk+s3://bucket/repo?branch=main#X'
    """
    if isinstance(repo, os.PathLike):
        repo = os.fspath(repo)
    if isinstance(repo, str):
        key = check_url(repo, "icechunk repository URL") if is_url(repo) else repo.rstrip("/")
        if storage_options:
            _options[key] = dict(storage_options)
    else:
        import icechunk

        if not isinstance(repo, icechunk.Repository):
            raise TypeError("jask.open_icechunk: repo must be an icechunk.Repository or its URL "
                            f"(s3://bucket/prefix, a local folder), got {type(repo).__name__}"
                            + (" (pass the Repository the session came from)"
                               if type(repo).__name__ in ("Session", "IcechunkStore") else ""))
        with _lock:
            key = next((k for k, r in _repos.items() if r is repo), "")
            if not key:
                key = f"repo://{next(_numbers)}"
                _repos[key] = repo
    return Where(key, branch, array.strip("/")).path


def _storage(url: str, options: dict):
    """An ``icechunk.Storage`` for ``url``, configured from the standard
    environment variables (as zarr and obstore are), ``options`` on top."""
    import icechunk

    parts = urlsplit(url)
    scheme, bucket, prefix = parts.scheme.lower(), parts.netloc, parts.path.strip("/")
    if scheme == "s3":
        endpoint = options.pop("endpoint_url", os.environ.get("AWS_ENDPOINT_URL"))
        allow = os.environ.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true", "yes")
        settings: dict[str, Any] = dict(
            bucket=bucket, prefix=prefix, endpoint_url=endpoint,
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
            allow_http=allow or bool(endpoint and endpoint.startswith("http://")),
            force_path_style=bool(endpoint))
        settings.update(options)
        if not any(k in settings for k in ("access_key_id", "anonymous", "get_credentials")):
            settings["from_env"] = True
        return icechunk.s3_storage(**settings)
    if scheme in ("gs", "gcs"):
        return icechunk.gcs_storage(bucket=bucket, prefix=prefix,
                                    **({"from_env": True} | options))
    if scheme in ("", "file"):
        return icechunk.local_filesystem_storage(parts.path if scheme else url)
    raise ValueError(f"jask: no icechunk storage for {redact(url)!r} (s3://, gs:// and local "
                     "folders are known; pass an icechunk.Repository for others)")


def repository(where: Where):
    """The ``icechunk.Repository`` of ``where``, opened once per process."""
    import icechunk

    repo = _repos.get(where.repo)
    if repo is not None:
        return repo
    if where.repo.startswith("repo://"):
        raise LookupError(
            f"the icechunk repository of {where.path!r} was handed to jask as an object in "
            "another process; open it by URL (jask.open_icechunk('s3://bucket/prefix', ...)) "
            "so that every process can reach it")
    try:
        repo = icechunk.Repository.open(_storage(where.repo, dict(_options.get(where.repo, {}))))
    except icechunk.IcechunkError as err:
        raise FileNotFoundError(f"no icechunk repository at {redact(where.repo)!r}: "
                                f"{redact(str(err))}") from None
    with _lock:
        return _repos.setdefault(where.repo, repo)


def open_array(path: str):
    """The ``zarr.Array`` behind ``path``: the branch's newest snapshot, read
    only, or during an update the writable session it is written in."""
    import icechunk
    import zarr

    where = parse(path)
    if where.session:
        session = _writing.get(where.session)
        if session is None:
            raise LookupError(f"the update writing {where.path!r} runs in another process "
                              "(an icechunk update is written from the process that commits)")
        return zarr.open_array(session.store, path=where.array, mode="r+")
    repo = repository(where)
    try:
        session = repo.readonly_session(branch=where.branch)
    except icechunk.IcechunkError:
        _check_branch(repo, where)
        raise
    _read_at[path] = session.snapshot_id
    try:
        return zarr.open_array(session.store, path=where.array, mode="r")
    except (FileNotFoundError, KeyError, zarr.errors.NodeTypeValidationError) as err:
        group = " (a group there)" if isinstance(err, zarr.errors.NodeTypeValidationError) else ""
        raise FileNotFoundError(f"no Zarr array {where.array!r}{group} on branch "
                                f"{where.branch!r} of the icechunk repository "
                                f"{redact(where.repo)!r}") from None


def _check_branch(repo, where: Where) -> None:
    """Raise FileNotFoundError naming the repository if it has no branch ``where.branch``."""
    branches = sorted(repo.list_branches())
    if where.branch in branches:
        return
    tag = " (a tag: jask reads and commits to a branch)" if where.branch in repo.list_tags() \
        else ""
    raise FileNotFoundError(f"no branch {where.branch!r}{tag} in the icechunk repository "
                            f"{redact(where.repo)!r}; its branches: {', '.join(branches)}")


def describe(path: str) -> tuple:
    """(shape, dtype, chunks) of the array at ``path``."""
    arr = open_array(path)
    return tuple(arr.shape), arr.dtype, tuple(arr.chunks)


class Conflict(RuntimeError):
    """Another writer committed changes to the same array during an update."""


def _check_unchanged_since_read(repo, where: Where, path: str, base: str) -> None:
    """Raise :class:`Conflict` if another writer changed the array between the
    snapshot this process read it at and the branch's newest one (``base``):
    the new values may have been computed from the old ones, and writing them
    would silently undo that writer's change."""
    read = _read_at.get(path)
    if read is None or read == base:
        return
    diff = repo.diff(from_snapshot_id=read, to_snapshot_id=base)
    array = "/" + where.array
    if (array in diff.updated_chunks or array in diff.updated_arrays
            or array in diff.deleted_arrays):
        raise Conflict(
            f"update_ of {redact(where.path)!r}: another writer committed changes to the same "
            f"array on branch {where.branch!r} after this process read it (snapshot {read}, "
            f"now {base}), so the new values could undo theirs; nothing was committed. Open "
            "it again (jask.open_icechunk) and recompute the update.")


def _step(step: str) -> None:
    if on_step is not None:
        on_step(step)


def replace(path: str, fill: Callable[[str], None], *, message: str = "jask update_") -> str:
    """Write new values into the array at ``path`` and commit them at once.

    ``fill(staging)`` writes every chunk into ``staging``, a store path
    naming a writable session of the branch (reads of ``path`` meanwhile
    see the snapshot they opened). If it fails, nothing is committed. The
    commit is the one moment readers change from the old snapshot to the
    new one; if another writer committed changes to the same chunks since
    the session began it raises :class:`Conflict` (which the engine raises as
    :class:`jask.StoreChangedError`) and nothing
    is committed (changes to other arrays are rebased onto). Returns the
    new snapshot's id.
    """
    import icechunk

    where = parse(path)
    repo = repository(where)
    session = repo.writable_session(where.branch)
    _check_unchanged_since_read(repo, where, path, session.snapshot_id)
    token = uuid.uuid4().hex
    _writing[token] = session
    try:
        _step("write")
        fill(Where(where.repo, where.branch, where.array, token).path)
        _step("commit")
        try:
            snapshot = session.commit(f"{message} of {where.array}",
                                      rebase_with=icechunk.ConflictDetector())
            _read_at[path] = snapshot  # what this process reads next (unless reopened)
            return snapshot
        except (icechunk.ConflictError, icechunk.RebaseFailedError) as err:
            raise Conflict(
                f"update_ of {redact(where.path)!r}: another writer committed changes to the "
                f"same array on branch {where.branch!r} while this update ran, so it was not "
                f"committed (the branch holds the other writer's values). Run it again if it "
                f"still applies. ({type(err).__name__}: {redact(str(err))})") from None
    finally:
        _writing.pop(token, None)
