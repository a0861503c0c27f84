"""Products and transposes: ``dot``, ``matmul``, ``transpose``.

Each checks its arguments, so bad input fails with a clear message before
anything is written, then binds its primitive."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import reductions
from jask.api.elementwise import astype, check_in_memory
from jask.api.indexing import reshape
from jask.base import memory
from jask.base.config import Config, get_config
from jask.core import primitives, ufuncs
from jask.core.array import DiskArrayType, disk_type
from jask.engine.blockwise import broadcast_axes

__all__ = ["transpose", "dot", "matmul", "tensordot", "vecdot", "einsum"]


def _require(x, op: str, name: str) -> DiskArrayType:
    aval = disk_type(x)
    if aval is None:
        raise TypeError(f"jask.{op}: {name} must be a DiskArray, got {type(x).__name__}")
    return aval


def transpose(a, axes=None, *, config: Config | None = None):
    """Permute the axes of a disk-backed array: a view of the same store,
    read permuted tile by tile by the ops that use it (nothing is copied;
    ``X.T @ X`` reads ``X`` as it is stored), see :mod:`jask.store.views`.

    Args:
      a: the array to transpose.
      axes: a permutation of ``range(a.ndim)``; by default the axes are
        reversed, as in numpy.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray with its axes permuted.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
      >>> t = jask.transpose(a)
      >>> np.asarray(t.to_memmap()).shape
      (3, 2)
      >>> b = jask.DiskArray.from_numpy(np.zeros((3, 4, 5), dtype=np.float32))
      >>> jask.transpose(b, axes=(2, 0, 1)).shape
      (5, 3, 4)
    """
    aval = disk_type(a)
    if aval is None:
        return jnp.transpose(a, axes)
    if axes is None:
        axes = tuple(reversed(range(aval.ndim)))
    try:
        axes = tuple(int(i) for i in axes)
    except TypeError:
        raise TypeError(f"jask.transpose: axes must be a sequence of ints, got {axes!r}") from None
    axes = tuple(i + aval.ndim if i < 0 else i for i in axes)
    if sorted(axes) != list(range(aval.ndim)):
        raise ValueError(f"jask.transpose: axes {axes} are not a permutation of the "
                         f"{aval.ndim} axes of an array of shape {aval.shape}")
    return primitives.transpose(a, axes, config=config)


def dot(a, b, *, config: Config | None = None):
    """Matrix product of disk-backed and in-memory arrays, with batching.

    Computes ``a @ b`` tile by tile, streaming the contraction axis, with
    ``jnp.matmul`` semantics: the last two axes multiply, leading axes are
    batch axes that must match exactly, and a 1-D operand is a row vector on
    the left or a column vector on the right (its axis is dropped from the
    result). Either operand may be an in-memory array, such as a model's
    parameters: it is sent to every tile, never written to disk, and its
    gradient is an in-memory array (for ``X @ w``, a streamed ``X.T @ g``).
    The result is a DiskArray (a scalar when both operands are 1-D).

    Args:
      a: left operand, shape ``(*batch, M, K)`` or ``(K,)``.
      b: right operand, shape ``(*batch, K, N)`` or ``(K,)``.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray of shape ``(*batch, M, N)`` (vector axes dropped).

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.ones((4, 6), dtype=np.float32))
      >>> b = jask.DiskArray.from_numpy(np.ones((6, 3), dtype=np.float32))
      >>> c = jask.dot(a, b)
      >>> np.asarray(c.to_memmap())[0, 0]
      6.0
      >>> a3 = jask.DiskArray.from_numpy(np.ones((5, 4, 6), dtype=np.float32))
      >>> b3 = jask.DiskArray.from_numpy(np.ones((5, 6, 3), dtype=np.float32))
      >>> jask.dot(a3, b3).shape
      (5, 4, 3)
      >>> w = np.arange(6, dtype=np.float32)              # in memory
      >>> (a @ w).to_numpy()
      array([15., 15., 15., 15.], dtype=float32)
    """
    ta, tb = disk_type(a), disk_type(b)
    if ta is None and tb is None:
        return jnp.matmul(a, b)
    cfg = config or get_config()
    a, b = (x if t is not None else jnp.asarray(x) for x, t in ((a, ta), (b, tb)))
    sa = ta.shape if ta is not None else a.shape
    sb = tb.shape if tb is not None else b.shape
    if len(sa) == 0 or len(sb) == 0:
        raise ValueError(f"jask.dot: operands need at least 1 dimension, got shapes {sa} "
                         f"and {sb}")
    if (len(sa) == 1 and len(sb) > 2) or (len(sb) == 1 and len(sa) > 2):
        raise ValueError(f"jask.dot: a 1-D operand multiplies a matrix, not a batch: got "
                         f"shapes {sa} and {sb}")
    if len(sa) > 1 and len(sb) > 1 and (len(sa) != len(sb) or sa[:-2] != sb[:-2]):
        raise ValueError(f"jask.dot: batch dimensions must match exactly, got shapes "
                         f"{sa} and {sb}")
    ka = sa[-1]
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if ka != kb:
        raise ValueError(f"jask.dot: contraction sizes differ: a has shape {sa} (K={ka}), "
                         f"b has shape {sb} (K={kb})")
    # JAX's promotion in the current x64 mode: a float64 store is float32 with x64 off
    dtype = np.dtype(jnp.result_type(*(jax.ShapeDtypeStruct(t.shape, t.dtype)
                                       if t is not None else x for x, t in ((a, ta), (b, tb)))))
    if dtype == np.bool_ or dtype.kind not in "fc":
        raise TypeError(f"jask.dot: operands must be floating point, got {dtype.name}")
    operands = []
    for x, t in ((a, ta), (b, tb)):
        if t is None:
            x = x.astype(dtype)
            check_in_memory("dot", x, cfg)
        elif t.dtype != dtype:
            x = astype(x, dtype, config=config)
        operands.append(x)
    left, right = operands
    return primitives.dot(left, right, dtype, config=config)


def matmul(a, b, *, config: Config | None = None):
    """Same as :func:`dot` (``a @ b``).

    Example:
      >>> import numpy as np, jask
      >>> jask.matmul(jask.from_numpy(np.eye(2, dtype=np.float32)), np.array([1.0, 2.0])).to_numpy()
      array([1., 2.], dtype=float32)
    """
    return dot(a, b, config=config)


__all__ += ["matrix_transpose"]


def matrix_transpose(x, *, config: Config | None = None):
    """The last two axes of ``x`` swapped (the Array API's
    ``matrix_transpose``, ``x.mT``), as a new DiskArray.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.zeros((2, 3, 5), np.float32))
      >>> jask.matrix_transpose(x).shape
      (2, 5, 3)
    """
    aval = disk_type(x)
    if aval is None:
        return jnp.matrix_transpose(x)
    if aval.ndim < 2:
        raise ValueError(f"jask.matrix_transpose: x must have at least two axes, got shape "
                         f"{tuple(aval.shape)}")
    axes = tuple(range(aval.ndim - 2)) + (aval.ndim - 1, aval.ndim - 2)
    return primitives.transpose(x, axes, config=config)


__all__ += ["tensordot", "vecdot"]


def _contracted(op: str, axes, sa: tuple, sb: tuple) -> tuple[tuple, tuple]:
    """tensordot's ``axes`` (an int, or a pair of sequences) as two tuples of
    non-negative axes of equal sizes."""
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if not 0 <= n <= min(len(sa), len(sb)):
            raise ValueError(f"jask.{op}: axes={n} does not fit shapes {sa} and {sb}")
        pa, pb = tuple(range(len(sa) - n, len(sa))), tuple(range(n))
    else:
        try:
            pa, pb = (tuple(int(i) for i in ((p,) if isinstance(p, (int, np.integer)) else p))
                      for p in axes)
        except (TypeError, ValueError):
            raise TypeError(f"jask.{op}: axes must be an int or a pair of sequences of ints, "
                            f"got {axes!r}") from None
        if len(pa) != len(pb):
            raise ValueError(f"jask.{op}: axes {axes!r} pair {len(pa)} axes with {len(pb)}")
        for p, s in ((pa, sa), (pb, sb)):
            if any(not -len(s) <= i < len(s) for i in p):
                raise ValueError(f"jask.{op}: axes {axes!r} are out of range for shapes "
                                 f"{sa} and {sb}")
        pa = tuple(i % len(sa) for i in pa)
        pb = tuple(i % len(sb) for i in pb)
    if any(sa[i] != sb[j] for i, j in zip(pa, pb)):
        raise ValueError(f"jask.{op}: contracted axes {pa} of shape {sa} and {pb} of shape "
                         f"{sb} differ in size")
    return pa, pb


def _arranged(x, perm: tuple, shape: tuple, config):
    """``x`` with its axes permuted then reshaped (skipping what changes nothing)."""
    on_disk = disk_type(x) is not None
    if perm != tuple(range(len(perm))):
        x = transpose(x, perm, config=config) if on_disk else jnp.transpose(x, perm)
    if tuple(x.shape) != shape:
        x = reshape(x, shape, config=config) if on_disk else jnp.reshape(x, shape)
    return x


def tensordot(a, b, axes=2, *, config: Config | None = None):
    """Sum of products over the axes ``axes`` of ``a`` and ``b``, as
    ``jax.numpy.tensordot`` (``axes``: an int, the last ``axes`` of ``a``
    with the first of ``b``, or a pair of sequences of axes).

    Built on :func:`dot`: the contracted axes are moved together (a
    transpose, only if they are not already last in ``a`` / first in
    ``b``), each operand is seen as a matrix (a reshape, a copy, only if it
    has several free or contracted axes), and one streamed product runs;
    each step is differentiable, so the gradient is too.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.ones((2, 3, 4), np.float32))
      >>> b = jask.from_numpy(np.ones((4, 3, 5), np.float32))
      >>> jask.tensordot(a, b, axes=([1, 2], [1, 0])).to_numpy()[0]
      array([12., 12., 12., 12., 12.], dtype=float32)
    """
    ta, tb = disk_type(a), disk_type(b)
    if ta is None and tb is None:
        return jnp.tensordot(a, b, axes)
    a, b = (x if t is not None else jnp.asarray(x) for x, t in ((a, ta), (b, tb)))
    sa, sb = tuple(a.shape), tuple(b.shape)
    pa, pb = _contracted("tensordot", axes, sa, sb)
    free_a = tuple(d for d in range(len(sa)) if d not in pa)
    free_b = tuple(d for d in range(len(sb)) if d not in pb)
    k = int(np.prod([sa[d] for d in pa]))
    m = int(np.prod([sa[d] for d in free_a]))
    n = int(np.prod([sb[d] for d in free_b]))
    out_shape = tuple(sa[d] for d in free_a) + tuple(sb[d] for d in free_b)
    left = _arranged(a, free_a + pa, (m, k) if free_a else (k,), config)
    right = _arranged(b, pb + free_b, (k, n) if free_b else (k,), config)
    out = dot(left, right, config=config)
    if tuple(out.shape) != out_shape:
        out = reshape(out, out_shape, config=config)
    return out


def vecdot(x1, x2, /, *, axis: int = -1, config: Config | None = None):
    """Dot products of vectors along ``axis`` of ``x1`` and ``x2`` (broadcast
    against each other), as ``jax.numpy.vecdot``: complex ``x1`` is
    conjugated, ``sum(conj(x1) * x2)``.

    One pass: ``x1 * x2`` summed over ``axis`` tile by tile (no product is
    written), with :func:`jask.sum`'s rule for where the result lives (in
    memory when small). Differentiable in both operands.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
      >>> jask.vecdot(x, np.array([1.0, 1.0], np.float32))
      Array([3., 7.], dtype=float32)
    """
    t1, t2 = disk_type(x1), disk_type(x2)
    if t1 is None and t2 is None:
        return jnp.vecdot(x1, x2, axis=axis)
    cfg = config or get_config()
    x1, x2 = (x if t is not None else jnp.asarray(x) for x, t in ((x1, t1), (x2, t2)))
    s1, s2 = tuple(x1.shape), tuple(x2.shape)
    try:
        shape = tuple(np.broadcast_shapes(s1, s2))
    except ValueError:
        raise ValueError(f"jask.vecdot: shapes {s1} and {s2} do not broadcast") from None
    if not shape or not -len(shape) <= axis < len(shape):
        raise ValueError(f"jask.vecdot: axis {axis} is out of range for shapes {s1} and {s2}")
    ax = axis % len(shape)
    n1 = s1[ax - len(shape)] if ax - len(shape) >= -len(s1) else 1
    n2 = s2[ax - len(shape)] if ax - len(shape) >= -len(s2) else 1
    if n1 != n2:
        raise ValueError(f"jask.vecdot: the vectors along axis {axis} differ in length: "
                         f"shapes {s1} and {s2}")
    with jax.enable_x64(True):
        dtype = np.dtype(jnp.result_type(*(t.dtype if t is not None else x.dtype
                                           for x, t in ((x1, t1), (x2, t2)))))
    operands = []
    for x, t in ((x1, t1), (x2, t2)):
        if t is None:
            x = x.astype(jax.dtypes.canonicalize_dtype(dtype))
            check_in_memory("vecdot", x, cfg)
        operands.append(x)
    out_axes = tuple(d for d in range(len(shape)) if d != ax)
    out_shape = tuple(shape[d] for d in out_axes)
    terms = ufuncs.CONJ_MUL if dtype.kind == "c" else ufuncs.MUL  # x1 conjugated, as jnp
    return primitives.reduce("vecdot", terms, operands,
                             [broadcast_axes(s, shape) for s in (s1, s2)], [dtype, dtype],
                             shape, out_axes, dtype, reducer="sum",
                             to_memory=memory.fits_in_memory(out_shape, dtype, config),
                             config=config)


def _einsum_terms(subscripts: str, shapes: list) -> tuple[list, str]:
    """(one string of letters per operand, the output's letters): numpy's
    grammar, ``...`` written out as letters of its own (right-aligned, as
    broadcasting is) and the implicit output (letters seen once, sorted)."""
    spec = subscripts.replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"jask.einsum: {subscripts!r} names {len(terms)} operand(s), "
                         f"{len(shapes)} given")
    used = set(spec) - set(".,->")
    if not all(c.isalpha() for c in used):
        raise ValueError(f"jask.einsum: subscripts {subscripts!r} must be letters, ',', '->' "
                         "and '...'")
    spare = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                 if c not in used)
    widths = [len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)]
    dots = "".join(next(spare) for _ in range(max([w for w in widths if w >= 0] + [0])))
    written = []
    for t, s, w in zip(terms, shapes, widths):
        if "..." in t:
            t = t.replace("...", dots[len(dots) - w:] if w else "")
        if len(t) != len(s) or "." in t:
            raise ValueError(f"jask.einsum: term {t!r} of {subscripts!r} does not match an "
                             f"operand of shape {tuple(s)}")
        written.append(t)
    if arrow:
        output = output.replace("...", dots)
    else:
        letters = "".join(written)
        output = dots + "".join(sorted(c for c in set(letters) - set(dots)
                                       if letters.count(c) == 1))
    if len(set(output)) != len(output) or set(output) - set("".join(written)):
        raise ValueError(f"jask.einsum: output {output!r} of {subscripts!r} repeats a letter "
                         "or names one no operand has")
    return written, output


def einsum(subscripts, *operands, optimize=None, precision=None,
           preferred_element_type=None, config: Config | None = None):
    """Einstein summation, as ``jax.numpy.einsum``, for the contractions jask
    streams: one operand (sums over axes and a transpose), or two whose
    shared letters are either all summed (``tensordot``: ``ij,jk->ik``) or,
    when some are kept (batch letters, ``...ab,...ab->...a``), one pass of
    products summed tile by tile, nothing written between (or, with letters
    of each operand alone beside the batch letters, ``bij,bjk->bik``, a
    batched :func:`matmul`). Letters repeated within one operand (diagonals,
    traces) and three or more operands are refused, naming what to do.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.arange(6.0).reshape(2, 3))
      >>> jask.einsum("ij,kj->ik", a, np.ones((4, 3))).to_numpy()[0]
      array([3., 3., 3., 3.], dtype=float32)
      >>> jask.einsum("...j,...j->...", a, a)
      Array([ 5., 50.], dtype=float32)
    """
    kinds = [disk_type(x) for x in operands]
    extra = {k: v for k, v in (("optimize", optimize), ("precision", precision),
                               ("preferred_element_type", preferred_element_type))
             if v is not None}
    if all(k is None for k in kinds):
        return jnp.einsum(subscripts, *operands, **extra)
    if not isinstance(subscripts, str):
        raise NotImplementedError("jask.einsum: give the subscripts as a string (the "
                                  "interleaved form is not supported on DiskArrays)")
    if preferred_element_type is not None:
        raise NotImplementedError("jask.einsum: preferred_element_type is not supported on "
                                  "DiskArrays; cast the operands with .astype")
    operands = tuple(x if k is not None else jnp.asarray(x) for x, k in zip(operands, kinds))
    terms, output = _einsum_terms(subscripts, [tuple(x.shape) for x in operands])
    if len(operands) > 2:
        raise NotImplementedError(f"jask.einsum: {len(operands)} operands; jask contracts one "
                                  "or two at a time (call einsum on pairs)")
    for t in terms:
        if len(set(t)) != len(t):
            raise NotImplementedError(f"jask.einsum: the letter repeated in {t!r} (a diagonal "
                                      "or trace) is not supported on DiskArrays")
    # letters only one operand has and the output drops: summed first
    summed = []
    for i, (x, t) in enumerate(zip(operands, terms)):
        others = "".join(terms[:i] + terms[i + 1:]) + output
        private = tuple(d for d, c in enumerate(t) if c not in others)
        if private:
            x = _sum(x, private, config)
            t = "".join(c for c in t if c in others)
        summed.append((x, t))
    if len(summed) == 1:
        (x, t), = summed
        return _ordered(x, t, output, config)
    (a, ta), (b, tb) = summed
    shared = [c for c in ta if c in tb]
    batch = [c for c in shared if c in output]
    if not batch:
        contracted = [c for c in shared if c not in output]
        out = tensordot(a, b, ([ta.index(c) for c in contracted],
                               [tb.index(c) for c in contracted]), config=config)
        letters = "".join(c for c in ta if c not in contracted) + "".join(
            c for c in tb if c not in contracted)
        return _ordered(out, letters, output, config)
    if set(ta) - set(tb) and set(tb) - set(ta):
        return _batched_matmul(a, ta, b, tb, batch, output, config)
    return _batched(a, ta, b, tb, output, config)


def _sum(x, axes: tuple, config):
    if disk_type(x) is None:
        return jnp.sum(x, axis=axes)
    return reductions.sum(x, axis=axes, config=config)


def _ordered(x, letters: str, output: str, config):
    """``x`` (its axes named by ``letters``, the output's) in the output's order."""
    perm = tuple(letters.index(c) for c in output)
    if perm == tuple(range(len(perm))):
        return x
    return transpose(x, perm, config=config) if disk_type(x) is not None else jnp.transpose(
        x, perm)


def _reshaped(x, shape: tuple, config):
    if tuple(x.shape) == shape:
        return x
    return reshape(x, shape, config=config) if disk_type(x) is not None else jnp.reshape(
        x, shape)


def _batched_matmul(a, ta: str, b, tb: str, batch: list, output: str, config):
    """Batch letters beside letters of each operand alone: :func:`matmul` of
    ``(batch, free a, summed)`` by ``(batch, summed, free b)``, each seen as
    a stack of matrices."""
    summed = [c for c in ta if c in tb and c not in output]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    sizes = dict(zip(ta, a.shape)) | dict(zip(tb, b.shape))
    if any(dict(zip(ta, a.shape))[c] != dict(zip(tb, b.shape))[c] for c in batch):
        raise NotImplementedError("jask.einsum: batch letters of different lengths "
                                  "(broadcast) beside free letters are not supported")
    lead = tuple(sizes[c] for c in batch)
    k = math.prod(sizes[c] for c in summed)
    m = math.prod(sizes[c] for c in free_a)
    n = math.prod(sizes[c] for c in free_b)
    left = _reshaped(_ordered(a, ta, "".join(batch + free_a + summed), config), lead + (m, k),
                     config)
    right = _reshaped(_ordered(b, tb, "".join(batch + summed + free_b), config), lead + (k, n),
                      config)
    out = _reshaped(matmul(left, right, config=config),
                    lead + tuple(sizes[c] for c in free_a + free_b), config)
    return _ordered(out, "".join(batch + free_a + free_b), output, config)


def _batched(a, ta: str, b, tb: str, output: str, config):
    """One reduction over the full shape ``output + summed letters``: each
    operand's axes put in that order, the products summed tile by tile."""
    full = output + "".join(c for c in ta if c in tb and c not in output)
    sizes: dict = {}
    for x, t in ((a, ta), (b, tb)):
        for c, n in zip(t, x.shape):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                raise ValueError(f"jask.einsum: letter {c!r} has lengths {sizes[c]} and {n}")
            sizes[c] = max(sizes.get(c, 1), n)
    shape = tuple(sizes[c] for c in full)
    operands, maps = [], []
    for x, t in ((a, ta), (b, tb)):
        order = "".join(c for c in full if c in t)
        x = _ordered(x, t, order, config)
        maps.append(tuple(None if n == 1 and sizes[c] != 1 else full.index(c)
                          for c, n in zip(order, x.shape)))
        operands.append(x)
    with jax.enable_x64(True):
        dtype = np.dtype(jnp.result_type(*(x.dtype for x in operands)))
    cfg = config or get_config()
    for i, x in enumerate(operands):
        if disk_type(x) is None:
            operands[i] = x = x.astype(jax.dtypes.canonicalize_dtype(dtype))
            check_in_memory("einsum", x, cfg)
    out_shape = shape[:len(output)]
    return primitives.reduce("einsum", ufuncs.MUL, operands, maps, [dtype, dtype], shape,
                             tuple(range(len(output))), dtype, reducer="sum",
                             to_memory=memory.fits_in_memory(out_shape, dtype, config),
                             config=config)
