"""Planning, all of it: which tiles each op computes, how its output is
chunked, how many tasks it runs and what they hold, before anything is
read or written.

* :mod:`~jask.engine.plan.tiles`: the plan type (:class:`Plan`) and the
  blockwise tile planner every copy-like op builds on (:func:`plan_blockwise`);
* :mod:`~jask.engine.plan.ops`: one planner per kind of op (views,
  transposed copies and copies (``update_``'s tiles), ``save``, whole lanes
  (a sort's, an FFT's); the op families in :mod:`jask.engine.ops` plan there:
  elementwise ops, gathers, scans, products, layout, creation, mutation, the
  FFT);
* :mod:`~jask.engine.plan.bands`: the band height of a band group
  (:mod:`jask.engine.fusion`).

An op's work (:mod:`jask.engine.work`) calls its planner, then builds and
runs its graph; the same planner answers :meth:`Work.plan
<jask.engine.work.Work.plan>` and so a primitive's ``plan`` and
:func:`jask.visualize`, without running anything.
"""
from jask.engine.plan import bands, ops
from jask.engine.plan.tiles import Operand, Plan, operand_tile, plan_blockwise

__all__ = ["Operand", "Plan", "bands", "operand_tile", "ops", "plan_blockwise"]
