"""jask: disk-backed arrays that behave as native JAX values.

Example:
  >>> import numpy as np, jax, jask
  >>> w = jask.DiskArray.from_numpy(np.ones(3, dtype=np.float32))
  >>> g = jax.grad(lambda w: jask.sum(jask.square(w)))(w)
  >>> g.to_numpy(), g.filename.endswith(".grad")
  (array([2., 2., 2.], dtype=float32), True)
"""
from jask import nn
from jask.array import DiskArray, DiskArrayType
from jask.config import Config, get_config, set_memory_budget
from jask.elementwise import FUNCTIONS as _FUNCTIONS
from jask.elementwise import astype
from jask.indexing import concatenate, dynamic_slice, stack
from jask.interop import from_dask, to_dask
from jask.lifetime import collect
from jask.mapping import map
from jask.memory import BudgetError
from jask.ops import dot, from_numpy, materialize, matmul, open, transpose, update_
from jask.progress import progress_bars, progress_enabled, show_progress
from jask.reductions import logsumexp, max, mean, min, std, sum, var

__version__ = "0.1.0"

globals().update(_FUNCTIONS)  # add, subtract, multiply, exp, where, ... (jask.elementwise)
sub = _FUNCTIONS["subtract"]  # the names of the first release
mul = _FUNCTIONS["multiply"]

__all__ = [
    "BudgetError", "Config", "DiskArray", "DiskArrayType", "astype", "collect", "concatenate",
    "dot", "dynamic_slice", "from_dask", "from_numpy", "get_config", "logsumexp", "map",
    "materialize", "matmul", "max", "mean", "min", "open", "progress_bars",
    "progress_enabled", "set_memory_budget", "show_progress", "stack", "std", "sub", "mul",
    "sum", "to_dask", "transpose", "update_", "var", *sorted(_FUNCTIONS),
]
