"""Ctrl-C during an op: a stop between tasks, never an interrupt lost.

Python raises ``KeyboardInterrupt`` wherever the main thread is when the
SIGINT handler runs, inside finalizers and gc callbacks too, and drops one
raised there ("Exception ignored in: <finalize object ...>"): the op then
ran to its end. While an op runs (:func:`deferred`), a SIGINT only marks
the op as interrupted; the op raises ``KeyboardInterrupt`` itself at its
next stop (:func:`check`, between tasks) or when it ends. A second Ctrl-C
before that raises at once, as Python would: the user insists.

Inside a compiled call, JAX turns whatever a callback raises into a
``JaxRuntimeError``, a Ctrl-C included. :func:`raise_at_caller` makes the
call raise ``KeyboardInterrupt`` where it returns to its caller instead:
jask's callbacks call it when they stop, and so does jask's SIGINT handler
when the press lands in JAX's own code around a callback (its trampoline,
before jask's body starts), where nothing of jask's is running to defer it.
That handler is Python's own otherwise; :func:`install` puts it in place of
Python's (never of a program's own, or of ``SIG_IGN``), at import and at
each op, since a notebook kernel puts Python's back for each cell.

Only the main thread receives signals.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import threading

__all__ = ["deferred", "check", "immediate", "install", "raise_at_caller", "clear_caller_hook"]

_pressed = False  # a Ctrl-C came during the op and has not been raised yet
_depth = 0        # nested deferred() blocks of the main thread


def _note(signum, frame) -> None:
    global _pressed
    if _pressed:
        _pressed = False
        raise_at_caller(frame)
        raise KeyboardInterrupt
    _pressed = True


def _python_handler(signum, frame) -> None:
    """Python's own SIGINT handler, raising at the caller of a compiled call
    as well (see the module's notes)."""
    raise_at_caller(frame)
    raise KeyboardInterrupt


def _pythons(handler) -> bool:
    return handler is signal.default_int_handler or handler is _python_handler


def install() -> None:
    """Put jask's SIGINT handler in place of Python's own, in the main thread."""
    if _main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _python_handler)


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
    if _depth or not _main_thread():
        yield  # nested, or another thread: as it is
        return
    install()
    before = signal.getsignal(signal.SIGINT)
    if not _pythons(before):
        yield  # a program's own handler: as it is
        return
    _depth, _pressed = 1, False
    signal.signal(signal.SIGINT, _note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
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
    signal.signal(signal.SIGINT, _python_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _note)


# --- KeyboardInterrupt, not JAX's wrapper of it -----------------------------------------

def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) + os.sep if spec and spec.origin else "\0"


_API_DIRS = tuple(_package_dir(n) for n in ("jax", "jaxlib", "jask"))
#: the standard library's own modules (functools' caches, contextlib): frames
#: JAX calls through, never the user's code (not its site-packages)
_STDLIB = os.path.dirname(os.__file__) + os.sep
_SITE = tuple(p + os.sep for p in sys.path if "site-packages" in p)
_hook: list = []


def raise_at_caller(frame=None) -> None:
    """Make the compiled call running ``frame`` (default: the caller's)
    raise KeyboardInterrupt, not the JaxRuntimeError JAX makes of it.

    The call goes through JAX's Python API (programs with ordered effects
    skip JAX's C++ fast path). A one-shot profile hook waits for the
    exception to leave the outermost frame of that API, the one the user's
    code called, and replaces it there, as an exception raised by a profile
    hook does. Nothing is installed outside JAX's and jask's code, or when a
    profiler is already running; the hook is removed at jask's next op if
    the call never returns through it (:func:`clear_caller_hook`).
    """
    boundary = _api_boundary(sys._getframe(1) if frame is None else frame)
    if boundary is None or sys.getprofile() is not None:
        return

    def hook(frame, event, arg):
        if frame is boundary and event == "return":
            clear_caller_hook()
            raise KeyboardInterrupt
    _hook[:] = [hook]
    sys.setprofile(hook)


def _api_boundary(frame):
    """The innermost JAX (or jask) frame called by code that is neither."""
    while frame is not None and frame.f_back is not None:
        if (frame.f_code.co_filename.startswith(_API_DIRS)
                and not _caller(frame).f_code.co_filename.startswith(_API_DIRS)):
            return frame
        frame = frame.f_back
    return None


def _caller(frame):
    """The frame that called ``frame``, looking through the standard library's
    (JAX calls its own functions through ``functools``' caches: a Ctrl-C landing
    under one once took the JAX function behind the cache for the boundary)."""
    caller = frame.f_back
    while caller.f_back is not None and _in_stdlib(caller.f_code.co_filename):
        caller = caller.f_back
    return caller


def _in_stdlib(filename: str) -> bool:
    return filename.startswith(_STDLIB) and not filename.startswith(_SITE)


def clear_caller_hook() -> None:
    """Remove the hook :func:`raise_at_caller` set, if it is still there."""
    if _hook and sys.getprofile() is _hook[0]:
        sys.setprofile(None)
    _hook.clear()
