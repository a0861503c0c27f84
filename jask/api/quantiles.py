"""Order statistics along an axis: ``quantile``, ``nanquantile``, ``median``,
``nanmedian`` (and ``percentile``, ``nanpercentile``), as jax.numpy's.

Out of core, built on :func:`jask.sort` (each task holds whole lanes of the
axis; a lane over the budget is refused before anything is read). The steps
are jax.numpy's own, in its dtypes, so the values are its values: the lane
sorted, the positions ``q * (n - 1)`` and their floor and ceil, the two
neighbours weighted. ``quantile`` takes the neighbours at the same positions
in every lane (one gather of ``2 * len(q)`` positions) and is NaN for a lane
holding a NaN; ``nanquantile`` counts each lane's numbers (NaNs sort last),
so its positions differ by lane, and picks both neighbours by one reduction
over the sorted lanes (a max of the element whose rank is the position and
``-inf`` elsewhere: NaN wins, and signs of zeros are kept). ``q`` is known
outside ``jit`` (its values fix the gathered positions).

``q`` out of range (below 0, above 1 (percentiles: 100), or NaN, in any
element) is a ``ValueError``, as numpy's, for every function and method and
for in-memory ``x`` too: jax.numpy clamps such a ``q`` to the minimum or the
maximum, a plausible value that hides the caller's mistake, and jask gives no
silently wrong value. A ``q`` jask cannot see (traced under ``jit``) is
refused with a DiskArray ``x`` (its values fix what is read) and, with an
in-memory ``x``, passed to jax.numpy, which clamps it: a traced value cannot
raise.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import elementwise as ew
from jask.api import mapping, reductions
from jask.api.indexing import concatenate, getitem, reshape, take
from jask.api.manipulation import moveaxis
from jask.api.sorting import sort
from jask.base import memory
from jask.base.config import Config, get_config
from jask.core import primitives
from jask.core._jax_internals import is_tracer
from jask.core.array import DiskArrayType, disk_type
from jask.core.ufuncs import Ufunc
from jask.engine.blockwise import positional

__all__ = ["quantile", "nanquantile", "median", "nanmedian", "percentile", "nanpercentile",
           "METHODS"]

#: the ``method=`` values jask computes (jax.numpy's but for the weighted "inverted_cdf")
METHODS = ("linear", "lower", "higher", "midpoint", "nearest")

_REFERENCE = {"quantile": jnp.quantile, "nanquantile": jnp.nanquantile}


def _aval(x) -> DiskArrayType:
    aval = disk_type(x)
    assert aval is not None  # the callers checked that x is a DiskArray
    return aval


def _lanes(op: str, x, axis, keepdims: bool, config):
    """(x with the reduced axes merged into its last, keepdims' shape or
    None): jax.numpy's handling of ``axis=None`` and of a tuple of axes."""
    aval = _aval(x)
    ndim = aval.ndim
    if axis is None:
        axes = tuple(range(ndim))
    else:
        given = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        if not all(isinstance(a, (int, np.integer)) and -ndim <= a < ndim for a in given):
            raise ValueError(f"jask.{op}: axis {axis!r} is out of range for an array of shape "
                             f"{tuple(aval.shape)}")
        axes = tuple(int(a) % ndim for a in given)
        if len(set(axes)) != len(axes):
            raise ValueError(f"jask.{op}: repeated axis in {axis!r}")
    kept = [d for d in range(ndim) if d not in axes]
    shape = tuple(1 if d in axes else n for d, n in enumerate(aval.shape))
    if axes == (ndim - 1,):
        return x, shape if keepdims else None
    x = moveaxis(x, axes, tuple(range(len(kept), ndim)), config=config)
    lanes = tuple(aval.shape[d] for d in kept) + (math.prod(aval.shape[d] for d in axes),)
    return reshape(x, lanes, config=config), shape if keepdims else None


def _dtypes(op: str, aval, q) -> tuple[np.dtype, np.dtype]:
    """(the result's dtype, q's): jax.numpy's (the data promoted to inexact,
    the weights in q's own dtype)."""
    ref = _REFERENCE[op]
    struct = jax.ShapeDtypeStruct(tuple(aval.shape), aval.dtype)
    out = np.dtype(jax.eval_shape(lambda v: ref(v, q, axis=-1), struct).dtype)
    qd = np.dtype(jnp.asarray(q).dtype)
    return out, qd


def _ranks(q: np.ndarray, count, qd: np.dtype):
    """The ranks of the two neighbours of the positions ``q * (count - 1)``
    (jax.numpy's floor and ceil, clamped to the lane), as int32; ``count``:
    a number, or a DiskArray of per-lane counts in q's dtype."""
    top = ew.subtract(count, np.asarray(1, qd))
    pos = ew.multiply(q, top)
    return tuple(ew.astype(ew.maximum(np.asarray(0, qd), ew.minimum(f(pos), top)), np.int32)
                 for f in (ew.floor, ew.ceil))


def _weights(q: np.ndarray, count, qd: np.dtype) -> tuple:
    """jax.numpy's (low_weight, high_weight) of the positions, in q's dtype."""
    pos = ew.multiply(q, ew.subtract(count, np.asarray(1, qd)))
    high_weight = ew.subtract(pos, ew.floor(pos))
    return ew.subtract(np.asarray(1, qd), high_weight), high_weight


def _linear(low_value, high_value, low_weight, high_weight):
    """jax.numpy's linear interpolation of ``quantile``, on tiles, by XLA:
    it fuses one multiply into the add, so the same expression rounds as
    jax.numpy's does (numpy's two roundings differ in the last bit)."""
    dtype = low_weight.dtype
    return low_value.astype(dtype) * low_weight + high_value.astype(dtype) * high_weight


def _nan_linear(low_value, high_value, low_weight, high_weight):
    """``nanquantile``'s: in its program XLA fuses the other multiply."""
    dtype = low_weight.dtype
    return high_value.astype(dtype) * high_weight + low_value.astype(dtype) * low_weight


_LINEAR, _NAN_LINEAR = jax.jit(_linear), jax.jit(_nan_linear)


# Per-lane values held in memory (counts, ranks, the picked neighbours) are
# computed by one compiled program each: op by op, every jax.numpy call compiled
# a program of its own for the lanes' shape (15 for a nanmedian, 20 MB that
# XLA keeps per shape, beyond the budget's tiles).
@functools.cache
def _in_memory_ranks(qd: np.dtype):
    return jax.jit(lambda q, count: jnp.concatenate(_ranks(q, count, qd), axis=-1))


@functools.cache
def _in_memory_weights(qd: np.dtype):
    return jax.jit(lambda q, count: _weights(q, count, qd))


@functools.cache
def _in_memory_finish(op: str, method: str, out: np.dtype):
    def finish(both, q, count):
        k = q.shape[0]
        return _combine(op, method, both[..., :k], both[..., k:], q, count, out)
    return jax.jit(finish)


def _combine(op: str, method: str, low_value, high_value, q, count, out, weights=None):
    if method in ("linear", "nearest"):
        low_weight, high_weight = weights or _weights(q, count, np.dtype(q.dtype))
        if method == "nearest":
            return ew.where(ew.less_equal(high_weight, np.asarray(0.5, q.dtype)), low_value,
                            high_value)
        # jitted for in-memory operands too (jask.map then calls f itself)
        return mapping.map(_LINEAR if op == "quantile" else _NAN_LINEAR, low_value,
                           high_value, low_weight, high_weight)
    if method == "lower":
        return low_value
    if method == "higher":
        return high_value
    return ew.multiply(ew.add(low_value, high_value), np.asarray(0.5, out))  # midpoint


@positional
def _at_rank(sorted_tile, rank_tile, *, region, shape):
    """Each lane's element at its rank where this tile of the lane holds it,
    else ``-inf``, with length 1 along the lane: the reduction (a max, which
    NaN wins) broadcasts it over the tile as a view, so no tile-sized
    selection is made (``np.where`` over the tile took three tiles)."""
    start, stop = region[-1].start, region[-1].stop
    local = rank_tile.astype(np.intp) - start
    inside = (local >= 0) & (local < stop - start)
    picked = np.take_along_axis(sorted_tile, np.clip(local, 0, stop - start - 1), axis=-1)
    return np.where(inside, picked, np.asarray(-np.inf, sorted_tile.dtype))


def _at_rank_reference(sorted_, rank):
    return jnp.max(jnp.where(jnp.arange(sorted_.shape[-1]) == rank, sorted_, -jnp.inf), -1,
                   keepdims=True)


_AT_RANK = Ufunc("at-rank", _at_rank, _at_rank_reference, (None, None), public=False)


def _pick(s, rank, config):
    """``s[..., rank]`` per lane of the sorted ``s`` (lanes on its last axis;
    ``rank``: the lanes' shape with the quantiles last), as one reduction
    over the full shape (lanes, quantiles, lane): nothing of that shape is
    held or written."""
    aval = _aval(s)
    lanes, n = tuple(aval.shape[:-1]), aval.shape[-1]
    k = len(lanes)
    rank_shape = tuple(rank.shape)
    shape = rank_shape + (n,)
    axes = [tuple(range(k)) + (k + 1,), tuple(range(k + 1))]
    if disk_type(rank) is None:
        ew.check_in_memory("quantile", rank, config or get_config())
    return primitives.reduce("quantile-pick", _AT_RANK, [s, rank], axes,
                             [aval.dtype, np.dtype(rank.dtype)], shape, tuple(range(k + 1)),
                             aval.dtype, reducer="max",
                             to_memory=memory.fits_in_memory(rank_shape, aval.dtype, config),
                             config=config)


def _check_q(op: str, q, top: int) -> None:
    """A ValueError, as numpy's, for a concrete ``q`` with an element outside
    ``[0, top]`` or NaN; a traced ``q`` has no values to check (see the module)."""
    if is_tracer(q):
        return
    values = np.asarray(q.to_numpy() if hasattr(q, "to_numpy") else q)
    if values.dtype.kind not in "biuf":
        raise TypeError(f"jask.{op}: q must be real numbers, got dtype {values.dtype}")
    outside = ~((values >= 0) & (values <= top))  # NaN is outside
    if outside.any():
        raise ValueError(f"jask.{op}: q must be in the range [0, {top}] (numpy raises, "
                         f"jax.numpy clamps), got {float(values[outside].reshape(-1)[0])}"
                         f"{' among ' + str(values.size) if values.size > 1 else ''}")


def _quantile(op: str, x, q, axis, method: str, keepdims: bool, config: Config | None):
    _check_q(op, q, 1)
    if disk_type(x) is None:
        return _REFERENCE[op](x, q, axis=axis, method=method, keepdims=keepdims)
    if method not in METHODS:
        raise NotImplementedError(
            f"jask.{op}: method {method!r} is not available on a DiskArray; one of "
            f"{', '.join(METHODS)} (the weighted 'inverted_cdf' is not)")
    if is_tracer(q) or disk_type(q) is not None and not hasattr(q, "to_numpy"):
        raise TypeError(f"jask.{op}: q must be known outside jit (its values fix the "
                        "positions gathered from each sorted lane)")
    q_values = np.asarray(q.to_numpy() if disk_type(q) is not None else q)
    if q_values.ndim > 1:
        raise ValueError(f"jask.{op}: q must have at most one axis, got shape {q_values.shape}")
    out, qd = _dtypes(op, _aval(x), q_values)
    if not np.issubdtype(qd, np.floating):
        qd = out
    q_vec = q_values.reshape(-1).astype(qd)
    lanes, keep_shape = _lanes(op, x, axis, keepdims, config)
    s = sort(ew.astype(lanes, out) if _aval(lanes).dtype != out else lanes, axis=-1,
             config=config)
    n = _aval(s).shape[-1]
    if n == 0:
        raise ValueError(f"jask.{op}: the axis has no elements (shape {tuple(_aval(x).shape)})")
    if op == "quantile":
        count = np.asarray(n, qd)
        k = len(q_vec)
        ranks = np.asarray(_in_memory_ranks(qd)(q_vec, count)).reshape(-1)
        picked = take(s, np.concatenate([ranks, [n - 1]]), axis=-1, config=config)
        low_value, high_value, last = picked[..., :k], picked[..., k:2 * k], picked[..., 2 * k:]
        weights = tuple(np.asarray(w) for w in _in_memory_weights(qd)(q_vec, count))
        result = _combine(op, method, low_value, high_value, q_vec, count, out, weights)
        result = ew.where(ew.isnan(last), np.asarray(np.nan, out), result)
    else:
        count = reductions.sum(ew.astype(ew.logical_not(ew.isnan(s)), qd), axis=-1,
                               keepdims=True, config=config)
        k = len(q_vec)  # both neighbours in one reduction: one pass over the sorted lanes
        if disk_type(count) is None:  # the lanes' values in memory: two programs in all
            both = _pick(s, _in_memory_ranks(qd)(q_vec, count), config)
            result = _in_memory_finish(op, method, out)(both, q_vec, count)
        else:
            low, high = _ranks(q_vec, count, qd)
            both = _pick(s, concatenate([low, high], axis=-1, config=config), config)
            result = _combine(op, method, both[..., :k], both[..., k:], q_vec, count, out)
    result = ew.astype(result, out) if np.dtype(result.dtype) != out else result
    # the quantiles' axis is last here; jax.numpy's comes first
    if keep_shape is not None:
        result = reshape(result, keep_shape + (len(q_vec),), config=config) \
            if disk_type(result) is not None else jnp.reshape(result, keep_shape + (-1,))
    if q_values.ndim == 0:  # jask's indexing: a small result a jax.Array, as jask's habit is
        return getitem(result, (Ellipsis, 0), config=config) if disk_type(result) is not None \
            else result[..., 0]
    if disk_type(result) is None:
        return jnp.moveaxis(jnp.asarray(result), -1, 0)
    result = moveaxis(result, -1, 0, config=config)
    aval = _aval(result)
    if memory.fits_in_memory(aval.shape, aval.dtype, config):  # small: in memory, as a reduction
        return primitives.materialize(result, config=config)
    return result


def quantile(x, q, axis=None, *, method: str = "linear", keepdims: bool = False,
             config: Config | None = None):
    """The ``q``-th quantiles of ``x`` along ``axis`` (``None``: of the
    flattened array; a tuple: of those axes together), as
    ``jax.numpy.quantile``: NaN for a lane holding a NaN, the quantiles'
    axis first when ``q`` is 1-D. Out of core: a sort along the axis, then
    one gather of the positions ``q`` picks.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 4.0, 2.0], [5.0, 0.0, 3.0]], np.float32))
      >>> jask.quantile(x, 0.5, axis=1)
      Array([2., 3.], dtype=float32)
      >>> jask.quantile(x, np.array([0.25, 0.75]), axis=1, method="nearest")
      Array([[1., 0.],
             [2., 3.]], dtype=float32)
    """
    return _quantile("quantile", x, q, axis, method, keepdims, config)


def nanquantile(x, q, axis=None, *, method: str = "linear", keepdims: bool = False,
                config: Config | None = None):
    """The ``q``-th quantiles of ``x``'s numbers along ``axis``, NaNs
    skipped, as ``jax.numpy.nanquantile`` (NaN where a lane has none). Out
    of core: a sort, each lane's count of numbers, one reduction per
    neighbour.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, np.nan, 2.0], [5.0, 0.0, 3.0]], np.float32))
      >>> jask.nanquantile(x, 0.5, axis=1)
      Array([1.5, 3. ], dtype=float32)
    """
    return _quantile("nanquantile", x, q, axis, method, keepdims, config)


def percentile(x, q, axis=None, *, method: str = "linear", keepdims: bool = False,
               config: Config | None = None):
    """:func:`quantile` of ``q / 100``, as ``jax.numpy.percentile`` (whose
    compiled program folds ``q / 100`` into the positions: 25 of 41 integers
    gives -34.000004 there, -34 here, numpy's value).

    Example:
      >>> import numpy as np, jask
      >>> float(jask.percentile(jask.from_numpy(np.arange(5.0)), 25))
      1.0
    """
    _check_q("percentile", q, 100)
    if disk_type(x) is None:
        return jnp.percentile(x, q, axis=axis, method=method, keepdims=keepdims)
    return quantile(x, np.true_divide(q, 100), axis, method=method, keepdims=keepdims,
                    config=config)


def nanpercentile(x, q, axis=None, *, method: str = "linear", keepdims: bool = False,
                  config: Config | None = None):
    """:func:`nanquantile` of ``q / 100``, as ``jax.numpy.nanpercentile``.

    Example:
      >>> import numpy as np, jask
      >>> float(jask.nanpercentile(jask.from_numpy(np.array([0.0, np.nan, 4.0])), 50))
      2.0
    """
    _check_q("nanpercentile", q, 100)
    if disk_type(x) is None:
        return jnp.nanpercentile(x, q, axis=axis, method=method, keepdims=keepdims)
    return nanquantile(x, np.true_divide(q, 100), axis, method=method, keepdims=keepdims,
                       config=config)


def median(x, axis=None, *, keepdims: bool = False, config: Config | None = None):
    """The median along ``axis``, as ``jax.numpy.median`` (its quantile 0.5
    by the "midpoint" method; NaN for a lane holding a NaN).

    Example:
      >>> import numpy as np, jask
      >>> jask.median(jask.from_numpy(np.array([[3.0, 1.0], [2.0, 8.0]])), axis=0)
      Array([2.5, 4.5], dtype=float32)
    """
    if disk_type(x) is None:
        return jnp.median(x, axis=axis, keepdims=keepdims)
    return quantile(x, 0.5, axis, method="midpoint", keepdims=keepdims, config=config)


def nanmedian(x, axis=None, *, keepdims: bool = False, config: Config | None = None):
    """The median of the numbers along ``axis``, NaNs skipped, as
    ``jax.numpy.nanmedian`` (its nanquantile 0.5, "midpoint").

    Example:
      >>> import numpy as np, jask
      >>> float(jask.nanmedian(jask.from_numpy(np.array([3.0, np.nan, 1.0, 2.0]))))
      2.0
    """
    if disk_type(x) is None:
        return jnp.nanmedian(x, axis=axis, keepdims=keepdims)
    return nanquantile(x, 0.5, axis, method="midpoint", keepdims=keepdims, config=config)
