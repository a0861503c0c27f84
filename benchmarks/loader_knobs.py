"""The fed epoch of ``jask.batches(..., device=d)`` (issue 44) with the
loader's knobs set between rounds: the bytes of a ``device_put`` piece
(``jask.api.batches.TRANSFER_BYTES``), the reading threads (``--knobs
threads``: ``DEFAULT_THREADS``, in the reading child), the pieces copied at once
(``--knobs flight``: ``PUTS_IN_FLIGHT``), the host slots of a device feed
(``--knobs slots``: ``DEVICE_SLOTS``), how an in-order window is cut on the
device (``--knobs cut``: sliced, or gathered by its identity order as before
session 8; in order only), who reads a window (``--knobs reader``: the reading
child into shared memory, or threads into this process's; in order only;
``--knobs reads``: none after each slot's first window, for timing only, or the
child's threads; ``--knobs child``: the child's threads, both orders;
``--knobs flight-more``: 3 or 4 pieces in flight;
``--floor-shared``: JAX alone putting from shared memory too;
``--floor-fed``: JAX alone feeding the step from its copies through a queue of
cut batches, the floor of any feed of this shape; ``--steady E``: an epoch of
one iteration of E epochs) and the
interpreter's switch interval
(``sys.setswitchinterval``: how long a thread holding the GIL keeps it while
another waits, 5 ms by default; the consumer's step dispatches wait behind
the stager's and the reading child's collector threads). Each setting: the
loader alone and fed to the MLP step of benchmarks/loader_device.py, shuffled
and in order, against the steps alone, rounds interleaved so that drift hits
all alike.

Run: ``python -m benchmarks.loader_knobs [--gib 1] [--rounds 2]
[--knobs pieces|threads|flight|flight-more|cut|dispatch|slots|reader|reads|child]
[--floor-cuts] [--floor-shared] [--floor-fed] [--steady E]``; prints a
markdown table, after what JAX alone does with the same steps and bytes
(``--floor-only``: only that).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from benchmarks import loader_device as ld


def _slot_read_once():
    from jask.api import batches

    class SlotReadOnce(batches._Slot):
        """A host slot read for its first window only: its later windows put
        the rows it holds again (wrong batches: for timing a fed epoch without
        reads, nothing else)."""

        def fill(self, pool, threads, units, plan, *args, **kw):
            if not self.buffers:
                return super().fill(pool, threads, units, plan, *args, **kw)
            n = plan.rows_in(units)
            self.buffers = [buf[:n] for buf in self._whole]
            return []

    return SlotReadOnce


#: (name, the loader's module constants set, switch interval s) in the order measured
SETTINGS = {
    "pieces": [
        ("default (32 MiB pieces, 5 ms)", {}, 0.005),
        ("16 MiB pieces", {"TRANSFER_BYTES": 16 * 2**20}, 0.005),
        ("8 MiB pieces", {"TRANSFER_BYTES": 8 * 2**20}, 0.005),
        ("switch interval 0.5 ms", {}, 0.0005),
        ("8 MiB pieces, 0.5 ms", {"TRANSFER_BYTES": 8 * 2**20}, 0.0005),
    ],
    "threads": [
        ("8 reading threads", {"DEFAULT_THREADS": 8}, 0.005),
        ("12 reading threads", {"DEFAULT_THREADS": 12}, 0.005),
        ("16 reading threads", {"DEFAULT_THREADS": 16}, 0.005),
        ("4 reading threads", {"DEFAULT_THREADS": 4}, 0.005),
    ],
    "flight": [
        ("2 pieces in flight (default)", {}, 0.005),
        ("a whole window in flight", {"PUTS_IN_FLIGHT": None}, 0.005),
        ("1 piece in flight", {"PUTS_IN_FLIGHT": 1}, 0.005),
    ],
    "cut": [
        ("in order sliced (default)", {}, 0.005),
        # the cut of a shuffled window (a gather) for every window
        ("in order gathered (before)", {"_programs": lambda target, shuffle=True: (
            _PROGRAMS(target, True))}, 0.005),
    ],
    # the stager's host calls beside the consumer's step dispatch: a cut of 64 batches
    # makes 128 arrays in one call (3-12 ms in the in-order timeline, session 8)
    "dispatch": [
        ("cut 64 batches a call (default)", {}, 0.005),
        ("cut 16 batches a call", {"CUT_BATCHES": 16}, 0.005),
        ("cut 8 batches a call", {"CUT_BATCHES": 8}, 0.005),
        ("cut 16 a call, a whole window in flight", {"CUT_BATCHES": 16, "PUTS_IN_FLIGHT": None},
         0.005),
    ],
    # the host slots a device feed reads into: with two, a window's reads wait for the copy
    # of the window two before (the in-order chain of reads and copies, session 8)
    "slots": [
        ("3 slots, 2 pieces in flight (default)", {}, 0.005),
        ("2 slots, a whole window in flight (before)", {"DEVICE_SLOTS": 2, "PUTS_IN_FLIGHT": None},
         0.005),
        ("3 slots, a whole window in flight", {"PUTS_IN_FLIGHT": None}, 0.005),
        ("2 slots, 2 pieces in flight", {"DEVICE_SLOTS": 2}, 0.005),
        ("4 slots, 2 pieces in flight", {"DEVICE_SLOTS": 4}, 0.005),
    ],
    # who reads a window: onto an accelerator a reading child, into shared memory (the
    # pieces put from it); threads read into this process's memory, as JAX alone puts from
    "reader": [
        ("reading child (default)", {}, 0.005),
        ("reading threads", {"THREAD_READER_PLATFORMS": ("cpu", "tpu", "gpu")}, 0.005),
    ],
    # what the reads cost the fed epoch: none after each slot's first window (the
    # batches repeat: timing only), or the reading child with fewer or more threads
    "reads": [
        ("reading child, 4 threads (default)", {}, 0.005),
        ("no reads after each slot's first (timing only)", {"_Slot": _slot_read_once()}, 0.005),
        ("reading child, 2 threads", {"CHILD_THREADS": 2}, 0.005),
        ("reading child, 8 threads", {"CHILD_THREADS": 8}, 0.005),
    ],
    # more pieces copied at once, in order (JAX alone: 8 at once copy faster but slow the
    # steps beside them, 0.32 s against 0.25 s with 2)
    "flight-more": [
        ("2 pieces in flight (default)", {}, 0.005),
        ("3 pieces in flight", {"PUTS_IN_FLIGHT": 3}, 0.005),
        ("4 pieces in flight", {"PUTS_IN_FLIGHT": 4}, 0.005),
    ],
    # the reading child's threads, shuffled and in order: their reads beside the copies
    "child": [
        ("reading child, 4 threads (default)", {}, 0.005),
        ("reading child, 2 threads", {"CHILD_THREADS": 2}, 0.005),
        ("reading child, 3 threads", {"CHILD_THREADS": 3}, 0.005),
    ],
}
#: The orders measured, by knobs (the cut changes nothing shuffled)
ORDERS = {"cut": (False,), "dispatch": (False,), "reader": (False,), "reads": (False,),
          "flight-more": (False,)}


def _programs_before_knobs():
    from jask.api import batches
    return batches._programs


_PROGRAMS = _programs_before_knobs()  # (what a knob's programs call, whatever is set)


def jax_floor(device, nbytes: int, n_steps: int, piece: int = 32 * 2**20,
              in_flight: int = 8, repeat: int = 3, cuts: bool = False,
              shared: bool = False) -> dict:
    """What JAX alone does with the same work, no jask: ``n_steps`` MLP
    steps on batches already on the device; ``nbytes`` put on the device in
    ``piece``-byte ``device_put`` calls from reused host buffers,
    ``in_flight`` at a time (as the loader's pieces are); and both at once,
    from two threads; with ``cuts``, the puts' thread also dispatches a program making 64
    batches of X and y (128 arrays) of a window already on the device each
    8 pieces, as the device feed's stager does; with ``shared``, the host
    buffers are in shared memory (as the reading child's slots). Medians of
    ``repeat`` (seconds). A loader cannot feed an epoch faster than "both"
    ("all" where it reads as it feeds)."""
    import threading

    import jax
    import numpy as np
    step, params, state, held = ld.compiled_step(device, 4)
    if shared:
        from jask.api.reader_process import SharedArray
        kept = [SharedArray((piece // 4,), np.float32) for _ in range(in_flight)]
        host = [k.value for k in kept]
        for h in host:
            h[...] = 1
    else:
        host = [np.ones(piece // 4, np.float32) for _ in range(in_flight)]
    jax.block_until_ready(jax.device_put(host[0], device))

    def steps() -> None:
        p, s, v = params, state, None
        for i in range(n_steps):
            p, s, v = step(p, s, *held[i % 4])
        jax.block_until_ready(v)

    cut = jax.jit(lambda x, y: tuple(t[i * ld.BATCH:(i + 1) * ld.BATCH]
                                     for i in range(64) for t in (x, y)))
    window = (jax.device_put(np.ones((64 * ld.BATCH, ld.COLS), np.float32), device),
              jax.device_put(np.ones(64 * ld.BATCH, np.float32), device))
    jax.block_until_ready(cut(*window))

    def puts() -> None:
        flying: list = []
        for i in range(-(-nbytes // piece)):
            if len(flying) == in_flight:
                jax.block_until_ready(flying.pop(0))
            flying.append(jax.device_put(host[i % in_flight], device))
            if cuts and i % 8 == 7:  # (a window: 8 pieces of 32 MiB)
                cut(*window)
        jax.block_until_ready(flying)

    def both() -> None:
        t = threading.Thread(target=puts)
        t.start()
        steps()
        t.join()

    out = {}
    for name, fn in [("steps", steps), ("puts", puts), ("both", both)]:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times)
    return out


def fed_floor(device, rows: int, cut: str = "window", repeat: int = 3,
              window_rows: int = 524_288, piece: int = 32 * 2**20,
              dependent: bool | None = True) -> float:
    """JAX alone (no jask, no reads) feeding the MLP step as the in-order
    device feed does: a thread puts each window's pieces of X (and y) from
    reused host buffers, 2 in flight, and cuts them into batches on the
    device (a slice program), handing the batches to the stepping thread
    through a queue. ``cut``: "window", a window's pieces all waited for, then
    cut at once (64 batches: the device feed's pattern); "piece", each piece
    cut and handed as soon as it is copied (16 batches); "batch", no cut, each
    batch put on its own (8 in flight). Not ``dependent``: the same calls, but
    each cut is of a window (or piece) put before the epoch, so that no step
    waits on a copy; None (a window at a time): no cut in the epoch, one cut's
    batches handed again each window. Median seconds of an epoch of ``rows``
    rows, timed from the first put, as a fed epoch is."""
    import queue
    import threading

    import jax
    import jax.numpy as jnp
    import numpy as np
    step, params, state, _ = ld.compiled_step(device, 1)
    B, C = ld.BATCH, ld.COLS
    piece_rows = piece // (C * 4)
    per_window = window_rows // piece_rows
    host_x = [np.ones((piece_rows, C), np.float32) for _ in range(3 * per_window)]
    per_piece = cut != "window"
    host_y = [np.ones(piece_rows if per_piece else window_rows, np.float32) for _ in range(3)]
    n_pieces = -(-rows // piece_rows)
    in_piece = piece_rows // B

    cut_piece = jax.jit(lambda x, y: tuple((x[i * B:(i + 1) * B], y[i * B:(i + 1) * B])
                                           for i in range(in_piece)))
    cut_window = jax.jit(lambda xs, y: (lambda x: tuple(
        (x[i * B:(i + 1) * B], y[i * B:(i + 1) * B]) for i in range(window_rows // B)))(
            jnp.concatenate(xs)))
    held_piece = (jax.device_put(host_x[0], device), jax.device_put(host_y[0], device))
    held_window = (tuple(jax.device_put(h, device) for h in host_x[:per_window]),
                   jax.device_put(host_y[0], device))
    jax.block_until_ready(cut_piece(*held_piece) if per_piece else cut_window(*held_window))
    reused = list(cut_window(*held_window)) if dependent is None else None
    jax.block_until_ready(step(params, state, *jax.device_put(
        (host_x[0][:B], host_y[0][:B]), device)))

    def epoch() -> float:
        handed: queue.Queue = queue.Queue(maxsize={"batch": 64, "piece": 4}.get(cut, 1))

        def stage() -> None:
            flying: list = []  # puts not waited for yet, oldest first
            if cut == "batch":
                n = n_pieces * in_piece
                for i in range(n):
                    j, r = divmod(i, in_piece)
                    flying.append(jax.device_put(
                        (host_x[j % len(host_x)][r * B:(r + 1) * B],
                         host_y[j % 3][r * B:(r + 1) * B]), device))
                    while flying and (len(flying) == 8 or i == n - 1):
                        done = flying.pop(0)
                        jax.block_until_ready(done)
                        handed.put([done])
            elif cut == "piece":
                for j in range(n_pieces):
                    flying.append((jax.device_put(host_x[j % len(host_x)], device),
                                   jax.device_put(host_y[j % 3], device)))
                    if len(flying) == 2 or j == n_pieces - 1:
                        while flying and (len(flying) == 2 or j == n_pieces - 1):
                            done = flying.pop(0)
                            jax.block_until_ready(done)
                            handed.put(list(cut_piece(*(done if dependent else held_piece))))
            else:
                for w in range(-(-n_pieces // per_window)):
                    flying, xs = [], []  # (this window's)
                    for j in range(per_window):
                        if len(flying) == 2:
                            flying.pop(0).block_until_ready()
                        xs.append(jax.device_put(host_x[(w % 3) * per_window + j], device))
                        flying.append(xs[-1])
                    y = jax.device_put(host_y[w % 3], device)
                    jax.block_until_ready((xs, y))
                    handed.put(reused if reused is not None else list(cut_window(
                        *((tuple(xs), y) if dependent else held_window))))
            handed.put(None)

        start = time.perf_counter()
        t = threading.Thread(target=stage)
        t.start()
        p, s, v = params, state, None
        while (batches := handed.get()) is not None:
            for xb, yb in batches:
                p, s, v = step(p, s, xb, yb)
        jax.block_until_ready(v)
        t.join()
        return time.perf_counter() - start

    epoch()
    return statistics.median(epoch() for _ in range(repeat))


def steady(paths: dict, device, shuffle: bool, epochs: int, repeat: int = 2) -> tuple:
    """Seconds an epoch (medians of ``repeat``) of one iteration of ``epochs``
    epochs (``jask.batches(..., epochs=epochs)``: the feed goes on from one epoch
    into the next, no window filled or drained between them): the loader
    alone, and fed to the MLP step. One loader each, its reading child started
    and its programs compiled by a few batches first, then iterated from its
    start again (``restore``) for each measure."""
    import jax

    import jask
    X, y = jask.open(paths["X"]), jask.open(paths["y"])
    step, params, state = ld.mlp(device)
    out = []
    for fed in (False, True):
        loader = jask.batches(X, y, batch_size=ld.BATCH, shuffle=shuffle, seed=0,
                              device=device, epochs=epochs, readers=ld.READERS)
        begin = loader.state
        it = iter(loader)
        for _, (xb, yb) in zip(range(3), it):
            jax.block_until_ready(step(params, state, xb, yb) if fed else xb)
        it.close()
        times = []
        for _ in range(repeat):
            loader.restore(begin)
            p, s, last = params, state, None
            start = time.perf_counter()
            for xb, yb in loader:
                if fed:
                    p, s, last = step(p, s, xb, yb)
                else:
                    last = xb
            jax.block_until_ready(last)
            times.append((time.perf_counter() - start) / epochs)
        loader.close()
        out.append(statistics.median(times))
    return tuple(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loader_knobs")
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2, help="epochs timed per measure")
    p.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "jask-loader"))
    p.add_argument("--knobs", choices=sorted(SETTINGS), default="pieces",
                   help="which settings: device_put pieces and switch interval, reading threads, "
                        "pieces in flight, the in-order cut, the cut's batches a call, host slots, "
                        "who reads (a child or threads), what the reads cost")
    p.add_argument("--floor-only", action="store_true", help="only what JAX alone does")
    p.add_argument("--floor-cuts", action="store_true",
                   help="JAX alone with puts also dispatching a cut of 64 batches each 8 pieces")
    p.add_argument("--floor-fed", action="store_true",
                   help="JAX alone feeding the step in order through cut batches: a window "
                        "cut at once, or each piece as it is copied")
    p.add_argument("--steady", type=int, default=0, metavar="E",
                   help="also an epoch of one iteration of E epochs (loader alone, fed), "
                        "and JAX alone's fed floor over E epochs at once")
    p.add_argument("--floor-shared", action="store_true",
                   help="JAX alone with its host buffers also in shared memory")
    args = p.parse_args(argv)
    import jax

    import jask
    from jask.api import batches as B
    jask.set_memory_budget("8GB")
    device = jax.devices()[0]
    paths = ({"rows": int(args.gib * 2**30) // (ld.COLS * 4) // ld.BATCH * ld.BATCH}
             if args.floor_only else ld.prepare(args.data_dir, args.gib))
    steps = ld.steps_alone(device, paths["rows"] // ld.BATCH, args.repeat)
    for in_flight in (8, 2):
        floor = jax_floor(device, paths["rows"] * (ld.COLS + 1) * 4, paths["rows"] // ld.BATCH,
                          in_flight=in_flight)
        print(f"jax alone (no jask), {in_flight} puts in flight: "
              + ", ".join(f"{k} {v:.3f} s" for k, v in floor.items()), flush=True)
        if args.floor_shared:
            shared = jax_floor(device, paths["rows"] * (ld.COLS + 1) * 4,
                               paths["rows"] // ld.BATCH, in_flight=in_flight, shared=True)
            print(f"jax alone (no jask), {in_flight} puts in flight from shared memory: "
                  + ", ".join(f"{k} {v:.3f} s" for k, v in shared.items()), flush=True)
        if not args.floor_cuts:
            continue
        floor = jax_floor(device, paths["rows"] * (ld.COLS + 1) * 4, paths["rows"] // ld.BATCH,
                          in_flight=in_flight, cuts=True)
        print(f"jax alone (no jask), {in_flight} puts in flight, a cut each 8 pieces: "
              + ", ".join(f"{k} {v:.3f} s" for k, v in floor.items()), flush=True)
    if args.floor_fed:
        for _ in range(2):
            fed = fed_floor(device, paths["rows"], "batch")
            print(f"jax alone (no jask) fed in order, a device_put per batch (8 in flight): "
                  f"{fed:.3f} s", flush=True)
            fed = fed_floor(device, paths["rows"], "window", dependent=None)
            print(f"jax alone (no jask) fed in order, the batches of one cut handed again "
                  f"each window (no cut in the epoch): {fed:.3f} s", flush=True)
            for cut in ("window", "piece"):
                for dependent in (True, False):
                    fed = fed_floor(device, paths["rows"], cut, dependent=dependent)
                    print(f"jax alone (no jask) fed in order, cut a {cut} at a time"
                          f"{'' if dependent else ', of windows put before (no wait)'}: "
                          f"{fed:.3f} s", flush=True)
    if args.steady:
        for cut in ("window", "piece"):
            fed = fed_floor(device, paths["rows"] * args.steady, cut) / args.steady
            print(f"jax alone (no jask) fed in order, {args.steady} epochs at once, cut a "
                  f"{cut} at a time: {fed:.3f} s an epoch", flush=True)
        if not args.floor_only:
            for shuffle in (False, True):
                alone, fed = steady(paths, device, shuffle, args.steady)
                print(f"jask, one iteration of {args.steady} epochs, "
                      f"{'shuffled' if shuffle else 'in order'}: loader alone {alone:.3f} s, "
                      f"fed {fed:.3f} s an epoch (steps alone {steps:.3f} s)", flush=True)
    if args.floor_only:
        return 0
    got: dict = {}
    defaults = {attr: getattr(B, attr) for _, overrides, _ in SETTINGS[args.knobs]
                for attr in overrides}
    for _ in range(args.rounds):
        for name, overrides, interval in SETTINGS[args.knobs]:
            for attr, value in {**defaults, **overrides}.items():
                setattr(B, attr, value)
            sys.setswitchinterval(interval)
            for shuffle in ORDERS.get(args.knobs, (True, False)):
                alone, _ = ld.loader_alone(paths, device, shuffle, args.repeat)
                fed = ld.together(paths, device, shuffle, args.repeat)
                got.setdefault((name, shuffle), []).append((alone, fed))
                print(f"{name} shuffle={shuffle}: alone {alone:.3f} s, fed {fed:.3f} s",
                      flush=True)
    sys.setswitchinterval(0.005)
    print(f"\n{args.gib} GiB, {device.device_kind}; steps alone {steps:.3f} s; JAX alone "
          f"(no jask) puts {floor['puts']:.3f} s, puts and steps at once {floor['both']:.3f} s; "
          f"medians of {args.rounds} rounds\n")
    print("| setting | order | loader alone s | fed s | fed / max(steps, loader) |\n"
          "|---|---|---|---|---|")
    for (name, shuffle), runs in got.items():
        alone = statistics.median(a for a, _ in runs)
        fed = statistics.median(f for _, f in runs)
        print(f"| {name} | {'shuffled' if shuffle else 'in order'} | {alone:.3f} | {fed:.3f} "
              f"| {fed / max(steps, alone):.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
