"""Minibatches of DiskArrays for training loops: :func:`batches`.

A loader reads *units* of rows on background threads, ahead of the step, and
cuts batches from them in memory: no jask op runs per batch. A shuffled epoch
permutes the units, then mixes the rows of each *window* of consecutive units
(the shuffle buffer), as CorgiPile does (Xu et al., SIGMOD 2022): every row
comes once per epoch. A unit is a short run of rows where reading one costs
its bytes (uncompressed local chunks: :func:`jask.store.tiles.read_runs` reads a
window's runs a chunk file at a time), so that a window draws at least half a
batch's count of runs from the whole store and a batch mixes about as well
as a full shuffle's; else a whole chunk row of the array with the most bytes
per row (or a piece of one when the buffer is smaller), read and decoded once.

What a loader holds (two windows and their orders, three onto a device, the
batches ready ahead,
one unit per reading thread) is kept out of the budget the ops get while it runs
(:func:`jask.base.config.holding`), and an epoch's order depends only on
the seed, the epoch, the shapes and chunks, ``batch_size``, ``buffer`` and
``shard``: never on the threads, nor on the budget once ``buffer`` is given
(the default buffer halves until it fits).

With a ``device`` (:class:`_DeviceFeeder`), each window goes to the device
whole, in pieces of :data:`TRANSFER_BYTES` (:data:`PUTS_IN_FLIGHT` copied at
once), while the next two are read, and its batches are cut there by one
compiled program (a gather permuting the window, then slices; in order, slices):
the host's work per batch is a list pop, its memory the three windows
(:data:`DEVICE_SLOTS`), and the device holds a few windows (:data:`DEVICE_WINDOWS`).
The reading threads and the host windows are the loader's, kept from
iteration to iteration until :meth:`Batches.close`, and so is the memory of
the host's numpy batches of a MiB or more, reused once nothing holds a batch
(:class:`_BatchMemory`: fresh pages are slow to touch); an iteration waiting on
its consumer for :data:`IDLE_RELEASE_S` closes the chunk files it holds open.
Onto a ``NamedSharding`` over several devices a window
is put with its rows split as the batches' (each device gets its share), and
the same program, compiled with the sharding as its outputs', cuts batches
placed exactly so (XLA moves the rows a device's share needs from the
others').
On JAX's CPU device (:data:`HOST_CUT_PLATFORMS`), and with other Shardings
over several devices, batches are cut on the host as numpy ones and each is
put there.
"""
from __future__ import annotations

import atexit
import ctypes
import math
import queue
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jask.base import config as _config
from jask.base import forks, memory
from jask.base.memory import BudgetError
from jask.base.sizes import exact_bytes
from jask.core.array import DiskArray
from jask.engine.execute import MMAP_THRESHOLD
from jask.store.space import check_unchanged, stamp
from jask.store.tiles import OpenFiles, read_model, reads_runs, rows_of_runs
from jask.store.versions import held, read_runs_of_version

from .reader_process import ReaderProcess, SharedArray, shared_room

__all__ = ["batches", "Batches"]

#: The default shuffle buffer, in batches: 64 batches' rows mix together.
DEFAULT_BUFFER_BATCHES = 64
#: The most of the budget a loader keeps for its buffers.
LOADER_SHARE = 1 / 2
#: Reading threads by default: this machine's disk read chunk files at 0.9 of
#: its parallel rate with 4, 1.0 with 8 (benchmarks/minibatches.py).
DEFAULT_THREADS = 8
#: Reading threads by default in the reading child (``readers="processes"``): its
#: threads share its GIL, and on a TPU v5e host a shuffled 2 GiB epoch read in 0.52-0.54 s
#: with 4, 0.58-0.61 s with 8, 0.71 s with 16 (in order 0.23-0.25 s with any);
#: benchmarks/RESULTS.md, "reading threads".
CHILD_THREADS = 4
#: What a reading thread holds besides its chunk: its own malloc arena's pages
#: (the memory grid measured 2.1-2.4 MB above the buffers with 8 threads).
THREAD_BYTES = 2**18
#: Read tasks a window is split into, per reading thread (each reads many runs).
TASKS_PER_THREAD = 2
#: The most pieces a reading thread reads of an in-order iteration's first
#: window (read in pieces of a batch, so that its first batch comes early).
FIRST_PIECES_PER_THREAD = 8
#: Where short runs of rows read at about their bytes' cost (local uncompressed
#: chunks, arrays in memory), a shuffle window holds at least ``batch_size /
#: RUNS_PER_BATCH`` runs drawn from anywhere in the shard: a batch's label mean
#: then deviates about sqrt(1 + RUNS_PER_BATCH) times a full shuffle's (the
#: window's own mean deviates as a mean of its runs').
RUNS_PER_BATCH = 2
#: The bytes a shuffle's run of a chunk file should hold at least, where the default
#: buffer can grow to give them (the window's runs, and so the mixing, stay
#: ``batch_size / RUNS_PER_BATCH``): this machine's disk, cold, read random runs of
#: 32 KiB at 0.4-0.5 of its parallel rate for whole files, of 128 KiB at 0.75-0.85
#: (8 threads; benchmarks/RESULTS.md, 2026-12-06, session 4).
RUN_BYTES = 2**17
#: ... while a window of the widest array stays at most this many bytes (the default
#: window of 64 batches grows at most to it, never shrinks for it).
RUN_WINDOW_BYTES = 2**26
#: Batches cut and placed on the device ahead of the step, by default.
DEFAULT_PREFETCH = 2
#: Batches a host feed hands its consumer at once (at most ``prefetch``): a queue
#: handoff per batch cost the loader's 2 cores more CPU than the handing over of
#: a list per two.
HAND_BATCHES = 2

#: Windows a device feed holds on the device at most: one being copied (its
#: pieces, and their join inside the program that cuts it), its batches, those
#: of the window waiting to be handed out and those of the one being handed out.
DEVICE_WINDOWS = 5
#: A window goes to the device in pieces of about this many bytes, a
#: ``device_put`` each (32 MiB blocks: 8.7 GB/s one at a time on a TPU v5e host,
#: 13.8 GB/s several at once: /work/shared/design.md).
TRANSFER_BYTES = 32 * 2**20
#: Pieces of a window being copied to the device at once (None: all of them).
#: JAX alone, fewer at once slow the copies and hide them better behind steps
#: (TPU v5e, 2 GiB beside MLP steps taking 0.24 s: 8 at once 0.16 s alone, 0.33 s
#: both; 2 at once 0.22 s, 0.26 s). The fed epoch follows only with a third host
#: slot (:data:`DEVICE_SLOTS`): alone, 1, 2 or a whole window's 8 gave the same
#: (RESULTS.md, sessions 7 and 9).
PUTS_IN_FLIGHT: int | None = 2
#: The most batches a device feed cuts in one dispatch (a power of two of them
#: at a time, so that a few programs serve every window): a TPU runs a small
#: program in about 0.3 ms whatever it moves, and a window's permutation by one
#: gather ran at 44 GB/s where a gather per batch ran at 12 GB/s.
CUT_BATCHES = 64
#: The most of a device's memory a loader keeps for its windows and batches.
DEVICE_SHARE = 1 / 4
#: Platforms whose device memory is the host's: batches are cut there on the host,
#: as numpy ones, and each is put on the device (a batch's memory is reused only once
#: nothing holds the batch, :class:`_BatchMemory`: the CPU device may share it).
#: Copying windows to the device and gathering there measured 4-5x slower on the CPU device
#: (benchmarks/RESULTS.md, the loader), and would count a few windows twice.
HOST_CUT_PLATFORMS = ("cpu",)
#: The bytes from which a host feed's batch of an array is cut into recycled memory
#: (:class:`_BatchMemory`): from glibc's mmap threshold, pinned by jask, each fresh
#: allocation is fresh pages, slow to touch (0.5-0.8 GB/s here: jask.store.buffers);
#: below it malloc reuses what was freed. 0: never.
RECYCLE_BYTES = MMAP_THRESHOLD
#: The alignment of a recycled batch's memory: JAX's CPU device shares a numpy array's
#: memory aligned so (and copies it otherwise).
BATCH_ALIGN = 64
#: Platforms whose loaders read with threads by default (``readers=None``); onto
#: any other a child process reads (benchmarks/RESULTS.md: faster beside a TPU's
#: steps, slower on a 2-core host).
THREAD_READER_PLATFORMS = ("cpu",)

_OP = "jask.batches"
#: The name of a loader's reading threads (kept while it lives); its other
#: threads, one iteration's, are named ``jask-batches``.
POOL_THREADS = "jask-loader-read"
#: Host windows a host feed holds at once: the one being cut and the next, being
#: read (a third or fourth made a cold shuffled epoch no faster on a 2-core host,
#: numpy batches or the CPU device: RESULTS.md, session 10).
SLOTS = 2
#: Host windows a device feed holds at once: with two, a window's reads waited for
#: the copy of the window two before, and reads and copies made one chain with no
#: slack for a stalled step; with a third (and :data:`PUTS_IN_FLIGHT` 2) a TPU v5e
#: epoch in order fed 0.36-0.39 s where it fed 0.40-0.50 s (RESULTS.md, session 9).
DEVICE_SLOTS = 3
#: Seconds an iteration waits on its consumer before it lets go of the chunk
#: files it holds open (its reads in flight done first): an iterator left
#: suspended and never collected (in a reference cycle, say) holds no
#: descriptors for long. Its next read opens them again.
IDLE_RELEASE_S = 1.0
#: Seconds a consumer waits for a batch, while the reading process has reads not
#: done, before a warning says what that process is doing (stopped, on a hung disk).
STALL_WARN_S = 30.0
#: Seconds a loader keeps its host windows (and their share of the budget) once an
#: iteration ends: the next epoch's iteration reuses them; a loader left alone, never
#: closed, gives them back then, and a new loader being planned takes them back at
#: once from loaders not iterating (else each loader left open would shrink the
#: budget, and the default buffer, of the next).
KEEP_IDLE_S = 1.0
#: Loaders keeping windows while not iterated (see :data:`KEEP_IDLE_S`).
_idle_loaders: "weakref.WeakSet[Batches]" = weakref.WeakSet()
_idle_lock = forks.lock()
#: Iterations begun and not ended (generators), closed as the interpreter begins
#: to end (:func:`_close_suspended`)
_suspended: "weakref.WeakSet[Iterator[tuple]]" = weakref.WeakSet()


def _close_suspended() -> None:
    """Close the loaders' iterations left suspended (an iterator kept at module
    level), while threads still start and the loaders' pools still run: closed
    later, as the interpreter's last collection drops them, their ends started
    threads that never start (the process hung at exit) and stopped reads
    beside threads being torn down (it crashed)."""
    for it in list(_suspended):
        try:
            it.close()  # type: ignore[attr-defined]
        except ValueError:  # ("generator already executing": its own thread ends it)
            pass


# (threading's own exit hooks run before its threads are joined and the thread pools
# shut down, the newest first: atexit's run only after those)
getattr(threading, "_register_atexit", atexit.register)(_close_suspended)


def _free_idle_loaders() -> None:
    """Free the windows every loader not being iterated keeps."""
    for loader in list(_idle_loaders):
        loader._free_kept()


def _free_later(ref: "weakref.ref[Batches]", iterations: int) -> None:
    loader = ref()
    if loader is not None:
        loader._free_kept(iterations)


@dataclass(frozen=True)
class BatchPlan:
    """Which rows each batch of each epoch takes, for one shard.

    ``unit`` rows are read together (the last unit may be shorter);
    ``window`` units are mixed together when shuffling.

    Example:
      >>> p = BatchPlan(rows=10, unit=4, window=2, batch_size=3, shuffle=False, seed=0,
      ...               drop_last=False, shard=(0, 1))
      >>> p.batches_in(0), [list(map(int, b)) for b in p.batch_rows(0)]
      (4, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]])
    """

    rows: int
    unit: int
    window: int
    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool
    shard: tuple

    @property
    def n_units(self) -> int:
        return -(-self.rows // self.unit)

    def unit_rows(self, u: int) -> tuple[int, int]:
        return u * self.unit, min((u + 1) * self.unit, self.rows)

    def _units_of(self, epoch: int, index: int) -> np.ndarray:
        """Shard ``index``'s units in reading order: a share of a permutation
        (dealt in turn) when shuffling, else a contiguous run."""
        count = self.shard[1]
        if not self.shuffle:
            return np.array_split(np.arange(self.n_units), count)[index]
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, epoch]))
        return rng.permutation(self.n_units)[index::count]

    def rows_in(self, units) -> int:
        """Rows of these units (only the array's last unit may be short)."""
        units = np.asarray(units)
        short = self.n_units * self.unit - self.rows
        return len(units) * self.unit - int(np.any(units == self.n_units - 1)) * short

    def windows(self, epoch: int) -> list[np.ndarray]:
        """This shard's windows of the epoch, each an array of units."""
        units = self._units_of(epoch, self.shard[0])
        # a window's rows are mixed anyway: read its chunks in file order
        return [np.sort(units[i:i + self.window]) for i in range(0, len(units), self.window)]

    def window_order(self, epoch: int, w: int, n: int) -> np.ndarray:
        """The order of the ``n`` rows of window ``w`` (positions in it)."""
        return self.window_order_into(epoch, w, np.empty(n, np.int64))

    def window_order_into(self, epoch: int, w: int, out: np.ndarray) -> np.ndarray:
        """:meth:`window_order` written into ``out`` (a reused buffer: a fresh
        one is slow to touch here), the same for any integer dtype."""
        if not self.shuffle:
            out[...] = np.arange(len(out), dtype=out.dtype)
            return out
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, epoch, self.shard[0], w]))
        # shuffled in place: 7x faster here than sorting random keys, and a 1-d array's
        # shuffle releases the GIL too (the same swaps whatever the dtype)
        out[...] = np.arange(len(out), dtype=out.dtype)  # (its dtype: _order_bytes counts it)
        rng.shuffle(out)
        return out

    def batches_in(self, epoch: int) -> int:
        """Batches of this shard's epoch. Without ``drop_last`` the last may
        be short; with it every shard of the epoch has the same number."""
        rows = self.rows_in(self._units_of(epoch, self.shard[0]))
        if self.drop_last:
            rows = min(self.rows_in(self._units_of(epoch, i)) for i in range(self.shard[1]))
            return rows // self.batch_size
        return -(-rows // self.batch_size)

    def batch_rows(self, epoch: int) -> Iterator[np.ndarray]:
        """Each batch's row indices (of the arrays), in order: what a loader
        yields, without reading anything (tests and resumption use it)."""
        stream = [self._window_rows(epoch, w, units) for w, units in enumerate(self.windows(epoch))]
        rows = np.concatenate(stream) if stream else np.zeros(0, np.int64)
        for b in range(self.batches_in(epoch)):
            yield rows[b * self.batch_size:(b + 1) * self.batch_size]

    def _window_rows(self, epoch: int, w: int, units: np.ndarray) -> np.ndarray:
        rows = np.concatenate([np.arange(*self.unit_rows(int(u))) for u in units])
        return rows[self.window_order(epoch, w, len(rows))]


@dataclass
class _Ahead:
    """The first window of epoch ``epoch`` (window ``window``), read by a device
    feed into its loader's host slot ``slot`` (with ``order``, the window's
    order padded as the feed's are) while the consumer takes the last batches
    of the epoch before, for the loader's next iteration: there an epoch's first
    window is read before any step runs (on a TPU, 0.11-0.13 s of a 0.4 s
    epoch). Used only where the next iteration begins with that window and
    the stores are still at ``stamps``, the version it was read at, and the chunk
    files it read (``files``) unchanged since; the rows of arrays in memory (a
    user's, or read whole) are taken again there. Read only where every store is
    read by runs of its chunk files (those ``files`` names)."""

    epoch: int
    window: int
    stamps: list
    slot: int
    work: list  # the reads' futures, and the order's
    order: np.ndarray
    files: OpenFiles  # the chunk files it read, as it saw them (none held open)


class Batches:
    """An iterable over aligned minibatches of arrays with the same first
    axis (made by :func:`batches`); see there. ``len()`` is the number of
    batches of the current epoch, :attr:`state` where the loader is."""

    def __init__(self, arrays: tuple, plan: BatchPlan, epochs: int | None, threads: int,
                 prefetch: int, device, held: int, device_bytes: int,
                 resident: tuple = (), readers: str = "threads", slots: int = SLOTS):
        self._arrays = arrays
        #: the host windows it reads into in turn (:data:`SLOTS`, :data:`DEVICE_SLOTS`)
        self.slot_count = slots
        #: "processes": the runs of local uncompressed stores are read by a child
        #: process into windows in shared memory (jask.api.reader_process)
        self.readers = readers
        self._process: ReaderProcess | None = None
        #: the process whose reading pool, child and windows these are (a fork's are its parent's)
        self._pid = forks.pid()
        #: which arrays are read whole at each epoch's start and their runs taken in
        #: memory (narrow ones, beside runs of a wider one: a read per run costs more
        #: than its bytes), and the buffers they are read into, reused across epochs
        self._resident = resident or (False,) * len(arrays)
        self._whole: dict[int, np.ndarray] = {}
        #: whether a run of rows reads at about its bytes' cost in every array (local
        #: uncompressed chunks, or in memory): a window may be read in pieces
        self._runs_cheap = all(reads_runs(a._store()) for a in arrays
                               if isinstance(a, DiskArray))
        self.plan = plan
        self.epochs = epochs
        self.threads = threads
        self.prefetch = prefetch
        self._device = device
        #: host memory the loader holds while iterated (kept out of the ops' budget)
        self.held_bytes = held
        #: device memory the loader holds at most while iterated, on each device of a
        #: Sharding (0 without ``device``, on the CPU device or with a Sharding other than
        #: a NamedSharding over several devices, where batches are cut on the host)
        self.device_bytes = device_bytes
        self._epoch = 0
        self._batch = 0
        self._running = False
        #: the reading threads, started at the first batch asked for and kept for the
        #: loader's life (starting eight cost 0.17 s an iteration on a TPU host): idle
        #: between iterations, ended by :meth:`close` or when the loader is collected
        self._pool: ThreadPoolExecutor | None = None
        #: the host windows reads go into, kept as the threads are: fresh memory is
        #: slow to touch (on a TPU host an epoch in order took 1.03-1.12 s with the
        #: two windows made anew each iteration, 0.49-0.53 s with them kept)
        self._slots: list[_Slot] = []
        #: releases the budget share of what is kept between iterations (the host
        #: windows, the arrays read whole), held from their making until close() or
        #: the loader's collection
        self._kept: weakref.finalize | None = None
        self._kept_bytes = 0
        #: iterations begun, and the timer freeing what is kept after the last one: a
        #: timer of an iteration before frees nothing (one left running freed the
        #: windows, and the next epoch's first window read ahead, in the pause after
        #: the following iteration, every other epoch on a TPU: RESULTS.md, session 7)
        self._iterations = 0
        self._idle_timer: threading.Timer | None = None
        #: the next epoch's first window, read into a host slot at the end of a device
        #: feed's epoch for the next iteration (:class:`_Ahead`)
        self._ahead: _Ahead | None = None
        #: a host feed's batches' memory, recycled, kept with the host windows
        self._batch_memory: _BatchMemory | None = None

    def _reading_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=POOL_THREADS)
        return self._pool

    def _reading_process(self) -> ReaderProcess | None:
        """The child process reading runs, started at the first iteration that
        needs it and kept for the loader's life (another started if it ended)."""
        if self.readers != "processes" or not _child_reads(self._arrays):
            return None
        if self._process is None or self._process.ended.is_set():
            self._process = ReaderProcess(self.threads)
        return self._process

    def _host_slots(self, rows: int) -> list["_Slot"]:
        """The :attr:`slot_count` host windows of ``rows`` rows, kept from
        iteration to iteration (no two iterations of a loader run at once)."""
        if not self._slots or self._slots[0].rows != rows:
            count = self.slot_count
            self._slots = [_Slot(self._arrays, rows) for _ in range(count)]
            self._release_kept()
            row = sum(_row_bytes(a) for a in self._arrays)
            kept = count * rows * row + sum(
                a.shape[0] * _row_bytes(a) for a, whole in zip(self._arrays, self._resident)
                if whole)
            if not self.device_bytes:  # a host feed: its batches' recycled memory too
                ahead = 2 * self.prefetch + 2
                self._batch_memory = _BatchMemory(ahead)
                kept += ahead * self.plan.batch_size * sum(
                    _row_bytes(a) for a in self._arrays
                    if RECYCLE_BYTES and self.plan.batch_size * _row_bytes(a) >= RECYCLE_BYTES)
            self._kept_bytes = min(self.held_bytes, kept)
            self._kept = weakref.finalize(self, _config.hold(self._kept_bytes))
        return self._slots

    def _take_ahead(self) -> "_Ahead | None":
        """The window read ahead for this iteration (its reads waited for), or
        None (none, or one whose read failed: read again, an error is raised at
        the batch that needs it)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        wait(ahead.work)
        if any(f.cancelled() or f.exception() is not None for f in ahead.work):
            return None
        return ahead

    def _release_kept(self) -> None:
        # its slot goes with the others, not waited for: its reads hold the buffers they
        # write (a stuck child's would hold the idle timer, and _idle_lock, for ever)
        self._ahead = None
        if self._batch_memory is not None:
            self._batch_memory.close()
            self._batch_memory = None
        if self._kept is not None:
            self._kept()
            self._kept, self._kept_bytes = None, 0

    def _free_kept(self, iterations: int | None = None) -> None:
        """Free the windows kept between iterations and their budget share,
        unless an iteration is using them (or, given ``iterations``, one has
        begun since that many had)."""
        with _idle_lock:
            if self._running or iterations not in (None, self._iterations):
                return
            _idle_loaders.discard(self)
            self._slots, self._whole = [], {}
            self._release_kept()

    def _keep_for_a_while(self) -> None:
        """After an iteration: keep the windows :data:`KEEP_IDLE_S` for the next
        (none when the interpreter is ending: an iterator left suspended by an
        uncaught error is closed then, and a timer's thread started then never
        starts, which hung the process's exit)."""
        if sys.is_finalizing():
            return
        with _idle_lock:
            if self._kept is None:
                return
            _idle_loaders.add(self)
            iterations = self._iterations
        timer = threading.Timer(KEEP_IDLE_S, _free_later, (weakref.ref(self), iterations))
        timer.daemon = True
        timer.start()
        self._idle_timer = timer

    def _forget_the_parents(self) -> None:
        """In a process forked from the loader's: drop the parent's reading pool,
        reading process, windows and idle timer, never waited for (their threads
        are not in this process; a read they had in flight never ends here)."""
        if self._pid == forks.pid():
            return
        self._pool, self._process, self._slots, self._whole = None, None, [], {}
        self._ahead, self._idle_timer, self._pid = None, None, forks.pid()
        self._release_kept()

    def close(self) -> None:
        """End the loader's reading threads and free its host windows (both
        kept between iterations; a later iteration makes them again).
        ``with jask.batches(...) as loader:`` closes it at the block's end."""
        if self._running:
            raise RuntimeError("close() while the loader is being iterated")
        self._forget_the_parents()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._process is not None:
            self._process.close()
            self._process = None
        if self._idle_timer is not None:  # (what it would free goes now: no thread left)
            self._idle_timer.cancel()
            self._idle_timer.join()
            self._idle_timer = None
        with _idle_lock:  # (not beside a timer's _free_kept of a moment before)
            _idle_loaders.discard(self)
            self._slots, self._whole = [], {}
            self._release_kept()

    def __enter__(self) -> "Batches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- where the loader is ------------------------------------------------------
    @property
    def state(self) -> dict:
        """Where the loader is: a small pytree of ints (save it with the model;
        :meth:`restore` or ``batches(..., state=...)`` continues from it with the
        next batch). It also records what fixes the order, so that a state is
        never restored into a loader that would give other batches."""
        p = self.plan
        return {"epoch": self._epoch, "batch": self._batch, "seed": p.seed, "rows": p.rows,
                "batch_size": p.batch_size, "unit": p.unit, "window": p.window,
                "shuffle": int(p.shuffle), "drop_last": int(p.drop_last),
                "shard": list(p.shard)}

    def restore(self, state: dict) -> "Batches":
        """Continue from ``state`` (a :attr:`state` saved earlier) with its next batch.

        Raises:
          ValueError: if ``state`` is of a loader whose batches differ (another
            seed, batch size, buffer, shard, or arrays of other rows).
        """
        if self._running:
            raise RuntimeError("restore() while the loader is being iterated")
        mine = self.state
        try:
            theirs = {k: (list(map(_whole, v)) if k == "shard" else _whole(v))
                      for k, v in state.items()}
        except (AttributeError, TypeError, ValueError) as err:
            raise ValueError(f"not a jask.batches state: {state!r}") from err
        differ = [k for k in mine if k not in ("epoch", "batch") and theirs.get(k) != mine[k]]
        if differ or "epoch" not in theirs or "batch" not in theirs:
            raise ValueError(
                "this state is of a loader with other batches (it differs in "
                f"{', '.join(differ) or 'epoch/batch missing'}: {theirs}, this loader: {mine})")
        epoch, batch = _whole(state["epoch"]), _whole(state["batch"])
        if epoch < 0:
            raise ValueError(f"state {theirs} names a negative epoch")
        if not 0 <= batch <= self.plan.batches_in(epoch):
            raise ValueError(f"state {theirs} is past its epoch's {self.plan.batches_in(epoch)} "
                             "batches")
        self._epoch, self._batch = epoch, batch
        return self

    def __len__(self) -> int:
        return self.plan.batches_in(self._epoch)

    def __repr__(self) -> str:
        p = self.plan
        return (f"Batches({len(self._arrays)} arrays of {p.rows} rows, batch_size={p.batch_size}, "
                f"shuffle={p.shuffle}, buffer={p.unit * p.window} rows, shard={p.shard}, "
                f"epoch={self._epoch}, batch={self._batch}, holds "
                f"{exact_bytes(self.held_bytes)})")

    # --- iterating ----------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple]:
        """The batches from :attr:`state` to the end of the epoch (``epochs=None``)
        or of the last of ``epochs`` epochs, read ahead on background threads
        (started at the first batch asked for: an iterator never advanced holds
        nothing; one left suspended is closed as the interpreter ends)."""
        it = self._iterate()
        _suspended.add(it)
        return it

    def _iterate(self) -> Iterator[tuple]:
        if self._running:
            raise RuntimeError("this loader is already being iterated (make another with "
                               "jask.batches for a second pass at once)")
        self._forget_the_parents()
        with _idle_lock:
            self._running = True
            self._iterations += 1
            _idle_loaders.discard(self)
        if self._idle_timer is not None:  # (no thread left waiting per iteration)
            self._idle_timer.cancel()
            self._idle_timer = None
        try:
            if self._batch >= self.plan.batches_in(self._epoch):  # a finished epoch
                self._epoch, self._batch = self._epoch + 1, 0
            last = self._epoch if self.epochs is None else self.epochs - 1
            if self._epoch > last:
                return
            feeder = _DeviceFeeder if self.device_bytes else _Feeder
            if feeder is _DeviceFeeder:
                _check_not_forked_after_jax()
            feed = feeder(self, self._epoch, self._batch, last)
            try:
                # (what is kept between iterations is held already)
                with _config.holding(self.held_bytes - self._kept_bytes):
                    feed.start()
                    while True:
                        if feed.pid != forks.pid():  # forked while iterated: this process's
                            feed.stop()              # threads read the rest
                            self._forget_the_parents()
                            if self._batch >= self.plan.batches_in(self._epoch):
                                self._epoch, self._batch = self._epoch + 1, 0
                            if self._epoch > last:
                                return
                            if feeder is _DeviceFeeder:
                                _check_not_forked_after_jax()
                            feed = feeder(self, self._epoch, self._batch, last)
                            feed.start()
                        item = feed.get()
                        if item is None:
                            return
                        epoch, b, values = item
                        # (after an epoch's last batch the state names it finished;
                        # the next loop begins the next epoch)
                        self._epoch, self._batch = epoch, b + 1
                        yield values
            finally:
                # (a reading child that does not finish its reads, stopped or stuck, is
                # killed after a while: leaving the loop, on Ctrl-C too, never hangs on it)
                stuck = (self._process.kill_after()
                         if self._process is not None and feed.pid == forks.pid() else None)
                try:
                    feed.stop()
                finally:
                    if stuck is not None:
                        stuck.cancel()
        finally:
            self._running = False
            self._keep_for_a_while()


def _check_not_forked_after_jax() -> None:
    """Raise where a device feed would compile in a forked child of a process
    whose JAX had started: XLA's compile waits forever there (jask.base.forks)."""
    if forks.forked_after_jax():
        raise RuntimeError(
            "jask.batches: this process was forked (os.fork, multiprocessing's 'fork') after "
            "JAX had started in its parent, and a loader with device=... compiles its cut "
            "here, which XLA cannot do in a forked process (it would wait forever). Use a "
            "'spawn' or 'forkserver' start method, or make the loader here with device=None "
            "(numpy batches; state=loader.state goes on from this one's next batch).")


class _Feeder:
    """The background work of one iteration: reading windows on a thread pool
    two windows deep, and cutting their batches on one thread, a few ahead."""

    #: whether each epoch reads with chunk files of its own (opened anew), not those of
    #: the epoch before where the store is unchanged: where an epoch's first windows are
    #: read (and its start taken) before the last of the epoch before are checked
    files_per_epoch = False

    def __init__(self, loader: Batches, epoch: int, batch: int, last: int):
        self.loader = loader
        self.plan = loader.plan
        self.first = (epoch, batch)
        self.last = last
        #: batches are handed over :attr:`group` at a time, a list per queue item (a
        #: handoff wakes the consumer: a thread switch each); what is cut ahead stays
        #: ``2 * prefetch + 2`` batches at most (:func:`_fit`): ``group`` in the list
        #: being filled, in each queued list and in the consumer's (the one it yields)
        self.group = min(HAND_BATCHES, loader.prefetch)
        self.ready: queue.Queue = queue.Queue(maxsize=max(1, loader.prefetch - self.group + 1))
        self.cut: list = []  # the cutter's batches not handed over yet
        self.handing: list = []  # the consumer's batches handed over, reversed
        self.stopping = threading.Event()
        #: the process iterating (a forked child's copy of an iteration has none of its threads)
        self.pid = forks.pid()
        self.pool = _Tasks(loader._reading_pool(), loader._reading_process())
        self.thread = threading.Thread(target=self._run, name="jask-batches", daemon=True)
        self.stores = [a._store() for a in loader._arrays if isinstance(a, DiskArray)]
        #: the host slots windows are read into, the loader's (kept between iterations)
        self.slots = loader._host_slots(self.slot_rows())
        #: chunk files held open while the stores are at the version ``stamps``: a
        #: window's runs are a few per chunk, and opening a file costs as much as reading
        #: a run. Those of an earlier version wait in ``retired`` until no read uses them.
        self.files = OpenFiles()
        self.files_stamps: list | None = None
        self.retired: list[OpenFiles] = []

    def slot_rows(self) -> int:
        return self.plan.unit * self.plan.window

    def files_for(self, stamps: list) -> OpenFiles:
        """The chunk files held open for an epoch that reads the stores at ``stamps``
        (the same as the epoch before's, unless a store was replaced in between or
        a chunk file read was rewritten: each epoch reads one version, checked
        against what it saw as each window is read). Of the epoch before's, only
        those held open are checked here (a rewritten one would be read through its
        old inode); the others are recorded anew as they are opened again."""
        if self.files_per_epoch or stamps != self.files_stamps or not self.files.renew():
            if self.files_stamps is not None:
                self.retired.append(self.files)
                self.files = OpenFiles()
            self.files_stamps = stamps
        # a chunk file first read with a change time from here on was written during the
        # epoch: every file it reads is then as the store held it when it began, or it fails
        # (the kernel stamps files by a clock up to a tick behind this one: a file written
        # before now never looks later, one written in the epoch's first tick may not)
        self.files.since_ns = time.time_ns()
        return self.files

    def start(self) -> None:
        self.thread.start()

    def hold_whole(self) -> list:
        """Each resident array (:attr:`Batches._resident`) being read whole into
        its loader's reused buffer, on the reading pool, as an :class:`_InMemory`
        whose takes wait for those reads (not waited for here: a cold disk reads
        the first windows meanwhile; the epoch's window checks its version);
        None for the others."""
        loader = self.loader
        out: list[_InMemory | None] = []
        for i, (a, resident) in enumerate(zip(loader._arrays, loader._resident)):
            if not resident:
                out.append(None)
                continue
            if i not in loader._whole:
                loader._whole[i] = np.empty(a.shape, a.dtype)
            whole = loader._whole[i]
            step = a.chunks[0] * max(1, -(-a.shape[0] // a.chunks[0]) // loader.threads)
            cuts = np.arange(0, a.shape[0], step)
            out.append(_InMemory(whole, [
                self.pool.submit(_read_runs, a, cuts[k:k + 1],
                                 np.minimum(cuts[k:k + 1] + step, a.shape[0]), whole[lo:hi], [])
                for k, (lo, hi) in enumerate(zip(cuts.tolist(),
                                                 np.minimum(cuts + step, a.shape[0]).tolist()))]))
        return out

    def take(self, q: queue.Queue):
        """The next item of ``q``, waited for as long as it takes; every
        :data:`STALL_WARN_S` without one while the reading process has reads
        not done, a warning says what it is doing (a stopped child waits silently)."""
        waited = 0.0
        while True:
            try:
                return q.get(timeout=STALL_WARN_S)
            except queue.Empty:
                waited += STALL_WARN_S
                said = self.pool.process.stalled(waited) if self.pool.process else None
                if said:
                    warnings.warn(said, RuntimeWarning, stacklevel=4)

    def get(self):
        if self.handing:
            return self.handing.pop()
        item = self.take(self.ready)
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, list):
            self.handing = item[::-1]
            return self.handing.pop()
        return item

    def stop(self) -> None:
        if self.pid != forks.pid():  # a forked child's copy: its threads and reads are the
            for files in [*self.retired, self.files]:  # parent's, never waited for here
                files.close()
            return
        self.stopping.set()
        _drain_until_ended(self.thread, self.ready)  # let a put waiting for room end
        self.pool.cancel_and_wait()
        for files in [*self.retired, self.files]:  # no read is left to use them
            files.close()

    def _put(self, item) -> bool:
        """Hand over ``item`` and the batches cut before it."""
        if not self._hand_cut():
            return False
        return _put_unless(self.ready, item, self.stopping, self.release_files)

    def _put_batch(self, item) -> bool:
        """Hand over batch ``item`` once :attr:`group` batches are cut."""
        self.cut.append(item)
        return len(self.cut) < self.group or self._hand_cut()

    def _hand_cut(self) -> bool:
        """Hand over the batches cut (before a wait on reads, and at the end)."""
        if not self.cut:
            return True
        cut, self.cut = self.cut, []
        return _put_unless(self.ready, cut, self.stopping, self.release_files)

    def release_files(self) -> None:
        """Close the chunk files held open, once the reads in flight are done
        (called by the thread that submits the reads, while it waits on the
        consumer: no read starts meanwhile; later ones open them again)."""
        self.pool.wait_all()
        for files in [*self.retired, self.files]:
            files.close()
        self.retired = []

    def _run(self) -> None:
        try:
            for epoch in range(self.first[0], self.last + 1):
                start = self.first[1] if epoch == self.first[0] else 0
                if not self._epoch(epoch, start):
                    return
            self._put(None)
        except BaseException as err:  # raised in the consumer's thread, at its next batch
            self._put(err)

    def _epoch(self, epoch: int, start: int) -> bool:
        plan, B = self.plan, self.plan.batch_size
        total = plan.batches_in(epoch)
        if start >= total:
            return True
        stamps = stamp(self.stores, _OP)  # the version this epoch reads
        files = self.files_for(stamps)
        whole = self.hold_whole()
        span = _Span(plan, epoch, start)
        windows, sizes, w0, offset = span.windows, span.sizes, span.w0, span.offset
        slots = self.slots
        batch_memory = self.loader._batch_memory
        assert batch_memory is not None  # (made with the host slots)
        pending: dict = {}
        # each window's order drawn into one buffer (its batches copy their rows out)
        orders = np.empty(max(sizes[w0:], default=0), np.int64)

        # in order, the first window is read in pieces of a batch: its first batch
        # comes after a fraction of the window's reads (shuffled, a batch takes rows
        # from the whole window: it waits for all of them whatever the pieces)
        # (at most FIRST_PIECES_PER_THREAD a thread: a task's own cost stays small)
        first_piece = None
        if not plan.shuffle and self.loader._runs_cheap:
            first_piece = max(B, -(-plan.unit * plan.window
                                   // (FIRST_PIECES_PER_THREAD * self.loader.threads)))

        def submit(w: int) -> None:
            if w < len(windows):
                pending[w] = slots[w % len(slots)].fill(self.pool, self.loader.threads, windows[w],
                                                   plan, stamps, whole, files,
                                                   *((first_piece, offset) if w == w0
                                                     else (None, 0)))

        for ahead in range(len(slots)):
            submit(w0 + ahead)
        carry: list | None = None  # rows of a batch begun in the previous window
        b = start
        for w in range(w0, len(windows)):
            if b >= total:
                break
            slot = slots[w % len(slots)]
            order = plan.window_order_into(epoch, w, orders[:sizes[w]])  # while it is read
            # a batch waits only for the reads of the rows it takes: in order, the first
            # window's first batches come once their rows are read, not the whole window
            reads = _Reads(pending.pop(w), slot.task_rows, stamps, files)
            pos = offset if w == w0 else 0
            while pos < sizes[w] and b < total:
                need = B - (len(carry[0]) if carry else 0)
                take = order[pos:pos + need]
                reads.wait_for(take, before=self._hand_cut)
                parts = [batch_memory.take(buf, take) for buf in slot.buffers]  # (2x a fancy index)
                pos += len(take)
                if carry:
                    parts = [np.concatenate([c, p]) for c, p in zip(carry, parts)]
                    carry = None
                if len(parts[0]) < B and w + 1 < len(windows):
                    carry = parts  # the batch goes on into the next window
                    break
                if not self._put_batch((epoch, b, self._deliver(parts))):
                    return False
                b += 1
            if not self._hand_cut():  # (the next window's order is drawn meanwhile)
                return False
            reads.wait_for(None)  # (drop_last may leave rows unread by any batch)
            submit(w + len(slots))  # the slot of window w is free again
        for work in pending.values():  # windows past the last batch (drop_last): the next
            for f in work:             # epoch reads into their slots
                f.result()
        if carry and b < total:
            if not self._put((epoch, b, self._deliver(carry))):
                return False
        return self._hand_cut()

    def _deliver(self, parts: list) -> tuple:
        if self.loader._device is None:
            return tuple(parts)
        # one call for every array: a device_put's dispatch costs about what its copy does
        return tuple(jax.device_put(tuple(parts), self.loader._device))


class _Reads:
    """The reads of one window into a slot, waited for as its batches need
    them: each task's rows ``[lo, hi)`` of the window, the stores' stamps and
    the chunk files read checked once the rows a batch takes are read (one
    check covers every read done before it began)."""

    def __init__(self, futures: list, rows: list, stamps: list, files: OpenFiles):
        self._left = sorted(zip(rows, range(len(futures)), futures), key=lambda t: t[0])
        self._stamps = stamps
        self._files = files
        self._checked: set[int] = set()  # the tasks done before the latest check began

    def wait_for(self, take: np.ndarray | None, before=None) -> None:
        """Wait for the reads of the rows ``take`` (positions in the window;
        None: all), raising what a read raised; ``before()`` is called first
        where one of them is not done yet."""
        if not self._left:
            return
        if take is None or not len(take):
            lo, hi = 0, np.iinfo(np.int64).max
        else:
            lo, hi = int(take.min()), int(take.max()) + 1
        waited = [t for t in self._left if t[0][0] < hi and t[0][1] > lo]
        if not waited:
            return
        if before is not None and not all(future.done() for _, _, future in waited):
            before()
        for _, _, future in waited:
            future.result()
        done = {i for _, i, _ in waited}
        self._left = [t for t in self._left if t[1] not in done]
        if done <= self._checked:
            return  # (read before the latest check began, which covers them: in order, a
            # window's batches wait on its reads one by one, and a check stats every file)
        self._checked = done | {i for _, i, f in self._left if f.done()}
        check_unchanged(self._stamps, _OP, self._files)


class _Span:
    """The windows of one shard's epoch from batch ``start`` on: which window
    holds the batch's first row (``w0``, at ``offset`` in it) and which its
    last batch's last row (``w_last``)."""

    def __init__(self, plan: BatchPlan, epoch: int, start: int):
        self.total = plan.batches_in(epoch)
        self.windows = plan.windows(epoch)
        self.sizes = [plan.rows_in(units) for units in self.windows]
        ends = np.cumsum(self.sizes)
        first_row = start * plan.batch_size
        self.w0 = int(np.searchsorted(ends, first_row, side="right"))
        self.offset = first_row - (int(ends[self.w0 - 1]) if self.w0 else 0)
        self.rows = int(ends[-1]) if len(ends) else 0
        last_row = min(self.total * plan.batch_size, self.rows) - 1
        self.w_last = int(np.searchsorted(ends, last_row, side="right"))
        #: the next batch a device feed dispatches (:func:`_cut_window` advances it)
        self.b = start

    def batch_length(self, b: int, batch_size: int) -> int:
        return min(batch_size, self.rows - b * batch_size)


class _DeviceFeeder(_Feeder):
    """The background work of one iteration onto one device (or a
    ``NamedSharding``'s devices, each window's rows split over them), as a pipeline
    of one *stager* thread over the loader's reading pool: the reads of the
    next window run while the window before is copied (a ``device_put`` per
    piece of :data:`TRANSFER_BYTES`, so that the consumer's dispatch waits on
    one piece's copy at most), and as
    soon as a window is on the device (waited for here, so that no program in
    the device's stream waits on a copy) its batches are dispatched, a power of
    two of them at a time (:data:`CUT_BATCHES` at most), by one compiled
    program that permutes the window by one gather and slices it (the
    shuffle costs the host nothing); a batch crossing into the next window is
    completed there. The consumer takes a window's batches at once: per batch
    the host does a list pop. The device holds at most
    :data:`DEVICE_WINDOWS` windows (:attr:`Batches.device_bytes`)."""

    # (the next epoch's windows are read while this one's last are still to be checked:
    # against this one's start, a file written meanwhile and first read there is named)
    files_per_epoch = True

    def __init__(self, loader: Batches, epoch: int, batch: int, last: int):
        super().__init__(loader, epoch, batch, last)
        # one window's batches waiting beside those being handed out
        self.staged: queue.Queue = queue.Queue(maxsize=1)
        self.stager = threading.Thread(target=self._stage, name="jask-batches-put", daemon=True)
        self.handing: list = []  # the current window's (epoch, batch, values), reversed

    def slot_rows(self) -> int:
        return _slot_rows(self.plan, self.loader._device)

    def start(self) -> None:
        self.stager.start()

    def get(self):
        while not self.handing:
            item = self.take(self.staged)
            if item is None or isinstance(item, BaseException):
                if item is not None:
                    raise item
                return None
            self.handing = item[::-1]
        return self.handing.pop()

    def stop(self) -> None:
        self.handing = []
        if self.pid != forks.pid():  # (a forked child's copy: see _Feeder.stop)
            return super().stop()
        self.stopping.set()
        _drain_until_ended(self.stager, self.staged)  # a put waiting for room, a read waited for
        super().stop()

    def _hand(self, item) -> bool:
        return _put_unless(self.staged, item, self.stopping, self.release_files)

    def _stage(self) -> None:
        """Read every window the iteration needs, in order, into two host
        slots in turn; put each on the device and dispatch its batches; hand
        them over a window at a time."""
        # (what goes wrong, here too, is raised in the consumer's thread: it waits on no one)
        try:
            plan, B = self.plan, self.plan.batch_size
            window_rows = self.slot_rows()
            target = self.loader._device
            # the window's rows split as the batches' are, its order whole on every device
            order_target = target
            if isinstance(target, jax.sharding.NamedSharding):
                order_target = jax.sharding.NamedSharding(target.mesh, jax.sharding.PartitionSpec())
            cut, merge = _programs(target, plan.shuffle)
            # where the device may share the host's memory (the CPU), a slot is read into
            # again only once the programs reading its copy have run
            shares_host = _platform(target) == "cpu"
            piece_rows = [_pieces(window_rows, _row_bytes(a), _row_split(target))
                          for a in self.loader._arrays]
            # the window an iteration before read ahead (waited for before the epoch's
            # resident arrays are read again into the buffers its reads took from)
            ahead = self.loader._take_ahead()
            jobs = self._jobs()
            slots = self.slots
            # each slot's order, padded by a batch of zeros (so a slice never clamps)
            orders = [np.zeros(window_rows + B, np.int32) for _ in slots]
            pending: list = []
            last_job: list = []  # the last window's job, once every window is submitted

            def submit(k: int) -> None:
                nonlocal ahead
                job = next(jobs, None)
                if job is None:
                    if last_job:
                        read_ahead(k, *last_job.pop())
                    return
                epoch, w, units, stamps, files, whole, _span = job
                last_job[:] = [job]
                # (chunk files it read rewritten since, by a writer between the epochs: it
                # is of the version before, read again, as the host feed reads every epoch)
                if ahead is not None and (ahead.epoch, ahead.window, ahead.slot) == (
                        epoch, w, k) and ahead.stamps == stamps and not ahead.files.changed(
                            every=True):
                    # the chunk files it read, checked just now, after its reads and after
                    # the epoch began (files_for ran for this job): as the epoch's start held
                    # them. Not marked read (its check would stat each again); one read
                    # again later in the epoch is checked with the window reading it.
                    files.merge(ahead.files.seen(), read=False)
                    orders[k], ahead = ahead.order, None
                    # read already (checked once copied), but for the arrays in memory,
                    # taken again: a resident one's rows from this epoch's read of it, a
                    # user's numpy array's anew (either may have been written between the
                    # epochs: labels by zarr, pseudo-labels in place)
                    starts = np.asarray(units, np.int64) * plan.unit
                    stops = np.minimum(starts + plan.unit, plan.rows)
                    pending.append((job, k, [
                        self.pool.submit(_read_runs, a if held is None else held, starts,
                                         stops, buf, [])
                        for a, held, buf in zip(slots[k].arrays, whole, slots[k].buffers)
                        if held is not None or isinstance(a, _InMemory)]))
                    return
                ahead = None
                work = slots[k].fill(self.pool, self.loader.threads, units, plan, stamps,
                                     whole, files)
                size = plan.rows_in(units)
                work.append(self.pool.submit(plan.window_order_into, epoch, w,
                                             orders[k][:size]))
                pending.append((job, k, work))

            def read_ahead(k: int, _epoch, _w, _units, stamps: list, _files, whole: list,
                           _span) -> None:
                """Read the next epoch's first window into slot ``k`` (free: every
                window of the iteration is read or being read) for the next iteration,
                by the loader's reading child or pool as any window (tasks of their
                own, not cancelled when this iteration ends) with no chunk file held
                open (this iteration's close when it ends)."""
                # (no next iteration reads; a compressed store's windows are not read ahead)
                if self.loader.epochs is not None or not self.loader._runs_cheap:
                    return
                epoch = self.last + 1  # where the next iteration begins, unless restored
                nxt = _Span(plan, epoch, 0)
                if not nxt.total:
                    return
                units = nxt.windows[nxt.w0]
                order = np.zeros(window_rows + B, np.int32)
                pool = _Tasks(self.loader._reading_pool(), self.pool.process)
                # what it reads, to be checked where it is used; no file held open (nothing
                # would close them)
                seen = OpenFiles(most=0)
                work = slots[k].fill(pool, self.loader.threads, units, plan, stamps, whole,
                                     seen)
                work.append(pool.submit(plan.window_order_into, epoch, nxt.w0,
                                        order[:plan.rows_in(units)]))
                self.loader._ahead = _Ahead(epoch, nxt.w0, stamps, k, work, order, seen)

            # the slot read ahead first: the iteration's first window is there
            for k in sorted(range(len(slots)), key=lambda k: ahead is None or k != ahead.slot):
                submit(k)
            carry: tuple | None = None  # (batch begun in the window before, its rows)
            while pending:
                (epoch, w, units, stamps, files, _whole, span), k, work = pending.pop(0)
                for f in work:
                    f.result()  # raises what a read raised
                    if self.stopping.is_set():
                        return
                # the whole slot (every window has one shape, so one compiled program
                # serves all), in pieces
                host = [[whole[lo:hi] for lo, hi in cuts]
                        for whole, cuts in zip(slots[k]._whole, piece_rows)]
                # one device_put per piece: one call of a whole window held the
                # consumer's step dispatch for its whole copy (RESULTS.md, the fed epoch)
                order = jax.device_put(orders[k], order_target)
                pieces = _put_pieces(host, target, PUTS_IN_FLIGHT)
                # the version check here, while the pieces are copied: on the reading
                # pool it waited behind the next window's reads, and the window's
                # batches with it (RESULTS.md, the fed epoch's timeline)
                check_unchanged(stamps, _OP, files)
                if w == span.w_last and files in self.retired:
                    # its epoch's reads are over (the next epoch's files are open by now: its
                    # first window was submitted before this one's turn came)
                    files.close()
                    self.retired.remove(files)
                # copied before the cut is dispatched: the device runs its programs in
                # order, so a cut waiting on the copy would hold every step queued behind
                # it (the consumer's steps of the window before); and the slot may then
                # be read into again
                jax.block_until_ready((pieces, order))
                out, carry = _cut_window(pieces, order, epoch, w, plan.rows_in(units), span,
                                         carry, B, cut, merge)
                if shares_host:  # the CPU's copy may be the slot itself: cut before reading
                    jax.block_until_ready(([v for _, _, v in out], carry))
                del pieces, order
                submit(k)
                if out and not self._hand(out):
                    return
            self._hand(None)
        except BaseException as err:  # raised in the consumer's thread, at its next batch
            self._hand(err)

    def _jobs(self) -> Iterator[tuple]:
        """(epoch, window, its units, the epoch's stamps, its chunk files, the
        resident arrays, the epoch's span) of each window the iteration needs, in order."""
        for epoch in range(self.first[0], self.last + 1):
            start = self.first[1] if epoch == self.first[0] else 0
            span = _Span(self.plan, epoch, start)
            if start >= span.total:
                continue
            stamps = stamp(self.stores, _OP)  # the version this epoch reads
            files = self.files_for(stamps)
            whole = self.hold_whole()
            for w in range(span.w0, span.w_last + 1):
                yield epoch, w, span.windows[w], stamps, files, whole, span


def _cut_window(pieces: tuple, order, epoch: int, w: int, size: int, span: "_Span",
                carry: tuple | None, B: int, cut=None, merge=None) -> tuple[list, tuple | None]:
    """Dispatch the batches of window ``w`` (on the device as ``pieces`` of
    each array, ``order`` its rows' order, ``size`` rows): the one ``carry``
    began in the window before completed, whole batches in programs of a
    power of two of them, and the batch it ends with begun (returned as the
    next carry: the batch and how many of its rows it has)."""
    cut, merge = cut or _cut, merge or _merge
    out: list = []
    pos = span.offset if w == span.w0 else 0
    whole_batches = min(span.total, span.rows // B)  # batches of B rows (all but a short last)
    while pos < size and span.b < span.total:
        length = span.batch_length(span.b, B)
        if carry is not None:
            batch, filled = carry
            n = min(length - filled, size - pos)
            batch = merge(batch, pieces, order, pos, filled, n)
            pos, filled = pos + n, filled + n
            carry = None if filled == length else (batch, filled)
            if carry is None:
                out.append((epoch, span.b, batch))
                span.b += 1
            continue
        count = min((size - pos) // B, whole_batches - span.b)
        if count > 0:
            count = min(CUT_BATCHES, 1 << (int(count).bit_length() - 1))
            for i, batch in enumerate(cut(pieces, order, pos, B, count)):
                out.append((epoch, span.b + i, batch))
            span.b += count
            pos += count * B
            continue
        # a batch that goes on into the next window (or the epoch's short last one)
        batch = cut(pieces, order, pos, length, 1)[0]
        n = min(length, size - pos)
        pos += n
        if n == length:
            out.append((epoch, span.b, batch))
            span.b += 1
        else:
            carry = (batch, n)
    return out, carry


class _Tasks:
    """The work one iteration gives its loader's reading pool: leaving the
    loop cancels what has not begun and waits for what runs (the pool lives on)."""

    def __init__(self, pool: ThreadPoolExecutor, process: ReaderProcess | None = None):
        self._pool = pool
        #: the loader's reading process, if it has one (:meth:`Batches._reading_process`)
        self.process = process
        self._futures: list[Future] = []
        self._lock = threading.Lock()

    def submit(self, fn, *args) -> Future:
        return self.track(self._pool.submit(fn, *args))

    def track(self, future: Future) -> Future:
        """Count ``future`` (given to another pool) among this iteration's tasks."""
        with self._lock:
            if len(self._futures) >= 1024:  # forget those done
                self._futures = [f for f in self._futures if not f.done()]
            self._futures.append(future)
        return future

    def wait_all(self) -> None:
        """Wait for every task given so far (the pool lives on)."""
        with self._lock:
            futures = list(self._futures)
        wait(futures)

    def cancel_and_wait(self) -> None:
        with self._lock:
            futures, self._futures = self._futures, []
        for f in futures:
            f.cancel()
        wait(futures)


def _put_unless(q: queue.Queue, item, stopping: threading.Event, idle=None) -> bool:
    """Put ``item`` on ``q`` once it has room; False if ``stopping`` is set first.
    ``idle()`` is called once if the wait passes :data:`IDLE_RELEASE_S`."""
    waited = 0.0
    while not stopping.is_set():
        try:
            q.put(item, timeout=0.05)
            return True
        except queue.Full:
            waited += 0.05
            if idle is not None and waited >= IDLE_RELEASE_S:
                idle()
                idle = None
    return False


def _drain_until_ended(thread: threading.Thread, q: queue.Queue) -> None:
    """Empty ``q`` until ``thread`` ends (a put of its waiting for room ends)."""
    while thread.is_alive():
        try:
            q.get_nowait()
        except queue.Empty:
            pass
        thread.join(0.01)


def _pieces(rows: int, row_bytes: int, split: int = 1) -> list[tuple[int, int]]:
    """Row ranges of about :data:`TRANSFER_BYTES` each (whole multiples of 8
    rows, the TPU's tiling, and of ``split``, the devices a piece's rows are
    split over: ``rows`` is a multiple of it) covering ``rows``."""
    whole = 8 * split // math.gcd(8, split)
    step = max(whole, TRANSFER_BYTES // max(1, row_bytes) // whole * whole)
    return [(lo, min(lo + step, rows)) for lo in range(0, rows, step)]


def _put_pieces(host: list, target, in_flight: int | None) -> tuple:
    """Each array's host pieces (``host[i]``) put on ``target``, a
    ``device_put`` each, at most ``in_flight`` of them (None: any number) not
    yet copied (the last ones left in flight: the caller waits for them)."""
    flying: list = []  # (with a bound: the pieces put and not waited for, oldest first)
    out = []
    for array in host:
        put = []
        for piece in array:
            if in_flight is not None and len(flying) == in_flight:
                flying.pop(0).block_until_ready()
            put.append(jax.device_put(piece, target))
            if in_flight is not None:
                flying.append(put[-1])
        out.append(tuple(put))
    return tuple(out)


def _cut_rows(pieces: tuple, order, start, length: int, count: int) -> tuple:
    """``count`` batches of ``length`` rows, rows ``order[start:start + count
    * length]`` of each array's window (joined from its pieces), permuted by
    one gather and sliced (``order`` is padded by a batch, so the slice never
    clamps)."""
    rows = lax.dynamic_slice(order, (start,), (length * count,))
    taken = [jnp.take(jnp.concatenate(p) if len(p) > 1 else p[0], rows, axis=0,
                      mode="clip") for p in pieces]
    return tuple(tuple(t[i * length:(i + 1) * length] for t in taken) for i in range(count))


def _slice_rows(pieces: tuple, order, start, length: int, count: int) -> tuple:
    """:func:`_cut_rows` of a window in order (``order`` is the identity: not
    read): rows ``start:start + count * length`` sliced, no gather (on a TPU
    v5e a window's gather ran at 44 GB/s of the chip's time, a slice is a copy
    at its memory's rate). The window is padded by ``length`` rows so that a
    batch going on into the next window is never clamped (XLA fuses the join,
    the padding and the slice: only the batches are written)."""
    del order
    taken = []
    for p in pieces:
        pad = jnp.zeros((length,) + p[0].shape[1:], p[0].dtype)
        taken.append(lax.dynamic_slice_in_dim(jnp.concatenate((*p, pad)), start,
                                              length * count))
    return tuple(tuple(t[i * length:(i + 1) * length] for t in taken) for i in range(count))


def _merge_rows(batch: tuple, pieces: tuple, order, start, at, n) -> tuple:
    """``batch`` with its rows ``at:at + n`` taken from ``order[start:]`` of
    this window: a batch that spans windows, one shape whatever the split."""
    j = jnp.arange(batch[0].shape[0])
    rows = order[jnp.clip(start + j - at, 0, order.shape[0] - 1)]
    mine = (j >= at) & (j < at + n)
    return tuple(jnp.where(mine.reshape((-1,) + (1,) * (old.ndim - 1)),
                           jnp.take(jnp.concatenate(p) if len(p) > 1 else p[0], rows, axis=0,
                                    mode="clip"), old)
                 for old, p in zip(batch, pieces))


_cut = jax.jit(_cut_rows, static_argnums=(3, 4))
_slice = jax.jit(_slice_rows, static_argnums=(3, 4))
_merge = jax.jit(_merge_rows)


@lru_cache(maxsize=8)
def _programs(target, shuffle: bool = True) -> tuple:
    """The compiled cut and merge of a device feed onto ``target`` (a cut
    that gathers the window's rows in their order where it is shuffled, that
    slices them where it is not): on one device, what its inputs' placement
    gives; with a ``NamedSharding``, batches made with exactly that sharding
    (XLA moves the rows each device's share of a batch needs from the others'
    shares of the window)."""
    rows = _cut_rows if shuffle else _slice_rows
    if not isinstance(target, jax.sharding.NamedSharding) or len(target.device_set) == 1:
        return _cut if shuffle else _slice, _merge
    return (jax.jit(rows, static_argnums=(3, 4), out_shardings=target),
            jax.jit(_merge_rows, out_shardings=target))


class _InMemory:
    """An array already in memory (numpy or jax) among a loader's arrays."""

    def __init__(self, value: np.ndarray, ready: list | None = None):
        self.value = value
        #: the reads filling ``value`` (a resident array's), waited for before a take
        self.ready = ready or []
        self.shape = value.shape
        self.dtype = value.dtype


@lru_cache(maxsize=None)
def _owner_type(nbytes: int) -> Any:
    """A ctypes array type of ``nbytes`` bytes whose instances take weak references."""
    return type(f"_BatchOwner{nbytes}", (ctypes.c_char * nbytes,), {})


class _BatchMemory:
    """Memory for a host feed's batches, recycled: pages already in place.

    A batch is a view of a block owned by a ctypes object (not an ndarray:
    numpy's base of every view of the batch, or of a view of one, stops at it,
    and a memoryview or a JAX array sharing its memory holds the batch), so the
    block comes back only when nothing can read it any more, once the owner
    dies. A block the consumer keeps is never reused; of those given back, at
    most ``keep`` of a size are kept (:func:`_fit` counts ``2 * prefetch + 2``
    batches), the rest freed."""

    def __init__(self, keep: int):
        self.keep = keep
        self.free: dict[int, list[np.ndarray]] = {}
        #: reentrant: a collection inside the lock may give a block back; renewed in a
        #: forked child (the cutting thread takes it for every batch, and is not there)
        self.lock = forks.rlock()

    def empty(self, shape: tuple, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        with self.lock:
            blocks = self.free.get(nbytes)
            block = blocks.pop() if blocks else None
        if block is None:  # (aligned as JAX's CPU device shares a host array's memory)
            raw = np.empty(nbytes + BATCH_ALIGN, np.uint8)
            at = -raw.ctypes.data % BATCH_ALIGN
            block = raw[at:at + nbytes]
        owner = _owner_type(nbytes).from_buffer(block)
        weakref.finalize(owner, self._give_back, block).atexit = False
        return np.frombuffer(owner, dtype).reshape(shape)

    def _give_back(self, block: np.ndarray) -> None:
        with self.lock:
            blocks = self.free.setdefault(block.nbytes, [])
            if len(blocks) < self.keep:
                blocks.append(block)

    def close(self) -> None:
        """Free the blocks kept (those still lent are freed when their owners die)."""
        with self.lock:
            self.keep, self.free = 0, {}

    def take(self, buf: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``buf.take(rows, axis=0)``, into a recycled block where it is of at
        least :data:`RECYCLE_BYTES`."""
        shape = (len(rows),) + buf.shape[1:]
        if not RECYCLE_BYTES or math.prod(shape) * buf.itemsize < RECYCLE_BYTES:
            return buf.take(rows, axis=0)
        # ("clip": the rows are in the window; "raise" would take into a fresh buffer first)
        return np.take(buf, rows, axis=0, out=self.empty(shape, buf.dtype), mode="clip")


class _Slot:
    """One window's buffers (one per array), reused from window to window:
    freshly allocated memory is slow to touch here (jask.store.buffers)."""

    def __init__(self, arrays: tuple, rows: int):
        self.arrays = arrays
        self.rows = rows
        self._whole: list[np.ndarray] = []
        #: the buffers in shared memory, where the reading process reads (else empty)
        self._shared: list[SharedArray] = []
        self.buffers: list[np.ndarray] = []  # the current window's rows, one per array
        #: the rows ``(lo, hi)`` of the window each task of :meth:`fill` reads
        self.task_rows: list[tuple[int, int]] = []

    def fill(self, pool: ThreadPoolExecutor | _Tasks, threads: int, units: np.ndarray,
             plan: BatchPlan, stamps, whole: list, files: OpenFiles | None,
             piece: int | None = None, skip: int = 0) -> list:
        """Start reading ``units`` (sorted) into this slot on ``pool`` (of
        ``threads``); the reads' futures (the runs of an array in ``whole`` are
        taken from it in memory; chunk files stay open in ``files``).

        Each array's units are read in a few tasks of many runs each (a task
        opens or decodes each of its chunks once, :func:`jask.store.tiles.read_runs`),
        about two per reading thread. With ``piece`` (rows; where runs read at
        their bytes' cost), units are read in pieces of at most that many rows,
        a task or more each: the first pieces are read sooner (a window in
        order hands its first batches over once their rows are read), and
        those wholly before the window's row ``skip`` are not read (an
        iteration in order resumed there never takes them)."""
        process = getattr(pool, "process", None)
        if not self._whole:  # made at the first window, touched by its reads
            # (in shared memory where the reading child reads, if it has room for
            # the window with as much to spare: else in this process, read by threads)
            room = shared_room() if process is not None else None
            need = sum(self.rows * _row_bytes(a) for a in self.arrays)
            if process is not None and (room is None or need <= room // 2):
                self._shared = [SharedArray((self.rows,) + a.shape[1:], a.dtype)
                                for a in self.arrays]
                self._whole = [shared.value for shared in self._shared]
            else:
                self._whole = [np.empty((self.rows,) + a.shape[1:], a.dtype)
                               for a in self.arrays]
        n = plan.rows_in(units)
        self.buffers = [buf[:n] for buf in self._whole]
        starts = np.asarray(units, np.int64) * plan.unit
        stops = np.minimum(starts + plan.unit, plan.rows)
        count = TASKS_PER_THREAD * threads
        if piece is not None and piece < plan.unit:
            cuts = [np.arange(a, b, piece) for a, b in zip(starts, stops)]
            starts = np.concatenate(cuts)
            stops = np.minimum(starts + piece, np.repeat(stops, [len(c) for c in cuts]))
            count = len(starts)
        at = np.concatenate([[0], np.cumsum(stops - starts)])
        kept = np.arange(len(starts))
        if piece is not None and skip:
            kept = kept[at[1:] > skip]
        tasks = []
        self.task_rows = []
        for group in np.array_split(kept, min(len(kept), count)):
            lo, hi = int(at[group[0]]), int(at[group[-1] + 1])
            for i, (a, buf, held_whole) in enumerate(zip(self.arrays, self.buffers, whole)):
                if (process is not None and self._shared and held_whole is None
                        and isinstance(a, DiskArray) and reads_runs(a._store())):
                    tasks.append(pool.track(process.submit(  # type: ignore[union-attr]
                        a._store(), starts[group], stops[group], buf[lo:hi], self._shared[i],
                        stamps, _OP, files)))
                else:
                    # (a resident array's take waits for its whole read, begun before)
                    tasks.append(pool.submit(_read_runs, a if held_whole is None else held_whole,
                                             starts[group], stops[group], buf[lo:hi], stamps,
                                             files))
                self.task_rows.append((lo, hi))
        return tasks


def _read_runs(a, starts: np.ndarray, stops: np.ndarray, into: np.ndarray, stamps: list,
               files: OpenFiles | None = None) -> None:
    """Rows ``starts[i]:stops[i]`` of one array, one after another, into its
    window's buffer, held against this process's writers (the window's stamps
    are checked once it is read; chunk files held open in ``files``)."""
    if isinstance(a, _InMemory):  # one take, not a slice per run
        for f in a.ready:  # (submitted before this task: begun, never waiting on it)
            f.result()
        np.take(a.value, rows_of_runs(starts, stops), axis=0, out=into, mode="clip")
        return
    store = a._store()
    with held([store]):
        read_runs_of_version(store, starts, stops, into, stamps, _OP, files)


def batches(*arrays, batch_size: int, shuffle: bool = True, seed: int = 0,
            epochs: int | None = None, drop_last: bool = False, buffer: int | None = None,
            shard: tuple[int, int] = (0, 1), threads: int | None = None,
            prefetch: int = DEFAULT_PREFETCH, device=None, state: dict | None = None,
            readers: str | None = None) -> Batches:
    """Minibatches of one or more arrays with the same first axis, read ahead
    from disk while the step computes.

    Each batch is a tuple with one in-memory array per argument, rows
    ``[i]`` of all of them aligned: numpy arrays, which a jitted step takes
    as they are (its call moves them to the device, which measured faster
    than a ``jax.device_put`` per batch), or ``jax.Array`` placed on
    ``device``. Iterating the loader runs one epoch (``epochs=None``) or
    runs until ``epochs`` epochs in all are done, from where it is
    (:attr:`Batches.state`).

    The shuffle (``shuffle=True``): every epoch permutes runs of rows of the
    arrays, deals them to the shards, and mixes the rows of every ``buffer``
    rows' worth of consecutive runs. A run is up to ``2 * buffer /
    batch_size`` rows (by default 128 KiB of the widest array's rows, where
    a chunk and a window of 64 MiB allow) where the arrays' chunks are
    uncompressed files (or in memory): on a store sorted by label, batch
    means then deviate about 1.2-1.7x as much as a full shuffle's; else a
    whole chunk row of the array with the most bytes per row (a compressed
    chunk is decoded whole). Every row comes exactly once per epoch; the rows of
    a batch come from one window of at most ``buffer`` rows (or two, where
    the batch crosses into the next); the order is
    fixed by ``seed``, the epoch, the arrays' shapes and chunks,
    ``batch_size``, ``buffer`` and ``shard``, whatever the budget and the
    threads (the default ``buffer`` only shrinks where it would not fit).
    With ``shuffle=False`` batches come in row order.

    Args:
      *arrays: DiskArrays (or numpy / jax arrays) with the same first axis.
      batch_size: rows per batch.
      shuffle: shuffle chunks, then rows within the buffer (see above).
      seed: the shuffle's seed.
      epochs: how many epochs a loop over the loader runs in all; None: one
        per loop.
      drop_last: leave out the last, short batch of each epoch (and with
        several shards, give every shard the same number of batches).
      buffer: rows mixed together by the shuffle: whole chunks of the array
        with the most bytes per row, as many as fit in ``buffer`` rows (a
        buffer smaller than one chunk reads pieces of chunks of that many
        rows); default 64 batches' rows, or more where the shuffle reads
        runs of uncompressed chunk files (up to 64 MiB of the widest array:
        runs of 128 KiB, which a cold disk reads near its whole-file rate,
        as many runs a window as ever), halved until the loader fits in half
        the budget (pass ``buffer`` for an order that does not depend on the
        budget). The loader holds two buffers.
      shard: ``(index, count)``: this process reads only its share of each
        epoch's chunks, disjoint from the other ``count - 1`` shards'
        (``(jax.process_index(), jax.process_count())`` on several hosts).
      threads: reading threads (default 8; 4 in a reading child, whose threads
        share its GIL); they never change the batches.
      prefetch: numpy batches cut ahead of the step (on a device, a
        window's batches are cut at once, and the next window's ahead).
      device: a ``jax.Device`` or a ``Sharding`` to place the batches on;
        None: numpy batches. On one device, each window read is copied
        there whole (one transfer of every array's window in concurrent
        pieces, its host buffers read into again as soon as it is copied,
        the next window read meanwhile) and its batches are cut there by
        one program (a gather permuting the window, then slices): the same
        batches, in the same order, as numpy ones, with the host doing no
        per-row work.
        The device holds at most :data:`DEVICE_WINDOWS` windows and the
        batches ahead (:attr:`Batches.device_bytes`, within a quarter of the
        device's memory). A ``NamedSharding`` over several devices gets the
        same: each window put with its rows split as the batches' are,
        batches cut on the devices with exactly that sharding
        (``device_bytes`` per device: the window shares, and one whole window
        the gather reads). JAX's CPU device, whose memory is the host's, and
        other Shardings over several devices get each batch cut on the host
        and put with it (on the CPU device a batch is a fresh array the
        device may share; ``device_bytes`` is 0).
      state: a :attr:`Batches.state` to continue from.
      readers: ``"processes"``: the runs of local uncompressed stores read
        by one child process of ``threads`` threads (started at the first
        iteration, kept for the loader's life, ended by :meth:`Batches.close`
        or its collection) into windows in shared memory, so that the reads
        take nothing of the GIL the step's dispatch needs (on a TPU host a fed
        step slowed 1.3-11x beside reading threads, 1.1-1.2x beside the same
        reads in another process; a fed 2 GiB epoch took 0.73-0.77 s
        shuffled and 0.39 s in order, not 0.91-0.96 s and 0.58-0.64 s; the
        child's reads are counted by :func:`jask.track` as the process's). The child
        runs :func:`jask.store.reader_child.serve`: it never imports the
        script's main module (no ``__main__`` guard needed), and the first
        epoch waits for it to start (jask's import, seconds). ``"threads"``:
        read by the loader's threads. The same batches either way; other
        stores are always read by threads. None (default): ``"processes"``
        where ``device`` is an accelerator (a device or Sharding not on the
        CPU), ``"threads"`` otherwise (on 2 cores a child reads slower than
        threads: benchmarks/RESULTS.md).

    Raises:
      ValueError: arrays of different first axes, no arrays, 0-d arrays, a
        bad ``batch_size``/``buffer``/``shard``/``seed``/``state``, ``shuffle``
        or ``drop_last`` not a bool.
      TypeError: an argument not a DiskArray, numpy or jax array (a zarr
        array: open its store with :func:`jask.open`), a masked or traced one.
      BudgetError: if the loader's buffers (two windows and their orders, three
        with a ``device`` off the CPU, the batches ahead, a chunk per thread) do
        not fit in half the budget, or its windows on ``device`` in a quarter of
        its memory, before anything is read.
      TypeError: ``device`` neither a Device nor a Sharding.
      ValueError: a Sharding that cannot place every batch: a spec naming
        more axes than an array has, or rows split in parts that do not
        divide ``batch_size`` or an epoch's short last batch (pass
        ``drop_last=True``).

    Example:
      >>> import numpy as np, jask
      >>> X = jask.from_numpy(np.arange(20.0).reshape(10, 2))
      >>> y = jask.from_numpy(np.arange(10.0))
      >>> loader = jask.batches(X, y, batch_size=4, shuffle=False)
      >>> [(xb.shape, yb.tolist()) for xb, yb in loader]
      [((4, 2), [0.0, 1.0, 2.0, 3.0]), ((4, 2), [4.0, 5.0, 6.0, 7.0]), ((2, 2), [8.0, 9.0])]
      >>> shuffled = jask.batches(X, y, batch_size=4, seed=1)
      >>> sorted(int(v) for _, yb in shuffled for v in yb)  # one epoch: each row once
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
      >>> shuffled.state["epoch"], shuffled.state["batch"]
      (0, 3)
    """
    if not arrays:
        raise ValueError("jask.batches needs at least one array")
    if readers not in (None, "threads", "processes"):
        raise ValueError(f"jask.batches: readers must be 'threads' or 'processes', not {readers!r}")
    held_arrays = []
    for i, a in enumerate(arrays):
        if not isinstance(a, DiskArray):
            # (a zarr or h5py array, a dataset's lazy one: np.asarray would read it whole,
            # unbudgeted; a masked array's mask would be dropped)
            if (not isinstance(a, (np.ndarray, np.generic, jax.Array))
                    or isinstance(a, np.ma.MaskedArray)):
                raise TypeError(f"jask.batches: argument {i} is a {type(a).__name__}, not an "
                                "array: a DiskArray, numpy or jax one (open a Zarr store "
                                "with jask.open(path); read anything else whole with "
                                "np.asarray first, if it fits)")
            if isinstance(a, jax.core.Tracer):
                raise TypeError(f"jask.batches: argument {i} is traced (a loader made inside "
                                "a jitted function): make the loader outside it, and pass "
                                "its batches in")
            a = _InMemory(np.asarray(a))
        if not a.shape:
            raise ValueError(f"jask.batches: argument {i} is 0-d: batches are cut along a first "
                             "axis")
        held_arrays.append(a)
    rows = held_arrays[0].shape[0]
    if any(a.shape[0] != rows for a in held_arrays):
        raise ValueError("jask.batches: the arrays' first axes differ: "
                         + ", ".join(str(tuple(a.shape)) for a in held_arrays))
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"jask.batches: batch_size must be a positive int, not {batch_size!r}")
    if (not isinstance(shard, (tuple, list)) or len(shard) != 2
            or not all(isinstance(v, (int, np.integer)) for v in shard)
            or not 0 <= shard[0] < shard[1]):
        raise ValueError(f"jask.batches: shard must be (index, count) with 0 <= index < count, "
                         f"not {shard!r}")
    if epochs is not None and not _count(epochs):
        raise ValueError(f"jask.batches: epochs must be a positive int or None, not {epochs!r}")
    if threads is not None and not _count(threads):
        raise ValueError(f"jask.batches: threads must be a positive int, not {threads!r}")
    if not _count(prefetch):
        raise ValueError(f"jask.batches: prefetch must be a positive int, not {prefetch!r}")
    threads, prefetch = None if threads is None else int(threads), int(prefetch)
    # (the seed a SeedSequence takes: a float was truncated, a negative one refused at the
    # first batch)
    if not _count(seed, least=0):
        raise ValueError(f"jask.batches: seed must be an int >= 0, not {seed!r}")
    for name, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
        # (a string from a config file, "False", is true)
        if not isinstance(flag, (bool, np.bool_)) and not (_count(flag, least=0) and flag <= 1):
            raise ValueError(f"jask.batches: {name} must be True or False, not {flag!r}")
    batch_size = int(batch_size)
    if buffer is not None and not _count(buffer):
        raise ValueError(f"jask.batches: buffer must be a positive number of rows, not "
                         f"{buffer!r}")
    lead = max(held_arrays, key=_row_bytes)
    chunk_rows = lead.chunks[0] if isinstance(lead, DiskArray) else max(1, rows)
    # short runs where reading them costs their bytes; else whole chunks (a run of a
    # compressed chunk would cost the whole chunk's read and decode)
    runs = shuffle and all(reads_runs(a._store()) for a in held_arrays
                           if isinstance(a, DiskArray))

    def plan_for(rows_mixed: int) -> BatchPlan:
        unit = max(1, min(chunk_rows, rows_mixed, rows))
        if runs:
            unit = _run_rows(chunk_rows, max(1, rows_mixed * RUNS_PER_BATCH // batch_size),
                             unit)
        # whole chunks, never more rows than asked (in order too: a window's units are read
        # at once)
        window = min(max(1, rows_mixed // unit), max(1, -(-rows // unit)))
        return BatchPlan(rows=rows, unit=unit, window=window, batch_size=batch_size,
                         shuffle=bool(shuffle), seed=int(seed), drop_last=bool(drop_last),
                         shard=(int(shard[0]), int(shard[1])))

    chip = _feed_target(device)
    if readers is None:
        readers = "processes" if _on_accelerator(device) else "threads"
    # (where no child reads, compressed stores, the loader's threads decode: 8 of them)
    if threads is None and readers == "processes" and _child_reads(held_arrays):
        default_threads = CHILD_THREADS
    else:
        default_threads = DEFAULT_THREADS
    _free_idle_loaders()  # loaders left open do not shrink this one's budget
    def fit(plan: BatchPlan) -> tuple[int, int, int, int]:
        """_fit's figures and the host slots: a device feed's third where it
        fits, else two, before any smaller buffer (so that the plan, and the
        order, are those of numpy batches wherever two fit)."""
        counts = list(dict.fromkeys((DEVICE_SLOTS, SLOTS))) if chip is not None else [SLOTS]
        for slots in counts[:-1]:
            try:
                return _fit(held_arrays, plan, threads, prefetch, chip, default_threads,
                            slots) + (slots,)
            except BudgetError:
                pass
        return _fit(held_arrays, plan, threads, prefetch, chip, default_threads,
                    counts[-1]) + (counts[-1],)

    if buffer is not None:
        plan = plan_for(int(buffer))
        fitted_threads, held, on_device, slots = fit(plan)
    else:  # the default halves until it fits (then the order depends on the budget)
        wanted = DEFAULT_BUFFER_BATCHES * batch_size
        if runs and isinstance(lead, DiskArray):  # runs of RUN_BYTES, within a chunk
            row_bytes = max(1, _row_bytes(lead))
            run = min(chunk_rows, -(-RUN_BYTES // row_bytes))
            wanted = max(wanted, min(run * max(1, batch_size // RUNS_PER_BATCH),
                                     RUN_WINDOW_BYTES // row_bytes))
        while True:
            plan = plan_for(wanted)
            try:
                fitted_threads, held, on_device, slots = fit(plan)
                break
            except BudgetError:
                if wanted <= batch_size:
                    raise
                wanted = max(batch_size, wanted // 2)
    threads = fitted_threads
    _check_sharding(device, held_arrays, plan)
    loader = Batches(tuple(held_arrays), plan, None if epochs is None else int(epochs), threads,
                     prefetch, device, held, on_device, _resident(held_arrays, plan), readers,
                     slots)
    if state is not None:
        loader.restore(state)
    return loader


def _whole(v) -> int:
    """A state's entry as an int: an int, or a 0-d integer array (numpy's, jax's: a
    checkpoint's); else TypeError (a float would be truncated, a string parsed)."""
    kind = np.asarray(v).dtype.kind if hasattr(v, "dtype") else None
    if not (isinstance(v, int) and not isinstance(v, bool)) and kind not in ("i", "u"):
        raise TypeError(f"not an int: {v!r}")
    return int(v)


def _count(v, least: int = 1) -> bool:
    """Whether ``v`` is an int (Python's or numpy's, not a bool) of at least ``least``."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and bool(v >= least)


def _child_reads(arrays) -> bool:
    """Whether a reading child (``readers="processes"``) reads some of
    ``arrays``: local uncompressed stores, whose runs it reads."""
    return any(isinstance(a, DiskArray) and reads_runs(a._store()) for a in arrays)


def _run_rows(chunk_rows: int, target: int, most: int) -> int:
    """The rows of a shuffle's run: the largest divisor of ``chunk_rows`` at
    most ``target`` (runs never straddle chunks), and at most ``most``.

    Example:
      >>> _run_rows(8192, 128, 8192), _run_rows(100, 128, 100), _run_rows(1000, 300, 40)
      (128, 100, 40)
    """
    if target >= chunk_rows:
        return min(chunk_rows, most)
    best = 1
    for d in range(1, math.isqrt(chunk_rows) + 1):
        if chunk_rows % d == 0:
            for k in (d, chunk_rows // d):
                if k <= target and k > best:
                    best = k
    return min(best, most)


def _resident(arrays, plan: BatchPlan) -> tuple:
    """Which arrays a loader reads whole at each epoch's start: where its
    units are shorter than a chunk of the widest array (shuffled runs), the
    other stores whose whole bytes are at most what one window of all the
    arrays holds (labels beside features: a read per run of a narrow array
    costs its system calls, not its bytes)."""
    lead = max(arrays, key=_row_bytes)
    chunk_rows = lead.chunks[0] if isinstance(lead, DiskArray) else max(1, lead.shape[0])
    if plan.unit >= chunk_rows:
        return (False,) * len(arrays)
    window = plan.unit * plan.window * sum(_row_bytes(a) for a in arrays)
    return tuple(isinstance(a, DiskArray) and a is not lead
                 and a.shape[0] * _row_bytes(a) <= window for a in arrays)


def _row_bytes(a) -> int:
    return math.prod(a.shape[1:]) * np.dtype(a.dtype).itemsize


def _feed_target(device):
    """The device or Sharding a device feed copies whole windows to, or None
    (each batch is then cut on the host and put there): no ``device``, a
    device on one of :data:`HOST_CUT_PLATFORMS`, or a Sharding over several
    devices that is not a ``NamedSharding`` (a window is put with the batches'
    own sharding, which only a mesh and a spec say for any number of rows)
    or one that does not split the rows (replicated)."""
    if device is None:
        return None
    if isinstance(device, jax.sharding.Sharding):
        devices = device.device_set
        if len(devices) != 1 and not isinstance(device, jax.sharding.NamedSharding):
            return None
        if len(devices) != 1 and _row_split(device) == 1:
            # rows not split: each device would hold whole windows, and on four CPU
            # devices it held ~9% more than device_bytes states; cut on the host
            return None
        one = next(iter(devices))
    elif isinstance(device, jax.Device):
        one = device
    else:
        raise TypeError(f"jask.batches: device must be a jax.Device or a jax.sharding.Sharding, "
                        f"not {type(device).__name__}")
    return None if one.platform in HOST_CUT_PLATFORMS else device


def _on_accelerator(device) -> bool:
    """Whether ``device`` (a Device, a Sharding or None) is off the CPU: where
    the loader's reads are better in a child process (see :func:`batches`)."""
    if device is None:
        return False
    devices = device.device_set if isinstance(device, jax.sharding.Sharding) else [device]
    return any(d.platform not in THREAD_READER_PLATFORMS for d in devices)


def _row_split(device) -> int:
    """Into how many parts ``device`` (a Device or Sharding) splits a batch's
    rows: the product of the mesh axes a ``NamedSharding``'s spec names for
    the first axis (1 for a device, or rows not split)."""
    if not isinstance(device, jax.sharding.NamedSharding) or not device.spec:
        return 1
    axes = device.spec[0]
    if axes is None:
        return 1
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    return math.prod(device.mesh.shape[a] for a in axes)


def _check_sharding(device, arrays: list, plan: "BatchPlan") -> None:
    """Refuse, before anything is read, a Sharding that cannot hold every
    batch the loader gives: one that does not fit an array's batch (a spec
    naming more axes than it has, or an axis it does not divide), or rows
    split into parts that do not divide ``batch_size`` or an epoch's short
    last batch."""
    if not isinstance(device, jax.sharding.Sharding):
        return
    B = plan.batch_size
    for i, a in enumerate(arrays):
        shape = (B,) + tuple(a.shape[1:])
        if isinstance(device, jax.sharding.NamedSharding) and len(device.spec) > len(shape):
            raise ValueError(f"jask.batches: device={device} names {len(device.spec)} axes, but "
                             f"a batch of argument {i} has {len(shape)}: {shape}")
        try:
            device.shard_shape(shape)
        except Exception as err:  # noqa: BLE001 - IndexError, IndivisibleError, ValueError
            raise ValueError(f"jask.batches: device={device} cannot place a batch of argument "
                             f"{i}, of shape {shape}: {err}") from err
    split = _row_split(device)
    if split == 1 or plan.drop_last:
        return
    # a shard's rows an epoch: its units' count is fixed, whether the array's short last
    # unit is among them depends on the epoch when shuffled
    index, count = plan.shard
    units = (len(range(index, plan.n_units, count)) if plan.shuffle
             else len(np.array_split(np.arange(plan.n_units), count)[index]))
    short = plan.n_units * plan.unit - plan.rows
    lasts = {(units * plan.unit - s) % B for s in (0, short) if units} - {0}
    if any(last % split for last in lasts):
        raise ValueError(f"jask.batches: device={device} splits a batch's rows in {split} "
                         f"parts, but an epoch's short last batch has {sorted(lasts)} rows; "
                         "pass drop_last=True or a batch_size that divides the rows")


def _platform(device) -> str:
    one = next(iter(device.device_set)) if isinstance(device, jax.sharding.Sharding) else device
    return one.platform


def _devices(device) -> int:
    return len(device.device_set) if isinstance(device, jax.sharding.Sharding) else 1


def _slot_rows(plan: "BatchPlan", device) -> int:
    """The rows of a window's host slot: a window's, rounded up to a whole
    number of rows per device where ``device`` splits the rows (every piece put
    then splits evenly; the rows past the window's are never gathered)."""
    split = _row_split(device)
    return -(-plan.unit * plan.window // split) * split


def _device_memory(device) -> tuple[int | None, str]:
    """The memory of ``device`` (None where it does not say) and its platform."""
    one = next(iter(device.device_set)) if isinstance(device, jax.sharding.Sharding) else device
    try:
        stats = one.memory_stats() or {}
    except Exception:  # noqa: BLE001 - backends without memory statistics
        stats = {}
    return stats.get("bytes_limit"), one.platform


def _order_bytes(plan: BatchPlan, device=None, slots: int = SLOTS) -> int:
    """The host bytes of the windows' orders (positions in a window): a host
    feed's, one window's drawn into an int64 buffer (:meth:`BatchPlan.window_order_into`
    draws it through a range of its dtype); a device feed's (``device`` given),
    an int32 one padded by a batch per slot and one more for the next
    epoch's first window (read ahead, held between iterations), and the
    draws of the slots' orders, which may run at once on the reading pool."""
    if device is None:
        return 2 * 8 * plan.unit * plan.window
    slot_rows = _slot_rows(plan, device)
    return 4 * ((slots + 1) * (slot_rows + plan.batch_size) + slots * slot_rows)


def _fit(arrays: list, plan: BatchPlan, threads: int | None, prefetch: int,
         device=None, default_threads: int = DEFAULT_THREADS,
         slots: int = SLOTS) -> tuple[int, int, int]:
    """The reading threads (``threads``, else at most ``default_threads``), the
    bytes the loader holds on the host and those it holds on ``device`` (a
    device feed; else 0).

    On the host: its ``slots`` windows and their orders (:func:`_order_bytes`), a
    batch being cut and those ahead (each also as the copy made on the device),
    and per thread a unit being read (with what its read holds besides, as
    :func:`jask.base.memory.read_cost` counts it, and a chunk's runs' row index);
    fewer threads before a refusal. On the device: :data:`DEVICE_WINDOWS`
    windows with their orders and the batches ahead, within
    :data:`DEVICE_SHARE` of its memory (and in the host's budget where the
    device is the CPU); on each device of a ``NamedSharding``, its share of
    those and a whole window, the gather's operand."""
    budget = _config.get_config().max_memory
    share = int(budget * LOADER_SHARE)
    row = sum(_row_bytes(a) for a in arrays)
    window_rows = plan.unit * plan.window
    fixed = slots * window_rows * row + (2 * prefetch + 2) * plan.batch_size * row
    fixed += _order_bytes(plan, device, slots)
    fixed += sum(a.shape[0] * _row_bytes(a) for a, whole
                 in zip(arrays, _resident(arrays, plan)) if whole)
    on_device = 0
    if device is not None:
        # per device, where a Sharding splits the rows: its share of each window and
        # batch (and the window's order, whole on each)
        split = _row_split(device)
        slot_rows = _slot_rows(plan, device)
        window = slot_rows // split * row + (slot_rows + plan.batch_size) * 4
        # a batch crossing into the next window, its merge, the one the step holds
        batches = 3
        on_device = DEVICE_WINDOWS * window + batches * plan.batch_size // split * row
        if split > 1:  # the gather's operand: the window gathered whole on each device
            on_device += slot_rows * row
        memory_limit, platform = _device_memory(device)
        if memory_limit is not None and on_device > memory_limit * DEVICE_SHARE:
            raise BudgetError(
                f"jask.batches: its windows on the device need {exact_bytes(on_device)}, over "
                f"{DEVICE_SHARE:.0%} of the device's {exact_bytes(memory_limit)}: "
                f"{DEVICE_WINDOWS} windows of {window_rows} rows of {exact_bytes(row)} and "
                f"{prefetch} batches ahead; pass a smaller buffer= (rows) or batch_size=")
        if platform == "cpu":  # the CPU devices' memory is the host's
            fixed += on_device * _devices(device)
    per_thread = 0
    for a in arrays:
        if isinstance(a, DiskArray):
            tile = (plan.unit,) + tuple(a.shape[1:])
            model = read_model(a._store())
            extra, _ = memory.read_cost(model, tile)
            # chunk files are read straight into the window; through Zarr a tile is made
            made = 0 if model.raw or model.direct else plan.unit * _row_bytes(a)
            if reads_runs(a._store()):  # a chunk's runs copied from its mapping: their
                # rows' index (rows_of_runs: three int64 arrays of them at once)
                made += 3 * 8 * min(a.chunks[0], window_rows)
            per_thread = max(per_thread, extra + made)
    per_thread += THREAD_BYTES
    wanted = threads or default_threads
    for n in range(wanted, 0, -1):
        need = fixed + n * per_thread
        if need <= share or threads is not None:
            break
    if need > share:
        raise BudgetError(
            f"jask.batches: its buffers need {exact_bytes(need)}, over half the memory budget "
            f"({exact_bytes(share)}): {slots} shuffle windows of {window_rows} rows of "
            f"{exact_bytes(row)} with their orders and {prefetch} batches ahead "
            f"({exact_bytes(fixed)}), and "
            f"{n} reading thread(s) holding {exact_bytes(per_thread)} each (a chunk decoded "
            "whole where it is compressed); pass a smaller buffer= (rows) or batch_size=, "
            "fewer threads=, or raise the budget with jask.set_memory_budget")
    return n, need, on_device
