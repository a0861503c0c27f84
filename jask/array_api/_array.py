"""The standard's array attributes, installed on DiskArray from above.

``__array_namespace__``, ``.mT``, ``.device``, ``.to_device`` and the Python
conversions of a one-element array (``bool(x)``, ``float(x)``, ``int(x)``,
``operator.index(x)``, ``complex(x)``), set on :class:`DiskArray` (and, where
a tracer finds them, on its type) by :func:`install`, as
:mod:`jask.api.methods` sets the operators. The standard's operators that can
answer in memory (``x[key]``, ``x @ y``, ``iter(x)``) are wrapped so that they
answer the namespace's arrays (:class:`~jask.array_api.InMemoryArray` for a
small result) and take them (``x[i]`` with ``i`` an InMemoryArray); the other
operators always answer DiskArrays and take InMemoryArrays as they take
``jax.Array`` s.
"""
from __future__ import annotations

import sys

from jax.experimental.hijax import aval_method, aval_property

from jask.api import DiskArray, DiskArrayType
from jask.api import methods as _methods  # noqa: F401 - DiskArray's operators, wrapped below
from jask.array_api._dtypes import DISK
from jask.array_api._functions import matrix_transpose as _matrix_transpose
from jask.array_api._memory import own, unwrap

__all__ = ["install", "API_VERSIONS"]

#: versions of the standard the namespace answers for
API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")


def __array_namespace__(self, /, *, api_version=None):
    """The Array API namespace of jask's arrays: :mod:`jask.array_api`.

    Example:
      >>> import numpy as np, jask
      >>> jask.from_numpy(np.ones(2)).__array_namespace__().__name__
      'jask.array_api'
    """
    if api_version is not None and api_version not in API_VERSIONS:
        raise ValueError(f"jask.array_api implements the Array API standard "
                         f"{API_VERSIONS[-1]} (and earlier: {', '.join(API_VERSIONS[:-1])}), "
                         f"not {api_version!r}")
    return sys.modules["jask.array_api"]


def device(self):
    """The device holding the array: the disk (:data:`jask.array_api.DISK`)."""
    return DISK


def to_device(self, device, /, *, stream=None):
    """The array on ``device``: itself on the disk; any other device is
    refused (bring data into memory with ``jask.materialize``).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.ones(2))
      >>> x.to_device(x.device) is x
      True
    """
    if device != DISK:
        raise ValueError(f"a DiskArray lives on {DISK!r} and cannot move to {device!r}: bring a "
                         "small one into memory with jask.materialize(x), then "
                         "jax.device_put it")
    return self


def matrix_transpose(self):
    """The array with its last two axes swapped (the standard's ``x.mT``)."""
    return _matrix_transpose(self)


def _one_element(self, what: str):
    """The value of a one-element DiskArray, read from its store."""
    if self._owner is None:
        raise TypeError(f"{what}() of a traced DiskArray: its value is not known until the "
                        "compiled function runs; return it, or use jask.where for a choice")
    if self.size != 1:
        raise TypeError(f"{what}() of a DiskArray of shape {self.shape}: only an array of one "
                        "element converts to a Python scalar")
    return self.to_numpy().reshape(())[()]


def __bool__(self):
    return bool(_one_element(self, "bool"))


def __float__(self):
    return float(_one_element(self, "float"))


def __int__(self):
    return int(_one_element(self, "int"))


def __complex__(self):
    return complex(_one_element(self, "complex"))


def __index__(self):
    if self.dtype.kind not in "iu":
        raise TypeError(f"only an integer DiskArray is an index, not one of {self.dtype.name}")
    return int(_one_element(self, "index"))


def __dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
    """The array's data for DLPack consumers (``np.from_dlpack(x)``), read
    into memory: for arrays up to the memory budget, as ``np.asarray(x)``."""
    kwargs = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device),
                                ("copy", copy)) if v is not None}
    return self.__array__().__dlpack__(stream=stream, **kwargs)


def __dlpack_device__(self, /):
    """The DLPack device of :meth:`__dlpack__`'s data: the host's memory (CPU, 0)."""
    return (1, 0)  # kDLCPU


def _answering_the_namespace(f):
    """A DiskArray operator taking and answering the namespace's arrays."""
    def operator(*args):
        return own(f(*(unwrap(a) for a in args)))
    operator.__name__ = getattr(f, "__name__", "operator")
    operator.__doc__ = f.__doc__
    operator._jask_namespace = True
    return operator


def _setitem(f):
    def setitem(self, key, value):
        return f(self, unwrap(key), unwrap(value))
    setitem._jask_namespace = True
    setitem.__doc__ = f.__doc__
    return setitem


def _iterate(f):
    def iterate(self):
        return (own(row) for row in f(self))
    iterate._jask_namespace = True
    iterate.__doc__ = f.__doc__
    return iterate


def install() -> None:
    """Set the standard's attributes on DiskArray (and its tracers' type).

    The conversions replace DiskArray's own refusal of ``bool(x)``: the
    standard defines them for one-element arrays.
    """
    for name, f in {"__array_namespace__": __array_namespace__, "to_device": to_device,
                    "__bool__": __bool__, "__float__": __float__, "__int__": __int__,
                    "__complex__": __complex__, "__index__": __index__,
                    "__dlpack__": __dlpack__,
                    "__dlpack_device__": __dlpack_device__}.items():
        setattr(DiskArray, name, f)
    for name, f in {"device": device, "mT": matrix_transpose}.items():
        setattr(DiskArray, name, property(f))
        setattr(DiskArrayType, name, aval_property(f))
    setattr(DiskArrayType, "to_device", aval_method(to_device))
    # the standard's operators that may answer in memory answer the namespace's arrays
    for name in ("getitem", "matmul", "rmatmul"):
        f = getattr(DiskArray, f"__{name}__")
        if not getattr(f, "_jask_namespace", False):
            setattr(DiskArray, f"__{name}__", _answering_the_namespace(f))
            setattr(DiskArrayType, f"_{name}", staticmethod(_answering_the_namespace(f)))
    f = getattr(DiskArray, "__setitem__")
    if not getattr(f, "_jask_namespace", False):
        setattr(DiskArray, "__setitem__", _setitem(f))
        setattr(DiskArrayType, "_setitem", staticmethod(_setitem(f)))
    f = getattr(DiskArray, "__iter__")
    if not getattr(f, "_jask_namespace", False):
        setattr(DiskArray, "__iter__", _iterate(f))
    # a traced DiskArray asks its type (jit-compiled code written for the standard)
    setattr(DiskArrayType, "__array_namespace__", aval_method(__array_namespace__))
