"""xarray over DiskArrays: named dimensions, out of core, with gradients.

A DiskArray is an Array API array (``x.__array_namespace__()`` is
:mod:`jask.array_api`), so ``xarray.DataArray(X, dims=("sample",
"feature"))`` wraps it directly, with no Dask in between: arithmetic
broadcasts by name, reductions over named dims stream (xarray's default
NaN-skipping reductions run ``jask.nanmean`` and friends through
``np.nanmean``), ``isel``/``sel`` by slices are DiskArray slices, and the
results are DiskArrays or small in-memory arrays. Inside ``jax.grad`` and
``jax.jit`` the traced values go through xarray too; there, reduce with
``skipna=False`` (xarray's NaN-skipping path goes through numpy, which a
tracer cannot enter).

:func:`open_dataset` opens a Zarr group (as ``xarray.open_zarr`` does, e.g.
one ``Dataset.to_zarr`` wrote) into a Dataset of DiskArrays.
"""
from __future__ import annotations

import math
import os
import re

import dask
import jax.numpy as jnp
import numpy as np
import xarray as xr
from dask.array.core import normalize_chunks
from xarray.namedarray.parallelcompat import ChunkManagerEntrypoint

import jask  # the facade (it also installs x.__array_namespace__, which xarray needs)
import jask.array_api as xp

__all__ = ["open_dataset", "to_zarr", "ChunkManager"]


def _coordinate_names(arrays: dict, group_attrs: dict) -> set[str]:
    """Names the CF ``coordinates`` attributes list (xarray writes them)."""
    names: set[str] = set(str(group_attrs.get("coordinates", "")).split())
    for _, _, attrs in arrays.values():
        names.update(str(attrs.get("coordinates", "")).split())
    return names


def open_dataset(path: str | os.PathLike, *, drop_variables=()) -> xr.Dataset:
    """Open a Zarr group as an ``xarray.Dataset`` whose variables are DiskArrays.

    Index coordinates (1-D arrays named as their dimension, such as
    ``time``) are read into memory and CF-decoded (dates), as xarray needs
    them for ``sel``; every other array stays on disk, its values as stored
    (no CF masking or scaling: an integer store's ``_FillValue`` is not
    replaced by NaN, ``scale_factor`` stays in ``attrs``).

    Args:
      path: folder of a Zarr (v2 or v3) group, such as ``Dataset.to_zarr`` writes.
      drop_variables: names of arrays to leave out.

    Returns:
      An ``xarray.Dataset``; ``ds[name].data`` is a DiskArray.

    Example:
      >>> import numpy as np, xarray as xr, jask, jask.xarray
      >>> xr.Dataset({"X": (("sample", "feature"), np.ones((4, 3), np.float32))},
      ...            coords={"sample": [10, 20, 30, 40]}).to_zarr(
      ...     "/tmp/jask-xarray-example.zarr", mode="w", consolidated=False)  # doctest: +ELLIPSIS
      <xarray.backends.zarr.ZarrStore object at ...>
      >>> ds = jask.xarray.open_dataset("/tmp/jask-xarray-example.zarr")
      >>> type(ds.X.data).__name__, float(ds.X.sel(sample=slice(20, 30)).sum())
      ('DiskArray', 6.0)
    """
    arrays, group_attrs = jask.open_group(path)
    arrays = {k: v for k, v in arrays.items() if k not in set(drop_variables)}
    coordinate_names = _coordinate_names(arrays, group_attrs)
    data_vars: dict[str, xr.Variable] = {}
    coords: dict[str, xr.Variable] = {}
    for name, (array, dims, attrs) in arrays.items():
        attrs = {k: v for k, v in attrs.items() if k != "coordinates"}
        if dims == (name,):  # an index: in memory, decoded (xarray's indexes need values)
            values = array.to_numpy() if isinstance(array, jask.DiskArray) else array
            variable = xr.Variable(dims, np.asarray(values), attrs)
            coords[name] = xr.conventions.decode_cf_variable(name, variable)
            continue
        # _FillValue is an encoding xarray writes, not an attribute: values are as stored
        # (a float store's missing values are NaN either way)
        attrs.pop("_FillValue", None)
        variable = xr.Variable(dims, array, attrs)
        (coords if name in coordinate_names else data_vars)[name] = variable
    attrs = {k: v for k, v in group_attrs.items() if k != "coordinates"}
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


def to_zarr(dataset: xr.Dataset, path: str | os.PathLike, **kwargs):
    """Write a Dataset holding DiskArrays to a Zarr group, without loading them.

    ``Dataset.to_zarr`` itself cannot take DiskArrays: xarray reads a
    chunked array's ``.chunks`` as Dask's per-axis lists, and a DiskArray's
    are its Zarr chunk shape. This hands xarray each DiskArray as a Dask
    array over the same store (:meth:`DiskArray.to_dask`), so xarray's own
    writer streams it chunk by chunk, one chunk at a time (Dask's
    synchronous scheduler: memory of about one chunk, as a jask store's
    chunks are sized from the budget). Those reads are plain Zarr's: jask's
    damaged-chunk and version checks do not apply to them. A URL is written
    through zarr's ``ObjectStore`` on jask's client (:func:`jask.zarr_store`),
    with jask's options and credentials; no fsspec filesystem is needed.

    Args:
      dataset: the Dataset (or a DataArray, written as its ``.to_dataset()``).
      path: the Zarr group to write: a folder or a URL.
      **kwargs: passed to ``Dataset.to_zarr`` (``mode``, ``encoding``, ...).

    Example:
      >>> import numpy as np, xarray as xr, jask, jask.xarray
      >>> ds = xr.Dataset({"x": ("t", jask.from_numpy(np.arange(3.0)))})
      >>> _ = jask.xarray.to_zarr(ds, "/tmp/jask-to-zarr-example.zarr", mode="w")
      >>> xr.open_zarr("/tmp/jask-to-zarr-example.zarr").x.values
      array([0., 1., 2.])
    """
    if isinstance(dataset, xr.DataArray):
        dataset = dataset.to_dataset()
    on_dask = {name: variable.copy(data=variable.data.to_dask())  # type: ignore[attr-defined]
               for name, variable in dataset.variables.items()
               if isinstance(variable.data, jask.DiskArray)}
    kwargs.setdefault("consolidated", False)
    template = dataset.assign_coords({k: v for k, v in on_dask.items() if k in dataset.coords})
    template = template.assign({k: v for k, v in on_dask.items() if k not in dataset.coords})
    with dask.config.set(scheduler="synchronous"):  # one chunk in memory at a time
        return template.to_zarr(jask.zarr_store(path, read_only=False), **kwargs)


class ChunkManager(ChunkManagerEntrypoint):
    """How xarray handles DiskArrays, which it sees as chunked (they have ``.chunks``).

    Registered under the name ``"jask"`` (the ``xarray.chunkmanagers`` entry
    point): ``ds.load()``/``.values`` read the values into memory,
    ``ds.to_zarr`` writes DiskArrays band by band within the memory budget,
    ``xr.full_like`` builds DiskArrays, ``xr.apply_ufunc(f, ...,
    dask="parallelized")`` of an elementwise ``f`` runs it tile by tile
    (:func:`jask.map`), ``ds.chunk(...)`` is refused with what to do instead.

    Example:
      >>> import numpy as np, xarray as xr, jask, jask.xarray
      >>> da = xr.DataArray(jask.from_numpy(np.arange(3.0)), dims="x")
      >>> da.load().values
      array([0., 1., 2.])
    """

    def __init__(self) -> None:
        self.array_cls = jask.DiskArray
        self.available = True

    def is_chunked_array(self, data) -> bool:
        return isinstance(data, jask.DiskArray)

    def chunks(self, data) -> tuple[tuple[int, ...], ...]:
        return normalize_chunks(data.chunks, data.shape)

    def normalize_chunks(self, chunks, shape=None, limit=None, dtype=None,
                         previous_chunks=None):
        return normalize_chunks(chunks, shape, limit=limit, dtype=dtype,
                                previous_chunks=previous_chunks)

    def from_array(self, data, chunks, **kwargs) -> jask.DiskArray:
        if isinstance(data, jask.DiskArray):
            return data
        return jask.from_numpy(np.asarray(data))

    def compute(self, *data, **kwargs):
        return tuple(np.asarray(d.to_numpy()) if isinstance(d, jask.DiskArray) else d for d in data)

    def rechunk(self, data, chunks, **kwargs):
        raise NotImplementedError(
            "DiskArrays are tiled by jask's memory budget, not by chunks: drop .chunk(...), "
            "or write a copy with other chunks with jask.save(x, path, chunks=...)")

    @property
    def array_api(self):
        """The namespace ``xr.full_like`` (``zeros_like``, ``ones_like``) builds
        DiskArrays with: :mod:`jask.array_api`, its ``full`` taking Dask's ``chunks=``."""
        return _ARRAY_API

    def apply_gufunc(self, func, signature, *args, vectorize=None, output_dtypes=None,
                     **kwargs):
        """``xr.apply_ufunc(f, ..., dask="parallelized")``: an elementwise ``f``
        (signature ``(),()->()``, xarray's when no core dims are given) runs tile
        by tile through :func:`jask.map`: ``f`` receives jax.numpy tiles (a numpy
        ufunc is taken as jax.numpy's function of its name). Core
        dimensions, several outputs and ``vectorize=True`` are refused."""
        if not _ELEMENTWISE_SIGNATURE.fullmatch(signature.replace(" ", "")):
            raise NotImplementedError(
                f"xr.apply_ufunc(..., dask='parallelized') on DiskArrays takes an elementwise "
                f"function with one output (signature (),()->()), not {signature!r}: call "
                "jask's functions on the DataArray's .data for core dimensions")
        if vectorize:
            raise NotImplementedError(
                "xr.apply_ufunc(..., dask='parallelized', vectorize=True) on DiskArrays: jask "
                "runs f on whole tiles of jax.numpy arrays, not one element at a time; drop "
                "vectorize for an f written with jax.numpy's elementwise functions")
        if isinstance(func, np.ufunc) and hasattr(jnp, func.__name__):
            func = getattr(jnp, func.__name__)  # np.sin over a tile is jnp.sin
        out = jask.map(func, *args)
        if output_dtypes and np.dtype(output_dtypes[0]) != out.dtype:
            out = out.astype(output_dtypes[0])
        return out

    def store(self, sources, targets, **kwargs) -> None:
        """Write each DiskArray into its Zarr target one band of rows at a time."""
        regions = kwargs.get("regions") or [None] * len(sources)
        for source, target, region in zip(sources, targets, regions):
            offset = tuple(0 if r is None else (r.start or 0)
                           for r in (region or (None,) * source.ndim))
            for rows in _bands(source):
                where = (slice(rows.start + offset[0], rows.stop + offset[0]),) + tuple(
                    slice(o, o + n) for o, n in zip(offset[1:], source.shape[1:]))
                target[where] = np.asarray(source[rows].to_numpy())


#: gufunc signatures of elementwise functions: ``()->()``, ``(),()->()``, ...
_ELEMENTWISE_SIGNATURE = re.compile(r"\(\)(,\(\))*->\(\)")


class _ChunkedArrayAPI:
    """:mod:`jask.array_api` as xarray's chunk managers offer it: ``full``
    takes (and ignores) Dask's ``chunks=``, since jask tiles by its memory budget."""

    def __getattr__(self, name: str):
        return getattr(xp, name)

    @staticmethod
    def full(shape, fill_value, *, dtype=None, chunks=None, **kwargs):
        return xp.full(shape, fill_value, dtype=dtype, **kwargs)


_ARRAY_API = _ChunkedArrayAPI()


def _bands(x: jask.DiskArray):
    """Row ranges of ``x`` of at most a quarter of the memory budget each."""
    if x.ndim == 0 or x.size == 0:
        yield slice(0, x.shape[0] if x.ndim else 0)
        return
    row_bytes = max(1, math.prod(x.shape[1:]) * np.dtype(x.dtype).itemsize)
    rows = max(1, jask.get_config().max_memory // 4 // row_bytes)
    for start in range(0, x.shape[0], rows):
        yield slice(start, min(start + rows, x.shape[0]))
