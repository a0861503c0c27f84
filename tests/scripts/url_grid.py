"""The chunking grid of ``bounded_memory.py`` with inputs at URLs (object storage).

``python url_grid.py DATA_DIR BUDGET SIDE [CELL ...]`` starts a moto S3 server
(tests/s3server.py, a real server process on 127.0.0.1), writes each cell of
``chunk_grid.py`` locally (as another tool would), uploads its files as they
are (keys = paths under the cell's folder), and runs ``bounded_memory.py``
with ``JASK_GRID_URL`` set: the child opens ``a``, ``b``, ``X``, ``y`` from
``s3://BUCKET/<cell>/<name>.zarr`` (read through jask.store.kinds.objects.remote) instead
of the local folders. Prints the report as JSON (``--table``: also a table on
stderr). ``JASK_GRID_OPS`` and ``JASK_GRID_PHASE`` pass through to the child.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)


def cell_key(folder: str) -> str:
    """The key prefix of a cell's folder in the bucket (no spaces or slashes).

    Example:
      >>> cell_key("/tmp/x/zstd B_8/")
      'zstd-B_8'
    """
    return os.path.basename(os.path.normpath(folder)).replace(" ", "-").replace("/", "_")


def source(folder: str, name: str) -> str:
    """Where the cell in ``folder`` keeps array ``name``: its local folder, or
    under ``JASK_GRID_URL`` when that is set."""
    base = os.environ.get("JASK_GRID_URL", "")
    if not base:
        return os.path.join(folder, f"{name}.zarr")
    return f"{base.rstrip('/')}/{cell_key(folder)}/{name}.zarr"


def upload(folder: str, url: str, names=None, workers: int = 8) -> int:
    """Put every file under ``folder`` (or only its ``names``) as an object
    under ``url``, keyed by its relative path; returns the bytes uploaded."""
    from jask.store.kinds.objects import remote

    files = []
    for root, _, found in os.walk(folder):
        for f in found:
            rel = os.path.relpath(os.path.join(root, f), folder)
            if names is None or rel.split(os.sep, 1)[0] in names:
                files.append(rel)

    def put(rel):
        with open(os.path.join(folder, rel), "rb") as fh:
            data = fh.read()
        remote.put(url, rel.replace(os.sep, "/"), data)
        return len(data)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(put, files))


def upload_cell(folder: str, bucket_url: str, names=("a.zarr", "b.zarr", "X.zarr",
                                                      "y.zarr")) -> int:
    """Upload a cell written by ``chunk_grid.write_cell`` to ``bucket_url``."""
    return upload(folder, f"{bucket_url.rstrip('/')}/{cell_key(folder)}", set(names))


def measure(data: str, budget: int, folder: str, bucket_url: str, env: dict, phase: str = "",
            ops: str | None = None) -> dict:
    """``bounded_memory.py``'s report on the cell in ``folder`` (under ``data``),
    its inputs read from ``bucket_url`` (or the folder itself when that is
    ""), in a fresh process: ``phase`` and ``ops`` as ``JASK_GRID_PHASE`` and
    ``JASK_GRID_OPS``."""
    extra = {**env, "JASK_GRID_URL": bucket_url, "JASK_GRID_PHASE": phase}
    if ops:
        extra["JASK_GRID_OPS"] = ops
    out = subprocess.run([sys.executable, os.path.join(HERE, "bounded_memory.py"), data,
                          str(budget), os.path.basename(folder)], capture_output=True, text=True,
                         timeout=900, env={**os.environ, **extra})
    if out.returncode != 0:
        raise RuntimeError(f"{folder} {phase}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cells(data: str, budget: int, side: int, bucket_url: str, env: dict, names,
              phases=("", "lazy", "views", "step"), ops: str | None = None) -> dict:
    """Every cell in ``names`` written, uploaded and measured from its URLs,
    each phase in a fresh process (as tests/test_memory_bound.run_grid);
    ``bucket_url=""``: from the local folders, for comparison."""
    sys.path.insert(0, HERE)
    import chunk_grid

    grid = chunk_grid.cells(budget, side)
    report: dict = {"cells": {}}
    for name in names:
        folder = os.path.join(data, name.replace("/", "_"))
        chunk_grid.write_cell(folder, grid[name], side)
        if bucket_url:
            upload_cell(folder, bucket_url)
            shutil.rmtree(folder)  # the child must read the URLs, not the files
            os.makedirs(folder)
        cell = report["cells"].setdefault(name, {})
        for phase in phases:
            result = measure(data, budget, folder, bucket_url, env, phase, ops)
            report["budget"], report["baseline"] = result["budget"], result["baseline"]
            cell.update(result["cells"][os.path.basename(folder)])
    return report


def main(argv) -> None:
    sys.path.insert(0, TESTS)
    import tempfile

    from s3server import S3Server

    args = [a for a in argv if a not in ("--table", "--local")]
    data, budget, side, names = args[0], int(float(args[1])), int(args[2]), args[3:]
    os.makedirs(data, exist_ok=True)
    server = S3Server().start()
    try:
        os.environ.update(server.env)
        bucket = "" if "--local" in argv else server.make_bucket()
        sys.path.insert(0, HERE)
        import chunk_grid
        names = names or list(chunk_grid.cells(budget, side))
        with tempfile.TemporaryDirectory(dir=data) as work:
            report = run_cells(work, budget, side, bucket, server.env, names,
                               ops=os.environ.get("JASK_GRID_OPS"))
    finally:
        server.stop()
    if "--table" in argv:
        sys.path.insert(0, TESTS)
        from test_memory_bound import table
        print(table(report), file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
