"""The public functions: each checks its arguments, then binds a primitive.

The types they take and return are core's, named here for the modules built
on this layer (:mod:`jask.optim`, :mod:`jask.nn`).
"""
from jask.core._jax_internals import is_differentiated
from jask.core.array import DiskArray, DiskArrayType, disk_type

__all__ = ["DiskArray", "DiskArrayType", "disk_type", "is_differentiated"]
