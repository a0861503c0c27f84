"""jask against dask.array on data in object storage (an S3-compatible server).

``python -m benchmarks.objects [--quick] [--rows N] [--features K] [--chunk-rows R] [--repeats N]``

Starts its own S3 server (moto's server mode, a separate process on
127.0.0.1, as ``tests/s3server.py``) behind a small counting TCP proxy
(bytes on the wire, both directions), writes ``X`` (rows x features float32,
uncompressed Zarr v3, row chunks) and ``y`` to the bucket, and then, in one
process, interleaved (jask, dask, jask, dask, ...), times:

* ``sum``: ``jask.sum(X)``; ``da.from_zarr(url).sum().compute()``;
* ``lstsq grad``: ``jax.jit(jax.grad(lambda w: sum(square(X @ w - y))))(w)``
  with ``w`` in memory; dask computes ``2 X.T @ (X @ w - y)``;
* ``logistic step``: ``jax.jit(jax.value_and_grad(loss))`` of logistic
  regression's mean loss (``jask.logaddexp``), ``w`` and ``b`` in memory; dask
  computes the loss and ``X.T @ (sigmoid(z) - y) / n`` in one ``dask.compute``;
* ``save``: ``jask.save(X, url2)``; ``da.from_zarr(url).to_zarr(url2)``,
  each to a new URL.

Both read the same URL: jask through its own object-storage layer
(``jask.store.kinds.objects.remote``, obstore), dask.array through zarr-python's
``ObjectStore`` on obstore (``jask.zarr_store``: no fsspec filesystem is
needed), both configured by the standard environment variables only. The
data are written the same way, by plain zarr. Columns: seconds per pass
(median), dask/jask (above 1: jask faster), requests per pass (from the
server's own request log, so counted the same way for both), for jask the
requests its own counters saw (``jask.track``) and the chunk objects the
case reads (X's, and y's for a gradient: one GET each is the promise, plus
one HEAD of each array's ``zarr.json``, the check that nobody replaced it),
MiB on the wire per pass (proxy counts, HTTP headers included) and passes
over X's bytes. Compiling (jask) and a first run of each (both) are untimed.
"""
from __future__ import annotations

import argparse
import itertools
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ACCESS_KEY, SECRET_KEY = "AKIAJASKBENCHMARK", "jask-benchmark-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """moto's S3 server, its request log in a file (one line per request)."""

    def __init__(self):
        self.port = _free_port()
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".moto.log", delete=False)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.05)

    def requests(self) -> int:
        """Requests the server has answered so far."""
        with open(self.log.name, "rb") as f:
            return len(re.findall(rb'"(?:GET|PUT|HEAD|POST|DELETE) [^"]* HTTP/1\.[01]"', f.read()))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        os.unlink(self.log.name)


class Proxy:
    """A TCP proxy in front of the server counting bytes each way."""

    def __init__(self, target_port: int):
        self.port, self.target = _free_port(), target_port
        self.up = self.down = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._listener.accept()
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b, up in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(a, b, up), daemon=True).start()

    def _pump(self, src, dst, up: bool) -> None:
        try:
            while data := src.recv(1 << 20):
                dst.sendall(data)
                with self._lock:
                    if up:
                        self.up += len(data)
                    else:
                        self.down += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def total(self) -> int:
        with self._lock:
            return self.up + self.down


def _environment(port: int) -> dict:
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def write_data(bucket: str, rows: int, features: int, chunk_rows: int) -> tuple[str, str]:
    """X and y (labels 0/1) at ``bucket``, by plain zarr, a block of rows at a time."""
    import zarr

    from jask import zarr_store

    rng = np.random.default_rng(0)
    x_url, y_url = f"{bucket}/X.zarr", f"{bucket}/y.zarr"
    X = zarr.create_array(store=zarr_store(x_url, read_only=False), shape=(rows, features),
                          chunks=(chunk_rows, features), dtype="float32", compressors=None)
    y = zarr.create_array(store=zarr_store(y_url, read_only=False), shape=(rows,),
                          chunks=(chunk_rows,), dtype="float32", compressors=None)
    for start in range(0, rows, chunk_rows):
        stop = min(rows, start + chunk_rows)
        block = rng.standard_normal((stop - start, features), dtype=np.float32)
        X[start:stop] = block
        y[start:stop] = (block[:, 0] + rng.standard_normal(stop - start) > 0).astype(np.float32)
    return x_url, y_url


def _logistic(params, X, y):
    import jask

    w, b = params
    z = X @ w + b
    return (jask.logaddexp(0.0, z) - y * z).mean()


def cases(x_url: str, y_url: str, bucket: str):
    """name -> (jask function, dask function, chunk objects read), each
    function returning a number to compare."""
    import dask
    import dask.array as da
    import jax
    import jax.numpy as jnp

    import jask

    X, y = jask.open(x_url), jask.open(y_url)
    dX, dy = da.from_zarr(jask.zarr_store(x_url)), da.from_zarr(jask.zarr_store(y_url))
    objects = {name: int(np.prod([-(-n // c) for n, c in zip(a.shape, a.chunksize)]))
               for name, a in (("X", dX), ("y", dy))}
    w = jnp.full((X.shape[1],), 0.01, jnp.float32)
    params = (w, jnp.float32(0.1))
    grad = jax.jit(jax.grad(lambda w: jask.sum(jask.square(X @ w - y))))
    step = jax.jit(jax.value_and_grad(_logistic))
    names = itertools.count()

    def dask_grad():
        r = dX @ np.asarray(w) - dy
        return float(np.linalg.norm(dask.compute(2 * (dX.T @ r))[0]))

    def jask_step():
        value, (gw, gb) = step(params, X, y)
        return float(np.linalg.norm(np.asarray(gw)))

    def dask_step():
        z = dX @ np.asarray(w) + 0.1
        loss = (da.logaddexp(0.0, z) - dy * z).mean()
        gw = dX.T @ (1 / (1 + da.exp(-z)) - dy) / dX.shape[0]
        return float(np.linalg.norm(dask.compute(loss, gw)[1]))

    def jask_save():
        out = jask.save(X, f"{bucket}/jask-{next(names)}.zarr")
        return out.shape[0]

    def dask_save():
        dX.to_zarr(jask.zarr_store(f"{bucket}/dask-{next(names)}.zarr", read_only=False))
        return dX.shape[0]

    both = objects["X"] + objects["y"]
    return {
        "sum": (lambda: float(jask.sum(X)), lambda: float(dX.sum().compute()), objects["X"]),
        "lstsq grad": (lambda: float(np.linalg.norm(grad(w))), dask_grad, both),
        "logistic step": (jask_step, dask_step, both),
        "save": (jask_save, dask_save, objects["X"]),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=524_288)  # 128 MiB of X
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--chunk-rows", type=int, default=32_768)  # 8 MiB chunks of X
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", default="256MB")
    parser.add_argument("--quick", action="store_true", help="small data, one repeat (~20 s)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = 131_072, 1

    server = Server()
    proxy = Proxy(server.port)
    os.environ.update(_environment(proxy.port))
    try:
        run(server, proxy, args)
    finally:
        server.stop()


def run(server: Server, proxy: Proxy, args) -> None:
    import boto3
    import dask
    from dask.utils import format_bytes, parse_bytes

    import jask
    from benchmarks.report import text_table

    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], aws_access_key_id=ACCESS_KEY,
                 aws_secret_access_key=SECRET_KEY, region_name="us-east-1"
                 ).create_bucket(Bucket="bench")
    bucket = "s3://bench"
    t0 = time.perf_counter()
    x_url, y_url = write_data(bucket, args.rows, args.features, args.chunk_rows)
    x_bytes = args.rows * args.features * 4
    print(f"X: {args.rows} x {args.features} float32 = {format_bytes(x_bytes)} in chunks of "
          f"{args.chunk_rows} rows ({format_bytes(args.chunk_rows * args.features * 4)}), "
          f"written in {time.perf_counter() - t0:.1f} s; budget {args.budget}; "
          f"dask: threaded scheduler, {os.cpu_count()} threads", flush=True)
    jask.set_memory_budget(parse_bytes(args.budget))
    dask.config.set(scheduler="threads")
    runs = cases(x_url, y_url, bucket)
    results: dict = {}
    for name, (jask_f, dask_f, objects) in runs.items():
        pair = (jask_f, dask_f)
        values = [f() for f in pair]  # compile and warm up, untimed
        for _ in range(args.repeats):
            for who, f in zip(("jask", "dask"), pair):
                requests, wire = server.requests(), proxy.total()
                with jask.track() as counted:
                    start = time.perf_counter()
                    f()
                    took = time.perf_counter() - start
                time.sleep(0.05)  # the server's log line of the last request
                got = results.setdefault((name, who), [])
                got.append((took, server.requests() - requests, proxy.total() - wire,
                            counted.total.requests))
        close = bool(np.isclose(values[0], values[1], rtol=1e-3))
        results[(name, "check")] = "ok" if close else f"DIFFER {values}"
        print(f"  {name}: done", flush=True)
    rows = []
    for name, (_, _, objects) in runs.items():
        med = {who: statistics.median(r[0] for r in results[(name, who)])
               for who in ("jask", "dask")}
        for who in ("jask", "dask"):
            took, req, wire, counted = results[(name, who)][-1]
            rows.append([name, who, f"{med[who]:.2f}",
                         f"{med['dask'] / med['jask']:.2f}" if who == "jask" else "",
                         str(req), str(counted) if who == "jask" else "", str(objects),
                         f"{wire / 2**20:.1f}", f"{wire / x_bytes:.2f}",
                         results[(name, "check")] if who == "jask" else ""])
    print(text_table(["case", "who", "s/pass", "dask/jask", "requests", "jask.track",
                      "chunk objects", "MiB wire", "x X", "check"], rows))

if __name__ == "__main__":
    main()
