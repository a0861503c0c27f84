"""jask.batches onto a Sharding over four devices; print what was seen as JSON.

Run by tests/test_batches.py with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(JAX's CPU backend split into four devices, fixed at its start: hence a child
process): ``python sharded_batches.py SCRATCH``. For each sharding, shuffled
and in order, through the device feed (windows put row-split on the devices,
batches cut there) and through the host cut (JAX's CPU devices): whether the
batches equal numpy ones in order with exactly the sharding asked for, whether
a loader resumed from a saved state continues them, and the most bytes held on
any one device against ``loader.device_bytes``.
"""
import gc
import json
import sys

import jax
import numpy as np
import zarr
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jask
import jask.api.batches as loaders

ROWS, COLS = 1000, 6


def stores(scratch: str):
    x = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
    X = zarr.create_array(f"{scratch}/X.zarr", shape=x.shape, chunks=(64, COLS), dtype="f4",
                          compressors=None)
    X[:] = x
    Y = zarr.create_array(f"{scratch}/y.zarr", shape=(ROWS,), chunks=(100,), dtype="i8")
    Y[:] = np.arange(ROWS)
    return jask.open(f"{scratch}/X.zarr"), jask.open(f"{scratch}/y.zarr")


def most_per_device(before: set) -> int:
    held: dict = {}
    for a in jax.live_arrays():
        if id(a) not in before:
            for s in a.addressable_shards:
                held[s.device] = held.get(s.device, 0) + s.data.nbytes
    return max(held.values(), default=0)


def run(X, y, sharding, shuffle: bool) -> dict:
    make = lambda **kw: jask.batches(X, y, batch_size=40, shuffle=shuffle, seed=3, buffer=200,
                                     epochs=2, **kw)
    want = [tuple(np.asarray(v) for v in b) for b in make()]
    gc.collect()  # an earlier run's loaders and their arrays gone before counting
    before = {id(a) for a in jax.live_arrays()}
    loader = make(device=sharding)
    got, most, exact, stop = [], 0, True, 17
    for i, batch in enumerate(loader):
        exact &= all(v.sharding == sharding for v in batch)
        got.append(tuple(np.asarray(v) for v in batch))
        if i % 3 == 0:
            most = max(most, most_per_device(before))
        if i + 1 == stop:
            state = json.loads(json.dumps(loader.state))
    same = len(got) == len(want) and all(
        np.array_equal(g, w) for gb, wb in zip(got, want) for g, w in zip(gb, wb))
    loader.close()
    with make(device=sharding, state=state) as again:
        resumed = [tuple(np.asarray(v) for v in b) for b in again]
    resumes = len(resumed) == len(want) - stop and all(
        np.array_equal(g, w) for gb, wb in zip(resumed, want[stop:]) for g, w in zip(gb, wb))
    return {"same": same, "exact_sharding": bool(exact), "resumes": resumes,
            "device_bytes": loader.device_bytes, "most_per_device": most,
            "batches": len(got)}


def main(scratch: str) -> None:
    X, y = stores(scratch)
    devices = np.array(jax.devices())
    shardings = {
        "rows over 4": NamedSharding(Mesh(devices, ("rows",)), P("rows")),
        "rows over 2 of a 2x2 mesh": NamedSharding(Mesh(devices.reshape(2, 2), ("data", "model")),
                                                  P("data")),
        "rows over both axes of a 2x2 mesh": NamedSharding(
            Mesh(devices.reshape(2, 2), ("data", "model")), P(("data", "model"))),
        "replicated": NamedSharding(Mesh(devices, ("rows",)), P()),
    }
    report: dict = {"devices": len(devices)}
    for feed, host_cut in (("device feed", ()), ("host cut", ("cpu",))):
        loaders.HOST_CUT_PLATFORMS = host_cut
        for name, sharding in shardings.items():
            for shuffle in (False, True):
                report[f"{feed}, {name}, {'shuffled' if shuffle else 'in order'}"] = run(
                    X, y, sharding, shuffle)
    rows = shardings["rows over 4"]
    refused = {}
    for name, kwargs in {"a batch the devices do not divide": {"batch_size": 42},
                         "a short last batch they do not divide": {"batch_size": 48,
                                                                   "arrays": (np.ones(1002),)},
                         "a spec naming more axes than y has": {
                             "batch_size": 40, "device": NamedSharding(
                                 Mesh(devices.reshape(2, 2), ("data", "model")),
                                 P("data", "model"))}}.items():
        try:
            arrays = kwargs.pop("arrays", (X, y))
            jask.batches(*arrays, **{"device": rows, **kwargs})
            refused[name] = None
        except ValueError as err:
            refused[name] = str(err)
    report["refused"] = refused
    report["short last batch dropped"] = len(jask.batches(X, y, batch_size=48, drop_last=True,
                                                          device=rows))
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
