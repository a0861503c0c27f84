"""Minibatches from disk: ``jask.batches`` against the disk's parallel read
and the loops users write (a numpy memmap, zarr or jask slices, PyTorch's
``DataLoader`` and grain where they install), shuffled and in order, with
the page cache dropped before each run; a training loop's time against
max(read, compute); and what the chunk-and-buffer shuffle costs in epochs
on a store sorted by label, against a full shuffle.

Run: ``python -m benchmarks.minibatches [--gib 2] [--repeat 3] [--data-dir D]``;
``--quick``: only a shuffled epoch against the raw read (cold cache,
interleaved, with the wall and CPU seconds each run costs; ``--slots 2,3``:
the epochs with each count of host slots side by side; ``--device-cpu``:
onto JAX's CPU device), the mixing of
batch label means against a full shuffle, and the loader's memory (what it
states against its peak, per feed). The raw read there is the plain best
way to read what the loader reads: X's and y's chunk files whole, 8 threads,
into buffers made before the clock starts, in a fresh process and in this one.
Loops that read far slower than the disk (random rows from a memmap, grain's
per-record reads) are stopped after ``--cap`` seconds and their rate is
that of the rows they read. Prints a markdown report.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

COLS = 64
CHUNK_ROWS = 8192
BATCH = 1024


def _drop_cache(paths) -> None:
    """The page cache of these files dropped (all of it, as root, where allowed)."""
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    except OSError:
        pass
    for root in paths:
        files = [root] if os.path.isfile(root) else glob.glob(os.path.join(root, "**"),
                                                              recursive=True)
        for name in files:
            if os.path.isfile(name):
                fd = os.open(name, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)


def prepare(folder: str, gib: float) -> dict:
    """X (rows x 64 float32, ``gib`` GiB) and y as uncompressed Zarr stores
    with 8,192-row chunks, and X as a .npy file for the memmap loop."""
    import zarr
    rows = int(gib * 2**30) // (COLS * 4)
    paths = {"X": os.path.join(folder, f"X-{gib}.zarr"), "y": os.path.join(folder, f"y-{gib}.zarr"),
             "npy": os.path.join(folder, f"X-{gib}.npy")}
    if not os.path.exists(paths["npy"]):
        X = zarr.create_array(paths["X"], shape=(rows, COLS), chunks=(CHUNK_ROWS, COLS),
                              dtype="float32", compressors=None, overwrite=True)
        y = zarr.create_array(paths["y"], shape=(rows,), chunks=(CHUNK_ROWS,), dtype="float32",
                              compressors=None, overwrite=True)
        mm = np.lib.format.open_memmap(paths["npy"] + ".part", "w+", np.float32, (rows, COLS))
        rng = np.random.default_rng(0)
        for s in range(0, rows, 16 * CHUNK_ROWS):
            block = rng.standard_normal((min(16 * CHUNK_ROWS, rows - s), COLS), dtype=np.float32)
            X[s:s + len(block)] = block
            y[s:s + len(block)] = block[:, 0] > 0
            mm[s:s + len(block)] = block
        mm.flush()
        del mm
        os.replace(paths["npy"] + ".part", paths["npy"])
    paths["rows"] = rows
    return paths


# --- the readers: each returns (bytes of X delivered, seconds) ------------------------

def _chunk_files(*roots: str) -> list[str]:
    return sorted(f for root in roots
                  for f in glob.glob(os.path.join(root, "c", "**"), recursive=True)
                  if os.path.isfile(f))


def raw_parallel(paths, threads=4, **_):
    """X's chunk files read whole by ``threads`` threads, each file into a fresh
    ``bytes`` (the raw read before session 7: in a process that has run epochs,
    the fresh 2 MiB buffers cost the read a second CPU second per 2 GiB)."""
    files = _chunk_files(paths["X"])

    def one(name):
        with open(name, "rb", buffering=0) as f:
            return len(f.read())
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(one, files))
    return total, time.perf_counter() - start


def raw_read(paths: dict, threads: int = 8) -> tuple[int, float, float]:
    """The plain best way to read what the loader reads: X's and y's chunk
    files whole, by ``threads`` threads, each into its own buffer, allocated
    and its pages touched before the page cache is dropped and the clock
    starts. (bytes, wall seconds, CPU seconds of the process: user + sys)."""
    files = _chunk_files(paths["X"], paths["y"])
    size = max(os.path.getsize(f) for f in files)
    free: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(threads):
        free.put(memoryview(np.ones(size, np.uint8)))  # ones, not zeros: pages written now
    mine = threading.local()

    def take_buffer():
        mine.buf = free.get()

    def one(name):
        buf, got = mine.buf, 0
        with open(name, "rb", buffering=0) as f:
            while n := f.readinto(buf[got:]):
                got += n
        return got
    _drop_cache([paths["X"], paths["y"]])
    before, start = os.times(), time.perf_counter()
    with ThreadPoolExecutor(threads, initializer=take_buffer) as pool:
        total = sum(pool.map(one, files))
    seconds, after = time.perf_counter() - start, os.times()
    return total, seconds, (after.user - before.user) + (after.system - before.system)


def raw_read_in_child(paths: dict, threads: int = 8) -> tuple[int, float, float]:
    """``raw_read`` in a fresh Python process (no allocator state, no threads of
    an earlier epoch); its figures are taken in the child."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import json, sys; from benchmarks.minibatches import raw_read; "
            "print(json.dumps(raw_read(json.loads(sys.argv[1]), int(sys.argv[2]))))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code, json.dumps(
        {"X": paths["X"], "y": paths["y"]}), str(threads)], env=env, capture_output=True,
        text=True, check=True)
    total, seconds, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return total, seconds, cpu


def raw_best(paths, **_):
    """The disk's parallel read of the chunk files: the best of 4, 8 and 16 threads,
    each after the page cache is dropped."""
    best = None
    for threads in (4, 8, 16):
        _drop_cache([paths["X"]])
        nbytes, seconds = raw_parallel(paths, threads)
        if best is None or seconds < best[1]:
            best = (nbytes, seconds)
    return best


def sequential_file(paths, **_):
    """One large file read front to back (the .npy copy of X): the kernel's
    readahead at its best."""
    start, total = time.perf_counter(), 0
    with open(paths["npy"], "rb", buffering=0) as f:
        while chunk := f.read(1 << 24):
            total += len(chunk)
    return total, time.perf_counter() - start


def jask_batches(paths, shuffle, slots=None, device=None, **_):
    """An epoch of X and y; ``slots``: the host windows its feed reads into
    (``jask.api.batches.SLOTS`` for this loader; None: the default)."""
    import jask
    import jask.api.batches as loader_module
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    default = loader_module.SLOTS
    loader_module.SLOTS = default if slots is None else slots
    try:
        loader = jask.batches(X, y, batch_size=BATCH, shuffle=shuffle, seed=0, device=device)
    finally:
        loader_module.SLOTS = default
    total, start, xb = 0, time.perf_counter(), None
    for xb, _yb in loader:
        total += xb.nbytes
    if device is not None:  # (a device's batches are copied asynchronously: the last waited for)
        import jax
        jax.block_until_ready(xb)
    return total, time.perf_counter() - start


def jask_slices(paths, shuffle, cap, **_):
    """The loop of the issue: ``np.asarray(X[i:i + B])`` per batch."""
    import jask
    X = jask.open(paths["X"])
    order = _batch_order(paths["rows"], shuffle)
    total, start = 0, time.perf_counter()
    for i in order:
        total += np.asarray(X[i:i + BATCH]).nbytes
        if time.perf_counter() - start > cap:
            break
    return total, time.perf_counter() - start


def zarr_slices(paths, shuffle, cap, **_):
    import zarr
    z = zarr.open_array(paths["X"], mode="r")
    order = _batch_order(paths["rows"], shuffle)
    total, start = 0, time.perf_counter()
    for i in order:
        total += z[i:i + BATCH].nbytes
        if time.perf_counter() - start > cap:
            break
    return total, time.perf_counter() - start


def memmap_loop(paths, shuffle, cap, **_):
    """In order: slices of the memmap. Shuffled: batches of random rows (a
    full shuffle, what a memmap allows), sorted within the batch."""
    mm = np.load(paths["npy"], mmap_mode="r")
    rows = paths["rows"]
    total, start = 0, time.perf_counter()
    perm = np.random.default_rng(0).permutation(rows) if shuffle else None
    for b in range(0, rows, BATCH):
        part = mm[np.sort(perm[b:b + BATCH])] if shuffle else np.array(mm[b:b + BATCH])
        total += part.nbytes
        if time.perf_counter() - start > cap:
            break
    return total, time.perf_counter() - start


def torch_loader(paths, shuffle, cap, **_):
    """A map-style Dataset of whole batches cut from the zarr array (the fastest
    spelling with a DataLoader: one slice per item), two worker processes."""
    import torch.utils.data as tud
    import zarr

    class Batches(tud.Dataset):
        def __init__(self, path, rows):
            self.path, self.rows, self.z = path, rows, None

        def __len__(self):
            return -(-self.rows // BATCH)

        def __getitem__(self, i):
            if self.z is None:
                self.z = zarr.open_array(self.path, mode="r")
            return self.z[i * BATCH:(i + 1) * BATCH]

    loader = tud.DataLoader(Batches(paths["X"], paths["rows"]), batch_size=None,
                            shuffle=shuffle, num_workers=2, prefetch_factor=4,
                            persistent_workers=False)
    total, start = 0, time.perf_counter()
    for xb in loader:
        total += xb.numpy().nbytes
        if time.perf_counter() - start > cap:
            break
    return total, time.perf_counter() - start


def grain_loader(paths, shuffle, cap, **_):
    """grain's way: a random-access source of records (rows), a global shuffle
    by index, then batches."""
    import grain
    import zarr

    class Rows(grain.sources.RandomAccessDataSource if hasattr(grain, "sources") else object):
        def __init__(self, path, rows):
            self.z, self.rows = zarr.open_array(path, mode="r"), rows

        def __len__(self):
            return self.rows

        def __getitem__(self, i):
            return self.z[i]

    ds = grain.MapDataset.source(Rows(paths["X"], paths["rows"]))
    if shuffle:
        ds = ds.shuffle(seed=0)
    ds = ds.batch(BATCH)
    total, start = 0, time.perf_counter()
    for xb in ds.to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=8)):
        total += np.asarray(xb).nbytes
        if time.perf_counter() - start > cap:
            break
    return total, time.perf_counter() - start


def _batch_order(rows: int, shuffle: bool) -> list:
    starts = list(range(0, rows, BATCH))
    if shuffle:
        np.random.default_rng(0).shuffle(starts)
    return starts


READERS = {"chunk files read in parallel (best of 4/8/16 threads)": raw_best,
           "one file read sequentially (X as .npy)": sequential_file,
           "jask.batches": jask_batches,
           "numpy memmap loop": memmap_loop, "zarr slices": zarr_slices,
           "jask slices (np.asarray(X[i:i+B]))": jask_slices,
           "PyTorch DataLoader (2 workers)": torch_loader, "grain (4 threads)": grain_loader}


def _available(name: str) -> bool:
    module = {"PyTorch DataLoader (2 workers)": "torch", "grain (4 threads)": "grain"}.get(name)
    if module is None:
        return True
    try:
        __import__(module)
        return True
    except Exception:  # noqa: BLE001 - not installed, or installed without its libraries
        return False


def readers(paths: dict, repeat: int, cap: float) -> list:
    rows = []
    for name, fn in READERS.items():
        if not _available(name):
            rows.append((name, "not installed here", "not installed here"))
            continue
        cells = []
        for shuffle in (False, True):
            if fn in (raw_best, sequential_file) and shuffle:
                cells.append("-")
                continue
            rates = []
            for _ in range(repeat):
                _drop_cache([paths["X"], paths["y"], paths["npy"]])
                nbytes, seconds = fn(paths, shuffle=shuffle, cap=cap)
                rates.append(nbytes / seconds / 1e6)
            rate = statistics.median(rates)
            cells.append(f"{rate:.0f} MB/s" if rate >= 10 else f"{rate:.2f} MB/s")
        rows.append((name, *cells))
    return rows


# --- a training loop against max(read, compute) -----------------------------------------

def training(paths: dict, repeat: int) -> dict:
    """An MLP (64-128-1, Adam) stepped on each batch: the loop's time with
    the page cache dropped, against the loader alone and the steps alone."""
    import jax
    import optax

    import jask
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    key = jax.random.PRNGKey(0)
    k1, k2 = jax.random.split(key)
    params = {"w1": jax.random.normal(k1, (COLS, 128)) * 0.1,
              "w2": jax.random.normal(k2, (128, 1)) * 0.1}
    opt = optax.adam(1e-3)

    def loss(p, xb, yb):
        h = jax.nn.relu(xb @ p["w1"])
        return optax.sigmoid_binary_cross_entropy((h @ p["w2"])[:, 0], yb).mean()

    @jax.jit
    def step(p, s, xb, yb):
        g = jax.grad(loss)(p, xb, yb)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    xb0, yb0 = np.zeros((BATCH, COLS), np.float32), np.zeros(BATCH, np.float32)
    jax.block_until_ready(step(params, opt.init(params), xb0, yb0))
    n_batches = -(-paths["rows"] // BATCH)
    out = {"read": [], "compute": [], "loop": []}
    for _ in range(repeat):
        _drop_cache([paths["X"], paths["y"]])
        out["read"].append(jask_batches(paths, shuffle=True)[1])
        p, s = params, opt.init(params)
        start = time.perf_counter()
        for _ in range(n_batches):
            p, s = step(p, s, xb0, yb0)
        jax.block_until_ready(p)
        out["compute"].append(time.perf_counter() - start)
        _drop_cache([paths["X"], paths["y"]])
        p, s = params, opt.init(params)
        start = time.perf_counter()
        for xb, yb in jask.batches(X, y, batch_size=BATCH, seed=0):
            p, s = step(p, s, xb, yb)
        jax.block_until_ready(p)
        out["loop"].append(time.perf_counter() - start)
    result = {k: statistics.median(v) for k, v in out.items()}
    # a step that takes no host CPU (as an accelerator's does): its time is waited for
    wait = result["read"] / n_batches
    start = time.perf_counter()
    for _ in range(n_batches):
        time.sleep(wait)
    result["wait compute"] = time.perf_counter() - start
    loops = []
    for _ in range(repeat):
        _drop_cache([paths["X"], paths["y"]])
        start = time.perf_counter()
        for _xb, _yb in jask.batches(X, y, batch_size=BATCH, seed=0):
            time.sleep(wait)
        loops.append(time.perf_counter() - start)
    result["wait loop"] = statistics.median(loops)
    return result


# --- the shuffle's cost in epochs, on a store sorted by label ---------------------------

def convergence(folder: str, epochs: int = 8, seeds: int = 3, checks: int = 8) -> dict:
    """Logistic regression by minibatch SGD on 400,000 x 16 rows sorted by
    label (all of class 0, then all of class 1), 4,096-row chunks: epochs
    (to 1/``checks`` of one) until the full loss is within 2% of the
    optimum's, per shuffle, mean over ``seeds`` seeds of the shuffle."""
    import jax
    import jax.numpy as jnp
    import optax
    import zarr

    import jask
    rows, d, bs = 400_000, 16, 256
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, d)).astype(np.float32)
    truth = rng.standard_normal(d).astype(np.float32)
    t = (x @ truth + 0.5 * rng.standard_normal(rows) > 0).astype(np.float32)
    order = np.argsort(t, kind="stable")
    x, t = x[order], t[order]
    for name, value, chunks in [("Xs", x, (4096, d)), ("ys", t, (4096,))]:
        z = zarr.create_array(os.path.join(folder, f"{name}.zarr"), shape=value.shape,
                              chunks=chunks, dtype="float32", compressors=None, overwrite=True)
        z[:] = value
    X, Y = jask.open(os.path.join(folder, "Xs.zarr")), jask.open(os.path.join(folder, "ys.zarr"))
    xs, ts = jnp.asarray(x), jnp.asarray(t)

    @jax.jit
    def full_loss(w):
        return optax.sigmoid_binary_cross_entropy(xs @ w[:-1] + w[-1], ts).mean()

    best = jnp.zeros(d + 1)  # the optimum, by full-batch L-BFGS
    solver = optax.lbfgs()
    state = solver.init(best)
    value_and_grad = optax.value_and_grad_from_state(full_loss)
    for _ in range(100):
        value, grad = value_and_grad(best, state=state)
        updates, state = solver.update(grad, state, best, value=value, grad=grad,
                                       value_fn=full_loss)
        best = optax.apply_updates(best, updates)
    target = float(full_loss(best)) * 1.02
    opt = optax.sgd(0.02, momentum=0.9)

    @jax.jit
    def step(w, s, xb, yb):
        g = jax.grad(lambda w: optax.sigmoid_binary_cross_entropy(xb @ w[:-1] + w[-1],
                                                                  yb).mean())(w)
        u, s = opt.update(g, s)
        return optax.apply_updates(w, u), s

    def full_shuffle(seed):
        for epoch in range(epochs):
            perm = np.random.default_rng([seed, epoch]).permutation(rows)
            for b in range(0, rows, bs):
                yield x[perm[b:b + bs]], t[perm[b:b + bs]]

    methods = {
        "full in-memory shuffle": full_shuffle,
        "jask.batches, default buffer (64 batches: 4 chunks, 4% of the rows)":
            lambda seed: iter(jask.batches(X, Y, batch_size=bs, seed=seed, epochs=epochs)),
        "jask.batches, buffer of 1 chunk (1%)":
            lambda seed: iter(jask.batches(X, Y, batch_size=bs, seed=seed, buffer=4096,
                                           epochs=epochs)),
        "no shuffle": lambda seed: iter(jask.batches(X, Y, batch_size=bs, shuffle=False,
                                                     epochs=epochs)),
    }
    every = -(-rows // bs) // checks
    out = {}
    for name, stream in methods.items():
        reached = []
        for seed in range(seeds):
            w, s = jnp.zeros(d + 1), opt.init(jnp.zeros(d + 1))
            hit = None
            for i, (xb, yb) in enumerate(stream(seed)):
                w, s = step(w, s, xb, yb)
                if (i + 1) % every == 0 and hit is None and float(full_loss(w)) <= target:
                    hit = (i + 1) / (every * checks)
                    break
            reached.append(hit)
        out[name] = reached
    return out


def small_slice() -> dict:
    """What slicing a block of 1,024 rows costs above reading it."""
    import timeit

    import jask
    from jask.store import registry
    from jask.store.tiles import read
    X = jask.from_numpy(np.zeros((65536, COLS), np.float32))
    spec = registry.spec(X._handle)
    np.asarray(X[BATCH:2 * BATCH])
    n = 300
    whole = timeit.timeit(lambda: np.asarray(X[BATCH:2 * BATCH]), number=n) / n
    alone = timeit.timeit(lambda: read(spec, (slice(BATCH, 2 * BATCH), slice(0, COLS))),
                          number=n) / n
    return {"slice to numpy": whole, "read alone": alone}


RAW_THREADS = 8


def _timed_cold(paths: dict, fn) -> tuple[float, float]:
    """(wall, CPU seconds of the process) of ``fn()`` after the page cache is dropped."""
    _drop_cache([paths["X"], paths["y"], paths["npy"]])
    before = os.times()
    _, seconds = fn()
    after = os.times()
    return seconds, (after.user - before.user) + (after.system - before.system)


def epoch_against_raw(paths: dict, repeat: int, slots: list | None = None,
                      device=None) -> list[dict]:
    """Cold-cache runs, interleaved so that the machine's load hits all alike,
    each after the page cache is dropped: the raw read (``raw_read``: X's and
    y's chunk files, 8 threads, reused buffers) in a fresh process and in this
    one, a shuffled ``jask.batches`` epoch of X and y, one in order, and the
    raw read before session 7 (X's files into fresh buffers, in this process).
    One dict per repeat: name -> (wall seconds, CPU seconds user + sys of the
    process that ran it, every thread: what a loaded machine has to find), and
    the load average after the round. ``slots``: the epochs' host slots, each
    count's pair of epochs in each round, in a rotated order (keys suffixed
    ``, N slots``); None:
    the default's. ``device``: the epochs' ``device=``."""
    runs = []
    counts = slots or [None]
    for i in range(repeat):
        run = {"raw, fresh process": raw_read_in_child(paths, RAW_THREADS)[1:],
               "raw, this process": raw_read(paths, RAW_THREADS)[1:]}
        for n in counts[i % len(counts):] + counts[:i % len(counts)]:  # each first in turn
            tail = "" if n is None else f", {n} slots"
            for name, shuffle in (("shuffled", True), ("in order", False)):
                run[name + tail] = _timed_cold(paths, lambda: jask_batches(
                    paths, shuffle=shuffle, slots=n, device=device))
        run["raw, fresh buffers"] = _timed_cold(paths, lambda: raw_parallel(paths, RAW_THREADS))
        run["load"] = os.getloadavg()[0]
        runs.append(run)
    return runs


def mixing(folder: str, rows: int = 2**20, chunk: int = 8192) -> list[tuple]:
    """On a store whose labels are sorted, the deviation of the batches' label
    means from the global mean (root mean square over an epoch's batches),
    against a full shuffle's (4 permutations): (store, batch, runs, ratio)."""
    import zarr

    import jask
    y = np.sort(np.random.default_rng(0).random(rows)).astype(np.float32)
    out = []
    for name, kw in [("uncompressed", {"compressors": None}), ("zstd", {})]:
        path = os.path.join(folder, f"sorted-{name}-{rows}.zarr")
        if not os.path.exists(path):
            z = zarr.create_array(path, shape=(rows,), chunks=(chunk,), dtype="f4", **kw)
            z[:] = y
        for batch in (64, BATCH):
            full = statistics.mean(
                _deviation(y[np.random.default_rng(s).permutation(rows)][:rows // batch * batch]
                           .reshape(-1, batch).mean(axis=1), y) for s in range(4))
            loader = jask.batches(jask.open(path), batch_size=batch, seed=0, drop_last=True)
            means = np.array([b.mean() for (b,) in loader])
            out.append((name, batch, f"{loader.plan.window} of {loader.plan.unit} rows",
                        _deviation(means, y) / full))
    return out


def _deviation(means: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((means - y.mean()) ** 2)))


#: The feeds whose memory is measured: (name, shuffle, device: None, "cpu" (batches cut
#: on the host, put on JAX's CPU device) or "cpu feed" (the device feed an accelerator
#: gets, its windows copied to the CPU device and cut there))
MEMORY_FEEDS = [("numpy, shuffled", True, None), ("numpy, in order", False, None),
                ("device=cpu, shuffled", True, "cpu"),
                ("device feed on the CPU device, shuffled", True, "cpu feed")]


def _status_fields(*fields: str) -> dict:
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in fields:
                out[name] = int(rest.split()[0]) * 1024
    return out


def feed_memory(paths: dict, name: str) -> dict:
    """One feed's epoch (of X and y, a fresh loader; the same loader's first
    epoch before, closed, so that its programs are compiled and the imports
    made): what the loader states it holds, and the peak of this process's
    resident memory over the epoch above what it was before the loader was
    made (sampled every 5 ms: all of it, VmRSS, and its anonymous part,
    RssAnon, without the chunk files' pages a mapped copy touches)."""
    import ctypes
    import gc
    import threading

    import jax

    import jask
    import jask.api.batches as jb
    _, shuffle, device = next(f for f in MEMORY_FEEDS if f[0] == name)
    if device == "cpu feed":
        jb.HOST_CUT_PLATFORMS = ()  # as on an accelerator (tests/conftest.py, device_feed)
    target = jax.devices("cpu")[0] if device else None
    X, y = jask.open(paths["X"]), jask.open(paths["y"])

    def epoch():
        loader = jask.batches(X, y, batch_size=BATCH, shuffle=shuffle, seed=0, device=target)
        for _xb, _yb in loader:
            pass
        jax.effects_barrier()
        stated = {"host": loader.held_bytes, "device": loader.device_bytes}
        loader.close()
        return stated

    epoch()
    gc.collect()
    try:  # the warm-up's freed buffers handed back, so that the epoch's own show
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    before = _status_fields("VmRSS", "RssAnon")
    peak = dict(before)
    done = threading.Event()

    def sample():
        while not done.wait(0.005):
            for k, v in _status_fields("VmRSS", "RssAnon").items():
                peak[k] = max(peak[k], v)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    stated = epoch()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    return {"feed": name, "host": stated["host"], "device": stated["device"],
            "budget": jask.get_config().max_memory,
            "rss": peak["VmRSS"] - before["VmRSS"], "anon": peak["RssAnon"] - before["RssAnon"],
            "seconds": seconds}


def loader_memory(args) -> list[dict]:
    """:func:`feed_memory` of each of :data:`MEMORY_FEEDS`, each in a process of its own."""
    import json
    out = []
    for name, _, _ in MEMORY_FEEDS:
        run = subprocess.run([sys.executable, "-m", "benchmarks.minibatches", "--data-dir",
                              args.data_dir, "--gib", str(args.gib), "--feed-memory", name],
                             capture_output=True, text=True, check=True)
        out.append(json.loads(run.stdout.strip().splitlines()[-1]))
    return out


def print_loader_memory(args) -> None:
    print("| feed (X and y, batches of 1,024, a fresh loader's epoch) | stated: host "
          "(held_bytes) | stated: device (device_bytes) | peak RSS - before | of it anonymous "
          "(RssAnon) | budget (its loader share: half) | epoch |\n|---|---|---|---|---|---|---|")
    mib = 2**20
    for r in loader_memory(args):
        print(f"| {r['feed']} | {r['host'] / mib:.1f} MiB | {r['device'] / mib:.1f} MiB | "
              f"{r['rss'] / mib:.1f} MiB | {r['anon'] / mib:.1f} MiB | "
              f"{r['budget'] / mib:.0f} MiB ({r['budget'] / 2 / mib:.0f}) | "
              f"{r['seconds']:.1f} s |", flush=True)


def quick(args) -> None:
    """``--quick``: the shuffled epoch against the raw read, cold cache,
    interleaved, and the shuffle's mixing against a full one."""
    import jask
    jask.set_memory_budget("1GB", scratch_dir=os.path.join(args.data_dir, "scratch"))
    paths = prepare(args.data_dir, args.gib)
    print(f"X: {paths['rows']:,} x {COLS} float32 ({args.gib} GiB), {CHUNK_ROWS}-row "
          f"uncompressed chunks, and y; batches of {BATCH}; page cache dropped before each "
          f"run; load {os.getloadavg()[0]:.1f}\n")
    slots = [int(n) for n in args.slots.split(",")] if args.slots else None
    device = None
    if args.device_cpu:
        import jax
        device = jax.devices("cpu")[0]
    tails = [""] if slots is None else [f", {n} slots" for n in slots]
    print("| run | load | raw read, fresh process | raw read, this process | "
          + " | ".join(f"jask.batches shuffled{t} | in order{t}" for t in tails)
          + " | " + " | ".join(f"shuffled{t} / raw | in order{t} / raw" for t in tails)
          + " |\n|---|---|---|---|" + "---|---|---|---|" * len(tails))
    runs = epoch_against_raw(paths, args.repeat, slots, device)

    def cell(r, name):  # wall and the CPU seconds of the run
        return f"{r[name][0]:.2f} s, {r[name][1]:.2f} CPU s"

    def ratios(r, tail):  # the raw read's wall over the epoch's: the epoch's rate as a share of raw
        raw = min(r["raw, fresh process"][0], r["raw, this process"][0])
        return raw / r["shuffled" + tail][0], raw / r["in order" + tail][0]
    for i, r in enumerate(runs):
        print(f"| {i + 1} | {r['load']:.1f} | {cell(r, 'raw, fresh process')} | "
              f"{cell(r, 'raw, this process')} | "
              + " | ".join(f"{cell(r, 'shuffled' + t)} | {cell(r, 'in order' + t)}"
                           for t in tails) + " | "
              + " | ".join("{:.2f} | {:.2f}".format(*ratios(r, t)) for t in tails) + " |",
              flush=True)
    med = {k: tuple(statistics.median(r[k][j] for r in runs) for j in (0, 1))
           for k in runs[0] if k != "load"}
    print(f"| median | {statistics.median(r['load'] for r in runs):.1f} | "
          f"{cell(med, 'raw, fresh process')} | {cell(med, 'raw, this process')} | "
          + " | ".join(f"{cell(med, 'shuffled' + t)} | {cell(med, 'in order' + t)}"
                       for t in tails) + " | "
          + " | ".join(f"{statistics.median(ratios(r, t)[0] for r in runs):.2f} | "
                       f"{statistics.median(ratios(r, t)[1] for r in runs):.2f}"
                       for t in tails) + " |\n")
    fresh = med["raw, fresh buffers"]
    old_ratio = statistics.median(r["raw, fresh buffers"][0] / r["shuffled" + tails[0]][0]
                                  for r in runs)
    print(f"The raw read: X's and y's chunk files whole, {RAW_THREADS} threads, each into a "
          f"buffer of its own made before the clock starts; the ratios take the faster of its "
          f"two runs (wall). The raw read before session 7 (X's files into fresh buffers, in "
          f"this process after the epochs): median {fresh[0]:.2f} s, {fresh[1]:.2f} CPU s; "
          f"shuffled / it {old_ratio:.2f}.\n")
    skip = set(args.skip.split(","))
    if "mixing" not in skip:
        print("| store sorted by label (2^20 rows, 8,192-row chunks) | batch | a window's units "
              "| batch-mean deviation / a full shuffle's |\n|---|---|---|---|")
        for name, batch, units, ratio in mixing(args.data_dir):
            print(f"| {name} | {batch} | {units} | {ratio:.2f} x |", flush=True)
        print()
    if "memory" not in skip:
        print_loader_memory(args)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.minibatches")
    p.add_argument("--gib", type=float, default=2.0, help="size of X (GiB)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cap", type=float, default=5.0, help="seconds at most per slow loop")
    p.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), ".bench_data"))
    p.add_argument("--skip", default="",
                   help="comma-separated: readers,training,convergence,memory "
                   "(--quick: mixing,memory)")
    p.add_argument("--quick", action="store_true",
                   help="only the shuffled epoch against the raw read, the mixing figure and "
                   "the loader's memory")
    p.add_argument("--slots", default="", metavar="N,M",
                   help="--quick: the epochs with these host slot counts side by side "
                   "(jask.api.batches.SLOTS for each loader), interleaved")
    p.add_argument("--device-cpu", action="store_true",
                   help="--quick: the epochs onto JAX's CPU device (device=) instead of numpy")
    p.add_argument("--feed-memory", metavar="FEED", help="(internal) one row of the loader's "
                   "memory, as JSON, measured in this process")
    args = p.parse_args(argv)
    os.makedirs(args.data_dir, exist_ok=True)
    if args.feed_memory:
        import json

        import jask
        jask.set_memory_budget("1GB", scratch_dir=os.path.join(args.data_dir, "scratch"))
        print(json.dumps(feed_memory(prepare(args.data_dir, args.gib), args.feed_memory)))
        return None
    if args.quick:
        return quick(args)
    import jask
    jask.set_memory_budget("1GB", scratch_dir=os.path.join(args.data_dir, "scratch"))
    paths = prepare(args.data_dir, args.gib)
    skip = set(args.skip.split(","))
    print(f"X: {paths['rows']:,} x {COLS} float32 ({args.gib} GiB), {CHUNK_ROWS}-row "
          f"uncompressed chunks; batches of {BATCH}; page cache dropped before each run; "
          f"median of {args.repeat}; load {os.getloadavg()[0]:.1f}\n")
    if "readers" not in skip:
        print("| reader | in order | shuffled |\n|---|---|---|")
        for row in readers(paths, args.repeat, args.cap):
            print("| " + " | ".join(row) + " |", flush=True)
        s = small_slice()
        print(f"\nSlicing 1,024 rows to numpy: {s['slice to numpy'] * 1e3:.3f} ms, of which the "
              f"read {s['read alone'] * 1e3:.3f} ms.\n")
    if "training" not in skip:
        t = training(paths, args.repeat)
        print(f"Training loop (MLP 64-128-1, Adam, shuffled): loader alone {t['read']:.2f} s, "
              f"steps alone {t['compute']:.2f} s, loop {t['loop']:.2f} s = "
              f"{t['loop'] / max(t['read'], t['compute']):.2f} x max(read, compute) "
              f"(their sum: {t['loop'] / (t['read'] + t['compute']):.2f} x). With a step that "
              f"waits as long as the read without using the host's CPU (an accelerator's): steps "
              f"alone {t['wait compute']:.2f} s, loop {t['wait loop']:.2f} s = "
              f"{t['wait loop'] / max(t['read'], t['wait compute']):.2f} x max(read, compute) "
              f"(their sum: {t['wait loop'] / (t['read'] + t['wait compute']):.2f} x)\n",
              flush=True)
    if "convergence" not in skip:
        runs = convergence(args.data_dir)
        full = statistics.mean(runs["full in-memory shuffle"])
        print("| shuffle (store sorted by label) | epochs to 1.02 x the optimum's loss (3 seeds) "
              "| mean | against a full shuffle |\n|---|---|---|---|")
        for name, reached in runs.items():
            if None in reached:
                print(f"| {name} | {reached} | not in 8 epochs | - |")
                continue
            mean = statistics.mean(reached)
            print(f"| {name} | {', '.join(f'{r:.3f}' for r in reached)} | {mean:.3f} | "
                  f"{mean / full:.2f} x |", flush=True)
    if "memory" not in skip:
        print()
        print_loader_memory(args)


if __name__ == "__main__":
    sys.exit(main())
