"""jask: disk-backed arrays that behave as native JAX values.

Example:
  >>> import numpy as np, jax, jask
  >>> w = jask.DiskArray.from_numpy(np.ones(3, dtype=np.float32))
  >>> g = jax.grad(lambda w: jask.sum(jask.square(w)))(w)
  >>> g.to_numpy(), g.filename.endswith(".grad")
  (array([2., 2., 2.], dtype=float32), True)
"""
from jask.array import DiskArray, DiskArrayType
from jask.config import Config, get_config, set_memory_budget
from jask.lifetime import collect
from jask.memory import BudgetError
from jask.ops import (add, dot, from_numpy, materialize, mul, open, square, sub, sum,
                      transpose, update_)
from jask.interop import from_dask, to_dask
from jask.progress import progress_bars, progress_enabled, show_progress
from jask.storage import DiskFullError, StoreChangedError

__version__ = "0.1.0"

__all__ = [
    "BudgetError", "Config", "DiskArray", "DiskArrayType", "add", "collect", "dot",
    "from_numpy", "get_config", "materialize", "mul", "open", "set_memory_budget",
    "square", "sub", "sum", "transpose", "update_",
]
__all__ += ["from_dask", "progress_bars", "progress_enabled", "show_progress", "to_dask"]
__all__ += ["DiskFullError", "StoreChangedError"]
