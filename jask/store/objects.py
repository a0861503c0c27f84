"""Object storage: a Zarr store's objects at a URL (``s3://``, ``gs://``, ``az://``).

A :class:`Location` is a prefix in a bucket, reached through obstore (the
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

import functools
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["SCHEMES", "is_url", "Location", "location", "redact"]

#: URL schemes read as object storage; anything else is a local path.
SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss", "azure", "memory")

_SECRET_WORDS = re.compile(r"(secret|token|password|key|credential|session|signature)", re.I)


def is_url(path: str) -> bool:
    """Whether ``path`` names object storage rather than a local folder.

    Example:
      >>> is_url("s3://bucket/x.zarr"), is_url("/data/x.zarr"), is_url("file:///data/x.zarr")
      (True, False, False)
    """
    return isinstance(path, str) and urlsplit(path).scheme.lower() in SCHEMES


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


@dataclass(frozen=True)
class Location:
    """A prefix in a bucket: where one store's objects live. Picklable (a
    Dask worker rebuilds the client from the URL and options)."""

    url: str
    options: tuple = field(default=(), repr=False)  # sorted (key, value) pairs

    def __repr__(self) -> str:
        return f"Location({self.url!r})"

    @property
    def prefix(self) -> str:
        """The key prefix inside the bucket (no leading or trailing slash)."""
        return urlsplit(self.url).path.strip("/")

    @property
    def client(self):
        return _client(_bucket_url(self.url), self.options)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name


def _bucket_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@functools.lru_cache(maxsize=64)
def _client(bucket_url: str, options: tuple):
    from obstore.store import from_url

    return from_url(bucket_url, **dict(options))


def location(url: str, storage_options: dict | None = None) -> Location:
    """The :class:`Location` of ``url``.

    Example:
      >>> location("s3://bucket/data/x.zarr/").prefix
      'data/x.zarr'
    """
    if not is_url(url):
        raise ValueError(f"{url!r} is not an object-storage URL ({', '.join(SCHEMES)})")
    return Location(url.rstrip("/"), tuple(sorted((storage_options or {}).items())))
