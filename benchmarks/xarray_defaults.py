"""xarray's defaults over jask against xarray with Dask (issue 30).

``python -m benchmarks.xarray_defaults [--quick] [--days N] [--points K] [--budget B] [--only ...]``

One Zarr dataset written by xarray: ``t2m`` of (time, point) float32, a
daily ``time`` coordinate, chunks of whole days (a sixteenth of the budget).
Each case runs with xarray's default options (NaN-skipping reductions,
no ``flox``) in a fresh process (``benchmarks.measure.run_case``), the page
cache dropped before the timed call, once over ``jask.xarray.open_dataset``
(DiskArrays) and once over ``xarray.open_zarr`` (Dask, its default chunks:
the store's):

* ``mean``, ``std``: ``t2m.mean("time")``, ``t2m.std("time")``;
* ``groupby mean``: ``t2m.groupby("time.month").mean()`` (the climatology);
* ``resample mean``: ``t2m.resample(time="MS").mean()`` (monthly means);
* ``anomaly``: ``t2m.groupby("time.month") - clim`` with ``clim`` the
  climatology, reduced to its sum of squares so that it is observed.

Columns: seconds (the call and bringing its result into memory), passes
over ``t2m`` (bytes read of its chunks over its size: jask's counters; for
Dask a counting Zarr store under xarray), bytes written (jask's), and
``check`` (the results agree to 1e-3).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from dask.utils import format_bytes, parse_bytes

from benchmarks.measure import run_case
from benchmarks.passes import drop_page_cache
from benchmarks.report import REL_TOL, fmt_seconds, text_table

CASES = ("mean", "std", "groupby mean", "resample mean", "anomaly")


def _run(case: str, da):
    """The case on a DataArray; an in-memory numpy result."""
    if case == "mean":
        out = da.mean("time")
    elif case == "std":
        out = da.std("time")
    elif case == "groupby mean":
        out = da.groupby("time.month").mean()
    elif case == "resample mean":
        out = da.resample(time="MS").mean()
    else:
        clim = da.groupby("time.month").mean()
        out = ((da.groupby("time.month") - clim) ** 2).sum()
    return np.asarray(out.values)


def write_dataset(path: str, days: int, points: int, chunk_days: int) -> str:
    import pandas as pd
    import xarray as xr

    if os.path.exists(os.path.join(path, "zarr.json")):
        return path
    rng = np.random.default_rng(0)
    data = (10 + rng.standard_normal((days, points))).astype(np.float32)
    ds = xr.Dataset({"t2m": (("time", "point"), data)},
                    coords={"time": pd.date_range("2000-01-01", periods=days, freq="D")})
    ds.to_zarr(path, mode="w", encoding={"t2m": {"chunks": (chunk_days, points),
                                                   "compressors": None}},
               consolidated=False)
    return path


def _sample(value) -> float:
    return float(np.nansum(np.asarray(value, np.float64)))


def jask_case(params: dict):
    import jask
    import jask.xarray

    jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
    ds = jask.xarray.open_dataset(params["path"])
    da = ds.t2m
    X = da.data
    how = drop_page_cache([params["path"]])
    track = jask.track()

    def op():
        with track:
            return _run(params["case"], da)

    def counted() -> dict:
        return {"passes": track.passes(X), "written": track.bytes_written, "cache": how}
    return op, _sample, counted


def dask_case(params: dict):
    import xarray as xr
    import zarr

    class Counting(zarr.storage.LocalStore):
        """A local store counting the bytes of ``t2m``'s chunks it hands out."""
        read = 0

        async def get(self, key, prototype, byte_range=None):
            out = await super().get(key, prototype, byte_range)
            if out is not None and key.startswith("t2m/c"):
                Counting.read += len(out)
            return out

    store = Counting(params["path"], read_only=True)
    da = xr.open_zarr(store, consolidated=False).t2m
    nbytes = da.size * da.dtype.itemsize
    how = drop_page_cache([params["path"]])

    def op():
        return _run(params["case"], da)

    def counted() -> dict:
        return {"passes": Counting.read / nbytes, "written": 0, "cache": how}
    return op, _sample, counted


def _row(case: str, impl: str, r: dict, reference: dict) -> list:
    if "error" in r:
        return [case, impl, r["error"][:70], "", "", ""]
    check = "-"
    if impl == "xarray+jask" and "sample" in reference:
        ok = abs(r["sample"] - reference["sample"]) <= REL_TOL * max(abs(reference["sample"]),
                                                                    1e-12)
        check = "ok" if ok else "DIFF"
    return [case, impl, fmt_seconds(r["wall_s"]), f"{r['passes']:.2f}",
            format_bytes(r["written"]), check]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.xarray_defaults",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 years of 2,048 points (29 MiB) under an 8MB budget")
    parser.add_argument("--days", type=int, default=3652)
    parser.add_argument("--points", type=int, default=None, help="default 32768 (457 MiB)")
    parser.add_argument("--budget", default=None, help="default 64MB (8MB with --quick)")
    parser.add_argument("--only", default=None, help="cases, '|'-separated")
    parser.add_argument("--data-dir", default=os.path.join(os.getcwd(), ".bench_data", "xarray"))
    args = parser.parse_args(argv)
    points = args.points or (2048 if args.quick else 32768)
    budget = parse_bytes(args.budget or ("8MB" if args.quick else "64MB"))
    chunk_days = max(1, budget // 16 // (points * 4))
    folder = os.path.join(args.data_dir, f"{args.days}x{points}-{chunk_days}")
    os.makedirs(folder, exist_ok=True)
    path = write_dataset(os.path.join(folder, "ds.zarr"), args.days, points, chunk_days)
    size = args.days * points * 4
    print(f"t2m: {args.days} days x {points} points float32 = {format_bytes(size)} "
          f"({size / budget:.1f}x the {format_bytes(budget)} budget), chunks of {chunk_days} "
          "days; xarray's default options, one call per fresh process")
    cases = CASES if args.only is None else [c.strip() for c in args.only.split("|")]
    table, cache = [], set()
    for case in cases:
        if case not in CASES:
            parser.error(f"unknown case {case!r}; choose from {' | '.join(CASES)}")
        common = dict(path=path, case=case, budget=budget,
                      scratch=os.path.join(folder, "scratch"))
        d = run_case("benchmarks.xarray_defaults", "dask_case", common, timeout=3600)
        j = run_case("benchmarks.xarray_defaults", "jask_case", common, timeout=3600)
        cache |= {r["cache"] for r in (j, d) if "cache" in r}
        table.append(_row(case, "xarray+jask", j, d))
        table.append(_row(case, "xarray+dask", d, {}))
    print(f"before each timed call: {', '.join(sorted(cache)) or 'n/a'}\n")
    print(text_table(["case", "impl", "seconds", "passes", "written", "check"], table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
