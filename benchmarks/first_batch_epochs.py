"""The first batch of each epoch's iteration, with pauses between epochs.

A device feed (``jask.batches(..., device=...)``) reads the next epoch's
first window as an epoch ends, and the next iteration begins with it. This
iterates ``for batch in loader`` once per epoch, with a pause after each (a
step's evaluation, a checkpoint), and times each iteration's first batch and
whether it began with the window read ahead. Run on JAX's CPU device, the
device feed forced (``HOST_CUT_PLATFORMS = ()``, as tests do); X of 128
float32 columns (64 MiB, uncompressed, chunks of 8,192 rows), windows of
32,768 rows (4 an epoch), batches of 1,024, shuffled, page cache warm.

``--platform default``: on JAX's default device instead (an accelerator's own
device feed, where there is one).

Each checkout given is run in its own process, the checkouts taking turns:
``python -m benchmarks.first_batch_epochs --code /work/main . [--pause 0.6] [--repeat 2]
[--platform cpu|default]``.
Prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROWS, COLS, CHUNK, BUFFER, BATCH, EPOCHS = 131_072, 128, 8_192, 32_768, 1024, 6

CHILD = """
import json, sys, time
import jax, jask, jask.api.batches as jb
jb.HOST_CUT_PLATFORMS = ()  # the device feed, as on an accelerator
folder, pause, readers, platform = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
used = []
take = jb.Batches._take_ahead
def recorded(self):
    ahead = take(self)
    used.append(ahead is not None)
    return ahead
jb.Batches._take_ahead = recorded
loader = jask.batches(jask.open(folder + "/X.zarr"), jask.open(folder + "/y.zarr"),
                      batch_size=%d, shuffle=True, buffer=%d, seed=1, readers=readers,
                      device=jax.devices(*([platform] if platform == "cpu" else []))[0])
first, took = [], []
for epoch in range(%d):
    t0 = time.perf_counter()
    for i, (xb, _) in enumerate(loader):
        if i == 0:
            xb.block_until_ready()
            first.append(time.perf_counter() - t0)
    took.append(time.perf_counter() - t0)
    time.sleep(pause)
loader.close()
print(json.dumps({"first": first, "took": took, "used": used}))
""" % (BATCH, BUFFER, EPOCHS)


def prepare(folder: str) -> None:
    import numpy as np
    import zarr
    X = zarr.create_array(f"{folder}/X.zarr", shape=(ROWS, COLS), chunks=(CHUNK, COLS),
                          dtype="f4", compressors=None)
    X[:] = np.random.default_rng(0).random((ROWS, COLS), dtype=np.float32)
    y = zarr.create_array(f"{folder}/y.zarr", shape=(ROWS,), chunks=(CHUNK,), dtype="i8",
                          compressors=None)
    y[:] = np.arange(ROWS)


def run(code: str, folder: str, pause: float, readers: str, platform: str = "cpu") -> dict:
    code = os.path.abspath(code)  # (``python -c`` imports from its working directory first)
    path = os.pathsep.join([code] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])  # (where jask's dependencies were put, as on the chip's machine)
    env = {**os.environ, "PYTHONPATH": path}
    if platform == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", CHILD, folder, str(pause), readers, platform],
                         env=env, cwd=code, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--code", nargs="+", default=["."], help="checkouts to compare")
    p.add_argument("--pause", type=float, default=0.6, help="seconds between epochs")
    p.add_argument("--readers", nargs="+", default=["processes", "threads"])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--platform", choices=["cpu", "default"], default="cpu",
                   help="JAX's CPU device (the device feed forced) or its default device")
    args = p.parse_args(argv)
    print(f"| checkout | readers | first batch of epochs 0..{EPOCHS - 1} (ms) "
          "| median of 2.. (ms) | epochs 1.. (s) | began with the window read ahead |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        prepare(folder)
        for _ in range(args.repeat):
            for readers in args.readers:
                for code in args.code:
                    r = run(code, folder, args.pause, readers, args.platform)
                    first = " ".join(f"{1e3 * s:.0f}" for s in r["first"])
                    later = 1e3 * statistics.median(r["first"][2:])
                    took = " ".join(f"{s:.2f}" for s in r["took"][1:])
                    used = "".join("y" if u else "-" for u in r["used"])
                    print(f"| {code} | {readers} | {first} | {later:.0f} | {took} | {used} |",
                          flush=True)


if __name__ == "__main__":
    main()
