"""Two checkouts' cluster step side by side, steps interleaved (issue 46).

``python -m benchmarks.cluster_step_versions BEFORE AFTER [--quick] [--steps N]``

Each checkout (a folder with ``jask/``, e.g. a ``git worktree`` of main and
one of a branch) runs in a process of its own with its own 2-worker
``LocalCluster`` set up as in :mod:`benchmarks.cluster_step` (least
squares, ``jax.jit(jax.value_and_grad(loss))``, compiled untimed); then
each step is asked of one and the other in turn (the order alternating), so
that both see the same load. Per step and checkout: the in-process step,
the cluster step, and the step graph's no-op twin (the cluster's own cost
for its shape). Reported: medians, the median of cluster/in-process, and
the load average over the run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.report import text_table


def _serve(rows: int, features: int, chunk_rows: int, budget: int, root: str) -> None:
    """Set up the step here; run one step pair per line read; print each's times."""
    import dask
    import jax
    import jax.numpy as jnp
    from distributed import Client, LocalCluster

    import jask
    from benchmarks.cluster_step import _losses, _shaped_like, _step_once
    from benchmarks.workloads import write_data
    from jask.engine import execute
    from jask.engine.cluster import use_private_scratch

    folder = os.path.join(root, f"cluster-{rows}x{features}-{chunk_rows}")
    os.makedirs(folder, exist_ok=True)
    paths = write_data(folder, rows, features, chunk_rows)
    jask.set_memory_budget(budget, scratch_dir=tempfile.mkdtemp(prefix="jask-versions-",
                                                                dir=root))
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    step = jax.jit(jax.value_and_grad(_losses(rows)["lsq"]))
    params = (jnp.full((features,), 0.01, jnp.float32), jnp.float32(0.0))
    graphs: list = []
    run_graph = execute.run

    def keeping(graph, keys, *a, **k):  # the step's graph, for its no-op twin
        graphs.append((graph, keys))
        return run_graph(graph, keys, *a, **k)

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="4GB") as cluster, \
            Client(cluster) as client:
        use_private_scratch(client, budget)
        with dask.config.set(scheduler="threads"):
            want = float(step(params, X, y)[0])  # compiles
        got = float(step(params, X, y)[0])  # the workers' first run: imports
        print(json.dumps({"close": abs(got - want) <= 1e-5 * abs(want) + 1e-7}), flush=True)
        for _ in sys.stdin:
            with dask.config.set(scheduler="threads"):
                local, _t = _step_once(step, params, X, y)
            execute.run = keeping
            try:
                took, t = _step_once(step, params, X, y)
            finally:
                execute.run = run_graph
            graph, keys = graphs[-1]
            start = time.perf_counter()
            client.get(_shaped_like(graph), keys)
            empty = time.perf_counter() - start
            print(json.dumps({"local": local, "cluster": took, "empty": empty,
                              "tasks": t.total.tasks, "passes": t.passes(X)}), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rows", type=int, default=1 << 20)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--chunk-rows", type=int, default=16_384)
    parser.add_argument("--budget", type=int, default=64_000_000)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--quick", action="store_true", help="64 MiB of X under 16MB")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.budget, args.chunk_rows = 1 << 18, 16_000_000, 4096
    root = args.data_dir or os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), ".bench_data")
    if args.serve:
        _serve(args.rows, args.features, args.chunk_rows, args.budget, root)
        return
    shape = [f"--rows={args.rows}", f"--features={args.features}",
             f"--chunk-rows={args.chunk_rows}", f"--budget={args.budget}", f"--data-dir={root}"]
    servers = {}
    for name in (args.before, args.after):
        checkout = os.path.abspath(name)
        servers[name] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "-", "-", "--serve",
             *shape], cwd=checkout, env=dict(os.environ, PYTHONPATH=checkout),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        close = json.loads(servers[name].stdout.readline())["close"]
        print(f"{name}: ready, its cluster step {'matches' if close else 'DIFFERS FROM'} "
              "its in-process step", flush=True)
    got: dict = {name: [] for name in servers}
    loads = [os.getloadavg()[0]]
    for i in range(args.steps):
        for name in list(servers)[:: 1 if i % 2 == 0 else -1]:
            servers[name].stdin.write("step\n")
            servers[name].stdin.flush()
            got[name].append(json.loads(servers[name].stdout.readline()))
        loads.append(os.getloadavg()[0])
    for server in servers.values():
        server.stdin.close()
        server.wait()
    rows = []
    for name, steps in got.items():
        def median(key, steps=steps):
            return statistics.median(s[key] for s in steps)
        ratio = statistics.median(s["cluster"] / s["local"] for s in steps)
        rows.append([name, f"{median('local'):.3f}", f"{median('cluster'):.3f}",
                     f"{ratio:.2f}", f"{median('empty'):.3f}", str(steps[-1]["tasks"]),
                     f"{steps[-1]['passes']:.2f}"])
    print(f"X: {args.rows} x {args.features} float32 in chunks of {args.chunk_rows} rows, "
          f"budget {args.budget}; {args.steps} steps each, interleaved; load average "
          f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs")
    print(text_table(["checkout", "in-process s", "cluster s", "cluster/in", "no-op twin s",
                      "tasks", "passes"], rows))


if __name__ == "__main__":
    main()
