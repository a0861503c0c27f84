"""How jask shows a number of bytes: one format everywhere.

A budget, a tile, a store's size, bytes read: every message, repr, plan and
error shows them as Dask does (``dask.utils.format_bytes``: binary units,
``"30.52 MiB"``), so a size in a jask error reads the same as in Dask's
dashboard and chunk pictures. Errors lead with the exact count, so a budget
given as ``"32MB"`` (32,000,000 bytes) can be recognised:
``"32000000 bytes (30.52 MiB)"``.
"""
from __future__ import annotations

from dask.utils import format_bytes as _dask_format_bytes

__all__ = ["format_bytes", "exact_bytes"]


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units, as Dask shows sizes.

    Example:
      >>> format_bytes(32 * 2**20), format_bytes(32_000_000)
      ('32.00 MiB', '30.52 MiB')
    """
    return _dask_format_bytes(int(n))


def exact_bytes(n: float) -> str:
    """``n`` bytes for an error message: the exact count, then :func:`format_bytes`.

    Example:
      >>> exact_bytes(4096), exact_bytes(800)
      ('4096 bytes (4.00 kiB)', '800 bytes')
    """
    n = int(n)
    size = format_bytes(n)
    return f"{n} bytes" if size == f"{n} B" else f"{n} bytes ({size})"
