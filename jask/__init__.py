"""jask: disk-backed arrays that behave as native JAX values.

Example:
  >>> import numpy as np, jax, jask
  >>> w = jask.DiskArray.from_numpy(np.ones(3, dtype=np.float32))
  >>> g = jax.grad(lambda w: jask.sum(jask.square(w)))(w)
  >>> g.to_numpy(), g.filename.endswith(".grad")
  (array([2., 2., 2.], dtype=float32), True)
"""
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from jask import (
    nn,  # noqa: F401 - jask.nn.relu etc.
    optim,  # noqa: F401 - jask.optim.adam etc.
)
from jask.api import methods  # noqa: F401 - installs DiskArray's operators and methods
from jask.api.creation import from_numpy, open
from jask.api.elementwise import (
    abs,
    add,
    arctan,
    astype,
    clip,
    divide,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log1p,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    power,
    sqrt,
    square,
    subtract,
    tanh,
    where,
)
from jask.api.indexing import (
    concatenate,
    dynamic_slice,
    nonzero,
    reshape,
    stack,
    take,
    take_along_axis,
)
from jask.api.interop import from_dask, materialize, to_dask
from jask.api.linalg import dot, matmul, transpose
from jask.api.manipulation import (
    broadcast_arrays,
    broadcast_to,
    concat,
    diff,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    repeat,
    roll,
    squeeze,
    tile,
    unstack,
)
from jask.api.mapping import map
from jask.api.reductions import argmax, argmin, logsumexp, max, mean, min, std, sum, var
from jask.api.save import save
from jask.api.scans import cumsum
from jask.api.stats import reset_stats, stats, track
from jask.api.update import update_
from jask.api.visualize import visualize
from jask.base.config import Config, get_config, set_memory_budget
from jask.base.counters import Counts, Stats
from jask.base.memory import BudgetError
from jask.core.array import DiskArray, DiskArrayType
from jask.core.lifetime import collect
from jask.engine.progress import progress_bars, progress_enabled, show_progress
from jask.store.space import DiskFullError, StoreChangedError

try:
    __version__ = _version("jask")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

sub = subtract  # the names of the first release
mul = multiply

__all__ = [
    "BudgetError", "Config", "Counts", "DiskArray", "DiskArrayType", "DiskFullError",
    "StoreChangedError",
    "abs", "add", "arctan", "argmax", "argmin", "astype", "clip",
    "collect", "concatenate", "cumsum", "divide", "dot", "dynamic_slice", "equal", "exp",
    "from_dask",
    "from_numpy", "get_config", "greater", "greater_equal", "less", "less_equal", "log", "log1p",
    "logsumexp", "map", "materialize", "matmul", "max", "maximum", "mean", "min", "minimum",
    "mul", "multiply", "negative", "not_equal", "open", "power", "progress_bars",
    "progress_enabled", "reset_stats", "reshape", "save", "set_memory_budget", "show_progress",
    "sqrt", "square", "stack", "stats", "Stats", "track",
    "std", "sub", "subtract", "sum", "tanh", "to_dask", "transpose", "update_", "var",
    "visualize", "where",
    # manipulation and indexing (jask.api.manipulation, jask.api.indexing)
    "broadcast_arrays", "broadcast_to", "concat", "diff", "expand_dims", "flip", "moveaxis",
    "nonzero", "permute_dims", "repeat", "roll", "squeeze", "take", "take_along_axis", "tile",
    "unstack",
]
