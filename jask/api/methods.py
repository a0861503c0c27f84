"""Operators and methods of DiskArray and of its tracers, installed from above.

:mod:`jask.core.array` defines the value and its type and nothing that needs
the public functions; this module, which is built on them, sets ``x + y``,
``x @ w``, ``x[i:j]``, ``x.sum()``, ``x.T``, ``x.update_(v)`` and the rest
on both ``DiskArray`` and ``DiskArrayType`` (where a tracer finds them:
``aval._add`` for operators, ``aval_method``/``aval_property`` for methods),
as ``jax/_src/numpy/array_methods.py`` does for ``jax.Array``. A tracer and a
value therefore resolve every operator through the same function.
"""
from __future__ import annotations

from typing import Callable

from jax.experimental.hijax import aval_method, aval_property

from jask.api import (
    creation,
    display,
    elementwise,
    indexing,
    interop,
    linalg,
    manipulation,
    nan_functions,
    reductions,
    save,
    scans,
    sorting,
    truth,
    update,
)
from jask.core._jax_internals import defer_scalar_operators_to, numpy_caller
from jask.core.array import DiskArray, DiskArrayType

__all__: list[str] = []

#: Python operator -> the jask function it calls, for DiskArray and its tracers alike.
BINARY = {"add": elementwise.add, "sub": elementwise.subtract, "mul": elementwise.multiply,
          "truediv": elementwise.divide, "pow": elementwise.power, "matmul": linalg.matmul}
COMPARE = {"lt": elementwise.less, "le": elementwise.less_equal, "gt": elementwise.greater,
           "ge": elementwise.greater_equal, "eq": elementwise.equal,
           "ne": elementwise.not_equal}
UNARY = {"neg": elementwise.negative, "abs": elementwise.abs}
# the integer operators (on bools: & | ^ logical, ~ the logical not), as on jax.Array
BINARY.update({"and": elementwise.bitwise_and, "or": elementwise.bitwise_or,
               "xor": elementwise.bitwise_xor, "lshift": elementwise.left_shift,
               "rshift": elementwise.right_shift, "floordiv": elementwise.floor_divide,
               "mod": elementwise.remainder})
UNARY["invert"] = elementwise.invert

#: Array methods, as on jax.Array: ``x.sum(axis)`` is ``jask.sum(x, axis)``.
METHODS: dict[str, Callable] = {
    "sum": reductions.sum, "mean": reductions.mean, "max": reductions.max,
    "min": reductions.min, "var": reductions.var, "std": reductions.std,
    "astype": elementwise.astype, "reshape": indexing.reshape, "transpose": linalg.transpose,
}
METHODS.update({"prod": reductions.prod, "all": truth.all, "any": truth.any,
                "cumprod": scans.cumprod, "sort": sorting.sort, "argsort": sorting.argsort})
METHODS.update({"conj": elementwise.conj, "conjugate": elementwise.conj})
#: Properties, as on jax.Array and numpy's arrays: ``x.real`` is ``jask.real(x)``.
PROPERTIES: dict[str, Callable] = {"real": elementwise.real, "imag": elementwise.imag}


def _binary(f: Callable, reflected: bool = False) -> Callable:
    def apply(x, y):
        return f(y, x) if reflected else f(x, y)
    apply.__name__ = f"_{'r' if reflected else ''}{f.__name__}"
    return apply


def _pos(x):
    return x


def _method(name: str, f: Callable) -> Callable:
    def method(self, *args, **kwargs):
        return f(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"Same as :func:`jask.{name}` (``jask.{name}(self, ...)``)."
    return method


def update_(self, new_value):
    """Overwrite this array's store with ``new_value``'s data.

    Copies tile by tile into a new store beside this one and then swaps
    it in, so a failure never leaves this array half-written. Returns a
    DiskArray of the same store (same ``filename``), which is what lets a
    jitted training loop carry its parameters without retracing.

    Args:
      new_value: the data to write; same shape and dtype as ``self``.

    Returns:
      A DiskArray of this same store, now holding ``new_value``.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.zeros((4, 4), dtype=np.float32))
      >>> original_path = a.filename
      >>> new_value = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> a = a.update_(new_value)
      >>> a.filename == original_path
      True
      >>> np.asarray(a.to_memmap())[0, 0]
      1.0
    """
    return update.update_(self, new_value)


def from_numpy(cls, arr) -> DiskArray:
    """Write a numpy array to a new store and wrap it as a DiskArray.

    Meant for arrays small enough to build in memory first; for large
    data, write a Zarr array yourself and open it with ``jask.open``.

    Args:
      arr: the array to copy to disk.

    Returns:
      A new DiskArray holding a copy of ``arr``.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> a = jask.DiskArray.from_numpy(np.arange(4, dtype=np.float32))
      >>> np.asarray(a.to_memmap())
      array([0., 1., 2., 3.], dtype=float32)
    """
    return creation.from_numpy(arr)


def to_dask(self):
    """A lazy ``dask.array.Array`` over this store (see :func:`jask.to_dask`).

    Example:
      >>> import numpy as np, jask
      >>> float(jask.from_numpy(np.ones(4)).to_dask().sum().compute())
      4.0
    """
    return interop.to_dask(self)


def to_zarr(self, path, chunks=None, compressor=None, *, overwrite: bool = False):
    """Save this array as a Zarr array at ``path`` (see :func:`jask.save`).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.ones(5))
      >>> x.to_zarr("/tmp/jask-to-zarr-example.zarr", overwrite=True).shape
      (5,)
    """
    return save.save(self, path, chunks=chunks, compressor=compressor, overwrite=overwrite)


def transpose_all(self) -> DiskArray:
    """The transpose (all axes reversed), as a new DiskArray."""
    return linalg.transpose(self)


def matrix_transpose(self) -> DiskArray:
    """The last two axes swapped (``x.mT``), as a new DiskArray."""
    return linalg.matrix_transpose(self)
def _copy(self, memo=None):
    """``copy.copy(x)`` and ``copy.deepcopy(x)``: a DiskArray of its own, whose
    values no later ``update_`` of ``x`` changes (nor its ``update_``, ``x``'s):
    a view of the same store until one of them is written (jask.store.views),
    so a copy costs nothing until then. (A pickle still names the store.)

    Example:
      >>> import copy, numpy as np, jask
      >>> x = jask.from_numpy(np.ones(3, np.float32))
      >>> best = copy.deepcopy(x)
      >>> _ = x.update_(x * 2)
      >>> best.to_numpy(), x.to_numpy()
      (array([1., 1., 1.], dtype=float32), array([2., 2., 2.], dtype=float32))
    """
    return linalg.transpose(self, tuple(range(self.ndim)))


def _jax_array(self):
    """Inside a ``jax.numpy`` function (``jnp.mean(x)``), refuse a DiskArray
    naming the jask function to use: jax.numpy accepts any value with
    ``__jax_array__``, then calls it for a ``jax.Array``, which a DiskArray
    on disk cannot give. Anywhere else (``jnp.asarray``, a ``jax.Array``
    operator), decline by returning the DiskArray itself: JAX then goes on
    as if there were no ``__jax_array__`` (``w * x`` reaches ``x.__rmul__``,
    ``jnp.asarray(x)`` reads a small ``x`` through ``__array__``)."""
    name = numpy_caller()
    if name is None or name in ("asarray", "array"):
        return self
    if any(hasattr(m, name) for m in _NAMESPACES):
        hint = (f"use jask.{name}(x) or x.{name}()" if name in METHODS
                else f"use jask.{name} in its place")
    else:
        hint = (f"jask has no {name}: use jask.map(jnp.{name}, x) if it is elementwise, or "
                "jask.materialize(x) for a small array")
    raise TypeError(f"jnp.{name} does not take a DiskArray; {hint}")


#: Where jask's public functions live, for naming one in place of jnp's.
_NAMESPACES = (elementwise, reductions, nan_functions, truth, linalg, indexing, manipulation,
               scans, sorting)


def _repr_html_(self) -> str:
    return display.html(self)


def install() -> None:
    """Set the operators and methods on DiskArray and DiskArrayType."""
    operators: dict[str, Callable] = {f"_{op}": _binary(f)
                                      for op, f in {**BINARY, **COMPARE}.items()}
    operators.update({f"_r{op}": _binary(f, reflected=True) for op, f in BINARY.items()})
    operators.update({f"_{op}": f for op, f in UNARY.items()})
    operators.update(_pos=_pos, _getitem=indexing.getitem, _setitem=indexing.setitem)
    for name, f in operators.items():
        setattr(DiskArrayType, name, staticmethod(f))  # tracers call aval._add(x, y)
        setattr(DiskArray, f"_{name}__", f)
    methods = {name: _method(name, f) for name, f in METHODS.items()}
    methods["update_"] = update_
    for name, f in methods.items():
        setattr(DiskArrayType, name, aval_method(f))
        setattr(DiskArray, name, f)
    for name, f in PROPERTIES.items():
        setattr(DiskArrayType, name, aval_property(f))
        setattr(DiskArray, name, property(f))
    setattr(DiskArrayType, "T", aval_property(transpose_all))
    setattr(DiskArrayType, "at", aval_property(indexing.At))
    setattr(DiskArray, "at", property(indexing.At))
    setattr(DiskArray, "__iter__", indexing.iterate)
    setattr(DiskArrayType, "mT", aval_property(matrix_transpose))
    setattr(DiskArray, "mT", property(matrix_transpose))
    setattr(DiskArrayType, "__jax_array__", aval_method(_jax_array))
    setattr(DiskArray, "__jax_array__", _jax_array)
    for name, attr in {"T": property(transpose_all), "from_numpy": classmethod(from_numpy),
                       "to_dask": to_dask, "to_zarr": to_zarr,
                       "_repr_html_": _repr_html_, "__copy__": _copy, "__deepcopy__": _copy,
                       "__array_function__": nan_functions.array_function}.items():
        setattr(DiskArray, name, attr)
    defer_scalar_operators_to(DiskArrayType, BINARY, COMPARE)


install()
