"""How an op's disk work runs: now, or from inside a compiled program.

Eagerly (no trace active) the work runs at once and its store is owned by
the DiskArray returned. Inside a trace the work is staged as an *ordered*
``io_callback`` taking the input handles (and any scalar operands) and
returning the handle of the store it wrote, so disk effects keep program
order and a compiled call's outputs are fresh stores on every call.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np
from jax.experimental import io_callback

from jask import storage
from jask._jax_internals import is_eager
from jask.array import HANDLE_DTYPE, DiskArray, DiskArrayType
from jask.config import Config, get_config
from jask.lifetime import collect_if_idle

#: work(input stores, scalar operands as numpy, config) -> output store
StoreWork = Callable[[Sequence[storage.StoreSpec], Sequence[np.ndarray], Config], storage.StoreSpec]
#: work(input stores, scalar operands as numpy, config) -> numpy value
ValueWork = Callable[[Sequence[storage.StoreSpec], Sequence[np.ndarray], Config], np.ndarray]


def _handles(arrays: Sequence[DiskArray]) -> list:
    return [x._handle if x._owner is None else np.asarray(x._handle, HANDLE_DTYPE)
            for x in arrays]


def _resolve(args, n_arrays: int):
    stores = [storage.spec(h) for h in args[:n_arrays]]
    scalars = [np.asarray(s) for s in args[n_arrays:]]
    return stores, scalars


def _call(run, result: jax.ShapeDtypeStruct, arrays: Sequence[DiskArray], scalars: Sequence):
    """``run(*handles, *scalars, pending=...)`` now, or staged as an ordered callback."""
    if is_eager():
        collect_if_idle()
        return run(*[x._handle for x in arrays], *scalars, pending=False)

    def callback(*args):
        with storage.callback_scope():
            return np.asarray(run(*args, pending=True), result.dtype)

    return io_callback(callback, result, *_handles(arrays), *scalars, ordered=True)


def to_store(work: StoreWork, arrays: Sequence[DiskArray], scalars: Sequence,
             out_aval: DiskArrayType, config: Config | None) -> DiskArray:
    """Run ``work`` producing a store; return it as a DiskArray."""
    n = len(arrays)

    def run(*args, pending: bool):
        stores, values = _resolve(args, n)
        stamps = storage.stamp(stores)
        out = work(stores, values, config or get_config())
        try:  # (update_ replaced its own target: that is no other writer)
            storage.check_unchanged([s for s in stamps if s[0] != out.path], "jask")
        except storage.StoreChangedError:
            if not out.handle:
                storage.discard(out)
            raise
        if not out.handle:  # a new store (update_ returns its target's)
            out = storage.register(out, pending=pending)
        return out.handle

    handle = _call(run, jax.ShapeDtypeStruct((), HANDLE_DTYPE), arrays, scalars)
    return DiskArray._from_handle(handle, out_aval)


def to_value(work: ValueWork, arrays: Sequence[DiskArray], scalars: Sequence,
             result: jax.ShapeDtypeStruct, config: Config | None) -> jax.Array:
    """Run ``work`` producing an in-memory value; return it as a jax.Array."""
    n = len(arrays)

    def run(*args, pending: bool):
        stores, values = _resolve(args, n)
        stamps = storage.stamp(stores)
        value = work(stores, values, config or get_config())
        storage.check_unchanged(stamps, "jask")
        return np.asarray(value, result.dtype)

    return jax.numpy.asarray(_call(run, result, arrays, scalars))
