"""Reordering, repeating and reshaping DiskArrays, as jax.numpy's functions
of the same names (the Array API standard's manipulation functions).

Reorderings that move whole positions along an axis (``flip``, ``roll``,
``repeat``, ``tile``) are one outer gather each (:class:`Gather`: a task
reads a source chunk's window at a time); ``moveaxis`` and ``permute_dims``
are transposes;
``expand_dims``, ``squeeze`` and ``broadcast_to`` are elementwise copies
(they join band groups) whose VJP sums the cotangent back;
``diff`` is slices and a subtraction; ``unstack`` is slices. Each result is
a new DiskArray (a 0-d one is an in-memory value, as a 0-d reduction is;
``unstack``'s slices follow ``x[i]``'s rule),
and each differentiates as jax.numpy's does. In-memory inputs go to
jax.numpy (``broadcast_to`` only while its result fits the in-memory share).
"""
from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import creation, elementwise, indexing, linalg
from jask.base import memory
from jask.base.config import Config
from jask.core import primitives, ufuncs
from jask.core._jax_internals import is_tracer
from jask.core.array import disk_type
from jask.engine.blockwise import broadcast_axes

__all__ = ["flip", "roll", "moveaxis", "permute_dims", "expand_dims", "squeeze",
           "broadcast_to", "broadcast_arrays", "repeat", "tile", "unstack", "concat", "diff",
           "pad", "sliding_window_view"]


def _axes(op: str, axis, ndim: int, shape) -> tuple:
    """``axis`` (None: every axis, an int or a sequence) as a tuple of
    non-negative axes, in the order given."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (numbers.Integral, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, (numbers.Integral, np.integer)) or not -ndim <= int(a) < ndim:
            # (numpy's AxisError: a ValueError and an IndexError, what the array API asks;
            # jax.numpy raises a ValueError, so in-memory inputs are checked here too)
            raise np.exceptions.AxisError(f"jask.{op}: axis {axis!r} is out of range for an "
                                          f"array of shape {tuple(shape)}")
        out.append(int(a) % ndim)
    return tuple(out)


def _unique(op: str, axes: tuple, axis) -> tuple:
    if len(set(axes)) != len(axes):
        raise ValueError(f"jask.{op}: repeated axis in {axis!r}")
    return axes


def _reshaped(x, shape: tuple, config):
    """``x`` reshaped; a 0-d result is an in-memory value."""
    if not shape:
        return jnp.reshape(primitives.materialize(x, config=config), ())
    return indexing.reshape(x, shape, config=config)


def _relayout(x, shape: tuple, axes: tuple, name: str, config):
    """A copy of ``x`` lined up with ``shape`` by its axes map ``axes``
    (numpy broadcasting written out, see :mod:`jask.engine.blockwise`): an
    elementwise op, so it joins band groups, and its VJP sums back over the
    axes ``x`` lacks. Length-1 axes come and go without moving any data."""
    aval = disk_type(x)
    assert aval is not None
    return primitives.Blockwise(ufuncs.IDENTITY, (aval,), (tuple(axes),), (aval.dtype,),
                                tuple(shape), tuple(range(len(shape))), aval.dtype,
                                config=config, name=name)(x)


def flip(x, axis=None, *, config: Config | None = None):
    """Reverse the order of elements along ``axis`` (default: every axis),
    as ``jax.numpy.flip``.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(6.0).reshape(2, 3))
      >>> jask.flip(x, axis=1).to_numpy()
      array([[2., 1., 0.],
             [5., 4., 3.]])
    """
    aval = disk_type(x)
    if aval is None:
        _axes("flip", axis, np.ndim(x), np.shape(x))  # (see _axes)
        return jnp.flip(x, axis)
    axes = sorted(set(_axes("flip", axis, aval.ndim, aval.shape)))
    axes = [d for d in axes if aval.shape[d] > 1]
    if not axes:
        return x
    index = [np.arange(aval.shape[d] - 1, -1, -1) for d in axes]
    return primitives.gather(x, index, axes, permutation=True, local=True, config=config,
                              name="flip")


def roll(x, shift, axis=None, *, config: Config | None = None):
    """Shift elements along ``axis`` by ``shift``, those pushed off the end
    coming back at the start, as ``jax.numpy.roll`` (``axis=None``: the
    flattened array, rolled, in the original shape).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(6.0).reshape(2, 3))
      >>> jask.roll(x, 1, axis=1).to_numpy()
      array([[2., 0., 1.],
             [5., 3., 4.]])
    """
    aval = disk_type(x)
    if aval is None:
        _axes("roll", axis, np.ndim(x), np.shape(x))  # (see _axes)
        return jnp.roll(x, shift, axis)
    if axis is None:
        flat = _reshaped(x, (math.prod(aval.shape),), config)
        return _reshaped(roll(flat, int(np.sum(shift)), 0, config=config), aval.shape, config)
    axes = _axes("roll", axis, aval.ndim, aval.shape)
    try:
        shifts, axes_b = np.broadcast_arrays(np.asarray(shift, np.int64), np.asarray(axes))
    except ValueError:
        raise ValueError(f"jask.roll: shift {shift!r} and axis {axis!r} do not broadcast "
                         "together") from None
    total: dict = {}
    for s, d in zip(shifts.reshape(-1), axes_b.reshape(-1)):
        total[int(d)] = total.get(int(d), 0) + int(s)
    moved = [d for d in sorted(total) if aval.shape[d] and total[d] % aval.shape[d]]
    if not moved:
        return x
    index = [(np.arange(aval.shape[d]) - total[d]) % aval.shape[d] for d in moved]
    return primitives.gather(x, index, moved, permutation=True, local=True, config=config,
                              name="roll")


def permute_dims(x, axes, *, config: Config | None = None):
    """The axes permuted, as ``jax.numpy.permute_dims`` (``jask.transpose``).

    Example:
      >>> import numpy as np, jask
      >>> jask.permute_dims(jask.from_numpy(np.zeros((2, 3, 4))), (2, 0, 1)).shape
      (4, 2, 3)
    """
    return linalg.transpose(x, axes, config=config)


def moveaxis(x, source, destination, *, config: Config | None = None):
    """Move axes to new positions, the others keeping their order, as
    ``jax.numpy.moveaxis`` (a transpose).

    Example:
      >>> import numpy as np, jask
      >>> jask.moveaxis(jask.from_numpy(np.zeros((2, 3, 4))), 0, -1).shape
      (3, 4, 2)
    """
    aval = disk_type(x)
    if aval is None:
        for axes in (source, destination):
            _axes("moveaxis", axes, np.ndim(x), np.shape(x))  # (see _axes)
        return jnp.moveaxis(x, source, destination)
    src = _unique("moveaxis", _axes("moveaxis", source, aval.ndim, aval.shape), source)
    dst = _unique("moveaxis", _axes("moveaxis", destination, aval.ndim, aval.shape),
                  destination)
    if len(src) != len(dst):
        raise ValueError(f"jask.moveaxis: source {source!r} and destination {destination!r} "
                         "must have the same number of axes")
    order = [d for d in range(aval.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    if order == list(range(aval.ndim)):
        return x
    return linalg.transpose(x, tuple(order), config=config)


def expand_dims(x, axis, *, config: Config | None = None):
    """Insert length-1 axes at ``axis`` (an int or a tuple) of the result,
    as ``jax.numpy.expand_dims`` (a copy, elementwise).

    Example:
      >>> import numpy as np, jask
      >>> jask.expand_dims(jask.from_numpy(np.zeros((2, 3))), (0, -1)).shape
      (1, 2, 3, 1)
    """
    aval = disk_type(x)
    given = tuple(aval.shape) if aval is not None else np.shape(x)
    ndim = len(given) + (1 if isinstance(axis, (numbers.Integral, np.integer)) else len(axis))
    try:  # (in memory too, see _axes)
        new = _unique("expand_dims", _axes("expand_dims", axis, ndim, (None,) * ndim), axis)
    except np.exceptions.AxisError:  # (named against the array given, not the result)
        raise np.exceptions.AxisError(
            f"jask.expand_dims: axis {axis!r} is out of range for an array of shape "
            f"{given} (from {-ndim} to {ndim - 1})") from None
    if aval is None:
        return jnp.expand_dims(x, axis)
    kept = [d for d in range(ndim) if d not in new]
    shape = [1] * ndim
    for d, n in zip(kept, aval.shape):
        shape[d] = n
    return _relayout(x, tuple(shape), tuple(kept), "expand_dims", config)


def squeeze(x, axis=None, *, config: Config | None = None):
    """Remove length-1 axes (``axis``: only those, each of which must have
    length 1), as ``jax.numpy.squeeze`` (a copy, elementwise; a 0-d result
    is an in-memory value).

    Example:
      >>> import numpy as np, jask
      >>> jask.squeeze(jask.from_numpy(np.zeros((2, 1, 3, 1))), axis=1).shape
      (2, 3, 1)
    """
    aval = disk_type(x)
    if aval is None:
        _axes("squeeze", axis, np.ndim(x), np.shape(x))  # (see _axes)
        return jnp.squeeze(x, axis)
    if axis is None:
        axes = tuple(d for d, n in enumerate(aval.shape) if n == 1)
    else:
        axes = _unique("squeeze", _axes("squeeze", axis, aval.ndim, aval.shape), axis)
        wide = [d for d in axes if aval.shape[d] != 1]
        if wide:
            raise ValueError(f"jask.squeeze: cannot squeeze axis {wide[0]} of an array of "
                             f"shape {aval.shape}: its length is not 1")
    if not axes:
        return x
    if len(axes) == aval.ndim:
        return _reshaped(x, (), config)
    kept = [d for d in range(aval.ndim) if d not in axes]
    position = {d: i for i, d in enumerate(kept)}
    return _relayout(x, tuple(aval.shape[d] for d in kept),
                     tuple(position.get(d) for d in range(aval.ndim)), "squeeze", config)


def broadcast_to(x, shape, *, config: Config | None = None):
    """``x`` broadcast to ``shape`` by numpy's rules, as
    ``jax.numpy.broadcast_to`` (a new DiskArray, an elementwise copy that
    joins the band group of the op reading it; its VJP sums the cotangent
    over the broadcast axes).

    An in-memory ``x`` stays in memory (``jax.numpy.broadcast_to``) while
    the result fits the in-memory share of the budget
    (:func:`jask.base.memory.fits_in_memory`, decided from shapes only); a
    larger result is a DiskArray whose tiles are cut from ``x`` as they are
    read (``x`` is the op's in-memory operand, as ``n`` in ``X + n``), so
    ``broadcast_to(n, X.shape) + X`` holds no full-size copy in memory.

    Example:
      >>> import numpy as np, jask
      >>> jask.broadcast_to(jask.from_numpy(np.arange(3.0)), (2, 3)).to_numpy()
      array([[0., 1., 2.],
             [0., 1., 2.]])
    """
    aval = disk_type(x)
    shape = (int(shape),) if isinstance(shape, (numbers.Integral, np.integer)) else tuple(
        int(n) for n in shape)
    if aval is None:
        value = jnp.asarray(x)
        if memory.fits_in_memory(shape, value.dtype, config) or _misfits(value.shape, shape):
            return jnp.broadcast_to(value, shape)  # jax.numpy's answer, or its error
        if not (is_tracer(value) or memory.fits_in_memory(value.shape, value.dtype, config)):
            written = creation.from_numpy(np.asarray(value), config=config)  # too large to send
            return _relayout(written, shape, broadcast_axes(value.shape, shape), "broadcast_to",
                             config)
        return primitives.Blockwise(
            ufuncs.IDENTITY, (jax.core.ShapedArray(value.shape, value.dtype),),
            (broadcast_axes(value.shape, shape),), (value.dtype,), shape,
            tuple(range(len(shape))), value.dtype, config=config, name="broadcast_to")(value)
    if _misfits(tuple(aval.shape), shape):
        raise ValueError(f"jask.broadcast_to: cannot broadcast an array of shape {aval.shape} "
                         f"to shape {shape}")
    if shape == aval.shape:
        return x
    return _relayout(x, shape, broadcast_axes(aval.shape, shape), "broadcast_to", config)


def _misfits(shape: tuple, target: tuple) -> bool:
    """Whether numpy's rules refuse broadcasting ``shape`` to ``target``."""
    try:
        return len(target) < len(shape) or np.broadcast_shapes(shape, target) != target
    except ValueError:
        return True


def broadcast_arrays(*arrays, config: Config | None = None) -> list:
    """Every array broadcast to their common shape, as
    ``jax.numpy.broadcast_arrays`` (in-memory ones stay in memory while
    their result fits the in-memory share, see :func:`broadcast_to`).

    Example:
      >>> import numpy as np, jask
      >>> a, b = jask.broadcast_arrays(jask.from_numpy(np.zeros((2, 1))), np.ones(3))
      >>> a.shape, b.shape
      ((2, 3), (2, 3))
    """
    shapes = [tuple(k.shape) if (k := disk_type(x)) is not None else np.shape(x)
              for x in arrays]
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"jask.broadcast_arrays: shapes {shapes} do not broadcast "
                         "together") from None
    return [broadcast_to(x, shape, config=config) for x in arrays]


def repeat(x, repeats, axis=None, *, config: Config | None = None):
    """Repeat each element ``repeats`` times along ``axis`` (``None``: the
    flattened array), as ``jax.numpy.repeat``; ``repeats`` is an int or one
    int per element along the axis, known when the op is traced (its sum
    is the result's length).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(4.0).reshape(2, 2))
      >>> jask.repeat(x, [1, 2], axis=0).to_numpy()
      array([[0., 1.],
             [2., 3.],
             [2., 3.]])
    """
    aval = disk_type(x)
    if aval is None:
        return jnp.repeat(x, repeats, axis)
    if axis is None:
        x = _reshaped(x, (math.prod(aval.shape),), config)
        aval, axis = disk_type(x), 0
        assert aval is not None
    (axis,) = _axes("repeat", axis, aval.ndim, aval.shape)
    n = aval.shape[axis]
    try:
        counts = np.broadcast_to(np.asarray(repeats), (n,)).astype(np.int64)
    except (ValueError, TypeError) as e:  # a traced repeats (JAX's errors are TypeErrors)
        raise ValueError(f"jask.repeat: repeats must be an int or {n} ints known outside jit "
                         f"(the result's length depends on them); got {repeats!r}") from e
    if np.any(counts < 0):
        raise ValueError(f"jask.repeat: repeats {repeats!r} must be non-negative")
    if np.all(counts == 1):
        return x
    index = np.repeat(np.arange(n), counts)
    return primitives.gather(x, [index], (axis,), local=True, config=config,
                              name="repeat")


def tile(x, reps, *, config: Config | None = None):
    """``x`` repeated ``reps`` times along each axis, as ``jax.numpy.tile``
    (more ``reps`` than axes add leading axes).

    Example:
      >>> import numpy as np, jask
      >>> jask.tile(jask.from_numpy(np.arange(3.0)), (2, 2)).to_numpy()
      array([[0., 1., 2., 0., 1., 2.],
             [0., 1., 2., 0., 1., 2.]])
    """
    aval = disk_type(x)
    if aval is None:
        return jnp.tile(x, reps)
    reps = (int(reps),) if isinstance(reps, (numbers.Integral, np.integer)) else tuple(
        int(r) for r in reps)
    if any(r < 1 for r in reps):
        raise ValueError(f"jask.tile: reps {reps} must be positive (jask does not make empty "
                         "DiskArrays)")
    ndim = max(len(reps), aval.ndim)
    reps = (1,) * (ndim - len(reps)) + reps
    shape = (1,) * (ndim - aval.ndim) + tuple(aval.shape)
    if shape != aval.shape:
        x = expand_dims(x, tuple(range(ndim - aval.ndim)), config=config)
    axes = [d for d in range(ndim) if reps[d] > 1]
    if not axes:
        return x
    index = [np.arange(shape[d] * reps[d]) % shape[d] for d in axes]
    return primitives.gather(x, index, axes, local=True, config=config,
                              name="tile")


def unstack(x, axis: int = 0, *, config: Config | None = None) -> tuple:
    """The slices of ``x`` along ``axis``, as ``jax.numpy.unstack``: one
    ``x[..., i, ...]`` each, so small ones are in-memory values.

    Example:
      >>> import numpy as np, jask
      >>> a, b = jask.unstack(jask.from_numpy(np.arange(4.0).reshape(2, 2)))
      >>> b
      Array([2., 3.], dtype=float32)
    """
    aval = disk_type(x)
    if aval is None:
        return jnp.unstack(x, axis=axis)
    (axis,) = _axes("unstack", axis, aval.ndim, aval.shape)
    return tuple(indexing.getitem(x, (slice(None),) * axis + (i,), config=config)
                 for i in range(aval.shape[axis]))


def concat(arrays, axis: int | None = 0, *, config: Config | None = None):
    """The Array API's name of :func:`jask.concatenate` (``axis=None``: the
    arrays flattened, then joined).

    Example:
      >>> import numpy as np, jask
      >>> jask.concat([jask.from_numpy(np.zeros((2, 2))), np.ones((1, 2))], axis=None).shape
      (6,)
    """
    arrays = list(arrays)
    if axis is None:
        arrays = [_reshaped(x, (math.prod(k.shape),), config) if (k := disk_type(x)) is not None
                  else jnp.ravel(x) for x in arrays]
        axis = 0
    return indexing.concatenate(arrays, axis, config=config)


def diff(x, n: int = 1, axis: int = -1, prepend=None, append=None, *,
         config: Config | None = None):
    """The ``n``-th difference along ``axis``, ``prepend`` and ``append``
    joined first, as ``jax.numpy.diff``: ``x[1:] - x[:-1]`` along the axis,
    ``n`` times (two slices and a subtraction each).

    Example:
      >>> import numpy as np, jask
      >>> jask.diff(jask.from_numpy(np.array([1.0, 4.0, 9.0, 16.0])), n=2).to_numpy()
      array([2., 2.], dtype=float32)
    """
    aval = disk_type(x)
    if aval is None and disk_type(prepend) is None and disk_type(append) is None:
        return jnp.diff(x, n, axis, prepend, append)
    shape = tuple(aval.shape) if aval is not None else np.shape(x)
    (axis,) = _axes("diff", axis, len(shape), shape)
    if not isinstance(n, (numbers.Integral, np.integer)) or n < 0:
        raise ValueError(f"jask.diff: order n must be a non-negative int, got {n!r}")
    def end(value):  # a scalar end is one slice of the array along the axis
        if disk_type(value) is None and np.ndim(value) == 0:
            return jnp.broadcast_to(jnp.asarray(value), shape[:axis] + (1,) + shape[axis + 1:])
        return value
    parts = ([end(prepend)] if prepend is not None else []) + [x] + (
        [end(append)] if append is not None else [])
    if len(parts) > 1:
        x = indexing.concatenate(parts, axis, config=config)
    length = (disk_type(x) or jnp.asarray(x)).shape[axis]
    if n >= length:  # no differences left: an empty result, as numpy's
        return indexing.getitem(x, (slice(None),) * axis + (slice(0, 0),), config=config)
    before, after = (slice(None),) * axis + (slice(None, -1),), (slice(None),) * axis + (
        slice(1, None),)
    for _ in range(n):
        x = elementwise.subtract(indexing.getitem(x, after, config=config),
                                 indexing.getitem(x, before, config=config), config=config)
    return x


#: the modes of ``jnp.pad`` that are a gather: each padded position copies one of ``x``'s
_GATHER_MODES = ("edge", "reflect", "symmetric", "wrap")


def _pad_widths(pad_width, ndim: int) -> np.ndarray:
    try:
        widths = np.asarray(pad_width)
        if widths.dtype.kind not in "iu" or widths.ndim > 2:
            raise TypeError
        widths = np.broadcast_to(widths.astype(np.int64), (ndim, 2))
    except (TypeError, ValueError) as e:
        raise ValueError(f"jask.pad: pad_width must be ints known outside jit, an int, a pair "
                         f"or one pair per axis ({ndim}), as in jax.numpy; got {pad_width!r}"
                         ) from e
    if np.any(widths < 0):
        raise ValueError(f"jask.pad: pad_width must be non-negative, got {pad_width!r}")
    return widths


def pad(x, pad_width, mode="constant", *, constant_values=0, reflect_type="even",
        config: Config | None = None):
    """``x`` padded by ``pad_width`` (an int, a pair, or one ``(before,
    after)`` pair per axis), as ``jax.numpy.pad``: a new DiskArray, written
    tile by tile in one gather over every padded axis. ``mode`` is
    "constant" (``constant_values``: a scalar, or pairs per axis, later
    axes' values in the corners, as jax.numpy), "edge", "reflect",
    "symmetric" (``reflect_type`` "even") or "wrap", any width; the others
    (statistics and ramps) are refused, naming them.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(3.0))
      >>> jask.pad(x, (2, 1)).to_numpy()
      array([0., 0., 0., 1., 2., 0.])
      >>> jask.pad(x, 2, mode="reflect").to_numpy()
      array([2., 1., 0., 1., 2., 1., 0.])
    """
    aval = disk_type(x)
    if aval is None:
        extra = {"constant_values": constant_values} if mode == "constant" else (
            {"reflect_type": reflect_type} if mode in ("reflect", "symmetric") else {})
        return jnp.pad(x, pad_width, mode=mode, **extra)
    if mode not in ("constant",) + _GATHER_MODES:
        raise NotImplementedError(
            f"jask.pad: mode {mode!r} is not available on a DiskArray; jask pads with "
            f"'constant', {', '.join(repr(m) for m in _GATHER_MODES)} (as jax.numpy does)")
    if mode in ("reflect", "symmetric") and reflect_type != "even":
        raise NotImplementedError(f"jask.pad: reflect_type {reflect_type!r} (values computed "
                                  "from the edge) is not available; 'even' is")
    widths = _pad_widths(pad_width, aval.ndim)
    axes = [d for d in range(aval.ndim) if widths[d].any()]
    if not axes:
        return x
    if mode != "constant":
        empty = [d for d in axes if aval.shape[d] == 0]
        if empty:
            raise ValueError(f"jask.pad: mode {mode!r} cannot pad the empty axis {empty[0]} "
                             f"of shape {tuple(aval.shape)}")
        index = [np.pad(np.arange(aval.shape[d]), tuple(widths[d]), mode=mode) for d in axes]
        return primitives.gather(x, index, axes, config=config, name="pad")
    try:
        values = np.broadcast_to(np.asarray(constant_values), (aval.ndim, 2))
    except ValueError as e:
        raise ValueError(f"jask.pad: constant_values must be a scalar or pairs per axis, "
                         f"as in jax.numpy; got shape {np.shape(constant_values)}") from e

    def positions(d):  # out of range (n) where the axis is padded: the gather's fill
        n = aval.shape[d]
        before, after = widths[d]
        return np.concatenate([np.full(before, n), np.arange(n), np.full(after, n)])
    # compared as the bytes they are written as: -0.0 is not 0.0 here (nor NaN unlike itself)
    cast = [[np.asarray(v).astype(aval.dtype) for v in pair] for pair in values]
    fill = cast[0][0].item()
    if all(v.tobytes() == cast[0][0].tobytes() for pair in cast for v in pair):
        return primitives.gather(x, [positions(d) for d in axes], axes, fill, config=config,
                                 name="pad")
    out = x
    for d in axes:  # jax.numpy's order: each axis padded in turn, the corners the last's
        before, after = (v.item() for v in cast[d])
        out = primitives.gather(out, [positions(d)], (d,), before, config=config, name="pad")
        if cast[d][0].tobytes() != cast[d][1].tobytes() and widths[d][1]:
            n = widths[d].sum() + aval.shape[d]
            mask = np.arange(n) >= n - widths[d][1]
            out = elementwise.where(mask.reshape((1,) * d + (n,) + (1,) * (aval.ndim - d - 1)),
                                    np.asarray(after, aval.dtype), out, config=config)
    return out


def sliding_window_view(x, window_shape, axis=None, *, config: Config | None = None):
    """The windows of ``window_shape`` sliding along ``axis`` (all axes by
    default), as ``numpy.lib.stride_tricks.sliding_window_view``: each axis
    of length ``n`` becomes ``n - w + 1`` positions, and the windows' axes
    follow ``x``'s, in the order of ``axis``. numpy's is a view; a DiskArray's
    is a new one, ``w`` times the data per axis, written by one gather per
    axis (xarray's ``rolling`` reduces over it).

    Example:
      >>> import numpy as np, jask
      >>> jask.sliding_window_view(jask.from_numpy(np.arange(5.0)), 3).to_numpy()
      array([[0., 1., 2.],
             [1., 2., 3.],
             [2., 3., 4.]])
    """
    aval = disk_type(x)
    if aval is None:
        return np.lib.stride_tricks.sliding_window_view(np.asarray(x), window_shape, axis)
    windows = (window_shape,) if isinstance(window_shape, (numbers.Integral, np.integer)) \
        else tuple(window_shape)
    if axis is None:
        if len(windows) != aval.ndim:
            raise ValueError(f"jask.sliding_window_view: window_shape {window_shape!r} needs "
                             f"one length per axis ({aval.ndim}) when axis is None")
        axes: tuple = tuple(range(aval.ndim))
    else:
        axes = (axis,) if isinstance(axis, (numbers.Integral, np.integer)) else tuple(axis)
        axes = tuple(int(a) % aval.ndim if -aval.ndim <= a < aval.ndim else a for a in axes)
    if len(axes) != len(windows) or any(not isinstance(a, int) or not 0 <= a < aval.ndim
                                        for a in axes):
        raise ValueError(f"jask.sliding_window_view: axis {axis!r} and window_shape "
                         f"{window_shape!r} must pair up, within {aval.ndim} axes")
    out, ndim = x, aval.ndim
    for d, w in zip(axes, windows):
        n = tuple(out.shape)[d]
        if not 0 <= int(w) <= n:
            raise ValueError(f"jask.sliding_window_view: window {w} is longer than axis {d} "
                             f"({n}) or negative")
        index = np.arange(n - int(w) + 1)[:, None] + np.arange(int(w))[None, :]
        out = indexing.take(out, index, axis=d, config=config)  # the window's axis at d + 1
        out = moveaxis(out, d + 1, ndim, config=config)
        ndim += 1
    return out
