"""Views: a transpose, basic slice, unit-axis reshape or gather by runs of a store, never copied.

A view is a :class:`~jask.store.spec.StoreSpec` with the base's path and a
:class:`~jask.store.spec.View`: the base is sliced (``index``: an int drops
an axis, ``(start, step)`` keeps one, :class:`~jask.store.spec.Runs` keeps
one gathered by runs of consecutive positions), the kept axes are permuted
and axes of length 1 are inserted (``axes``). Views of views are flattened, so a
view always describes its base directly. :func:`read` maps a region of the
view to the base's region, reads it (the caller's reader: chunk I/O), then
steps, drops, permutes and inserts axes without copying the tile.

Nothing here touches the disk; it is plain index arithmetic.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from jask.store.spec import Runs, StoreSpec, View

__all__ = ["transpose", "take", "gather", "reshape", "read", "prefetch", "read_model",
           "as_transposed", "key", "base_of", "same"]


def _parts(store: StoreSpec) -> tuple[StoreSpec, tuple, tuple]:
    """(base, index, axes) of a store seen as a view of itself when it is none."""
    if store.view is not None:
        return store.view.base, store.view.index, store.view.axes
    ndim = len(store.shape)
    return store, tuple((0, 1) for _ in range(ndim)), tuple(range(ndim))


def _kept(base: StoreSpec, index: tuple) -> list:
    """Base axis of each kept axis."""
    return [d for d, x in enumerate(index) if not isinstance(x, int)]


def _make(base: StoreSpec, index: tuple, axes: tuple, shape: tuple) -> StoreSpec:
    kept = _kept(base, index)
    chunks = tuple(1 if k is None else min(base.chunks[kept[k]], max(n, 1))
                   for k, n in zip(axes, shape))
    return StoreSpec(base.path, tuple(int(n) for n in shape), base.dtype, chunks, managed=False,
                     view=View(base, tuple(index), tuple(axes)))


def base_of(store: StoreSpec) -> StoreSpec:
    """The store holding a view's data (the store itself when it is no view)."""
    return store.view.base if store.view is not None else store


def key(store: StoreSpec):
    """What tells stores apart for a cache of tiles: a view is not its base.

    Example:
      >>> x = StoreSpec("x", (2, 3), np.dtype("f4"), (2, 3))
      >>> key(x) == key(transpose(x, (1, 0)))
      False
    """
    return store.path if store.view is None else (store.path, store.view)


def transpose(store: StoreSpec, axes: tuple) -> StoreSpec:
    """A view of ``store`` with its axes permuted (``axes`` as numpy's).

    Example:
      >>> x = StoreSpec("x", (2, 3), np.dtype("f4"), (2, 1))
      >>> t = transpose(x, (1, 0))
      >>> t.shape, t.chunks, t.path
      ((3, 2), (1, 2), 'x')
    """
    base, index, old = _parts(store)
    shape = tuple(store.shape[a] for a in axes)
    return _make(base, index, tuple(old[a] for a in axes), shape)


def take(store: StoreSpec, sizes: tuple, starts: tuple) -> StoreSpec | None:
    """A view of ``store[index]`` for a basic index given as a slice's
    ``sizes`` (per axis ``(size, step)`` or None for an integer) and
    ``starts``; None when a step is not 1 (the caller copies instead: a
    strided read would hold ``step`` times its tile).

    Example:
      >>> x = StoreSpec("x", (5, 4), np.dtype("f4"), (2, 4))
      >>> v = take(x, ((3, 1), None), (1, 2))
      >>> v.shape, v.view.index
      ((3,), ((1, 1), 2))
    """
    if any(x is not None and x[1] != 1 for x in sizes):
        return None
    base, old_index, axes = _parts(store)
    kept = _kept(base, old_index)
    index = list(old_index)
    new_axes: list = []
    dropped: set = set()
    for k, x, start in zip(axes, sizes, starts):
        if k is None:  # an axis of length 1 made by a reshape
            if x is not None and x[0] != 1:
                return None  # empty: no view of it
            if x is not None:
                new_axes.append(None)
            continue
        d = kept[k]
        if isinstance(index[d], Runs):
            sub = _sub_runs(index[d], int(start), 1 if x is None else x[0])
            if x is None:
                index[d] = sub[0][0]
                dropped.add(k)
            else:
                index[d] = (sub[0][0], 1) if len(sub) == 1 else Runs(sub)
                new_axes.append(k)
            continue
        first, step = index[d]
        if x is None:
            index[d] = int(first + int(start) * step)
            dropped.add(k)
        else:
            index[d] = (int(first + int(start) * step), step)
            new_axes.append(k)
    renumber = {k: i for i, k in enumerate(k for k in range(len(kept)) if k not in dropped)}
    shape = tuple(x[0] for x in sizes if x is not None)
    return _make(base, tuple(index), tuple(None if k is None else renumber[k] for k in new_axes),
                 shape)


#: Fewest positions a run of a gather view holds on average: shorter runs
#: (a random order, every day of a year) are copied, each run read apart.
MIN_RUN = 4


def _sub_runs(runs: Runs, start: int, size: int) -> tuple:
    """The runs of view positions ``start .. start + size`` of ``runs``."""
    out, offset = [], 0
    for first, n in runs.runs:
        lo, hi = max(start, offset), min(start + size, offset + n)
        if lo < hi:
            out.append((first + lo - offset, hi - lo))
        offset += n
    return tuple(out)


def gather(store: StoreSpec, axis: int, positions) -> StoreSpec | None:
    """A view of ``store`` taking ``positions`` (in range, normalized) along
    ``axis`` when they form runs of consecutive positions, on average at
    least :data:`MIN_RUN` long (one run: a slice), else None (the caller
    copies). A view of a strided view, or one already gathered on another
    axis, is None too.

    Example:
      >>> x = StoreSpec("x", (9, 2), np.dtype("f4"), (3, 2))
      >>> v = gather(x, 0, np.array([5, 6, 7, 8, 0, 1, 2, 3]))
      >>> v.shape, v.view.index
      ((8, 2), (Runs(runs=((5, 4), (0, 4))), (0, 1)))
      >>> gather(x, 0, np.array([2, 0, 1])) is None
      True
    """
    positions = np.asarray(positions).reshape(-1).astype(np.int64)
    if positions.size == 0:
        return None
    base, index, axes = _parts(store)
    k = axes[axis]
    if k is None:
        return None
    d = _kept(base, index)[k]
    entry = index[d]
    if any(isinstance(x, Runs) for i, x in enumerate(index) if i != d):
        return None
    if isinstance(entry, Runs):
        starts = np.cumsum([0] + [n for _, n in entry.runs])[:-1]
        which = np.searchsorted(starts, positions, side="right") - 1
        firsts = np.asarray([first for first, _ in entry.runs], np.int64)
        at = firsts[which] + positions - starts[which]
    else:
        first, step = entry
        if step != 1:
            return None
        at = first + positions
    breaks = np.flatnonzero(np.diff(at) != 1) + 1
    if len(breaks) + 1 > max(1, positions.size // MIN_RUN):
        return None
    bounds = np.concatenate([[0], breaks, [at.size]])
    runs = tuple((int(at[a]), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:]))
    new = list(index)
    new[d] = (runs[0][0], 1) if len(runs) == 1 else Runs(runs)
    shape = list(store.shape)
    shape[axis] = int(positions.size)
    return _make(base, tuple(new), axes, tuple(shape))


def reshape(store: StoreSpec, shape: tuple) -> StoreSpec | None:
    """A view of ``store`` reshaped (C order) when the reshape only adds or
    removes axes of length 1, else None (the caller copies).

    Example:
      >>> x = StoreSpec("x", (3, 1, 4), np.dtype("f4"), (3, 1, 4))
      >>> reshape(x, (3, 4, 1)).view.axes
      (0, 1, None)
      >>> reshape(x, (4, 3)) is None
      True
    """
    shape = tuple(int(n) for n in shape)
    if [n for n in store.shape if n != 1] != [n for n in shape if n != 1]:
        return None
    # drop every axis of length 1, then insert the new ones
    ones = [i for i, n in enumerate(store.shape) if n == 1]
    squeezed = take(store, tuple(None if i in ones else (n, 1)
                                 for i, n in enumerate(store.shape)), (0,) * len(store.shape))
    assert squeezed is not None and squeezed.view is not None
    base, index, axes = _parts(squeezed)
    it = iter(axes)
    new_axes = tuple(None if n == 1 else next(it) for n in shape)
    return _make(base, index, new_axes, shape)


def as_transposed(store: StoreSpec) -> tuple[StoreSpec, bool]:
    """``(x, True)`` when ``store`` is ``x`` with its last two axes swapped
    (what a product reads transposed for free): ``x`` the base itself when
    it is all of it, else a view; else ``(store, False)``.

    Example:
      >>> x = StoreSpec("x", (5, 3), np.dtype("f4"), (5, 3))
      >>> as_transposed(transpose(x, (1, 0)))[0] == x
      True
      >>> part = take(x, ((2, 1), (3, 1)), (0, 0))
      >>> as_transposed(transpose(part, (1, 0))) == (part, True), as_transposed(part)[1]
      (True, False)
    """
    v = store.view
    if v is None or len(store.shape) < 2 or None in v.axes[-2:]:
        return store, False
    n = len(store.shape)
    if v.axes[-1] > v.axes[-2]:
        return store, False
    back = transpose(store, tuple(range(n - 2)) + (n - 1, n - 2))
    assert back.view is not None
    whole = (all(x == (0, 1) for x in back.view.index) and back.shape == v.base.shape
             and back.view.axes == tuple(range(len(v.base.shape))))
    return (v.base if whole else back), True


def same(a, b) -> bool:
    """Whether two stores hold the same elements (whatever their handles).

    Example:
      >>> x = StoreSpec("x", (5, 3), np.dtype("f4"), (5, 3))
      >>> same(dataclasses.replace(x, handle=7), x), same(transpose(x, (1, 0)), x)
      (True, False)
    """
    if not (isinstance(a, StoreSpec) and isinstance(b, StoreSpec)):
        return False
    return (a.path, a.shape, a.dtype, a.view) == (b.path, b.shape, b.dtype, b.view)


def _base_regions(store: StoreSpec, region: tuple) -> tuple[list, int | None, tuple, tuple]:
    """(regions of the base, in order, joined along the base axis given
    next (None: one region); the int axes to drop, the kept axes' order)
    for a region of the view."""
    v = store.view
    assert v is not None
    kept = _kept(v.base, v.index)
    on_kept: dict = {k: r for k, r in zip(v.axes, region) if k is not None}
    out: list = []
    drop = []
    joined: int | None = None
    pieces: list = [None]
    for d, x in enumerate(v.index):
        if isinstance(x, int):
            out.append(slice(x, x + 1))
            drop.append(d)
            continue
        r = on_kept[kept.index(d)]
        if isinstance(x, Runs):
            joined = d
            pieces = [slice(first, first + n)
                      for first, n in _sub_runs(x, r.start, r.stop - r.start)] or [slice(0, 0)]
            out.append(None)
            continue
        start, _ = x
        out.append(slice(start + r.start, start + r.stop))
    regions = [tuple(piece if s is None else s for s in out) for piece in pieces]
    return regions, joined, tuple(drop), tuple(k for k in v.axes if k is not None)


def read(store: StoreSpec, region: tuple, read_base: Callable) -> np.ndarray:
    """The tile ``region`` of the view ``store``, read by ``read_base(base, region)``.

    The tile is a numpy view of what was read (permuted, not copied).

    Example:
      >>> x = StoreSpec("x", (2, 3), np.dtype("f4"), (2, 3))
      >>> data = np.arange(6, dtype="f4").reshape(2, 3)
      >>> reader = lambda s, r: data[r]
      >>> read(transpose(x, (1, 0)), (slice(1, 3), slice(0, 2)), reader)
      array([[1., 4.],
             [2., 5.]], dtype=float32)
    """
    v = store.view
    assert v is not None
    extents = tuple(max(0, r.stop - r.start) for r in region)
    regions, joined, drop, order = _base_regions(store, region)
    if joined is None:
        block = read_base(v.base, regions[0])
    else:  # a gather by runs: each run's rows read, joined in the view's order
        block = np.concatenate([read_base(v.base, r) for r in regions], axis=joined)
    if drop:
        block = block.reshape(tuple(n for d, n in enumerate(block.shape) if d not in drop))
    block = np.transpose(block, order)
    return block.reshape(extents) if block.shape != extents else block


def prefetch(store: StoreSpec, region: tuple, prefetch_base: Callable) -> None:
    """Start reading a view's tile from its base (see ``chunkio.prefetch``)."""
    assert store.view is not None
    for base_region in _base_regions(store, region)[0]:
        prefetch_base(store.view.base, base_region)


def read_model(store: StoreSpec, model_of: Callable):
    """The base's read model (``model_of(base)``) as the view's planners see
    it: its chunks in the view's axes. Byte-range reads of a permuted or
    shifted view go through one buffer of at most a chunk's rows (counted
    as one chunk decoded at a time, held once)."""
    v = store.view
    assert v is not None
    model = model_of(v.base)
    kept = _kept(v.base, v.index)
    unit = tuple(1 if k is None else model.unit[kept[k]] for k in v.axes)
    order = [k for k in v.axes if k is not None]
    shifted = any(isinstance(x, Runs) or not isinstance(x, int) and x[0] != 0
                  for x in v.index)
    model = dataclasses.replace(model, shape=tuple(store.shape), unit=unit,
                                write_unit=tuple(store.chunks))
    if model.raw and (order != sorted(order) or shifted or len(v.index) != len(v.axes)):
        model = dataclasses.replace(model, raw=False, copies=1, group=1)
    return model
