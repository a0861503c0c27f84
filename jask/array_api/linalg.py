"""The standard's ``linalg`` extension: ``jask.array_api.linalg``.

Two kinds of function, by what their inputs are:

* **Streamed** over DiskArrays of any size, one tile at a time, through
  jask's own ops: ``matmul``, ``tensordot``, ``vecdot``, ``matrix_transpose``,
  ``outer``, ``vector_norm`` (any axes and order), ``matrix_norm`` with
  ``ord="fro"``, ``cross``.
* **Tall matrices out of core**: ``qr`` and ``svd`` of a tall (``svd``: or
  wide) DiskArray too large for memory, by tall-skinny QR (the ``R`` s of
  bands of rows, twice, for an orthonormal basis of the columns, then ``Q``
  or ``U`` streamed as ``X @ small``), at jax.numpy's error however small
  the singular values.
* **Factorizations and solves** (``cholesky``, ``det``, ``eigh``, ``eigvalsh``,
  ``inv``, ``matrix_power``, ``matrix_rank``, ``pinv``, ``qr``, ``slogdet``,
  ``solve``, ``svd``, ``svdvals``, ``diagonal``, ``trace``, the other norms):
  ``jax.numpy.linalg``'s on arrays that fit in memory (the ``d x d`` Gram
  matrix ``X.T @ X`` of a tall DiskArray is such an array: streamed to memory,
  then factorized). Each input is read whole, so a DiskArray input must fit
  in the in-memory share of the budget (an eighth, as for any result jask
  places in memory); a larger one is refused before anything is read, naming
  its size, the limit and the streamed way (``X.T @ X``, then ``eigh``).

Results are the namespace's arrays (:func:`~jask.array_api._memory.own`):
DiskArrays, and small results in memory as
:class:`~jask.array_api.InMemoryArray` s; the named tuples (``eigh``, ``qr``,
``slogdet``, ``svd``) keep jax.numpy's field names. In-memory inputs
(``jax.Array``, numpy) are accepted everywhere.

Example:
  >>> import numpy as np, jask.array_api as xp
  >>> X = xp.asarray(np.array([[2.0, 0.0], [0.0, 3.0], [0.0, 0.0]], np.float32))
  >>> w, v = xp.linalg.eigh(X.T @ X)
  >>> w.to_numpy()
  array([4., 9.], dtype=float32)
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable, NamedTuple, cast

import jax.numpy as jnp
import numpy as np

from jask.api import DiskArray, creation, disk_type, elementwise, interop, reductions
from jask.array_api._functions import (
    concat,
    matmul,
    matrix_transpose,
    reshape,
    take,
    tensordot,
    vecdot,
)
from jask.array_api._memory import own, wrap_module

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv",
           "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
           "vector_norm", "in_memory"]


class _QR(NamedTuple):
    Q: Any
    R: Any


class _SVD(NamedTuple):
    U: Any
    S: Any
    Vh: Any


def in_memory(op: str, *arrays):
    """The arrays as in-memory ``jax.Array`` s for ``jax.numpy.linalg``: a
    DiskArray is read whole when it fits in the in-memory share of the budget,
    else refused (before anything is read) with the streamed alternative.

    Example:
      >>> import numpy as np, jask
      >>> from jask.array_api.linalg import in_memory
      >>> [type(a).__name__ for a in in_memory("inv", jask.from_numpy(np.eye(2)))]
      ['ArrayImpl']
    """
    out = []
    for a in arrays:
        aval = disk_type(a)
        if aval is not None and not isinstance(a, DiskArray):
            raise TypeError(f"jask.array_api.linalg.{op} of a DiskArray inside jax.jit: the "
                            "factorizations run in memory on concrete arrays; call it outside "
                            "jit, or pass jask.materialize(x)")
        out.append(interop.read_small(
            a, f"jask.array_api.linalg.{op}", "for a tall matrix X, factorize its Gram matrix "
            "X.T @ X (streamed, d x d) instead (eigh, cholesky, solve)"))
    return out


def _own(value):
    """A result as the namespace's arrays, named tuples kept."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(own(v) for v in value))
    return own(value)


def _in_memory_op(name: str, reference: Callable, doc: str) -> Callable:
    def op(*args, **kwargs):
        arrays = [a for a in args if hasattr(a, "shape")]
        rest = [a for a in args if not hasattr(a, "shape")]
        return _own(reference(*in_memory(name, *arrays), *rest, **kwargs))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    op.__signature__ = inspect.signature(reference)  # type: ignore[attr-defined]
    return op


cholesky = _in_memory_op("cholesky", jnp.linalg.cholesky, """The lower (``upper=True``:
    upper) Cholesky factor of symmetric positive-definite matrices, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.cholesky(xp.asarray(np.array([[4.0, 2.0], [2.0, 5.0]]))).to_numpy()
      array([[2., 0.],
             [1., 2.]], dtype=float32)
    """)
det = _in_memory_op("det", jnp.linalg.det, """Determinants, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> float(xp.linalg.det(xp.asarray(np.array([[2.0, 1.0], [1.0, 3.0]]))))
      5.0...
    """)
eigh = _in_memory_op("eigh", jnp.linalg.eigh, """Eigenvalues (ascending) and
    eigenvectors of symmetric matrices, ``(eigenvalues, eigenvectors)``, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.eigh(xp.asarray(np.diag([3.0, 1.0]))).eigenvalues.to_numpy()
      array([1., 3.], dtype=float32)
    """)
eigvalsh = _in_memory_op("eigvalsh", jnp.linalg.eigvalsh, """Eigenvalues of symmetric
    matrices, ascending, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.eigvalsh(xp.asarray(np.diag([3.0, 1.0]))).to_numpy()
      array([1., 3.], dtype=float32)
    """)
inv = _in_memory_op("inv", jnp.linalg.inv, """Inverses of square matrices, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.inv(xp.asarray(np.diag([2.0, 4.0]))).to_numpy()
      array([[0.5 , 0.  ],
             [0.  , 0.25]], dtype=float32)
    """)
matrix_power = _in_memory_op("matrix_power", jnp.linalg.matrix_power, """Square matrices
    raised to an integer power ``n``, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.matrix_power(xp.asarray(np.diag([2.0, 3.0])), 2).to_numpy()
      array([[4., 0.],
             [0., 9.]], dtype=float32)
    """)
matrix_rank = _in_memory_op("matrix_rank", jnp.linalg.matrix_rank, """Ranks (by singular
    values above ``rtol``), in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> int(xp.linalg.matrix_rank(xp.asarray(np.ones((3, 3)))))
      1
    """)
pinv = _in_memory_op("pinv", jnp.linalg.pinv, """Moore-Penrose pseudo-inverses, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.pinv(xp.asarray(np.array([[2.0], [0.0]]))).to_numpy()
      array([[0.5, 0. ]], dtype=float32)
    """)
_qr_in_memory = _in_memory_op("qr", jnp.linalg.qr, "")


def _tall(x) -> bool:
    """Whether ``x`` is a concrete tall 2-D DiskArray over the in-memory
    share whose ``n x n`` factors fit in it (they are results in memory,
    float64 while factorized): factorized by tall-skinny QR. Its work, a
    band of at least ``n`` rows and the stacked ``R`` s (at most ``4 n x n``
    float64 at once), takes at most an in-memory operand's quarter of the
    budget (``(100, 20)`` at 64 kB: scikit-learn's PCA tests)."""
    aval = disk_type(x)
    if aval is None or not isinstance(x, DiskArray) or aval.ndim != 2:
        return False
    m, n = aval.shape
    work = 2 * interop.in_memory_share()  # a quarter of the budget
    return (m >= n and not interop.fits_in_memory(aval.shape, aval.dtype)
            and interop.fits_in_memory((n, n), np.float64) and 4 * n * n * 8 <= work)


def _r(a: np.ndarray) -> np.ndarray:
    """The R of ``a``'s QR (numpy's ``mode="r"``, which returns R alone)."""
    return cast(np.ndarray, np.linalg.qr(a, mode="r"))


def _tsqr_r(x) -> np.ndarray:
    """The R of a tall DiskArray ``x`` (n x n, float64, in memory) by
    tall-skinny QR: the R of each band of rows (at most a quarter of the
    in-memory share, so a band and its factorization's workspace fit), stacked
    and factorized again whenever they would outgrow a band. One read of x."""
    m, n = x.shape
    rows = max(n, interop.in_memory_share() // 4 // (8 * n))
    stack: list[np.ndarray] = []
    held = 0
    for start in range(0, m, rows):
        band = np.asarray(interop.materialize(x[start:start + rows]), np.float64)
        stack.append(_r(band))
        held += stack[-1].shape[0]
        if held >= rows:
            stack, held = [_r(np.concatenate(stack))], n
    r = _r(np.concatenate(stack))
    if r.shape[0] < n:  # fewer rows than columns in all: pad, as numpy's R is n x n
        r = np.concatenate([r, np.zeros((n - r.shape[0], n))])
    return r


def qr(x, /, *, mode="reduced"):
    """QR factorization ``(Q, R)``: ``jax.numpy.linalg.qr`` in memory for an
    input within the in-memory share; for a tall DiskArray over it (``m >=
    n``, ``R`` small), out of core from an orthonormal basis of ``X``'s
    columns (:func:`_tall_basis`, two reads of ``X``): ``X = Q2 B``, ``B =
    Qb R`` in memory, ``Q = Q2 Qb`` streamed (a DiskArray). There ``mode`` is
    ``"reduced"`` (``Q`` is ``m x n``; ``R`` in memory, its diagonal
    non-negative).

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> q, r = xp.linalg.qr(xp.asarray(np.array([[3.0, 1.0], [4.0, 2.0]])))
      >>> np.allclose(np.asarray(q.to_numpy() @ r.to_numpy()), [[3, 1], [4, 2]])
      True
    """
    if not _tall(x):
        return _qr_in_memory(x, mode=mode)
    if mode != "reduced":
        raise ValueError(f"jask.array_api.linalg.qr: a tall DiskArray of shape "
                         f"{tuple(x.shape)} is factorized in mode 'reduced' only (its "
                         f"'complete' Q would be {x.shape[0]} x {x.shape[0]}), not {mode!r}")
    y, to_q, b = _tall_basis(x, "qr")
    qb, rb = np.linalg.qr(b)
    d = np.where(np.diag(rb) < 0, -1.0, 1.0)  # R's diagonal non-negative, Q's columns to match
    q = matmul(y, np.asarray(to_q @ (qb * d), x.dtype))
    return _QR(q, own(np.asarray(rb * d[:, None], q.dtype)))  # in the dtype jask gave Q


slogdet = _in_memory_op("slogdet", jnp.linalg.slogdet, """Signs and logarithms of the
    absolute determinants, ``(sign, logabsdet)``, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> s, l = xp.linalg.slogdet(xp.asarray(np.diag([-2.0, 3.0])))
      >>> float(s), round(float(l), 4)
      (-1.0, 1.7918)
    """)
solve = _in_memory_op("solve", jnp.linalg.solve, """The solution ``x`` of ``x1 @ x = x2``,
    in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> a, b = xp.asarray(np.diag([2.0, 4.0])), xp.asarray(np.array([2.0, 2.0]))
      >>> xp.linalg.solve(a, b).to_numpy()
      array([1. , 0.5], dtype=float32)
    """)
_svd_in_memory = _in_memory_op("svd", jnp.linalg.svd, "")


def svd(x, /, *, full_matrices=True):
    """Singular value decomposition ``(U, S, Vh)``: ``jax.numpy.linalg.svd`` in
    memory for an input within the in-memory share; for a tall (or, through
    its transpose, wide) DiskArray over it whose ``n x n`` factor is small, out
    of core (see :func:`_tall_svd`: two reads of ``X``, then ``U`` streamed as
    ``X @ small``, a DiskArray with orthonormal columns, small singular values
    kept as they are). There ``full_matrices=False`` is required.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.svd(xp.asarray(np.diag([1.0, 5.0])), full_matrices=False).S.to_numpy()
      array([5., 1.], dtype=float32)
    """
    wide = disk_type(x) is not None and len(x.shape) == 2 and x.shape[0] < x.shape[1]
    if not (_tall(x) or (wide and isinstance(x, DiskArray) and _tall(matrix_transpose(x)))):
        return _svd_in_memory(x, full_matrices=full_matrices)
    if full_matrices:
        raise ValueError(f"jask.array_api.linalg.svd: a DiskArray of shape {tuple(x.shape)} "
                         "over the in-memory share is factorized with full_matrices=False only "
                         "(its full U would be square in its long side)")
    if wide:
        u, s_, vh = svd(matrix_transpose(x), full_matrices=False)
        return _SVD(matrix_transpose(vh), s_, matrix_transpose(u))
    return _tall_svd(x)


def _tall_basis(x, op: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """An orthonormal basis ``Q`` of a tall DiskArray's columns, as ``(Y, M,
    B)``: ``Q = Y @ M`` (``Y`` streamed from ``X``, ``M`` small) and ``X = Q
    B`` (``B`` small, float64), at jax.numpy's accuracy however small ``X``'s
    singular values. ``Q = X R^-1`` alone would lose orthogonality as ``X``'s
    condition number grows, and ``U = X V / S`` a small singular value's
    column (its error grows as ``S[0] / S[i]``); instead ``X`` is first made
    near-orthonormal, then orthonormalized exactly:

    1. ``R1`` of a tall-skinny QR of ``X`` (one read, float64), ``R1 = U1 S1 V1^T``;
    2. ``Y = X V1 / S1`` (streamed; a singular value under ``X``'s rounding,
       ``S1[0] * eps``, is divided by that floor instead, so ``Y`` stays
       bounded: its columns near orthonormal);
    3. ``R2`` of a tall-skinny QR of ``Y`` (one read): ``Q = Y R2^-1`` has
       orthonormal columns, and ``X = Y F V1^T = Q (R2 F V1^T)``.

    A column of ``Y`` (near) zero (``X`` exactly rank deficient: ``X v`` is
    zero, with no rounding to give it a value) has no direction: it is
    replaced by a fixed generic one (``cos((i + 1) * phi)``, streamed), its
    factor in ``F`` by 0, and ``R2`` taken again (a third read), so that ``Q``
    is orthonormal still, as jax.numpy's is. Columns of ``Y`` dependent
    otherwise (never seen in practice) are refused, naming ``op``.
    """
    dtype = np.dtype(x.dtype)
    eps = np.finfo(dtype).eps
    _, s1, vh1 = np.linalg.svd(_tsqr_r(x))
    floor = np.maximum(s1, s1.max(initial=0.0) * eps)
    floor = np.where(floor > 0, floor, 1.0)  # an all-zero X: every column of Y zero
    y = matmul(x, np.asarray(vh1.T / floor, dtype))
    r2 = _tsqr_r(y)
    dead = np.linalg.norm(r2, axis=0) <= np.sqrt(eps)  # the column norms of Y
    if dead.any():
        floor = np.where(dead, 0.0, floor)
        m, n = x.shape
        phi = (np.arange(n) + 1) * 0.6180339887 % 1 * dead  # distinct, irrational: generic
        rows = reshape(creation.arange(1, m + 1, 1, dtype), (m, 1))
        filler = elementwise.multiply(elementwise.cos(elementwise.multiply(
            rows, np.asarray(phi, dtype)[None, :])), np.asarray(dead, dtype)[None, :])
        y = elementwise.add(matmul(x, np.asarray(vh1.T / np.where(dead, 1.0, floor) *
                                                 ~dead, dtype)), filler)
        r2 = _tsqr_r(y)
    if np.abs(np.diag(r2)).min(initial=1.0) <= np.sqrt(eps):
        raise np.linalg.LinAlgError(
            f"jask.array_api.linalg.{op}: the columns of the DiskArray of shape "
            f"{tuple(x.shape)} are dependent in a way the out-of-core route cannot "
            "orthonormalize")
    return y, np.linalg.inv(r2), r2 @ (floor[:, None] * vh1)


def _tall_svd(x) -> _SVD:
    """The thin SVD of a tall DiskArray: ``X = Q B`` (:func:`_tall_basis`),
    ``B = U3 S Vh`` in memory, ``U = Q U3`` streamed."""
    y, to_q, b = _tall_basis(x, "svd")
    u3, s_, vh = np.linalg.svd(b)
    u = matmul(y, np.asarray(to_q @ u3, x.dtype))
    return _SVD(u, own(np.asarray(s_, u.dtype)), own(np.asarray(vh, u.dtype)))


svdvals = _in_memory_op("svdvals", jnp.linalg.svdvals, """Singular values, descending,
    in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.svdvals(xp.asarray(np.diag([1.0, 5.0]))).to_numpy()
      array([5., 1.], dtype=float32)
    """)
diagonal = _in_memory_op("diagonal", jnp.linalg.diagonal, """The diagonal ``offset`` of
    the last two axes, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.linalg.diagonal(xp.asarray(np.arange(4.0).reshape(2, 2))).to_numpy()
      array([0., 3.], dtype=float32)
    """)
trace = _in_memory_op("trace", jnp.linalg.trace, """Sums of the diagonal ``offset`` of
    the last two axes, in memory.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> float(xp.linalg.trace(xp.asarray(np.arange(4.0).reshape(2, 2))))
      3.0
    """)


def outer(x1, x2, /):
    """The outer product of two 1-D arrays, streamed (a broadcast product).

    Example:
      >>> import jask.array_api as xp
      >>> xp.linalg.outer(xp.asarray([1.0, 2.0]), xp.asarray([3.0, 4.0])).to_numpy()
      array([[3., 4.],
             [6., 8.]], dtype=float32)
    """
    for name, x in (("x1", x1), ("x2", x2)):
        if len(x.shape) != 1:
            raise ValueError(f"jask.array_api.linalg.outer: {name} must be 1-D, got shape "
                             f"{tuple(x.shape)}")
    return own(elementwise.multiply(_reshape(x1, (-1, 1)), _reshape(x2, (1, -1))))


def _reshape(x, shape):
    return reshape(x, shape) if disk_type(x) is not None else jnp.reshape(jnp.asarray(x), shape)


def cross(x1, x2, /, *, axis=-1):
    """Cross products of 3-vectors along ``axis``, streamed (elementwise
    products of the components).

    Example:
      >>> import jask.array_api as xp
      >>> xp.linalg.cross(xp.asarray([1.0, 0.0, 0.0]), xp.asarray([0.0, 1.0, 0.0])).to_numpy()
      array([0., 0., 1.], dtype=float32)
    """
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError(f"jask.array_api.linalg.cross: axis {axis} must have length 3, got "
                         f"shapes {tuple(x1.shape)} and {tuple(x2.shape)}")

    def part(x, i):
        if disk_type(x) is None:
            return jnp.take(jnp.asarray(x), jnp.asarray([i]), axis=axis)
        return take(x, np.asarray([i]), axis=axis)
    a, b = [part(x1, i) for i in range(3)], [part(x2, i) for i in range(3)]
    sub, mul = elementwise.subtract, elementwise.multiply
    parts = [sub(mul(a[1], b[2]), mul(a[2], b[1])), sub(mul(a[2], b[0]), mul(a[0], b[2])),
             sub(mul(a[0], b[1]), mul(a[1], b[0]))]
    if all(disk_type(p) is None for p in parts):
        return own(jnp.concatenate(parts, axis=axis))
    return concat([own(p) for p in parts], axis=axis)


def _axes(x, axis) -> tuple:
    ndim = len(x.shape)
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(int(a) % ndim for a in axes)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002
    """Vector norms over ``axis`` (``None``: all elements), streamed: ``ord``
    2 (default), 1, any p > 0, ``inf``, ``-inf``, 0 (the count of non-zeros)
    and negative p, as the standard.

    Example:
      >>> import jask.array_api as xp
      >>> xp.linalg.vector_norm(xp.asarray([[3.0, 4.0], [0.0, 1.0]]), axis=1).to_numpy()
      array([5., 1.], dtype=float32)
    """
    if disk_type(x) is None:
        return own(jnp.linalg.vector_norm(jnp.asarray(x), axis=axis, keepdims=keepdims,
                                          ord=ord))
    if np.dtype(x.dtype).kind != "f":
        raise TypeError(f"jask.array_api.linalg.vector_norm: x must have a real floating "
                        f"dtype, got {np.dtype(x.dtype).name}")
    axes = _axes(x, axis)
    a = elementwise.abs(x)
    if ord == 2:
        out = elementwise.sqrt(reductions.sum(elementwise.square(a), axis=axes,
                                              keepdims=keepdims))
    elif ord == math.inf:
        out = reductions.max(a, axis=axes, keepdims=keepdims)
    elif ord == -math.inf:
        out = reductions.min(a, axis=axes, keepdims=keepdims)
    elif ord == 0:
        out = elementwise.astype(reductions.sum(elementwise.not_equal(a, 0), axis=axes,
                                                keepdims=keepdims), x.dtype)
    elif ord == 1:
        out = reductions.sum(a, axis=axes, keepdims=keepdims)
    elif isinstance(ord, (int, float)) and not isinstance(ord, bool):
        p = np.asarray(ord, x.dtype)
        out = elementwise.power(reductions.sum(elementwise.power(a, p), axis=axes,
                                               keepdims=keepdims), np.asarray(1 / ord, x.dtype))
    else:
        raise ValueError(f"jask.array_api.linalg.vector_norm: ord must be a number, inf or "
                         f"-inf, got {ord!r}")
    return own(out)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002
    """Matrix norms of the last two axes: ``"fro"`` streamed over DiskArrays of
    any size, the others (``"nuc"``, 1, 2, inf and their negatives) in memory
    through ``jax.numpy.linalg.matrix_norm``.

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> float(xp.linalg.matrix_norm(xp.asarray(np.full((2, 2), 2.0))))
      4.0
    """
    if len(x.shape) < 2:
        raise ValueError(f"jask.array_api.linalg.matrix_norm: x must have at least 2 "
                         f"dimensions, got shape {tuple(x.shape)}")
    if ord == "fro" and disk_type(x) is not None:
        ndim = len(x.shape)
        return vector_norm(x, axis=(ndim - 2, ndim - 1), keepdims=keepdims)
    (value,) = in_memory("matrix_norm", x)
    return own(jnp.linalg.matrix_norm(value, keepdims=keepdims, ord=ord))


# every function takes the namespace's arrays (unwrapped) and answers them
wrap_module(globals(), [n for n in __all__ if n != "in_memory"])
