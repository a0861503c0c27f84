"""Products and transposes: ``dot``, ``matmul``, ``transpose``.

Each checks its arguments, so bad input fails with a clear message before
anything is written, then binds its primitive."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jask.api.elementwise import astype, check_in_memory
from jask.base.config import Config, get_config
from jask.core import primitives
from jask.core.array import DiskArrayType, disk_type

__all__ = ["transpose", "dot", "matmul"]


def _require(x, op: str, name: str) -> DiskArrayType:
    aval = disk_type(x)
    if aval is None:
        raise TypeError(f"jask.{op}: {name} must be a DiskArray, got {type(x).__name__}")
    return aval


def transpose(a, axes=None, *, config: Config | None = None):
    """Permute the axes of a disk-backed array, one tile at a time.

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
