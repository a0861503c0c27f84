"""The namespace's small arrays in memory, and what keeps the namespace closed.

Every result of :mod:`jask.array_api` is an array of that namespace: a
:class:`~jask.DiskArray`, or, where jask answers in memory (0-d values,
reductions and products within an eighth of the budget, ``x[i]`` of a small
row, small ``linalg`` results), an :class:`InMemoryArray`: a ``jax.Array``
(or, inside ``jax.jit``, a tracer of one) behind the namespace's own type.
Both are :class:`Array` s, both answer ``__array_namespace__()`` with
``jask.array_api`` and ``.device`` with :data:`~jask.array_api.DISK`, so
``array_namespace(result, X)`` (array-api-compat, scikit-learn's
``get_namespace``) finds one namespace and one device.

:func:`own` makes a result the namespace's; :func:`namespace_function`
wraps each function of the namespace so that it takes its own arrays, jax
arrays and numpy arrays alike (an :class:`InMemoryArray` is unwrapped to its
``jax.Array`` before jask's function sees it). An :class:`InMemoryArray` is a
pytree (one leaf, its value), so it passes in and out of ``jax.jit`` and
``jax.tree_util`` as the value it holds; ``jnp.asarray(r)`` and jax.numpy's
functions take it (``__jax_array__``). The one exception: a 0-d value being
differentiated (a tracer of ``jax.grad``, ``jax.vjp``, ``jax.jvp``) stays the
tracer, because JAX's differentiation needs its function's value as a jax
value (``jax.grad(lambda w: xp.sum(X @ w))`` works as ``jask.sum`` does; a
traced scalar meets DiskArrays through their operators as it always did).
"""
from __future__ import annotations

import abc
import functools
import operator
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jask.api import DiskArray, disk_type, interop, is_differentiated
from jask.array_api._dtypes import DISK

__all__ = ["Array", "InMemoryArray", "own", "unwrap", "namespace_function"]


class Array(abc.ABC):  # noqa: B024 - a type to test against, nothing to implement
    """The namespace's array type: ``isinstance(r, jask.array_api.Array)``
    holds for every result of :mod:`jask.array_api` (a :class:`~jask.DiskArray`
    or an :class:`InMemoryArray`).

    Example:
      >>> import jask.array_api as xp
      >>> x = xp.ones((3, 2))
      >>> isinstance(x, xp.Array), isinstance(xp.sum(x), xp.Array)
      (True, True)
    """


Array.register(DiskArray)


def _xp():
    return sys.modules["jask.array_api"]


def unwrap(value):
    """``value`` with every :class:`InMemoryArray` in it (at its top, in a
    tuple, list or slice) replaced by its ``jax.Array``, as jask's functions take it."""
    if type(value) is InMemoryArray:
        return value._value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(unwrap(v) for v in value)
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    if isinstance(value, slice):
        return slice(unwrap(value.start), unwrap(value.stop), unwrap(value.step))
    return value


def own(value):
    """A result as the namespace returns it: DiskArrays (and tracers of them)
    as they are, an in-memory value (a ``jax.Array``, a tracer of one, numpy
    data) as an :class:`InMemoryArray`; tuples and named tuples element-wise.

    Example:
      >>> import jax.numpy as jnp
      >>> from jask.array_api._memory import own
      >>> type(own(jnp.ones(2))).__name__, type(own(jnp.float32(1))).__name__
      ('InMemoryArray', 'InMemoryArray')
    """
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # eigh's, svd's named tuples
        return type(value)(*(own(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(own(v) for v in value)
    if type(value) is InMemoryArray or disk_type(value) is not None or _loss(value):
        return value
    if isinstance(value, (jax.Array, jax.core.Tracer, np.ndarray, np.generic)):
        return InMemoryArray(jnp.asarray(value))
    return value


def namespace_function(f: Callable) -> Callable:
    """``f`` taking the namespace's arrays (unwrapped) and answering them (:func:`own`)."""
    @functools.wraps(f)
    def function(*args, **kwargs):
        return own(f(*(unwrap(a) for a in args), **{k: unwrap(v) for k, v in kwargs.items()}))
    function._jask_namespace = True  # type: ignore[attr-defined]
    return function


def wrap_module(namespace: dict, names) -> None:
    """Replace the functions ``names`` of a module's ``namespace`` by their
    :func:`namespace_function` s (so the module's own calls go through them too)."""
    for name in names:
        f = namespace[name]
        if callable(f) and not getattr(f, "_jask_namespace", False):
            namespace[name] = namespace_function(f)


def _binary(name: str, reflected: bool = False) -> Callable:
    def op(self, other):
        if not _operand(other):
            return NotImplemented
        f = getattr(_xp(), name)
        return f(other, self) if reflected else f(self, other)
    op.__name__ = f"__{'r' if reflected else ''}{name}__"
    return op


def _operand(other) -> bool:
    return (type(other) is InMemoryArray or disk_type(other) is not None
            or isinstance(other, (int, float, bool, complex, np.ndarray, np.generic, jax.Array))
            or isinstance(other, jax.core.Tracer))


_OPERATORS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
              "floordiv": "floor_divide", "mod": "remainder", "pow": "pow",
              "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
              "xor": "bitwise_xor", "lshift": "bitwise_left_shift",
              "rshift": "bitwise_right_shift"}
_COMPARISONS = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
                "eq": "equal", "ne": "not_equal"}

#: jax.Array's methods an InMemoryArray answers too (results the namespace's arrays)
_JAX_METHODS = ("all", "any", "argmax", "argmin", "astype", "clip", "conj", "conjugate",
                "copy", "cumsum",
                "flatten", "item", "max", "mean", "min", "prod", "ravel", "reshape", "round",
                "squeeze", "std", "sum", "tolist", "transpose", "var", "block_until_ready")


class InMemoryArray(Array):
    """A small array of :mod:`jask.array_api` held in memory: a ``jax.Array``
    (a tracer of one inside ``jax.jit``) behind the namespace's type, so
    that a 0-d or small result stays an array of the namespace.

    It has the standard's attributes and operators (``shape``, ``dtype``,
    ``device``, ``mT``, ``T``, ``to_device``, ``x[key]``, ``x[key] = v``
    (it rebinds the value: no other array sees the write), ``+``, ``@``,
    comparisons, ``bool()``, ``float()``, ``int()``, ``operator.index()``,
    ``__dlpack__``), ``np.asarray(r)``, ``jnp.asarray(r)`` (its
    ``jax.Array``), ``r.at[key].set(v)`` and jax.Array's common methods
    (``sum``, ``astype``, ``item``, ...). Its operators are the namespace's
    functions, so mixed with a DiskArray they stream as those do. It is a
    pytree of one leaf: ``jax.jit`` takes and returns it. Inside ``jax.grad``
    (and ``vjp``, ``jvp``) a 0-d result is the differentiated tracer itself,
    which JAX needs as its function's value.

    Example:
      >>> import numpy as np, jask, jask.array_api as xp
      >>> m = xp.mean(jask.from_numpy(np.arange(6.0).reshape(3, 2)), axis=0)
      >>> type(m).__name__, m.shape, m.device
      ('InMemoryArray', (2,), Device('disk'))
      >>> float(m[1]), (m * 2).__array_namespace__() is xp
      (3.0, True)
    """

    __slots__ = ("_value",)
    # numpy operands defer to the reflected operators here, as they do for jax.Array
    __array_priority__ = 1000

    def __init__(self, value):
        self._value = value

    # --- the standard's attributes ---------------------------------------------------
    @property
    def shape(self) -> tuple:
        return tuple(self._value.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._value.dtype)

    @property
    def ndim(self) -> int:
        return len(self._value.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._value.shape, dtype=np.int64))

    @property
    def device(self):
        """The namespace's one device (:data:`~jask.array_api.DISK`), as for a DiskArray."""
        return DISK

    @property
    def mT(self) -> InMemoryArray:  # noqa: N802 - the standard's name
        return InMemoryArray(jnp.matrix_transpose(self._value))

    @property
    def real(self) -> InMemoryArray:
        return own(jnp.real(self._value))

    @property
    def imag(self) -> InMemoryArray:
        return own(jnp.imag(self._value))

    @property
    def T(self) -> InMemoryArray:  # noqa: N802 - the standard's name
        if self.ndim != 2:
            raise ValueError(f"x.T takes a 2-D array (the standard), got shape {self.shape}; "
                             "use permute_dims")
        return InMemoryArray(self._value.T)

    @property
    def at(self):
        return _At(self._value)

    def __array_namespace__(self, /, *, api_version=None):
        return DiskArray.__array_namespace__(self, api_version=api_version)

    def to_device(self, device, /, *, stream=None):
        if device != DISK:
            raise ValueError(f"jask.array_api's arrays live on {DISK!r}, not on {device!r}: "
                             "take this one's jax.Array with jnp.asarray(x) and "
                             "jax.device_put it")
        return self

    # --- conversions -----------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self._value)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __jax_array__(self):
        return self._value

    def to_numpy(self) -> np.ndarray:
        """The values as a numpy array (as :meth:`DiskArray.to_numpy`)."""
        return np.asarray(self._value)

    def __dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
        kwargs = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device),
                                    ("copy", copy)) if v is not None}
        return np.asarray(self._value).__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self, /):
        return (1, 0)  # kDLCPU

    def __bool__(self):
        return bool(self._value)

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __complex__(self):
        return complex(self._value)

    def __index__(self):
        if self.dtype.kind not in "iu":
            raise TypeError(f"only an integer array is an index, not one of {self.dtype.name}")
        return operator.index(self._value)

    def __len__(self):
        return len(self._value)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (InMemoryArray(self._value[i]) for i in range(self.shape[0]))

    def __repr__(self):
        return f"InMemoryArray({np.asarray(self._value)!r})" \
            if not isinstance(self._value, jax.core.Tracer) else f"InMemoryArray({self._value})"

    # --- indexing ----------------------------------------------------------------------
    def __getitem__(self, key):
        return own(self._value[_key(unwrap(key))])

    def __setitem__(self, key, value):
        value = unwrap(value)
        if disk_type(value) is not None:
            value = jask_materialize(value)
        self._value = self._value.at[_key(unwrap(key))].set(jnp.asarray(value)
                                                            .astype(self._value.dtype))

    # --- arithmetic: the namespace's functions ---------------------------------------
    def __neg__(self):
        return _xp().negative(self)

    def __pos__(self):
        return _xp().positive(self)

    def __abs__(self):
        return _xp().abs(self)

    def __invert__(self):
        return _xp().bitwise_invert(self)

    def searchsorted(self, v, side="left", sorter=None):
        """Where ``v``'s elements would go in this sorted 1-D array (numpy's and
        jax's method; xarray's ``searchsorted``): :func:`jask.array_api.searchsorted`."""
        return _xp().searchsorted(self, v, side=side, sorter=sorter)

    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        if name in _JAX_METHODS:
            method = getattr(self._value, name)

            def call(*args, **kwargs):
                out = method(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()})
                return own(out) if isinstance(out, (jax.Array, jax.core.Tracer)) else out
            return call
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


for _op, _name in _OPERATORS.items():
    setattr(InMemoryArray, f"__{_op}__", _binary(_name))
    setattr(InMemoryArray, f"__r{_op}__", _binary(_name, reflected=True))
for _op, _name in _COMPARISONS.items():
    setattr(InMemoryArray, f"__{_op}__", _binary(_name))


def jask_materialize(x):
    """A DiskArray's data in memory (for a key or value of a small array)."""
    return interop.materialize(x)


def _key(key):
    """A key for a jax.Array: DiskArray index arrays read into memory."""
    if isinstance(key, tuple):
        return tuple(_key(k) for k in key)
    if disk_type(key) is not None:
        return jask_materialize(key)
    return key


class _At:
    """``r.at[key]``: jax.Array's functional updates, answering InMemoryArrays."""

    def __init__(self, value):
        self._value = value

    def __getitem__(self, key):
        return _AtKey(self._value.at[_key(unwrap(key))])


class _AtKey:
    def __init__(self, ref):
        self._ref = ref

    def __getattr__(self, name: str):
        method = getattr(self._ref, name)

        def call(*args, **kwargs):
            return own(method(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()}))
        return call


def _loss(value) -> bool:
    """Whether ``value`` is a 0-d value being differentiated, which stays JAX's:
    ``jax.grad`` needs its function's value as a jax value."""
    return is_differentiated(value) and not value.shape


def _unflatten(_, leaves):
    # a 0-d value being differentiated stays JAX's (jax.grad(jax.jit(f)))
    return leaves[0] if _loss(leaves[0]) else InMemoryArray(leaves[0])


jax.tree_util.register_pytree_node(InMemoryArray, lambda a: ((a._value,), None), _unflatten)
