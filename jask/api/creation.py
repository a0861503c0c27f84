"""Making DiskArrays: from an existing Zarr array, from values in memory, or
written tile by tile from a rule (``full``, ``arange``, ``linspace``, ``eye``,
``tri``): each tile is computed from its position, so no array larger than a
tile is ever in memory."""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jask.base import memory
from jask.base.config import Config, get_config
from jask.base.sizes import exact_bytes
from jask.core import primitives
from jask.core._jax_internals import is_tracer
from jask.core.array import DiskArray, check_storable, disk_type
from jask.core.lifetime import collect_if_idle
from jask.core.ufuncs import PASS, Ufunc
from jask.engine.blockwise import positional
from jask.engine.ops import creation as creation_ops
from jask.store import icechunk_name, locate
from jask.store.groups import Member, group_members, read_values
from jask.store.spec import StoreSpec, check_metadata
from jask.store.tiles import forget as forget_cached
from jask.store.tiles import open_array

__all__ = ["open", "open_group", "open_icechunk", "from_numpy", "to_disk", "full", "arange",
           "linspace", "eye", "tri"]


def open(path: str | os.PathLike, storage_options: dict | None = None) -> DiskArray:  # noqa: A001
    """Wrap an existing Zarr array as a DiskArray, without loading it.

    jask never deletes or modifies an opened store, except through
    :meth:`DiskArray.update_` on it, whoever else holds it: even a result
    of jask's opened by its ``filename`` is kept when that result is
    collected (it goes with jask's scratch folder when the session ends:
    :func:`jask.save` it to keep it).

    Args:
      path: folder of a Zarr (v2 or v3) array, a ``file://`` URL, or the URL
        of one in object storage (``s3://``, ``gs://``, ``az://``), read with
        ranged requests, many in flight per task; credentials come from the
        standard environment variables (``AWS_ENDPOINT_URL``,
        ``AWS_ACCESS_KEY_ID``, ...), as for zarr and xarray.
      storage_options: options for the object store (obstore's names, or
        s3fs's: ``key``, ``secret``, ``endpoint_url``, ``anon``), kept for
        every store under this URL in this process.

    Returns:
      A DiskArray whose ``filename`` is ``path`` resolved (absolute, symlinks
      followed: through a link and its target it is one store; the URL for
      object storage). It reads that store with the layout it had when
      opened: rewritten since with another dtype, shape, chunks or codecs, it
      raises :class:`jask.StoreChangedError` (open it again).

    Raises:
      FileNotFoundError: if there is no Zarr array at ``path``.
      jask.RemoteStoreError: object storage failed (after retries).
      ValueError: a URL with credentials, a query or fragment, or an empty,
        ``.`` or ``..`` segment (named with its secrets left out).

    Example:
      >>> import numpy as np, zarr, jask
      >>> z = zarr.create_array(store="/tmp/jask-open-example.zarr", shape=(3,),
      ...                       dtype="float32", overwrite=True)
      >>> z[:] = [1, 2, 3]
      >>> float(jask.sum(jask.open("/tmp/jask-open-example.zarr")))
      6.0
    """
    return DiskArray._from_store(locate(path, storage_options).open())


def open_icechunk(repo, path: str, *, branch: str = "main",
                  storage_options: dict | None = None) -> DiskArray:
    """Open the Zarr array at ``path`` in an icechunk repository as a DiskArray.

    Reads see the newest snapshot of ``branch`` when this process first
    reads the array (one snapshot throughout an op), and
    :meth:`DiskArray.update_` (and in-place :mod:`jask.optim` steps) write
    the new chunks in a writable session and commit once: readers anywhere
    see the old snapshot or the new one, never a mix, and a writer killed
    mid-update leaves the old one. If another writer changed the array
    after this process read it, or while the update ran, the update raises
    :class:`jask.StoreChangedError`, committing nothing. Open it again to see
    commits made since by others.

    Args:
      repo: an ``icechunk.Repository``, or its URL (``s3://bucket/prefix``,
        ``gs://...``, a local folder), reached with the standard environment
        variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...) as zarr
        does; worker processes open a URL again themselves.
      path: the array's path inside the repository.
      branch: the branch to read and commit to.
      storage_options: keyword arguments of ``icechunk.s3_storage`` (or
        ``gcs_storage``) over the environment's, for a URL.

    Example:
      >>> import tempfile, icechunk, zarr, numpy as np, jask
      >>> repo = icechunk.Repository.create(icechunk.local_filesystem_storage(tempfile.mkdtemp()))
      >>> session = repo.writable_session("main")
      >>> zarr.create_array(session.store, name="w", shape=(3,), dtype="f4")[:] = 1
      >>> _ = session.commit("w")
      >>> w = jask.open_icechunk(repo, "w")
      >>> _ = w.update_(w * 2)   # one commit
      >>> zarr.open_array(repo.readonly_session("main").store, path="w")[:]
      array([2., 2., 2.], dtype=float32)
    """
    name = icechunk_name(repo, path, branch, storage_options)
    forget_cached(name)  # the branch's newest snapshot, not one opened before
    arr = open_array(name)
    chunks, dtype = check_metadata(name, arr.shape, arr.chunks, arr.dtype)
    return DiskArray._from_store(StoreSpec(name, tuple(arr.shape), dtype, chunks, managed=False))


def open_group(path: str | os.PathLike,
               storage_options: dict | None = None) -> tuple[dict[str, tuple], dict]:
    """Open every array of a Zarr group as a DiskArray, without loading any.

    Args:
      path: folder of a Zarr (v2 or v3) group, such as one ``xarray`` wrote,
        or its URL (see :func:`open`).
      storage_options: as for :func:`open`.

    Returns:
      ``({name: (array, dims, attrs)}, group_attrs)``: each array with its
      dimension names (Zarr v3 ``dimension_names`` or xarray's
      ``_ARRAY_DIMENSIONS``) and attributes. Arrays of numbers and booleans
      are DiskArrays; arrays of other types (labels, dates) are read into
      memory as numpy arrays, up to an eighth of the budget (larger ones
      are refused, naming the array). :func:`jask.xarray.open_dataset`
      builds an ``xarray.Dataset`` from it.

    Example:
      >>> import numpy as np, zarr, jask
      >>> g = zarr.open_group("/tmp/jask-group-example.zarr", mode="w")
      >>> g.create_array("x", shape=(3,), dtype="f4", dimension_names=["t"])[:] = 1
      >>> arrays, _ = jask.open_group("/tmp/jask-group-example.zarr")
      >>> arrays["x"][1], float(jask.sum(arrays["x"][0]))
      (('t',), 3.0)
    """
    members, group_attrs = group_members(locate(path, storage_options).path)
    arrays = {m.name: (_group_array(m), m.dims, m.attrs) for m in members}
    return arrays, group_attrs


def _group_array(member: Member):
    if member.dtype.kind in "biuf":
        return open(member.path)
    if member.nbytes > memory.in_memory_limit():
        raise TypeError(f"the Zarr array {member.path!r} holds {member.dtype} values, which jask "
                        f"does not compute on, and at {exact_bytes(member.nbytes)} is too large "
                        "to read into memory under the budget")
    return read_values(member.path)


def from_numpy(arr, *, config: Config | None = None) -> DiskArray:
    """Write an in-memory array to a new store (see :meth:`DiskArray.from_numpy`).

    Example:
      >>> import numpy as np, jask
      >>> jask.from_numpy(np.zeros((2, 3))).shape
      (2, 3)
    """
    if isinstance(arr, DiskArray) or is_tracer(arr):
        raise TypeError("jask.from_numpy: expected an in-memory array, got a "
                        f"{type(arr).__name__}")
    value = np.asarray(arr)
    if value.dtype == object:
        raise TypeError("jask.from_numpy: cannot store an object array")
    check_storable(value.dtype, "jask.from_numpy")
    if value.dtype.kind not in "biufc" or value.dtype.fields is not None:
        raise TypeError(f"jask.from_numpy: cannot store {value.dtype} values; jask computes on "
                        "numbers and booleans only (bool, int, uint, float, complex)")
    if not value.dtype.isnative:  # '>f4' holds the numbers of float32, as JAX takes them
        value = value.astype(value.dtype.newbyteorder("="))
    # A numpy array is a constant: write it now, in its own dtype, even
    # inside a trace (it then enters the program as a constant DiskArray).
    collect_if_idle()
    write = creation_ops.write_value(op="from_numpy")
    return DiskArray._from_store(write([], [value], config or get_config()))


def to_disk(x, *, config: Config | None = None) -> DiskArray:
    """``x`` as a DiskArray: a DiskArray as it is, a numpy value written in
    its own dtype (as :func:`from_numpy`), a ``jax.Array`` or a traced value
    written by a differentiable op (its gradient comes back in memory).

    Example:
      >>> import jax.numpy as jnp, jask
      >>> from jask.api.creation import to_disk
      >>> to_disk(jnp.arange(3.0)).to_numpy()
      array([0., 1., 2.], dtype=float32)
    """
    if disk_type(x) is not None:
        return x
    if is_tracer(x) or hasattr(x, "__jax_array__") or type(x).__module__.startswith("jax"):
        return primitives.from_value(x, config=config)
    return from_numpy(x, config=config)


# --- arrays written from a rule, one tile at a time ----------------------------------

@dataclass(frozen=True)
class _Rule:
    """A positional kernel: each tile's values from its region (see
    :func:`jask.engine.blockwise.positional`), in ``dtype``. Its one operand
    is a placeholder scalar that it ignores."""

    kind: str        # "arange", "linspace", "eye" or "tri"
    params: tuple    # the rule's numbers (hashable: a compiled call keys on them)
    dtype: str

    def __call__(self, _, *, region, shape):
        if self.kind == "arange":
            start, step = self.params
            i = np.arange(region[0].start, region[0].stop)
            return (start + i * step).astype(self.dtype)
        if self.kind == "linspace":  # numpy's formula, so values match np.linspace
            start, stop, num, endpoint = self.params
            div = (num - 1) if endpoint else num
            i = np.arange(region[0].start, region[0].stop, dtype=np.float64)
            values = i * ((stop - start) / div) + start if div > 0 else i * 0.0 + start
            if endpoint and num > 1:
                values[i == num - 1] = stop
            return values.astype(self.dtype)
        (k,) = self.params  # eye: ones on diagonal k; tri: ones on and below it
        rows = np.arange(region[-2].start, region[-2].stop)[:, None]
        cols = np.arange(region[-1].start, region[-1].stop)[None, :]
        mask = (cols - rows == k) if self.kind == "eye" else (cols - rows <= k)
        return mask.astype(self.dtype)


positional(_Rule)  # instances are called with their tile's region


@functools.lru_cache(maxsize=256)
def _rule_row(rule: _Rule) -> Ufunc:
    # A rule is not differentiable: it reads nothing (PASS: its placeholder
    # operand is never differentiated, being a constant).
    return Ufunc(rule.kind, rule, lambda _: None, (PASS,), public=False)


def _dtype(op: str, dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc":
        raise TypeError(f"jask.{op}: dtype {dtype.name} is not supported (DiskArrays hold "
                        "bool, integer, real and complex floating types)")
    return dtype


def _shape(op: str, shape) -> tuple:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(int(n) < 0 for n in shape):
        raise ValueError(f"jask.{op}: negative dimension in shape {shape}")
    return tuple(int(n) for n in shape)


def _write(rule: _Rule, shape: tuple, dtype: np.dtype, config: Config | None):
    if shape == ():  # jask makes no 0-d store: a 0-d value lives in memory, as sum(x)'s
        return jnp.asarray(rule(None, region=(), shape=()), dtype)
    placeholder = jnp.zeros((), jnp.int32)
    return primitives.Blockwise(_rule_row(rule), (ShapedArray((), placeholder.dtype),), ((),),
                                (None,), shape, tuple(range(len(shape))), dtype,
                                config=config)(placeholder)


def full(shape, fill_value, dtype, *, config: Config | None = None) -> DiskArray:
    """A new DiskArray of ``shape`` and ``dtype`` with every element
    ``fill_value``, written tile by tile (a 0-d one is an in-memory
    ``jax.Array``: jask makes no 0-d store).

    Example:
      >>> import numpy as np
      >>> from jask.api.creation import full
      >>> full((2, 3), 7, np.int16).to_numpy()
      array([[7, 7, 7],
             [7, 7, 7]], dtype=int16)
    """
    dtype = _dtype("full", dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= int(fill_value) <= info.max:
            raise OverflowError(f"jask.full: fill value {fill_value} is out of the range of "
                                f"{dtype.name} ({info.min} to {info.max})")
    return primitives.full(_shape("full", shape), fill_value, dtype, config)


def arange(start, stop, step, dtype, *, config: Config | None = None) -> DiskArray:
    """``numpy.arange(start, stop, step)`` in ``dtype`` as a new DiskArray,
    each tile computed from its position (``start + i * step``).

    Example:
      >>> import numpy as np
      >>> from jask.api.creation import arange
      >>> arange(1, 10, 3, np.int32).to_numpy()
      array([1, 4, 7], dtype=int32)
    """
    dtype = _dtype("arange", dtype)
    if step == 0:
        raise ValueError("jask.arange: step must not be 0")
    n = max(0, math.ceil((stop - start) / step))
    return _write(_Rule("arange", (start, step), dtype.name), (n,), dtype, config)


def linspace(start, stop, num: int, dtype, *, endpoint: bool = True,
             config: Config | None = None) -> DiskArray:
    """``numpy.linspace(start, stop, num, endpoint)`` in ``dtype`` as a new
    DiskArray (computed in float64 with numpy's formula, then cast).

    Example:
      >>> import numpy as np
      >>> from jask.api.creation import linspace
      >>> linspace(0, 1, 5, np.float32).to_numpy()
      array([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
    """
    dtype = _dtype("linspace", dtype)
    if int(num) < 0:
        raise ValueError(f"jask.linspace: num must be non-negative, got {num}")
    number = complex if dtype.kind == "c" else float  # (numpy's formula holds for both)
    return _write(_Rule("linspace", (number(start), number(stop), int(num), bool(endpoint)),
                        dtype.name), (int(num),), dtype, config)


def eye(n_rows: int, n_cols: int, k: int, dtype, *, config: Config | None = None) -> DiskArray:
    """A new ``n_rows x n_cols`` DiskArray with ones on diagonal ``k``.

    Example:
      >>> import numpy as np
      >>> from jask.api.creation import eye
      >>> eye(2, 3, 1, np.float32).to_numpy()
      array([[0., 1., 0.],
             [0., 0., 1.]], dtype=float32)
    """
    dtype = _dtype("eye", dtype)
    return _write(_Rule("eye", (int(k),), dtype.name), _shape("eye", (n_rows, n_cols)), dtype,
                  config)


def tri(n_rows: int, n_cols: int, k: int, *, config: Config | None = None) -> DiskArray:
    """A new bool DiskArray, True on and below diagonal ``k`` (``numpy.tri``):
    the mask of ``tril``, and of ``triu`` negated.

    Example:
      >>> from jask.api.creation import tri
      >>> tri(2, 3, 0).to_numpy()
      array([[ True, False, False],
             [ True,  True, False]])
    """
    return _write(_Rule("tri", (int(k),), "bool"), _shape("tri", (n_rows, n_cols)),
                  np.dtype(bool), config)
