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

from jask.base import memory
from jask.engine import tasks
from jask.store import chunkio
from jask.store.spec import StoreSpec

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


def transpose_chunks(source: StoreSpec, axes: tuple, budget: int, workers: int,
                     op: str = "transpose", out_unit: tuple | None = None,
                     out_copies: int = 2) -> tuple[tuple, memory.TileCost]:
    """Output tiles for a permuted copy (see :func:`jask.engine.plan.plan_blockwise`):
    a task holds the tile read, its transposed copy and what writing it
    takes. ``out_unit``: tiles of whole write units of an existing output.

    Example:
      >>> x = StoreSpec("", (1000, 2000), np.dtype("float32"), (1000, 250))
      >>> tile, cost = transpose_chunks(x, (1, 0), 10**8, 2)
      >>> tile[1] % 1000 == 0 or tile[1] == 1000, cost.total <= 10**8
      (True, True)
    """
    from jask.engine.plan import plan_blockwise
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
    model = chunkio.read_model(target)
    return transpose_chunks(source, tuple(range(len(source.shape))), budget, workers, op=op,
                            out_unit=model.write_unit or tuple(target.chunks),
                            out_copies=model.write_copies)


def transpose_graph(out: StoreSpec, source: StoreSpec, axes: tuple, op: str = "transpose",
                    tile: tuple | None = None):
    """out = transpose(source, axes), one task per output tile (default:
    per output chunk)."""
    return chunk_graph(op, out, tasks.copy_block, source, tuple(axes), tile=tile)


def copy_graph(out: StoreSpec, source: StoreSpec, op: str = "update", tile: tuple | None = None):
    """out = source, one task per tile (default: per chunk of out)."""
    return transpose_graph(out, source, tuple(range(len(out.shape))), op=op, tile=tile)


# --- slicing and joining ----------------------------------------------------------

def chunk_graph(op: str, out: StoreSpec, task, *args, tile: tuple | None = None
                ) -> tuple[dict, list]:
    """One task per chunk of ``out`` (or per ``tile``): ``task(out, region, *args)``.

    Example:
      >>> out = StoreSpec("o", (5,), np.dtype("f4"), (2,))
      >>> graph, keys = chunk_graph("fill", out, print, 0.0)
      >>> [task[2] for task in graph.values()]
      [(slice(0, 2, None),), (slice(2, 4, None),), (slice(4, 5, None),)]
    """
    name = key_name(op, out.path)
    graph = {(name, i): (task, out, region, *args)
             for i, region in enumerate(regions(out.shape, tile or out.chunks))}
    return graph, list(graph)


def slice_graph(out: StoreSpec, source: StoreSpec, sizes: tuple, starts: tuple):
    """out = source[index], one task per output chunk (see tasks.slice_block)."""
    return chunk_graph("slice", out, tasks.slice_block, source, sizes, starts)


def scatter_graph(out: StoreSpec, g: StoreSpec, sizes: tuple, starts: tuple):
    """out = zeros with g placed where a slice took it, one task per chunk."""
    return chunk_graph("slice_vjp", out, tasks.scatter_block, g, sizes, starts)


def reshape_graph(out: StoreSpec, source: StoreSpec, op: str = "reshape"):
    """out = source reshaped (C order), one task per band of out's rows."""
    name = key_name(op, out.path)
    rows = out.chunks[0]
    graph = {(name, i): (tasks.reshape_block, out, slice(s, min(s + rows, out.shape[0])), source)
             for i, s in enumerate(range(0, out.shape[0], rows))}
    return graph, list(graph)


def concatenate_graph(out: StoreSpec, inputs: tuple, axis: int, stack: bool):
    """out = inputs joined along axis, one task per output chunk."""
    return chunk_graph("concatenate", out, tasks.concatenate_block, inputs, axis, stack)


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
        reads = [(chunkio.read_model(a), a_tile), (chunkio.read_model(b), b_tile)]
        cost = memory.task_cost("dot", (tm, tn, tk), reads, out_bytes, 3, 1)
        # partial sums waiting for their combine task, and the op's own overhead
        waiting = (FAN_IN * out_bytes if splits > 1 else 0) + memory.op_overhead(budget)
        at_once = min(workers, (budget - waiting) // max(cost.task_bytes, 1))
        if at_once >= 1:  # fewer tasks at once before smaller tiles
            return ones + (tm, tn), tk, splits, dataclasses.replace(
                cost, fixed=waiting, tasks_at_once=at_once, tasks=n_out * splits)
    # the last candidate, the whole product, is never skipped
    assert cost is not None, "dot_plan: no tile planned"
    memory.check_fits(cost, budget - waiting)
    raise memory.BudgetError(
        f"jask.dot: partial sums of {FAN_IN} x {out_bytes} bytes do not fit the budget "
        f"of {budget} bytes")


def dot_graph(out: StoreSpec | None, a: tasks.Matrix, b: tasks.Matrix, view_shape: tuple,
              chunks: tuple, k: int, tk: int, splits: int, token: str, *, squeeze: tuple = (),
              shape: tuple = (), dtype=None, op: str = "dot") -> tuple[dict, list]:
    """op(a) @ op(b) over output tiles ``chunks`` of ``view_shape``, streaming k.

    Each task holds one tile of a, one of b and an accumulator; with
    ``splits > 1`` the k tiles are shared among tasks whose partial products
    a bounded fan-in tree adds before writing. The product's view has the
    vector operands' missing axes (``squeeze``), dropped as tiles are
    written. With ``out=None`` the (small) product of ``shape`` is
    assembled in memory.
    """
    name = key_name(op, token)
    partial = key_name(op, token, stage="partial")
    combine = key_name(op, token, stage="combine")
    ks = [slice(s, min(s + tk, k)) for s in range(0, k, tk)]
    size = math.ceil(len(ks) / max(splits, 1))  # contiguous runs of k: sequential reads
    groups = [tuple(ks[i:i + size]) for i in range(0, len(ks), size)]
    graph: dict[tuple, tuple] = {}
    keys: list[tuple] = []
    out_regions = list(regions(view_shape, chunks))
    for t, region in enumerate(out_regions):
        batch, rows, cols = region[:-2], region[-2], region[-1]
        if len(groups) == 1:
            key = (name, t)
            graph[key] = (tasks.dot_block, out, squeeze, a, b, batch, rows, cols, groups[0])
            keys.append(key)
            continue
        parts = []
        for g, group in enumerate(groups):
            part = (partial, t, g)
            graph[part] = (tasks.dot_partial, a, b, batch, rows, cols, group)
            parts.append(part)
        while len(parts) > FAN_IN:
            parts = [_combine_key(graph, combine, t, parts[i:i + FAN_IN], i)
                     for i in range(0, len(parts), FAN_IN)]
        key = (name, t)
        graph[key] = (tasks.dot_combine, out, squeeze, region, *parts)
        keys.append(key)
    if out is not None:
        return graph, keys
    root = (key_name(op, token, stage="result"),)
    graph[root] = (tasks.dot_assemble, view_shape, shape, dtype, out_regions, *keys)
    return graph, [root]


def _combine_key(graph, combine, t, parts, i):
    key = (combine, t, len(graph), i)
    graph[key] = (tasks.combine, *parts)
    return key
