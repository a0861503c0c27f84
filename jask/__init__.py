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
    array_api,  # noqa: F401 - the Array API namespace (installs x.__array_namespace__)
    nn,  # noqa: F401 - jask.nn.relu etc.
    optim,  # noqa: F401 - jask.optim.adam etc.
)
from jask.api import (
    fft,  # noqa: F401 - jask.fft.fft etc., as jax.numpy.fft
    methods,  # noqa: F401 - installs DiskArray's operators and methods
)
from jask.api.batches import Batches, batches
from jask.api.creation import from_numpy, open, open_group, open_icechunk
from jask.api.elementwise import (  # the rest of the Array API's elementwise functions
    abs,
    acos,
    acosh,
    add,
    angle,
    arccos,
    arccosh,
    arcsin,
    arcsinh,
    arctan,
    arctan2,
    arctanh,
    asin,
    asinh,
    astype,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    ceil,
    clip,
    conj,
    copysign,
    cos,
    cosh,
    divide,
    equal,
    exp,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    hypot,
    imag,
    invert,
    isfinite,
    isinf,
    isnan,
    left_shift,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    multiply,
    negative,
    nextafter,
    not_equal,
    positive,
    pow,
    power,
    real,
    reciprocal,
    remainder,
    right_shift,
    round,
    sign,
    signbit,
    sin,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
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
from jask.api.interop import from_dask, materialize, to_dask, zarr_store
from jask.api.linalg import (
    dot,
    einsum,
    matmul,
    matrix_transpose,
    tensordot,
    transpose,
    vecdot,
)
from jask.api.manipulation import (
    broadcast_arrays,
    broadcast_to,
    concat,
    diff,
    expand_dims,
    flip,
    moveaxis,
    pad,
    permute_dims,
    repeat,
    roll,
    sliding_window_view,
    squeeze,
    tile,
    unstack,
)
from jask.api.mapping import map
from jask.api.nan_functions import (
    nanargmax,
    nanargmin,
    nancumprod,
    nancumsum,
    nanmax,
    nanmean,
    nanmin,
    nanprod,
    nanstd,
    nansum,
    nanvar,
)
from jask.api.quantiles import (
    median,
    nanmedian,
    nanpercentile,
    nanquantile,
    percentile,
    quantile,
)
from jask.api.reductions import argmax, argmin, logsumexp, max, mean, min, prod, std, sum, var
from jask.api.save import save
from jask.api.scans import cumprod, cumsum, cumulative_prod, cumulative_sum
from jask.api.sorting import (
    argsort,
    searchsorted,
    sort,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
)
from jask.api.stats import reset_stats, stats, track
from jask.api.truth import all, any, count_nonzero, isin
from jask.api.update import update_
from jask.api.visualize import visualize
from jask.base.config import Config, get_config, set_device, set_memory_budget
from jask.base.counters import Counts, Stats
from jask.base.memory import BudgetError
from jask.core.array import DiskArray, DiskArrayType
from jask.core.lifetime import collect
from jask.engine.progress import progress_bars, progress_enabled, show_progress
from jask.store import DamagedStoreError, DiskFullError, RemoteStoreError, StoreChangedError

try:
    __version__ = _version("jask")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

sub = subtract  # the names of the first release
mul = multiply

__all__ = [
    "Batches", "BudgetError", "Config", "Counts", "DiskArray", "DiskArrayType", "DiskFullError",
    "StoreChangedError", "DamagedStoreError", "RemoteStoreError",
    "abs", "add", "arctan", "argmax", "argmin", "astype", "clip",
    "collect", "concatenate", "cumsum", "divide", "dot", "dynamic_slice", "equal", "exp",
    "from_dask",
    "from_numpy", "get_config", "greater", "greater_equal", "less", "less_equal", "log", "log1p",
    "logsumexp", "map", "nanargmax", "nanargmin", "nancumprod", "nancumsum", "nanmax",
    "nanmean", "nanmin", "nanprod",
    "nanstd", "nansum", "nanvar",
    "materialize", "matmul", "max", "maximum", "mean", "min", "minimum",
    "mul", "multiply", "negative", "not_equal", "open", "open_group", "open_icechunk",
    "power", "progress_bars",
    "progress_enabled", "reset_stats", "reshape", "save", "set_device", "set_memory_budget",
    "show_progress",
    "sqrt", "square", "stack", "stats", "Stats", "track",
    "std", "sub", "subtract", "sum", "tanh", "to_dask", "transpose", "update_", "var", "zarr_store",
    "visualize", "where",
    "all", "any", "count_nonzero", "isin", "prod", "matrix_transpose",
    "argsort", "sort", "searchsorted", "unique_all", "unique_counts", "unique_inverse",
    "unique_values", "cumprod", "cumulative_prod", "cumulative_sum",
    "einsum", "tensordot", "vecdot",
    "batches",
    "acos", "acosh", "angle", "arccos", "arccosh", "arcsin", "arcsinh", "arctan2", "arctanh",
    "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and", "bitwise_invert",
    "bitwise_left_shift", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "ceil", "conj",
    "copysign", "cos",
    "cosh", "expm1", "floor", "floor_divide", "hypot", "imag", "invert", "isfinite", "isinf",
    "isnan", "left_shift", "log10", "log2", "logaddexp", "logical_and", "logical_not",
    "logical_or", "logical_xor", "nextafter", "positive", "pow", "real", "reciprocal",
    "remainder", "right_shift", "round", "sign", "signbit", "sin", "sinh", "tan", "trunc",
    # manipulation and indexing (jask.api.manipulation, jask.api.indexing)
    "broadcast_arrays", "broadcast_to", "concat", "diff", "expand_dims", "flip", "moveaxis",
    "nonzero", "pad", "permute_dims", "repeat", "roll", "sliding_window_view", "squeeze", "take",
    "take_along_axis", "tile",
    "unstack",
    # order statistics (jask.api.quantiles)
    "median", "nanmedian", "nanpercentile", "nanquantile", "percentile", "quantile",
]
