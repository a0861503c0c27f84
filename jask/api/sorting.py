"""Sorting and searching: ``sort``, ``argsort`` along an axis, ``searchsorted``, ``unique_*``.

``sort`` and ``argsort`` write a new DiskArray of ``x``'s shape; each task
holds whole lanes of the sorted axis for a block of the other axes (a lane
that does not fit in the memory budget is refused, naming the budget).
Ties, NaNs and ``descending`` follow jax.numpy exactly (a stable sort, NaNs
last, ``-0.0`` equal to ``0.0``). ``sort``'s gradient is jax's: the
cotangent gathered back by the order the sort put elements in.
With no DiskArray operand each is its ``jax.numpy`` counterpart.

``unique_values``, ``unique_counts``, ``unique_inverse`` and ``unique_all`` do
not sort (a sort holds whole lanes, and the flattened array is one lane): they
read the array once, a band of whole rows at a time, and merge each band's
unique elements into those found so far, which are held in memory.
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import elementwise, scans
from jask.api.elementwise import check_in_memory
from jask.api.indexing import reshape
from jask.base import memory
from jask.base.config import Config, get_config
from jask.base.sizes import exact_bytes
from jask.core import primitives
from jask.core.array import DiskArray, DiskArrayType, disk_type

__all__ = ["sort", "argsort", "searchsorted", "unique_values", "unique_counts", "unique_inverse",
           "unique_all"]


def _disk(x) -> DiskArrayType:
    aval = disk_type(x)
    assert aval is not None  # the callers checked that x is a DiskArray
    return aval


def _axis(op: str, x, axis):
    """(x, axis) with ``axis=None`` as jax.numpy reads it: the flattened array."""
    aval = _disk(x)
    if axis is None:
        if aval.ndim != 1:
            x = reshape(x, (-1,))
        return x, 0
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"jask.{op}: axis must be None or an int, as in jax.numpy, got {axis!r}")
    if aval.ndim == 0:
        raise ValueError(f"jask.{op}: a 0-d array has no axis to sort along (axis={axis})")
    if not -aval.ndim <= axis < max(aval.ndim, 1):
        raise ValueError(f"jask.{op}: axis {axis} is out of range for an array of shape "
                         f"{tuple(aval.shape)}")
    return x, int(axis) % max(aval.ndim, 1)


@functools.lru_cache(maxsize=128)
def _index_dtype(shape: tuple, dtype: np.dtype, axis: int, x64: bool) -> np.dtype:
    struct = jax.ShapeDtypeStruct(shape, dtype)
    return np.dtype(jax.eval_shape(lambda v: jnp.argsort(v, axis=axis), struct).dtype)


def sort(x, axis=-1, *, descending: bool = False, stable: bool = True,
         config: Config | None = None):
    """``x`` sorted along ``axis`` (``None``: flattened), as ``jax.numpy.sort``.

    A new DiskArray of ``x``'s shape and dtype. Each task sorts whole lanes
    of the axis for a block of the other axes, within the memory budget;
    one lane larger than the budget allows is refused. NaNs sort last (first
    when ``descending``), and the sort is stable (``stable=False`` gives the
    same result). Differentiable: the gradient puts each cotangent element
    back where its value came from (two passes: the order, then the scatter).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[3.0, 1.0, 2.0], [0.0, np.nan, -1.0]], np.float32))
      >>> jask.sort(x).to_numpy()
      array([[ 1.,  2.,  3.],
             [-1.,  0., nan]], dtype=float32)
      >>> jask.sort(x, axis=0, descending=True).to_numpy()
      array([[ 3., nan,  2.],
             [ 0.,  1., -1.]], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.sort(x, axis=axis, descending=descending, stable=stable)
    x, axis = _axis("sort", x, axis)
    aval = _disk(x)
    return primitives.sort(x, axis, "sort", aval.dtype, descending=descending, config=config)


def argsort(x, axis=-1, *, descending: bool = False, stable: bool = True,
            config: Config | None = None):
    """Indices that sort ``x`` along ``axis``, as ``jax.numpy.argsort``:
    int32 (int64 in JAX's x64 mode), equal elements in their original order
    (also when ``descending``), NaNs last (first when ``descending``). A new
    DiskArray, computed as :func:`sort` is; not differentiable.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([3.0, 1.0, 3.0, 2.0], np.float32))
      >>> jask.argsort(x).to_numpy()
      array([1, 3, 0, 2], dtype=int32)
      >>> jask.argsort(x, descending=True).to_numpy()
      array([0, 2, 3, 1], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.argsort(x, axis=axis, descending=descending, stable=stable)
    x, axis = _axis("argsort", x, axis)
    aval = _disk(x)
    dtype = _index_dtype(tuple(aval.shape), np.dtype(aval.dtype), axis,
                         bool(jax.config.read("jax_enable_x64")))
    return primitives.sort(x, axis, "argsort", dtype, descending=descending, config=config)


def searchsorted(a, v, side: str = "left", sorter=None, *, config: Config | None = None):
    """Where the values ``v`` would be inserted into the sorted 1-D array
    ``a`` to keep it sorted, as ``jax.numpy.searchsorted`` (``side="left"``:
    before equal elements, ``"right"``: after them; NaNs sort last).

    Either may be a DiskArray or in memory (an in-memory one is sent to
    every task: at most a quarter of the budget). Each task takes a tile of
    ``v`` and reads ``a`` one chunk at a time, adding up the counts that
    binary searches in each chunk give (so ``a`` is read once per tile of
    ``v``: few tiles when ``v`` is small). The result has ``v``'s shape, int32 (int64
    in JAX's x64 mode): a DiskArray when ``v`` is one, else in memory.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.array([1.0, 2.0, 2.0, 5.0], np.float32))
      >>> jask.searchsorted(a, np.array([2.0, 6.0, 0.0], np.float32))
      Array([1, 4, 0], dtype=int32)
      >>> jask.searchsorted(a, np.array([2.0], np.float32), side="right")
      Array([3], dtype=int32)
    """
    A, V = disk_type(a), disk_type(v)
    if A is None and V is None:
        return jnp.searchsorted(a, v, side=side, sorter=sorter)
    return _search(a, v, side, sorter, None, config)


def _search(a, v, side: str, sorter, out_dtype, config: Config | None):
    """:func:`searchsorted` with a DiskArray, its result in ``out_dtype``
    (None: jax.numpy's)."""
    A, V = disk_type(a), disk_type(v)
    if sorter is not None:
        raise NotImplementedError("jask.searchsorted: sorter is not supported; pass the "
                                  "sorted array (jask.sort(a)) instead")
    if side not in ("left", "right"):
        raise ValueError(f"jask.searchsorted: side must be 'left' or 'right', got {side!r}")
    a_shape = tuple(A.shape) if A is not None else np.shape(a)
    if len(a_shape) != 1:
        raise ValueError(f"jask.searchsorted: a must be 1-D, got shape {a_shape}")
    if A is None:
        a = jnp.asarray(a)
    if V is None:
        v = jnp.asarray(v)
    cfg = config or get_config()
    for name, x, aval in (("a", a, A), ("v", v, V)):
        if aval is None:
            check_in_memory("searchsorted", x, cfg)
    a_dtype = np.dtype(A.dtype if A is not None else a.dtype)
    v_dtype = np.dtype(V.dtype if V is not None else v.dtype)
    v_shape = tuple(V.shape if V is not None else v.shape)
    compute = np.dtype(jnp.promote_types(a_dtype, v_dtype))
    out = np.dtype(out_dtype) if out_dtype is not None else np.dtype(jax.eval_shape(
        lambda x, y: jnp.searchsorted(x, y, side=side),
        jax.ShapeDtypeStruct(a_shape, a_dtype), jax.ShapeDtypeStruct(v_shape, v_dtype)).dtype)
    return primitives.searchsorted(v, a, side, compute, out, config=config)


def _bands(x, config: Config | None, per_element: int, offset: int = 0):
    """(offset in C order, numpy values) of ``x`` flattened, read a band of
    whole leading rows at a time (views: nothing is copied), each band at
    most the in-memory share of the budget over ``per_element`` bytes; a
    row longer than that is read the same way, row by row."""
    if disk_type(x) is None:  # a small row jask's indexing answered in memory
        yield offset, np.asarray(x).reshape(-1)
        return
    aval = _disk(x)
    if math.prod(aval.shape) == 0:
        return
    row = math.prod(aval.shape[1:])
    elements = max(1, memory.in_memory_limit(config) // per_element)
    if aval.ndim > 1 and row > elements:
        for r in range(aval.shape[0]):
            yield from _bands(x[r], config, per_element, offset + r * row)
        return
    rows = max(1, elements // row)
    for start in range(0, aval.shape[0], rows):
        part = np.asarray(primitives.materialize(x[start:start + rows], config=config))
        yield offset + start * row, part.reshape(-1)


def _uniques(x, op: str, config: Config | None):
    """(values, first positions in ``x`` flattened, counts) of ``x``'s unique
    elements, sorted, as jax.numpy's ``unique_all`` has them: NaNs each their
    own (last, in order of position), ``-0.0`` and ``0.0`` one (the value at
    its first position). One read of ``x``, band by band: each band's unique
    elements merged into those so far, which are held in memory; more of
    them than its share of the budget holds is a MemoryError, raised before
    reading on."""
    aval = _disk(x)
    dtype = np.dtype(aval.dtype)
    limit = memory.in_memory_limit(config)
    values, first, counts = np.empty(0, dtype), np.empty(0, np.int64), np.empty(0, np.int64)
    nans: list[np.ndarray] = []
    held = 0
    for offset, part in _bands(x, config, dtype.itemsize + 24):
        where = np.arange(part.size, dtype=np.int64) + offset
        if dtype.kind == "f":
            isnan = np.isnan(part)
            if isnan.any():
                nans.append(where[isnan])
                part, where = part[~isnan], where[~isnan]
        v, i, c = np.unique(part, return_index=True, return_counts=True)
        merged = np.concatenate([values, part[i]])
        at = np.concatenate([first, where[i]])
        both = np.concatenate([counts, c])
        values, j, inverse = np.unique(merged, return_index=True, return_inverse=True)
        values, first = merged[j], at[j]  # the earlier of equal values: the one seen first
        counts = np.bincount(inverse.reshape(-1), weights=both, minlength=values.size
                             ).astype(np.int64)
        held = values.size + sum(a.size for a in nans)
        if held * (dtype.itemsize + 16) > limit:
            raise MemoryError(
                f"jask.{op}: a DiskArray of shape {tuple(aval.shape)} has more unique values "
                f"than the in-memory share of the budget ({exact_bytes(limit)}) holds (over "
                f"{held} so far); its unique values are held in memory")
    if nans:
        where = np.concatenate(nans)
        values = np.concatenate([values, np.full(where.size, np.nan, dtype)])
        first = np.concatenate([first, where])
        counts = np.concatenate([counts, np.ones(where.size, np.int64)])
    return values, first, counts


def _unique_index_dtype(aval) -> np.dtype:
    return _index_dtype(tuple(aval.shape), np.dtype(aval.dtype), max(aval.ndim - 1, 0),
                        bool(jax.config.read("jax_enable_x64"))) if aval.ndim else \
        np.dtype(jnp.int64 if jax.config.read("jax_enable_x64") else jnp.int32)


def _check_concrete(op: str, x) -> None:
    if not isinstance(x, DiskArray):
        raise TypeError(f"jask.{op} of a traced DiskArray (inside jax.jit): the number of "
                        "unique values depends on the data; call it outside jit (or use "
                        "jax.numpy's with size= on an in-memory array)")


def unique_values(x, *, config: Config | None = None):
    """The unique elements of ``x`` (flattened), sorted, as
    ``jax.numpy.unique_values``: NaNs each their own, ``-0.0`` and ``0.0``
    one. For a DiskArray, out of core: one read of ``x`` band by band, each
    band's unique elements merged into those so far; the result (in memory,
    a ``jax.Array``) must fit the in-memory share of the budget. Outside
    ``jax.jit`` only.

    Example:
      >>> import numpy as np, jask
      >>> jask.unique_values(jask.from_numpy(np.array([[3, 1], [3, 2]], np.int32)))
      Array([1, 2, 3], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.unique_values(x)
    _check_concrete("unique_values", x)
    values, _, _ = _uniques(x, "unique_values", config)
    return jnp.asarray(values)


def unique_counts(x, *, config: Config | None = None):
    """``(values, counts)`` of ``x``'s unique elements, as
    ``jax.numpy.unique_counts``, computed as :func:`unique_values` is (both
    in memory).

    Example:
      >>> import numpy as np, jask
      >>> jask.unique_counts(jask.from_numpy(np.array([3, 1, 3], np.int32))).counts
      Array([1, 2], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.unique_counts(x)
    _check_concrete("unique_counts", x)
    values, _, counts = _uniques(x, "unique_counts", config)
    counts = counts.astype(_unique_index_dtype(_disk(x)))
    return _UniqueCounts(jnp.asarray(values), jnp.asarray(counts))


def _inverse(x, values: np.ndarray, config):
    """Where each element of ``x`` is in ``values`` (x's shape, a DiskArray):
    a search of the sorted values (in memory) tile by tile; the k-th NaN of
    ``x`` (in C order) is the k-th NaN of ``values``."""
    aval = _disk(x)
    # jax.numpy's index dtype (int64 with x64 on), where its searchsorted gives int32
    found = _search(jnp.asarray(values), x, "left", None, _unique_index_dtype(aval), config)
    nans = int(np.count_nonzero(np.isnan(values))) if values.dtype.kind == "f" else 0
    if nans == 0:
        return found
    flat = x if aval.ndim == 1 else reshape(x, (-1,), config=config)
    isnan = elementwise.isnan(flat, config=config)
    k = scans.cumsum(elementwise.astype(isnan, found.dtype, config=config), config=config)
    slot = elementwise.add(k, np.asarray(values.size - nans - 1, found.dtype), config=config)
    if aval.ndim != 1:
        slot = reshape(slot, tuple(aval.shape), config=config)
        isnan = elementwise.isnan(x, config=config)
    return elementwise.where(isnan, slot, found, config=config)


def unique_inverse(x, *, config: Config | None = None):
    """``(values, inverse_indices)``, as ``jax.numpy.unique_inverse``:
    ``values[inverse_indices]`` is ``x``. ``values`` in memory (as
    :func:`unique_values`), ``inverse_indices`` a DiskArray of ``x``'s shape
    (one search of the sorted values per tile of ``x``).

    Example:
      >>> import numpy as np, jask
      >>> r = jask.unique_inverse(jask.from_numpy(np.array([3, 1, 3], np.int32)))
      >>> r.inverse_indices.to_numpy()
      array([1, 0, 1], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.unique_inverse(x)
    _check_concrete("unique_inverse", x)
    values, _, _ = _uniques(x, "unique_inverse", config)
    return _UniqueInverse(jnp.asarray(values), _inverse(x, values, config))


def unique_all(x, *, config: Config | None = None):
    """``(values, indices, inverse_indices, counts)``, as
    ``jax.numpy.unique_all``: ``indices`` the first position of each value in
    ``x`` flattened (kept beside each value as the bands are merged), in
    memory as ``values`` and ``counts`` are;
    ``inverse_indices`` as :func:`unique_inverse`'s.

    Example:
      >>> import numpy as np, jask
      >>> jask.unique_all(jask.from_numpy(np.array([3, 1, 3], np.int32))).indices
      Array([1, 0], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.unique_all(x)
    _check_concrete("unique_all", x)
    values, first, counts = _uniques(x, "unique_all", config)
    dtype = _unique_index_dtype(_disk(x))
    return _UniqueAll(jnp.asarray(values), jnp.asarray(first.astype(dtype)),
                      _inverse(x, values, config), jnp.asarray(counts.astype(dtype)))


class _UniqueCounts(NamedTuple):
    values: Any
    counts: Any


class _UniqueInverse(NamedTuple):
    values: Any
    inverse_indices: Any


class _UniqueAll(NamedTuple):
    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any
