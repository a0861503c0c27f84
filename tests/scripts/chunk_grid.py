"""The grid of input chunkings the memory-bound test and the benchmark run.

Each cell writes the inputs of ``bounded_memory.py`` (``a``, ``b``: side x
side; ``X``: rows x 128, ``y``: rows x 1, as many bytes) the way another
tool might have: chunk sizes from budget/64 to budget/2, compressed,
sharded, Zarr v2 in F order, and two operands on different grids.
"""
import os

import numpy as np
import zarr


def _chunks(fraction: int, budget: int, side: int) -> tuple:
    """A (rows, cols) float32 chunk of about budget / fraction bytes."""
    elems = budget // fraction // 4
    cols = min(side, 1 << (int(np.sqrt(elems)).bit_length() - 1))
    if elems // cols >= 2 * cols:
        cols *= 2
    return (min(side, elems // cols), cols)


def cells(budget: int, side: int) -> dict:
    """name -> {array name: zarr.create_array keyword arguments}."""
    def plain(chunks, **extra):
        rows = max(1, chunks[0] * chunks[1] // 128)
        return {"a": dict(chunks=chunks, **extra), "b": dict(chunks=chunks, **extra),
                "X": dict(chunks=(rows, 128), **extra), "y": dict(chunks=(rows, 1), **extra)}
    grid = {f"B/{k}": plain(_chunks(k, budget, side), compressors=None)
            for k in (64, 16, 8, 4, 2)}
    grid["zstd B/8"] = plain(_chunks(8, budget, side), compressors=zarr.codecs.ZstdCodec())
    inner = _chunks(64, budget, side)
    grid["sharded"] = plain(inner, shards=_chunks(4, budget, side),
                            compressors=zarr.codecs.ZstdCodec())
    grid["v2 F-order"] = plain(_chunks(16, budget, side), zarr_format=2, order="F")
    mixed = plain((1000, 1000), compressors=None)
    mixed["b"] = dict(chunks=(512, 2048), compressors=None)
    mixed["y"] = dict(chunks=(4096, 1), compressors=None)
    grid["mixed grids"] = mixed
    return grid


def write_cell(folder: str, spec: dict, side: int, seed: int = 0, names=None) -> None:
    """Write a cell's four arrays (or only those in ``names``), a band of chunk
    rows at a time."""
    shapes = {"a": (side, side), "b": (side, side), "X": (side * side // 128, 128),
              "y": (side * side // 128, 1)}
    rng = np.random.default_rng(seed)
    for name, shape in shapes.items():
        path = os.path.join(folder, f"{name}.zarr")
        if os.path.exists(path) or names is not None and name not in names:
            continue
        z = zarr.create_array(store=path, shape=shape, dtype="float32", **spec[name])
        band = (z.shards or z.chunks)[0]
        band = max(band, band * max(1, 2**22 // (band * shape[1])))
        for start in range(0, shape[0], band):
            stop = min(start + band, shape[0])
            z[start:stop] = rng.standard_normal((stop - start, shape[1]), dtype=np.float32)
