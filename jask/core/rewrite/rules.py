"""What the rewrite passes are told about jask's primitives (:class:`Rules`).

The passes read and rebuild jaxprs; which equation is whose, and what an op
of jask's may become (merged, made as a store, distributed over terms), is
the primitives' to say (:mod:`jask.core.primitives` installs its rules with
:func:`jask.core.rewrite.prune_before_lowering`). The defaults say "no" to
every question, so a test can name only the rules its pass reads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Rules"]


def _never(*args) -> Any:
    return None


@dataclass(frozen=True)
class Rules:
    """Each field is a function of hijax primitives (``prim``: the instance a
    ``call_hi_primitive`` equation binds) or of their operands' avals.

    * ``is_ours(prim)``: one of jask's ops (``prim`` may be None).
    * ``movable(prim)``: a value op, computing an in-memory value from
      stores; it may run later in program order.
    * ``mutates(prim)``: an op that changes a store (``update_``): nothing
      moves across it.
    * ``merge(prims, keep_avals, *post)``: the one op computing ``prims``'
      values in one pass, also taking stores of ``keep_avals`` (claimed by
      the caller) and finishing ``post``'s arithmetic on the host.
    * ``forgetting(prim, avals)``: ``prim`` (one that mutates) also given
      values of ``avals`` made earlier and never read again.
    * ``linear(prim)``: the groups of operand positions an op is jointly
      linear in (dicts position -> sign; see :func:`.linear.linear_terms`).
    * ``as_store(prim)``: a row-wise value op made as a store instead, or None.
    * ``reading_store(prim, k)``: the op taking a store as operand ``k``, or None.
    * ``broadcast(prim, k)``: the op broadcasting operand ``k``'s unit to the
      result's shape (``r - m`` with ``m`` a scalar), or None.
    * ``lift(name, params, avals, out)``: JAX's elementwise ``name`` on stores
      as ``(op of ours, the order it takes the operands in)``, or None.
    * ``centred(reduce, square, sub, mean)``: the op computing
      ``reduce(square(x - mean(x)))`` from ``x`` alone, or None.
    * ``widen(prim)``: ``prim`` keeping float64 partials (its terms may cancel).
    * ``unread(prim)``: the operand positions an op reads for their type only.
    * ``pure(prim)``: the op's outputs are a function of its operands alone.
    * ``refused(name)``: the message for JAX's primitive ``name`` given a
      hi-typed operand it cannot lower; None: not checked.
    """

    is_ours: Callable[[Any], bool] = lambda prim: False
    movable: Callable[[Any], bool] = lambda prim: False
    mutates: Callable[[Any], bool] = lambda prim: False
    merge: Callable[..., Any] = _never
    forgetting: Callable[[Any, list], Any] = _never
    linear: Callable[[Any], Any] = lambda prim: ()
    as_store: Callable[[Any], Any] = _never
    reading_store: Callable[[Any, int], Any] = _never
    broadcast: Callable[[Any, int], Any] = _never
    lift: Callable[..., Any] = _never
    centred: Callable[..., Any] = _never
    widen: Callable[[Any], Any] = lambda prim: prim
    unread: Callable[[Any], Any] = lambda prim: ()
    pure: Callable[[Any], bool] = lambda prim: False
    refused: Callable[[str], str] | None = None
