"""Benchmark inputs: the same float32 data as a Zarr v3 store and a raw file.

Every array ``NAME`` lives twice under the data directory:

* ``NAME.zarr`` - uncompressed Zarr v3 array (what jask and dask read);
* ``NAME.f32``  - the same bytes as a raw C-order float32 file (what the
  numpy/memmap loop reads).

Arrays are filled chunk by chunk from a seeded RNG (one generator per chunk),
so memory stays at one chunk and the data is reproducible.  A manifest records
the layout; matching inputs are reused by later runs.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import zarr

DTYPE = np.float32
SEED = 20240611


@dataclass(frozen=True)
class ArraySpec:
    """Shape/chunking of one input array and where its two copies live."""

    name: str
    shape: tuple
    chunks: tuple
    root: str

    @property
    def zarr(self) -> str:
        return os.path.join(self.root, self.name + ".zarr")

    @property
    def raw(self) -> str:
        return os.path.join(self.root, self.name + ".f32")

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(DTYPE).itemsize

    def params(self) -> dict:
        """JSON-able description handed to case functions."""
        return {"zarr": self.zarr, "raw": self.raw, "shape": list(self.shape),
                "chunks": list(self.chunks)}


def input_specs(root: str, side: int, chunk: int, dot_side: int, dot_chunk: int) -> dict:
    """All arrays the benchmark needs, keyed by name."""
    specs = [
        ArraySpec("x", (side, side), (chunk, chunk), root),
        ArraySpec("y", (side, side), (chunk, chunk), root),
        ArraySpec("a", (dot_side, dot_side), (dot_chunk, dot_chunk), root),
        ArraySpec("b", (dot_side, dot_side), (dot_chunk, dot_chunk), root),
        ArraySpec("ty", (side, 1), (chunk, 1), root),   # training targets
        ArraySpec("w0", (side, 1), (chunk, 1), root),   # initial weights
    ]
    return {s.name: s for s in specs}


def _chunk_slices(spec: ArraySpec):
    """Yield (index, row slice, column slice) for every chunk."""
    (n0, n1), (c0, c1) = spec.shape, spec.chunks
    for i in range(0, n0, c0):
        for j in range(0, n1, c1):
            yield (i // c0, j // c1), slice(i, min(i + c0, n0)), slice(j, min(j + c1, n1))


def _write_array(spec: ArraySpec, key: int) -> None:
    """Fill ``spec`` (both copies) with uniform [0, 1) float32 values."""
    z = zarr.create_array(store=spec.zarr, shape=spec.shape, chunks=spec.chunks,
                          dtype=DTYPE, compressors=None, overwrite=True)
    with open(spec.raw, "wb") as f:
        f.truncate(spec.nbytes)
    row_bytes = spec.shape[1] * np.dtype(DTYPE).itemsize
    for (ci, cj), rows, cols in _chunk_slices(spec):
        tile = np.random.default_rng([SEED, key, ci, cj]).random(
            (rows.stop - rows.start, cols.stop - cols.start), dtype=DTYPE)
        z[rows, cols] = tile
        window = np.memmap(spec.raw, DTYPE, "r+", offset=rows.start * row_bytes,
                           shape=(tile.shape[0], spec.shape[1]))
        window[:, cols] = tile
        window.flush()
        del window


def evict(path: str) -> None:
    """Flush and drop ``path`` (file or directory tree) from the page cache."""
    paths = [path] if os.path.isfile(path) else [
        os.path.join(d, f) for d, _, files in os.walk(path) for f in files]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def prepare_inputs(specs: dict, log=print) -> None:
    """Create missing/stale inputs (reusing ones matching the manifest)."""
    root = Path(next(iter(specs.values())).root)
    root.mkdir(parents=True, exist_ok=True)
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for key, spec in enumerate(specs.values()):
        wanted = {**asdict(spec), "shape": list(spec.shape), "chunks": list(spec.chunks),
                  "seed": SEED, "key": key}
        if manifest.get(spec.name) == wanted and os.path.exists(spec.raw):
            continue
        log(f"  generating {spec.name} {spec.shape} ({spec.nbytes / 2**20:.0f} MiB x2)")
        manifest.pop(spec.name, None)
        _write_array(spec, key)
        evict(spec.zarr)
        evict(spec.raw)
        manifest[spec.name] = wanted
        manifest_path.write_text(json.dumps(manifest, indent=1))


def copy_input(spec_params: dict, dest_dir: str) -> dict:
    """Copy an input's zarr store and raw file into ``dest_dir`` (for update_ targets)."""
    os.makedirs(dest_dir, exist_ok=True)
    z = os.path.join(dest_dir, "target.zarr")
    raw = os.path.join(dest_dir, "target.f32")
    shutil.copytree(spec_params["zarr"], z, dirs_exist_ok=True)
    shutil.copyfile(spec_params["raw"], raw)
    evict(z)
    evict(raw)
    return {**spec_params, "zarr": z, "raw": raw}
