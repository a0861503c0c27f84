"""Activations for DiskArrays and in-memory arrays, as in ``jax.nn``.

Each is a row of the op table (:mod:`jask.core.ufuncs`): one pass over the data,
differentiable, and ``jax.nn``'s own function when no operand is on disk.
"""
from jask.api.elementwise import NN_FUNCTIONS

sigmoid = NN_FUNCTIONS["sigmoid"]
relu = NN_FUNCTIONS["relu"]
softplus = NN_FUNCTIONS["softplus"]

__all__ = ["sigmoid", "relu", "softplus"]
