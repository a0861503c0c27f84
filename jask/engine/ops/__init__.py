"""Ops filed by what they are: one module per op family (issue 47).

* :mod:`~jask.engine.ops.reductions`: the reducers, :data:`REDUCERS` (how a
  reduction reduces a tile, combines partials and finishes).
* :mod:`~jask.engine.ops.elementwise`: elementwise ops, broadcasts and
  reductions (one blockwise op), its planner and work; the tile kernels and
  graphs the band groups share stay in :mod:`jask.engine.blockwise`.
* :mod:`~jask.engine.ops.gathers`: gathers and sorts (the outer gather and its
  scatter-add, sorting along an axis, searchsorted), each op's planner, work
  and graph.
* :mod:`~jask.engine.ops.scans`: cumulative sums and products in two passes
  over tiles, their planner, work and graphs.
* :mod:`~jask.engine.ops.products`: products (a matrix product, and one pass
  with several outputs), each op's planner, work, graph and tasks.
* :mod:`~jask.engine.ops.layout`: transposes, slices (and a slice's
  gradient), reshapes and joins: a view where one stands, else a copy's
  planner, work, graph and block task.
* :mod:`~jask.engine.ops.creation`: a store written from an in-memory array,
  and one read whole into memory, each one call in the calling thread.
* :mod:`~jask.engine.ops.mutation`: writes in place (``update_``, ``x[key] =
  v``): each staged beside the target and swapped in atomically, a planner
  and work, and for a key its graph and block task.
* :mod:`~jask.engine.ops.fft`: one axis's discrete Fourier transform, whole
  lanes per tile: its work, graph and block task.
"""
