"""jask deletes only what it made, replaces atomically, and keeps scratch private.

Real child processes, real SIGKILLs, checks from outside with plain zarr:

* ``jask.save(..., overwrite=True)`` killed inside each step leaves the old
  or the new array at the path (never none, with ``renameat2``); the next
  session finishes a fallback swap cut short and removes the hidden copies
  killed saves and ``update_`` s left, and nothing that merely looks like them;
* folders named like sessions but without jask's proof survive; so does a
  dead session whose lock file is a symlink;
* a store opened by path survives the collection of the array that made it;
* a forked child's exit leaves its parent's session and stores intact;
* scratch folders are 0700 and files 0600 under umask 022; a symlinked
  update_ lock file is refused.
"""
import gc
import os
import shutil
import socket

import numpy as np
import pytest
import zarr

import jask
from helpers import run_script, wait_for_fork
from jask.store.kinds.local import sessions


def _user_array(path, value, chunks=(5, 4)):
    zarr.create_array(str(path), data=value, chunks=chunks, compressors=None, zarr_format=3)


def _next_session(scratch) -> str:
    """What a later process does first: make its session, cleaning dead ones."""
    return sessions.session_dir(str(scratch))


OLD, NEW = np.zeros((11, 7), np.float32), np.ones((11, 7), np.float32)
STEPS = ["write-exchange", "swap-exchange", "cleanup-exchange", "renamed-aside-fallback",
         "swap-fallback", "swap-update", "cleanup-update"]
HOST = socket.gethostname()
LOOKALIKES = [f"session-{HOST}-999999-0123456789abcdef", f"session-{HOST}-1-ab", "session-notes"]


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    """One child process (tests/scripts/ownership.py) for the kills and the forks."""
    tmp_path = tmp_path_factory.mktemp("ownership")
    scratch, folder = tmp_path / "scratch", tmp_path / "mine"
    folder.mkdir()
    _user_array(tmp_path / "source.zarr", NEW)
    for name in STEPS:
        _user_array(folder / f"{name}.zarr", OLD)
    # the user's own look-alikes: hidden names as jask's, folders named as sessions
    (folder / ".write-exchange.zarr.jask-save-0123456789ab").mkdir()
    for name in LOOKALIKES:
        (scratch / name).mkdir(parents=True)
        (scratch / name / "mine.txt").write_text("mine")
    (scratch / f"session-{HOST}-1-ab.lock").write_text("")  # a free lock, no proof

    report = run_script("ownership.py", scratch, tmp_path / "source.zarr", folder,
                        tmp_path / "forked", timeout=300)
    return tmp_path, report


@pytest.mark.xdist_group("ownership")  # one worker runs the child once (--dist loadgroup)
def test_killed_saves_leave_old_or_new_and_are_cleaned_by_the_next_session(child):
    tmp_path, report = child
    old, new, steps, host, lookalikes = OLD, NEW, STEPS, HOST, LOOKALIKES
    scratch, folder, report = tmp_path / "scratch", tmp_path / "mine", report["kills"]
    assert all(r["killed"] for r in report.values()), report
    found = {name: r["found"] for name, r in report.items() if name != "bare"}
    assert found == {"write-exchange": "old", "swap-exchange": "old",
                     "cleanup-exchange": "new", "swap-fallback": "old",
                     "renamed-aside-fallback": "nothing", "swap-update": "old",
                     "cleanup-update": "new"}, found  # the fallback's gap
    # only the last session is left dead; a symlinked lock file is no proof: kept
    dead = [n for n in os.listdir(scratch) if n.endswith(".lock") and "-1-ab" not in n]
    assert len(dead) == 1, os.listdir(scratch)
    tampered = scratch / dead[0]
    shutil.copy(tampered, tmp_path / "copy.lock")
    tampered.unlink()
    tampered.symlink_to(tmp_path / "copy.lock")

    mine = _next_session(scratch)
    expected = {"write-exchange": old, "swap-exchange": old, "cleanup-exchange": new,
                "swap-fallback": old, "renamed-aside-fallback": new,  # completed: it goes in
                "swap-update": old, "cleanup-update": new}
    for name, value in expected.items():
        np.testing.assert_array_equal(zarr.open_array(str(folder / f"{name}.zarr"))[...],
                                      value, err_msg=name)
    left = sorted(n for n in os.listdir(folder) if not n.endswith(".jask-lock"))
    assert left == [".write-exchange.zarr.jask-save-0123456789ab"] + [
        f"{n}.zarr" for n in sorted(steps)], left   # copies gone, the user's look-alike kept
    for name in lookalikes:
        assert (scratch / name / "mine.txt").read_text() == "mine", name
    assert tampered.is_symlink() and (scratch / dead[0][:-len(".lock")]).is_dir()
    assert sorted(os.listdir(scratch)) == sorted(
        lookalikes + [f"session-{host}-1-ab.lock", dead[0], dead[0][:-len(".lock")],
                      os.path.basename(mine), os.path.basename(mine) + ".lock"])


def test_store_opened_by_path_survives_its_maker(jask_scratch):
    x = jask.from_numpy(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    opened = jask.open(x.filename)
    path = x.filename
    del x
    gc.collect()
    jask.collect()
    assert os.path.isdir(path)
    np.testing.assert_array_equal(zarr.open_array(path)[...],
                                  np.arange(12.0, dtype=np.float32).reshape(3, 4))
    y = jask.from_numpy(np.zeros((3, 4), np.float32))  # never reuses the kept folder
    assert float(jask.sum(opened)) == 66.0 and float(jask.sum(y)) == 0.0


def test_user_store_in_a_folder_named_like_a_session_is_the_users(tmp_path, jask_scratch):
    path = tmp_path / "session-vm-1-ab" / "data.zarr"   # a chunk of only fill: no file
    arr = zarr.create_array(str(path), shape=(4, 4), chunks=(2, 2), dtype="float32",
                            fill_value=3.0, compressors=None, zarr_format=3)
    arr[:2, :2] = 1.0
    assert float(jask.sum(jask.open(path))) == 4 * 1.0 + 12 * 3.0


def test_private_scratch_under_umask_022(jask_scratch):
    previous = os.umask(0o022)
    try:
        x = jask.from_numpy(np.ones((5, 3), np.float32))
        y = jask.from_numpy(np.ones((5, 3), np.int8))   # through zarr-python
        z = (x + 1.0, y)
        folder = sessions.session_dir(jask_scratch.path)
        modes = {}
        for root, folders, files in os.walk(folder):
            modes[root] = os.stat(root).st_mode & 0o777
            modes.update({os.path.join(root, f): os.stat(os.path.join(root, f)).st_mode & 0o777
                          for f in files})
        modes[folder + ".lock"] = os.stat(folder + ".lock").st_mode & 0o777
        wrong = {p: oct(m) for p, m in modes.items()
                 if m != (0o700 if os.path.isdir(p) else 0o600)}
        assert len(modes) >= 8 and not wrong, wrong
        del x, y, z
    finally:
        os.umask(previous)
        jask.collect()


def test_update_refuses_a_symlinked_lock_file(tmp_path, jask_scratch):
    _user_array(tmp_path / "w.zarr", np.zeros((4, 4), np.float32))
    victim = tmp_path / "victim.txt"
    victim.write_text("not a lock")
    (tmp_path / ".w.zarr.jask-lock").symlink_to(victim)
    w = jask.open(tmp_path / "w.zarr")
    with pytest.raises(OSError, match="jask-lock"):
        w.update_(jask.from_numpy(np.ones((4, 4), np.float32)))
    assert victim.read_text() == "not a lock" and (tmp_path / ".w.zarr.jask-lock").is_symlink()
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "w.zarr"))[...], 0.0)


@pytest.mark.xdist_group("ownership")
def test_forked_children_leave_the_parents_session(child):
    tmp_path, report = child
    assert report["forks"] == {"exitcode": 0, "session": True, "sum": 15.0,
                               "values": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
                               "lazy": [0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]}, report["forks"]
    # and the parent cleaned up at its exit: its session, and the scratch dir it made
    assert not os.path.exists(tmp_path / "forked")


def _module_locks() -> dict:
    """Every lock jask keeps at module level, by its module and name."""
    import importlib
    import pkgutil

    import jask
    from jask.base import forks

    found = {}
    for info in pkgutil.walk_packages(jask.__path__, "jask."):
        if info.name.endswith("demo") or ".demo." in info.name:
            continue  # (runs its demo when imported as __main__ only, but imports plots)
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, forks._ForkSafe) or type(value).__name__ in (
                    "lock", "RLock", "_RLock", "Condition"):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_module_level_lock_is_renewed_in_a_forked_child():
    """A plain threading lock at module level would hang a forked child
    whenever another thread held it at the fork (jask.base.forks)."""
    from jask.base import forks

    plain = [name for name, value in _module_locks().items()
             if not isinstance(value, forks._ForkSafe)]
    assert not plain, f"module-level locks not made by jask.base.forks: {plain}"


def test_a_fork_while_other_threads_hold_every_lock_does_not_hang_the_child(small_budget):
    """The child has only the forking thread: a lock held by another one at
    the fork was never released there, and the child's first op hung (the
    registry's did). Every module-level lock is held at once by a thread of
    its own; the child takes each, then runs an op."""
    import threading

    locks = _module_locks()
    assert len(locks) >= 15  # the store's, the engine's, the counters' and the config's
    a = jask.from_numpy(np.arange(6.0, dtype=np.float32))
    # compiled here first: XLA's compiler threads are not in a forked child, so a
    # new compile there waits forever once JAX's backend has started in this
    # process (an earlier test's loader starts it; jask.base.forks)
    assert float(jask.sum(a + 1.0)) == 21.0
    release = threading.Event()
    holding = []

    def hold(lock, held):
        with lock:
            held.set()
            release.wait(30)

    for lock in locks.values():
        held = threading.Event()
        holder = threading.Thread(target=hold, args=(lock, held), daemon=True)
        holder.start()
        assert held.wait(10)
        holding.append(holder)
    try:
        pid = os.fork()
        if pid == 0:  # the child: each lock, one op, then out without the parent's atexit
            ok = False
            try:
                ok = all(lock.acquire(timeout=10) for lock in locks.values())
                for lock in locks.values():
                    lock.release()
                ok = ok and float(jask.sum(a + 1.0)) == 21.0
            finally:
                os._exit(0 if ok else 1)
        release.set()  # the parent's own threads go on: its op must not wait either
        for holder in holding:
            holder.join()
        code = wait_for_fork(pid, 60)
        assert code is not None, "the forked child hung on a lock another thread held"
        assert code == 0
        assert float(jask.sum(a + 1.0)) == 21.0
    finally:
        release.set()
