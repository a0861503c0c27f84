"""The standard's creation functions: DiskArrays whatever their size.

``zeros``, ``ones``, ``full``, ``empty``, ``arange``, ``linspace``, ``eye`` and
the ``*_like`` s write a new store tile by tile (:mod:`jask.api.creation`: each
tile computed from its position), so code written for the standard exercises
the out-of-core path. A 0-d result is an in-memory array of the namespace
(:class:`~jask.array_api.InMemoryArray`): jask makes no 0-d store. ``empty`` is
``zeros`` (a store's chunks must be written to exist).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jask.api import creation, disk_type
from jask.api.elementwise import astype as _astype
from jask.api.elementwise import where
from jask.array_api._dtypes import DISK, check_dtype, default_complex, default_float, default_int
from jask.array_api._memory import InMemoryArray, own, unwrap, wrap_module

__all__ = ["asarray", "zeros", "ones", "empty", "full", "zeros_like", "ones_like",
           "empty_like", "full_like", "arange", "linspace", "eye", "tril", "triu",
           "from_dlpack", "check_device", "own"]


def check_device(op: str, device) -> None:
    """Refuse a device other than the disk.

    Example:
      >>> from jask.array_api._creation import check_device
      >>> check_device("zeros", None)
    """
    if device is not None and device != DISK:
        raise ValueError(f"jask.array_api.{op}: jask arrays live on {DISK!r}, not on "
                         f"{device!r}; move data in or out with asarray / jask.materialize")


def _scalar_dtype(op: str, value) -> np.dtype:
    """The default dtype of a Python value's kind."""
    kind = np.asarray(value).dtype.kind
    if kind == "b":
        return np.dtype(bool)
    if kind in "iu":
        return default_int()
    if kind == "f":
        return default_float()
    if kind == "c":
        return default_complex()
    return check_dtype(op, np.asarray(value).dtype)  # refuses what the namespace lacks


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """``obj`` as an array of the namespace: a DiskArray as it is (cast to
    ``dtype`` if given), in-memory data written to a new DiskArray (a 0-d
    one stays in memory). Python data takes the default dtypes
    (``__array_namespace_info__().default_dtypes()``), numpy data keeps its own.

    Example:
      >>> import jask.array_api as xp
      >>> xp.asarray([[1, 2], [3, 4]], dtype=xp.int8).to_numpy()
      array([[1, 2],
             [3, 4]], dtype=int8)
    """
    check_device("asarray", device)
    if dtype is not None:
        dtype = check_dtype("asarray", dtype)
    if type(obj) is InMemoryArray:  # the namespace's own array: itself, as the standard says
        if dtype is not None and dtype != obj.dtype:
            if copy is False:
                raise ValueError("jask.array_api.asarray: converting to another dtype needs a "
                                 "copy, and copy=False was given")
            return own(obj._value.astype(dtype))
        return own(jnp.array(obj._value)) if copy else obj
    obj = unwrap(obj)  # a list of the namespace's arrays
    if disk_type(obj) is not None:
        if dtype is not None and dtype != obj.dtype:
            if copy is False:
                raise ValueError("jask.array_api.asarray: converting to another dtype needs a "
                                 "copy, and copy=False was given")
            return _astype(obj, dtype)
        return _astype(obj, obj.dtype) if copy else obj  # a cast to its own dtype: a copy
    if copy is False:
        raise ValueError("jask.array_api.asarray: in-memory data becomes a DiskArray by being "
                         "written to disk, a copy, and copy=False was given")
    if hasattr(obj, "dtype") and not isinstance(obj, np.ndarray | np.generic):  # jax values
        value = jnp.asarray(obj) if dtype is None else jnp.asarray(obj).astype(dtype)
        return own(value) if value.ndim == 0 else creation.to_disk(value)
    if dtype is None:
        dtype = (check_dtype("asarray", obj.dtype) if isinstance(obj, np.ndarray | np.generic)
                 else _scalar_dtype("asarray", obj))
    value = np.asarray(obj)
    if value.dtype.kind in "iu" and dtype.kind in "iu":  # out-of-range ints raise, not wrap
        info = np.iinfo(dtype)
        if value.size and not (info.min <= value.min() and value.max() <= info.max):
            raise OverflowError(f"jask.array_api.asarray: values out of the range of "
                                f"{dtype.name}")
    value = value.astype(dtype)
    if value.ndim == 0:
        return own(jnp.asarray(value))
    return creation.from_numpy(value)


def full(shape, fill_value, *, dtype=None, device=None):
    """A new DiskArray of ``shape`` filled with ``fill_value``, written
    tile by tile (``dtype`` by default from the value's kind).

    Example:
      >>> import jask.array_api as xp
      >>> xp.full((2, 2), 1.5).to_numpy()
      array([[1.5, 1.5],
             [1.5, 1.5]], dtype=float32)
    """
    check_device("full", device)
    if disk_type(fill_value) is not None or np.ndim(fill_value):
        raise TypeError("jask.array_api.full: fill_value must be a scalar")
    dtype = _scalar_dtype("full", fill_value) if dtype is None else check_dtype("full", dtype)
    return creation.full(shape, fill_value, dtype)


def zeros(shape, *, dtype=None, device=None):
    """A new DiskArray of zeros, written tile by tile.

    Example:
      >>> import jask.array_api as xp
      >>> xp.zeros((2, 3), dtype=xp.int16).to_numpy()
      array([[0, 0, 0],
             [0, 0, 0]], dtype=int16)
    """
    check_device("zeros", device)
    return creation.full(shape, 0, default_float() if dtype is None else check_dtype("zeros",
                                                                                    dtype))


def ones(shape, *, dtype=None, device=None):
    """A new DiskArray of ones, written tile by tile.

    Example:
      >>> import jask.array_api as xp
      >>> xp.ones(3).to_numpy()
      array([1., 1., 1.], dtype=float32)
    """
    check_device("ones", device)
    return creation.full(shape, 1, default_float() if dtype is None else check_dtype("ones",
                                                                                   dtype))


def empty(shape, *, dtype=None, device=None):
    """A new DiskArray (of zeros: a store's chunks exist once written).

    Example:
      >>> import jask.array_api as xp
      >>> xp.empty((2, 2)).shape
      (2, 2)
    """
    return zeros(shape, dtype=dtype, device=device)


def full_like(x, /, fill_value, *, dtype=None, device=None):
    """A new DiskArray of ``x``'s shape (and dtype, unless given) filled with ``fill_value``.

    Example:
      >>> import jask.array_api as xp
      >>> xp.full_like(xp.zeros((2,), dtype=xp.int8), 7).to_numpy()
      array([7, 7], dtype=int8)
    """
    return full(tuple(x.shape), fill_value, dtype=x.dtype if dtype is None else dtype,
                device=device)


def zeros_like(x, /, *, dtype=None, device=None):
    """A new DiskArray of zeros of ``x``'s shape (and dtype, unless given).

    Example:
      >>> import jask.array_api as xp
      >>> xp.zeros_like(xp.ones((2,))).to_numpy()
      array([0., 0.], dtype=float32)
    """
    return full_like(x, 0, dtype=dtype, device=device)


def ones_like(x, /, *, dtype=None, device=None):
    """A new DiskArray of ones of ``x``'s shape (and dtype, unless given).

    Example:
      >>> import jask.array_api as xp
      >>> xp.ones_like(xp.zeros((2,), dtype=xp.bool)).to_numpy()
      array([ True,  True])
    """
    return full_like(x, 1, dtype=dtype, device=device)


def empty_like(x, /, *, dtype=None, device=None):
    """Same as :func:`zeros_like` (see :func:`empty`).

    Example:
      >>> import jask.array_api as xp
      >>> xp.empty_like(xp.ones((2, 5))).shape
      (2, 5)
    """
    return zeros_like(x, dtype=dtype, device=device)


def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
    """``start, start + step, ...`` up to ``stop`` (excluded), as a new
    DiskArray computed tile by tile. The dtype defaults to the default
    integer if every argument is an int, else the default float.

    Example:
      >>> import jask.array_api as xp
      >>> xp.arange(5).to_numpy()
      array([0, 1, 2, 3, 4], dtype=int32)
      >>> xp.arange(0.0, 1.0, 0.25, dtype=xp.float64).to_numpy()
      array([0.  , 0.25, 0.5 , 0.75])
    """
    check_device("arange", device)
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        ints = all(isinstance(v, int) for v in (start, stop, step))
        dtype = default_int() if ints else default_float()
    return creation.arange(start, stop, step, check_dtype("arange", dtype))


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    """``num`` evenly spaced values from ``start`` to ``stop``, as a new
    DiskArray computed tile by tile (numpy's formula).

    Example:
      >>> import jask.array_api as xp
      >>> xp.linspace(0, 1, 3).to_numpy()
      array([0. , 0.5, 1. ], dtype=float32)
    """
    check_device("linspace", device)
    if dtype is None:
        complex_ = isinstance(start, complex) or isinstance(stop, complex)
        dtype = default_complex() if complex_ else default_float()
    dtype = check_dtype("linspace", dtype)
    return creation.linspace(start, stop, num, dtype, endpoint=endpoint)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    """A new 2-D DiskArray with ones on diagonal ``k``, computed tile by tile.

    Example:
      >>> import jask.array_api as xp
      >>> xp.eye(2, dtype=xp.int8).to_numpy()
      array([[1, 0],
             [0, 1]], dtype=int8)
    """
    check_device("eye", device)
    dtype = default_float() if dtype is None else check_dtype("eye", dtype)
    return creation.eye(n_rows, n_rows if n_cols is None else n_cols, k, dtype)


def _triangle(op: str, x, k: int, lower: bool):
    aval = disk_type(x)
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise ValueError(f"jask.array_api.{op}: x must have at least 2 dimensions, got shape "
                         f"{shape}")
    if aval is None:
        return own((jnp.tril if lower else jnp.triu)(jnp.asarray(x), k))
    zero = np.zeros((), x.dtype)
    # tril keeps j - i <= k; triu keeps j - i >= k, the complement of tri(k - 1)
    mask = creation.tri(shape[-2], shape[-1], k if lower else k - 1)
    return where(mask, x, zero) if lower else where(mask, zero, x)


def tril(x, /, *, k=0):
    """``x`` with the elements above diagonal ``k`` zeroed (of its last two
    axes), differentiable (a ``where`` with a mask computed tile by tile).

    Example:
      >>> import jask.array_api as xp
      >>> xp.tril(xp.ones((2, 3), dtype=xp.int8)).to_numpy()
      array([[1, 0, 0],
             [1, 1, 0]], dtype=int8)
    """
    return _triangle("tril", x, k, True)


def triu(x, /, *, k=0):
    """``x`` with the elements below diagonal ``k`` zeroed (see :func:`tril`).

    Example:
      >>> import jask.array_api as xp
      >>> xp.triu(xp.ones((2, 3), dtype=xp.int8)).to_numpy()
      array([[1, 1, 1],
             [0, 1, 1]], dtype=int8)
    """
    return _triangle("triu", x, k, False)


def from_dlpack(x, /, *, device=None, copy=None):
    """An array from an object with ``__dlpack__`` (read into memory, then
    written to a DiskArray as :func:`asarray` does).

    Example:
      >>> import numpy as np, jask.array_api as xp
      >>> xp.from_dlpack(np.arange(3.0)).to_numpy()
      array([0., 1., 2.])
    """
    check_device("from_dlpack", device)
    return asarray(np.from_dlpack(x), copy=None if copy is None else True)


# every creation function takes the namespace's arrays and answers them (asarray does itself)
wrap_module(globals(), [n for n in __all__ if n not in ("asarray", "check_device", "own")])
