"""Several threads, several processes: correct results, untorn stores, and no
process deletes another's stores or the user's own files.

Every scenario runs real child processes and checks from outside with plain
zarr and the file system.
"""
import json
import os
import shutil
import signal
import subprocess

import numpy as np
import zarr

from helpers import last_json, script_command


def _child(*args, **kwargs):
    return subprocess.Popen(script_command("concurrency_child.py", *args), text=True,
                            stdout=subprocess.PIPE, **kwargs)


def test_ops_from_several_threads_are_correct(tmp_path):
    out, _ = _child("threads", tmp_path / "scratch").communicate(timeout=300)
    assert last_json(out) == {"errors": []}


def _identity(path) -> tuple:
    """Which folder is at ``path``: its inode alone is not enough, as the
    folder an update_ swapped out is deleted and its inode number can come
    back for the next staging folder (two swaps during one read then looked
    like none); a folder's ctime changes when it is renamed into place."""
    st = os.stat(path)
    return st.st_ino, st.st_ctime_ns


def test_two_processes_updating_one_store_never_tear_it(tmp_path):
    """Writers of one store take turns (a lock): a reader never sees it torn or
    missing, and the last update_ to finish wins."""
    store = str(tmp_path / "shared.zarr")
    zarr.create_array(store, data=np.full((120, 90), -1.0), chunks=(32, 32), zarr_format=3)
    writers = [_child("updater", store, first, 8) for first in (1000, 2000)]
    reads = 0
    while any(w.poll() is None for w in writers):
        before = _identity(store)
        values = np.unique(zarr.open_array(store, mode="r")[:])    # never missing
        if _identity(store) != before:
            continue  # swapped while plain zarr read chunk by chunk: a mixed read, not a torn store
        assert len(values) == 1, values                              # never torn
        reads += 1
    assert all(w.wait() == 0 for w in writers)
    final = np.unique(zarr.open_array(store, mode="r")[:])
    assert final.tolist() in ([1007.0], [2007.0])
    assert reads > 0
    assert [n for n in os.listdir(tmp_path) if n.startswith(".shared")] == []


def _unshare_prefix():
    """Run a child in its own PID namespace (its PID means nothing to us), if we may."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--pid", "--fork", "true"]).returncode == 0:
        return [unshare, "--pid", "--fork"]
    return []


def test_sessions_sharing_a_scratch_folder_keep_their_stores(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "notes.txt").write_text("the user's own file")
    (scratch / "session-notes").mkdir()              # the user's own folder
    (scratch / "session-notes" / "a.txt").write_text("mine")
    # A live session whose PID this process cannot see (another PID namespace,
    # as in another container): the old PID check judged it dead.
    prefix = _unshare_prefix()
    holder = subprocess.Popen(prefix + script_command("concurrency_child.py", "holder", scratch),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    paths = json.loads(holder.stdout.readline())
    # A session killed without cleaning up: its folder must go.
    victim = _child("holder", scratch, stdin=subprocess.PIPE)
    victim_paths = json.loads(victim.stdout.readline())
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert all(os.path.isdir(p) for p in victim_paths)

    assert _child("starter", scratch).wait(timeout=120) == 0

    assert not any(os.path.exists(p) for p in victim_paths)         # dead: removed
    for p in paths:                                                   # alive: kept
        assert os.path.isdir(p)
    holder.stdin.write("check\n")
    holder.stdin.flush()
    assert json.loads(holder.stdout.readline()) is True
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0
    assert (scratch / "notes.txt").read_text() == "the user's own file"
    assert (scratch / "session-notes" / "a.txt").read_text() == "mine"
    left = sorted(os.listdir(scratch))
    assert left == ["notes.txt", "session-notes"], left               # each session cleaned up
