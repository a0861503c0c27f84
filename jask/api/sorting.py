"""Sorting and searching: ``sort``, ``argsort`` along an axis, ``searchsorted``.

``sort`` and ``argsort`` write a new DiskArray of ``x``'s shape; each task
holds whole lanes of the sorted axis for a block of the other axes (a lane
that does not fit in the memory budget is refused, naming the budget).
Ties, NaNs and ``descending`` follow jax.numpy exactly (a stable sort, NaNs
last, ``-0.0`` equal to ``0.0``). ``sort``'s gradient is jax's: the
cotangent gathered back by the order the sort put elements in.
With no DiskArray operand each is its ``jax.numpy`` counterpart.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jask.api.elementwise import check_in_memory
from jask.api.indexing import reshape
from jask.base.config import Config, get_config
from jask.core import primitives
from jask.core.array import DiskArrayType, disk_type

__all__ = ["sort", "argsort", "searchsorted"]


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
    out = np.dtype(jax.eval_shape(
        lambda x, y: jnp.searchsorted(x, y, side=side),
        jax.ShapeDtypeStruct(a_shape, a_dtype), jax.ShapeDtypeStruct(v_shape, v_dtype)).dtype)
    return primitives.searchsorted(v, a, side, compute, out, config=config)
