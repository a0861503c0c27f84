"""Moving arrays between jask and Dask (and what reads Dask or Zarr).

Every DiskArray is a Zarr v3 array on disk, so any Zarr reader opens
``x.filename`` directly: ``zarr.open_array``, ``dask.array.from_zarr``, and
through Dask, xarray. :func:`to_dask` does the Dask part; :func:`from_dask`
goes the other way, writing a Dask array (a lazy pipeline, an xarray
variable's ``.data``, an HDF5 or NetCDF file opened by Dask...) to a new jask
store tile by tile under the memory budget. A Dask operand of a jask op is
not written: :func:`dask_operand` computes its tiles where the op reads them.
"""
from __future__ import annotations

import itertools
import os

import dask.array as da
import jax
import jax.numpy as jnp
import numpy as np
from dask.local import get_sync
from dask.optimization import cull

from jask.base import counters, memory
from jask.base.config import Config, get_config
from jask.base.sizes import exact_bytes
from jask.core import primitives, ufuncs
from jask.core.array import DiskArray, disk_type
from jask.core.lifetime import collect_if_idle
from jask.engine import execute
from jask.engine.blockwise import positional
from jask.store import register_options, registry
from jask.store.groups import open_array as open_zarr_array
from jask.store.groups import zarr_store as zarr_store_at
from jask.store.spec import StoreSpec
from jask.store.tiles import open_array

__all__ = ["to_dask", "from_dask", "dask_operand", "materialize", "zarr_store"]


def to_dask(x: DiskArray) -> da.Array:
    """A lazy ``dask.array.Array`` reading ``x``'s store, chunk for chunk.

    The Dask array reads the store when it is computed: keep ``x`` (or
    another DiskArray of the same store) alive until then, since jask deletes
    a store once no DiskArray refers to it. Writes through ``update_`` are
    seen by later computations.

    Args:
      x: a concrete (not traced) DiskArray.

    Returns:
      ``dask.array.from_zarr`` of the ``zarr.Array`` at ``x.filename``, with
      ``x``'s chunks; at a URL, that array is on zarr's ``ObjectStore`` over
      jask's own client (:func:`jask.zarr_store`), so no fsspec filesystem is
      needed and the same credentials apply.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.arange(6.0).reshape(2, 3))
      >>> d = jask.to_dask(x)
      >>> d.shape, d.chunks == tuple((c,) for c in x.chunks)
      ((2, 3), True)
      >>> float(d.sum().compute())
      15.0
    """
    if not isinstance(x, DiskArray):
        raise TypeError(f"jask.to_dask: expected a DiskArray, got {type(x).__name__}")
    return da.from_zarr(open_zarr_array(x.filename))


def zarr_store(path: str | os.PathLike, *, read_only: bool = True,
               storage_options: dict | None = None):
    """A store that zarr, xarray and dask open, for a folder or a URL jask reads.

    For a URL (``s3://``, ``gs://``, ``az://``) it is zarr's own
    ``zarr.storage.ObjectStore`` over the obstore client jask uses, with the
    same options and credentials (the standard environment variables, or
    ``storage_options`` as for :func:`jask.open`): plain Zarr access to the
    same data with no fsspec filesystem (s3fs, gcsfs, adlfs) installed. For a
    folder it is the path itself.

    Args:
      path: a folder or a URL, of an array or a group.
      read_only: ``False`` for a store zarr may write to (``xr.Dataset.to_zarr``).
      storage_options: as for :func:`jask.open`, registered for this URL's prefix.

    Returns:
      What ``zarr.open_array(store)``, ``zarr.open_group(store)``,
      ``xr.open_zarr(store)`` and ``dask.array.from_zarr(store)`` take.

    Example:
      >>> import numpy as np, zarr, jask
      >>> x = jask.from_numpy(np.arange(4.0))
      >>> zarr.open_array(jask.zarr_store(x.filename), mode="r")[1:3]
      array([1., 2.])
    """
    path = os.fspath(path)
    register_options(path, storage_options)
    return zarr_store_at(path, read_only=read_only)


def _check_dask_array(op: str, x) -> None:
    """A Dask array jask can take: numeric, of known shape."""
    if not isinstance(x, da.Array):
        raise TypeError(f"{op}: expected a dask.array.Array, got {type(x).__name__}")
    if x.dtype == object or any(np.isnan(s) for s in x.shape):
        raise ValueError(f"{op}: the array needs a numeric dtype and known shape "
                         f"(got dtype {x.dtype} and shape {x.shape}); call "
                         "x.compute_chunk_sizes() first if its shape is unknown")


def from_dask(x: da.Array, *, config: Config | None = None) -> DiskArray:
    """Write a Dask array to a new jask store and return it as a DiskArray.

    The array is rechunked to the store's chunks (sized from the budget, as
    for every jask store) and written one whole chunk per task, through the
    scheduler jask uses for its own ops (a ``dask.distributed`` client when
    one is the default, so the tasks show on its dashboard). Only the tasks
    that run at once hold memory; each holds one output chunk plus the input
    chunks that overlap it, so keep ``x``'s own chunks no larger than jask's.

    Args:
      x: the Dask array to write; any numeric dtype.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      A new DiskArray holding ``x``'s values, deleted when no longer used.

    Example:
      >>> import dask.array as da, jask
      >>> y = jask.from_dask(da.arange(10.0, chunks=3) * 2)
      >>> y.shape, float(jask.sum(y))
      ((10,), 90.0)
    """
    _check_dask_array("jask.from_dask", x)
    config = config or get_config()
    collect_if_idle()
    shape, dtype = tuple(int(s) for s in x.shape), np.dtype(x.dtype)
    chunks = memory.default_chunks(shape, dtype, config.max_memory, config.workers)
    with registry.new_store(config.scratch_dir, "from_dask", shape, dtype, chunks) as out:
        _store(x.rechunk(chunks or x.chunks), out, config)
    with counters.op("from_dask"):  # (Zarr wrote it: jask's tile writes did not count it)
        counters.wrote(out, tuple(slice(0, n) for n in shape))
    return DiskArray._from_store(out)


class _DaskTiles:
    """A positional kernel: the tile of a Dask array at its region, computed
    in the task that reads it from the Dask chunks it overlaps (their tasks
    alone, by Dask's synchronous scheduler: slicing the array and computing
    that took 0.8 s a tile on a 3,652-chunk graph, its tasks 13 ms)."""

    def __init__(self, x: da.Array):
        self.x = x
        self._graph: dict | None = None  # the graph, materialized at the first tile
        self._bounds = [np.cumsum((0,) + tuple(c)) for c in x.chunks]

    def __getstate__(self):  # (sent to a worker without the materialized graph)
        return {**self.__dict__, "_graph": None}

    def __call__(self, _, *, region, shape):
        x = self.x
        if not region:
            return np.asarray(x.compute(scheduler="synchronous"), dtype=x.dtype)
        if any(r.stop <= r.start for r in region):
            return np.empty(tuple(max(0, r.stop - r.start) for r in region), x.dtype)
        if self._graph is None:
            self._graph = dict(x.__dask_graph__())
        ranges = [range(int(np.searchsorted(b, r.start, "right")) - 1,
                        int(np.searchsorted(b, r.stop, "left")))
                  for b, r in zip(self._bounds, region)]
        keys = [(x.name, *at) for at in itertools.product(*ranges)]
        culled, _ = cull(self._graph, keys)
        blocks = iter(get_sync(culled, keys))

        def nest(axis: int):
            return [next(blocks) if axis == len(ranges) - 1 else nest(axis + 1)
                    for _ in ranges[axis]]
        whole = np.block(nest(0)) if len(keys) > 1 else np.asarray(next(blocks))
        inside = tuple(slice(r.start - int(b[rng.start]), r.stop - int(b[rng.start]))
                       for r, b, rng in zip(region, self._bounds, ranges))
        return np.asarray(whole[inside], dtype=x.dtype)


positional(_DaskTiles)  # instances are called with their tile's region


def dask_operand(x: da.Array, *, config: Config | None = None) -> DiskArray:
    """A Dask array as a DiskArray whose tiles Dask computes where they are
    read, never written: an operand of an op too large for memory (xarray
    hands ``X.groupby("time.month") - clim`` the climatology indexed by each
    day's month as a Dask array as large as ``X``). The op and its readers
    then run as one band group, each band's rows of ``x`` computed in it; a
    reader that needs a store of its own (a save, ``filename``) writes it
    then, as for any pending result. Not differentiable in ``x`` (a constant).

    Example:
      >>> import dask.array as da, jask
      >>> y = dask_operand(da.arange(10.0, chunks=3) * 2)
      >>> float(jask.sum(y + 1))
      100.0
    """
    _check_dask_array("jask.dask_operand", x)
    shape, dtype = tuple(int(s) for s in x.shape), np.dtype(x.dtype)
    row = ufuncs.Ufunc("from_dask", _DaskTiles(x), lambda _: None, (ufuncs.PASS,),
                       public=False)
    placeholder = jnp.zeros((), jnp.int32)
    return primitives.Blockwise(row, (jax.core.ShapedArray((), placeholder.dtype),), ((),),
                                (None,), shape, tuple(range(len(shape))), dtype,
                                config=config)(placeholder)


def _store(x: da.Array, out: StoreSpec, config: Config) -> None:
    """Write ``x`` (chunked like ``out``) into ``out`` with jask's runner."""
    target = open_array(out.path)  # writes every chunk, as jask's stores must
    # dask's annotations do not list zarr.Array, which da.store supports
    delayed = da.store(x, target, lock=False, compute=False)  # type: ignore[arg-type]
    dsk = dict(delayed.__dask_graph__())
    execute.run(dsk, list(delayed.__dask_keys__()), config.workers)


def materialize(x, *, config: Config | None = None) -> jax.Array:
    """Bring a disk-backed array fully into memory as a real ``jax.Array``.

    Reads the whole array at once: use it only on arrays that fit in memory,
    typically at the end of a disk-backed pipeline. Differentiable: the
    backward pass writes the incoming cotangent to a new ``.grad`` store.

    Args:
      x: the DiskArray to load.
      config: a :class:`~jask.Config` to use instead of the active one.

    Returns:
      An in-memory ``jax.Array`` with ``x``'s shape, dtype and values.

    Example:
      >>> import numpy as np
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> a = jask.DiskArray.from_numpy(np.ones((4, 4), dtype=np.float32))
      >>> real = jask.materialize(a)
      >>> type(real).__name__
      'ArrayImpl'
    """
    if disk_type(x) is None:
        return jnp.asarray(x)  # already in memory
    return primitives.materialize(x, config=config)


def fits_in_memory(shape, dtype, *, config: Config | None = None) -> bool:
    """Whether an array of this shape and dtype fits the in-memory share of
    the budget (an eighth): the rule by which jask puts a result in memory,
    for the layers built on this one (:mod:`jask.array_api`).

    Example:
      >>> import jask
      >>> jask.set_memory_budget("1MB")
      >>> fits_in_memory((100, 100), "float32"), fits_in_memory((1000, 1000), "float32")
      (True, False)
    """
    return memory.fits_in_memory(tuple(shape), dtype, config)


def in_memory_share(*, config: Config | None = None) -> int:
    """The bytes of the in-memory share of the budget (see :func:`fits_in_memory`).

    Example:
      >>> import jask
      >>> jask.set_memory_budget("1MB")
      >>> in_memory_share()
      125000
    """
    return memory.in_memory_limit(config)


def read_small(x, op: str, instead: str, *, config: Config | None = None) -> jax.Array:
    """``x`` read whole into memory (:func:`materialize`) when it fits the
    in-memory share; a larger DiskArray is a ``MemoryError`` naming ``op``,
    its size, the share and ``instead``, raised before anything is read.

    Example:
      >>> import numpy as np, jask
      >>> jask.set_memory_budget("1MB")
      >>> read_small(jask.from_numpy(np.ones(3)), "inv", "").shape
      (3,)
    """
    aval = disk_type(x)
    if aval is None:
        return jnp.asarray(x)
    if not memory.fits_in_memory(aval.shape, aval.dtype, config):
        raise MemoryError(
            f"{op}: a DiskArray of shape {tuple(aval.shape)} "
            f"({exact_bytes(memory.nbytes(aval.shape, aval.dtype))}) is over the in-memory "
            f"share of the budget ({exact_bytes(memory.in_memory_limit(config))}), and {op} "
            f"reads its input whole; {instead}")
    return materialize(x, config=config)
