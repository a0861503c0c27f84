"""The functions a block task runs (copies), and the strips of
a contraction every product adds up (:func:`strip_product`: a product's own
tasks, :mod:`jask.engine.ops.products`, and band groups'). Each reads whole
chunks where it can, computes one tile, and writes one whole output chunk,
so concurrent tasks never share a chunk file. Elementwise ops and
reductions are in :mod:`jask.engine.blockwise`; slices, joins and
reshapes beside their graphs in :mod:`jask.engine.ops.layout`, writes of a region
in :mod:`jask.engine.ops.mutation`."""
from __future__ import annotations

import numpy as np

from jask.store.spec import StoreSpec
from jask.store.tiles import read, write


def copy_block(out: StoreSpec, region: tuple, source: StoreSpec, axes: tuple) -> None:
    """out[region] = transpose(source, axes)[region]."""
    inverse = tuple(np.argsort(axes))
    source_region = tuple(region[i] for i in inverse)
    block = read(source, source_region)
    write(out, region, np.ascontiguousarray(np.transpose(block, axes)))


def combine(*partials):
    return sum(partials[1:], partials[0])


# --- products: strips of the contraction (the products' tasks and band groups') ---

#: Most contraction rows one BLAS call adds up. BLAS adds in the operands'
#: dtype, a running sum along the contraction: over 200,000 rows of a
#: constant float32 column ``X.T @ X`` was 100 ulps off (jax.numpy's too) and
#: ``X.T @ r`` thousands. Products over strips of at most this many rows,
#: cut at its multiples whatever the tiles, are added in float64: about 15
#: ulps on that column, under one on uniform data, at BLAS's speed (a
#: float64 product cost 2-4.5 times as much on 64 columns). A contraction of
#: one strip or less is made in float64: small whatever its dtype, where one
#: float32 BLAS call (OpenBLAS) was 8.3 ulps off over 1,000 rows and
#: jax.numpy's 5.3.
STRIP = 1024


def _strips(k: slice):
    """``k`` cut at the multiples of :data:`STRIP`, as slices of the tile."""
    start = k.start
    while start < k.stop:
        stop = min(k.stop, (start // STRIP + 1) * STRIP)
        yield slice(start - k.start, stop - k.start)
        start = stop


def strip_product(left: np.ndarray, right: np.ndarray, k: slice, length: int,
                  wide: bool = False, row_weights: np.ndarray | None = None) -> np.ndarray:
    """``left @ right`` over the contraction rows ``k`` (of the whole
    operands, ``length`` rows: strips are cut at :data:`STRIP`'s multiples
    there), one BLAS call per strip, added in :func:`partial_dtype`; in that
    dtype throughout when ``length`` is one strip or less, or with ``wide``
    (each strip widened as it is multiplied: a term of a sum that cancels).

    ``row_weights`` (a column, one weight per row of ``right``): ``left @
    (row_weights * right)``, each strip of ``right`` scaled into one reused
    buffer of at most :data:`STRIP` rows just before its product (a weighted
    Gram matrix, :mod:`jask.engine.gram`): the scaled rows are never held
    whole. Every weight the same ``c`` (a least-squares Hessian's), not
    widening ``right``: ``c (left @ right)``, no rows scaled, and BLAS's
    symmetric product where ``left`` is ``right.T``; computed as weighted
    rows where that overflows or meets ``inf * 0``.

    Example:
      >>> x = np.full((10_000, 2), 0.1, np.float32)
      >>> strip_product(x.T, x, slice(0, 10_000), 10_000).dtype
      dtype('float64')
    """
    if row_weights is not None:
        scaled_after = _one_weight(row_weights, right)
        if scaled_after is not None:  # c X.T @ X: no scaled strips, and BLAS's
            with np.errstate(all="ignore"):  # syrk where left is right.T; an overflow
                gram = strip_product(left, right, k, length, wide)  # or inf * 0: below
                gram *= scaled_after
            if np.isfinite(gram).all():  # else X.T @ X overflowed where c * X may not
                return gram
    to = partial_dtype(np.result_type(left, right))
    if length <= STRIP:
        left, right = left.astype(to, copy=False), right.astype(to, copy=False)
    scaled = None
    if row_weights is not None:
        dtype = np.result_type(row_weights, right)
        scaled = np.empty((min(STRIP, k.stop - k.start),) + right.shape[1:], dtype)
    acc = None
    for strip in _strips(k):
        if scaled is not None and row_weights is not None:
            rows = strip.stop - strip.start
            np.multiply(row_weights[strip], right[strip], out=scaled[:rows])
            prod = left[..., strip] @ scaled[:rows]
        elif wide:
            prod = left[..., strip].astype(to, copy=False) @ right[..., strip, :].astype(
                to, copy=False)
        else:
            prod = left[..., strip] @ right[..., strip, :]
        if acc is None:
            acc = prod.astype(partial_dtype(prod.dtype))
        else:
            acc += prod
        del prod
    assert acc is not None, "strip_product: no contraction rows"
    return acc


def _one_weight(row_weights: np.ndarray, right: np.ndarray):
    """The weight every row has, when they all have the same one and it does
    not widen ``right`` (a least-squares Hessian's ``2 / n``: the loss's
    second derivative is constant); else None. Equal weights only, so the
    product is ``c (X.T @ X)`` whatever the data: NaN is never equal."""
    flat = row_weights.reshape(-1)
    if not flat.size or np.result_type(row_weights, right) != right.dtype:
        return None
    first = flat[0]
    if flat.strides[0] != 0 and not (flat == first).all():
        return None
    if first != first:  # NaN broadcast from one value
        return None
    return first


def partial_dtype(dtype) -> np.dtype:
    """The dtype a product's partial sums are kept in: float64 (complex128)
    for floats, as reductions keep theirs; integers as they are (they wrap).

    Example:
      >>> partial_dtype(np.float32), partial_dtype(np.int32)
      (dtype('float64'), dtype('int32'))
    """
    return np.dtype({"f": np.float64, "c": np.complex128}.get(np.dtype(dtype).kind, dtype))
