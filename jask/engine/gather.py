"""Outer gathers: ``out = source[np.ix_(index_0, index_1, ...)]`` over tiles.

Each axis either keeps the source's positions (``None``) or takes them from
an index vector (flip, roll, take, repeat, tile). A task writes one output
tile: it groups the tile's source positions by source chunk along every
axis and reads one chunk's part at a time, so it holds its output tile and
one chunk's window, whatever the indices. An index outside ``[0, n)`` gives
``fill`` (jax.numpy's ``take(mode="fill")``; negative ones wrap first);
without a ``fill`` it raises IndexError (:func:`check_in_bounds`), as numpy.

The scatter-add is the gather's transpose (its VJP when indices repeat):
``out[np.ix_(index...)] += g``, each task writing one tile of ``out`` from
the positions of ``g`` that land in it, grouped by ``g``'s chunks.
"""
from __future__ import annotations

import itertools

import numpy as np

from jask.engine.builders import chunk_graph
from jask.store.spec import StoreSpec
from jask.store.tiles import read, read_model, write

__all__ = ["gather_graph", "scatter_add_graph", "normalized", "check_in_bounds"]


def normalized(index: np.ndarray, n: int) -> np.ndarray:
    """Index positions as int64 in ``[0, n)``, negative ones wrapped, the
    rest out of range (-1).

    Example:
      >>> normalized(np.array([0, -1, 3, -5]), 3)
      array([ 0,  2, -1, -1])
    """
    index = np.asarray(index, np.int64).reshape(-1)
    index = np.where(index < 0, index + n, index)
    return np.where((index < 0) | (index >= n), -1, index)


def check_in_bounds(index, n: int, axis: int, shape: tuple) -> None:
    """Raise IndexError, as numpy does, naming the first of ``index``'s
    positions outside ``[-n, n)`` and the axis; nothing when all are in.

    Example:
      >>> check_in_bounds(np.array([0, -3, 3]), 3, 1, (4, 3))
      Traceback (most recent call last):
      IndexError: index 3 is out of bounds for axis 1 with size 3 (shape (4, 3))
    """
    index = np.asarray(index).reshape(-1)
    if not index.size:
        return
    outside = (index < -n) | (index >= n)
    if outside.any():
        bad = index[np.argmax(outside)]
        raise IndexError(f"index {int(bad)} is out of bounds for axis {axis} with size {n} "
                         f"(shape {tuple(shape)})")


def _groups(want: np.ndarray, positions: np.ndarray, chunk: int) -> list:
    """(positions in the written tile, positions read) grouped by the chunk
    of the read array they fall in."""
    valid = want >= 0
    want, positions = want[valid], positions[valid]
    if not want.size:  # the whole tile is fill along this axis: nothing to read
        return []
    ids = want // chunk
    order = np.argsort(ids, kind="stable")
    want, positions, ids = want[order], positions[order], ids[order]
    cuts = np.flatnonzero(np.diff(ids)) + 1
    return list(zip(np.split(positions, cuts), np.split(want, cuts)))


def _contiguous(positions: np.ndarray):
    """A slice when ``positions`` are consecutive, increasing or decreasing
    (a view, not a copy), else None."""
    first, last, n = int(positions[0]), int(positions[-1]), len(positions)
    if n > 1 and first - last == n - 1 and np.all(np.diff(positions) == -1):
        return slice(first, last - 1 if last > 0 else None, -1)
    if last - first == n - 1 and (n < 3 or np.all(np.diff(positions) == 1)):
        return slice(first, last + 1)
    return None


def _read_part(source: StoreSpec, wanted: tuple, runs: bool = False) -> np.ndarray:
    """source[np.ix_(*wanted)]: the bounding window, then picked with one
    view (runs, forwards or backwards) or one copy (any other positions).
    With ``runs`` (chunks that are plain files: reading part of one costs
    only that part) positions scattered along one axis are read run by
    run, so no more than the picked part is ever read."""
    window = tuple(slice(int(w.min()), int(w.max()) + 1) for w in wanted)
    picks = [_contiguous(w - s.start) for w, s in zip(wanted, window)]
    scattered = [d for d, p in enumerate(picks) if p is None]
    if runs and len(scattered) == 1:
        (d,) = scattered
        w = wanted[d]
        part = np.empty(tuple(len(x) for x in wanted), source.dtype)
        cuts = np.flatnonzero(np.diff(w) != 1) + 1
        for start, stop in zip(np.r_[0, cuts], np.r_[cuts, len(w)]):
            run = window[:d] + (slice(int(w[start]), int(w[stop - 1]) + 1),) + window[d + 1:]
            block = read(source, run)
            part[(slice(None),) * d + (slice(start, stop),)] = block[
                tuple(p if k != d else slice(None) for k, p in enumerate(picks))]
        return part
    block = read(source, window)
    if all(p is not None for p in picks):
        return block[tuple(picks)]
    return block[np.ix_(*[w - s.start for w, s in zip(wanted, window)])]


def _target(local: tuple):
    """An index of the written tile: slices when every axis is contiguous."""
    slices = [_contiguous(p) for p in local]
    if all(s is not None for s in slices):
        return tuple(slices)
    return np.ix_(*local)


def gather_block(out: StoreSpec, region: tuple, source: StoreSpec, index: tuple,
                 fill, runs: bool = False) -> None:
    """out[region] = source[np.ix_(index...)][region] (``fill`` where out of range)."""
    extent = tuple(r.stop - r.start for r in region)
    block = np.empty(extent, out.dtype)
    per_axis = []
    for d, r in enumerate(region):
        positions = np.arange(extent[d])
        want = positions + r.start if index[d] is None else index[d][r]
        if fill is not None and np.any(want < 0):
            block.fill(fill)
        per_axis.append(_groups(want, positions, source.chunks[d]))
    for parts in itertools.product(*per_axis):
        local = tuple(p for p, _ in parts)
        block[_target(local)] = _read_part(source, tuple(w for _, w in parts), runs)
    write(out, region, block)


def scatter_add_block(out: StoreSpec, region: tuple, g: StoreSpec, index: tuple,
                      runs: bool = False) -> None:
    """out[region] = the sum of g at the positions the gather took from it."""
    extent = tuple(r.stop - r.start for r in region)
    block = np.zeros(extent, out.dtype)
    per_axis = []
    for d, r in enumerate(region):
        if index[d] is None:
            taken = np.arange(r.start, r.stop)
            local = taken - r.start
        else:
            taken = np.flatnonzero((index[d] >= r.start) & (index[d] < r.stop))
            local = index[d][taken] - r.start
        if len(taken) == 0:
            return write(out, region, block)
        per_axis.append(_groups(taken, local, g.chunks[d]))
    for parts in itertools.product(*per_axis):
        local = tuple(p for p, _ in parts)
        part = _read_part(g, tuple(w for _, w in parts), runs).astype(out.dtype, copy=False)
        target = _target(local)
        if isinstance(target, tuple) and all(isinstance(t, slice) for t in target):
            block[target] += part  # positions distinct along every axis
        else:
            np.add.at(block, target, part)
    write(out, region, block)


def gather_graph(op: str, out: StoreSpec, source: StoreSpec, index: tuple, fill):
    """out = source gathered by ``index`` (per axis a vector or None), one
    task per output chunk."""
    return chunk_graph(op, out, gather_block, source, index, fill, read_model(source).raw)


def scatter_add_graph(op: str, out: StoreSpec, g: StoreSpec, index: tuple):
    """out = zeros with ``g`` added where the gather took it, one task per chunk."""
    return chunk_graph(op, out, scatter_add_block, g, index, read_model(g).raw)
