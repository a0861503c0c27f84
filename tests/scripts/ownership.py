"""Kill -9 saves and updates inside each of their steps, and fork children
that exit; report as JSON.

Run by tests/test_ownership.py: ``python ownership.py SCRATCH SOURCE FOLDER FORKED``.

Kills.
SOURCE is a Zarr array of ones; FOLDER holds one user array of zeros per
scenario, ``<step>-<exchange|fallback>.zarr``. For each scenario a forked
child opens SOURCE, saves it over its target and SIGKILLs itself when the
save reaches that step (``jask.store.kinds.local.saves.on_step``; in the fallback, with
no ``renameat2``); two more kill ``update_`` of the target, before and
after its exchange (``jask.store.kinds.local.durability.on_step``). A jask whose save
renames the target aside is also killed right after that rename, wherever
it does it. Right after each kill the target is read with plain zarr (the
next child's session then cleans up after the killed one); a last child
makes a session and is killed.

Forks. In the scratch folder FORKED this process makes an array, then a
``multiprocessing`` fork child and an ``os.fork`` child (which exits with
``sys.exit``, so atexit handlers run) drop every reference to it and
collect; the report says whether the session folder and the array survived.
"""
import gc
import json
import multiprocessing
import os
import signal
import sys

import numpy as np
import zarr

import jask

SCENARIOS = [("write", "exchange"), ("swap", "exchange"), ("cleanup", "exchange"),
             ("renamed-aside", "fallback"), ("swap", "fallback"),
             ("swap", "update"), ("cleanup", "update")]   # update_'s copy, then the old store


def save_and_die(scratch: str, source: str, target: str, step: str, how: str) -> None:
    def die(at):
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)

    saves = jask.store.kinds.local.saves
    saves.on_step = die
    if how == "fallback":
        saves.renameat2 = None
    rename = os.rename

    def rename_then_die(src, dst, *args, **kwargs):  # a target renamed aside: the gap
        rename(src, dst, *args, **kwargs)
        if os.path.abspath(src) == target:
            os.kill(os.getpid(), signal.SIGKILL)
    os.rename = rename_then_die
    jask.set_memory_budget("8MB", scratch_dir=scratch)
    if how == "update":
        jask.store.kinds.local.durability.on_step = die
        jask.open(target).update_(jask.open(source))
    else:
        jask.save(jask.open(source), target, overwrite=True)


def main(scratch: str, source: str, folder: str, forked: str) -> None:
    report = {"kills": kills(scratch, source, folder), "forks": forks(forked)}
    print(json.dumps(report), flush=True)


def forks(scratch: str) -> dict:
    jask.set_memory_budget("8MB", scratch_dir=scratch)
    x = jask.from_numpy(np.arange(6.0, dtype=np.float32))
    folder = jask.store.kinds.local.sessions.session_dir(scratch)

    def drop_everything():
        nonlocal x
        del x
        gc.collect()
        jask.store.registry.sweep()   # what jask's next safe point does
        jask.store.trash.wait()

    z = x + 1.0  # pending (eager ops are lazy): computed by a child, then by this process

    pid = os.fork()
    if pid == 0:  # no JAX call: XLA's compiler may hang in a forked child
        ok = z.to_numpy().tolist() == [1, 2, 3, 4, 5, 6]
        jask.store.kinds.local.sessions._remove_sessions()  # what atexit does (its pool's threads
        os._exit(0 if ok else 3)  # may crash the interpreter's exit in a forked child)
    lazy_exit = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    child = multiprocessing.get_context("fork").Process(target=drop_everything)
    child.start()
    child.join()
    pid = os.fork()
    if pid == 0:
        drop_everything()
        sys.exit(0)   # a plain exit: atexit handlers run in the child
    os.waitpid(pid, 0)
    return {"exitcode": child.exitcode, "session": os.path.isdir(folder),
            "sum": float(jask.sum(x)), "values": x.to_numpy().tolist(),
            "lazy": [lazy_exit, z.to_numpy().tolist()]}


def kills(scratch: str, source: str, folder: str) -> dict:
    report = {}
    for step, how in SCENARIOS:
        target = os.path.join(folder, f"{step}-{how}.zarr")
        pid = os.fork()
        if pid == 0:
            try:
                save_and_die(scratch, source, target, step, how)
            finally:
                os._exit(0)  # not killed: the step never came
        report[f"{step}-{how}"] = {"killed": killed(pid), "found": found(target)}
    pid = os.fork()  # one more session, killed with no save: the last one's cleaner
    if pid == 0:
        try:
            jask.store.kinds.local.sessions.session_dir(scratch)
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(0)
    report["bare"] = {"killed": killed(pid), "found": None}
    return report


def killed(pid: int) -> bool:
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def found(target: str) -> str:
    """What a plain Zarr reader finds at ``target`` right after the kill."""
    if not os.path.exists(target):
        return "nothing"
    values = np.unique(zarr.open_array(target)[...])
    return {(0.0,): "old", (1.0,): "new"}.get(tuple(values.tolist()), f"mixed {values}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
