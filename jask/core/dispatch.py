"""How an op's disk work runs: now, or from inside a compiled program.

Eagerly (no trace active) the work runs at once and its store is owned by
the DiskArray returned; an op a band group can hold is only recorded
(unless ``Config.lazy`` is off) and computed when first needed
(:mod:`jask.engine.lazy`). Inside a trace the work is staged as an *ordered*
``io_callback`` taking the input handles (and any scalar operands) and
returning the handle of the store it wrote, so disk effects keep program
order and a compiled call's outputs are fresh stores on every call.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np
from jax.experimental import io_callback

from jask.base import interrupts
from jask.base.config import Config, get_config
from jask.base.memory import BudgetError
from jask.core import device, device_groups
from jask.core._jax_internals import is_eager
from jask.core.array import HANDLE_DTYPE, DiskArray, DiskArrayType
from jask.core.lifetime import collect_if_idle
from jask.engine import lazy
from jask.store import StoreChangedError, registry
from jask.store.space import snapshot
from jask.store.spec import StoreSpec

#: work(input stores, scalar operands as numpy, config) -> output store
StoreWork = Callable[[Sequence[StoreSpec], Sequence[np.ndarray], Config], StoreSpec]
#: work(input stores, scalar operands as numpy, config) -> numpy value
ValueWork = Callable[[Sequence[StoreSpec], Sequence[np.ndarray], Config], np.ndarray]

interrupts.install()  # Ctrl-C in JAX's code around a callback: see jask.base.interrupts


def _handles(arrays: Sequence[DiskArray]) -> list:
    return [x._handle if x._owner is None else np.asarray(x._handle, HANDLE_DTYPE)
            for x in arrays]


def _resolve(args, n_arrays: int):
    stores = [registry.spec(h) for h in args[:n_arrays]]
    scalars = [np.asarray(s) for s in args[n_arrays:]]
    return stores, scalars


def _through_views(work, stores, values, config: Config):
    """``work`` on its stores; if it cannot plan reading a view within the
    budget (a permuted view read across its base's chunks), on copies of
    its views instead (each view's own store from then on: jask.store.views)."""
    try:
        return work(stores, values, config)
    except BudgetError as err:
        if not any(s.view is not None for s in stores):
            raise
        refusal = err
    try:
        stores = [registry.own_store(s.handle) if s.view is not None else s for s in stores]
    except BudgetError:
        raise refusal from None  # the op the user called, not the copy it tried instead
    return work(stores, values, config)


def _wire(result: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """How a result crosses the callback boundary. JAX checks a callback's
    result after canonicalizing it under the x64 setting of the thread the
    callback runs on, which is not the thread that set ``jax.enable_x64``:
    a 64-bit value would arrive as 32 bits. So it crosses as uint32 pairs.
    """
    dtype = np.dtype(result.dtype)
    if dtype.itemsize == 8 and dtype.kind in "fiu":
        return jax.ShapeDtypeStruct(tuple(result.shape) + (2,), np.uint32)
    return result


def _to_wire(value, result: jax.ShapeDtypeStruct) -> np.ndarray:
    value = np.asarray(value, result.dtype)
    wire = _wire(result)
    if wire is result:
        return value
    return np.ascontiguousarray(value).view(np.uint32).reshape(wire.shape)


def _from_wire(value, result: jax.ShapeDtypeStruct):
    if _wire(result) is result:
        return value
    return jax.lax.bitcast_convert_type(value, result.dtype)


def _operand_to_wire(x) -> tuple:
    """(what crosses, its dtype to restore or None): an in-memory operand
    entering a callback. JAX puts a callback's operands on the CPU device
    under the x64 setting of the thread that runs the callback, so a 64-bit
    operand would arrive as 32 bits there too; it crosses as uint32 pairs."""
    x = jax.numpy.asarray(x)
    dtype = np.dtype(x.dtype)
    if dtype.itemsize == 8 and dtype.kind in "fiu":
        return jax.lax.bitcast_convert_type(x, np.uint32), dtype
    return x, None


def _operand_from_wire(value, dtype: np.dtype | None) -> np.ndarray:
    value = np.asarray(value)
    if dtype is None:
        return value
    return np.ascontiguousarray(value).view(dtype).reshape(value.shape[:-1])


def _staged_operands(arrays: Sequence[DiskArray], scalars: Sequence) -> tuple[list, Callable]:
    """The operands of a callback (handles, then in-memory values on the
    wire) and the function that turns what the callback receives back into
    ``(*handles, *values)``."""
    wired = [_operand_to_wire(s) for s in scalars]
    n = len(arrays)

    def received(args) -> tuple:
        return (*args[:n], *(_operand_from_wire(a, dtype)
                             for a, (_, dtype) in zip(args[n:], wired)))

    return [*_handles(arrays), *(w for w, _ in wired)], received


def _callback_body(body: Callable):
    """Run the body of one of jask's callbacks: marked as such for this
    thread, and a Ctrl-C landing anywhere in it reaches the caller of the
    compiled call as KeyboardInterrupt (JAX wraps whatever a callback raises)."""
    with registry.callback_scope():
        try:
            with interrupts.deferred():  # a Ctrl-C stops it between tasks, or at its end
                return body()
        except KeyboardInterrupt:
            interrupts.raise_at_caller()
            raise


def _call(run, result: jax.ShapeDtypeStruct, arrays: Sequence[DiskArray], scalars: Sequence):
    """``run(*handles, *scalars, in_program=...)`` now, or staged as an ordered callback."""
    if is_eager():
        with interrupts.deferred():  # a Ctrl-C stops it between tasks, or at its end
            collect_if_idle()
            return run(*[x._handle for x in arrays], *scalars, in_program=False)
    operands, received = _staged_operands(arrays, scalars)

    def callback(*args):
        return _callback_body(lambda: _to_wire(run(*received(args), in_program=True), result))

    out = io_callback(callback, _wire(result), *operands, ordered=True)
    return _from_wire(out, result)


def _register_outputs(work, args, n: int, config: Config | None) -> list:
    """Run a store op's work on its stores and give each new output a handle,
    refusing (and removing) outputs read while another writer replaced an input.
    ``update_`` and in-place optimizer steps return their target: it keeps its
    handle, and its own replacement is no other writer."""
    stores, values = _resolve(args, n)
    outs: list = []
    try:  # one version of each input, or StoreChangedError (jask.store.versions)
        with snapshot(stores, "jask"):
            got = _through_views(work, stores, values, config or get_config())
            outs = list(got) if isinstance(got, (list, tuple)) else [got]
    except StoreChangedError:
        for out in outs:
            if not out.handle:
                registry.discard(out)
        raise
    return [(out if out.handle else registry.register(out)).handle
            for out in outs]


def _as_called(value):
    """An in-memory operand as the call gave it, for an op that runs later:
    a jax.Array as it is (nothing changes one), anything else (a numpy array
    its caller may write into after the call) copied, read-only."""
    if isinstance(value, jax.Array):
        return value
    value = np.array(value)  # a copy nobody else holds
    value.flags.writeable = False
    return value


def to_store(work: StoreWork, arrays: Sequence[DiskArray], scalars: Sequence,
             out_aval: DiskArrayType, config: Config | None,
             fuse: lazy.Description | None = None) -> DiskArray:
    """Run ``work`` producing a store; return it as a DiskArray.

    With ``fuse``, inside a compiled program the op is only recorded, to
    run with the ops that need it (:mod:`jask.engine.lazy`)."""
    n = len(arrays)
    keep = tuple(x._owner for x in arrays if x._owner is not None)  # eagerly

    def run(*args, in_program: bool):
        cfg = config or get_config()
        on_device = None if in_program else device.dot_on_device(fuse, args[:n], args[n:], cfg)
        if on_device is not None:
            out = _on_device(on_device, args, n, cfg)
            if out is not None:
                return registry.register(out).handle
        if fuse is not None and (in_program or cfg.lazy and not fuse.at_call):
            if not in_program:  # an op run later must see its operands as they are now
                args = (*args[:n], *(_as_called(v) for v in args[n:]))
            handle = lazy.record(fuse, args, cfg, work, () if in_program else keep)
            if handle is not None:
                return handle
        (handle,) = _register_outputs(work, args, n, config)
        return handle

    handle = _call(run, jax.ShapeDtypeStruct((), HANDLE_DTYPE), arrays, scalars)
    return DiskArray._from_handle(handle, out_aval)


def to_stores(work, arrays: Sequence[DiskArray], scalars: Sequence, out_avals: tuple,
              config: Config | None) -> tuple:
    """Run ``work`` producing several stores (a list); return them as DiskArrays."""
    n = len(arrays)

    def run(*args, in_program: bool):
        return np.asarray(_register_outputs(work, args, n, config), HANDLE_DTYPE)

    handles = _call(run, jax.ShapeDtypeStruct((len(out_avals),), HANDLE_DTYPE), arrays, scalars)
    return tuple(DiskArray._from_handle(handles[i], aval) for i, aval in enumerate(out_avals))


def _on_device(work, args, n: int, config: Config):
    """An op's work on the configured device (:mod:`jask.core.device`), its
    inputs read at one version; None where it leaves the op to the host."""
    stores, values = _resolve(args, n)
    with snapshot(stores, "jask"):
        return work(stores, values, config)


def _value_alone(work: ValueWork, args, n: int, config: Config | None):
    """Run a value op's own work on its stores (pending ones computed first),
    refusing a result read while another process replaced an input."""
    stores, values = _resolve(args, n)
    with snapshot(stores, "jask"):
        return _through_views(work, stores, values, config or get_config())


def to_value(work: ValueWork, arrays: Sequence[DiskArray], scalars: Sequence,
             result: jax.ShapeDtypeStruct, config: Config | None,
             fuse: lazy.Description | None = None) -> jax.Array:
    """Run ``work`` producing an in-memory value; return it as a jax.Array.

    With ``fuse``, inside a compiled program the op runs in one band group
    with the recorded ops it reads (:mod:`jask.engine.lazy`)."""
    n = len(arrays)

    def run(*args, in_program: bool):
        cfg = config or get_config()
        on_device = None if in_program else device.sum_on_device(fuse, args[:n], args[n:], cfg)
        if on_device is not None:
            value = _on_device(on_device, args, n, cfg)
            if value is not None:
                return value  # a jax.Array, left on the device
        if fuse is not None and (in_program or registry.has_deferred()
                                 or lazy.statistics_together(fuse, cfg)):
            # eagerly: with the pending ops it reads, one pass, nothing between written
            # a mean or variance: with the moments the next statistic of the same data needs
            (value,) = lazy.values([(fuse, args, cfg)], device=device_groups.runner(cfg))
            if value is not None:
                return np.asarray(value, result.dtype)
        return np.asarray(_value_alone(work, args, n, config), result.dtype)

    return jax.numpy.asarray(_call(run, result, arrays, scalars))


#: One value op for :func:`to_values`: (work, arrays, scalars, result, config, fuse).
ValueOp = tuple


#: The arithmetic :func:`to_values` finishes on the host (see ``post``).
POST: dict[str, Callable] = {"mul": np.multiply, "add": np.add, "add_any": np.add,
                             "sub": np.subtract, "neg": np.negative,
                             "convert_element_type": lambda x: x}
#: The same by jax.numpy, on traced values (:func:`posted_traced`).
POST_TRACED: dict[str, Callable] = {"mul": jax.numpy.multiply, "add": jax.numpy.add,
                                    "add_any": jax.numpy.add, "sub": jax.numpy.subtract,
                                    "neg": jax.numpy.negative,
                                    "convert_element_type": lambda x: x}


def to_values(ops: Sequence[ValueOp], keep: Sequence[DiskArray] = (),
              post: Sequence = ()) -> tuple:
    """Several ops producing in-memory values, run by one callback so that
    those reading the same rows share one band group (one read of each store).
    ``keep``: stores the program returns, computed in the same groups.
    ``post``: arithmetic on those values done here in float64 before
    anything is rounded, each ``(name, operands, shape, dtype)`` (a name of
    :data:`POST`; an operand ``("value", k)``, the ops' values first, then
    post's own, or ``("number", x)``), whose results follow the ops'. A
    sum of terms such as ``X.T @ e - m * (X.T @ 1)`` (a gradient read with a
    mean ``m`` taken out, see ``jask.core.rewrite.linear``) cancels: rounded
    to float32 first, it lost three digits on data of mean 100.

    jask's scheduler merges value ops this way inside a compiled program
    (:func:`jask.core.rewrite.prune_before_lowering`).
    """
    if is_eager():  # a compiled step run in pieces (jask.core.rewrite): one group, now
        with interrupts.deferred():  # a Ctrl-C stops it between tasks, or at its end
            collect_if_idle()
            parts = [(*_handles(arrays), *(np.asarray(v) for v in scalars))
                     for _, arrays, scalars, *_ in ops]
            cfg = get_config()
            done = lazy.values([(fuse, part, config or cfg)
                                for (_, _, _, _, config, fuse), part in zip(ops, parts)],
                               keep=_handles(keep), wide=bool(post),
                               device=None if keep else device_groups.runner(cfg))
            values = [_value_alone(work, part, len(arrays), config) if value is None
                      else value for (work, arrays, *_, config, _), part, value
                      in zip(ops, parts, done)]  # (float64 where post needs them wide)
        types = [op[3] for op in ops] + every_post(post)
        return tuple(jax.numpy.asarray(np.asarray(v, r.dtype))
                     for v, r in zip(values + _posted(values, post), types))
    sizes = [(len(arrays), len(scalars)) for _, arrays, scalars, *_ in ops]
    results = tuple(result for *_, result, _, _ in ops)
    every = results + tuple(jax.ShapeDtypeStruct(shape, dtype) for *_, shape, dtype in post)
    staged = [_staged_operands(arrays, scalars) for _, arrays, scalars, *_ in ops]

    def split(args):
        out, i = [], 0
        for (a, b), (_, received) in zip(sizes, staged):
            out.append(received(args[i:i + a + b]))
            i += a + b
        return out

    def run(args) -> tuple:
        parts = split(args)
        done = lazy.values([(fuse, part, config or get_config())
                            for (_, _, _, _, config, fuse), part in zip(ops, parts)],
                           keep=args[len(args) - len(keep):] if keep else (),
                           wide=bool(post))
        values = []
        for (work, _, _, result, config, _), part, value, (n, _) in zip(
                ops, parts, done, sizes):
            if value is None:  # alone, as to_value runs it
                value = _value_alone(work, part, n, config)
            values.append(value)
        values += _posted(values, post)
        return tuple(_to_wire(v, r) for v, r in zip(values, every))

    def callback(*args):
        return _callback_body(lambda: run(args))

    flat = [x for operands, _ in staged for x in operands] + _handles(keep)
    outs = io_callback(callback, tuple(_wire(r) for r in every), *flat, ordered=True)
    return tuple(jax.numpy.asarray(_from_wire(x, r)) for x, r in zip(outs, every))


def every_post(post: Sequence) -> list:
    """The result types of ``post``'s entries (see :func:`to_values`)."""
    return [jax.ShapeDtypeStruct(shape, dtype) for *_, shape, dtype in post]


def _posted(values: list, post: Sequence) -> list:
    """``post``'s results (see :func:`to_values`) from the ops' ``values``,
    in float64 for float ones."""
    every = list(values)
    for name, operands, shape, dtype in post:
        wide = np.float64 if np.dtype(dtype).kind == "f" else dtype
        args = [np.asarray(every[x] if kind == "value" else x, wide) for kind, x in operands]
        every.append(np.broadcast_to(POST[name](*args), shape))
    return every[len(values):]


def posted_traced(values: list, post: Sequence) -> tuple:
    """``post``'s results (see :func:`to_values`) by jax.numpy on traced
    ``values``, in their own dtypes (for ops run each alone)."""
    every = list(values)
    for name, operands, shape, dtype in post:
        args = [every[x] if kind == "value" else x for kind, x in operands]
        result = POST_TRACED[name](*args)
        every.append(jax.numpy.broadcast_to(jax.numpy.asarray(result, dtype), shape))
    return tuple(every[len(values):])


def forget(arrays: Sequence[DiskArray]) -> None:
    """Mark recorded results no op will read again (see :mod:`jask.engine.lazy`),
    in program order, so that a following ``update_`` does not compute them."""
    if is_eager() or not arrays:
        return

    def callback(*handles):
        _callback_body(lambda: lazy.forget(handles))

    io_callback(callback, None, *_handles(arrays), ordered=True)
