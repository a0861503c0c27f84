"""What ``DiskArray.to_memmap`` hands out: the store's ``zarr.Array``, whose
writes first compute what reads the store's current values.

An eager op's result may still be pending (:mod:`jask.engine.lazy`) and a
view (``x[:2]``, ``x.T``) reads its base's store: both promise the values
their call saw. A write through the array handed out therefore first
computes the pending results that read the store and copies its views
(:func:`jask.store.registry.before_mutation`), each time, since ops called
after ``to_memmap`` may read the store too. Every writing method of
``zarr.Array`` goes through one of the methods below (``__setitem__``,
``oindex``, ``vindex`` and ``blocks`` call them); ``attrs`` through
``update_attributes``.
"""
from __future__ import annotations

import functools

import zarr

from . import registry, tiles

__all__ = ["open_writable"]


class WritableView(zarr.Array):
    """A ``zarr.Array`` of a jask store whose writes keep jask's pending
    results and views at the values their calls saw."""

    _jask_path: str = ""

    def update_attributes(self, *args, **kwargs):
        registry.before_mutation(self._jask_path)
        return _watched(super().update_attributes(*args, **kwargs), self._jask_path)


def _computing_first(name: str):
    write = getattr(zarr.Array, name)

    @functools.wraps(write)
    def computing_first(self, *args, **kwargs):
        registry.before_mutation(self._jask_path)
        return write(self, *args, **kwargs)
    return computing_first


#: Every other method of ``zarr.Array`` that writes the store.
_WRITES = ("set_basic_selection", "set_orthogonal_selection", "set_mask_selection",
           "set_coordinate_selection", "set_block_selection", "resize", "append")
for _name in _WRITES:
    setattr(WritableView, _name, _computing_first(_name))


def _watched(arr: zarr.Array, path: str) -> WritableView:
    view = WritableView(arr._async_array)
    view._jask_path = path
    return view


def open_writable(path: str) -> WritableView:
    """The read/write ``zarr.Array`` of the store at ``path`` for a user
    (see the module's notes).

    Example:
      >>> import numpy as np, jask
      >>> a = jask.from_numpy(np.zeros(3, np.float32))
      >>> b = a + 1                     # pending: computed when read
      >>> open_writable(a.filename)[:] = 5
      >>> b.to_numpy()                  # what the call saw
      array([1., 1., 1.], dtype=float32)
    """
    return _watched(tiles.open_user_array(path), path)
