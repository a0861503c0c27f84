"""Reducers: how each reduction reduces a tile and combines two partials.

A reduction is a row of :data:`REDUCERS`, a :class:`Reducer` named by a
string: ``reduce(block, axis)`` keeps the reduced axes as length 1,
``combine(a, b)`` adds two partials (associative, so a fan-in tree may join
them in any order), ``finish`` turns the last partial into the output.
Partials are kept in float64 (or the widest dtype of their kind) and rounded
once. A parameterised reducer (``mean(count=N)``, ``var(ddof=D)``) is made
from its name wherever it is first looked up, so a graph carries only the
name. The graphs that stream tiles through a reducer are
:func:`jask.engine.blockwise.reduce_graph`'s; the derivative rules of each
reducer's ``kind`` are in ``jask.core.primitives.reductions``. Nothing here
knows of JAX.
"""
from __future__ import annotations

import ast
import functools
import math
from typing import Callable, NamedTuple

import numpy as np

__all__ = ["MOMENTS", "REDUCERS", "Reducer", "SLAB", "STATISTICS", "WIDE", "mean_of",
           "nan_variance", "stat_of", "variance", "with_moments"]


#: The dtype a reduction's partials are kept in, by dtype kind: partials of
#: many tiles are added without loss, and the result is rounded once.
WIDE = {"f": np.float64, "c": np.complex128, "b": np.int64, "i": np.int64, "u": np.uint64}


def _wide_sum(block, axis):
    """A block's sum, widened so that adding the partials of many blocks
    loses nothing. Floats accumulate in float64 from the first element:
    numpy's sum is pairwise only along the contiguous axis, so in the
    block's own dtype a sum over the rows of a C-order float32 tile is a
    running sum (a column of 800,000 ones averaged 1.0013); widening while
    adding costs about 0.3 ms per million elements, less than reading them.
    Integers add in their own dtype (exact modulo its width, as they wrap
    once cast back) and are widened after."""
    kind = block.dtype.kind
    if kind in "fc":
        return np.add.reduce(block, axis=axis, dtype=WIDE[kind], keepdims=True)
    total = np.sum(block, axis=axis, keepdims=True)
    return total.astype(WIDE.get(total.dtype.kind, total.dtype), copy=False)


def _max(block, axis):
    return np.max(block, axis=axis, keepdims=True)


def _min(block, axis):
    return np.min(block, axis=axis, keepdims=True)


def _arg(pick, better):
    """The reduce and combine of ``argmax`` (``pick=np.argmax``, ``better=np.greater``)
    or ``argmin``: partials are (value, index) pairs, and a pair wins when its
    value is better, or a NaN where the other is not (a NaN counts as the
    extreme, as in jax.numpy), or equal (or both NaN) with a smaller index:
    the first occurrence wins, whatever order partials are combined in."""

    def reduce(pair, axis):
        values, pieces = pair  # pieces: broadcastable int64 arrays adding up to the index
        shape = values.shape
        kept = tuple(d for d in range(len(shape)) if d not in axis)
        moved = np.moveaxis(values, axis, tuple(range(len(kept), len(shape))))
        # the reduced length spelled out: -1 is ambiguous when a kept axis is empty
        length = math.prod(shape[d] for d in axis)
        flat = moved.reshape(tuple(shape[d] for d in kept) + (length,))
        at = pick(flat, axis=-1)  # numpy's rule as jax's: the first NaN, else the first extreme
        where = [None] * len(shape)
        for d, coord in zip(axis, np.unravel_index(at, tuple(shape[d] for d in axis))):
            where[d] = coord
        for i, d in enumerate(kept):  # the kept axes' own positions, broadcast
            where[d] = np.arange(shape[d]).reshape([-1 if j == i else 1
                                                    for j in range(len(kept))])
        where_t = tuple(where)
        out = tuple(1 if d in axis else n for d, n in enumerate(shape))
        index = sum((np.broadcast_to(p, shape)[where_t] for p in pieces),
                    np.zeros((), np.int64))
        return (np.asarray(values[where_t]).reshape(out),
                np.asarray(index, np.int64).reshape(out))

    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        if va.dtype.kind in "fc":
            na, nb = np.isnan(va), np.isnan(vb)
            wins = ((nb & ~na) | (~na & ~nb & better(vb, va))
                    | (((vb == va) | (na & nb)) & (ib < ia)))
        else:
            wins = better(vb, va) | ((vb == va) & (ib < ia))
        return np.where(wins, vb, va), np.where(wins, ib, ia)

    return reduce, combine


def _index(pair):
    return pair[1]


class Reducer(NamedTuple):
    """How a reduction reduces a block over axes (keeping them as length 1)
    and combines two partials; ``finish`` turns a partial into the output
    (``None``: it is the output), ``pair``: partials are (value, index);
    ``arrays``: how many arrays of the kept shape one partial holds;
    ``ddof``: set for a variance (partials are moments, see :func:`variance`);
    ``mean_count``: set for a mean (partials are sums, see :func:`mean_of`);
    ``skips_nan``: NaNs are left out, counted per kept position
    (``"nanmean"``, :func:`nan_variance`); ``kind``: which reduction it is,
    whatever its parameters (``"mean"`` for every count): the key of its
    derivative rules in ``jask.core.primitives.reductions.REDUCTION_RULES``."""

    reduce: Callable
    combine: Callable
    finish: Callable | None = None
    pair: bool = False
    arrays: int = 1
    ddof: float | None = None
    mean_count: int | None = None
    skips_nan: bool = False
    kind: str = ""


def _arg_reducer(pick: Callable, better: Callable) -> Reducer:
    reduce, combine = _arg(pick, better)
    return Reducer(reduce, combine, finish=_index, pair=True, kind="arg")


class _Reducers(dict):
    """Reducers by name. A parameterised one (``mean(count=N)``,
    ``var(ddof=D)``) is made from its name wherever it is first looked up:
    a graph carries only the name, and a Dask worker in another process
    never ran the :func:`mean_of` or :func:`variance` call that named it."""

    def __missing__(self, name: str) -> Reducer:
        if name.startswith("moments:"):
            made = with_moments(name[len("moments:"):])
            if made is not None:
                return dict.__getitem__(self, made)
        for prefix, make in (("mean(count=", mean_of), ("var(ddof=", variance),
                             ("nanvar(ddof=", nan_variance)):
            if name.startswith(prefix) and name.endswith(")"):
                make(ast.literal_eval(name[len(prefix):-1]))
                return dict.__getitem__(self, name)
        raise KeyError(name)


#: reducer name -> :class:`Reducer` (``REDUCERS[name][0]`` reduces, ``[1]`` combines)
REDUCERS: dict[str, Reducer] = _Reducers({
    "sum": Reducer(_wide_sum, np.add, kind="sum"),
    "max": Reducer(_max, np.maximum, kind="max"),
    "min": Reducer(_min, np.minimum, kind="min"),
    "argmax": _arg_reducer(np.argmax, np.greater),
    "argmin": _arg_reducer(np.argmin, np.less),
})


def _wide_prod(block, axis):
    """A block's product, widened as :func:`_wide_sum` widens (integers
    wrap in int64, as they would in their own dtype once cast back)."""
    return np.prod(block, axis=axis, keepdims=True, dtype=WIDE.get(block.dtype.kind, block.dtype))


def _all(block, axis):
    return np.all(block, axis=axis, keepdims=True)


def _any(block, axis):
    return np.any(block, axis=axis, keepdims=True)


REDUCERS.update({
    "prod": Reducer(_wide_prod, np.multiply, kind="prod"),
    "all": Reducer(_all, np.logical_and, kind="all"),
    "any": Reducer(_any, np.logical_or, kind="any"),
})


# --- mean: a sum divided once ------------------------------------------------------

def _divided(count: int, total):
    with np.errstate(all="ignore"):  # an empty mean is NaN (0 / 0), as jnp
        return total / np.float64(count)


def mean_of(count: int) -> str:
    """The name of the reducer giving the mean of ``count`` elements: float64
    partial sums, divided by ``count`` once at the end (scaling each element
    by ``1/count`` first rounds every product, and ``1/count`` itself).

    Example:
      >>> name = mean_of(3)
      >>> x = np.full((3, 2), 0.1, np.float32)
      >>> float(REDUCERS[name].finish(REDUCERS[name].reduce(x, (0,)))[0, 0])
      0.10000000149011612
    """
    name = f"mean(count={count!r})"
    if dict.get(REDUCERS, name) is None:
        REDUCERS[name] = Reducer(_wide_sum, np.add, functools.partial(_divided, count),
                                 mean_count=count, kind="mean")
    return name


# --- variance in one pass: (count, mean, M2) partials -------------------------------

def _moments(block, axis):
    """A block's (count, mean, sum of squared deviations from that mean) over
    ``axis``, in float64 whatever the block's dtype: deviations from the
    block's own mean, so a large common offset (1e6 + noise) cancels
    before anything is squared, which the sum-of-squares formula cannot do."""
    count, mean, m2, _ = _stats(block, axis)
    return count, mean, m2


#: Elements of the float64 buffer a variance's deviations are squared in, a
#: slab of the block's rows at a time: small enough to stay in cache and be
#: reused (a float64 copy of a whole tile, fresh memory each time, was most
#: of a variance's time: 68 ms where its sum took 7, for 32 MiB of float32).
SLAB = 1 << 15


def _stats(block, axis):
    """A block's (count, mean, M2, total) over ``axis`` in float64: the
    moments of :func:`_moments` and the sum a mean is made from, exactly as
    :func:`_wide_sum` adds it (so a mean taken from these partials is the
    mean's own). The deviations are squared slab by slab of rows in one
    reused float64 buffer."""
    count = math.prod(block.shape[d] for d in axis)  # the same at every kept position
    if block.dtype.kind not in "fc":
        block = np.asarray(block, np.float64)
    with np.errstate(all="ignore"):  # an empty block: mean NaN, M2 0; nan and inf as IEEE
        total = np.add.reduce(block, axis=axis, dtype=WIDE[block.dtype.kind], keepdims=True)
        mean = total / count
        return count, mean, _squared_deviations(block, mean, axis), total


def _squared(deviations):
    """``|d| ** 2``, real: the standard's variance of complex numbers is the
    mean of ``|x - mean| ** 2``."""
    if deviations.dtype.kind == "c":
        return np.square(deviations.real) + np.square(deviations.imag)
    return np.square(deviations)


def _squared_deviations(block, mean, axis):
    """``sum(|block - mean| ** 2)`` over ``axis`` (keeping it), in float64
    (complex deviations in complex128, then their moduli squared)."""
    wide = WIDE[block.dtype.kind] if block.dtype.kind == "c" else np.float64
    if block.ndim == 0 or block.size == 0:
        deviations = np.asarray(block, wide) - mean
        return np.sum(_squared(deviations), axis=axis, keepdims=True)
    n = block.shape[0]
    rows = max(1, SLAB // max(1, math.prod(block.shape[1:])))
    if rows >= n:
        deviations = np.subtract(block, mean, dtype=wide)
        return np.add.reduce(_squared_in_place(deviations), axis=axis, keepdims=True)
    along = 0 in axis  # the slabs are reduced too: their sums add up
    out = np.zeros(mean.shape, np.float64) if along else np.empty(mean.shape, np.float64)
    buffer = np.empty((rows,) + block.shape[1:], wide)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        part = buffer[:stop - start]
        np.subtract(block[start:stop], mean if along else mean[start:stop], out=part)
        squared = _squared_in_place(part)
        if along:
            out += np.add.reduce(squared, axis=axis, keepdims=True)
        else:
            out[start:stop] = np.add.reduce(squared, axis=axis, keepdims=True)
    return out


def _squared_in_place(deviations):
    """:func:`_squared`, in the buffer itself where it is real."""
    if deviations.dtype.kind == "c":
        return _squared(deviations)
    return np.multiply(deviations, deviations, out=deviations)


def _chan(a, b):
    """Two (count, mean, M2) partials as one: Chan, Golub and LeVeque's
    parallel update, stable in any order of combining."""
    (na, ma, m2a), (nb, mb, m2b) = a, b
    if na == 0 or nb == 0:
        return b if na == 0 else a
    n = na + nb
    with np.errstate(all="ignore"):
        delta = mb - ma
        return n, ma + delta * (nb / n), m2a + m2b + _squared(delta) * (na * nb / n)


def _variance_of(ddof: float, partial):
    count, _, m2 = partial
    if count <= ddof:  # NaN, as jnp.var
        return np.full_like(m2, np.nan)
    return m2 / np.float64(count - ddof)


def variance(ddof: float = 0) -> str:
    """The name of the reducer giving the variance with ``ddof`` (the sum of
    squared deviations divided by ``N - ddof``) in one pass over the data:
    partials are (count, mean, M2) in float64, combined by :func:`_chan`.

    Example:
      >>> name = variance(1)
      >>> x = np.array([[1.0, 2.0], [3.0, 6.0]], np.float32)
      >>> partial = REDUCERS[name].combine(REDUCERS[name].reduce(x[:1], (0,)),
      ...                                  REDUCERS[name].reduce(x[1:], (0,)))
      >>> REDUCERS[name].finish(partial)
      array([[2., 8.]])
    """
    name = f"var(ddof={ddof!r})"
    if dict.get(REDUCERS, name) is None:
        REDUCERS[name] = Reducer(_moments, _chan, functools.partial(_variance_of, ddof),
                                 arrays=2, ddof=ddof, kind="variance")
    return name


def _second_moment_of(partial):
    return partial[2]


#: The sum of squared deviations from the mean, ``sum(square(x - mean(x)))``,
#: in one pass: :func:`variance`'s (count, mean, M2) partials, finished as M2
#: itself (a centred second moment written out in a loss, see
#: ``jask.core.primitives.rewrite_hooks._centred_moment``).
REDUCERS["m2"] = Reducer(_moments, _chan, _second_moment_of, arrays=2, kind="m2")


# --- a mean, a variance and a sum from one pass: (count, mean, M2, total) ----------

def _add_stats(a, b):
    """Two (count, mean, M2, total) partials as one: :func:`_chan` for the
    moments, the totals added as a sum's partials are."""
    return (*_chan(a[:3], b[:3]), a[3] + b[3])


def _stat_of(inner: str, partial):
    """The statistic ``inner`` (a mean, a variance or a sum) from a
    (count, mean, M2, total) partial, as its own reducer would finish it."""
    count, mean, m2, total = partial
    reducer = REDUCERS[inner]
    if reducer.mean_count is not None:
        return _divided(reducer.mean_count, total)
    if reducer.ddof is not None:
        return _variance_of(reducer.ddof, (count, mean, m2))
    return total


#: The statistics :func:`with_moments` can take from one pass.
STATISTICS = ("mean(count=", "var(ddof=", "sum")


def with_moments(inner: str) -> str | None:
    """The name of a reducer giving the same output as ``inner`` (a mean, a
    variance or a float sum) whose partials are (count, mean, M2, total):
    every other of these statistics of the same data is then known from them
    too (:mod:`jask.engine.moments`). None for any other reducer.

    Example:
      >>> name = with_moments(variance(1))
      >>> x = np.array([[1.0, 2.0], [3.0, 6.0]], np.float32)
      >>> partial = REDUCERS[name].combine(REDUCERS[name].reduce(x[:1], (0,)),
      ...                                  REDUCERS[name].reduce(x[1:], (0,)))
      >>> REDUCERS[name].finish(partial), _stat_of(mean_of(2), partial)
      (array([[2., 8.]]), array([[2., 4.]]))
    """
    if inner.startswith("moments:"):
        return inner
    if not inner.startswith(STATISTICS):
        return None
    REDUCERS[inner]  # made from its name if need be
    name = f"moments:{inner}"
    if dict.get(REDUCERS, name) is None:
        REDUCERS[name] = Reducer(_stats, _add_stats, functools.partial(_stat_of, inner),
                                 arrays=3, kind="statistics")
    return name


#: The reduce functions that square deviations in a slab buffer (planners count it).
MOMENTS = (_moments, _stats)


def stat_of(inner: str, partial) -> np.ndarray:
    """The statistic ``inner`` from the partial of a :func:`with_moments` reducer."""
    return _stat_of(inner, partial)


# --- NaN-skipping mean and variance: counts carried as partials ---------------------

def _nan_sums(block, axis):
    """A block's (count, sum) of the elements that are not NaN over ``axis``,
    per kept position, in float64.

    The plain sum first: a lane it leaves NaN holds a NaN (or infinities of
    both signs), and only then are NaNs masked and counted. Data with no NaN,
    the common case, costs one float64 sum (a mask, a count and a masked copy
    of every block took 9x as long)."""
    total = np.add.reduce(block, axis=axis, dtype=np.float64, keepdims=True)
    count = np.full(total.shape, block.size / max(total.size, 1), np.float64)
    if np.isnan(total).any():
        missing = np.isnan(block)
        count -= np.count_nonzero(missing, axis=axis, keepdims=True)
        total = np.add.reduce(np.where(missing, 0, block), axis=axis, dtype=np.float64,
                              keepdims=True)
    return count, total


def _add_nan_sums(a, b):
    return a[0] + b[0], a[1] + b[1]


def _nan_mean_of(partial):
    count, total = partial
    with np.errstate(all="ignore"):  # all NaN: 0 / 0 = NaN, as jnp.nanmean
        return total / count


def _nan_moments(block, axis):
    """A block's (count, mean, M2) of the elements that are not NaN, per kept
    position: :func:`_moments` with a count for each position."""
    count, total = _nan_sums(block, axis)
    with np.errstate(all="ignore"):
        mean = total / count  # NaN where the count is 0; _nan_chan never reads it
        deviations = np.subtract(block, mean, dtype=np.float64)
        if (count < block.size / max(count.size, 1)).any():  # NaNs to leave out
            np.copyto(deviations, 0, where=np.isnan(block))
        np.square(deviations, out=deviations)
        return count, mean, np.sum(deviations, axis=axis, keepdims=True)


def _nan_chan(a, b):
    """:func:`_chan` position by position: an empty side leaves the other as is."""
    (na, ma, m2a), (nb, mb, m2b) = a, b
    n = na + nb
    with np.errstate(all="ignore"):
        delta = mb - ma
        mean = np.where(na == 0, mb, np.where(nb == 0, ma, ma + delta * (nb / n)))
        m2 = np.where(na == 0, m2b, np.where(nb == 0, m2a,
                                             m2a + m2b + np.square(delta) * (na * nb / n)))
    return n, mean, m2


def _nan_variance_of(ddof: float, partial):
    count, _, m2 = partial
    with np.errstate(all="ignore"):  # no more elements than ddof: NaN, as jnp.nanvar
        return np.where(count > ddof, m2 / (count - ddof), np.nan)


def nan_variance(ddof: float = 0) -> str:
    """The name of the reducer giving the variance of the elements that are
    not NaN (``jnp.nanvar``) in one pass: partials are (count, mean, M2) per
    kept position, since each position has its own count of NaNs.

    Example:
      >>> name = nan_variance(0)
      >>> x = np.array([[1.0, np.nan], [3.0, 6.0]], np.float32)
      >>> partial = REDUCERS[name].combine(REDUCERS[name].reduce(x[:1], (0,)),
      ...                                  REDUCERS[name].reduce(x[1:], (0,)))
      >>> REDUCERS[name].finish(partial)
      array([[1., 0.]])
    """
    name = f"nanvar(ddof={ddof!r})"
    if dict.get(REDUCERS, name) is None:
        REDUCERS[name] = Reducer(_nan_moments, _nan_chan,
                                 functools.partial(_nan_variance_of, ddof), arrays=3,
                                 ddof=ddof, skips_nan=True, kind="nanvariance")
    return name


REDUCERS["nanmean"] = Reducer(_nan_sums, _add_nan_sums, _nan_mean_of, arrays=2,
                              skips_nan=True, kind="nanmean")


# --- logsumexp in one pass: (offset, sum of exp(x - offset)) partials ----------------

def _exp_sums(block, axis):
    """A block's (offset, sum of ``exp(x - offset)``) over ``axis``, in
    float64: the offset is the block's max where it is finite, else 0 (as
    jax.nn.logsumexp, so an inf gives inf and a NaN NaN); a block of only
    -inf sums to 0."""
    wide = np.asarray(block, np.float64)
    with np.errstate(all="ignore"):
        top = np.max(wide, axis=axis, keepdims=True) if wide.size else np.zeros(
            tuple(1 if d in axis else n for d, n in enumerate(wide.shape)))
        offset = np.where(np.isfinite(top), top, 0.0)
        return offset, np.sum(np.exp(wide - offset), axis=axis, keepdims=True)


def _add_exp_sums(a, b):
    """Two (offset, sum) partials as one, rescaled to the larger offset (a
    side summing to 0, only -inf, leaves the other as is)."""
    (ma, sa), (mb, sb) = a, b
    with np.errstate(all="ignore"):
        m = np.where(sa == 0, mb, np.where(sb == 0, ma, np.maximum(ma, mb)))
        s = (np.where(sa == 0, 0.0, sa * np.exp(ma - m))
             + np.where(sb == 0, 0.0, sb * np.exp(mb - m)))
    return m, s


def _log_of_exp_sums(partial):
    offset, total = partial
    with np.errstate(all="ignore"):  # nothing but -inf: log(0) = -inf, as jax.nn
        return np.log(total) + offset


#: ``log(sum(exp(x)))`` in one pass, without overflow: each partial is scaled
#: by its own max, rescaled when two meet (the streaming form of the max trick).
REDUCERS["logsumexp"] = Reducer(_exp_sums, _add_exp_sums, _log_of_exp_sums, arrays=2,
                                kind="logsumexp")
