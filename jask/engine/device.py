"""Streaming row bands of stores to a compute device (a GPU or TPU), no JAX.

The host reads each band of rows of the input stores into buffers it reuses
(fresh buffers fault their pages in slowly, 0.5-1 GB/s on the TPU machine),
several bands at once on reader threads; the device side, a
:class:`Target` handed down from :mod:`jask.core.device`, copies a band to
the device and folds it into partials kept there. Copies and per-band
programs are dispatched asynchronously, ``in_flight`` bands ahead: a host
loop of ``device_put`` + a compiled partial, 1-3 ahead, reached 13.8 GB/s
on a v5e, where tiles pulled by a compiled program through callbacks
reached 0.73 GB/s (``shared/design.md``). A buffer is read into again only
once the program that consumed its band has finished (on a CPU device a
copy may alias the host buffer).

:func:`plan` sizes the bands so that the bands in flight and the partials
fit the device share, and the host buffers fit the host budget.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from jask.base import counters
from jask.base.config import Config
from jask.base.memory import BudgetError, nbytes, op_overhead
from jask.base.sizes import exact_bytes
from jask.store.spec import StoreSpec
from jask.store.tiles import read

__all__ = ["Target", "StreamPlan", "plan", "stream", "IN_FLIGHT", "BAND_BYTES"]

#: Bands copied to the device ahead of the one being folded in (at least two:
#: one being copied while the device computes on the other).
IN_FLIGHT = 2
#: Bytes of one band of all inputs together that the link moves fastest
#: (32 MiB blocks reached 13.8 GB/s on the v5e, dispatched asynchronously).
BAND_BYTES = 32 * 2**20
#: Most reader threads filling host buffers at once (a v5e host's 13 cores,
#: jit(hessian) over 2-4 GB: 4 and 8 readers within 7% of each other, either
#: one ahead depending on the machine; 12 slower: benchmarks/RESULTS.md).
MAX_READERS = 4


class Target(Protocol):
    """The device side of a stream (made by :mod:`jask.core.device`)."""

    def put(self, tiles: list) -> object:
        """Start copying one band's tiles (numpy, one per store) to the device."""

    def fold(self, band: object) -> object:
        """Dispatch the band's program, adding its partial to those kept on the
        device; return something to wait on for that program's end."""

    def wait(self, token: object) -> None:
        """Block until the program behind ``token`` has finished."""


@dataclass(frozen=True)
class StreamPlan:
    """Row bands of a stream and what they hold.

    Attributes:
      rows: the stores' rows (their leading axis).
      band_rows: rows per band (the last band may be shorter).
      in_flight: bands on the device at once besides the partials.
      readers: threads reading bands into host buffers.
      band_bytes: bytes of one band of all the stores.
      device_bytes: the most bytes the stream holds on the device: the band
        being copied and those in flight, a partial for each of their programs
        and the running total.
      host_bytes: the host buffers (one band each, ``in_flight + readers``).
    """

    rows: int
    band_rows: int
    in_flight: int
    readers: int
    band_bytes: int
    device_bytes: int
    host_bytes: int

    @property
    def bands(self) -> list:
        """(start, stop) of each band."""
        step = self.band_rows
        return [(r, min(r + step, self.rows)) for r in range(0, self.rows, step)]


def plan(stores: Sequence[StoreSpec], partial_bytes: int, device_share: int,
         config: Config, in_flight: int = IN_FLIGHT, work_row_bytes: int = 0) -> StreamPlan:
    """Bands of whole row chunks of the first store, about :data:`BAND_BYTES`
    of all stores a band, fewer rows where the device share (bands in flight
    plus one partial per program not finished, and ``work_row_bytes`` a row
    that one band's program holds besides its inputs: a band group's
    intermediates) or the host budget (one buffer per band in flight or
    being read) asks for less.

    Example:
      >>> from jask.base.config import make_config
      >>> x = StoreSpec("x", (1000, 4), np.dtype("float32"), (100, 4))
      >>> p = plan([x], 64, 2**20, make_config("64MiB", scratch_dir="/tmp/jask-example"))
      >>> p.band_rows, len(p.bands), p.device_bytes <= 2**20
      (1000, 1, True)
    """
    rows = int(stores[0].shape[0])
    row_bytes = sum(nbytes(s.shape[1:], s.dtype) for s in stores)
    step = max(1, min(int(stores[0].chunks[0]), rows))
    readers = max(1, min(MAX_READERS, config.workers))
    slots = in_flight + readers
    device_room = device_share - (in_flight + 2) * partial_bytes
    host_room = config.max_memory - op_overhead(config.max_memory)
    row_bytes = max(1, row_bytes)
    most = min(BAND_BYTES // row_bytes,
               device_room // ((in_flight + 1) * row_bytes + work_row_bytes),
               host_room // slots // row_bytes)
    if most < 1:
        raise BudgetError(
            f"streaming to the device: one row of the inputs ({exact_bytes(row_bytes)}) and "
            f"partials of {exact_bytes(partial_bytes)} do not fit the device share of "
            f"{exact_bytes(device_share)} with {in_flight} bands in flight, nor "
            f"{slots} host buffers the budget of {exact_bytes(config.max_memory)}")
    band = rows if most >= rows else (most // step * step or most)
    band_bytes = band * row_bytes
    return StreamPlan(rows, band, in_flight, readers, band_bytes,
                      (in_flight + 1) * band_bytes + band * work_row_bytes
                      + (in_flight + 2) * partial_bytes,
                      slots * band_bytes)


def stream(stores: Sequence[StoreSpec], planned: StreamPlan, target: Target,
           op: str = "device") -> None:
    """Every band of ``stores`` through ``target``, in order, each store read
    once (by :func:`jask.store.tiles.read`, counted): reads run ahead on reader
    threads into reused buffers, copies and programs ``in_flight`` ahead.

    Band ``i`` is read into slot ``i % slots``; band ``i + slots`` is read
    into it once band ``i``'s program has finished. With ``slots =
    in_flight + readers``, that program is always waited for before band
    ``i + slots`` is needed. Reads count for ``op`` (:mod:`jask.base.counters`)."""
    bands = planned.bands
    slots = min(planned.in_flight + planned.readers, len(bands))
    buffers = [[np.empty((planned.band_rows,) + tuple(s.shape[1:]), s.dtype) for s in stores]
               for _ in range(slots)]

    def fill(i: int) -> list:
        lo, hi = bands[i]
        tiles = []
        with counters.op(op):
            for store, buf in zip(stores, buffers[i % slots]):
                region = (slice(lo, hi),) + tuple(slice(0, n) for n in store.shape[1:])
                tiles.append(read(store, region, out=buf[:hi - lo]))
        return tiles

    running: deque = deque()  # (band, token) of programs not known to have finished
    with ThreadPoolExecutor(planned.readers, thread_name_prefix="jask-device") as pool:
        reads = {i: pool.submit(fill, i) for i in range(slots)}
        try:
            for i in range(len(bands)):
                tiles = reads.pop(i).result()
                running.append((i, target.fold(target.put(tiles))))
                del tiles
                while len(running) > planned.in_flight or (running and i + 1 == len(bands)):
                    done, token = running.popleft()
                    target.wait(token)  # its buffers are free: read a later band into them
                    if done + slots < len(bands):
                        reads[done + slots] = pool.submit(fill, done + slots)
        finally:
            for f in reads.values():
                f.cancel()
