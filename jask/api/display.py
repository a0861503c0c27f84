"""How a DiskArray shows itself in a notebook (``_repr_html_``).

Like a ``dask.array.Array``, a DiskArray draws a table and a chunk-grid
picture (Dask's own SVG): its shape and dtype, its size in memory and on
disk, its chunks, its store and whether jask owns that store, and the tile
an elementwise op on it would use under the current memory budget. The
plain ``repr`` stays one line.
"""
from __future__ import annotations

import html as _html
import math
import os

import dask.array.svg
import dask.utils

from jask.base.config import get_config
from jask.base.memory import BudgetError
from jask.base.sizes import format_bytes
from jask.engine import plan

__all__ = ["html", "fields", "disk_usage", "n_chunks"]

#: The most chunk boundaries per axis handed to Dask's SVG: past a few dozen
#: it fills the grid with one colour anyway, and the tuples would be large.
_MAX_DRAWN_CHUNKS = 1000


def n_chunks(shape: tuple, chunks: tuple) -> int:
    """How many chunks a grid of ``chunks`` over ``shape`` has.

    Example:
      >>> n_chunks((10, 7), (4, 7)), n_chunks((), ())
      (3, 1)
    """
    return math.prod(math.ceil(s / c) if c else 1 for s, c in zip(shape, chunks))


def disk_usage(path: str) -> int:
    """Bytes a folder takes on disk, as ``du`` counts them (allocated blocks).

    Example:
      >>> import pathlib, tempfile
      >>> folder = pathlib.Path(tempfile.mkdtemp())
      >>> _ = (folder / "chunk").write_bytes(b"x" * 5000)
      >>> disk_usage(str(folder)) >= 5000
      True
    """
    total = _allocated(os.stat(path))
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                total += _allocated(entry.stat(follow_symlinks=False))
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


def _allocated(st: os.stat_result) -> int:
    blocks = getattr(st, "st_blocks", None)  # not on every platform
    return st.st_size if blocks is None else blocks * 512


def elementwise_tile(store) -> tuple[tuple, int, int]:
    """The tile an elementwise op on ``store`` would use under the active
    budget: (tile, number of tasks, bytes the concurrent tasks hold).

    Raises :class:`jask.BudgetError` when no tile fits.
    """
    cfg = get_config()
    ndim = len(store.shape)
    # as ``x + x`` plans it: a binary op reads two tiles per task
    tile, cost = plan.plan_blockwise("add", store.shape, store.dtype,
                                     [(store, tuple(range(ndim)))] * 2,
                                     budget=cfg.max_memory, workers=cfg.workers)
    return tuple(tile), n_chunks(store.shape, tile), cost.total


def fields(x) -> dict[str, str]:
    """What the HTML repr of ``x`` (a DiskArray or a tracer of one) shows,
    as label -> text.

    Example:
      >>> import numpy as np, jask
      >>> f = fields(jask.from_numpy(np.zeros((3, 4), np.float32)))
      >>> f["shape"], f["dtype"], f["chunks"], f["owner"].split(":")[0]
      ('(3, 4)', 'float32', '(3, 4) (1 chunk)', 'jask')
    """
    out = {"shape": str(x.shape), "dtype": x.dtype.name,
           "size": format_bytes(x.nbytes)}
    if _traced(x):
        out["store"] = "traced: its store is chosen when the compiled function runs"
        return out
    if x._owner.pending:  # showing it must not compute it (jask.engine.lazy)
        out["store"] = "pending: computed when first needed (its data, filename, a save...)"
        return out
    store = x._store()
    count = n_chunks(store.shape, store.chunks)
    try:
        out["on disk"] = format_bytes(disk_usage(store.path))
    except OSError as err:  # the folder went away under an opened array
        out["on disk"] = f"unavailable: {err}"
    out["chunks"] = f"{store.chunks} ({count} chunk{'s' if count != 1 else ''})"
    out["store"] = store.path
    out["owner"] = ("jask: deleted when no DiskArray refers to it" if store.managed
                    else "opened: jask never deletes it")
    try:
        tile, tasks, held = elementwise_tile(store)
        out["elementwise tile"] = (f"{tile} ({tasks} task{'s' if tasks != 1 else ''}, "
                                   f"{format_bytes(held)} held at once "
                                   f"of a {format_bytes(get_config().max_memory)} "
                                   "budget)")
    except BudgetError as err:
        out["elementwise tile"] = f"none fits: {err}"
    return out


def _traced(x) -> bool:
    """A tracer of a DiskArray, or a DiskArray wrapping one: no store yet."""
    return getattr(x, "_owner", None) is None


def chunk_svg(shape: tuple, chunks: tuple) -> str:
    """Dask's chunk-grid picture, or "" where it has none (0-d, empty axes).

    Example:
      >>> chunk_svg((10, 10), (5, 5)).startswith("<svg")
      True
    """
    drawn = []
    for s, c in zip(shape, chunks):
        c = max(c, math.ceil(s / _MAX_DRAWN_CHUNKS), 1)
        drawn.append((c,) * (s // c) + ((s % c,) if s % c else ()))
    try:
        return dask.array.svg.svg(tuple(drawn), size=120)
    except NotImplementedError:
        return ""


def html(x) -> str:
    """The HTML table and chunk-grid picture a notebook shows for ``x``.

    Example:
      >>> import numpy as np, jask
      >>> "<table" in html(jask.from_numpy(np.zeros((3, 4))))
      True
    """
    rows = "".join(f"<tr><th style='text-align:left'>{_html.escape(k)}</th>"
                   f"<td style='text-align:left'>{_html.escape(v)}</td></tr>"
                   for k, v in fields(x).items())
    table = f"<table><caption>jask.DiskArray</caption>{rows}</table>"
    picture = "" if _traced(x) else chunk_svg(x.shape, x.chunks)
    return (f"<table><tr><td style='vertical-align:top'>{table}</td>"
            f"<td style='vertical-align:top'>{picture}</td></tr></table>")
