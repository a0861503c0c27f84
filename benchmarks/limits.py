"""Machine limits measured in the same run: raw sequential I/O and BLAS.

* Write: sequential ``os.write`` of 64 MiB blocks, timed with and without the
  final ``fsync`` (the ops under test never fsync, so the no-fsync figure is
  the matching limit; with lots of RAM it is partly page-cache speed).
* Read: the file just written is fsynced and evicted from the page cache with
  ``posix_fadvise(DONTNEED)`` and read back sequentially (cold-ish read).  We
  cannot drop the global page cache, so other data may still be cached.
* BLAS: best-of-3 in-memory ``numpy.matmul`` of float32 n x n matrices.
"""

from __future__ import annotations

import os
import time

import numpy as np

BLOCK = 64 * 2**20


def _write(path: str, nbytes: int) -> tuple:
    """Write ``nbytes`` sequentially; return (seconds without fsync, with fsync)."""
    block = np.random.default_rng(0).integers(0, 255, BLOCK, dtype=np.uint8).tobytes()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[:min(left, BLOCK)])
        t_write = time.perf_counter() - t0
        os.fsync(fd)
        t_sync = time.perf_counter() - t0
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return t_write, t_sync


def _read(path: str) -> float:
    """Read a whole file sequentially into a reused buffer; return seconds."""
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        t0 = time.perf_counter()
        while f.readinto(view):
            pass
        return time.perf_counter() - t0


def raw_io(directory: str, nbytes: int) -> dict:
    """Sequential write/read GB/s (1 GB = 1e9 bytes) of ``nbytes`` in ``directory``."""
    path = os.path.join(directory, "limits_io.bin")
    try:
        t_write, t_sync = _write(path, nbytes)
        t_cold = _read(path)
        t_warm = _read(path)
    finally:
        if os.path.exists(path):
            os.remove(path)
    gb = nbytes / 1e9
    return {"bytes": nbytes, "write_GBps": gb / t_write, "write_fsync_GBps": gb / t_sync,
            "read_cold_GBps": gb / t_cold, "read_warm_GBps": gb / t_warm}


def blas_gflops(n: int, repeats: int = 3) -> dict:
    """Best-of-``repeats`` float32 matmul rate in GFLOP/s (2 n^3 flops)."""
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    a @ b  # warm up BLAS threads
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return {"n": n, "GFLOPs": 2 * n**3 / best / 1e9}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
