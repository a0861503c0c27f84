"""Slicing, taking and joining DiskArrays: ``x[a:b]``, ``x[i, j]``,
``x[indices]``, ``x[mask]``, ``take``, ``take_along_axis``, ``dynamic_slice``,
``concatenate``, ``stack``.

A slice of a DiskArray with steps of 1 is a view of the same store
(:mod:`jask.store.views`: nothing read or written until an op reads it);
with other steps, a new DiskArray holding a copy of the selected elements
(written tile by tile). Either way later writes to ``x`` through
``update_`` do not change it (a view is copied first). Its gradient
scatters the cotangent into zeros of ``x``'s shape. The start of each
slice is a value, not part of the program, so ``step(X[i:i + batch])``
compiles once per batch shape.
An integer index drops an axis as a reduction does, and its small
results are in-memory values by the reductions' rule (1/8 of the
budget). ``take`` gathers whole positions along an axis by
indices held in memory (traced ones too: one program serves every batch
of indices), its VJP adding the cotangent back where they point. Shapes
that depend on values (``x[mask]``, ``nonzero``) run only on values known
outside ``jit``. ``x[i] = v`` (outside ``jit``) is ``update_`` of
``x.at[i].set(v)``: :func:`scatter` builds the new value, ``update_``'s swap
stores it.
"""
from __future__ import annotations

import math
import numbers
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import elementwise, truth
from jask.api.creation import from_numpy
from jask.api.update import check_in_place, update_
from jask.base import memory
from jask.base.config import Config
from jask.base.sizes import exact_bytes
from jask.core import primitives
from jask.core._jax_internals import is_tracer
from jask.core.array import DiskArray, disk_type
from jask.core.ufuncs import TABLE, Ufunc
from jask.engine.ops.gathers import check_in_bounds

__all__ = ["getitem", "setitem", "scatter", "AT_METHODS", "At", "iterate", "take",
           "take_along_axis", "nonzero", "dynamic_slice", "concatenate", "stack", "reshape"]

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


def _bound(part):
    """A slice bound as a Python int when it is a concrete 0-d integer array
    (``x[:xp.sum(mask)]``: a ``jax.Array``, numpy value, or a one-element
    DiskArray), else as given (refused below when it is no int)."""
    if part is None or isinstance(part, numbers.Integral) or is_tracer(part):
        return part
    if isinstance(part, DiskArray) and part.size == 1 and part.dtype.kind in "iu":
        return int(primitives.materialize(part).reshape(()))
    if isinstance(part, (np.ndarray, np.generic, jax.Array)) and np.ndim(part) == 0 \
            and np.dtype(part.dtype).kind in "iu":
        return int(part)
    return part


def _entry(i, n: int, axis: int, shape) -> tuple:
    """(start, (size, step) or None) for one axis of a basic index."""
    if isinstance(i, slice):
        i = slice(*(_bound(part) for part in (i.start, i.stop, i.step)))
        for part in (i.start, i.stop, i.step):
            if part is not None and (is_tracer(part) or not isinstance(part, numbers.Integral)):
                raise IndexError(f"{_SUPPORTED}; slice bounds must be Python ints (got {i!r}); "
                                 "for a start computed inside jit use jask.dynamic_slice")
        start, stop, step = i.indices(n)
        if step <= 0:
            raise IndexError(f"{_SUPPORTED}; got step {i.step} on axis {axis}")
        return start, (len(range(start, stop, step)), step)
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


def _array_index(entries: list) -> tuple | None:
    """(position, array) of the one array in an index (one entry per axis)
    whose other entries are all ``:``, or None."""
    arrays = [k for k, i in enumerate(entries)
              if isinstance(i, (np.ndarray, jax.Array, list)) or is_tracer(i)
              or disk_type(i) is not None]
    if len(arrays) != 1 or any(i != slice(None) for k, i in enumerate(entries)
                               if k != arrays[0]):
        return None
    return arrays[0], entries[arrays[0]]


def _by_array(x, aval, axis: int, index, config):
    """``x[..., index]`` for one integer or boolean array on ``axis``."""
    if isinstance(index, list):
        index = np.asarray(index)
    if np.dtype(index.dtype) != np.bool_:
        return take(x, index, axis=axis, config=config)
    if disk_type(index) is not None and not is_tracer(index) and not is_tracer(x) \
            and memory.fits_in_memory(_shape_of(index), np.bool_, config):
        index = primitives.materialize(index, config=config)  # a mask on disk, known here
    if is_tracer(index) or disk_type(index) is not None:
        what = ("inside jit its shape depends on the mask's values, known only when it runs"
                if is_tracer(index) or is_tracer(x) else
                f"the mask ({exact_bytes(memory.nbytes(_shape_of(index), np.bool_))}) "
                "is over the in-memory share of the budget, and its shape depends on the "
                "mask's values")
        raise IndexError(
            f"x[mask] on a DiskArray of shape {aval.shape}: {what}; use jask.where(mask, x, 0) "
            "(same shape), or index with a mask computed outside jit")
    mask = np.asarray(index)
    shape = aval.shape[axis:axis + mask.ndim]
    if mask.shape != shape:
        raise IndexError(f"a boolean index of shape {mask.shape} does not match axes "
                         f"{axis}..{axis + mask.ndim - 1} of shape {aval.shape}")
    flat = x if mask.ndim == 1 else reshape(
        x, aval.shape[:axis] + (-1,) + aval.shape[axis + mask.ndim:], config=config)
    where = np.flatnonzero(mask)
    return take(flat, where, axis=axis, config=config)


def getitem(x, index, *, config: Config | None = None):
    """``x[index]``, as a new DiskArray (a view of x's store when every
    slice has step 1, no copy: :mod:`jask.store.views`; else a copy): a
    basic index (integers, slices with a positive step, ``...``), or one
    integer or boolean array
    on one axis (the others ``:``; see :func:`take`). An integer drops its
    axis, as a reduction does, and by the same rule the result is in memory
    when it takes at most 1/8 of the budget (always when every axis has one:
    a 0-d value), a DiskArray beyond: a ``jax.Array`` from this function, and
    from ``x[index]`` (the Array API's indexing: a DiskArray is
    ``jask.array_api``'s array) the namespace's ``InMemoryArray`` around it,
    which jax.numpy takes as it takes a ``jax.Array``.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(12.0).reshape(3, 4))
      >>> x[1:, ::2].to_numpy()
      array([[ 4.,  6.],
             [ 8., 10.]])
      >>> x[-1]
      InMemoryArray(array([ 8.,  9., 10., 11.], dtype=float32))
      >>> getitem(x, -1)
      Array([ 8.,  9., 10., 11.], dtype=float32)
      >>> x[1, 2], x[:, [3, 0]].to_numpy()[0]
      (InMemoryArray(array(6., dtype=float32)), array([3., 0.]))
    """
    aval = disk_type(x)
    if aval is None:
        return x[index]
    if any(i is None for i in (index if isinstance(index, tuple) else (index,))):
        return _with_new_axes(x, index, config)
    index = _index_tuple(index, aval.shape)
    by_array = _array_index(index)
    if by_array is not None:
        return _by_array(x, aval, by_array[0], by_array[1], config)
    if any(_is_array(i) for i in index):
        return _advanced(x, aval, index, config)
    entries = [_entry(i, n, axis, aval.shape)
               for axis, (i, n) in enumerate(zip(index, aval.shape))]
    starts = tuple(s for s, _ in entries)
    sizes = tuple(size for _, size in entries)
    if all(size == (n, 1) for size, n in zip(sizes, aval.shape)):
        return x  # x[:] or x[...]: values never change, so no copy is needed
    if not any(size is not None for size in sizes):
        # a 0-d result lives in memory, as a 0-d reduction's does
        one = primitives.take_slice(x, ((1, 1),) * aval.ndim, starts, config=config)
        return jnp.reshape(primitives.materialize(one, config=config), ())
    part = primitives.take_slice(x, sizes, starts, config=config)
    if None in sizes and _small(disk_type(part), config):
        # an integer drops an axis, as a reduction does: a small result is in memory
        return primitives.materialize(part, config=config)
    return part


def _advanced(x, aval, index: list, config):
    """numpy's advanced indexing with arrays on several axes (or one beside
    integers and steps): each indexed axis narrowed by a gather of the
    positions it uses, then, when that block fits the in-memory share, the
    block in memory indexed by numpy with the positions renumbered. Values
    known outside ``jit`` only."""
    if is_tracer(x) or any(is_tracer(i) for i in index):
        raise IndexError(
            f"x[key] with index arrays on several axes of a DiskArray of shape {aval.shape} "
            "inside jit: jask gathers the positions they name, known only outside jit; use "
            "jask.take on one axis at a time, or index outside jit")
    # the slices first (views when their steps are 1), so the block is only what is named
    sliced = tuple(i if isinstance(i, slice) else slice(None) for i in index)
    block = x if all(i == slice(None) for i in sliced) else getitem(x, sliced, config=config)
    key: list = []
    for axis, i in enumerate(index):
        if not _is_array(i):
            key.append(slice(None) if isinstance(i, slice) else i)
            continue
        if disk_type(i) is not None:
            if not memory.fits_in_memory(_shape_of(i), i.dtype, config):
                raise IndexError(f"x[key]: the index array on axis {axis} "
                                 f"({exact_bytes(memory.nbytes(_shape_of(i), i.dtype))}) is over "
                                 "the in-memory share of the budget")
            i = primitives.materialize(i, config=config)
        i = np.asarray(i)
        n = aval.shape[axis]
        if i.dtype == np.bool_:
            if i.ndim != 1 or len(i) != n:
                raise IndexError(f"a boolean index of shape {i.shape} on axis {axis} beside "
                                 f"other index arrays must be 1-D of length {n}")
            i = np.flatnonzero(i)
        if not np.issubdtype(i.dtype, np.integer):
            raise IndexError(f"{_SUPPORTED}; an index array must be of integers or bools, got "
                             f"{i.dtype} on axis {axis}")
        check_in_bounds(i, n, axis, aval.shape)
        used, renumbered = np.unique(i % n, return_inverse=True)
        if len(used) < n:
            block = take(block, used, axis=axis, config=config)
        key.append(renumbered.reshape(i.shape) if len(used) < n else i % n)
    shape = _shape_of(block)
    if not memory.fits_in_memory(shape, aval.dtype, config):
        raise IndexError(
            f"x[key] with index arrays on several axes of a DiskArray of shape {aval.shape}: "
            f"the {shape} block of the positions they name "
            f"({exact_bytes(memory.nbytes(shape, aval.dtype))}) is over the in-memory share of "
            "the budget; index one axis at a time (x[i][:, j]), each a DiskArray")
    values = block if disk_type(block) is None else primitives.materialize(block, config=config)
    return jnp.asarray(values)[tuple(key)]


def iterate(x, *, config: Config | None = None):
    """``iter(x)``: the subarrays along ``x``'s first axis, as ``x[i]`` gives
    them (in memory when small), read a band of rows at a time outside
    ``jax.jit``; a traced DiskArray cannot be iterated (its values are not
    known), nor a 0-d one.

    Example:
      >>> import numpy as np, jask
      >>> [float(v) for v in jask.from_numpy(np.array([1.0, 2.0]))]
      [1.0, 2.0]
    """
    aval = disk_type(x)
    if aval is None:
        yield from iter(x)
        return
    if not isinstance(x, DiskArray):
        raise TypeError("iterating over a traced DiskArray (inside jax.jit): its values are "
                        "not known until it runs; use jax.lax.map over jask.dynamic_slice, "
                        "or iterate outside jit")
    if aval.ndim == 0:
        raise TypeError("iteration over a 0-d DiskArray")
    row = aval.shape[1:]
    if not _small(disk_type(getitem(x, slice(0, 1)) if aval.shape[0] else x), config):
        for i in range(aval.shape[0]):  # each row a DiskArray of its own
            yield getitem(x, i, config=config)
        return
    per_row = memory.nbytes(row, aval.dtype) or 1
    rows = max(1, memory.in_memory_limit(config) // per_row)
    for start in range(0, aval.shape[0], rows):
        band = primitives.materialize(getitem(x, slice(start, start + rows)), config=config)
        yield from band


def _small(aval, config: Config | None) -> bool:
    """Whether a result goes to memory, by the rule reductions use."""
    return memory.fits_in_memory(aval.shape, aval.dtype, config)


#: what ``x.at[key].<method>(v)`` does at the selected positions: (x's values, v) -> new
AT_METHODS = {"set": None, "add": elementwise.add, "subtract": elementwise.subtract,
              "multiply": elementwise.multiply, "divide": elementwise.divide,
              "power": elementwise.power, "min": elementwise.minimum,
              "max": elementwise.maximum}


def _is_array(i) -> bool:
    return (isinstance(i, (np.ndarray, jax.Array, list)) or is_tracer(i)
            or disk_type(i) is not None)


def _positions(i, n: int, axis: int, shape, method: str):
    """(positions along the axis as an integer array, whether the axis stays),
    for one entry of an index; positions in memory (jnp when traced)."""
    if isinstance(i, slice) or (isinstance(i, (numbers.Integral, np.integer))
                                and not isinstance(i, bool)):
        start, size = _entry(i, n, axis, shape)
        if size is None:
            return np.asarray([start]), False
        return np.arange(start, start + size[0] * size[1], size[1])[:size[0]], True
    if not _is_array(i):
        return _entry(i, n, axis, shape)  # raises, naming what was given
    if disk_type(i) is not None:
        if not memory.fits_in_memory(_shape_of(i), i.dtype):
            raise MemoryError(f"x[key] = v: the index array on axis {axis} "
                              f"({exact_bytes(memory.nbytes(_shape_of(i), i.dtype))}) "
                              "is over the in-memory share of the budget")
        i = primitives.materialize(i)
    if isinstance(i, list):
        i = np.asarray(i)
    xp = jnp if is_tracer(i) else np
    if np.dtype(i.dtype) == np.bool_:
        if is_tracer(i):
            raise IndexError(f"x.at[mask] with a traced mask on axis {axis}: the number of "
                             "positions depends on its values; use jask.where(mask, v, x)")
        if i.shape != (n,):
            raise IndexError(f"a boolean index of shape {i.shape} on axis {axis} of shape "
                             f"{shape} must have shape ({n},)")
        return np.flatnonzero(np.asarray(i)), True
    if not jnp.issubdtype(i.dtype, jnp.integer) or i.ndim != 1:
        raise IndexError(f"x[key] = v takes 1-D integer or boolean arrays on an axis, got "
                         f"{i.dtype} of shape {tuple(i.shape)} on axis {axis}")
    if xp is np:
        i = np.asarray(i)
        check_in_bounds(i, n, axis, shape)
        if method != "set" and len(np.unique(i % n)) != i.size:
            raise IndexError(f"x.at[key].{method}(v) with repeated indices on axis {axis}: "
                             "each position is updated once here (jax.numpy adds repeats up); "
                             "combine the repeats first")
    return i % n, True


def scatter(x, index, value, method: str = "set", *, config: Config | None = None):
    """``x.at[index].<method>(value)``: a new array, ``x`` with the positions
    ``index`` selects set to ``value`` (``"set"``) or combined with it
    (``"add"``, ``"multiply"``, ``"min"``, ...), as ``jax.numpy``'s ``.at``;
    ``x`` itself is unchanged. Written tile by tile as a ``where`` over ``x``
    (one pass; an index array of one axis is turned into a mask and a gather
    of ``value`` along that axis, both of that axis's length), so it runs on
    arrays of any size and under ``jit``. The index is a basic one (integers,
    slices, ``...``), one 1-D integer or boolean array on one axis, or one
    boolean mask of ``x``'s shape (a DiskArray too). ``value`` broadcasts to
    the selected region and is cast to ``x``'s dtype as numpy's
    ``a[index] = value`` casts it (what numpy refuses, 300 into int8, is
    refused before anything runs); with a mask of more than one axis it is a
    scalar (a where over ``x``, for a mask of any size), or empty where the
    mask selects nothing (numpy's no-op: ``x[x == 0] += 1`` with no zeros). The result has
    ``x``'s dtype (``divide`` of integers: jax.numpy's float dtype) and every
    element ``index`` does not select is ``x``'s, bit for bit: the where runs
    in ``x``'s own dtype, so a float64 store keeps 64 bits with x64 off.
    As in numpy, an index array on one axis selects whole positions along it;
    arrays on several axes (numpy pairs them up) are refused.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.zeros((2, 4)))
      >>> x.at[:, 1::2].set(np.array([1.0, 2.0])).to_numpy()
      array([[0., 1., 0., 2.],
             [0., 1., 0., 2.]])
      >>> x.at[x == 0].add(5.0).to_numpy()[0]
      array([5., 5., 5., 5.])
    """
    aval = disk_type(x)
    if aval is None:
        return getattr(jnp.asarray(x).at[index], method)(value)
    if method not in AT_METHODS:
        raise AttributeError(f"x.at[key] has no method {method!r}; one of "
                             f"{', '.join(AT_METHODS)}")
    shape = tuple(aval.shape)
    dtype = np.dtype(aval.dtype)
    if method in ("set", "power", "divide"):  # jax.numpy casts these values to x's dtype first
        value = _cast_value(value, dtype, method, config)
    elif not is_tracer(value) and disk_type(value) is None \
            and not isinstance(value, (int, float, complex)):  # a Python scalar stays weak
        value = np.asarray(value)  # not yet JAX's: a reshape must not narrow it
    out_dtype = _result_dtype(dtype, method)
    mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    mask_shape = _shape_of(mask) if _is_array(mask) else None
    if mask_shape == shape and np.dtype(mask.dtype) != np.bool_ and len(shape) > 1:
        raise IndexError(f"an integer array of x's shape {shape} is no index of x[key] = v; "
                         "give a boolean mask, or one 1-D index array")
    if mask_shape == shape and np.dtype(mask.dtype) == np.bool_ \
            and (len(shape) > 1 or _size(value) == 1):
        # one mask of x's shape: a where over x, for a mask of any size
        if _size(value) == 0 and _selects_nothing(mask):
            return elementwise.apply_in(_WHERE, out_dtype, True, x, x, config=config)
        if _size(value) != 1:
            raise ValueError(
                f"x[mask] = v with a mask of x's shape {shape}: v must be a scalar here (one "
                f"value per True element, {_size(value)} given, is not supported for a mask "
                "of more than one axis); use x = jask.where(mask, values, x) with values of "
                "x's shape")
        new = _combined(x, value, method, out_dtype, config)
        return elementwise.apply_in(_WHERE, out_dtype, mask, new, x, config=config)
    if any(i is None for i in (index if isinstance(index, tuple) else (index,))):
        raise IndexError("x[key] = v: np.newaxis / None in the key is not supported")
    entries = _index_tuple(index, shape)
    if sum(_is_array(i) for i in entries) > 1:
        raise IndexError("x[key] = v with index arrays on several axes is not supported (numpy "
                         "pairs them up elementwise); use one index array, slices and integers")
    picked = [_positions(i, n, k, shape, method) for k, (i, n) in enumerate(zip(entries, shape))]
    region = tuple(len(p) for p, kept in picked if kept)
    _check_broadcast(value, region, "x[key] = v", f"the selected region {region}")
    if any(len(p) == 0 for p, _ in picked):  # nothing selected: x, in the result's dtype
        return elementwise.apply_in(_WHERE, out_dtype, True, x, x, config=config)
    v = value
    vshape = _shape_of(v)
    if vshape:
        full = (1,) * (len(region) - len(vshape)) + tuple(vshape)
        kept = iter(full)
        target = tuple(next(kept) if k else 1 for _, k in picked)
        v = reshape(v, target, config=config) if disk_type(v) is not None \
            else jnp.reshape(v, target) if is_tracer(v) else np.reshape(v, target)
    masks = []
    for axis, ((p, _), n) in enumerate(zip(picked, shape)):
        whole = not is_tracer(p) and len(p) == n and np.array_equal(np.asarray(p), np.arange(n))
        if whole:
            continue
        xp = jnp if is_tracer(p) else np
        m = xp.zeros(n, bool)
        m = m.at[p].set(True) if xp is jnp else _np_set(m, p, True)
        masks.append((axis, m))
        if _shape_of(v) and _shape_of(v)[axis] != 1:
            g = xp.zeros(n, np.int32)
            g = g.at[p].set(jnp.arange(len(p))) if xp is jnp \
                else _np_set(g, p, np.arange(len(p)))
            v = take(v, g, axis=axis, config=config) if disk_type(v) is not None \
                else jnp.take(v, g, axis=axis) if is_tracer(v) or is_tracer(g) \
                else np.take(v, g, axis=axis)
    out = _combined(x, v, method, out_dtype, config)
    for axis, m in reversed(masks):
        cond = m.reshape((1,) * axis + (shape[axis],) + (1,) * (len(shape) - axis - 1))
        out = elementwise.apply_in(_WHERE, out_dtype, cond, out, x, config=config)
    if not masks:  # every position selected: the new value everywhere
        out = elementwise.apply_in(_WHERE, out_dtype, True, out, x, config=config)
    return out


#: The write path's where: ``where(selected, new, x)`` in the result's dtype.
_WHERE = TABLE["where"]


def _result_dtype(dtype: np.dtype, method: str) -> np.dtype:
    """The dtype of ``x.at[key].<method>(v)``: ``x``'s own, but for
    ``divide`` of integers or bools, which jax.numpy gives as ``x / 1``
    elsewhere (float32, float64 with x64 on)."""
    if method != "divide" or dtype.kind in "fc":
        return dtype
    return np.dtype(jax.eval_shape(jnp.divide, jax.ShapeDtypeStruct((), dtype),
                                   jax.ShapeDtypeStruct((), dtype)).dtype)


def _combined(x, v, method: str, out_dtype: np.dtype, config):
    """What the selected elements become: ``v`` itself (``set``), or ``x``
    combined with it. ``power`` and ``divide`` take ``v`` already in ``x``'s
    dtype and compute in the result's, as jax.numpy does. The others compute
    in ``x``'s dtype when ``v`` is exact in it (JAX's promotion would give the
    same there, but with x64 off a 64-bit store would pass through 32 bits),
    else by JAX's promotion (``int32`` plus 2.5 in float32), cast back."""
    if method == "set":
        return v
    if np.dtype(x.dtype) == np.bool_ and method not in ("min", "max"):
        raise TypeError(f"x.at[key].{method}(v) of a bool array is refused, as jax.numpy "
                        f"refuses it ({method} does not accept bool); use .set, .min or .max, "
                        "or jask.astype first")
    if method in ("power", "divide") or _exact_in(v, out_dtype):
        return elementwise.apply_in(TABLE[AT_ROWS.get(method, method)], out_dtype, x, v,
                                    config=config)
    return AT_METHODS[method](x, v, config=config)


#: The table row of each .at method named otherwise.
AT_ROWS = {"min": "minimum", "max": "maximum"}


def _exact_in(v, dtype: np.dtype) -> bool:
    """Whether an in-memory ``v`` is held exactly by ``dtype`` (a DiskArray
    or traced one: whether its dtype is ``dtype``)."""
    if disk_type(v) is not None or is_tracer(v):
        return np.dtype(v.dtype) == dtype
    v = np.asarray(v)
    if v.dtype.kind == "c" and dtype.kind != "c":
        return False
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        back = v.astype(dtype).astype(v.dtype)
    return bool(np.array_equal(back, v, equal_nan=v.dtype.kind in "fc"))


def _cast_value(value, dtype: np.dtype, method: str, config):
    """``value`` in ``dtype`` as numpy's ``a[key] = value`` casts it: an
    in-memory one by numpy itself, so what numpy refuses (an int out of an
    integer dtype's range, a NaN into integers) is refused here, before
    anything is written, naming the value and the dtype; a DiskArray by
    :func:`jask.astype`. A traced value is JAX's, cast by the op."""
    if is_tracer(value):
        return value
    if disk_type(value) is not None:
        return value if np.dtype(value.dtype) == dtype \
            else elementwise.astype(value, dtype, config=config)
    given = np.asarray(value) if isinstance(value, jax.Array) else value
    if np.iscomplexobj(given) and dtype.kind != "c":
        raise TypeError(f"x.at[key].{method}(v): a complex v ({_describe(value)}) is not "
                        f"written into an array of dtype {dtype.name}: its imaginary part "
                        "would be lost. Take jask.real or jask.abs of it first.")
    out = np.empty(np.shape(given), dtype)
    try:
        with warnings.catch_warnings():
            if dtype.kind in "iu":  # NaN, inf or a float out of range into integers:
                warnings.simplefilter("error", RuntimeWarning)  # garbage, so refused
            out[...] = given
    except (OverflowError, ValueError, TypeError, RuntimeWarning) as err:
        kind = ValueError if isinstance(err, RuntimeWarning) else type(err)
        raise kind(f"x.at[key].{method}(v) / x[key] = v: v = {_describe(value)} cannot be "
                        f"written into an array of dtype {dtype.name}, as numpy refuses: "
                        f"{err}") from None
    return out


def _describe(value) -> str:
    if np.ndim(value) == 0:
        return repr(value.item() if hasattr(value, "item") else value)
    return f"an array of shape {tuple(np.shape(value))} and dtype {np.asarray(value).dtype}"


class At:
    """``x.at``: ``x.at[key].set(v)``, ``.add(v)``, ``.multiply(v)``, ``.min(v)``,
    ... (:func:`scatter`) and ``.get()`` (``x[key]``), as ``jax.Array.at``.

    Example:
      >>> import numpy as np, jask
      >>> jask.from_numpy(np.zeros(3)).at[1].set(7.0).to_numpy()
      array([0., 7., 0.])
    """

    def __init__(self, x):
        self.x = x

    def __getitem__(self, index):
        return _AtIndex(self.x, index)


class _AtIndex:
    def __init__(self, x, index):
        self.x, self.index = x, index

    def get(self):
        return getitem(self.x, self.index)

    def __getattr__(self, method):
        if method not in AT_METHODS:
            raise AttributeError(f"x.at[key] has no method {method!r}; one of get, "
                                 f"{', '.join(AT_METHODS)}")

        def update(value):
            return scatter(self.x, self.index, value, method)
        update.__name__ = method
        return update


def _shape_of(value) -> tuple:
    """The shape of a DiskArray, a traced one, an in-memory array or a scalar
    (never reading a DiskArray, as ``np.shape`` would)."""
    aval = disk_type(value)
    return tuple(aval.shape) if aval is not None else tuple(np.shape(value))


def _size(value) -> int:
    return math.prod(_shape_of(value))


def _selects_nothing(mask) -> bool:
    """For ``x[mask] = v`` with an empty ``v``: True when the boolean
    ``mask`` has no True element (numpy's no-op); numpy's refusal (0 values
    for its True elements) when it has; False when a traced mask cannot
    tell (then refused as any ``v`` that is not a scalar). A DiskArray mask
    is reduced (one pass)."""
    if is_tracer(mask):
        return False
    if disk_type(mask) is not None:
        selected = bool(truth.any(mask))
    else:
        selected = bool(np.any(np.asarray(mask)))
    if selected:
        raise ValueError("x[mask] = v: v has 0 values but the mask has True elements (as "
                         "numpy: cannot assign 0 input values to the output values where the "
                         "mask is true)")
    return True


def _np_set(a: np.ndarray, where, value) -> np.ndarray:
    a[where] = value  # a fresh array of this function's own: later entries win, as in numpy
    return a


def _check_broadcast(value, shape: tuple, what: str, name: str) -> None:
    vshape = _shape_of(value)
    try:
        ok = np.broadcast_shapes(tuple(vshape), shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{what}: a value of shape {tuple(vshape)} does not broadcast to "
                         f"{name}")


def setitem(x, index, value):
    """``x[index] = value`` (the Array API standard's ``__setitem__``), outside
    ``jax.jit``: ``x``'s store is replaced by ``x.at[index].set(value)``
    (:func:`scatter`, one pass) with :func:`jask.update_`'s atomic swap, so a
    reader sees all old or all new values, views of ``x`` and pending results
    that read it keep the values they had, and ``x.filename`` stays. The key
    and value are checked before anything is written. Inside ``jit`` (a
    traced ``x``) it is refused: write ``x = x.at[index].set(value)``.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.zeros(3))
      >>> before = x[1:]
      >>> x[0] = 1.0
      >>> x.to_numpy(), before.to_numpy()
      (array([1., 0., 0.]), array([0., 0.]))
    """
    if not isinstance(x, DiskArray):
        raise TypeError(
            "x[index] = value on a traced DiskArray (inside jax.jit): a DiskArray is written "
            "in place only outside jit; inside, write x = x.at[index].set(value), which "
            "works in both (then x.update_(x_new) outside jit stores it)")
    sel = _basic_selection(x, index)
    mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    if (_size(value) == 0 and _is_array(mask) and _shape_of(mask) == tuple(x.shape)
            and np.dtype(mask.dtype) == np.bool_ and _selects_nothing(mask)):
        return  # x[mask] = [] selecting nothing (x[x == 0] += 1 with no zeros): no write
    if sel is None:
        update_(x, scatter(x, index, value))
        return
    picked, kept = sel
    dtype = np.dtype(x.dtype)
    region = tuple(len(p) for p, k in zip(picked, kept) if k)
    _check_broadcast(value, region, "x[key] = v", f"the selected region {region}")
    check_in_place(x, "x[key] = v")
    value = _cast_value(value, dtype, "set", None)  # refused here, before anything is written
    vshape = tuple(np.shape(value))
    at_full = iter((1,) * (len(region) - len(vshape)) + vshape)
    target = tuple(next(at_full) if k else 1 for k in kept)  # x's axes, integers' length 1
    if disk_type(value) is None:
        value = from_numpy(np.reshape(np.asarray(value), target))
    elif target != vshape:
        value = reshape(value, target)
    primitives.update(x, value, at=tuple((p.start, p.stop, p.step) for p in picked))


def _basic_selection(x: DiskArray, index):
    """For a basic key (integers, slices of a positive step) of ``x``
    selecting some but not all of it: per axis the positions picked, a
    ``range`` (normalized: ``stop`` just past the last), and whether the
    axis stays in ``x[key]``. None for every other key (the general path
    checks and refuses what it must), an empty selection and a view (written
    into a copy of its own)."""
    shape = tuple(x.shape)
    if not shape or x._store().view is not None:
        return None
    try:
        entries = _index_tuple(index, shape)
    except IndexError:
        return None
    picked, kept = [], []
    for entry, n in zip(entries, shape):
        if _is_int(entry):
            i = int(entry)
            if not -n <= i < n:
                return None
            picked.append(range(i % n, i % n + 1))
            kept.append(False)
        elif isinstance(entry, slice) and all(b is None or _is_int(b) for b in
                                              (entry.start, entry.stop, entry.step)) \
                and (entry.step is None or entry.step > 0):
            r = range(*entry.indices(n))
            if not r:
                return None
            picked.append(range(r.start, r[-1] + 1, r.step))
            kept.append(True)
        else:
            return None
    if all(len(p) == n for p, n in zip(picked, shape)):
        return None  # everything: the whole store is written anyway
    return tuple(picked), tuple(kept)


def _is_int(i) -> bool:
    return isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, (bool, np.bool_))


#: take's modes that raise IndexError for an index out of range (numpy's default)
_RAISE_MODES = (None, "raise", "promise_in_bounds")


def _check_mode(mode) -> None:
    if mode not in _RAISE_MODES + ("fill", "clip", "wrap"):
        raise ValueError(f"jask.take: mode {mode!r} is not one of 'raise' (the default), "
                         "'fill', 'clip', 'wrap'")


def _fill(dtype) -> object:
    """jax.numpy.take's fill for an index out of range: NaN for inexact
    dtypes, the most negative int for signed ones, the largest unsigned, True."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return float("nan")
    if dtype.kind == "b":
        return True
    return int(np.iinfo(dtype).min if dtype.kind == "i" else np.iinfo(dtype).max)


def take(x, indices, axis: int | None = None, mode: str | None = None, fill_value=None, *,
         config: Config | None = None):
    """Elements of ``x`` at ``indices`` along ``axis`` (``None``: of the
    flattened array), as ``jax.numpy.take``: the result has ``indices``'
    shape in place of that axis. ``indices`` are in memory (a numpy or JAX
    array, traced ones too) or a DiskArray (read here when small; a large
    one indexing a small 1-D ``x``, a lookup table, is streamed tile by
    tile; a large 1-D one with ``axis=None`` is read in bands, each taken
    from the span of ``x`` it points into); negative ones count from the end.

    An index out of range raises IndexError, naming it and the axis, as
    numpy's ``take`` and ``x[indices]`` do: the default (``mode`` None, or
    "raise"; "promise_in_bounds" is checked the same way) is numpy's, not
    jax.numpy's, whose default fills. Known indices are checked before
    anything is read; indices only known when a ``jit`` program runs (traced,
    or on disk) are checked by the task that reads them, which raises there
    (under ``jit`` the error reaches the caller wrapped by XLA's runtime
    error, its message kept); traced indices into an in-memory ``x`` are
    jax.numpy's, which cannot raise: they fill. jax.numpy's modes stay
    available when asked for: "fill" gives ``fill_value`` (NaN for floats, the most negative int,
    the largest unsigned, True), "clip" clips, "wrap" wraps. Its VJP adds
    the cotangent back where each index points (repeats add up).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(12.0).reshape(3, 4))
      >>> jask.take(x, np.array([2, 0, -1]), axis=1).to_numpy()
      array([[ 2.,  0.,  3.],
             [ 6.,  4.,  7.],
             [10.,  8., 11.]])
    """
    _check_mode(mode)
    aval = disk_type(x)
    if isinstance(indices, DiskArray) and not is_tracer(x) and np.ndim(x) <= 1 \
            and not memory.fits_in_memory(_shape_of(indices), indices.dtype, config) \
            and memory.fits_in_memory(_shape_of(x), x.dtype, config):
        return _lookup(x, indices, mode, fill_value, config)
    if isinstance(indices, DiskArray) and axis is None and aval is not None \
            and not is_tracer(x) and mode in _RAISE_MODES and indices.ndim == 1 \
            and not memory.fits_in_memory(_shape_of(indices), indices.dtype, config):
        return _take_in_bands(x, indices, config)
    if isinstance(indices, DiskArray) \
            and memory.fits_in_memory(_shape_of(indices), indices.dtype, config):
        # small: read them here (an in-memory ``x`` too: scikit-learn's ``svd_flip`` takes
        # from a small matrix at ``argmax(...) + arange(n) * k``, an arange on disk)
        indices = primitives.materialize(indices, config=config)
    if aval is None:
        shape = np.shape(x)
        if mode in _RAISE_MODES and not is_tracer(indices) and (
                axis is None or -len(shape) <= axis < len(shape)):
            n = math.prod(shape) if axis is None else shape[axis]
            check_in_bounds(np.asarray(indices), n, 0 if axis is None else axis % len(shape),
                            shape)
            mode = "fill"  # checked, so nothing fills (jax.numpy's take has no "promise")
        return jnp.take(x, indices, axis=axis, mode="fill" if mode is None else mode,
                        fill_value=fill_value)
    if disk_type(indices) is not None:
        raise TypeError("jask.take: indices must be in memory (a numpy or JAX array, or a "
                        "DiskArray within the in-memory share of the budget, read outside "
                        "jit); for larger ones use jask.materialize(indices) if they fit")
    if axis is None:
        x = reshape(x, (-1,), config=config)
        aval, axis = disk_type(x), 0
        assert aval is not None
    if not isinstance(axis, (numbers.Integral, np.integer)) or not -aval.ndim <= axis < aval.ndim:
        raise ValueError(f"jask.take: axis {axis!r} is out of range for an array of shape "
                         f"{aval.shape}")
    axis = int(axis) % aval.ndim
    xp = jnp if is_tracer(indices) else np  # known indices: no JAX op to dispatch
    indices = xp.asarray(indices)
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"jask.take: indices must be integers, got {indices.dtype}")
    n = aval.shape[axis]
    if n == 0 and indices.size:
        raise IndexError(f"jask.take: cannot take {indices.size} elements from axis {axis} of "
                         f"length 0 (shape {aval.shape}), as jax.numpy.take cannot")
    fill = None  # "raise": known indices checked here, traced ones by the gather's task
    if mode in _RAISE_MODES and xp is np:
        check_in_bounds(indices, n, axis, aval.shape)
    elif mode == "fill":
        fill = _fill(aval.dtype) if fill_value is None else fill_value
    elif mode == "clip":
        indices = xp.clip(indices, 0, n - 1)
    elif mode == "wrap":
        indices = indices % n
    taken = primitives.gather(x, [indices.reshape(-1)], (axis,), fill, config=config,
                              name="take")
    shape = aval.shape[:axis] + tuple(indices.shape) + aval.shape[axis + 1:]
    if not shape:
        return jnp.reshape(primitives.materialize(taken, config=config), ())
    return reshape(taken, shape, config=config) if indices.ndim != 1 else taken


def _take_in_bands(x, indices, config):
    """``take(x, indices)`` of the flattened DiskArray ``x`` at 1-D indices on
    disk too large for memory: the indices read a band (half the in-memory
    share) at a time, each band checked and taken from the span of ``x`` it
    points into (``x[lo:hi + 1]``), the bands joined. Indices that move
    along ``x`` as they go (scikit-learn's ``y + arange(n) * k`` into a
    raveled ``n x k`` array) read ``x`` about once; scattered ones read a
    wide span per band."""
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"jask.take: indices must be integers, got {indices.dtype}")
    flat = reshape(x, (-1,), config=config)
    n = flat.shape[0]
    band = max(1, memory.in_memory_limit(config) // 2 // np.dtype(indices.dtype).itemsize)
    pieces = []
    for start in range(0, indices.shape[0], band):
        idx = np.asarray(primitives.materialize(
            getitem(indices, slice(start, start + band), config=config), config=config))
        check_in_bounds(idx, n, 0, tuple(x.shape))
        idx = idx.astype(np.int64) % n
        lo, hi = int(idx.min()), int(idx.max())
        pieces.append(take(getitem(flat, slice(lo, hi + 1), config=config), idx - lo,
                           config=config))
    return pieces[0] if len(pieces) == 1 else concatenate(pieces, config=config)


class _Lookup:
    """The kernel of :func:`_lookup`: a small table's elements at a tile of
    indices (numpy's, with jax.numpy.take's modes; None: IndexError for one
    out of range, raised by the task that reads it)."""

    def __init__(self, table: np.ndarray, mode: str | None, fill):
        self.table, self.mode, self.fill = table, mode, fill

    def __call__(self, idx):
        n = self.table.shape[0]
        if self.mode is None:
            check_in_bounds(idx, n, 0, self.table.shape)
            return self.table[idx]
        i = idx.astype(np.int64)
        if self.mode == "clip":
            return self.table[np.clip(i, 0, n - 1)]
        if self.mode == "wrap":
            return self.table[i % n]
        i = np.where(i < 0, i + n, i)
        inside = (0 <= i) & (i < n)
        out = self.table[np.where(inside, i, 0)]
        return np.where(inside, out, np.asarray(self.fill, self.table.dtype))


def _lookup(x, indices, mode, fill_value, config):
    """``take`` of a small 1-D ``x`` (within the in-memory share) at a
    DiskArray of indices too large for memory: an elementwise op over the
    indices' tiles, ``x`` sent whole to each task. Not differentiable in
    ``x`` (a concrete table only: a traced one takes the gather)."""
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(f"jask.take: indices must be integers, got {indices.dtype}")
    table = np.asarray(primitives.materialize(x, config=config) if disk_type(x) is not None
                       else x).reshape(-1)
    if table.size == 0:
        raise IndexError("jask.take: cannot take elements from an empty array, as "
                         "jax.numpy.take cannot")
    fill = _fill(table.dtype) if fill_value is None else fill_value
    kind = None if mode in _RAISE_MODES else mode
    reference = table.copy()

    def ref(i):  # (the result's type: jax.numpy's modes give the same)
        return jnp.take(jnp.asarray(reference), i, mode=kind or "fill", fill_value=fill)
    row = Ufunc("take-lookup", _Lookup(table, kind, fill), ref, (None,), public=False)
    return elementwise.apply(row, indices, config=config)


def take_along_axis(x, indices, axis: int | None = -1, mode: str | None = None,
                    fill_value=None, *, config: Config | None = None):
    """Elements of ``x`` picked along ``axis`` by ``indices`` of the same
    number of axes (broadcast against ``x`` on the others), as
    ``jax.numpy.take_along_axis`` (``axis=None``: of the flattened array).
    An index out of range raises IndexError as in :func:`take` (numpy's
    default; ``mode="fill"`` gives ``fill_value``, NaN for floats, as
    jax.numpy's default does). ``indices`` are in memory; ``x`` is read as
    a flat array (a reshape copy when it has several axes), gathered by the
    flat positions.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[10.0, 30.0, 20.0], [60.0, 40.0, 50.0]]))
      >>> jask.take_along_axis(x, np.array([[1], [0]]), axis=1).to_numpy()
      array([[30.],
             [60.]])
    """
    if mode not in _RAISE_MODES + ("fill",):
        raise ValueError(f"jask.take_along_axis: mode {mode!r} is not one of 'raise' (the "
                         "default), 'fill'")
    aval = disk_type(x)
    if aval is None:
        if mode in _RAISE_MODES and not is_tracer(indices):
            shape = np.shape(x)
            n = math.prod(shape) if axis is None else shape[axis] if -len(shape) <= axis < \
                len(shape) else None
            if n is not None:
                check_in_bounds(np.asarray(indices), n, 0 if axis is None else axis % len(shape),
                                shape)
        return jnp.take_along_axis(x, indices, axis=axis, mode="fill" if mode is None else mode,
                                   fill_value=fill_value)
    if disk_type(indices) is not None:
        raise TypeError("jask.take_along_axis: indices must be in memory (a numpy or JAX "
                        "array); for a DiskArray of indices use jask.materialize(indices)")
    xp = jnp if is_tracer(indices) else np  # known indices: no JAX op to dispatch
    indices = xp.asarray(indices)
    if axis is None:
        return take(x, indices.reshape(-1), axis=None, mode=mode, fill_value=fill_value,
                    config=config)
    if indices.ndim != aval.ndim or not -aval.ndim <= axis < aval.ndim:
        raise ValueError(f"jask.take_along_axis: indices of shape {indices.shape} need as "
                         f"many axes as x of shape {aval.shape}, and axis {axis} in range")
    axis = int(axis) % aval.ndim
    try:
        shape = tuple(indices.shape[d] if d == axis else
                      np.broadcast_shapes((aval.shape[d],), (indices.shape[d],))[0]
                      for d in range(aval.ndim))
    except ValueError:
        raise ValueError(f"jask.take_along_axis: indices of shape {indices.shape} do not "
                         f"broadcast against x of shape {aval.shape}") from None
    n = aval.shape[axis]
    if mode in _RAISE_MODES and xp is np:
        check_in_bounds(indices, n, axis, aval.shape)
    along = xp.where(indices < 0, indices + n, indices)
    flat = xp.where((along < 0) | (along >= n), math.prod(aval.shape), 0)  # out of range
    strides = np.cumprod((aval.shape[1:] + (1,))[::-1])[::-1]
    for d in range(aval.ndim):
        coord = along if d == axis else xp.arange(shape[d]).reshape(
            [-1 if k == d else 1 for k in range(aval.ndim)])
        flat = flat + coord * int(strides[d])
    flat = xp.broadcast_to(flat, shape)
    source = x if aval.ndim == 1 else reshape(x, (-1,), config=config)
    # (traced indices out of range: a flat position past the end, which the
    # gather's task reports, or fills with mode "fill")
    return take(source, flat, axis=0, mode=mode, fill_value=fill_value, config=config)


def nonzero(x, *, size: int | None = None, fill_value=None, config: Config | None = None):
    """The indices of ``x``'s non-zero elements, one array per axis, as
    ``jax.numpy.nonzero``. How many there are depends on the values, so
    this runs only on a DiskArray small enough to load (the in-memory share
    of the budget reductions use), and under ``jit`` only with ``size``.
    For a large array, use ``jask.where(x != 0, ...)`` (same shape) or count
    them with ``jask.sum(x != 0)``.

    Example:
      >>> import numpy as np, jask
      >>> jask.nonzero(jask.from_numpy(np.array([0.0, 3.0, 0.0, 5.0])))
      (Array([1, 3], dtype=int32),)
    """
    aval = disk_type(x)
    if aval is None:
        return jnp.nonzero(x, size=size, fill_value=fill_value)
    if not memory.fits_in_memory(aval.shape, aval.dtype, config):
        nbytes = memory.nbytes(aval.shape, aval.dtype)
        raise MemoryError(
            f"jask.nonzero: a DiskArray of shape {aval.shape} ({exact_bytes(nbytes)}) is over "
            f"the in-memory share of the budget ({exact_bytes(memory.in_memory_limit(config))}), "
            "and the number of non-zeros depends on its values; use jask.where(x != 0, ...) (same "
            "shape), or count them with jask.sum(x != 0)")
    return jnp.nonzero(primitives.materialize(x, config=config), size=size,
                       fill_value=fill_value)


def _with_new_axes(x, index, config):
    """``x[index]`` for an index with ``None`` (``np.newaxis``) entries: the
    index without them, reshaped to put the new length-1 axes in (as xarray's
    broadcasting asks)."""
    index = index if isinstance(index, tuple) else (index,)
    rest = tuple(i for i in index if i is not None)
    # the result's shape, from the same index on a stand-in that holds no data
    shape = np.broadcast_to(np.empty((), np.bool_), disk_type(x).shape)[index].shape
    sliced = getitem(x, rest, config=config) if rest else x
    return reshape(sliced, shape, config=config)


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
    if -1 in shape and 0 in known:  # numpy's refusal: any length would do
        raise ValueError(f"jask.reshape: cannot reshape an array of shape {aval.shape} into "
                         f"{tuple(shape)}: the length of -1 is not determined")
    rest = size // max(int(np.prod(known, dtype=np.int64)), 1)
    new = tuple(rest if int(n) == -1 else int(n) for n in shape)
    if int(np.prod(new, dtype=np.int64)) != size or not new:
        raise ValueError(f"jask.reshape: cannot reshape an array of shape {aval.shape} "
                         f"({size} elements) into {tuple(shape)}")
    if new == aval.shape:
        return x
    return primitives.reshape(x, new, config=config)
