"""Progress bars for ops that run many tiles.

Off by default (and so silent in tests). Switch it on for the whole process
with :func:`show_progress`, or for a block of code with :func:`progress_bars`::

    jask.show_progress(True)          # every op with enough tiles shows a bar
    with jask.progress_bars(min_tasks=1):  # or only here
        step(w)

Each op that runs at least ``min_tasks`` block tasks draws one bar, named
after the op (``jask-dot``, ``jask-add``...), with tqdm: a text bar in a
terminal, a widget in a notebook when ``ipywidgets`` is installed (text
otherwise). Under ``jax.jit`` an op's tiles run inside a JAX callback on one
of XLA's threads, so the switch is process-wide, not per thread: a bar
appears whichever thread runs the op. With a ``dask.distributed`` client
the bar counts the op's output tiles as they complete (a reduction has one)
and names the client's dashboard, which shows every task as it runs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import IO, Iterator

import tqdm.std
from dask.utils import key_split

from jask.base import counters, forks
from jask.engine.cluster import submitted

__all__ = ["show_progress", "progress_bars", "progress_enabled"]


@dataclasses.dataclass(frozen=True)
class _Settings:
    enabled: bool = False
    min_tasks: int = 16
    file: IO | None = None


_lock = forks.lock()
_settings = _Settings()


def show_progress(enabled: bool = True, *, min_tasks: int = 16,
                  file: IO | None = None) -> bool:
    """Switch progress bars on or off for every op in this process.

    Args:
      enabled: show bars (``True``) or not (``False``, the default state).
      min_tasks: draw a bar only for ops that run at least this many block
        tasks, so small ops stay quiet.
      file: where text bars go; ``None`` means ``sys.stderr`` at draw time.

    Returns:
      Whether bars were on before the call.

    Example:
      >>> import io, numpy as np, jask
      >>> out = io.StringIO()
      >>> jask.show_progress(True, min_tasks=1, file=out)
      False
      >>> _ = jask.add(jask.from_numpy(np.ones(4)), jask.from_numpy(np.ones(4))).block_until_ready()
      >>> "jask-add" in out.getvalue()
      True
      >>> jask.show_progress(False)
      True
    """
    global _settings
    if min_tasks < 1:
        raise ValueError(f"show_progress: min_tasks must be at least 1, got {min_tasks}")
    with _lock:
        previous = _settings.enabled
        _settings = _Settings(bool(enabled), int(min_tasks), file)
    return previous


@contextlib.contextmanager
def progress_bars(enabled: bool = True, *, min_tasks: int = 16,
             file: IO | None = None) -> Iterator[None]:
    """Show progress bars inside a ``with`` block, then restore the setting.

    Args:
      enabled: show bars inside the block.
      min_tasks: see :func:`show_progress`.
      file: see :func:`show_progress`.

    Example:
      >>> import io, numpy as np, jask
      >>> out = io.StringIO()
      >>> with jask.progress_bars(min_tasks=1, file=out):
      ...     total = jask.sum(jask.from_numpy(np.ones(5)))
      >>> "jask-sum" in out.getvalue(), jask.progress_enabled()
      (True, False)
    """
    global _settings
    with _lock:
        previous = _settings
        _settings = _Settings(bool(enabled), int(min_tasks), file)
    try:
        yield
    finally:
        with _lock:
            _settings = previous


def progress_enabled() -> bool:
    """Whether progress bars are on.

    Example:
      >>> import jask
      >>> jask.progress_enabled()
      False
    """
    return _settings.enabled


_STAGES = ("-result", "-combine", "-partial")


def op_name(key) -> str:
    """The op a task key belongs to, as the dashboard groups it (the bar's name).

    Example:
      >>> from dask.base import tokenize
      >>> t = tokenize(1)
      >>> op_name((f"jask-dot-{t}", 0, 1)), op_name((f"jask-sum-result-{t}",)), op_name("x")
      ('jask-dot', 'jask-sum', 'x')
    """
    name = key_split(key)
    for stage in _STAGES:
        if name.endswith(stage):
            return name[:-len(stage)]
    return name


def _tqdm_class():
    """tqdm's notebook widget inside a Jupyter kernel with ipywidgets, else text."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is not None and "IPKernelApp" in getattr(shell, "config", {}):
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm as notebook_tqdm
            return notebook_tqdm
        except ImportError:
            pass
    return tqdm.std.tqdm


def bar(graph: dict, keys: list):
    """A tqdm bar for running ``graph`` if progress is on and it is big enough.

    Returns ``None`` when no bar should be drawn. The caller updates it once
    per finished task and closes it.

    Example:
      >>> import io, jask
      >>> bar({"a": 1}, ["a"]) is None
      True
      >>> key = ("jask-add-1f2e3d4c5b6a79881f2e3d4c5b6a7988", 0)
      >>> with jask.progress_bars(min_tasks=1, file=io.StringIO()):
      ...     b = bar({key: 1}, [key])
      >>> b.total, b.desc
      (1, 'jask-add')
      >>> b.close()
    """
    settings = _settings
    if not settings.enabled or len(graph) < settings.min_tasks:
        return None
    cls = _tqdm_class()
    kwargs = {} if cls is not tqdm.std.tqdm else {"file": settings.file or sys.stderr}
    drawn = cls(total=len(graph), desc=op_name(keys[0]) if keys else "jask", unit="task",
                leave=True, dynamic_ncols=True, **kwargs)
    drawn.jask_counted = counters.totals()
    return drawn


def close(progress_bar) -> None:
    """Close a bar from :func:`bar`, ending it with the bytes read and
    written while it ran (every op of the process in that time).

    Example:
      >>> import io, jask
      >>> key = ("jask-add-1f2e3d4c5b6a79881f2e3d4c5b6a7988", 0)
      >>> out = io.StringIO()
      >>> with jask.progress_bars(min_tasks=1, file=out):
      ...     b = bar({key: 1}, [key])
      >>> close(b)
      >>> "read 0 B, wrote 0 B" in out.getvalue()
      True
    """
    start = getattr(progress_bar, "jask_counted", None)
    if start is not None:
        progress_bar.set_postfix_str(counters.describe(*counters.since(start)), refresh=False)
    progress_bar.close()


def local_callbacks(progress_bar) -> list:
    """Callbacks for Dask's local schedulers that advance ``progress_bar``.

    Passed per run (not registered globally), so bars of ops running at the
    same time on different threads never count each other's tasks.

    Example:
      >>> import dask.threaded, io, tqdm
      >>> b = tqdm.tqdm(total=2, file=io.StringIO())
      >>> graph = {"a": (abs, -1), "b": (abs, -2)}
      >>> dask.threaded.get(graph, ["a", "b"], callbacks=local_callbacks(b))
      (1, 2)
      >>> b.n
      2
    """
    def start_state(dsk, state):
        progress_bar.reset(total=max(len(dsk) - len(state["cache"]), 1))

    def posttask(key, result, dsk, state, worker_id):
        progress_bar.update(1)

    def finish(dsk, state, errored):
        if not errored:
            progress_bar.update(progress_bar.total - progress_bar.n)
    return [(None, start_state, None, posttask, finish)]


def run_distributed(progress_bar, client, graph: dict, keys: list) -> list:
    """Submit to a distributed client and count output tiles as they finish.

    The scheduler, not this process, sees the other tasks finish, so the bar
    says where they show: the dashboard's address (or that it is off).
    """
    from distributed import as_completed
    # (dashboard_link is made from the config's template even with no dashboard running)
    running = "dashboard" in client.scheduler_info().get("services", {})
    where = f"every task: {client.dashboard_link}" if running else "no dashboard to show every task"
    progress_bar.set_description(f"{progress_bar.desc} (output tiles; {where})", refresh=False)
    progress_bar.reset(total=len(keys))
    futures = client.get(submitted(graph), keys, sync=False)
    for _ in as_completed(futures):
        progress_bar.update(1)
    return list(client.gather(futures))
