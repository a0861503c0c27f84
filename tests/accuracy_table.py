"""One table of the reductions whose accuracy jask promises (docs/promises.rst),
as optax's ``_OPTIMIZERS_UNDER_TEST``: ``tests/test_reduction_accuracy.py``
checks every row, and ``python -m benchmarks.reduction_accuracy`` prints
each row's worst error against jax.numpy's.

Each :class:`Row` is a reduction over the rows of an (n, 4) array (or a
product of its columns, or a scan along them): the jask call, the
jax.numpy call and the float64 numpy reference, and the data it runs on.
Errors are in ulps of the result's dtype at the reference value, the
largest over the result's elements.

Inputs are real Zarr stores that cost little at any size: a constant array
is a store with a ``fill_value`` and no chunk written; any other is one
period of rows (:data:`PERIOD` at most) written as one chunk, every other
chunk file a hard link to it. Chunkings are multiples of the period, so the
data is the same whatever the chunks, and results of different chunkings
and budgets can be compared with each other.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
import zarr

import jask

COLUMNS = 4
#: Rows of the repeated block of a data set that is not constant.
PERIOD = 1000
DTYPES = (np.float16, np.float32)
#: Sizes in elements: quick; slow (``@pytest.mark.slow``, about 0.5 s a case);
#: huge (about 50 s a case, 70 minutes in all: run with ``JASK_ACCURACY_HUGE=1``
#: or by the benchmark).
SIZES = (10**3, 10**5)
SLOW_SIZES = (10**6,)
HUGE_SIZES = (10**8,)
BUDGETS = ("8MB", "64MB")
#: A jask error is allowed this many ulps beyond jax.numpy's (a result
#: rounded once from float64 is within half an ulp; std rounds its variance
#: and then its square root).
FLOOR_ULPS = 2.0


# --- data ---------------------------------------------------------------------------

def _uniform(rows: int, rng) -> np.ndarray:
    return rng.random((rows, COLUMNS))


def _uniform_nan(rows: int, rng) -> np.ndarray:
    block = rng.random((rows, COLUMNS))
    block[rng.random((rows, COLUMNS)) < 0.05] = np.nan
    return block


def _near_one(rows: int, rng) -> np.ndarray:
    """Factors within 1e-3 of one whose period multiplies to about one, so a
    product of 10^8 of them stays finite."""
    block = 1 + rng.uniform(-1e-3, 1e-3, (rows, COLUMNS))
    block[-1] = 1 / np.prod(block[:-1], axis=0)
    return block


#: data name -> a period of rows in float64 (None: the constant 0.1)
DATA: dict[str, Callable | None] = {"constant": None, "uniform": _uniform,
                                    "uniform-nan": _uniform_nan, "near-one": _near_one}


def period(rows: int) -> int:
    """The rows of the repeated block of an array of ``rows`` rows."""
    return min(PERIOD, max(1, math.ceil(rows / 8)))


def chunkings(rows: int) -> tuple:
    """Three chunk heights, multiples of the period, capped at the rows."""
    p = period(rows)
    return tuple(sorted({min(rows, p * k) for k in (1, 7, 50)}))


def block(rows: int, dtype, data: str) -> np.ndarray:
    """One period of the data set, in ``dtype``."""
    make = DATA[data]
    if make is None:
        return np.full((period(rows), COLUMNS), 0.1, dtype)
    return make(period(rows), np.random.default_rng(rows)).astype(dtype)


def values(rows: int, dtype, data: str) -> np.ndarray:
    """The whole data set in memory (references only)."""
    b = block(rows, dtype, data)
    return np.tile(b, (-(-rows // len(b)), 1))[:rows]


def store(folder: str, rows: int, dtype, data: str, chunk_rows: int) -> str:
    """The path of a Zarr store of the data set with chunks of ``chunk_rows``
    rows (made once per folder)."""
    name = f"{data}-{rows}-{np.dtype(dtype).name}-{chunk_rows}.zarr"
    path = os.path.join(folder, name)
    if os.path.exists(path):
        return path
    constant = DATA[data] is None
    z = zarr.create_array(store=path, shape=(rows, COLUMNS), chunks=(chunk_rows, COLUMNS),
                          dtype=dtype, fill_value=0.1 if constant else 0, compressors=None)
    if not constant:
        b = block(rows, dtype, data)  # chunk_rows is a multiple of its rows, or all rows
        first = np.tile(b, (-(-chunk_rows // len(b)), 1))[:chunk_rows]
        z[:len(first)] = first
        written = os.path.join(path, "c", "0", "0")
        for i in range(1, -(-rows // chunk_rows)):  # the edge chunk is a whole chunk too
            os.makedirs(os.path.join(path, "c", str(i)), exist_ok=True)
            os.link(written, os.path.join(path, "c", str(i), "0"))
    return path


# --- the table -------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """A reduction under test: ``jask(X)``, ``jnp(A)`` and ``numpy(D)`` on
    the same data (a DiskArray, a jax.Array, a float64 numpy array)."""

    name: str
    jask: Callable
    jnp: Callable
    numpy: Callable
    data: tuple = ("constant", "uniform")
    eager: bool = True  # False: every run under jax.jit


def _logsumexp64(d):
    return scipy.special.logsumexp(d, axis=0)


def _cumprod(d):
    return np.cumprod(d, axis=0)


def _normal(ones):
    """X.T @ (X @ w), w in memory: under jit one band group (a row product,
    then a contraction over each band's rows)."""
    def f(x):
        return x.T @ (x @ ones(COLUMNS, x.dtype))
    return f


ROWS: tuple[Row, ...] = (
    Row("sum", lambda x: jask.sum(x, axis=0), lambda a: jnp.sum(a, axis=0),
        lambda d: np.sum(d, axis=0)),
    Row("mean", lambda x: jask.mean(x, axis=0), lambda a: jnp.mean(a, axis=0),
        lambda d: np.mean(d, axis=0)),
    Row("var", lambda x: jask.var(x, axis=0), lambda a: jnp.var(a, axis=0),
        lambda d: np.var(d, axis=0), ("uniform",)),
    Row("std", lambda x: jask.std(x, axis=0, ddof=1), lambda a: jnp.std(a, axis=0, ddof=1),
        lambda d: np.std(d, axis=0, ddof=1), ("uniform",)),
    Row("nansum", lambda x: jask.nansum(x, axis=0), lambda a: jnp.nansum(a, axis=0),
        lambda d: np.nansum(d, axis=0), ("constant", "uniform-nan")),
    Row("nanmean", lambda x: jask.nanmean(x, axis=0), lambda a: jnp.nanmean(a, axis=0),
        lambda d: np.nanmean(d, axis=0), ("constant", "uniform-nan")),
    Row("nanvar", lambda x: jask.nanvar(x, axis=0), lambda a: jnp.nanvar(a, axis=0),
        lambda d: np.nanvar(d, axis=0), ("uniform-nan",)),
    Row("nanstd", lambda x: jask.nanstd(x, axis=0), lambda a: jnp.nanstd(a, axis=0),
        lambda d: np.nanstd(d, axis=0), ("uniform-nan",)),
    Row("logsumexp", lambda x: jask.logsumexp(x, axis=0),
        lambda a: jax.nn.logsumexp(a, axis=0), _logsumexp64),
    Row("prod", lambda x: jask.prod(x, axis=0), lambda a: jnp.prod(a, axis=0),
        lambda d: np.prod(d, axis=0), ("near-one",)),
    Row("cumsum", lambda x: jask.cumsum(x, axis=0), lambda a: jnp.cumsum(a, axis=0),
        lambda d: np.cumsum(d, axis=0)),
    Row("cumulative_prod", lambda x: jask.cumulative_prod(x, axis=0),
        lambda a: jnp.cumulative_prod(a, axis=0), _cumprod, ("near-one",)),
    Row("gram", lambda x: x.T @ x, lambda a: a.T @ a, lambda d: d.T @ d),
    # eagerly X @ w is planned on its own, and a tall X of small chunks is refused
    Row("normal", _normal(jnp.ones), _normal(jnp.ones), _normal(np.ones), eager=False),
)


# --- errors ----------------------------------------------------------------------------

def as_numpy(result) -> np.ndarray:
    """A result in memory: a jax.Array, or a DiskArray read through Zarr."""
    if isinstance(result, jask.DiskArray):
        return zarr.open_array(result.filename, mode="r")[...]
    return np.asarray(result)


def _ulps(values: np.ndarray, dtype) -> np.ndarray:
    """The spacing of ``dtype`` at each of ``values`` (float64)."""
    with np.errstate(over="ignore"):  # beside the largest float16 the next is inf
        return np.spacing(np.abs(values).astype(dtype)).astype(np.float64)


def ulp_error(got: np.ndarray, reference: np.ndarray, dtype) -> float:
    """The largest error of ``got`` in ulps of ``dtype`` at the reference
    value (0 where both are NaN; a reference that rounds beyond the dtype's
    range must come out as the same infinity)."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(reference, np.float64)
    with np.errstate(over="ignore"):
        over = np.isinf(ref.astype(dtype)) & np.isfinite(ref)
    wrong = (over & (got != np.sign(ref) * np.inf)) | (np.isnan(got) != np.isnan(ref))
    if wrong.any():
        return math.inf
    keep = ~over & ~np.isnan(ref)
    return float(np.max(np.abs(got[keep] - ref[keep]) / _ulps(ref[keep], dtype), initial=0.0))


def spread_ulps(results: list, dtype) -> float:
    """How far apart results of the same data are, in ulps of ``dtype``."""
    stack = np.stack([np.asarray(r, np.float64) for r in results])
    if not (np.isnan(stack) == np.isnan(stack[0])).all():
        return math.inf
    with np.errstate(invalid="ignore"):  # where all are NaN
        lo, hi = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
    finite = np.isfinite(lo) & np.isfinite(hi)
    if (~finite & ~np.isnan(lo) & (lo != hi)).any():
        return math.inf  # an infinity in some runs only
    return float(np.max((hi[finite] - lo[finite]) / _ulps(lo[finite], dtype), initial=0.0))


@dataclass
class Measured:
    """One row on one data set, dtype and size: jask's error in each run
    (chunk rows, budget, mode), jax.numpy's, and how far jask's runs differ."""

    row: str
    dtype: str
    size: int
    data: str
    jask: dict
    jnp: float
    spread: float

    @property
    def worst(self) -> float:
        return max(self.jask.values())


def runs(row: Row, rows: int) -> list[tuple]:
    """(chunk rows, budget, mode) of each jask run: every chunking under both
    budgets eagerly, and the middle chunking under ``jax.jit`` (one compile);
    a row that runs only compiled, every run under ``jax.jit``."""
    chunks = chunkings(rows)
    every = [(c, budget) for c in chunks for budget in BUDGETS]
    if not row.eager:
        return [(c, budget, "jit") for c, budget in every]
    return [(c, budget, "eager") for c, budget in every] + [
        (chunks[len(chunks) // 2], BUDGETS[0], "jit")]


def measure(row: Row, dtype, size: int, data: str, folder: str, scratch: str) -> Measured:
    """Run one row on one data set (its stores kept in ``folder``) through
    every chunking, budget and mode, with jask's scratch in ``scratch``."""
    rows = size // COLUMNS
    x = values(rows, dtype, data)
    reference = row.numpy(x.astype(np.float64))
    expected = np.asarray(row.jnp(jnp.asarray(x)))
    del x
    errors, results = {}, []
    for chunk_rows, budget, mode in runs(row, rows):
        jask.set_memory_budget(budget, scratch_dir=scratch)
        X = jask.open(store(folder, rows, dtype, data, chunk_rows))
        f = jax.jit(row.jask) if mode == "jit" else row.jask
        got = as_numpy(f(X))
        del X
        errors[(chunk_rows, budget, mode)] = ulp_error(got, reference, dtype)
        results.append(got)
    return Measured(row.name, np.dtype(dtype).name, size, data, errors,
                    ulp_error(expected, reference, dtype), spread_ulps(results, dtype))


def cases(sizes=SIZES) -> list[tuple]:
    """(row, dtype, size, data) of every case of the table."""
    return [(row, dtype, size, data) for row in ROWS for dtype in DTYPES for size in sizes
            for data in row.data]
