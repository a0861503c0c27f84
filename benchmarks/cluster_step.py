"""A jitted training step in-process against the same step on a 2-worker LocalCluster (issue 30).

``python -m benchmarks.cluster_step [--quick] [--rows N] [--features K] [--chunk-rows R]
[--budget B] [--steps N] [--only lsq|logistic]``

On one uncompressed Zarr store X (rows x features float32, a few times the
budget; ``benchmarks.workloads.write_data``) and its labels y, each step is
``jax.jit(jax.value_and_grad(loss))`` with the parameters in memory (least
squares; logistic regression through ``jask.logaddexp``), compiled untimed,
then run ``--steps`` times interleaved: in this process (Dask's threaded
scheduler, ``dask.config.set(scheduler="threads")``) and on a
``distributed.LocalCluster`` of 2 worker processes of 1 thread each (the
client's default scheduler; workers set up by ``use_private_scratch``). The
store is read from the workers' shared local disk; nothing but the band
partials crosses between processes.

Columns: seconds per step (median) and cluster/in-process; passes over X,
graphs and tasks per step (``jask.track``); then, for the cluster, where the
step's time goes, measured: ``compute/2`` (the task stream's compute time,
summed over the step's tasks, over the 2 workers: the wall time the tasks'
own work needs), ``transfer/2`` (the task stream's transfer time of partials
between workers, over 2, and the bytes the workers' incoming-transfer logs
record), ``overhead`` (the step's wall time less those two: submission,
scheduling, comms, gather, the counters' collection, dispatch). Beside it,
two measures of that overhead taken alone: ``empty graph`` (a graph of the
step's keys and dependencies, bands and fan-in tree, whose tasks do nothing,
submitted and gathered: the per-graph and per-task cost of the cluster for
this graph's shape) and ``collect`` (the one ``client.run`` per graph that
frees the workers' tile buffers and brings back their counters). The bound
the issue sets: cluster <= 1.3 x in-process + transfer.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
from dask.utils import format_bytes, parse_bytes

from benchmarks.report import text_table
from benchmarks.workloads import write_data


def _losses(rows: int):
    import jask

    def lsq(params, X, y):
        w, b = params
        r = X @ w + b - y
        return jask.sum(r * r) * (1 / rows)

    def logistic(params, X, y):
        w, b = params
        z = X @ w + b
        return (jask.logaddexp(0.0, z) - y * z).mean()

    return {"lsq": lsq, "logistic": logistic}


def _noop(*_):
    return 0


def _shaped_like(graph: dict) -> dict:
    """A graph of the same keys and dependencies whose tasks do nothing."""
    from dask.core import get_dependencies

    return {key: (_noop, *sorted(get_dependencies(graph, key), key=str)) for key in graph}


def _transfers(dask_worker):
    log = list(dask_worker.transfer_incoming_log)
    dask_worker.transfer_incoming_log.clear()
    return sum(entry.get("total", 0) for entry in log), len(log)


def _step_once(step, params, X, y):
    import jax

    import jask

    with jask.track() as t:
        start = time.perf_counter()
        jax.block_until_ready(step(params, X, y))
        took = time.perf_counter() - start
    return took, t


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1 << 20)  # 256 MiB of X
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--chunk-rows", type=int, default=16_384)  # 4 MiB chunks
    parser.add_argument("--budget", default="64MB")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", default="lsq,logistic")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--quick", action="store_true", help="64 MiB of X under 16MB, 3 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.budget, args.steps, args.chunk_rows = 1 << 18, "16MB", 3, 4096
    run(args)


def run(args) -> None:
    import jask

    root = args.data_dir or os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), ".bench_data")
    folder = os.path.join(root, f"cluster-{args.rows}x{args.features}-{args.chunk_rows}")
    os.makedirs(folder, exist_ok=True)
    paths = write_data(folder, args.rows, args.features, args.chunk_rows)
    budget = parse_bytes(args.budget)
    x_bytes = args.rows * args.features * 4
    scratch = tempfile.mkdtemp(prefix="jask-cluster-step-", dir=root)
    jask.set_memory_budget(budget, scratch_dir=scratch)
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    print(f"X: {args.rows} x {args.features} float32 = {format_bytes(x_bytes)} "
          f"({x_bytes / budget:.1f}x the budget of {args.budget}) in chunks of "
          f"{args.chunk_rows} rows; y: {format_bytes(args.rows * 4)}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)

    try:
        _compare(args, X, y, x_bytes, budget)
    finally:
        del X, y
        jask.collect()
        shutil.rmtree(scratch, ignore_errors=True)


def _compare(args, X, y, x_bytes: int, budget: int) -> None:
    import dask
    import jax
    import jax.numpy as jnp
    from distributed import Client, LocalCluster, get_task_stream

    from jask.engine import execute
    from jask.engine.cluster import after_graph, use_private_scratch

    graphs: list = []
    run_graph = execute.run

    def keeping(graph, keys, *a, **k):  # the step's graph, for its no-op twin
        graphs.append((graph, keys))
        return run_graph(graph, keys, *a, **k)

    params = (jnp.full((args.features,), 0.01, jnp.float32), jnp.float32(0.0))
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="4GB") as cluster, \
            Client(cluster) as client:
        use_private_scratch(client, budget)
        for name, loss in _losses(args.rows).items():
            if name not in args.only.split(","):
                continue
            step = jax.jit(jax.value_and_grad(loss))
            with dask.config.set(scheduler="threads"):
                want = step(params, X, y)  # compiles
            got = step(params, X, y)  # the workers' first run: imports, untimed
            close = np.allclose(np.asarray(got[1][0]), np.asarray(want[1][0]), rtol=1e-4,
                                atol=1e-6)
            local_s, cluster_s, parts = [], [], []
            for _ in range(args.steps):
                with dask.config.set(scheduler="threads"):
                    took, t_local = _step_once(step, params, X, y)
                local_s.append(took)
                client.run(_transfers)  # (clears the workers' logs)
                execute.run = keeping
                try:
                    with get_task_stream(client) as stream:
                        took, t_cluster = _step_once(step, params, X, y)
                finally:
                    execute.run = run_graph
                cluster_s.append(took)
                compute = sum(s["stop"] - s["start"] for task in stream.data
                              for s in task["startstops"] if s["action"] == "compute")
                transfer = sum(s["stop"] - s["start"] for task in stream.data
                               for s in task["startstops"] if s["action"] == "transfer")
                moved = sum(b for b, _ in client.run(_transfers).values())
                graph, keys = graphs[-1]
                twin = _shaped_like(graph)
                start = time.perf_counter()
                client.get(twin, keys)
                empty = time.perf_counter() - start
                start = time.perf_counter()
                after_graph(client)
                collect = time.perf_counter() - start
                parts.append((compute / 2, transfer / 2, moved, empty, collect))
            med_l, med_c = statistics.median(local_s), statistics.median(cluster_s)
            part = [statistics.median(p[i] for p in parts) for i in range(5)]
            graphs_per_step = sum(c.graphs for c in t_cluster.by_op.values())
            overhead = med_c - part[0] - part[1]
            rows.append([name, f"{med_l:.3f}", f"{med_c:.3f}", f"{med_c / med_l:.2f}",
                         f"{t_local.passes(X):.2f} / {t_cluster.passes(X):.2f}",
                         str(graphs_per_step), str(t_cluster.total.tasks),
                         f"{part[0]:.3f}", f"{part[1]:.3f} ({format_bytes(int(part[2]))})",
                         f"{overhead:.3f}", f"{part[3]:.3f}", f"{part[4]:.3f}",
                         f"{1.3 * med_l + part[1]:.3f}",
                         "ok" if close else "DIFFER"])
            print(f"  {name}: done (in-process {[round(s, 3) for s in local_s]}, "
                  f"cluster {[round(s, 3) for s in cluster_s]})", flush=True)
    print(text_table(["step", "in-process s", "cluster s", "cluster/in", "passes (in / cl)",
                      "graphs", "tasks", "compute/2", "transfer/2 (bytes)", "overhead",
                      "empty graph", "collect", "bound", "check"], rows))
    print("bound: 1.3 x in-process + transfer/2 (issue 30); the machine's load average at the "
          f"end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
