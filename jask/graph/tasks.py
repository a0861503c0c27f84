"""The functions a block task runs. Each reads whole chunks where it can,
computes one tile, and writes one whole output chunk, so concurrent tasks
never share a chunk file."""
from __future__ import annotations

import numpy as np

from jask.chunkio import prefetch, read, write
from jask.storage import StoreSpec


# Elementwise kernels, by name so that tasks pickle cheaply to remote workers.
def _scale(x, s):
    return x * s


def _shift(x, s):
    return x + s


def _rsub(x, s):
    return s - x


def _square_vjp(x, g):
    return (x + x) * g


KERNELS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "neg": np.negative,
    "square": np.square,
    "scale": _scale,
    "shift": _shift,
    "rsub": _rsub,
    "square_vjp": _square_vjp,
}


def elementwise_block(kernel: str, out: StoreSpec, region: tuple,
                      inputs: tuple, scalars: tuple) -> None:
    for x in inputs[1:]:
        prefetch(x, region)  # the disk reads the others while we read the first
    blocks = [read(x, region) for x in inputs]
    result = KERNELS[kernel](*blocks, *(np.asarray(s, out.dtype) for s in scalars))
    write(out, region, np.asarray(result, dtype=out.dtype))


def fill_block(out: StoreSpec, region: tuple, value) -> None:
    shape = tuple(s.stop - s.start for s in region)
    write(out, region, np.full(shape, value, dtype=out.dtype))


def copy_block(out: StoreSpec, region: tuple, source: StoreSpec, axes: tuple) -> None:
    """out[region] = transpose(source, axes)[region]."""
    inverse = tuple(np.argsort(axes))
    source_region = tuple(region[i] for i in inverse)
    block = read(source, source_region)
    write(out, region, np.ascontiguousarray(np.transpose(block, axes)))


def _partial(total) -> np.generic:
    """A block's partial sum, widened so that adding partials loses nothing.

    Within a block numpy's pairwise summation in the array's own dtype is
    accurate and 4x faster than summing in float64.
    """
    kind = np.asarray(total).dtype.kind
    wide = {"f": np.float64, "c": np.complex128, "b": np.int64, "i": np.int64, "u": np.uint64}
    return wide.get(kind, np.float64)(total)


def sum_block(store: StoreSpec, region: tuple):
    return _partial(np.sum(read(store, region)))


def vdot_block(a: StoreSpec, b: StoreSpec, region: tuple):
    x, y = read(a, region), read(b, region)
    product = np.multiply(x, y, out=x if x.flags.writeable else None)
    return _partial(np.sum(product))


def combine(*partials):
    return sum(partials[1:], partials[0])


def _operand(store: StoreSpec, transposed: bool, batch: tuple, rows: slice, cols: slice):
    """A (rows, cols) tile of a matrix operand, which may be read transposed."""
    if transposed:
        return np.swapaxes(read(store, batch + (cols, rows)), -1, -2)
    return read(store, batch + (rows, cols))


def dot_partial(a: StoreSpec, b: StoreSpec, ta: bool, tb: bool, batch: tuple,
                rows: slice, cols: slice, ks: tuple) -> np.ndarray:
    """Sum over the contraction tiles ``ks`` of a[rows, k] @ b[k, cols]."""
    acc = None
    for k in ks:
        prod = _operand(a, ta, batch, rows, k) @ _operand(b, tb, batch, k, cols)
        if acc is None:
            acc = prod
        else:
            acc += prod
            del prod
    return acc


def dot_block(out: StoreSpec, a: StoreSpec, b: StoreSpec, ta: bool, tb: bool,
              batch: tuple, rows: slice, cols: slice, ks: tuple) -> None:
    acc = dot_partial(a, b, ta, tb, batch, rows, cols, ks)
    write(out, batch + (rows, cols), acc.astype(out.dtype, copy=False))


def dot_combine(out: StoreSpec, region: tuple, *partials) -> None:
    write(out, region, combine(*partials).astype(out.dtype, copy=False))
