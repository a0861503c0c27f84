"""This process's resident memory: now, and at its peak (Linux ``/proc``).

What jask's demo, its memory-bound test and its benchmarks measure the
budget against.
"""
from __future__ import annotations

import resource

__all__ = ["current_rss", "peak_rss", "reset_peak_rss"]


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss() -> int:
    """Resident set size of this process, in bytes.

    Example:
      >>> current_rss() > 0
      True
    """
    value = _status_bytes("VmRSS")
    if value is None:
        import psutil
        value = psutil.Process().memory_info().rss
    return value


def peak_rss() -> int:
    """Peak resident set size since the process started or the last reset.

    Example:
      >>> peak_rss() >= current_rss()
      True
    """
    value = _status_bytes("VmHWM")
    return value if value is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Start measuring the peak afresh; False where the kernel does not allow it.

    Example:
      >>> reset_peak_rss() in (True, False)
      True
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
