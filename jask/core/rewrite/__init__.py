"""Passes over a compiled step's jaxpr (after :mod:`jask.core._jax_internals`'
rewrite): :mod:`.pieces` cuts it where its band groups sit, so that a host
driver streams their data to the device between compiled pieces."""
from jask.core.rewrite.pieces import Loop, Piece, Split, run_split, split, take_over_jit

__all__ = ["Loop", "Piece", "Split", "split", "run_split", "take_over_jit"]
