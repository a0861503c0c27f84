"""Which paths name object storage: the one test of a path's string.

``jask.store`` reads a store's kind from its path here once, when its
record is made, and hands out its location (:class:`jask.store.Location`),
whose capabilities (``is_local``, ``supports_rename``, ...) are what the
layers above ask. The modules of ``base/``, below the store, ask here.

Example:
  >>> is_url("s3://bucket/x.zarr"), is_url("/data/x.zarr"), is_url("file:///data/x.zarr")
  (True, False, False)
"""
from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["SCHEMES", "is_url", "is_local_path", "check_url"]

#: URL schemes read as object storage; anything else (``file://`` too) is a local path.
SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss", "azure", "memory")


def is_url(path) -> bool:
    """Whether ``path`` names object storage rather than a local folder.

    Example:
      >>> is_url("gs://bucket/x.zarr"), is_url("relative/x.zarr")
      (True, False)
    """
    return isinstance(path, str) and urlsplit(path).scheme.lower() in SCHEMES


def is_local_path(path: str) -> bool:
    """Whether a store's path, as jask records it (a ``file://`` URL made a
    path when located), names a folder of this machine's filesystem: not a
    URL of object storage, nor an icechunk branch's ``icechunk+s3://...``.

    Example:
      >>> [is_local_path(p) for p in ("/data/x.zarr", "s3://b/x.zarr", "icechunk+s3://b/r#x")]
      [True, False, False]
    """
    return "://" not in path


# (Azure's URLs name ``container@account.dfs.core.windows.net``: an '@' without a password)
_AZURE = ("abfs", "abfss", "az", "azure")


def check_url(url: str, what: str = "URL") -> str:
    """``url`` without trailing slashes, if it plainly names a prefix of a
    bucket; a ValueError naming it (its secrets left out) otherwise.

    Refused: credentials in the URL (they would show in every ``filename``
    and message: pass them in ``storage_options`` or the environment), a
    query or fragment (zarr and s3fs read ``?``/``#`` as part of the key,
    obstore drops them: the two would read different objects), and empty,
    ``.`` or ``..`` path segments (no object store key has them).

    Example:
      >>> check_url("s3://bucket/data/x.zarr/")
      's3://bucket/data/x.zarr'
      >>> check_url("abfs://container@account.dfs.core.windows.net/x.zarr")
      'abfs://container@account.dfs.core.windows.net/x.zarr'
      >>> check_url("s3://key:secret@bucket/x.zarr")
      Traceback (most recent call last):
      ...
      ValueError: the URL 's3://***@bucket/x.zarr' holds credentials: ...
    """
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    shown = f"{parts.scheme}://{'***@' if '@' in parts.netloc else ''}{host}{parts.path}"
    if "?" in url or "#" in url:
        shown += "?***" if "?" in url else "#***"
        problem = ("has a query or fragment ('?', '#'), which zarr and jask would read as "
                   "different objects: name the prefix alone")
    elif "@" in parts.netloc and (":" in parts.netloc.rsplit("@", 1)[0]
                                  or parts.scheme.lower() not in _AZURE):
        problem = ("holds credentials: pass them in storage_options or the environment "
                   "variables (AWS_ACCESS_KEY_ID, ...), never in the URL")
    elif not host and parts.scheme.lower() != "memory":
        problem = "names no bucket"
    elif any(s in ("", ".", "..") for s in parts.path.strip("/").split("/")) \
            and parts.path.strip("/"):
        problem = "has an empty, '.' or '..' path segment, which no object key has"
    else:
        return url.rstrip("/")
    raise ValueError(f"the {what} {shown!r} {problem}")
