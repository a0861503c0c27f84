"""jask.batches(readers="processes") from a script without the
``if __name__ == "__main__":`` guard (its reading process never imports it).

Run by tests/test_batches.py: ``python reader_process_unguarded.py X.zarr y.zarr MODE``.
MODE ``all``: one epoch, then print the rows seen and the child's pid as JSON.
MODE ``interrupt``: print the child's pid as JSON after the first batch, then
wait (the test sends SIGINT) between batches.
"""
import json
import sys
import time

import jask


def segments(loader) -> list:
    """The names of the loader's windows in shared memory."""
    return [shared.name.lstrip("/") for slot in loader._slots for shared in slot._shared]


X, y = jask.open(sys.argv[1]), jask.open(sys.argv[2])
loader = jask.batches(X, y, batch_size=50, seed=1, threads=3, readers="processes")
rows = []
for i, (_, yb) in enumerate(loader):
    rows += yb.tolist()
    if sys.argv[3] == "interrupt":
        if i == 0:
            print(json.dumps({"pid": loader._process.pid, "segments": segments(loader)}),
                  flush=True)
        time.sleep(1.0)
print(json.dumps({"rows": sorted(rows), "pid": loader._process.pid,
                  "segments": segments(loader)}))
