"""Saving a result as a Zarr array of the user's own, at a path they choose.

Unlike the stores jask makes for op results (deleted once unreachable), a
saved array belongs to the user: jask never deletes it, and ``jask.open``
reads it back in any later session. The copy is a Dask graph of block
tasks, one whole output chunk per task (concurrent tasks never share a
chunk file, so compressed chunks are never lost), checked against the
memory budget before anything is written. It goes to a hidden folder beside
the target and is put in place only once complete, over an existing array by
one atomic exchange (:mod:`jask.store.kinds.local.saves`): a failure or a kill never
leaves a half-written array, nor no array, at ``path``.
"""
from __future__ import annotations

import os

import numcodecs
import numpy as np
import zarr
from zarr.abc.codec import BytesBytesCodec

from jask.api import creation
from jask.base import counters, memory
from jask.base.config import Config, get_config
from jask.core._jax_internals import is_eager, is_tracer
from jask.core.array import DiskArray
from jask.core.lifetime import collect_if_idle
from jask.engine import builders, execute
from jask.engine.plan import ops as planner
from jask.store import journal_dir, locate, put_saved, registry
from jask.store.space import check_space, snapshot, space_errors
from jask.store.spec import StoreSpec, stored_nbytes
from jask.store.tiles import forget as forget_cached
from jask.store.tiles import read, write
from jask.store.versions import replaced, resolved, write_token

__all__ = ["save", "COMPRESSORS"]

#: Compressors by name (Zarr v3 codecs with their default settings).
COMPRESSORS = {
    "zstd": zarr.codecs.ZstdCodec,
    "blosc": zarr.codecs.BloscCodec,
    "gzip": zarr.codecs.GzipCodec,
}

def save(x: DiskArray, path: str | os.PathLike, *, chunks=None, compressor=None,
         overwrite: bool = False, config: Config | None = None,
         storage_options: dict | None = None) -> DiskArray:
    """Write ``x`` to a new Zarr v3 array at ``path`` that outlives the session.

    The array is streamed tile by tile within the memory budget (one whole
    output chunk per task, with a progress bar when
    :func:`jask.show_progress` is on) into a hidden folder beside ``path``,
    which is put at ``path`` once every chunk is written (over an existing
    array by one atomic exchange: at every instant ``path`` holds the old
    array or the new one, whatever kills the process). jask never
    deletes a saved array. Saving writes to a path, a side effect, so it is
    refused inside ``jax.jit`` (and other transformations): save the value
    the compiled function returns.

    ``path`` may be the URL of object storage (``s3://``, ``gs://``,
    ``az://``; options as for :func:`jask.open`): the chunks are put first
    and the metadata object (``zarr.json``) last, so the URL holds the
    complete array or none (a failed save removes what it put).

    Args:
      x: the DiskArray to save.
      path: folder of the new Zarr array.
      chunks: chunk shape of the new array (an int for every axis, or one
        int per axis); by default ``x``'s own chunks when a task over them
        fits the budget, else chunks sized from the budget.
      compressor: ``None`` (uncompressed: the fastest for jask to read back),
        a name (``"zstd"``, ``"blosc"``, ``"gzip"``) or a Zarr v3
        bytes-to-bytes codec such as ``zarr.codecs.ZstdCodec(level=5)``.
      overwrite: replace an existing folder at ``path`` (only once the new
        array is complete); by default an existing path is refused. A
        DiskArray already opened on ``path`` keeps the shape and chunks it
        was opened with: open the path again. At a URL (object storage,
        which cannot rename), an existing array is never replaced, even
        with ``overwrite=True`` (save to a new URL instead); ``overwrite``
        there only clears the objects of a save that failed midway (chunk
        objects; any other object there is refused, never deleted). Two
        saves to one URL at once: the second is refused (the first claims
        the URL by a conditional put before writing a chunk).
      config: a :class:`~jask.Config` to use instead of the active one.
      storage_options: for a URL, as for :func:`jask.open` (by default the
        environment variables, or the options given for its bucket before).

    Returns:
      The saved array, opened as by :func:`jask.open`.

    Raises:
      FileExistsError: ``path`` exists and ``overwrite`` is False (at a URL:
        an array is there, whatever ``overwrite``).
      jask.RemoteStoreError: object storage failed (after retries); no array
        was made at the URL.
      ValueError: bad ``chunks``, or ``path`` is ``x``'s own store or inside
        jask's scratch directory (deleted when the session ends).
      TypeError: ``x`` is not a concrete DiskArray, or a bad ``compressor``.
      jask.BudgetError: one chunk's task does not fit in the budget.
      jask.StoreChangedError: another process replaced ``x``'s store (its
        ``update_``) while it was copied; nothing was saved: run it again.
      jask.DiskFullError: the array does not fit beside ``path`` (the message
        names the folder, the bytes needed and the bytes free).

    Example:
      >>> import numpy as np, jask, zarr
      >>> x = jask.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
      >>> saved = jask.save(2 * x, "/tmp/jask-save-example.zarr", chunks=(2, 2),
      ...                   compressor="zstd", overwrite=True)
      >>> saved.chunks, zarr.open_array("/tmp/jask-save-example.zarr")[2, 3]
      ((2, 2), array(22., dtype=float32))
      >>> jask.open("/tmp/jask-save-example.zarr").to_numpy()[0]
      array([0., 2., 4., 6.], dtype=float32)
    """
    config = config or get_config()
    where = locate(path, storage_options)
    if where.saves_in_place:  # no rename: chunks first, the metadata last
        return _save_url(x, where, chunks, compressor, overwrite, config)
    source = _source(x)
    path = _target(where.path, source, overwrite, config)
    codecs = _compressors(compressor)
    asked = _chunks(chunks, source)
    try:
        planned = planner.save(source, asked, bool(codecs), config)
    except memory.BudgetError as err:
        if asked is None:
            raise
        raise memory.BudgetError(f"{err}. {_chunks_that_fit(source, asked, bool(codecs), config)}"
                                 ) from None
    out_chunks, cost = planned.tile, planned.cost  # one whole chunk per task
    _check_layout(source, out_chunks, codecs)
    collect_if_idle()
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    needed = stored_nbytes(StoreSpec(path, source.shape, source.dtype, out_chunks))
    if not codecs:  # a compressed array's size is known only once written
        check_space(folder, needed, "save")
    journal = journal_dir(config.scratch_dir)

    def write_copy(staging):  # one version of x's store, checked before the copy is put in place
        with snapshot([source], "jask.save"):
            _write(source, staging, out_chunks, codecs, cost, config)
            write_token(staging)  # readers of an overwritten path see a new version

    registry.before_mutation(path)  # pending results reading what path holds: computed first
    with space_errors(folder, needed, "save"):
        put_saved(path, write_copy, overwrite=overwrite, journal=journal)
    replaced(path)  # this process's version (jask.store.versions.written_here)
    forget_cached(path)
    return creation.open(path)


def _save_url(x, where, chunks, compressor, overwrite: bool, config: Config) -> DiskArray:
    """``save`` to object storage (``where``, a :class:`jask.store.Location`):
    whole chunks put by the tasks, the metadata object last; on failure what
    was put is deleted."""
    source = _source(x)
    where.check_save_target(source.path, config.scratch_dir)
    codecs = _compressors(compressor)
    planned = planner.save(source, _chunks(chunks, source), bool(codecs), config)
    out_chunks, cost = planned.tile, planned.cost  # one whole chunk per task
    _check_layout(source, out_chunks, codecs)
    where.clear_for_save(overwrite, before_delete=collect_if_idle)
    text = _metadata_v3(source, out_chunks, codecs)
    url = where.path
    out = StoreSpec(url, source.shape, source.dtype, out_chunks, managed=False)
    name = builders.key_name("save", url, source.path)
    graph = {(name, i): (_copy_chunk_to_url, where, out, text, region, source)
             for i, region in enumerate(builders.regions(out.shape, out.chunks))}

    def write_chunks() -> None:
        with snapshot([source], "jask.save"):
            execute.run(graph, list(graph), config.workers, cost)

    where.put_array(text, write_chunks)
    return creation.open(url)


def _copy_chunk_to_url(where, out: StoreSpec, text: str, region: tuple,
                       source: StoreSpec) -> None:
    """Task of a save to a URL: ``region`` of ``source`` as whole chunks of
    ``out``, whose metadata ``text`` is not in place yet (a worker process
    learns the layout from it)."""
    where.remember_layout(text)  # (cached per process after the first)
    write(out, region, read(source, region))


def _metadata_v3(source: StoreSpec, chunks: tuple, codecs: tuple) -> str:
    """The ``zarr.json`` zarr-python writes for the saved array."""
    from zarr.core.buffer import default_buffer_prototype

    arr = zarr.create_array(store=zarr.storage.MemoryStore(), shape=source.shape, chunks=chunks,
                            dtype=source.dtype, compressors=codecs, fill_value=0,
                            zarr_format=3, chunk_key_encoding={"name": "default",
                                                               "separator": "/"})
    return arr.metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes().decode()


def _source(x) -> StoreSpec:
    """``x``'s store; a traced value (or a trace in progress) is refused."""
    if not isinstance(x, DiskArray) and not is_tracer(x):
        raise TypeError(f"jask.save: expected a DiskArray, got {type(x).__name__}")
    if is_tracer(x) or x._owner is None or not is_eager():
        raise TypeError(
            "jask.save: saving writes to a path, a side effect that a traced function "
            "cannot repeat safely; return the array from the jitted function and save "
            "the result outside it")
    return x._store()


def _target(path, source: StoreSpec, overwrite: bool, config: Config) -> str:
    # symlinks followed: a save over a link writes the store it points to, as a
    # file written through a link is, and the array's own store is found by any path
    path = resolved(os.fspath(path))  # (never abspath first: link/.. is not '.')
    if path == source.path:
        raise ValueError(f"jask.save: {path!r} is the array's own store; save it elsewhere")
    scratch = os.path.join(config.scratch_dir, "")
    if path.startswith(scratch):
        raise ValueError(f"jask.save: {path!r} is inside jask's scratch directory "
                         f"{config.scratch_dir!r}, which is removed when the session ends")
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"jask.save: {path!r} already exists; pass overwrite=True "
                              "to replace it")
    return path


def _chunks(chunks, source: StoreSpec) -> tuple | None:
    """The asked chunk shape, checked: one positive int per axis (or None)."""
    ndim = len(source.shape)
    if chunks is None:
        return None
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        chunks = (int(chunks),) * ndim
    if not isinstance(chunks, (tuple, list)) or len(chunks) != ndim or not all(
            isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c > 0
            for c in chunks):
        raise ValueError(f"jask.save: chunks must be a positive int or one positive int per "
                         f"axis of shape {source.shape}, got {chunks!r}")
    # A chunk longer than its axis only pads the edge chunk: clip it.
    return tuple(min(int(c), max(s, 1)) for c, s in zip(chunks, source.shape))


def _chunks_that_fit(source: StoreSpec, asked: tuple, compressed: bool, config: Config) -> str:
    """What to ask instead of chunks over the budget: the asked shape with its
    leading axes shortened (trailing axes stay whole, so each chunk stays one
    contiguous run of rows) as little as needed for one task to fit."""
    def fits(chunks) -> bool:
        try:
            planner.save(source, tuple(chunks), compressed, config)
        except memory.BudgetError:
            return False
        return True

    # Halve from the asked length down (far smaller chunks are refused too, as
    # too many tasks), then the longest that fits between the last two tried.
    chunks = list(asked)
    for axis in range(len(chunks)):
        high = chunks[axis]
        while chunks[axis] > 1:
            chunks[axis] = (chunks[axis] + 1) // 2
            if fits(chunks):
                low = chunks[axis]  # low fits, high does not
                while high - low > 1:
                    chunks[axis] = (low + high) // 2
                    low, high = (chunks[axis], high) if fits(chunks) else (low, chunks[axis])
                chunks[axis] = low
                shape = tuple(chunks)
                return (f"Chunks of shape {shape} fit the budget: pass chunks={shape} (or no "
                        "chunks, for jask's own), or raise the budget")
            high = chunks[axis]
    return "No chunk shape of this array fits the budget: raise it"


def _compressors(compressor) -> tuple:
    """Zarr's ``compressors`` for a name, a codec or None."""
    if compressor is None:
        return ()
    if isinstance(compressor, str):
        try:
            return (COMPRESSORS[compressor.lower()](),)
        except KeyError:
            raise ValueError(f"jask.save: unknown compressor {compressor!r}; use one of "
                             f"{sorted(COMPRESSORS)} or a Zarr v3 codec") from None
    if isinstance(compressor, BytesBytesCodec):
        return (compressor,)
    raise TypeError(f"jask.save: compressor must be None, a name ({sorted(COMPRESSORS)}) or "
                    f"a zarr.abc.codec.BytesBytesCodec such as zarr.codecs.ZstdCodec(), "
                    f"got {compressor!r}")


def _check_layout(source: StoreSpec, chunks: tuple, codecs: tuple) -> None:
    """Let Zarr validate the array's metadata in memory, before any disk write."""
    try:
        zarr.create_array(store=zarr.storage.MemoryStore(), shape=source.shape,
                          chunks=chunks, dtype=source.dtype, compressors=codecs,
                          fill_value=0, zarr_format=3)
    except Exception as err:  # zarr raises several kinds for a bad layout
        raise ValueError(f"jask.save: Zarr refuses chunks {chunks} with compressor "
                         f"{codecs}: {err}") from None


def _write(source: StoreSpec, staging: str, chunks: tuple, codecs: tuple,
           cost: memory.TileCost, config: Config) -> None:
    """Copy ``source`` into a new array at ``staging``; remove it on failure."""
    arr = zarr.create_array(store=staging, shape=source.shape, chunks=chunks,
                            dtype=source.dtype, compressors=codecs, fill_value=0,
                            zarr_format=3, chunk_key_encoding={"name": "default",
                                                               "separator": "/"})
    out = StoreSpec(staging, source.shape, source.dtype, chunks, managed=False)
    encoder = _encoder(arr.compressors)
    try:
        if encoder is None:  # uncompressed (jask's raw chunk files) or an unusual codec
            dsk, keys = builders.copy_graph(out, source, op="save")
        else:
            dsk, keys = _encode_graph(out, source, encoder)
        execute.run(dsk, keys, config.workers, cost)
    finally:
        forget_cached(staging)


# --- compressed chunks, encoded in the task's own thread ------------------------
#
# Written through zarr-python, a compressed chunk is encoded on one of Zarr's
# own pool threads, whose malloc arenas then keep their high-water mark: a
# zstd save of arrays 8x a 32 MB budget peaked at 36 MB above baseline. The
# three compressors jask names are encoded here instead, with the numcodecs
# codec Zarr itself wraps, and the chunk is written as the file Zarr reads.

_NUMCODECS = {"zstd": lambda c: numcodecs.Zstd(level=c["level"], checksum=c["checksum"]),
              "gzip": lambda c: numcodecs.GZip(level=c["level"]),
              "blosc": lambda c: numcodecs.Blosc(
                  cname=c["cname"], clevel=c["clevel"], blocksize=c["blocksize"],
                  shuffle={"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[c["shuffle"]])}


def _encoder(compressors) -> dict | None:
    """The config of the one compressor we encode ourselves, or None."""
    if len(compressors) != 1 or not np.little_endian:
        return None
    spec = compressors[0].to_dict()
    return spec if spec["name"] in _NUMCODECS else None


def _encode_graph(out: StoreSpec, source: StoreSpec, encoder: dict):
    name = builders.key_name("save", out.path, source.path, str(encoder))
    graph = {(name, i): (_encode_block, out, region, source, encoder)
             for i, region in enumerate(builders.regions(out.shape, out.chunks))}
    return graph, list(graph)


def _encode_block(out: StoreSpec, region: tuple, source: StoreSpec,
                  encoder: dict) -> None:
    """Write the chunk of ``out`` at ``region`` (one whole chunk), compressed."""
    block = read(source, region)
    chunk = block  # a whole chunk as read: encoded as it is (no fresh pages to fault in)
    if block.shape != tuple(out.chunks) or block.dtype != out.dtype.newbyteorder("<") or \
            not block.flags.c_contiguous:
        chunk = np.zeros(out.chunks, dtype=out.dtype.newbyteorder("<"))  # edges: fill value 0
        chunk[tuple(slice(0, r.stop - r.start) for r in region)] = block
    coords = [r.start // c for r, c in zip(region, out.chunks)]
    path = os.path.join(out.path, "c", *map(str, coords))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    codec = _NUMCODECS[encoder["name"]](encoder["configuration"])
    data = codec.encode(chunk)
    counters.wrote(out, region, stored=len(data))
    with open(path, "wb") as f:
        f.write(data)
