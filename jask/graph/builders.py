"""Graph builders: one function per kind of op, returning a Dask graph.

A graph is a plain dict of block tasks; its keys are named
``jask-<op>-<token>`` so the Dask dashboard groups tiles by op. Each
``*_chunks`` planner picks the output tiles and checks the memory model
before anything is written; each ``*_graph`` builder lays out the tasks.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
from dask.base import tokenize

from jask import memory
from jask.graph import tasks
from jask.storage import StoreSpec

#: Most partial results one combine task adds up (tree reductions).
FAN_IN = 8


def key_name(op: str, *parts, stage: str = "") -> str:
    """Task-key prefix for an op (and a stage of it): what the dashboard shows.

    Dask groups keys by their words before the token, so the op name is
    spelled with hyphens and a stage comes before the token.

    Example:
      >>> from dask.utils import key_split
      >>> key_split((key_name("square_vjp", "x"), 0))
      'jask-square-vjp'
      >>> key_split((key_name("sum", "x", stage="combine"), 0))
      'jask-sum-combine'
    """
    words = ["jask", op.replace("_", "-")] + ([stage] if stage else [])
    return "-".join(words + [tokenize(*parts)])


def regions(shape: tuple, chunks: tuple):
    """Every chunk-aligned region of an array, as tuples of slices.

    Example:
      >>> list(regions((3,), (2,)))
      [(slice(0, 2, None),), (slice(2, 3, None),)]
    """
    ranges = [range(0, max(s, 1), max(c, 1)) for s, c in zip(shape, chunks)]
    for starts in itertools.product(*ranges):
        yield tuple(slice(b, min(b + c, s)) for b, c, s in zip(starts, chunks, shape))


def default_chunks(shape, dtype, budget: int, workers: int) -> tuple:
    """Chunks of a new store under this budget (see :mod:`jask.memory`)."""
    return memory.chunk_shape(tuple(shape), np.dtype(dtype).itemsize,
                              memory.chunk_bytes(budget, workers))


def _min_chunks(stores) -> tuple:
    return tuple(min(cs) for cs in zip(*(x.chunks for x in stores)))


def elementwise_chunks(op: str, shape, dtype, inputs, budget: int,
                       workers: int) -> tuple[tuple, memory.TileCost]:
    """Output chunks for an elementwise op on same-shaped inputs (see
    :func:`jask.plan.plan_blockwise`)."""
    from jask.plan import plan_blockwise
    axes = tuple(range(len(shape)))
    return plan_blockwise(op, tuple(shape), dtype, [(x, axes) for x in inputs],
                          budget=budget, workers=workers)


def elementwise_graph(kernel: str, out: StoreSpec, inputs: tuple,
                      scalars: tuple = ()) -> tuple[dict, list]:
    """out = kernel(*inputs, *scalars), one task per output chunk."""
    name = key_name(kernel, out.path, [x.path for x in inputs], scalars)
    graph, keys = {}, []
    for i, region in enumerate(regions(out.shape, out.chunks)):
        key = (name, i)
        graph[key] = (tasks.elementwise_block, kernel, out, region, tuple(inputs), tuple(scalars))
        keys.append(key)
    return graph, keys


def fill_graph(out: StoreSpec, value) -> tuple[dict, list]:
    """Every element of out set to a scalar (the cotangent of a sum)."""
    name = key_name("fill", out.path, value)
    graph = {(name, i): (tasks.fill_block, out, region, value)
             for i, region in enumerate(regions(out.shape, out.chunks))}
    return graph, list(graph)


def transpose_chunks(source: StoreSpec, axes: tuple, budget: int, workers: int,
                     op: str = "transpose", out_unit: tuple | None = None,
                     out_copies: int = 2) -> tuple[tuple, memory.TileCost]:
    """Output tiles for a permuted copy (see :func:`jask.plan.plan_blockwise`):
    a task holds the tile read, its transposed copy and what writing it
    takes. ``out_unit``: tiles of whole write units of an existing output.

    Example:
      >>> x = StoreSpec("", (1000, 2000), np.dtype("float32"), (1000, 250))
      >>> tile, cost = transpose_chunks(x, (1, 0), 10**8, 2)
      >>> tile[1] % 1000 == 0 or tile[1] == 1000, cost.total <= 10**8
      (True, True)
    """
    from jask.plan import plan_blockwise
    shape = tuple(source.shape[a] for a in axes)
    follows = tuple(int(i) for i in np.argsort(axes))  # source axis i is output axis follows[i]
    return plan_blockwise(op, shape, source.dtype, [(source, follows)], budget=budget,
                          workers=workers, out_copies=out_copies, out_unit=out_unit)


def copy_chunks(target: StoreSpec, source: StoreSpec, budget: int, workers: int,
                op: str = "update_") -> tuple[tuple, memory.TileCost]:
    """Tiles for copying ``source`` into the existing layout of ``target``:
    whole shards (or chunks) of the target per task, so no two tasks write
    one shard; writing through Zarr holds the encoded bytes (and a shard's
    assembly) besides the tile.

    Example:
      >>> x = StoreSpec("", (1000, 1000), np.dtype("float32"), (250, 1000))
      >>> copy_chunks(x, x, 10**8, 2)[0][0] % 250
      0
    """
    model = memory.model_of(target)
    return transpose_chunks(source, tuple(range(len(source.shape))), budget, workers, op=op,
                            out_unit=model.write_unit or tuple(target.chunks),
                            out_copies=model.write_copies)


def transpose_graph(out: StoreSpec, source: StoreSpec, axes: tuple, op: str = "transpose",
                    tile: tuple | None = None):
    """out = transpose(source, axes), one task per output tile (default:
    per output chunk)."""
    name = key_name(op, out.path, source.path, axes)
    graph = {(name, i): (tasks.copy_block, out, region, source, tuple(axes))
             for i, region in enumerate(regions(out.shape, tile or out.chunks))}
    return graph, list(graph)


def copy_graph(out: StoreSpec, source: StoreSpec, op: str = "update", tile: tuple | None = None):
    """out = source, one task per tile (default: per chunk of out)."""
    return transpose_graph(out, source, tuple(range(len(out.shape))), op=op, tile=tile)


def _tree(graph: dict, op: str, token_parts: tuple, leaves: list, finish) -> object:
    """Add a bounded fan-in tree summing ``leaves``; return the root key."""
    combine = key_name(op, *token_parts, stage="combine")
    level, depth = leaves, 0
    while len(level) > 1:
        depth += 1
        nxt = []
        for i in range(0, len(level), FAN_IN):
            key = (combine, depth, i // FAN_IN)
            graph[key] = (tasks.combine, *level[i:i + FAN_IN])
            nxt.append(key)
        level = nxt
    root = (key_name(op, *token_parts, stage="result"),)
    graph[root] = (finish, level[0])
    return root


def _as_scalar(x):
    return np.asarray(x)


def reduction_cost(op: str, stores, workers: int) -> memory.TileCost:
    """What one task of a chunk-by-chunk reduction (sum, vdot) holds."""
    tile = stores[0].chunks
    return memory.task_cost(op, tile, [(x, tile) for x in stores], 0, 0, workers)


def sum_graph(source: StoreSpec, op: str = "sum") -> tuple[dict, list]:
    """A tree reduction of every element of ``source`` to one scalar."""
    name = key_name(op, source.path)
    graph = {(name, i): (tasks.sum_block, source, region)
             for i, region in enumerate(regions(source.shape, source.chunks))}
    root = _tree(graph, op, (source.path,), list(graph), _as_scalar)
    return graph, [root]


def vdot_graph(a: StoreSpec, b: StoreSpec, op: str = "vdot") -> tuple[dict, list]:
    """sum(a * b) as a tree reduction (the gradient of a scale factor)."""
    name = key_name(op, a.path, b.path)
    graph = {(name, i): (tasks.vdot_block, a, b, region)
             for i, region in enumerate(regions(a.shape, a.chunks))}
    root = _tree(graph, op, (a.path, b.path), list(graph), _as_scalar)
    return graph, [root]


# --- dot ---------------------------------------------------------------------

def _matrix(store: StoreSpec, transposed: bool) -> tuple[int, int, int, int]:
    """(rows, cols, row_chunk, col_chunk) of a matrix operand as used."""
    r, c = store.shape[-2:]
    cr, cc = store.chunks[-2:]
    return (c, r, cc, cr) if transposed else (r, c, cr, cc)


def _dot_tiles(a, b, ta, tb, itemsize, budget, workers):
    """Candidate (tm, tn, tk) tiles, best first: the operands' own chunks
    (chunk-aligned reads), square tiles of the default chunk size, then the
    chunk-based tile halved (halves of a chunk still read one chunk each)."""
    m, k, cm, ck = _matrix(a, ta)
    _, n, ck2, cn = _matrix(b, tb)
    aligned = (cm, cn, min(k, min(ck, ck2)))
    yield aligned
    yield cm, cn, min(k, max(ck, ck2))
    side = max(1, math.isqrt(memory.chunk_bytes(budget, workers) // itemsize))
    yield min(m, side), min(n, side), min(k, side)
    yield from memory.shrinking(aligned)
    yield m, n, k  # one task per batch entry: always within the task bound


def dot_plan(a: StoreSpec, b: StoreSpec, ta: bool, tb: bool, out_dtype,
             budget: int, workers: int) -> tuple[tuple, int, int, memory.TileCost]:
    """Output chunks, the contraction tile, how many ways to split K, and
    the cost of one task.

    A task holds one tile of each operand (as read: twice), the running sum
    and the product of the current pair. A product with fewer output tiles
    than twice the workers splits the contraction among several tasks whose
    partial sums a bounded fan-in tree adds before writing.
    """
    m, k = _matrix(a, ta)[:2]
    n = _matrix(b, tb)[1]
    batch = a.shape[:-2]
    ones = (1,) * len(batch)
    itemsize = np.dtype(out_dtype).itemsize
    smallest = memory.min_tile_bytes(budget)
    bound = memory.task_bound(math.prod(batch) * (m * k + k * n) * itemsize, budget)
    cost = None
    for tm, tn, tk in _dot_tiles(a, b, ta, tb, itemsize, budget, workers):
        tm, tn, tk = min(tm, m), min(tn, n), min(tk, k)
        a_tile = ones + ((tk, tm) if ta else (tm, tk))
        b_tile = ones + ((tn, tk) if tb else (tk, tn))
        out_bytes = tm * tn * itemsize
        n_out = math.prod(batch) * math.ceil(m / tm) * math.ceil(n / tn)
        # tiles too small to be worth a read, or graphs too large: never planned
        whole = (tm, tn, tk) == (m, n, k)
        if not whole and (2 * tm * tk * itemsize < min(smallest, m * k * itemsize)
                          or n_out * math.ceil(k / tk) > bound):
            continue
        splits = 1
        if n_out < 2 * workers:
            splits = max(1, min(math.ceil(k / tk), (2 * workers) // max(n_out, 1)))
        # accumulator, product of the current pair, encoded output
        cost = memory.task_cost("dot", (tm, tn, tk), [(a, a_tile), (b, b_tile)], out_bytes, 3, 1)
        # partial sums waiting for their combine task, and the op's own overhead
        waiting = (FAN_IN * out_bytes if splits > 1 else 0) + memory.op_overhead(budget)
        at_once = min(workers, (budget - waiting) // max(cost.task_bytes, 1))
        if at_once >= 1:  # fewer tasks at once before smaller tiles
            return ones + (tm, tn), tk, splits, dataclasses.replace(
                cost, fixed=waiting, tasks_at_once=at_once, tasks=n_out * splits)
    memory.check_fits(cost, budget - waiting)
    raise memory.BudgetError(
        f"jask.dot: partial sums of {FAN_IN} x {out_bytes} bytes do not fit the budget "
        f"of {budget} bytes")


def dot_graph(out: StoreSpec, a: StoreSpec, b: StoreSpec, ta: bool, tb: bool,
              tk: int, splits: int, op: str = "dot") -> tuple[dict, list]:
    """out[..., i, j] = sum_k a[..., i, k] @ b[..., k, j], streaming k.

    Each task holds one tile of a, one of b and an accumulator; with
    ``splits > 1`` the k tiles are shared among tasks whose partial products
    a bounded fan-in tree adds before writing.
    """
    token_parts = (out.path, a.path, b.path, ta, tb)
    name = key_name(op, *token_parts)
    partial = key_name(op, *token_parts, stage="partial")
    combine = key_name(op, *token_parts, stage="combine")
    k = _matrix(a, ta)[1]
    ks = [slice(s, min(s + tk, k)) for s in range(0, k, tk)]
    size = math.ceil(len(ks) / max(splits, 1))  # contiguous runs of k: sequential reads
    groups = [tuple(ks[i:i + size]) for i in range(0, len(ks), size)]
    graph, keys = {}, []
    for t, region in enumerate(regions(out.shape, out.chunks)):
        batch, rows, cols = region[:-2], region[-2], region[-1]
        if len(groups) == 1:
            key = (name, t)
            graph[key] = (tasks.dot_block, out, a, b, ta, tb, batch, rows, cols, groups[0])
            keys.append(key)
            continue
        parts = []
        for g, group in enumerate(groups):
            part = (partial, t, g)
            graph[part] = (tasks.dot_partial, a, b, ta, tb, batch, rows, cols, group)
            parts.append(part)
        while len(parts) > FAN_IN:
            parts = [_combine_key(graph, combine, t, parts[i:i + FAN_IN], i)
                     for i in range(0, len(parts), FAN_IN)]
        key = (name, t)
        graph[key] = (tasks.dot_combine, out, region, *parts)
        keys.append(key)
    return graph, keys


def _combine_key(graph, combine, t, parts, i):
    key = (combine, t, len(graph), i)
    graph[key] = (tasks.combine, *parts)
    return key
