"""Passes over a jaxpr holding jask's ops, each a jaxpr -> jaxpr function in a
module of its own, told about jask's primitives by :class:`Rules`.

Before JAX lowers a jaxpr (:mod:`.prune`, in order): dead code goes,
:mod:`.common_values` computes a value written twice once,
:mod:`.centred_moments` computes ``sum(square(x - mean(x)))`` in one pass,
:mod:`.defer` moves value ops to their first reader and merges those
waiting together (one pass over the data; :mod:`.linear` takes waiting
scalars out of linear readers, :mod:`.host_arithmetic` finishes their sums
in float64), and :mod:`.forget` hands a mutating op the values it would
compute from what it overwrites. For the device, :mod:`.inline` first
writes out a step's nested calls holding jask's ops, and after the rewrite
:mod:`.pieces` cuts the compiled step where its band groups sit, so that a
host driver streams their data to the device between compiled pieces. :mod:`.equations` holds
what the passes ask of one equation.
"""
from jask.core.rewrite.pieces import Loop, Piece, Split, run_split, split, take_over_jit
from jask.core.rewrite.prune import prune_before_lowering, rewritten_jaxpr
from jask.core.rewrite.rules import Rules

__all__ = ["Loop", "Piece", "Rules", "Split", "split", "run_split", "take_over_jit",
           "prune_before_lowering", "rewritten_jaxpr"]
