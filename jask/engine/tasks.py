"""The functions a block task runs (copies, slices, joins), and the strips of
a contraction every product adds up (:func:`strip_product`: a product's own
tasks, :mod:`jask.engine.ops.products`, and band groups'). Each reads whole
chunks where it can, computes one tile, and writes one whole output chunk,
so concurrent tasks never share a chunk file. Elementwise ops and
reductions are in :mod:`jask.engine.blockwise`."""
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


def selected(sel: tuple, tile: tuple) -> tuple | None:
    """Where the selection ``sel`` (per axis ``(start, stop, step)`` of the
    positions picked, ``stop`` past the last) meets ``tile``: per axis the
    slice of the tile and the range ``(k0, k1)`` of picked positions there,
    or None where they do not meet.

    Example:
      >>> selected(((1, 10, 3),), (slice(3, 8),))
      ((slice(1, 5, 3),), ((1, 3),))
    """
    local, ranks = [], []
    for (start, stop, step), t in zip(sel, tile):
        k0 = max(0, -(-(t.start - start) // step))
        k1 = min(-(-(stop - start) // step), -(-(t.stop - start) // step))
        if k1 <= k0:
            return None
        first, last = start + k0 * step, start + (k1 - 1) * step
        local.append(slice(first - t.start, last + 1 - t.start, step))
        ranks.append((k0, k1))
    return tuple(local), tuple(ranks)


def set_region_block(out: StoreSpec, region: tuple, target: StoreSpec, value: StoreSpec,
                     sel: tuple) -> None:
    """out[region] = target[region] with the positions ``sel`` picks set to
    ``value`` (a store of the selection's shape, length-1 axes broadcast, in
    the target's dtype): ``x[key] = v`` for one tile."""
    block = np.array(read(target, region), copy=True)
    met = selected(sel, region)
    if met is not None:
        local, ranks = met
        part = tuple(slice(0, 1) if n == 1 else slice(k0, k1)
                     for n, (k0, k1) in zip(value.shape, ranks))
        block[local] = read(value, part)
    write(out, region, block)


def combine(*partials):
    return sum(partials[1:], partials[0])


# --- slicing and joining --------------------------------------------------------------

def _extent(region: tuple) -> tuple:
    return tuple(r.stop - r.start for r in region)


def slice_block(out: StoreSpec, region: tuple, source: StoreSpec, sizes: tuple,
                starts: tuple) -> None:
    """out[region] = source[index][region]; ``sizes`` per source axis is
    (size, step) of a slice or None for an integer index."""
    window, steps, i = [], [], 0
    for start, x in zip(starts, sizes):
        if x is None:
            window.append(slice(start, start + 1))
            steps.append(slice(None))
            continue
        r, step = region[i], x[1]
        window.append(slice(start + r.start * step, start + (r.stop - 1) * step + 1))
        steps.append(slice(None, None, step))
        i += 1
    block = read(source, tuple(window))[tuple(steps)]
    write(out, region, np.ascontiguousarray(block).reshape(_extent(region)))


def scatter_block(out: StoreSpec, region: tuple, g: StoreSpec, sizes: tuple,
                  starts: tuple) -> None:
    """out[region] = the slice's cotangent g where the slice took elements, else 0."""
    block = np.zeros(_extent(region), dtype=out.dtype)
    dst, src = [], []
    for r, start, x in zip(region, starts, sizes):
        if x is None:  # an integer index: the cotangent has no such axis
            if not r.start <= start < r.stop:
                return write(out, region, block)
            dst.append(slice(start - r.start, start - r.start + 1))
            continue
        size, step = x
        lo = max(0, -(-(r.start - start) // step))
        hi = min(size, -(-(r.stop - start) // step))
        if lo >= hi:
            return write(out, region, block)
        first = start + lo * step - r.start
        dst.append(slice(first, first + (hi - lo - 1) * step + 1, step))
        src.append(slice(lo, hi))
    part = read(g, tuple(src))
    block[tuple(dst)] = part.reshape(block[tuple(dst)].shape)
    write(out, region, block)


def concatenate_block(out: StoreSpec, region: tuple, inputs: tuple, axis: int,
                      stack: bool) -> None:
    """out[region] from the inputs it overlaps along ``axis``."""
    block = np.empty(_extent(region), dtype=out.dtype)
    r, offset = region[axis], 0
    for x in inputs:
        length = 1 if stack else x.shape[axis]
        lo, hi = max(r.start, offset), min(r.stop, offset + length)
        if lo < hi:
            dst = region[:axis] + (slice(lo - r.start, hi - r.start),) + region[axis + 1:]
            dst = tuple(slice(0, s.stop - s.start) if i != axis else s
                        for i, s in enumerate(dst))
            if stack:
                part = read(x, region[:axis] + region[axis + 1:])
                block[dst] = np.expand_dims(part, axis)
            else:
                src = region[:axis] + (slice(lo - offset, hi - offset),) + region[axis + 1:]
                block[dst] = read(x, src)
        offset += length
    write(out, region, block)


def reshape_block(out: StoreSpec, rows: slice, source: StoreSpec) -> None:
    """out[rows] from the C-order elements of source it holds: the source
    rows that cover that flat range, read whole and cut."""
    out_row = int(np.prod(out.shape[1:], dtype=np.int64))
    src_row = int(np.prod(source.shape[1:], dtype=np.int64))
    first, last = rows.start * out_row, rows.stop * out_row
    r0, r1 = first // src_row, -(-last // src_row)
    block = read(source, (slice(r0, r1),) + tuple(slice(0, n) for n in source.shape[1:]))
    flat = block.reshape(-1)[first - r0 * src_row:last - r0 * src_row]
    write(out, (rows,) + tuple(slice(0, n) for n in out.shape[1:]),
          flat.reshape((rows.stop - rows.start,) + tuple(out.shape[1:])))


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
    whole.

    Example:
      >>> x = np.full((10_000, 2), 0.1, np.float32)
      >>> strip_product(x.T, x, slice(0, 10_000), 10_000).dtype
      dtype('float64')
    """
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


def partial_dtype(dtype) -> np.dtype:
    """The dtype a product's partial sums are kept in: float64 (complex128)
    for floats, as reductions keep theirs; integers as they are (they wrap).

    Example:
      >>> partial_dtype(np.float32), partial_dtype(np.int32)
      (dtype('float64'), dtype('int32'))
    """
    return np.dtype({"f": np.float64, "c": np.complex128}.get(np.dtype(dtype).kind, dtype))
