"""Slicing and joining DiskArrays: ``x[a:b]``, ``dynamic_slice``,
``concatenate``, ``stack``.

A slice of a DiskArray is a new DiskArray holding a copy of the selected
elements (written tile by tile): later writes to ``x`` through ``update_``
do not change it. Its gradient scatters the cotangent into zeros of
``x``'s shape. The start of each slice is a value, not part of the
program, so ``step(X[i:i + batch])`` compiles once per batch shape.
"""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import elementwise
from jask.base.config import Config
from jask.core import primitives
from jask.core._jax_internals import is_tracer
from jask.core.array import disk_type

__all__ = ["getitem", "dynamic_slice", "concatenate", "stack", "reshape"]

_SUPPORTED = ("jask supports basic indexing of DiskArrays: integers, slices with a positive "
              "step, and ...")


def _index_tuple(index, shape) -> list:
    """The index as one entry per axis (``...`` and missing axes expanded)."""
    index = list(index) if isinstance(index, tuple) else [index]
    if any(i is None for i in index):
        raise IndexError(f"{_SUPPORTED}; np.newaxis / None is not supported (got {index!r})")
    ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = ellipses[0]
        index[at:at + 1] = [slice(None)] * (len(shape) - len(index) + 1)
    if len(index) > len(shape):
        raise IndexError(f"too many indices ({len(index)}) for a DiskArray of shape {shape}")
    return index + [slice(None)] * (len(shape) - len(index))


def _entry(i, n: int, axis: int, shape) -> tuple:
    """(start, (size, step) or None) for one axis of a basic index."""
    if isinstance(i, slice):
        for part in (i.start, i.stop, i.step):
            if part is not None and (is_tracer(part) or not isinstance(part, numbers.Integral)):
                raise IndexError(f"{_SUPPORTED}; slice bounds must be Python ints (got {i!r}); "
                                 "for a start computed inside jit use jask.dynamic_slice")
        start, stop, step = i.indices(n)
        if step <= 0:
            raise IndexError(f"{_SUPPORTED}; got step {i.step} on axis {axis}")
        size = len(range(start, stop, step))
        if size == 0:
            raise IndexError(f"the slice {i!r} of axis {axis} of shape {shape} is empty; "
                             "jask does not make empty DiskArrays")
        return start, (size, step)
    if isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, bool):
        i = int(i)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n} "
                             f"(shape {shape})")
        return int(i) % n, None
    kind = type(i).__name__
    if isinstance(i, (np.ndarray, jax.Array, list)) or is_tracer(i):
        kind = "an array (fancy or boolean indexing)"
    raise IndexError(f"{_SUPPORTED}; got {kind} on axis {axis}")


def getitem(x, index, *, config: Config | None = None):
    """``x[index]`` for a basic index, as a new DiskArray (a copy).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(12.0).reshape(3, 4))
      >>> x[1:, ::2].to_numpy()
      array([[ 4.,  6.],
             [ 8., 10.]])
      >>> x[-1].to_numpy()
      array([ 8.,  9., 10., 11.])
    """
    aval = disk_type(x)
    if aval is None:
        return x[index]
    entries = [_entry(i, n, axis, aval.shape)
               for axis, (i, n) in enumerate(zip(_index_tuple(index, aval.shape), aval.shape))]
    starts = tuple(s for s, _ in entries)
    sizes = tuple(size for _, size in entries)
    if all(size == (n, 1) for size, n in zip(sizes, aval.shape)):
        return x  # x[:] or x[...]: values never change, so no copy is needed
    if not any(size is not None for size in sizes):
        raise IndexError(f"indexing every axis of a DiskArray of shape {aval.shape} with an "
                         "integer gives a scalar: use jask.materialize(x[..., i:i+1]) instead")
    return primitives.take_slice(x, sizes, starts, config=config)


def dynamic_slice(x, start_indices, slice_sizes, *, config: Config | None = None):
    """``jax.lax.dynamic_slice`` for DiskArrays: starts may be traced.

    Starts are clamped so the slice fits, as in ``jax.lax.dynamic_slice``.
    One compiled program serves every start.

    Example:
      >>> import numpy as np, jax, jask
      >>> x = jask.from_numpy(np.arange(10.0))
      >>> f = jax.jit(lambda x, i: jask.dynamic_slice(x, (i,), (3,)))
      >>> f(x, 2).to_numpy(), f(x, 9).to_numpy()
      (array([2., 3., 4.]), array([7., 8., 9.]))
    """
    aval = disk_type(x)
    if aval is None:
        return jax.lax.dynamic_slice(x, start_indices, slice_sizes)
    if len(start_indices) != aval.ndim or len(slice_sizes) != aval.ndim:
        raise ValueError(f"jask.dynamic_slice: need {aval.ndim} starts and sizes for shape "
                         f"{aval.shape}, got {len(start_indices)} and {len(slice_sizes)}")
    for size, n in zip(slice_sizes, aval.shape):
        if not 0 < int(size) <= n:
            raise ValueError(f"jask.dynamic_slice: slice sizes {tuple(slice_sizes)} do not fit "
                             f"shape {aval.shape}")
    starts = [jnp.clip(jnp.asarray(s, np.int32), 0, n - int(size))
              for s, size, n in zip(start_indices, slice_sizes, aval.shape)]
    sizes = tuple((int(size), 1) for size in slice_sizes)
    return primitives.take_slice(x, sizes, starts, config=config)


def _disk(x):
    aval = disk_type(x)
    assert aval is not None
    return aval


def _join(op: str, arrays, axis: int, stack: bool, config):
    arrays = list(arrays)
    if not arrays:
        raise ValueError(f"jask.{op}: need at least one array")
    kinds = [disk_type(x) for x in arrays]
    if all(k is None for k in kinds):
        return (jnp.stack if stack else jnp.concatenate)(arrays, axis=axis)
    shapes = [tuple(k.shape) if k is not None else tuple(np.shape(x))
              for x, k in zip(arrays, kinds)]
    ndim = len(shapes[0])
    out_ndim = ndim + 1 if stack else ndim
    if not -out_ndim <= axis < out_ndim:
        raise ValueError(f"jask.{op}: axis {axis} is out of range for arrays of shape "
                         f"{shapes[0]}")
    axis %= out_ndim
    for s in shapes:
        same = s == shapes[0] if stack else (
            len(s) == ndim and s[:axis] + s[axis + 1:] == shapes[0][:axis] + shapes[0][axis + 1:])
        if not same:
            raise ValueError(f"jask.{op}: shapes {shapes} do not match "
                             f"({'all equal' if stack else 'except along axis ' + str(axis)})")
    # JAX's promotion in the current x64 mode (weak scalars too)
    dtype = np.dtype(jnp.result_type(*[jax.ShapeDtypeStruct(k.shape, k.dtype) if k is not None
                                       else x for x, k in zip(arrays, kinds)]))
    disk = []
    for x, k in zip(arrays, kinds):
        if k is None:
            x = primitives.from_value(jnp.asarray(x).astype(dtype), config=config)
        if _disk(x).dtype != dtype:
            x = elementwise.astype(x, dtype, config=config)
        disk.append(x)
    return primitives.concatenate(disk, axis, stack=stack, config=config)


def concatenate(arrays, axis: int = 0, *, config: Config | None = None):
    """Join arrays along an existing axis, as ``numpy.concatenate``.

    In-memory arrays among them are written to disk first.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.zeros((2, 2)))
      >>> jask.concatenate([a, np.ones((1, 2))]).to_numpy()
      array([[0., 0.],
             [0., 0.],
             [1., 1.]], dtype=float32)
    """
    return _join("concatenate", arrays, axis, False, config)


def stack(arrays, axis: int = 0, *, config: Config | None = None):
    """Join same-shaped arrays along a new axis, as ``numpy.stack``.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.arange(3.0))
      >>> jask.stack([a, a * 2], axis=1).to_numpy()
      array([[0., 0.],
             [1., 2.],
             [2., 4.]], dtype=float32)
    """
    return _join("stack", arrays, axis, True, config)


def reshape(x, *shape, config: Config | None = None):
    """``x`` with a new shape holding the same elements in C order, as
    ``numpy.reshape`` (one dimension may be -1). A DiskArray gives a new
    DiskArray (a copy, written in bands of whole rows: one row of the result
    and the source rows it spans must fit the budget).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(12.0).reshape(2, 3, 2))
      >>> x.reshape(6, 2).to_numpy()[4:]
      array([[ 8.,  9.],
             [10., 11.]])
      >>> jask.reshape(x, (-1,)).shape
      (12,)
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    aval = disk_type(x)
    if aval is None:
        return jnp.reshape(x, shape)
    size = int(np.prod(aval.shape, dtype=np.int64))
    known = [int(n) for n in shape if int(n) != -1]
    if sum(int(n) == -1 for n in shape) > 1 or any(n < 0 for n in known):
        raise ValueError(f"jask.reshape: cannot reshape {aval.shape} into {tuple(shape)}")
    rest = size // max(int(np.prod(known, dtype=np.int64)), 1)
    new = tuple(rest if int(n) == -1 else int(n) for n in shape)
    if int(np.prod(new, dtype=np.int64)) != size or not new or 0 in new:
        raise ValueError(f"jask.reshape: cannot reshape an array of shape {aval.shape} "
                         f"({size} elements) into {tuple(shape)}")
    if new == aval.shape:
        return x
    return primitives.reshape(x, new, config=config)
