"""Graph builders: one function per kind of op, returning a Dask graph.

A graph is a plain dict of block tasks; its keys are named
``jask-<op>-<token>`` so the Dask dashboard groups tiles by op. Each
``*_graph`` builder lays out the tasks of tiles planned beforehand
(:mod:`jask.engine.plan`).
"""
from __future__ import annotations

import itertools

from dask.base import tokenize

from jask.engine import tasks
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


def transpose_graph(out: StoreSpec, source: StoreSpec, axes: tuple, op: str = "transpose",
                    tile: tuple | None = None):
    """out = transpose(source, axes), one task per output tile (default:
    per output chunk)."""
    return chunk_graph(op, out, tasks.copy_block, source, tuple(axes), tile=tile)


def copy_graph(out: StoreSpec, source: StoreSpec, op: str = "update", tile: tuple | None = None):
    """out = source, one task per tile (default: per chunk of out)."""
    return transpose_graph(out, source, tuple(range(len(out.shape))), op=op, tile=tile)


# --- one task per chunk (the layout and gather families' graphs) -----------------

def chunk_graph(op: str, out: StoreSpec, task, *args, tile: tuple | None = None
                ) -> tuple[dict, list]:
    """One task per chunk of ``out`` (or per ``tile``): ``task(out, region, *args)``.

    Example:
      >>> import numpy as np
      >>> out = StoreSpec("o", (5,), np.dtype("f4"), (2,))
      >>> graph, keys = chunk_graph("fill", out, print, 0.0)
      >>> [task[2] for task in graph.values()]
      [(slice(0, 2, None),), (slice(2, 4, None),), (slice(4, 5, None),)]
    """
    name = key_name(op, out.path)
    graph = {(name, i): (task, out, region, *args)
             for i, region in enumerate(regions(out.shape, tile or out.chunks))}
    return graph, list(graph)
