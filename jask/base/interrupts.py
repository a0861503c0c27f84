"""Ctrl-C during an op: a stop between tasks, never an interrupt lost.

Python raises ``KeyboardInterrupt`` wherever the main thread is when the
SIGINT handler runs, inside finalizers and gc callbacks too, and drops one
raised there ("Exception ignored in: <finalize object ...>"): the op then
ran to its end. While an op runs (:func:`deferred`), a SIGINT only marks
the op as interrupted; the op raises ``KeyboardInterrupt`` itself at its
next stop (:func:`check`, between tasks) or when it ends. A second Ctrl-C
before that raises at once, as Python would: the user insists.

Only the main thread receives signals, and only Python's own handler is
replaced: a program that installed its own SIGINT handler (or ignores
SIGINT) keeps it.
"""
from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["deferred", "check", "immediate"]

_pressed = False  # a Ctrl-C came during the op and has not been raised yet
_depth = 0        # nested deferred() blocks of the main thread


def _note(signum, frame) -> None:
    global _pressed
    if _pressed:
        _pressed = False
        raise KeyboardInterrupt
    _pressed = True


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred():
    """Run the block with Ctrl-C turned into a stop at its next :func:`check`
    or at its end, where ``KeyboardInterrupt`` is raised.

    Example:
      >>> import os, signal
      >>> try:
      ...     with deferred():
      ...         os.kill(os.getpid(), signal.SIGINT)  # lands here: noted only
      ...         print("the block goes on to a stop")
      ... except KeyboardInterrupt:
      ...     print("raised at its end")
      the block goes on to a stop
      raised at its end
    """
    global _depth, _pressed
    pythons = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if _depth or not _main_thread() or not pythons:
        yield  # nested, another thread, or a handler that is not Python's: as it is
        return
    _depth, _pressed = 1, False
    signal.signal(signal.SIGINT, _note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _depth = 0
        if _pressed:
            _pressed = False
            raise KeyboardInterrupt


def check() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed during this
    :func:`deferred` block (a stop: call it between tasks, in the main thread)."""
    global _pressed
    if _pressed and _main_thread():
        _pressed = False
        raise KeyboardInterrupt


@contextlib.contextmanager
def immediate():
    """Let Ctrl-C raise at once inside a :func:`deferred` block, for a wait
    with no stops of jask's own (a ``distributed`` client's ``get``)."""
    if not _depth or not _main_thread():
        yield
        return
    check()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _note)
