"""Object storage: a Zarr store's objects at a URL (``s3://``, ``gs://``, ``az://``).

A :class:`BucketPrefix` is a prefix in a bucket, reached through obstore (the
Rust ``object_store`` client: many requests in flight from one Python
thread, ranged reads, conditional puts), configured as zarr and xarray
configure it: from the standard environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ALLOW_HTTP`` for an http endpoint, and their GCS and
Azure counterparts), overridden by ``storage_options``. Nothing here knows
of JAX or Dask.

Credentials never leave this module in text: :func:`redact` is applied to
every URL and option set that reaches a message.
"""
from __future__ import annotations

import datetime
import functools
import os
import re
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

from jask.base.urls import SCHEMES, check_url, is_url  # (re-exported: the store layer's names)

__all__ = ["SCHEMES", "is_url", "check_url", "BucketPrefix", "bucket_prefix", "delete", "redact",
           "register_options", "options_for", "registered", "RemoteStoreError", "secrets_for"]


_SECRET_WORDS = re.compile(r"(secret|token|password|key|credential|session|signature)", re.I)


def local_path(path: str) -> str:
    """A ``file://`` URL's path; other paths unchanged.

    Example:
      >>> local_path("file:///data/x.zarr")
      '/data/x.zarr'
    """
    parts = urlsplit(path)
    return parts.path if parts.scheme == "file" else path


def redact(text: str, options: dict | None = None) -> str:
    """``text`` with every secret in ``options`` (and any ``user:pass@`` in a
    URL) replaced by ``***``.

    Example:
      >>> redact("s3://k:s3cret@bucket/x failed with s3cret", {"secret_access_key": "s3cret"})
      's3://***@bucket/x failed with ***'
    """
    text = re.sub(r"(?<=://)[^/@\s]+@", "***@", text)
    for key, value in (options or {}).items():
        if isinstance(value, str) and value and _SECRET_WORDS.search(key):
            text = text.replace(value, "***")
    return text


class RemoteStoreError(OSError):
    """A request to object storage failed (after retries, when transient).

    The message names the op, the store's URL and the key; credentials
    never appear in it. (Here, below every module that makes requests, so
    that each can raise it; ``jask.RemoteStoreError``.)

    Example:
      >>> err = RemoteStoreError("read of 's3://b/x.zarr' key 'c/0': connection refused")
      >>> isinstance(err, OSError)
      True
    """


def secrets_for(url: str) -> dict:
    """The secrets a message about ``url`` must not show: its options' and
    the environment's credentials (for :func:`redact`).

    Example:
      >>> "secret_access_key" in secrets_for("s3://b/x")
      False
    """
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "GOOGLE_", "AZURE_"))
           and _SECRET_WORDS.search(k) and len(v) >= 8}
    return {**env, **options_for(url)}


@dataclass(frozen=True)
class BucketPrefix:
    """A prefix in a bucket and the client that reaches it: where one
    store's objects live (the store's :class:`jask.store.Location` is an
    ``ObjectPrefix``, which reaches its objects through this). Picklable (a
    Dask worker rebuilds the client from the URL and options)."""

    url: str
    options: tuple = field(default=(), repr=False)  # sorted (key, value) pairs

    def __repr__(self) -> str:
        return f"BucketPrefix({self.url!r})"

    @property
    def prefix(self) -> str:
        """The key prefix inside the bucket (no leading or trailing slash)."""
        return urlsplit(self.url).path.strip("/")

    @property
    def client(self):
        return _client(_bucket_url(self.url), self.options)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    @property
    def rootable(self) -> bool:
        """Whether :attr:`rooted_client` reaches the same objects: not for
        ``memory://``, where each client is a store of its own."""
        return not self.url.startswith("memory:")

    @property
    def rooted_client(self):
        """A client whose keys start at this prefix (the bucket's client when
        there is none). The prefix is quoted because obstore decodes a URL's
        path; keys are taken literally, as zarr takes them."""
        if not self.prefix:
            return self.client
        return _client(f"{_bucket_url(self.url)}/{quote(self.prefix, safe='/')}", self.options)


def _bucket_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


#: obstore's own retries are off: jask retries transient errors itself
#: (:mod:`jask.store.kinds.objects.remote`), so that each retry is counted and the last
#: error names the URL and the op. Timeouts bound a request to a dead endpoint.
_CLIENT_OPTIONS = {"timeout": "60s", "connect_timeout": "5s"}
_RETRY_OFF = {"max_retries": 0, "retry_timeout": datetime.timedelta(seconds=1)}

# fsspec's (s3fs, gcsfs, adlfs) names for the options zarr and xarray users
# pass, as obstore names them
_FSSPEC_NAMES = {"key": "access_key_id", "secret": "secret_access_key",
                 "token": "session_token", "endpoint_url": "endpoint",
                 "region_name": "region", "anon": "skip_signature"}


def _obstore_options(options: dict) -> dict:
    """``storage_options`` in obstore's names (fsspec's names translated,
    ``client_kwargs`` flattened).

    Example:
      >>> _obstore_options({"key": "k", "client_kwargs": {"endpoint_url": "http://h:1"}})
      {'access_key_id': 'k', 'endpoint': 'http://h:1'}
    """
    out: dict = {}
    for key, value in options.items():
        if key == "client_kwargs" and isinstance(value, dict):
            out.update(_obstore_options(value))
        elif key == "anon":
            if value:
                out["skip_signature"] = True
        else:
            out[_FSSPEC_NAMES.get(key, key)] = value
    return out


@functools.lru_cache(maxsize=64)
def _client(bucket_url: str, options: tuple):
    try:
        from obstore.store import from_url
    except ImportError as err:
        raise ImportError(f"jask reads and writes object storage ({redact(bucket_url)}) through "
                          'obstore: pip install "jask[cloud]"') from err

    if bucket_url.startswith("memory:"):
        return from_url(bucket_url)
    opts = _obstore_options(dict(options))
    client: dict = dict(_CLIENT_OPTIONS)  # (given, these replace the environment's client options)
    endpoint = str(opts.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL", ""))
    allow = opts.pop("allow_http", os.environ.get("AWS_ALLOW_HTTP", "").lower() == "true")
    if allow or endpoint.startswith("http://"):
        client["allow_http"] = True
    bad = f"jask cannot reach {redact(bucket_url)!r} with the storage options given"
    if endpoint and (not urlsplit(endpoint).netloc or any(c.isspace() for c in endpoint)):
        # (obstore panics on a request to such an endpoint, a Rust backtrace)
        raise ValueError(f"{bad}: the endpoint {redact(endpoint, dict(options))!r} is no URL")
    try:
        return from_url(bucket_url, client_options=client,  # type: ignore[call-overload]
                        retry_config=_RETRY_OFF, **opts)
    except Exception as err:  # noqa: BLE001 - obstore's several kinds for a bad option
        cause = str(err).split("\n\nDebug source:")[0].strip()
        raise ValueError(redact(f"{bad}: {type(err).__name__}: {cause}", dict(options))) from None


# storage_options given to jask.open & co, per URL prefix (a bucket URL
# covers the bucket): a StoreSpec names a store by its URL alone and stays a
# small picklable record; a process that reads it finds its options here.
_options: dict[str, tuple] = {}


def register_options(url: str, storage_options: dict | None) -> None:
    """Use ``storage_options`` for every store under ``url`` in this process
    (none given: nothing changes; the environment variables apply).

    Example:
      >>> register_options("s3://example-bucket", {"region": "eu-west-1"})
      >>> options_for("s3://example-bucket/x.zarr")
      {'region': 'eu-west-1'}
    """
    if storage_options:
        _options[url.rstrip("/")] = tuple(sorted(storage_options.items()))


def options_for(url: str) -> dict:
    """The options registered for the longest prefix of ``url`` ({}: none)."""
    url = url.rstrip("/")
    best = max((p for p in _options if url == p or url.startswith(p + "/")), key=len,
               default=None)
    return dict(_options[best]) if best is not None else {}


def registered() -> dict[str, dict]:
    """Every registered prefix and its options: what a worker process needs
    (:func:`register_options` each there, e.g. from a Dask WorkerPlugin)."""
    return {url: dict(opts) for url, opts in _options.items()}


def delete(url: str, name: str) -> None:
    """Delete the object ``name`` under ``url`` (none there: nothing done).

    Example:
      >>> delete("memory:///nothing-here", "x")
    """
    import obstore

    where = bucket_prefix(url)
    obstore.delete(where.client, where.key(name))


def bucket_prefix(url: str, storage_options: dict | None = None) -> BucketPrefix:
    """The :class:`BucketPrefix` of ``url``, its registered options (or
    ``storage_options``) with it.

    Example:
      >>> bucket_prefix("s3://bucket/data/x.zarr/").prefix
      'data/x.zarr'
    """
    if not is_url(url):
        raise ValueError(f"{url!r} is not an object-storage URL ({', '.join(SCHEMES)})")
    url = check_url(url)
    if storage_options is None:
        storage_options = options_for(url)
    return BucketPrefix(url, tuple(sorted(_obstore_options(storage_options).items())))
