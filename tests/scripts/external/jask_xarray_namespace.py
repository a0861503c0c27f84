"""The name external_suites.py gives xarray's test_duck_array_wrapping.py for jask.

That test file looks a namespace up by module name and takes its array type
and constructor as attributes of the module (``jax.numpy.ndarray``,
``jax.numpy.asarray``). ``jask.array_api`` has ``asarray`` but does not
export its array type, so this module is ``jask.array_api`` plus
``DiskArray``; every other name resolves to ``jask.array_api``'s.
"""
import jask.array_api as _xp
from jask import DiskArray

asarray = _xp.asarray

__all__ = ["DiskArray", "asarray"]


def __getattr__(name):
    return getattr(_xp, name)
