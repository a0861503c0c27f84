"""Ops filed by what they are: one module per op family (issue 47).

* :mod:`~jask.engine.ops.reductions`: the reducers, :data:`REDUCERS` (how a
  reduction reduces a tile, combines partials and finishes).
"""
