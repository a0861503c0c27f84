"""Sorting along one axis, tile by tile: each tile holds whole lanes.

A tile spans the whole sorted axis for a block of the other axes, so every
lane is sorted in one task and written as one whole output chunk; a lane
that does not fit in the budget is refused by the planner
(:func:`jask.engine.plan.ops.sort`). The kernels follow jax.numpy exactly:
a stable sort in which NaNs (of either sign) come last and ``-0.0`` ties
with ``0.0`` (numpy's order, which is ``lax.sort``'s), a descending sort
being the ascending one reversed, and ``argsort(descending=True)`` keeping
equal elements in their original order, as ``jnp.argsort`` does. Nothing
here knows of JAX.
"""
from __future__ import annotations

import numpy as np

from jask.engine.builders import key_name, regions
from jask.store.spec import StoreSpec
from jask.store.tiles import read, write

__all__ = ["KINDS", "lanes", "sort_graph"]


def _ascending(x, axis):
    return np.argsort(x, axis=axis, kind="stable")


def _argsort(x, axis, descending):
    """jnp.argsort: descending sorts the reversed lane and reverses back, so
    that ties keep their original order."""
    if not descending:
        return _ascending(x, axis)
    n = x.shape[axis]
    return np.flip(n - 1 - _ascending(np.flip(x, axis), axis), axis)


def _perm(x, axis, descending):
    """The order jnp.sort puts elements in (its VJP gathers by it): the
    stable ascending order, reversed when descending."""
    order = _ascending(x, axis)
    return np.flip(order, axis) if descending else order


def lanes(kind: str, tiles: list, axis: int, descending: bool) -> np.ndarray:
    """One tile's result (``tiles``: the tiles of the op's inputs).

    Example:
      >>> x = np.array([[3.0, np.nan, 1.0, 3.0]])
      >>> lanes("sort", [x], 1, False), lanes("argsort", [x], 1, True)
      (array([[ 1.,  3.,  3., nan]]), array([[1, 0, 3, 2]]))
      >>> lanes("unsort", [np.array([[10.0, 20.0, 30.0]]), np.array([[2, 0, 1]])], 1, False)
      array([[20., 30., 10.]])
    """
    if kind == "unsort":  # sort's VJP: the cotangent put back where each element came from
        g, perm = tiles
        out = np.empty_like(g)
        np.put_along_axis(out, perm.astype(np.intp, copy=False), g, axis)
        return out
    (x,) = tiles
    if kind == "argsort":
        return _argsort(x, axis, descending)
    order = _perm(x, axis, descending)
    return order if kind == "perm" else np.take_along_axis(x, order, axis)


#: What a task computes: sorted values, jnp.argsort's indices, the order
#: jnp.sort's VJP gathers by, and that VJP itself (inputs: cotangent, order).
KINDS = ("sort", "argsort", "perm", "unsort")


def _sort_block(kind: str, sources: tuple, out: StoreSpec, region: tuple, axis: int,
                descending: bool) -> None:
    tiles = [read(s, region) for s in sources]
    result = lanes(kind, tiles, axis, descending)
    del tiles
    write(out, region, np.ascontiguousarray(result.astype(out.dtype, copy=False)))


def sort_graph(op: str, kind: str, sources: tuple, out: StoreSpec, tile: tuple, axis: int,
               descending: bool, token: str):
    """One task per tile of whole lanes (a whole output chunk)."""
    name = key_name(op, token)
    graph = {(name, i): (_sort_block, kind, tuple(sources), out, region, axis, descending)
             for i, region in enumerate(regions(tuple(out.shape), tile))}
    return graph, list(graph)


# --- searchsorted: each tile of values searched in the sorted array, chunk by chunk ---

def _read(source, region: tuple) -> np.ndarray:
    return read(source, region) if isinstance(source, StoreSpec) else source[region]


def search_block(side: str, values, sorted_, region: tuple, step: int, dtype) -> np.ndarray:
    """Insertion indices of one tile of ``values`` into ``sorted_`` (a store
    or an array), read ``step`` elements at a time: the counts of each piece
    (numpy's order, NaNs last, as jax.numpy's) add up to the index.

    Example:
      >>> search_block("left", np.array([2.0, 9.0, 0.0]), np.array([1.0, 2.0, 2.0, 5.0]),
      ...              (slice(0, 3),), 3, np.float64)
      array([1, 4, 0])
    """
    v = _read(values, region).astype(dtype, copy=False)
    counts = np.zeros(v.shape, np.int64)
    n = sorted_.shape[0]
    for start in range(0, n, max(step, 1)):
        piece = _read(sorted_, (slice(start, min(start + step, n)),)).astype(dtype, copy=False)
        counts += np.searchsorted(piece, v, side=side)  # type: ignore[call-overload]
    return counts


def _search_write(out: StoreSpec, side, values, sorted_, region, step, dtype) -> None:
    counts = search_block(side, values, sorted_, region, step, dtype)
    write(out, region, counts.astype(out.dtype))


def _search_assemble(shape, dtype, regions_, *pieces) -> np.ndarray:
    result = np.empty(shape, dtype)
    for region, piece in zip(regions_, pieces):
        result[region] = piece
    return result


def search_graph(op: str, side: str, values, sorted_, out: StoreSpec | None, shape: tuple,
                 out_dtype, tile: tuple, step: int, dtype, token: str):
    """One task per tile of ``values`` (a whole output chunk, or a piece of
    the in-memory result assembled by one more task)."""
    name = key_name(op, token)
    tiles = list(regions(shape, tile))
    graph: dict
    if out is not None:
        graph = {(name, i): (_search_write, out, side, values, sorted_, region, step, dtype)
                 for i, region in enumerate(tiles)}
        return graph, list(graph)
    graph = {(name, i): (search_block, side, values, sorted_, region, step, dtype)
             for i, region in enumerate(tiles)}
    root = (key_name(op, token, stage="result"),)
    graph[root] = (_search_assemble, shape, np.dtype(out_dtype), tiles, *list(graph))
    return graph, [root]
