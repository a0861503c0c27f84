"""Statistics asked for together are computed together.

``mu, sd = X.mean(0), X.std(0)`` asks for two reductions of the same data,
one after the other, and each eager reduction to memory returns a value at
once: nothing can wait for the second. So an eager mean or variance (or
standard deviation) of an array's own values takes its partials as
(count, mean, M2, total) in float64 (:func:`jask.engine.ops.reductions.with_moments`:
Chan et al.'s moments and the sum a mean is made from, one pass), and they
are kept here: the next mean, variance, standard deviation (any ``ddof``) or
float sum of the same data over the same axes is finished from them without
reading the data again, and so is a sum or mean of ``square(x - m)`` with ``m``
that mean as it was returned (:func:`centred`: the centred moment written
out). The value is the one its own reduction would give (a mean from the
same float64 total, a variance from the same moments).

What "the same data" is:

* a store (or a view of one): its path, handle and view, with the store's
  version (:func:`jask.store.versions.identity`: the folder's and metadata's inode
  and change time, and jask's version token) as it was when the moments
  were taken. jask's own writes into a store (``update_``, in-place
  optimizer steps, ``to_memmap`` writes, a save over it) drop what is kept
  of it first (:func:`jask.store.registry.on_mutation`), and a store
  replaced by anyone else has another version. Unlike a single op's read,
  kept moments outlive their call, so a chunk file rewritten in place by
  another tool (zarr's own writes do that) must be seen too: the version
  kept of a user's store includes every file's inode, size and change time
  under its folder (:func:`_files`, one directory walk, far cheaper than a
  read; jask's own scratch stores change only through jask);
  ``lazy=False`` keeps nothing.
* a pending result (:class:`jask.engine.lazy.Recorded`): the record itself,
  whose values are fixed at its call.

Only eager ops keep moments (a compiled program reads its inputs afresh at
every call; inside one, :func:`jask.core.rewrite.prune_before_lowering`
puts reductions of the same data in one band group instead). At most
:data:`KEPT` entries are kept, and at most :data:`KEPT_SHARE` of the memory
budget, the oldest dropped first.
"""
from __future__ import annotations

import dataclasses
import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from jask.base import forks
from jask.engine.blockwise import unchanged
from jask.engine.ops.reductions import REDUCERS, stat_of, with_moments
from jask.store import location_of, registry
from jask.store.spec import StoreSpec
from jask.store.versions import identity, resolved
from jask.store.views import base_of
from jask.store.views import key as view_key

__all__ = ["KEPT", "KEPT_SHARE", "Statistic", "centred", "clear", "kept", "recall",
           "remember", "statistic"]

#: Most entries kept at once.
KEPT = 16
#: Most bytes of the memory budget the kept partials take (each holds three
#: float64 arrays of the result's shape).
KEPT_SHARE = 1 / 16


@dataclass(frozen=True)
class Statistic:
    """A mean, variance or sum of one source's own values over some axes:
    where its partials are kept (``key``) and how it is finished."""

    key: tuple
    reducer: str          # the op's own reducer (a mean's, a variance's, a sum's)
    path: str | None      # the store's resolved base path (None: a pending result)
    version: Any          # the store's version when the op was called
    source: Any           # the store, or the pending result (weakly held)
    budget: int


@dataclass
class _Entry:
    partial: tuple
    path: str | None
    version: Any
    ref: Any               # a weak reference to a pending source, else None
    nbytes: int


_lock = forks.lock()
_kept: "OrderedDict[tuple, _Entry]" = OrderedDict()


def statistic(desc, inputs: list, budget: int) -> Statistic | None:
    """The :class:`Statistic` an eager op computes, or None when it is none:
    a reduction (``desc``, a :class:`jask.engine.lazy.Description`) by a
    mean, variance or float sum of one floating array's values as they are
    (widened exactly, never rounded), in memory."""
    p = desc.params
    if desc.kind != "map" or p.get("kernel") is not unchanged or len(inputs) != 1:
        return None
    reducer = p.get("reducer")
    if reducer is None or with_moments(reducer) is None:
        return None
    if reducer.startswith("moments:"):
        reducer = reducer[len("moments:"):]
    (source,) = inputs
    dtype = np.dtype(source.dtype)
    compute = p["dtypes"][0]
    if dtype.kind != "f" or (compute is not None and (
            np.dtype(compute).kind != "f" or np.dtype(compute).itemsize < dtype.itemsize)):
        return None  # only exact widenings: the moments are the source's own values'
    full, axes = tuple(p["full_shape"]), tuple(p["axes"][0])
    if axes != tuple(range(len(full))) or tuple(source.shape) != full:
        return None
    kept = {a for a in p["out_axes"] if a is not None}
    reduced = tuple(d for d in range(len(full)) if d not in kept)
    layout = (full, reduced, dtype.str)
    if isinstance(source, StoreSpec):
        base = base_of(source)
        if not location_of(base).is_local or not base.handle:
            return None  # (not a local folder: no stat gives its version)
        path = resolved(base.path)
        return Statistic(("store", path, base.handle, view_key(source)) + layout, reducer,
                         path, _version(path, walk=not base.managed), source, budget)
    if not isinstance(source, registry.Deferred):
        return None
    return Statistic(("pending", id(source)) + layout, reducer, None, None, source, budget)


def centred(desc, inputs: list, budget: int) -> np.ndarray | None:
    """An eager sum or mean of ``square(x - m)`` over some axes (``desc``,
    its pending operand in ``inputs``), ``m`` the mean of ``x`` over those
    axes as it was returned, finished from the moments kept of ``x`` when
    that mean was taken: ``M2 + n (mean - m) ** 2`` in float64, without
    reading ``x`` again (``sum(square(x - mean(x)))`` otherwise reads it a
    second time, for nothing the moments do not hold). None for anything
    else, or when nothing is kept of ``x``."""
    p = desc.params
    reducer = p.get("reducer")
    if (desc.kind != "map" or p.get("kernel") is not unchanged or len(inputs) != 1
            or not (reducer == "sum" or str(reducer).startswith("mean(count="))):
        return None
    full = tuple(p["full_shape"])
    if 0 in full:
        return None  # (no elements: the op's own answer, from shapes)
    deviation = _squared(inputs[0], full)
    found = deviation is not None and _deviation(deviation, full)
    if not found or p["dtypes"][0] not in (None, np.dtype(desc.dtype)):
        return None
    x, m, m_axes = found
    dtype = np.dtype(x.dtype)
    if (dtype.kind != "f" or np.dtype(deviation.dtype) != dtype
            or np.dtype(desc.dtype) != dtype or tuple(p["axes"][0]) != tuple(range(len(full)))):
        return None
    kept_axes = {a for a in p["out_axes"] if a is not None}
    reduced = tuple(d for d in range(len(full)) if d not in kept_axes)
    # m in the partial's shape (the reduced axes of length 1): it may vary only along kept axes
    where = [1] * len(full)
    for n, a in zip(m.shape, m_axes):
        if a is not None:  # (None: a length-1 axis of m's own)
            where[a] = n
    if any(where[a] != 1 for a in reduced) or any(
            where[a] not in (1, full[a]) for a in range(len(full))):
        return None
    mean_desc = dataclasses.replace(desc, params=dict(p, reducer="sum"))
    stat = statistic(mean_desc, [x], budget)
    partial = None if stat is None else _kept_partial(stat)
    if partial is None or (reducer != "sum" and REDUCERS[reducer].mean_count != int(
            np.prod([full[a] for a in reduced]))):
        return None
    count, mean, m2, total = (np.asarray(a) for a in partial)
    with np.errstate(all="ignore"):
        returned = (total / np.float64(np.prod([full[a] for a in reduced]))).astype(dtype)
        offset = np.broadcast_to(np.asarray(m).reshape(where), returned.shape)
        if not np.array_equal(offset, returned, equal_nan=True):
            return None  # another centre: jax.numpy's own arithmetic on it is the answer
        value = m2 + count * np.square(mean - offset.astype(np.float64))
        if reducer != "sum":
            value = value / np.float64(REDUCERS[reducer].mean_count)
    return value.astype(desc.dtype).reshape(desc.shape)


def _squared(source, full: tuple):
    """The pending ``d`` that ``source`` squares (``square(d)``, ``d * d``,
    ``d ** 2``) over all of ``full``, or None."""
    desc = getattr(source, "desc", None)
    if (not isinstance(source, registry.Deferred) or getattr(source, "store", 1) is not None
            or desc is None or desc.kind != "map" or desc.params.get("reducer") is not None
            or tuple(desc.params["full_shape"]) != full or tuple(desc.shape) != full
            or tuple(desc.params["out_axes"]) != tuple(range(len(full)))):
        return None
    ins, axes, kernel = getattr(source, "inputs"), desc.params["axes"], desc.params["kernel"]
    whole = tuple(range(len(full)))
    if any(d and tuple(a) != whole for d, a in zip(desc.on_disk, axes)):
        return None
    if kernel is np.square and desc.on_disk == (True,):
        d = ins[0]
    elif kernel is np.multiply and desc.on_disk == (True, True) and ins[0] is ins[1]:
        d = ins[0]
    elif (_named(kernel, "jask.core.kernels.power") and desc.on_disk == (True, False)
          and np.ndim(ins[1]) == 0 and ins[1] == 2):
        d = ins[0]
    else:
        return None
    if any(c not in (None, np.dtype(desc.dtype)) for c in desc.params["dtypes"][:1]):
        return None
    return d if isinstance(d, registry.Deferred) and getattr(d, "store", 1) is None else None


def _named(kernel, name: str) -> bool:
    """Whether ``kernel`` is the function of that dotted name (the op table's
    kernels live above this layer)."""
    return f"{getattr(kernel, '__module__', '')}.{getattr(kernel, '__qualname__', '')}" == name


def _deviation(d, full: tuple):
    """(x, m, m's axes) for a pending ``d = x - m`` (or ``m - x``) over all of
    ``full``, ``x`` stored or pending and ``m`` in memory, or None."""
    desc = getattr(d, "desc", None)
    if (desc is None or desc.kind != "map" or desc.params.get("kernel") is not np.subtract
            or desc.params.get("reducer") is not None or tuple(desc.shape) != full
            or tuple(desc.params["full_shape"]) != full
            or tuple(desc.params["out_axes"]) != tuple(range(len(full)))
            or sorted(desc.on_disk) != [False, True]):
        return None
    k = desc.on_disk.index(True)
    x, m = d.inputs[k], d.inputs[1 - k]
    axes, dtypes = desc.params["axes"], desc.params["dtypes"]
    if (tuple(axes[k]) != tuple(range(len(full))) or tuple(x.shape) != full
            or dtypes[k] not in (None, np.dtype(x.dtype)) or not isinstance(m, np.ndarray)
            or np.dtype(dtypes[1 - k] or m.dtype) != np.dtype(x.dtype)
            or np.dtype(m.dtype) != np.dtype(x.dtype)):
        return None
    return x, m, tuple(axes[1 - k])


def _files(folder: str) -> tuple:
    """(relative name, inode, size, change time in ns) of every file under
    ``folder``, sorted: any chunk written, replaced or removed changes it."""
    found = []
    stack = [folder]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                info = entry.stat(follow_symlinks=True)
            except FileNotFoundError:
                continue  # removed while walking: the version differs anyway
            found.append((os.path.relpath(entry.path, folder), info.st_ino, info.st_size,
                          info.st_ctime_ns))
    return tuple(sorted(found))


def _version(path: str, walk: bool):
    """A local store's version for kept moments: its identity and, for a
    user's store (``walk``), its files; None when there is no store. jask's
    own stores (scratch) change only through jask, which drops what is kept
    first; the walk costs a stat a file (0.2 s for 10,000 chunk files)."""
    version = identity(path)
    return None if version is None else (version, _files(path) if walk else ())


def may_know(desc) -> bool:
    """Whether ``desc`` may be a :class:`Statistic` (its operands not looked at)."""
    reducer = desc.params.get("reducer")
    return (desc.kind == "map" and desc.params.get("kernel") is unchanged
            and reducer is not None and with_moments(reducer) is not None)


def widens(desc) -> bool:
    """Whether :func:`widened` applies to ``desc``'s reducer (a mean or variance)."""
    reducer = desc.params.get("reducer")
    return (desc.params.get("kernel") is unchanged and reducer is not None
            and reducer.startswith(("mean(count=", "var(ddof=")))


def widened(desc):
    """``desc`` with the reducer whose partials are the moments (same output)."""
    params = dict(desc.params, reducer=with_moments(desc.params["reducer"]))
    return dataclasses.replace(desc, params=params)


def recall(stat: Statistic) -> np.ndarray | None:
    """The statistic finished from moments kept of its source, else None."""
    partial = _kept_partial(stat)
    return None if partial is None else np.asarray(stat_of(stat.reducer, partial))


def _kept_partial(stat: Statistic) -> tuple | None:
    """The (count, mean, M2, total) partial kept of ``stat``'s source, else None."""
    with _lock:
        entry = _kept.get(stat.key)
        if entry is None:
            return None
        alive = entry.ref() is stat.source if entry.ref is not None else (
            entry.version is not None and entry.version == stat.version)
        if not alive:
            del _kept[stat.key]
            return None
        _kept.move_to_end(stat.key)
        return entry.partial


def remember(stat: Statistic, partial: tuple) -> None:
    """Keep the moments a widened reduction of ``stat``'s source gave."""
    if stat.path is not None and stat.version is None:
        return  # no store to know again
    nbytes = sum(np.asarray(x).nbytes for x in partial)
    limit = int(stat.budget * KEPT_SHARE)
    if nbytes > limit:
        return
    ref = weakref.ref(stat.source) if stat.path is None else None
    with _lock:
        _kept[stat.key] = _Entry(tuple(partial), stat.path, stat.version, ref, nbytes)
        _kept.move_to_end(stat.key)
        while len(_kept) > KEPT or sum(e.nbytes for e in _kept.values()) > limit:
            _kept.popitem(last=False)


def _changing(path: str) -> None:
    """A store is about to change: what is kept of it goes."""
    with _lock:
        for key in [k for k, e in _kept.items() if e.path == path]:
            del _kept[key]


def clear() -> None:
    """Drop every kept entry."""
    with _lock:
        _kept.clear()


def kept() -> int:
    """How many entries are kept (for tests)."""
    with _lock:
        return len(_kept)


registry.on_mutation(_changing, kept)
