"""The public operations. Each checks its arguments, so bad input fails with
a clear message before anything is written, then binds its primitive."""
from __future__ import annotations

import numbers
import os

import jax
import numpy as np

from jask import primitives, storage, work
from jask._jax_internals import is_tracer
from jask.array import DiskArray, DiskArrayType
from jask.config import Config, get_config
from jask.lifetime import collect_if_idle

__all__ = ["open", "from_numpy", "add", "sub", "mul", "square", "transpose", "sum", "dot",
           "materialize", "update_"]

def _disk_type(x) -> DiskArrayType | None:
    """The DiskArrayType of a DiskArray or of a tracer of one, else None."""
    if isinstance(x, DiskArray):
        return x._aval
    if is_tracer(x) and isinstance(x.aval, DiskArrayType):
        return x.aval
    return None


def _require(x, op: str, name: str) -> DiskArrayType:
    aval = _disk_type(x)
    if aval is None:
        raise TypeError(f"jask.{op}: {name} must be a DiskArray, got {type(x).__name__}")
    return aval


def _scalar(x, op: str):
    """A Python number or a 0-d (possibly traced) JAX/numpy value, else None."""
    if isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, bool):
        return x
    if isinstance(x, (jax.Array, np.ndarray)) or is_tracer(x):
        if np.ndim(x) != 0:
            raise TypeError(f"jask.{op}: a non-DiskArray operand must be a scalar, got an "
                            f"array of shape {np.shape(x)}")
        return x
    return None


def _same(a: DiskArrayType, b: DiskArrayType, op: str) -> None:
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(
            f"jask.{op}: operands must have the same shape and dtype, got shape {a.shape} "
            f"{a.dtype.name} and shape {b.shape} {b.dtype.name}")


def _binary(op: str, a, b, config):
    """Dispatch a binary elementwise op on DiskArrays and/or a scalar."""
    ta, tb = _disk_type(a), _disk_type(b)
    if ta is not None and tb is not None:
        _same(ta, tb, op)
        return getattr(primitives, op)(a, b, config=config)
    if ta is None and tb is None:
        raise TypeError(f"jask.{op}: at least one operand must be a DiskArray, got "
                        f"{type(a).__name__} and {type(b).__name__}")
    array, other, left = (a, b, True) if ta is not None else (b, a, False)
    s = _scalar(other, op)
    if s is None:
        raise TypeError(f"jask.{op}: cannot combine a DiskArray with {type(other).__name__}; "
                        "use a DiskArray of the same shape or a scalar")
    if op == "mul":
        return primitives.scalar_op("scale", array, s, config=config)
    if op == "add":
        return primitives.scalar_op("shift", array, s, config=config)
    if left:  # a - s
        return primitives.scalar_op("shift", array, -jax.numpy.asarray(s), config=config)
    return primitives.scalar_op("rsub", array, s, config=config)


def open(path: str | os.PathLike) -> DiskArray:  # noqa: A001 - jask.open, like zarr.open
    """Wrap an existing Zarr array as a DiskArray, without loading it.

    jask never deletes or modifies an opened store, except through
    :meth:`DiskArray.update_` on it.

    Args:
      path: folder of a Zarr (v2 or v3) array.

    Returns:
      A DiskArray whose ``filename`` is ``path``.

    Raises:
      FileNotFoundError: if there is no Zarr array at ``path``.

    Example:
      >>> import numpy as np, zarr, jask
      >>> z = zarr.create_array(store="/tmp/jask-open-example.zarr", shape=(3,),
      ...                       dtype="float32", overwrite=True)
      >>> z[:] = [1, 2, 3]
      >>> float(jask.sum(jask.open("/tmp/jask-open-example.zarr")))
      6.0
    """
    return DiskArray._from_store(storage.register_external(path))


def from_numpy(arr, *, config: Config | None = None) -> DiskArray:
    """Write an in-memory array to a new store (see :meth:`DiskArray.from_numpy`).

    Example:
      >>> import numpy as np, jask
      >>> jask.from_numpy(np.zeros((2, 3))).shape
      (2, 3)
    """
    if isinstance(arr, DiskArray) or is_tracer(arr):
        raise TypeError("jask.from_numpy: expected an in-memory array, got a "
                        f"{type(arr).__name__}")
    value = np.asarray(arr)
    if value.dtype == object:
        raise TypeError("jask.from_numpy: cannot store an object array")
    # A numpy array is a constant: write it now, in its own dtype, even
    # inside a trace (it then enters the program as a constant DiskArray).
    collect_if_idle()
    return DiskArray._from_store(work.write_value(op="from_numpy")([], [value],
                                                                   config or get_config()))


def add(a, b, *, config: Config | None = None):
    """Elementwise sum of two disk-backed arrays.

    Computes ``a + b`` one tile at a time, never materializing either input
    or the output in full. Equivalent to ``a + b``. One operand may also be
    a scalar (a Python number or a JAX scalar, traced or not).

    Args:
      a: first operand.
      b: second operand, same shape and dtype as ``a``.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray holding ``a + b``.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> b = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> c = jask.add(a, b)
      >>> np.asarray(c.to_memmap())[0, 0]
      2.0
    """
    return _binary("add", a, b, config)


def sub(a, b, *, config: Config | None = None):
    """Elementwise difference of two disk-backed arrays.

    Computes ``a - b`` one tile at a time. Equivalent to ``a - b``. One
    operand may also be a scalar.

    Args:
      a: the minuend.
      b: the subtrahend, same shape and dtype as ``a``.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray holding ``a - b``.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.full((4, 4), 5.0, dtype=np.float32))
      >>> b = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> c = jask.sub(a, b)
      >>> np.asarray(c.to_memmap())[0, 0]
      4.0
    """
    return _binary("sub", a, b, config)


def mul(a, b, *, config: Config | None = None):
    """Elementwise or scalar multiplication of disk-backed arrays.

    Computes ``a * b`` one tile at a time. If one argument is not a DiskArray
    (a Python number or a JAX scalar, concrete or traced, e.g. a learning
    rate passed to a jitted function), the other is scaled by it; the order
    does not matter. The gradient with respect to that scalar is available
    too.

    Args:
      a: a DiskArray or a scalar.
      b: a DiskArray or a scalar; at least one of ``a``, ``b`` is a DiskArray.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray of the DiskArray operand's shape.

    Raises:
      TypeError: if neither ``a`` nor ``b`` is a DiskArray.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.full((4, 4), 2.0, dtype=np.float32))
      >>> b = jask.DiskArray.from_numpy(np.full((4, 4), 3.0, dtype=np.float32))
      >>> np.asarray(jask.mul(a, b).to_memmap())[0, 0]
      6.0
      >>> np.asarray(jask.mul(a, 2.5).to_memmap())[0, 0]
      5.0
      >>> np.asarray(jask.mul(2.5, a).to_memmap())[0, 0]
      5.0
    """
    return _binary("mul", a, b, config)


def square(a, *, config: Config | None = None):
    """Elementwise square of a disk-backed array, one tile at a time.

    Args:
      a: the array to square.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray holding ``a ** 2``.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.full((4, 4), 3.0, dtype=np.float32))
      >>> b = jask.square(a)
      >>> np.asarray(b.to_memmap())[0, 0]
      9.0
    """
    _require(a, "square", "a")
    return primitives.square(a, config=config)


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
    aval = _require(a, "transpose", "a")
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


def sum(a, *, config: Config | None = None) -> jax.Array:  # noqa: A001 - jask.sum, like jnp.sum
    """Sum every element of a disk-backed array to a scalar.

    Reduces tile by tile with a tree of partial sums. Unlike the other ops
    the result is small, so it is a real (in-memory) scalar ``jax.Array``.

    Args:
      a: the array to reduce.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A scalar ``jax.Array`` of ``a``'s dtype.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> float(jask.sum(a))
      16.0
    """
    _require(a, "sum", "a")
    return primitives.total(a, config=config)


def dot(a, b, *, config: Config | None = None):
    """Matrix multiplication of two disk-backed arrays, with batching.

    Computes ``a @ b`` tile by tile, streaming the contraction axis, with
    ``jnp.matmul`` semantics: 1-D operands are not accepted, the last two
    axes multiply, and leading axes are batch axes that must match exactly.
    This is ``@``, not ``numpy.dot``'s N-D rule.

    Args:
      a: left operand, shape ``(*batch, M, K)``.
      b: right operand, shape ``(*batch, K, N)``, same dtype.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray of shape ``(*batch, M, N)``.

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
    """
    ta, tb = _require(a, "dot", "a"), _require(b, "dot", "b")
    if ta.ndim < 2 or tb.ndim < 2:
        raise ValueError(f"jask.dot: operands need at least 2 dimensions, got shapes "
                         f"{ta.shape} and {tb.shape}")
    if ta.ndim != tb.ndim or ta.shape[:-2] != tb.shape[:-2]:
        raise ValueError(f"jask.dot: batch dimensions must match exactly, got shapes "
                         f"{ta.shape} and {tb.shape}")
    if ta.shape[-1] != tb.shape[-2]:
        raise ValueError(f"jask.dot: contraction sizes differ: a has shape {ta.shape} "
                         f"(K={ta.shape[-1]}), b has shape {tb.shape} (K={tb.shape[-2]})")
    if ta.dtype != tb.dtype:
        raise ValueError(f"jask.dot: operands must have the same dtype, got {ta.dtype.name} "
                         f"and {tb.dtype.name}")
    return primitives.dot(a, b, config=config)


def materialize(x, *, config: Config | None = None) -> jax.Array:
    """Bring a disk-backed array fully into memory as a real ``jax.Array``.

    Reads the whole array at once: use it only on arrays that fit in memory,
    typically at the end of a disk-backed pipeline. Differentiable: the
    backward pass writes the incoming cotangent to a new ``.grad`` store.

    Args:
      x: the DiskArray to load.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      An in-memory ``jax.Array`` with ``x``'s shape, dtype and values.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> real = jask.materialize(a)
      >>> type(real).__name__
      'ArrayImpl'
    """
    _require(x, "materialize", "x")
    return primitives.materialize(x, config=config)


def update_(target, new_value, *, config: Config | None = None):
    """Functional spelling of :meth:`DiskArray.update_`.

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.zeros(3))
      >>> b = jask.update_(a, jask.from_numpy(np.ones(3)))
      >>> b.filename == a.filename, float(jask.sum(a))
      (True, 3.0)
    """
    t = _require(target, "update_", "the array to update")
    n = _require(new_value, "update_", "new_value")
    if t.shape != n.shape or t.dtype != n.dtype:
        raise ValueError(
            f"update_: new_value has shape {n.shape} and dtype {n.dtype.name}, but the "
            f"array it replaces has shape {t.shape} and dtype {t.dtype.name}")
    return primitives.update(target, new_value, config=config)
