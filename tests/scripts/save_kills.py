"""Kill -9 ``jask.save(..., overwrite=True)`` inside each of its steps; report as JSON.

Run by tests/test_ownership.py: ``python save_kills.py SCRATCH SOURCE FOLDER``.
SOURCE is a Zarr array of ones; FOLDER holds one user array of zeros per
scenario, ``<step>-<exchange|fallback>.zarr``. For each scenario a forked
child opens SOURCE, saves it over its target and SIGKILLs itself when the
save reaches that step (``jask.store.saves.on_step``; in the fallback, with
no ``renameat2``); two more kill ``update_`` of the target, before and
after its exchange (``jask.store.durability.on_step``). A jask whose save
renames the target aside is also killed right after that rename, wherever
it does it. Right after each kill the target is read with plain zarr (the
next child's session then cleans up after the killed one); a last child
makes a session and is killed.
"""
import json
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

    saves = getattr(jask.store, "saves", None)
    if saves is not None:
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
        jask.store.durability.on_step = die
        jask.open(target).update_(jask.open(source))
    else:
        jask.save(jask.open(source), target, overwrite=True)


def main(scratch: str, source: str, folder: str) -> None:
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
            jask.store.sessions.session_dir(scratch)
            os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(0)
    report["bare"] = {"killed": killed(pid), "found": None}
    print(json.dumps(report), flush=True)


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
    main(*sys.argv[1:4])
