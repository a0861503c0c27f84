"""Truth reductions: ``all``, ``any`` and ``count_nonzero`` over axes.

Each is one pass: ``x != 0`` tile by tile, reduced by a logical and, a
logical or or a sum; the result lives where :func:`jask.sum`'s would (in
memory when small). Not differentiable (bool and int results). With no
DiskArray operand each is its ``jax.numpy`` counterpart. (A module of their
own: inside it ``all`` and ``any`` are jask's, not Python's builtins.)
"""
from __future__ import annotations

import jax.numpy as jnp

from jask.api.reductions import _disk, _in_memory, _layout, _result_dtype
from jask.base.config import Config
from jask.core import primitives, ufuncs
from jask.core.array import disk_type

__all__ = ["all", "any", "count_nonzero"]


def _truth(op, reducer, x, axis, keepdims, config):
    """all, any or count_nonzero: ``x != 0`` reduced by ``reducer``."""
    aval = _disk(x)
    reduced, out_axes, out_shape = _layout(op, x, axis, keepdims)
    dtype = _result_dtype({"all": jnp.all, "any": jnp.any,
                           "count_nonzero": jnp.count_nonzero}[op], x)
    return primitives.reduce(op, ufuncs.NONZERO, [x], [tuple(range(aval.ndim))], [None],
                             aval.shape, out_axes, dtype, reducer=reducer,
                             to_memory=_in_memory(axis, out_shape, dtype, config),
                             config=config)


def all(x, axis=None, keepdims: bool = False, *, config: Config | None = None):  # noqa: A001
    """Whether every element of ``x`` over ``axis`` is nonzero (True),
    as ``jax.numpy.all``; see :func:`sum` for where the result lives.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 0.0], [3.0, 4.0]], np.float32))
      >>> jask.all(x, axis=1)
      Array([False,  True], dtype=bool)
    """
    if disk_type(x) is None:
        return jnp.all(x, axis=axis, keepdims=keepdims)
    return _truth("all", "all", x, axis, keepdims, config)


def any(x, axis=None, keepdims: bool = False, *, config: Config | None = None):  # noqa: A001
    """Whether some element of ``x`` over ``axis`` is nonzero (True),
    as ``jax.numpy.any``.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[0.0, 0.0], [0.0, 4.0]], np.float32))
      >>> jask.any(x, axis=1)
      Array([False,  True], dtype=bool)
    """
    if disk_type(x) is None:
        return jnp.any(x, axis=axis, keepdims=keepdims)
    return _truth("any", "any", x, axis, keepdims, config)


def count_nonzero(x, axis=None, keepdims: bool = False, *, config: Config | None = None):
    """How many elements of ``x`` over ``axis`` are nonzero, as
    ``jax.numpy.count_nonzero`` (int32; int64 in JAX's x64 mode).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 4.0]], np.float32))
      >>> jask.count_nonzero(x, axis=1)
      Array([2, 1], dtype=int32)
    """
    if disk_type(x) is None:
        return jnp.count_nonzero(x, axis=axis, keepdims=keepdims)
    return _truth("count_nonzero", "sum", x, axis, keepdims, config)
