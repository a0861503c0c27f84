"""Locks a forked child can take.

``fork`` copies every lock in the state it is in, but only the forking
thread: a lock another thread of the parent held at that moment is never
released in the child, whose first op then waits for it forever (a
``multiprocessing`` "fork" worker, a notebook that forks, a test runner).
Every lock jask keeps at module level is made here, and each is replaced by
a new, free one in the child (``os.register_at_fork``) before anything else
runs there; the state the lock guarded is the module's to reset (a session
folder of the parent is not the child's).

What no lock here can renew: XLA's own threads. Once JAX's backend has
started in the parent (any op, even a ``device_put``), a compile in a forked
child waits forever for a compiler thread that is not there (JAX warns at
the fork), and a fresh backend in the child aborts on XLA's inherited
mutexes. A forked child runs the ops the parent already compiled; new work
belongs in a "spawn" or "forkserver" process; :func:`forked_after_jax` says
whether this process is such a child.

Example:
  >>> _lock = lock()
  >>> with _lock:
  ...     pass
"""
from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Any, Callable

__all__ = ["lock", "rlock", "condition", "made", "pid", "forked_after_jax"]

_made: weakref.WeakSet[_ForkSafe] = weakref.WeakSet()
_pid = os.getpid()
_forked_after_jax = False


class _ForkSafe:
    """A lock (or condition) renewed in a forked child; otherwise the lock
    it holds, with its methods."""

    __slots__ = ("_factory", "_inner", "__weakref__")

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self._inner = factory()
        _made.add(self)

    def __enter__(self):
        return self._inner.__enter__()

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def __getattr__(self, name: str):  # acquire, release, wait, notify_all, ...
        return getattr(self._inner, name)

    def renew(self) -> None:
        self._inner = self._factory()


def lock() -> Any:
    """A ``threading.Lock`` a forked child gets free."""
    return _ForkSafe(threading.Lock)


def rlock() -> Any:
    """A ``threading.RLock`` a forked child gets free."""
    return _ForkSafe(threading.RLock)


def condition() -> Any:
    """A ``threading.Condition`` a forked child gets free (no waiter: the
    parent's waiting threads are not in the child)."""
    return _ForkSafe(threading.Condition)


def made() -> list:
    """Every lock made here that is still in use."""
    return list(_made)


def pid() -> int:
    """This process's id, without a system call (``os.getpid`` makes one each
    time, dearer under gVisor, a TPU host's sandbox), set anew in a forked
    child: what a loop may ask once an item."""
    return _pid


def forked_after_jax() -> bool:
    """Whether this process was forked (or its parent, ...) from one where
    JAX's backend had started: it cannot compile (see above)."""
    return _forked_after_jax


def _jax_started() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    # (read without its lock, which another thread of the parent may have held at the fork)
    return bool(getattr(bridge, "_backends", None))


def _renew_all() -> None:
    global _pid, _forked_after_jax
    _pid = os.getpid()
    _forked_after_jax = _forked_after_jax or _jax_started()
    for each in list(_made):
        each.renew()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_all)
