"""Blockwise graphs: a kernel applied tile by tile, optionally reduced.

One builder serves every elementwise op, broadcast, fill and reduction:
``kernel(*operand tiles)`` is computed over the tiles of a *full* shape and
then either written tile by tile to an output store (a map) or reduced over
the axes the output does not keep (a map-reduce: ``sum``, ``max``, a
gradient summed back to a broadcast operand's shape).

An operand is a store or an in-memory numpy array; it follows the full
shape through its ``axes`` map (``axes[i]``: the full axis operand axis
``i`` runs along, or ``None`` for a broadcast axis of length 1), numpy's
broadcasting written out. The output follows the full shape the same way:
axes it keeps, and ``None`` where a reduced axis stays as length 1
(``keepdims``). Nothing here knows of JAX.

A kernel may ask for its tile's position, as dask's ``map_blocks`` gives
``block_info``: a kernel marked :func:`positional` is called as
``kernel(*tiles, region=region, shape=shape)``, ``region`` being the tile's
slices in the full ``shape``. ``argmax`` uses it to turn a tile's local
positions into indices of the whole array. A kernel may also return a pair
``(values, index)`` for a reducer that carries pairs (``"argmax"``,
``"argmin"``): see :data:`jask.engine.ops.reductions.REDUCERS`, where each
reducer (how a tile is reduced, two partials combined, the result finished)
is defined.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from jask.engine.builders import FAN_IN, key_name, regions
from jask.engine.ops.reductions import REDUCERS
from jask.store.spec import StoreSpec
from jask.store.tiles import prefetch, read, write

__all__ = ["Operand", "broadcast_axes", "map_graph", "positional", "reduce_graph", "unchanged"]


def unchanged(a):
    """The kernel of an op that takes its operand's values as they are (a copy,
    a reduction of the array itself): :mod:`jask.engine.moments` knows it."""
    return a


def positional(kernel):
    """Mark ``kernel`` as taking its tile's position: it is then called as
    ``kernel(*tiles, region=region, shape=shape)``, where ``region`` holds
    the tile's slices in the full ``shape`` (dask's ``block_info``).

    Example:
      >>> @positional
      ... def rows(x, *, region, shape):
      ...     return x * 0 + np.arange(region[0].start, region[0].stop)[:, None]
      >>> _apply(rows, (Operand(np.zeros((4, 2)), (0, 1)),), (slice(2, 4), slice(0, 2)),
      ...        (4, 2))
      array([[2., 2.],
             [3., 3.]])
    """
    kernel.positional = True
    return kernel


def is_positional(kernel) -> bool:
    """Whether ``kernel`` takes its tile's position (see :func:`positional`)."""
    return bool(getattr(kernel, "positional", False))


@dataclass(frozen=True)
class Operand:
    """One input of a blockwise task: where its data is, and how it lines up.

    ``dtype`` is what the kernel computes in (a tile is cast to it after
    reading); ``None`` keeps the stored dtype (bool conditions).
    """

    source: StoreSpec | np.ndarray
    axes: tuple
    dtype: np.dtype | None = None

    @property
    def on_disk(self) -> bool:
        return isinstance(self.source, StoreSpec)

    def tile(self, region: tuple) -> np.ndarray:
        """This operand's part of a tile of the full shape, with the full
        shape's number of axes (its axes map is increasing)."""
        own = tuple(slice(0, 1) if a is None else region[a] for a in self.axes)
        if isinstance(self.source, StoreSpec):
            block = read(self.source, own)
        else:
            block = self.source[own]
        if self.dtype is not None and block.dtype != self.dtype:
            block = block.astype(self.dtype)
        # line the tile up with the full shape's axes, length 1 where it has none
        dims = [1] * len(region)
        for i, a in enumerate(self.axes):
            if a is not None:
                dims[a] = block.shape[i]
        return block.reshape(dims)


def broadcast_axes(shape: tuple, full_shape: tuple) -> tuple:
    """The axes map of an operand of ``shape`` under numpy broadcasting.

    Example:
      >>> broadcast_axes((1, 5), (4, 3, 5))
      (None, 2)
      >>> broadcast_axes((4, 1), (4, 1))
      (0, 1)
    """
    offset = len(full_shape) - len(shape)
    return tuple(None if n == 1 and full_shape[i + offset] != 1 else i + offset
                 for i, n in enumerate(shape))


def _full_tile(region: tuple) -> tuple:
    return tuple(s.stop - s.start for s in region)


def _apply(kernel: Callable, operands: tuple, region: tuple, shape: tuple | None = None):
    """``kernel`` on the operands' tiles of ``region`` (of the full ``shape``,
    which a positional kernel is given with the region)."""
    tiles = [x.tile(region) for x in operands]
    if is_positional(kernel):
        with np.errstate(all="ignore"):
            result = kernel(*tiles, region=region, shape=shape)
        if isinstance(result, tuple):  # (values, index) for a reducer of pairs
            return result
        return np.broadcast_to(result, _full_tile(region))
    into = _reusable(kernel, tiles, operands, _full_tile(region))
    with np.errstate(all="ignore"):  # nan and inf follow IEEE, as in jax.numpy
        result = kernel(*tiles) if into is None else kernel(*tiles, out=into)
    return np.broadcast_to(result, _full_tile(region))


def _reusable(kernel, tiles, operands, shape) -> np.ndarray | None:
    """A tile this task read that a numpy ufunc may write its result into:
    one array fewer to allocate (and fault in) per task. A kernel wrapping a
    ufunc (``__wrapped__``: the table's complex special values) passes ``out=``
    on for real tiles and drops it for complex ones."""
    ufunc = getattr(kernel, "__wrapped__", kernel)
    if not isinstance(ufunc, np.ufunc) or ufunc.nout != 1:
        return None
    dtype = _ufunc_dtype(ufunc, tuple(t.dtype for t in tiles))
    for x, t in zip(operands, tiles):
        if x.on_disk and t.shape == shape and t.dtype == dtype and t.flags.writeable:
            return t  # read from disk: this task's own array
    return None


@functools.lru_cache(maxsize=256)
def _ufunc_dtype(kernel, dtypes: tuple):
    try:
        return kernel.resolve_dtypes(dtypes + (None,))[-1]
    except (TypeError, ValueError, AttributeError):  # no loop, or an older numpy
        return None


def map_block(kernel: Callable, out: StoreSpec, out_axes: tuple, region: tuple,
              operands: tuple, shape: tuple | None = None) -> None:
    """out[region] = kernel(*operand tiles), one whole output chunk (``shape``:
    the full shape, for a positional kernel)."""
    for x in operands:
        if x.on_disk:
            prefetch(x.source, tuple(slice(0, 1) if a is None else region[a]
                                             for a in x.axes))
    result = _apply(kernel, operands, region, shape)
    own = tuple(slice(0, 1) if a is None else region[a] for a in out_axes)
    write(out, own, np.ascontiguousarray(result.astype(out.dtype, copy=False))
                  .reshape(_full_tile(own)))


def map_graph(op: str, kernel: Callable, out: StoreSpec, out_axes: tuple, shape: tuple,
              tile: tuple, operands: tuple, token: str) -> tuple[dict, list]:
    """out = kernel(*operands) over tiles of ``shape``, one task per tile.

    ``tile`` must be a whole number of ``out``'s chunks along each axis.
    """
    name = key_name(op, token)
    graph = {(name, i): (map_block, kernel, out, out_axes, region, operands, shape)
             for i, region in enumerate(regions(shape, tile))}
    return graph, list(graph)


# --- reductions: tiles streamed through a reducer ---------------------------------

def _finish(reducer: str, partial):
    finish = REDUCERS[reducer].finish
    return partial if finish is None else finish(partial)


def reduce_partial(kernel: Callable, reducer: str, operands: tuple, reduced: tuple,
                   tiles: tuple, shape: tuple | None = None) -> np.ndarray:
    """Reduce kernel(*operands) over ``reduced`` axes, streaming ``tiles``
    (of the full ``shape``, for a positional kernel)."""
    reduce, combine = REDUCERS[reducer][:2]
    acc = reduce(_apply(kernel, operands, tiles[0], shape), reduced)
    for region in tiles[1:]:
        acc = combine(acc, reduce(_apply(kernel, operands, region, shape), reduced))
    return acc


def combine_partials(reducer: str, *partials) -> np.ndarray:
    combine = REDUCERS[reducer][1]
    acc = partials[0]
    for p in partials[1:]:
        acc = combine(acc, p)
    return acc


def write_partial(out: StoreSpec, out_axes: tuple, region: tuple, reducer: str,
                  *partials) -> None:
    """Combine a region's partials and write them as whole output chunks."""
    value = _finish(reducer, combine_partials(reducer, *partials))
    own = tuple(slice(0, 1) if a is None else region[a] for a in out_axes)
    write(out, own, value.astype(out.dtype).reshape(_full_tile(own)))


def assemble(shape: tuple, dtype, out_axes: tuple, reducer: str, pieces) -> np.ndarray:
    """The whole (small) reduced result from each output region's partials."""
    result = np.empty(shape, dtype=dtype)
    for region, partials in pieces:
        own = tuple(slice(0, 1) if a is None else region[a] for a in out_axes)
        value = _finish(reducer, combine_partials(reducer, *partials))
        result[own] = value.astype(dtype).reshape(_full_tile(own))
    return result


def _assemble_task(shape, dtype, out_axes, reducer, regions_, *partial_lists):
    return assemble(shape, dtype, out_axes, reducer, zip(regions_, partial_lists))


def _collect(*partials):
    return list(partials)


def _groups(items: list, size: int) -> list[tuple]:
    return [tuple(items[i:i + size]) for i in range(0, len(items), size)]


#: Most tiles one reduction task streams before handing on its partial.
TILES_PER_TASK = 16


def reduce_graph(op: str, kernel: Callable, reducer: str, shape: tuple, tile: tuple,
                 operands: tuple, out_axes: tuple, token: str, *, out: StoreSpec | None,
                 out_shape: tuple, out_dtype, workers: int) -> tuple[dict, list]:
    """Reduce kernel(*operands) over the full axes ``out_axes`` leaves out.

    Tiles of ``shape`` that land in one output region are streamed in runs
    (a task holds one accumulator), and each region's partials are added by
    a fan-in tree. With ``out`` the root of each region writes it; without,
    one task assembles the whole (small) result in memory.
    """
    kept = {a for a in out_axes if a is not None}
    reduced = tuple(d for d in range(len(shape)) if d not in kept)
    out_tile = tuple(t if d in kept else n for d, (t, n) in enumerate(zip(tile, shape)))
    out_regions = list(regions(shape, out_tile))
    name = key_name(op, token)
    combine = key_name(op, token, stage="combine")
    graph: dict = {}
    roots: list = []
    key: tuple
    for r, outer in enumerate(out_regions):
        inner = list(regions(_full_tile(outer), tile))
        runs = max(1, min(len(inner), max(math.ceil(len(inner) / TILES_PER_TASK),
                                           math.ceil(2 * workers / len(out_regions)))))
        size = math.ceil(len(inner) / runs)
        parts: list = []
        for g, run in enumerate(_groups(inner, size)):
            shifted = tuple(tuple(slice(o.start + s.start, o.start + s.stop)
                                  for o, s in zip(outer, t)) for t in run)
            key = (name, r, g)
            graph[key] = (reduce_partial, kernel, reducer, operands, reduced, shifted, shape)
            parts.append(key)
        while len(parts) > FAN_IN:
            level = []
            for i, group in enumerate(_groups(parts, FAN_IN)):
                key = (combine, r, len(graph), i)
                graph[key] = (combine_partials, reducer, *group)
                level.append(key)
            parts = level
        if out is not None:
            key = (key_name(op, token, stage="write"), r)
            graph[key] = (write_partial, out, out_axes, outer, reducer, *parts)
        else:
            key = (key_name(op, token, stage="collect"), r)
            graph[key] = (_collect, *parts)
        roots.append(key)
    if out is not None:
        return graph, roots
    root = (key_name(op, token, stage="result"),)
    graph[root] = (_assemble_task, out_shape, np.dtype(out_dtype), out_axes, reducer,
                   out_regions, *roots)
    return graph, [root]


def partial_bytes(tile: tuple, out_axes: tuple, dtype, reducer: str | None = None) -> int:
    """Bytes of one partial result of a reduction task (kept axes only,
    widened; a pair reducer's partials also hold an int64 index, a
    variance's a mean and M2)."""
    kept = {a for a in out_axes if a is not None}
    elems = math.prod(t for d, t in enumerate(tile) if d in kept)
    pair = reducer is not None and REDUCERS[reducer].pair
    arrays = 1 if reducer is None else REDUCERS[reducer].arrays
    return elems * (arrays * max(8, np.dtype(dtype).itemsize) + (8 if pair else 0))
