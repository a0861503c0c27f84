"""``jask.map``: any elementwise function of jax.numpy arrays, tile by tile.

The escape hatch for ops the table does not have: ``f`` runs (jitted) on
each tile's numpy arrays, and its gradient is the per-tile ``jax.vjp`` of
``f``. The table's own ops use numpy kernels, which are faster; JAX inside
a task of a compiled program has been reported to hang on some platforms
(jax-ml/jax#24255), so prefer the table where it has the op.
"""
from __future__ import annotations

import weakref

import jax
import numpy as np

from jask.api import elementwise
from jask.base.config import Config
from jask.core.array import disk_type
from jask.core.ufuncs import Ufunc

__all__ = ["map"]

_rows: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Kernel:
    """``f`` on numpy tiles, jitted once per tile shape."""

    def __init__(self, f):
        self.f = f
        self.jitted = jax.jit(f)

    def __call__(self, *blocks):
        with _x64_for(blocks):
            return np.asarray(self.jitted(*blocks))


class _Cotangent:
    """Operand ``j``'s cotangent tile: ``jax.vjp(f, *blocks)[1](g)[j]``."""

    def __init__(self, f, j: int):
        self.f, self.j = f, j

    def __call__(self, g, *blocks):
        # Differentiate at the broadcast tiles: each cotangent is then
        # elementwise, and jask sums it back to the operand's shape.
        *blocks, g = np.broadcast_arrays(*blocks, g)
        with _x64_for(blocks):
            _, pullback = jax.vjp(self.f, *blocks)
            return np.asarray(pullback(g.astype(np.result_type(*blocks)))[self.j])


def _x64_for(blocks):
    """JAX's x64 mode is per thread: tasks run in worker threads, so turn it
    on for float64 tiles, or f would compute them in float32."""
    return jax.enable_x64(any(np.dtype(b.dtype).itemsize == 8 for b in blocks))


def _row(f, nin: int) -> Ufunc:
    """One table row for ``f``, kept while ``f`` lives (one compile per f)."""
    try:
        rows = _rows[f]
    except (KeyError, TypeError):
        rows = {}
        try:
            _rows[f] = rows
        except TypeError:  # not weakly referenceable: a row per call
            pass
    if nin not in rows:
        name = getattr(f, "__name__", "map").replace("<lambda>", "lambda")
        rows[nin] = Ufunc(f"map-{name}", _Kernel(f), f,
                          tuple(_Cotangent(f, j) for j in range(nin)), public=False,
                          at_call=True)
    return rows[nin]


def map(f, *arrays, config: Config | None = None):  # noqa: A001 - jask.map, like builtins.map
    """Apply an elementwise function of jax.numpy arrays tile by tile.

    ``f`` must act elementwise (each output element depends only on the
    input elements at the same position, after broadcasting); it receives
    tiles, not whole arrays. Differentiable through ``jax.vjp`` of ``f``
    on each tile. With no DiskArray operand this is ``f(*arrays)``.

    Eagerly it runs at the call (other eager ops wait until their result is
    read): ``f`` may read values from outside (a closure, a global) that the
    caller changes afterwards, and the result holds what ``f`` gave at the
    call.

    Example:
      >>> import numpy as np, jax.numpy as jnp, jask
      >>> x = jask.from_numpy(np.array([0.0, 1.0, 2.0], np.float32))
      >>> jask.map(lambda a: jnp.where(a > 1, a * a, -a), x).to_numpy()
      array([-0., -1.,  4.], dtype=float32)
    """
    if not arrays:
        raise TypeError("jask.map needs at least one array")
    if isinstance(f, np.ufunc):  # JAX cannot trace numpy's functions over a tile
        raise TypeError(f"jask.map takes a function of jax.numpy arrays, not numpy's ufunc "
                        f"np.{f.__name__}: pass jnp.{f.__name__}")
    if all(disk_type(x) is None for x in arrays):
        return f(*arrays)
    return elementwise.apply(_row(f, len(arrays)), *arrays, config=config)
