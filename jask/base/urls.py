"""Which paths name object storage: the one test every layer asks.

Example:
  >>> is_url("s3://bucket/x.zarr"), is_url("/data/x.zarr"), is_url("file:///data/x.zarr")
  (True, False, False)
"""
from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["SCHEMES", "is_url"]

#: URL schemes read as object storage; anything else (``file://`` too) is a local path.
SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss", "azure", "memory")


def is_url(path) -> bool:
    """Whether ``path`` names object storage rather than a local folder.

    Example:
      >>> is_url("gs://bucket/x.zarr"), is_url("relative/x.zarr")
      (True, False)
    """
    return isinstance(path, str) and urlsplit(path).scheme.lower() in SCHEMES
