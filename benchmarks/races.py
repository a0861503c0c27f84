"""Race harness: readers, savers and writers of the same stores at once.

``python -m benchmarks.races [--seconds 30] [--budget 256KB] [--json]``

For a fixed time, child processes and threads of one process read stores
that other processes and threads replace:

* writers: ``update_`` (a process per user store, and a thread on a store
  jask made) and ``jask.optim.step`` (sgd, in place, a process);
* readers: ``jask.sum`` (column sums), ``to_numpy``, ``np.asarray``,
  ``jask.save`` (uncompressed and zstd, checked from outside with plain
  zarr) and a slow reader (``jask.map`` with a kernel that sleeps on every
  tile), in processes and in threads;
* two threads running jitted training steps while another runs eager ops.

Every version of a store is one constant (``update_`` writes ``full(k)``, an
sgd step with gradient ones subtracts one), so a result is entirely one
version exactly when its values (or column sums) are all equal. Each result
is counted as *consistent*, *refused* (:class:`jask.StoreChangedError`,
allowed: the op saw the change and discarded its result), *mixed* (the
failure this harness hunts) or an *error* (any other exception). It prints
one row per role and reader, and exits 1 if anything was mixed or failed.

The helpers (:func:`read_loop`, :func:`update_loop`, :func:`jit_threads`)
also serve tests/test_races.py, which runs a few seconds of the same.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

SHAPE, CHUNKS = (96, 80), (16, 16)
READERS = ("sum", "to_numpy", "asarray", "save", "save_zstd", "slow")


@dataclass
class Counts:
    """Results of one reader kind."""

    runs: int = 0
    consistent: int = 0
    refused: int = 0
    mixed: int = 0
    errors: list = field(default_factory=list)

    def add(self, other: "Counts") -> None:
        self.runs += other.runs
        self.consistent += other.consistent
        self.refused += other.refused
        self.mixed += other.mixed
        self.errors += other.errors


def make_store(path: str, compressor=None, value: float = 0.0, shape=SHAPE) -> str:
    """A user's Zarr v3 store of ``shape``, all ``value``, chunked by CHUNKS."""
    import zarr
    zarr.create_array(path, shape=shape, chunks=CHUNKS, dtype="float32", fill_value=0.0,
                      compressors=compressor, zarr_format=3)[:] = value
    return path


def _slow(a):
    """Identity on a tile, after a pause (a slow reader)."""
    import jax

    def pause(t):
        time.sleep(0.002)
        return t
    return jax.pure_callback(pause, jax.ShapeDtypeStruct(a.shape, a.dtype), a)


def read_once(x, kind: str, workdir: str) -> np.ndarray:
    """One read of ``x``: the values (or column sums) to check."""
    import zarr

    import jask
    if kind == "sum":
        return np.asarray(jask.sum(x, axis=0))
    if kind == "to_numpy":
        return x.to_numpy()
    if kind == "asarray":
        return np.asarray(x)
    if kind in ("save", "save_zstd"):
        path = os.path.join(workdir, f"saved-{threading.get_ident()}-{kind}.zarr")
        jask.save(x, path, overwrite=True, compressor="zstd" if kind == "save_zstd" else None)
        return zarr.open_array(path, mode="r")[...]  # from outside, with plain zarr
    if kind == "slow":
        return jask.map(_slow, x).to_numpy()
    raise ValueError(kind)


def one_version(values: np.ndarray) -> bool:
    """Whether a read is entirely one version (each version is a constant)."""
    return values.size == 0 or bool((values == values.flat[0]).all())


def read_loop(x, kinds, seconds: float, workdir: str) -> dict[str, Counts]:
    """Read ``x`` with each of ``kinds`` in turn for ``seconds`` (and at least
    once each); count the results."""
    import jask
    counts = {k: Counts() for k in kinds}
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end or i < len(kinds):
        kind = kinds[i % len(kinds)]
        i += 1
        c = counts[kind]
        c.runs += 1
        try:
            values = read_once(x, kind, workdir)
        except jask.StoreChangedError:
            c.refused += 1
            continue
        except Exception as err:  # noqa: BLE001 - counted and reported
            c.errors.append(f"{type(err).__name__}: {err}"[:300])
            continue
        if one_version(values):
            c.consistent += 1
        else:
            c.mixed += 1
    return counts


def update_loop(x, seconds: float, first: int, optim: bool = False) -> int:
    """Replace ``x``'s store for ``seconds``: ``update_`` with full(first + i),
    or (``optim``) sgd steps with gradient ones. Returns how many."""
    import jask
    end, n = time.monotonic() + seconds, 0
    if optim:
        tx = jask.optim.sgd(1.0)
        state, ones = tx.init(x), jask.from_numpy(np.ones(x.shape, x.dtype))
    while time.monotonic() < end:
        if optim:
            x, state = jask.optim.step(tx, ones, state, x)
        else:
            x.update_(jask.from_numpy(np.full(x.shape, first + n, x.dtype)))
        n += 1
    return n


def swap_keeping_the_inode(path: str) -> dict:
    """Replace the store at ``path`` twice, by jask's exchange, so that the
    folder at ``path`` ends with the inode number it started with and new
    values (all 102): what a filesystem that reuses a freed inode number for
    the next staging folder gives (ext4 does, once its journal has committed
    the deletion, which is not every time), made certain."""
    import zarr

    from jask.store.kinds.local import durability
    try:
        from jask.store import versions
    except ImportError:  # a jask before version tokens (the harness runs against it too)
        versions = None
    inode = os.stat(path).st_ino
    staging = path + ".jask-update-races"
    shutil.copytree(path, staging)
    for value in (101, 102):  # the second swap puts the first folder back, rewritten
        zarr.open_array(staging, mode="r+")[...] = value
        if versions is not None:
            versions.write_token(staging)
        durability._swap(staging, path, durable=False)
    shutil.rmtree(staging)
    return {"inode_back": os.stat(path).st_ino == inode}


def jit_threads(seconds: float, n_train: int = 2) -> dict:
    """Threads running jitted training steps (and one running eager ops) at
    once; each trainer checks its final parameter against numpy."""
    import jax

    import jask
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 8)).astype(np.float32)
    y = X @ np.arange(8, dtype=np.float32)
    errors: list = []
    steps = [0] * (n_train + 1)
    stop = time.monotonic() + seconds

    def loss(w, X, y):
        return jask.sum(jask.square(X @ w - y))

    grad = jax.jit(jax.grad(loss))

    def train(k):
        try:
            Xd, yd = jask.from_numpy(X), jask.from_numpy(y)
            w = jask.from_numpy(np.zeros(8, np.float32))
            ref = np.zeros(8)
            while time.monotonic() < stop:
                g = grad(w, Xd, yd)
                w = w - 1e-3 * g
                ref = ref - 1e-3 * (2 * X.T @ (X @ ref - y))
                steps[k] += 1
            np.testing.assert_allclose(np.asarray(w), ref, rtol=1e-3, atol=1e-3)
        except Exception as err:  # noqa: BLE001 - reported
            errors.append(f"train {k}: {type(err).__name__}: {err}"[:400])

    def eager():
        try:
            a = jask.from_numpy(X)
            while time.monotonic() < stop:
                got = float(jask.sum(a * 2.0 + 1.0))
                np.testing.assert_allclose(got, (X * 2 + 1).sum(), rtol=1e-4)
                steps[-1] += 1
        except Exception as err:  # noqa: BLE001 - reported
            errors.append(f"eager: {type(err).__name__}: {err}"[:400])

    threads = [threading.Thread(target=train, args=(k,)) for k in range(n_train)]
    threads.append(threading.Thread(target=eager))
    [t.start() for t in threads]
    [t.join() for t in threads]
    return {"steps": steps, "errors": errors}


# --- child processes ---------------------------------------------------------------

def _child(argv) -> None:
    """``--role ...``: one child's part; prints a JSON report as its last line."""
    p = argparse.ArgumentParser()
    p.add_argument("--role", required=True)
    p.add_argument("--store", action="append", default=[])
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--budget", default="256KB")
    p.add_argument("--work", required=True)
    p.add_argument("--first", type=int, default=1000)
    a = p.parse_args(argv)
    import jask
    jask.set_memory_budget(a.budget, scratch_dir=os.path.join(a.work, f"scratch-{os.getpid()}"))
    print("ready", flush=True)
    report: dict = {}
    if a.role in ("update", "optim"):
        report["writes"] = update_loop(jask.open(a.store[0]), a.seconds, a.first,
                                       optim=a.role == "optim")
    elif a.role == "serve":  # commands on stdin, a JSON line each (tests/test_races.py)
        for line in sys.stdin:
            what, store, *rest = line.split()
            # races, not power losses: syncfs is slow
            jask.store.kinds.local.durability.FSYNC = False
            if what == "update":
                done = update_loop(jask.open(store), float(rest[0]), int(rest[1]))
            else:
                done = swap_keeping_the_inode(store)
            print(json.dumps(done), flush=True)
        return
    elif a.role == "read":
        for store in a.store:
            counts = read_loop(jask.open(store), READERS, a.seconds, a.work)
            report[os.path.basename(store)] = {k: vars(c) for k, c in counts.items()}
    elif a.role == "threads":
        report = _threads(a.store, a.seconds, a.work)
    elif a.role == "jit":
        report = jit_threads(a.seconds)
    print(json.dumps(report), flush=True)


def _threads(stores, seconds: float, work: str) -> dict:
    """In one process: a writer thread on a store jask made, reader threads
    on it and on the user's stores (which other processes write)."""
    import jask
    made = jask.from_numpy(np.zeros(SHAPE, np.float32))
    results: dict = {}
    targets = [("jask-made", made)] + [(os.path.basename(s), jask.open(s)) for s in stores]

    def reader(name, x):
        results[name] = read_loop(x, READERS, seconds, work)

    threads = [threading.Thread(target=reader, args=t) for t in targets]
    writes = [0]
    threads.append(threading.Thread(
        target=lambda: writes.__setitem__(0, update_loop(made, seconds, 5000))))
    [t.start() for t in threads]
    [t.join() for t in threads]
    report = {f"thread: {name}": {k: vars(c) for k, c in counts.items()}
              for name, counts in results.items()}
    report["writes"] = writes[0]
    return report


def _spawn(role: str, stores, seconds: float, work: str, budget: str, first: int = 1000,
           **popen):
    cmd = [sys.executable, "-m", "benchmarks.races", "--role", role, "--seconds",
           str(seconds), "--work", work, "--budget", budget, "--first", str(first)]
    for s in stores:
        cmd += ["--store", s]
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **popen)


def run(seconds: float, budget: str = "256KB") -> dict:
    """The whole harness: returns {row: counts or report}."""
    import zarr
    work = tempfile.mkdtemp(prefix="jask-races-")
    try:
        plain = make_store(os.path.join(work, "plain.zarr"))
        zstd = make_store(os.path.join(work, "zstd.zarr"), zarr.codecs.ZstdCodec())
        stores = [plain, zstd]
        kids = {
            "update plain": _spawn("update", [plain], seconds, work, budget, 1000),
            "update zstd": _spawn("update", [zstd], seconds, work, budget, 2000),
            "optim plain": _spawn("optim", [plain], seconds, work, budget),
            "optim zstd": _spawn("optim", [zstd], seconds, work, budget),
            "readers plain": _spawn("read", [plain], seconds, work, budget),
            "readers zstd": _spawn("read", [zstd], seconds, work, budget),
            "threads": _spawn("threads", stores, seconds, work, budget),
            "jit threads": _spawn("jit", [], seconds, work, budget),
        }
        out = {}
        for name, kid in kids.items():
            stdout, stderr = kid.communicate(timeout=seconds * 4 + 600)
            if kid.returncode != 0:
                out[name] = {"failed": stderr[-2000:]}
            else:
                out[name] = json.loads(stdout.strip().splitlines()[-1])
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _table(report: dict) -> tuple[str, bool]:
    """Rows of counts, and whether everything was one version without errors."""
    lines = [f"{'where':<28}{'reader':<11}{'runs':>7}{'one ver.':>10}{'refused':>9}"
             f"{'mixed':>7}{'errors':>8}"]
    total, ok, writes = Counts(), True, {}
    for name, rep in report.items():
        if "failed" in rep:
            lines.append(f"{name}: FAILED\n{rep['failed']}")
            ok = False
            continue
        if "writes" in rep:
            writes[name] = rep["writes"]
        if "steps" in rep:
            lines.append(f"{name:<28}steps per thread {rep['steps']}, errors {len(rep['errors'])}")
            ok = ok and not rep["errors"]
            lines += [f"    {e}" for e in rep["errors"][:5]]
        for where, kinds in rep.items():
            if not isinstance(kinds, dict):
                continue
            for kind, c in kinds.items():
                c = Counts(**c)
                total.add(c)
                label = f"{name}: {where}" if name != "threads" else where
                lines.append(f"{label[:27]:<28}{kind:<11}{c.runs:>7}{c.consistent:>10}"
                             f"{c.refused:>9}{c.mixed:>7}{len(c.errors):>8}")
                lines += [f"    {e}" for e in c.errors[:3]]
    lines.append(f"{'total':<39}{total.runs:>7}{total.consistent:>10}{total.refused:>9}"
                 f"{total.mixed:>7}{len(total.errors):>8}")
    lines.append(f"writes: {writes}")
    ok = ok and total.mixed == 0 and not total.errors
    return "\n".join(lines), ok


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--role" in argv:
        _child(argv)
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--budget", default="256KB")
    p.add_argument("--json", action="store_true", help="print the raw report as JSON")
    a = p.parse_args(argv)
    report = run(a.seconds, a.budget)
    text, ok = _table(report)
    print(json.dumps(report) if a.json else text)
    print("mixed=0, no errors" if ok else "FAILED: mixed results or errors")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
