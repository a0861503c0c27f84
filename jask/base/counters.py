"""Bytes read and written by jask's ops: how many passes a step makes.

Every tile jask reads or writes goes through :mod:`jask.store.tiles` (and
``save``'s compressed writer), which calls :func:`read`, :func:`wrote`,
:func:`stored_read` or :func:`stored_written` here; :func:`label`, called
once per graph by :mod:`jask.engine.execute`, makes each task of the graph
run under the op it belongs to (the ``jask-<op>`` of its key), so the
counts are kept per op and per store. Users see them through
:func:`jask.stats` (everything since the process started or
:func:`jask.reset_stats`) and :func:`jask.track` (one block of code), in
:mod:`jask.api.stats`::

    with jask.track() as t:
        w = step(w)
    t.passes(X)      # bytes read from X's store / X.nbytes

Two sizes are counted: *array* bytes (``bytes_read``/``bytes_written``:
the tiles' elements, what the op asked for) and *stored* bytes
(``stored_read``/``stored_written``: the bytes of chunk files jask read or
wrote, compressed where the store is; through Zarr's own pipeline, used for
stores jask cannot read itself, they are taken equal to the array bytes).
Reads through ``to_numpy``/``to_memmap``/``to_dask`` (Zarr and Dask
reading the store) and ``from_dask`` (Zarr writing it) are not jask's
tiles and are not counted.

Cost: one uncontended lock and a few dict updates per tile (microseconds;
on data larger than the budget a tile is a MiB or more), one wrapper call
per task. Counters are process-wide (every
thread, every compiled call). With a ``dask.distributed`` client whose
workers are other processes, the workers count their tiles and
:mod:`jask.engine.execute` collects their counts (:func:`collect`) when each
graph finishes, so the client process sees them as if it had run the tasks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import threading
from typing import Iterator

from dask.utils import key_split

from jask.base import forks
from jask.base.sizes import format_bytes
from jask.base.urls import is_local_path

__all__ = ["Counts", "Stats", "BlockStats", "snapshot", "clear"]

# the fields of one entry: array and stored bytes and tiles, each read / written
_FIELDS = ("bytes_read", "bytes_written", "stored_read", "stored_written",
           "tiles_read", "tiles_written", "requests", "retries")
_READ, _WRITTEN, _SREAD, _SWRITTEN, _TREAD, _TWRITTEN, _REQUESTS, _RETRIES = range(8)
#: Where entries for stores that no longer exist are folded once a table has
#: more than ``_FOLD_AT`` entries (a long training loop makes a scratch store
#: per op and step; their counts stay in the totals and by op).
REMOVED = "(removed stores)"
_FOLD_AT = 4096
#: I/O outside any graph task with no op named around it.
UNLABELLED = "other"



class _Local(threading.local):
    op: str | None = None  # a class default: no AttributeError raised per tile
    group: str | None = None  # what the graphs this thread starts compute (ran_as)


_lock = forks.lock()
_local = _Local()


class _Table:
    """Counts keyed by (op, store), and graphs and tasks per op."""

    def __init__(self):
        self.io: dict[tuple, list] = {}
        self.graphs: dict[str, list] = {}
        self.fold_at = _FOLD_AT

    def add(self, key: tuple, field: int, n: int, tiles: int) -> None:
        entry = self.io.get(key)
        if entry is None:
            entry = self.io[key] = [0] * len(_FIELDS)
            if len(self.io) > self.fold_at:
                self._fold()
        entry[field] += n
        if field < 2:  # array bytes: one more tile
            entry[field + 4] += tiles

    def merge(self, io: dict, graphs: dict) -> None:
        for key, values in io.items():
            entry = self.io.setdefault(key, [0] * len(_FIELDS))
            for i, v in enumerate(values):
                entry[i] += v
        for op, values in graphs.items():
            entry = self.graphs.setdefault(op, [0, 0])
            entry[0] += values[0]
            entry[1] += values[1]

    def _fold(self) -> None:
        """Fold the entries of stores that are gone into one per op."""
        for (op, path) in [k for k in self.io if k[1] != REMOVED]:
            if is_local_path(path) and not os.path.exists(path):  # (object storage: kept)
                values = self.io.pop((op, path))
                entry = self.io.setdefault((op, REMOVED), [0] * len(_FIELDS))
                for i, v in enumerate(values):
                    entry[i] += v
        self.fold_at = max(_FOLD_AT, 2 * len(self.io))

    def copy(self) -> tuple[dict, dict]:
        return ({k: tuple(v) for k, v in self.io.items()},
                {k: tuple(v) for k, v in self.graphs.items()})


_total = _Table()
_tracks: list["BlockStats"] = []  # the open track() blocks


# --- hooks for the modules that do I/O ------------------------------------------------

_STAGING = re.compile(r"^(.*)/\.(.+)\.(?:jask-update|jask-save)-[0-9a-f]+$")


@functools.lru_cache(maxsize=4096)
def _store_key(path: str) -> str:
    """The store a path counts for: an ``update_`` or ``save`` staging folder
    counts for the store it becomes (:mod:`jask.store.kinds.local.durability`,
    :mod:`jask.store.kinds.local.saves`). A URL (object storage) is its own key."""
    if not is_local_path(path):
        return path
    path = os.path.abspath(path)
    staged = _STAGING.match(path)
    return os.path.join(staged.group(1), staged.group(2)) if staged else path


def current_op() -> str:
    """The op the I/O of this thread counts for."""
    return _local.op or UNLABELLED


def _add(path: str, field: int, n: int, tiles: int = 1) -> None:
    key = (current_op(), _store_key(path))
    with _lock:
        _total.add(key, field, n, tiles)
        for t in _tracks:
            t._table.add(key, field, n, tiles)


def region_bytes(store, region: tuple) -> int:
    """Array bytes of ``region`` of ``store``."""
    n = store.dtype.itemsize
    for s in region:
        n *= s.stop - s.start
    return n


def read(store, region: tuple) -> None:
    """Count one tile of ``store`` read (its array bytes)."""
    _add(store.path, _READ, region_bytes(store, region))


def wrote(store, region: tuple, stored: int | None = None) -> None:
    """Count one tile of ``store`` written; ``stored``: its encoded bytes, when
    the caller wrote the files itself."""
    _add(store.path, _WRITTEN, region_bytes(store, region))
    if stored is not None:
        _add(store.path, _SWRITTEN, stored, 0)


def stored_read(path: str, n: int) -> None:
    """Count ``n`` bytes read from the chunk files of the store at ``path``."""
    _add(path, _SREAD, n, 0)


def stored_written(path: str, n: int) -> None:
    """Count ``n`` bytes written to the chunk files of the store at ``path``."""
    _add(path, _SWRITTEN, n, 0)


def requested(path: str, n: int = 1) -> None:
    """Count ``n`` requests to object storage for the store at ``path`` (a URL)."""
    _add(path, _REQUESTS, n, 0)


def retried(path: str) -> None:
    """Count one retry of a request to object storage that failed transiently."""
    _add(path, _RETRIES, 1, 0)


def device_peak(n: int) -> None:
    """A device stream held ``n`` bytes on its device at its peak (called by
    :mod:`jask.core.device` as each stream ends): the most of the open
    ``track`` blocks' :attr:`Track.peak_device_bytes`."""
    with _lock:
        for t in _tracks:
            t.peak_device_bytes = max(t.peak_device_bytes, int(n))


@contextlib.contextmanager
def op(name: str) -> Iterator[None]:
    """Count this thread's I/O inside the block for op ``name`` (work done
    outside a graph, such as ``materialize``'s read)."""
    previous = _local.op
    _local.op = name
    try:
        yield
    finally:
        _local.op = previous


@contextlib.contextmanager
def ran_as(what: str) -> Iterator[None]:
    """Graphs this thread runs inside the block compute ``what`` (the ops of
    a band group, a deferred op): open ``track`` blocks list them so in
    :attr:`Track.ran`."""
    previous = _local.group
    _local.group = what
    try:
        yield
    finally:
        _local.group = previous


class _InOp:
    """A graph task's function, run with its thread's I/O counted for ``op``."""

    __slots__ = ("op", "func")

    def __init__(self, op: str, func):
        self.op, self.func = op, func

    def __call__(self, *args, **kwargs):
        previous = _local.op
        _local.op = self.op
        try:
            return self.func(*args, **kwargs)
        finally:
            _local.op = previous

    def __reduce__(self):
        return (_InOp, (self.op, self.func))


_STAGES = ("-result", "-combine", "-partial", "-write", "-collect")


def op_of(key) -> str | None:
    """The op a jask task key belongs to (as named in ``key_name``), or None.

    Example:
      >>> from jask.engine.builders import key_name
      >>> op_of((key_name("square_vjp", "t"), 0)), op_of((key_name("sum", "t", stage="combine"),))
      ('square_vjp', 'sum')
      >>> op_of(("store-map-abc", 0)) is None
      True
    """
    name = key_split(key)
    if not name.startswith("jask-"):
        return None
    for stage in _STAGES:
        if name.endswith(stage):
            name = name[:-len(stage)]
            break
    return name[5:].replace("-", "_")


def label(graph: dict) -> dict:
    """``graph`` with each task run under its op, counted as one graph.

    Tasks that are not ``(function, *args)`` tuples of a jask key are left
    as they are (their I/O counts for the thread's op, or ``"other"``).
    """
    ops: dict[str, str | None] = {}
    labelled, first = {}, None
    for key, task in graph.items():
        name = key[0] if isinstance(key, tuple) else key
        if name not in ops:
            ops[name] = op_of(key)
        name = ops[name]
        first = first or name
        if name is not None and type(task) is tuple and task and callable(task[0]):
            task = (_InOp(name, task[0]),) + task[1:]
        labelled[key] = task
    graph_op = first or current_op()
    ran = graph_op if _local.group is None else f"{graph_op} ({_local.group})"
    with _lock:
        for table in [_total] + [t._table for t in _tracks]:
            table.merge({}, {graph_op: (1, len(graph))})
        for t in _tracks:
            t.ran.append(ran)
    return labelled


# --- distributed workers --------------------------------------------------------------

def drain(client_pid: int):
    """In a worker: hand over and clear what it counted (None when the
    worker is the client's own process, whose counters already have it)."""
    if os.getpid() == client_pid:
        return None
    with _lock:
        io, graphs = _total.copy()
        _total.io.clear()
        _total.graphs.clear()
    return io, graphs


def merge_drained(results) -> None:
    """Add what the workers handed over (:func:`drain`'s results, one per
    worker, as ``client.run`` returns them) to this process's counts."""
    with _lock:
        for found in results.values():
            if found:
                for table in [_total] + [t._table for t in _tracks]:
                    table.merge(*found)


# --- what users see -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Counts:
    """Bytes and tiles one op (or one store, or everything) read and wrote.

    ``bytes_*`` count array bytes (elements times itemsize), ``stored_*`` the
    bytes of chunk files (compressed where the store is). ``graphs`` and
    ``tasks`` are zero in a count per store.

    Example:
      >>> both = Counts(bytes_read=8, tiles_read=1) + Counts(bytes_read=4, tiles_read=1)
      >>> both.bytes_read, both.tiles_read, both.bytes_written
      (12, 2, 0)
    """

    bytes_read: int = 0
    bytes_written: int = 0
    stored_read: int = 0
    stored_written: int = 0
    tiles_read: int = 0
    tiles_written: int = 0
    requests: int = 0  # to object storage (GET, PUT, HEAD, LIST, DELETE)
    retries: int = 0   # of those that failed transiently (jask.store.kinds.objects.remote)
    graphs: int = 0
    tasks: int = 0

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(*(a + b for a, b in zip(dataclasses.astuple(self),
                                              dataclasses.astuple(other))))


def _size(n: float) -> str:
    return format_bytes(n)  # as every size jask shows (jask.base.sizes)


class Stats:
    """What jask read and wrote: totals, per op and per store.

    Made by :func:`stats` (a snapshot) and :func:`track` (one block).
    Attributes ``bytes_read``, ``bytes_written``, ``stored_read``,
    ``stored_written``, ``tiles_read``, ``tiles_written``, ``graphs`` and
    ``tasks`` are the totals (see :class:`Counts`); ``by_op``, ``by_store``
    (absolute paths) and :meth:`store` break them down.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.ones((10, 10), np.float32))
      >>> with jask.track() as t:
      ...     y = (x + x).block_until_ready()  # computed now: eager ops are lazy
      >>> t.passes(x), t.store(y).bytes_written, t.by_op["add"].graphs
      (2.0, 400, 1)
    """

    def __init__(self, io: dict | None = None, graphs: dict | None = None):
        self._io = io or {}
        self._graph_counts = graphs or {}

    def _tables(self) -> tuple[dict, dict]:
        return self._io, self._graph_counts

    @property
    def by_op(self) -> dict[str, Counts]:
        """:class:`Counts` per op (``"dot"``, ``"square_vjp"``, ...), largest first."""
        io, graphs = self._tables()
        out: dict[str, list] = {}
        for (op, _), values in io.items():
            entry = out.setdefault(op, [0] * 10)
            for i, v in enumerate(values):
                entry[i] += v
        for op, (g, t) in graphs.items():
            entry = out.setdefault(op, [0] * 10)
            entry[8] += g
            entry[9] += t
        return _largest_first({op: Counts(*v) for op, v in out.items()})

    @property
    def by_store(self) -> dict[str, Counts]:
        """:class:`Counts` per store path, largest first."""
        out: dict[str, list] = {}
        for (_, path), values in self._tables()[0].items():
            entry = out.setdefault(path, [0] * len(_FIELDS))
            for i, v in enumerate(values):
                entry[i] += v
        return _largest_first({p: Counts(*v) for p, v in out.items()})

    @property
    def total(self) -> Counts:
        """Everything, as one :class:`Counts`."""
        return sum(self.by_op.values(), Counts())

    def __getattr__(self, name: str):
        if name in Counts.__dataclass_fields__:
            return getattr(self.total, name)
        raise AttributeError(name)

    def store(self, x) -> Counts:
        """:class:`Counts` of one store: a DiskArray's, or the store at a path.

        Writes by ``update_`` into a store count for that store.
        """
        key = _store_key(os.fspath(x) if isinstance(x, (str, os.PathLike)) else x.filename)
        values = [0] * len(_FIELDS)
        for (_, path), v in self._tables()[0].items():
            if path == key:
                values = [a + b for a, b in zip(values, v)]
        return Counts(*values)

    def passes(self, x) -> float:
        """How many times ``x``'s data was read: array bytes read from its
        store divided by ``x.nbytes``.

        Args:
          x: a DiskArray (or any object with ``filename`` and ``nbytes``).
        """
        return self.store(x).bytes_read / max(1, int(x.nbytes))

    def __repr__(self) -> str:
        total = self.total
        lines = [f"jask I/O: read {_size(total.bytes_read)} ({_size(total.stored_read)} "
                 f"stored), wrote {_size(total.bytes_written)} ({_size(total.stored_written)} "
                 f"stored), {total.graphs} graphs, {total.tasks} tasks"]
        rows = [(op, c) for op, c in self.by_op.items()]
        if rows:
            lines.append(f"  {'op':<20}{'read':>10}{'written':>10}{'graphs':>8}{'tasks':>8}")
            lines += [f"  {op:<20}{_size(c.bytes_read):>10}{_size(c.bytes_written):>10}"
                      f"{c.graphs:>8}{c.tasks:>8}" for op, c in rows]
        stores = list(self.by_store.items())
        if stores:
            lines.append(f"  {'store':<40}{'read':>10}{'written':>10}")
            lines += [f"  {_short(p):<40}{_size(c.bytes_read):>10}{_size(c.bytes_written):>10}"
                      for p, c in stores[:10]]
            if len(stores) > 10:
                lines.append(f"  ... and {len(stores) - 10} more stores")
        return "\n".join(lines)


def _largest_first(counts: dict) -> dict:
    return dict(sorted(counts.items(),
                       key=lambda kv: -(kv[1].bytes_read + kv[1].bytes_written)))


def _short(path: str, width: int = 40) -> str:
    return path if len(path) <= width else "..." + path[-(width - 3):]


class BlockStats(Stats):
    """The counts of one ``with`` block (see :func:`track`); while the block
    runs they are what has been counted so far.

    ``ran`` lists the graphs run in the block, in order, by op: a band group
    as ``"fused_sum (subtract, divide, multiply, sum)"``, an eager op
    computed when its result was first needed as ``"add (deferred)"``.

    ``peak_device_bytes`` is the most bytes a stream to an accelerator
    (:func:`jask.set_device`) held on its device in the block, beyond what
    was there when the stream began: what the device reports in use
    (``memory_stats()``) where it reports it, else the arrays alive on it;
    within the device share. 0 when nothing ran on a device."""

    def __init__(self):
        super().__init__()
        self._table = _Table()
        self.ran: list[str] = []
        self.peak_device_bytes = 0

    def _tables(self) -> tuple[dict, dict]:
        with _lock:
            return self._table.copy()

    def __repr__(self) -> str:
        ran = self.ran[-20:]
        more = f"{len(self.ran) - len(ran)} earlier, then " if len(self.ran) > len(ran) else ""
        device = (f"\n  device: peak {_size(self.peak_device_bytes)}"
                  if self.peak_device_bytes else "")
        return (super().__repr__() + device
                + (f"\n  ran: {more}" + "; ".join(ran) if ran else ""))

    def __enter__(self) -> "BlockStats":
        with _lock:
            _tracks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            _tracks.remove(self)


def snapshot() -> Stats:
    """The counts of this process so far (``jask.stats`` waits for running
    programs first)."""
    with _lock:
        return Stats(*_total.copy())


def clear() -> None:
    """Set the process's counts back to zero; open ``track`` blocks keep theirs."""
    with _lock:
        _total.io.clear()
        _total.graphs.clear()
        _total.fold_at = _FOLD_AT


def since(start: tuple[int, int]) -> tuple[int, int]:
    """Array bytes (read, written) counted since ``start`` (from :func:`totals`)."""
    read, written = totals()
    return read - start[0], written - start[1]


def totals() -> tuple[int, int]:
    """Array bytes (read, written) counted so far in this process."""
    with _lock:
        return (sum(v[_READ] for v in _total.io.values()),
                sum(v[_WRITTEN] for v in _total.io.values()))


def describe(read: int, written: int) -> str:
    """A short text of bytes read and written, for a progress bar.

    Example:
      >>> describe(2_500_000, 0)
      'read 2.38 MiB, wrote 0 B'
    """
    return f"read {_size(read)}, wrote {_size(written)}"
