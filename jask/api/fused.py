"""One pass, several outputs: ``fused``, the op behind jask's optimizers.

:func:`fused` applies a numpy ``kernel`` to the tiles of DiskArrays of one
shape (and in-memory scalars: a learning rate, a bias correction) and writes
each of the tuple of tiles it returns to its own new store, in a single pass:
an Adam step reads ``g``, ``m`` and ``v`` once and writes ``m``, ``v`` and the
update once. With ``into`` the first output goes into an operand's own store
instead (copied beside it and swapped in as ``update_`` does), so a
parameter keeps its store across steps.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np
from jax.experimental.hijax import ShapedArray

from jask.base.config import Config
from jask.core.array import disk_type
from jask.core.primitives import Fused

__all__ = ["fused"]


def fused(kernel: Callable, *operands, out_dtypes: Sequence, dtype=None, into: int | None = None,
          align: int | None = None, unread: Sequence[int] = (),
          temporaries: int | None = None, name: str = "fused",
          config: Config | None = None) -> tuple:
    """``kernel(*tiles)`` over DiskArrays of one shape, one new DiskArray per
    entry of ``out_dtypes``, all written in a single pass.

    ``operands`` are DiskArrays of one shape and in-memory scalars (sent to
    every task as 0-d arrays); every tile and scalar reaches ``kernel`` as a
    numpy array of ``dtype`` (default: the first DiskArray's), its task's own:
    the kernel may overwrite them rather than allocate. ``kernel``
    must be hashable (a module-level function or a frozen dataclass): it is
    part of the compiled program's key. With ``into=i`` the first output
    replaces the data of DiskArray operand ``i`` in its own store. Tiles
    are whole chunks of operand ``align`` (default: ``into``), so outputs
    share its chunks where the budget allows; operands listed in ``unread``
    lend their layout only (the kernel does not receive them). A kernel
    that works in place tells the planner how many tiles it allocates
    besides its inputs with ``temporaries`` (default: one per output, +1).

    Example:
      >>> import numpy as np, jask
      >>> from jask.api.fused import fused
      >>> x = jask.from_numpy(np.arange(4.0, dtype=np.float32))
      >>> lo, hi = fused(lambda a, c: (a - c, a + c), x, 1.0, out_dtypes=("f4", "f4"))
      >>> hi.to_numpy()
      array([1., 2., 3., 4.], dtype=float32)
    """
    kinds = [disk_type(x) for x in operands]
    disk = [k for k in kinds if k is not None]
    if not disk:
        raise TypeError("jask.fused needs at least one DiskArray operand")
    shape = disk[0].shape
    if any(k.shape != shape for k in disk):
        raise ValueError(f"jask.{name}: DiskArray operands must share one shape, got "
                         f"{[k.shape for k in disk]}")
    dtype = np.dtype(dtype or disk[0].dtype)
    values: list = []
    avals: list = []
    for x, k in zip(operands, kinds):
        if k is None:
            x = jax.numpy.asarray(x)
            if x.ndim != 0:
                raise ValueError(f"jask.{name}: in-memory operands must be scalars, got "
                                 f"shape {x.shape}")
            avals.append(ShapedArray((), x.dtype))
        else:
            avals.append(k)
        values.append(x)
    return Fused(kernel, tuple(avals), shape, dtype, tuple(out_dtypes), into=into, align=align,
                 unread=tuple(unread), temporaries=temporaries, name=name,
                 config=config)(*values)
