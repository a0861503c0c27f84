"""The DiskArray value and its JAX type.

A ``DiskArray`` is a value, like a ``jax.Array``: its type
(:class:`DiskArrayType`) is its shape and dtype, so ``jax.jit`` compiles once
per shape. What flows through a compiled program is an int32 *handle*; a
callback resolves it to a Zarr store when it runs (see :mod:`jask.store.registry`).
Each op writes a fresh store, so a value never changes under its holder;
``update_`` is the one operation that writes into an existing store.
"""
from __future__ import annotations

import math
import os

import numpy as np
from jax.experimental.hijax import HiType, ShapedArray, aval_property, register_hitype

from jask.base.config import get_config
from jask.base.sizes import exact_bytes
from jask.core._jax_internals import is_tracer, refuse_scans_over
from jask.core.lifetime import collect_if_idle
from jask.store import location_of, registry
from jask.store.memmaps import open_writable
from jask.store.space import snapshot
from jask.store.spec import StoreSpec
from jask.store.tiles import read

__all__ = ["DiskArray", "DiskArrayType", "check_storable"]

HANDLE_DTYPE = np.int32

#: The refusal of jax.vmap through an op with no batching rule (``op``: its name).
VMAP_UNSUPPORTED = (
    "jax.vmap through {op} is not supported: jask batches elementwise ops, reductions and "
    "products of a matrix with a batch of vectors (vmap(loss)(W) reads X once, as X @ W.T); "
    "for this op, write the batch as a leading axis of the data (jask.stack, X @ W.T) or "
    "use a Python loop")


#: The refusal of lax.scan over a DiskArray (its leading axis as the loop's xs).
SCAN_UNSUPPORTED = (
    "jax.lax.scan (and lax.map) over a DiskArray is not supported: a step cannot take one row "
    "of a store. Scan over in-memory values with the DiskArray closed over (one compiled "
    "loop; lax.fori_loop and lax.while_loop with DiskArrays in the body run too), loop in "
    "Python over a jitted step on slices X[i:i + n] (or jask.batches), or batch the rows as "
    "one op (jax.vmap over in-memory parameters reads X once)")


def disk_type(x) -> "DiskArrayType | None":
    """The DiskArrayType of a DiskArray or of a tracer of one, else None."""
    if isinstance(x, DiskArray):
        return x._aval
    if is_tracer(x) and isinstance(x.aval, DiskArrayType):
        return x.aval
    return None


def check_storable(dtype, op: str = "jask") -> np.dtype:
    """``dtype`` if a Zarr v3 store can hold it, else a TypeError saying what
    to do: zarr-python has no bfloat16 (nor float8 or int4) data type, so a
    store of ml_dtypes' types cannot be written or read by other tools.

    Example:
      >>> check_storable("float16")
      dtype('float16')
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc":
        raise TypeError(
            f"{op}: a DiskArray cannot hold {dtype.name}: Zarr v3 stores have no {dtype.name} "
            "data type (they hold bool, int, uint, float16/32/64 and complex). "
            + ("Store float32 (or float16) instead and cast small results in memory, e.g. "
               "jask.mean(x, axis=0).astype(jnp.bfloat16); jask's float16 reductions "
               "accumulate in float32 as jax.numpy's do" if dtype.kind == "V" else ""))
    return dtype


DEVICE_PUT = (
    "jax.device_put does not take a DiskArray: its data stays in its Zarr store on disk, "
    "and jask ops stream it within the memory budget. For a small array in device memory use "
    "jask.materialize(x) (or jnp.asarray(x.to_numpy())); for in-memory results, reduce or "
    "slice it first. (jax.jacfwd of a function returning a DiskArray asks for it too: take "
    "jax.jvp along each direction instead, or return an in-memory reduction)")


class NotOnDevice(TypeError, AttributeError):
    """A DiskArray asked for what only an array in device memory has (its
    sharding, for ``jax.device_put``). An AttributeError too, so JAX code
    probing ``getattr(aval, "sharding", None)`` behaves as before."""


class DiskArrayType(HiType):
    """The JAX type of a DiskArray: shape and dtype, nothing else.

    The lo-level value is one int32 handle naming a store.
    """

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = check_storable(dtype)

    def __hash__(self):
        return hash((DiskArrayType, self.shape, self.dtype))

    def __eq__(self, other):
        return (isinstance(other, DiskArrayType) and self.shape == other.shape
                and self.dtype == other.dtype)

    def __repr__(self):
        return f"DiskArrayType({self.shape}, {self.dtype.name})"

    def str_short(self, short_dtypes=False, **_):
        return f"Disk[{self.dtype.name}{list(self.shape)}]"

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    # --- lowering: a DiskArray is one int32 handle -----------------------------
    def lo_ty(self):
        return [ShapedArray((), HANDLE_DTYPE)]

    def lower_val(self, value: "DiskArray"):
        if value._owner is None:
            return [value._handle]
        # A compiled call is about to start: earlier calls' garbage can go.
        collect_if_idle()
        return [np.asarray(value._handle, HANDLE_DTYPE)]

    def raise_val(self, handle):
        return DiskArray._from_handle(handle, self)

    # --- autodiff: cotangents are DiskArrays of the same type ----------------
    def to_tangent_aval(self):
        return self

    # vspace_zero and vspace_add are set by jask.core.primitives, which makes
    # the ops they need (a fill, an add) from this type.

    # --- jax.vmap: a batched DiskArray's store holds the batch axis -----------
    def dec_rank(self, size, spec):
        axis = int(spec)
        return DiskArrayType(self.shape[:axis] + self.shape[axis + 1:], self.dtype)

    def inc_rank(self, size, spec):
        axis = int(spec)
        return DiskArrayType(self.shape[:axis] + (int(size),) + self.shape[axis:], self.dtype)

    # --- not supported: say so (hijax would fail with "must override") --------
    def leading_axis_spec(self):
        raise NotImplementedError(SCAN_UNSUPPORTED)

    # Operators and methods of its tracers are set below, shared with DiskArray.

    # jax.device_put reads its operand's type's sharding: a DiskArray has none.
    @property
    def sharding(self):
        raise NotOnDevice(DEVICE_PUT)

    @aval_property
    def nbytes(self):
        aval = self.aval
        return aval.size * aval.dtype.itemsize

    @aval_property
    def filename(self):
        raise AttributeError(
            "a traced DiskArray has no filename yet: its store is chosen when the "
            "compiled function runs. Read .filename on the result outside the trace.")


class DiskArray:
    """A disk-backed array that behaves as a native JAX value.

    Its data lives in a Zarr v3 store on disk and is streamed through memory
    one tile at a time; it composes with ``jax.grad``, ``jax.jit``,
    ``jax.tree_util`` and optax like a ``jax.Array``. Every op returns a new
    DiskArray in a fresh store; the store is deleted once no DiskArray refers
    to it. ``jask.open`` (or this constructor) wraps an existing Zarr array,
    which jask never deletes and writes only through :meth:`update_`.

    Args:
      filename: path of an existing Zarr array.
      shape: its shape (checked against the store).
      dtype: its dtype (checked against the store).

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> a.shape
      (4, 4)
    """

    # numpy must not convert a DiskArray (that would load it whole): a numpy
    # scalar on the left then defers to our __rmul__ and friends.
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __init__(self, filename, shape, dtype, _lo_tracer=None):
        if _lo_tracer is not None:  # internal: a handle inside a trace
            self._init(_lo_tracer, None, DiskArrayType(shape, dtype))
            return
        store = location_of(os.fspath(filename)).open()  # a user's: never deleted
        aval = DiskArrayType(shape, dtype)
        if (store.shape, store.dtype) != (aval.shape, aval.dtype):
            raise ValueError(
                f"the Zarr array at {store.path!r} has shape {store.shape} and dtype "
                f"{store.dtype.name}, not shape {aval.shape} and dtype {aval.dtype.name}")
        self._init(store.handle, registry.claim(store.handle), aval)

    def _init(self, handle, owner, aval):
        self._handle = handle
        self._owner = owner
        self._aval = aval

    @classmethod
    def _from_store(cls, store: StoreSpec) -> "DiskArray":
        """Own a completed store, registering it first if it has no handle."""
        if not store.handle:
            store = registry.register(store)
        return cls._from_handle(store.handle, DiskArrayType(store.shape, store.dtype))

    @classmethod
    def _from_handle(cls, handle, aval: DiskArrayType) -> "DiskArray":
        """Wrap a handle: a tracer inside a trace, else a store to own."""
        self = cls.__new__(cls)
        if is_tracer(handle):
            self._init(handle, None, aval)
        else:
            handle = int(handle)  # waits for the program that computed it
            self._init(handle, registry.claim(handle), aval)
        return self

    # --- what it is ------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self._aval.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def filename(self) -> str:
        """Path of the Zarr store holding this array's data.

        A view (``x.T``, ``x[a:b]``: jask.store.views) has no store of its
        own until asked: this copies it into one first, once."""
        store = self._store()
        if store.view is not None:
            store = registry.own_store(self._handle)
        return store.path

    @property
    def chunks(self) -> tuple:
        """Chunk shape of the backing store (one tile of most ops)."""
        return self._store().chunks

    def _store(self) -> StoreSpec:
        if self._owner is None:
            raise AttributeError(
                "a traced DiskArray has no store yet: its store is chosen when the "
                "compiled function runs. Read it on the result outside the trace.")
        return self._owner.spec

    def __repr__(self):
        if self._owner is None:
            return f"DiskArray(shape={self.shape}, dtype={self.dtype.name}, traced)"
        if self._owner.pending:  # showing it must not compute it (jask.engine.lazy)
            return (f"DiskArray(shape={self.shape}, dtype={self.dtype.name}, pending: "
                    "computed when first needed)")
        return (f"DiskArray(shape={self.shape}, dtype={self.dtype.name}, "
                f"filename={self.filename!r})")

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d DiskArray")
        return self.shape[0]

    def __iter__(self):
        raise TypeError("a DiskArray cannot be iterated; use jask.materialize on a "
                        "small array or to_memmap() for tile access")

    def __bool__(self):
        raise TypeError("the truth value of a DiskArray is ambiguous")

    def block_until_ready(self) -> "DiskArray":
        """Compute this array's store now if its op was deferred (eager ops
        are lazy, see :func:`jask.set_memory_budget`); ``jax.block_until_ready``
        calls it on DiskArray leaves.

        Example:
          >>> import numpy as np
          >>> import jask
          >>> y = jask.DiskArray.from_numpy(np.ones(3)) + 1
          >>> y.block_until_ready().shape
          (3,)
        """
        if self._owner is not None:
            self._owner.spec  # noqa: B018 - computes a deferred store
        return self

    # --- construction and access -----------------------------------------------
    def to_memmap(self):
        """A read/write view of this array's store that touches tiles on access.

        A chunked Zarr store has no single file to memory-map, so this
        returns the store's ``zarr.Array``: indexing it reads only the chunks
        the index covers, assigning to it writes them, and
        ``np.asarray(view)`` reads the whole array. A write through it is
        seen by every DiskArray of this store, but not by results already
        called: before each write, jask computes the pending results that
        read this store and copies its views (``x[:2]``, ``x.T``), so they
        keep the values their call saw, as numpy results do.

        Returns:
          A ``zarr.Array`` (:class:`jask.store.memmaps.WritableView`) of this
          array's shape and dtype.

        Example:
          >>> import numpy as np
          >>> import jask
          >>> a = jask.DiskArray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
          >>> view = a.to_memmap()
          >>> view[1, 2]
          array(5., dtype=float32)
        """
        collect_if_idle()
        return open_writable(self.filename)

    def to_numpy(self) -> np.ndarray:
        """Read the whole array into a numpy array (small arrays only).

        The values are those of one version of the store: if another
        process replaces it meanwhile (``update_``), this raises
        :class:`jask.StoreChangedError` (run it again); threads of this
        process updating it wait until the read is done.

        Example:
          >>> import numpy as np
          >>> import jask
          >>> jask.DiskArray.from_numpy(np.eye(2)).to_numpy()
          array([[1., 0.],
                 [0., 1.]])
        """
        collect_if_idle()
        store = self._store()
        with snapshot([store], "to_numpy"):  # one version, or StoreChangedError
            # jask's checked reads: a damaged chunk is named, never read as numbers
            return np.asarray(read(store, tuple(slice(0, n) for n in store.shape)))

    # Operators and methods are set below, shared with tracers of DiskArrayType.
    __hash__ = object.__hash__  # == is elementwise, as on jax.Array; identity hashes

    def __array__(self, dtype=None, copy=None):
        """The whole array in memory (numpy 2's protocol), for arrays up to
        the memory budget; always a copy, so ``copy=False`` raises ValueError.

        Larger arrays raise instead of filling memory: reduce them, slice
        them, or read tiles through :meth:`to_memmap`.
        """
        if copy is False:
            raise ValueError(
                f"a DiskArray of shape {self.shape} lives on disk: converting it to numpy always "
                "copies it into memory, so copy=False cannot be honoured (use copy=None)")
        budget = get_config().max_memory
        if self.nbytes > budget:
            raise MemoryError(
                f"np.asarray of a DiskArray of shape {self.shape} ({exact_bytes(self.nbytes)}) "
                f"would load it whole, over the memory budget of {exact_bytes(budget)}; reduce "
                "or slice it first (jask.mean(x) or x.mean() for np.mean(x), and so on), or read "
                "tiles with to_memmap()")
        value = self.to_numpy()
        return value if dtype is None else value.astype(dtype, copy=False)

    def __array_function__(self, func, types, args, kwargs):
        """numpy functions (``np.mean(x[:100])``) run on the array loaded
        through :meth:`__array__`: small arrays only, larger ones are refused
        naming the budget (numpy would otherwise call ``x.mean(dtype=...,
        out=...)``, jask's own streaming reduction, with numpy's arguments)."""
        def load(v):
            if isinstance(v, DiskArray):
                return np.asarray(v)
            if isinstance(v, (list, tuple)):
                return type(v)(load(e) for e in v)
            return v

        return func(*load(args), **{k: load(v) for k, v in kwargs.items()})


register_hitype(DiskArray, lambda value: value._aval)
refuse_scans_over(DiskArrayType, SCAN_UNSUPPORTED)
