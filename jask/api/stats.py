"""What jask has read and written: ``jask.stats``, ``jask.track``, ``jask.reset_stats``.

The counting itself is :mod:`jask.base.counters`; these functions first let
the compiled calls dispatched so far finish their I/O, so a count read right
after a jitted step includes the step.
"""
from __future__ import annotations

import jax

from jask.base import counters
from jask.base.counters import Stats
from jask.store import registry

__all__ = ["stats", "reset_stats", "track", "Track"]


def _wait_for_programs() -> None:
    """Let the compiled calls dispatched so far finish their I/O (not from
    inside one of their callbacks, which would wait for itself)."""
    if not registry.in_callback():
        jax.effects_barrier()


class Track(counters.BlockStats):
    """The counts of one ``with`` block (see :func:`track`); leaving the block
    waits for the compiled calls still running."""

    def __exit__(self, *exc) -> None:
        _wait_for_programs()
        super().__exit__(*exc)


def stats() -> Stats:
    """What jask has read and written in this process so far.

    Counts every tile jask's ops read from and write to stores, per op and
    per store, since the process started or :func:`reset_stats`.

    Returns:
      A :class:`~jask.Stats` snapshot: totals (``bytes_read``, ``bytes_written``,
      ``stored_read``, ``stored_written``, ``tiles_read``, ``tiles_written``,
      ``graphs``, ``tasks``), ``by_op`` and ``by_store`` (dicts of
      :class:`Counts`), ``passes(x)``; printing it shows a table.

    Example:
      >>> import numpy as np, jask
      >>> jask.reset_stats()
      >>> x = jask.from_numpy(np.ones((100, 10), np.float32))
      >>> total = jask.sum(x)
      >>> s = jask.stats()
      >>> s.passes(x), s.by_op["sum"].bytes_read, s.by_op["from_numpy"].bytes_written
      (1.0, 4000, 4000)
    """
    _wait_for_programs()
    return counters.snapshot()


def reset_stats() -> None:
    """Set the counters of :func:`stats` back to zero (open :func:`track`
    blocks keep their own counts).

    Example:
      >>> import jask
      >>> jask.reset_stats()
      >>> jask.stats().bytes_read
      0
    """
    _wait_for_programs()
    counters.clear()


def track() -> Track:
    """Count what jask reads and writes inside a ``with`` block.

    Use it around one training step to see how many passes over the data
    the step makes: ``t.passes(X)`` is the bytes read from ``X``'s store
    divided by ``X.nbytes`` (1.0: every element read once). Everything jask
    does in the process while the block runs is counted, on any thread;
    on leaving the block, compiled calls still running are waited for.

    Returns:
      A :class:`Track` (a :class:`Stats`): ``bytes_read``,
      ``bytes_written``, ``graphs``, ``tasks``, ``by_op``, ``by_store``,
      ``passes(x)``.

    Example:
      >>> import numpy as np, jax, jask
      >>> X = jask.from_numpy(np.ones((64, 8), np.float32))
      >>> w = jax.numpy.ones(8, np.float32)
      >>> grad = jax.jit(jax.grad(lambda w: jask.sum(jask.square(X @ w))))
      >>> with jask.track() as t:
      ...     g = grad(w)
      >>> t.passes(X), t.by_op["fused_dot"].bytes_read >= X.nbytes, t.graphs
      (1.0, True, 1)
    """
    return Track()


