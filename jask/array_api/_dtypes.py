"""The standard's data types, its device, ``__array_namespace_info__`` and
the data type functions (``can_cast``, ``finfo``, ``iinfo``, ``isdtype``,
``result_type``).

Data types are numpy dtypes (what ``DiskArray.dtype`` is), so
``x.dtype == xp.float32`` holds; complex64 and complex128 are among them (Zarr
stores hold them). Promotion is JAX's (``jax.numpy.promote_types``, 64-bit
types kept), restricted to the pairs the standard defines for arrays and
dtypes: real and complex floating types mix (float64 with complex64 is
complex128), but mixing other kinds (bool with numbers, integers with floats)
or ``uint64`` with a signed type is refused, as the standard leaves it
undefined. A scalar of another kind (a Python float, or a numpy scalar such
as ``np.float64(nan)``, which xarray passes before filling an integer count
with NaN) promotes as in jax.numpy, as jask's functions compute it.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["DISK", "Device", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
           "uint32", "uint64", "float16", "float32", "float64", "complex64", "complex128",
           "can_cast", "finfo", "iinfo",
           "isdtype", "result_type", "__array_namespace_info__", "check_dtype",
           "default_float", "default_int", "default_complex"]

bool = np.dtype("bool")  # noqa: A001 - the standard's name
int8, int16, int32, int64 = (np.dtype(f"int{n}") for n in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (np.dtype(f"uint{n}") for n in (8, 16, 32, 64))
float16, float32, float64 = (np.dtype(f"float{n}") for n in (16, 32, 64))
complex64, complex128 = np.dtype("complex64"), np.dtype("complex128")

#: the standard's kinds -> jask's dtypes of that kind (float16 is beyond the standard)
KINDS = {
    "bool": (bool,),
    "signed integer": (int8, int16, int32, int64),
    "unsigned integer": (uint8, uint16, uint32, uint64),
    "real floating": (float16, float32, float64),
    "complex floating": (complex64, complex128),
}
KINDS["integral"] = KINDS["signed integer"] + KINDS["unsigned integer"]
KINDS["numeric"] = KINDS["integral"] + KINDS["real floating"] + KINDS["complex floating"]
ALL = KINDS["bool"] + KINDS["numeric"]


class Device:
    """The one device of jask's arrays: the disk (tiles stream through the
    host's memory).

    Example:
      >>> from jask.array_api import DISK
      >>> DISK
      Device('disk')
    """

    def __repr__(self):
        return "Device('disk')"

    def __eq__(self, other):
        return isinstance(other, Device)

    def __hash__(self):
        return hash(Device)


DISK = Device()


def _x64() -> object:
    return jax.config.read("jax_enable_x64")


def default_float() -> np.dtype:
    """The default real floating type: float64 with JAX's x64 mode on, else float32.

    Example:
      >>> from jask.array_api import default_float
      >>> default_float()
      dtype('float32')
    """
    return float64 if _x64() else float32


def default_int() -> np.dtype:
    """The default integer (and index) type: int64 with JAX's x64 mode on, else int32.

    Example:
      >>> from jask.array_api import default_int
      >>> default_int()
      dtype('int32')
    """
    return int64 if _x64() else int32


def default_complex() -> np.dtype:
    """The default complex floating type: complex128 with JAX's x64 mode on, else complex64.

    Example:
      >>> from jask.array_api import default_complex
      >>> default_complex()
      dtype('complex64')
    """
    return complex128 if _x64() else complex64


def check_dtype(op: str, dtype) -> np.dtype:
    """``dtype`` as a numpy dtype, refused clearly if jask does not hold it.

    Example:
      >>> from jask.array_api import check_dtype
      >>> check_dtype("zeros", "float32")
      dtype('float32')
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"jask.array_api.{op}: {dtype!r} is not a data type") from None
    if dt not in ALL:
        raise TypeError(f"jask.array_api.{op}: {dt.name} is not one of the namespace's data "
                        f"types ({', '.join(d.name for d in ALL)})")
    return dt


def _kind(dt: np.dtype) -> str:
    # the standard's kinds that promote together: real and complex floats mix
    return {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "float"}[dt.kind]


def _promote(a: np.dtype, b: np.dtype, mixed: object = False) -> np.dtype:
    if _kind(a) != _kind(b) and mixed:
        with jax.enable_x64(True):
            return np.dtype(jnp.promote_types(a, b))
    if _kind(a) != _kind(b):
        raise TypeError(f"jask.array_api.result_type: {a.name} and {b.name} do not promote in "
                        "the Array API standard (mixed kinds); convert one with astype first")
    with jax.enable_x64(True):  # JAX's table, 64-bit types kept (int16 + uint32: int64)
        out = np.dtype(jnp.promote_types(a, b))
    if _kind(out) != _kind(a):  # uint64 with a signed type: JAX says float64
        raise TypeError(f"jask.array_api.result_type: {a.name} and {b.name} have no common "
                        "integer type in the Array API standard; convert one with astype first")
    return out


def _scalar_fits(value, dt: np.dtype) -> object:
    """Whether a Python scalar may join an array of ``dt`` (the standard's rule)."""
    if isinstance(value, builtins_bool):
        return True  # a bool scalar joins any dtype (as its value 0 or 1)
    if isinstance(value, int):
        return dt.kind in "iufc"
    if isinstance(value, float):
        return dt.kind in "fc"
    if isinstance(value, complex):  # with a real floating array: its complex type
        return dt.kind in "fc"
    return False


builtins_bool = type(True)


def result_type(*arrays_and_dtypes):
    """The dtype of an op on these arrays, dtypes and Python scalars: JAX's
    promotion, within the standard's table.

    Example:
      >>> import jask.array_api as xp
      >>> xp.result_type(xp.int8, xp.uint8), xp.result_type(xp.float32, 1.5)
      (dtype('int16'), dtype('float32'))
    """
    dtypes, scalars, numpy_scalars = [], [], []
    for x in arrays_and_dtypes:
        if isinstance(x, np.generic):  # numpy's float64 scalar is a float too
            numpy_scalars.append(check_dtype("result_type", x.dtype))
        elif isinstance(x, (builtins_bool, int, float, complex)):
            scalars.append(x)
        else:
            dtypes.append(check_dtype("result_type", getattr(x, "dtype", x)))
    if not dtypes:
        dtypes, numpy_scalars = numpy_scalars, []
    if not dtypes:
        raise ValueError("jask.array_api.result_type: give at least one array or dtype")
    out = dtypes[0]
    for dt in dtypes[1:]:
        out = _promote(out, dt)
    for dt in numpy_scalars:  # a value, not an array: across kinds as jax.numpy promotes it
        out = _promote(out, dt, mixed=True)
    for value in scalars:
        if isinstance(value, complex) and out.kind == "f":  # 1j * float32: complex64
            out = complex128 if out == float64 else complex64
        elif isinstance(value, complex) and not _scalar_fits(value, out):
            raise TypeError(f"jask.array_api.result_type: a Python complex does not promote "
                            f"with {out.name} in the Array API standard")
        elif not _scalar_fits(value, out):  # a float with integers: JAX's weak promotion
            out = check_dtype("result_type", jnp.result_type(out, value))
    return out


def can_cast(from_, to, /) -> object:
    """Whether ``from_`` (a dtype or an array) converts to ``to`` by promotion.

    Example:
      >>> import jask.array_api as xp
      >>> xp.can_cast(xp.int8, xp.int32), xp.can_cast(xp.float64, xp.float32)
      (True, False)
    """
    source = check_dtype("can_cast", getattr(from_, "dtype", from_))
    target = check_dtype("can_cast", to)
    try:
        return result_type(source, target) == target
    except TypeError:
        return False


@dataclass(frozen=True)
class finfo_object:  # noqa: N801 - the standard's name
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


@dataclass(frozen=True)
class iinfo_object:  # noqa: N801 - the standard's name
    bits: int
    max: int
    min: int
    dtype: np.dtype


def finfo(type, /) -> finfo_object:  # noqa: A002 - the standard's name
    """Machine limits of a floating type (a dtype or an array of it).

    Example:
      >>> import jask.array_api as xp
      >>> xp.finfo(xp.float32).bits
      32
    """
    dt = check_dtype("finfo", getattr(type, "dtype", type))
    if dt.kind not in "fc":
        raise TypeError(f"jask.array_api.finfo: {dt.name} is not a floating type; use iinfo")
    info = np.finfo(dt)  # of a complex type: its parts' real type, as the standard says
    return finfo_object(info.bits, float(info.eps), float(info.max), float(info.min),
                        float(info.smallest_normal), np.dtype(info.dtype))


def iinfo(type, /) -> iinfo_object:  # noqa: A002 - the standard's name
    """Machine limits of an integer type (a dtype or an array of it).

    Example:
      >>> import jask.array_api as xp
      >>> xp.iinfo(xp.uint8).max
      255
    """
    dt = check_dtype("iinfo", getattr(type, "dtype", type))
    if dt.kind not in "iu":
        raise TypeError(f"jask.array_api.iinfo: {dt.name} is not an integer type; use finfo")
    info = np.iinfo(dt)
    return iinfo_object(info.bits, int(info.max), int(info.min), dt)


def isdtype(dtype, kind) -> object:
    """Whether ``dtype`` is of ``kind``: a kind name ("bool", "signed
    integer", "unsigned integer", "integral", "real floating", "complex
    floating", "numeric"), a dtype, or a tuple of those.

    Example:
      >>> import jask.array_api as xp
      >>> xp.isdtype(xp.int8, "integral"), xp.isdtype(xp.float32, ("bool", xp.int8))
      (True, False)
    """
    dt = np.dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        if kind not in KINDS:
            raise ValueError(f"jask.array_api.isdtype: unknown kind {kind!r}; one of "
                             f"{', '.join(KINDS)}")
        return dt in KINDS[kind]
    return dt == np.dtype(kind)


class Info:
    """What ``__array_namespace_info__()`` returns: the namespace's devices,
    data types and capabilities."""

    def capabilities(self) -> dict:
        # No data-dependent shapes: a result's shape is known before its data
        # is read (boolean-mask indexing, nonzero and unique_* are refused).
        return {"boolean indexing": False, "data-dependent shapes": False,
                "max dimensions": None}

    def default_device(self) -> Device:
        return DISK

    def devices(self) -> list:
        return [DISK]

    def default_dtypes(self, *, device=None) -> dict:
        return {"real floating": default_float(),
                "complex floating": default_complex(),
                "integral": default_int(), "indexing": default_int()}

    def dtypes(self, *, device=None, kind=None) -> dict:
        # the standard's types only: float16 works (xp.float16) but is beyond it
        standard = tuple(d for d in ALL if d != float16)
        chosen = standard if kind is None else tuple(d for d in standard if isdtype(d, kind))
        return {d.name: d for d in chosen}


def __array_namespace_info__() -> Info:
    """The namespace's inspection object (the standard's ``__array_namespace_info__``).

    Example:
      >>> import jask.array_api as xp
      >>> info = xp.__array_namespace_info__()
      >>> info.default_device(), info.capabilities()["data-dependent shapes"]
      (Device('disk'), False)
    """
    return Info()
