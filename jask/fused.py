"""One pass, several outputs: the primitive behind jask's optimizers.

:func:`fused` applies a numpy ``kernel`` to the tiles of DiskArrays of one
shape (and in-memory scalars: a learning rate, a bias correction) and writes
each of the tuple of tiles it returns to its own new store, in a single pass:
an Adam step reads ``g``, ``m`` and ``v`` once and writes ``m``, ``v`` and the
update once. With ``into`` the first output goes into an operand's own store
instead (copied beside it and swapped in by renames, as ``update_`` does),
so a parameter keeps its store across steps.
"""
from __future__ import annotations

import uuid
from typing import Callable, Sequence

import jax
import numpy as np
import zarr
from jax.experimental.hijax import ShapedArray

from jask import dispatch, durability, graph, memory, plan, storage, work
from jask.array import HANDLE_DTYPE, DiskArray, DiskArrayType, disk_type
from jask.config import Config, get_config
from jask.graph import blockwise as bw
from jask.graph.fused import fused_graph
from jask.primitives import DiskPrimitive

__all__ = ["fused"]


def _make_like(target: storage.StoreSpec):
    """``make_staging`` for :func:`jask.durability.replace`: an empty store
    at a path, laid out as ``target`` is."""
    def make(path: str) -> None:
        if target.managed:
            storage.create_at(path, target.shape, target.dtype, target.chunks)
        else:
            work._create_like(zarr.open_array(target.path, mode="r"), path)
    return make


def fused_work(op: str, kernel: Callable, shape: tuple, on_disk: tuple, dtype,
               out_dtypes: tuple, into: int | None, align: int | None = None,
               unread: tuple = (), temporaries: int | None = None):
    """Work for :class:`Fused`: plan tiles, create the outputs, run one graph.

    Tiles are whole chunks of operand ``align`` (of ``into`` by default);
    operands in ``unread`` only lend their layout and are never read.
    ``temporaries``: tiles the kernel allocates besides its inputs (default:
    one per output and one more), what the plan counts for its outputs."""
    def run(stores, values, config: Config):
        stores, values = iter(stores), iter(values)
        sources = [next(stores) if disk else np.asarray(next(values)) for disk in on_disk]
        full = tuple(range(len(shape)))
        operands = tuple(bw.Operand(src, full if disk else (), dtype)
                         for src, disk in zip(sources, on_disk))
        held = sum(int(src.nbytes) for src in sources if isinstance(src, np.ndarray))
        target = _store(sources, into)
        like = _store(sources, into if align is None else align)
        unit = None
        if like is not None:
            unit = memory.model_of(like).write_unit or tuple(like.chunks)
        tile, cost = plan.plan_blockwise(
            op, shape, dtype, [(x.source, x.axes) for x in operands if x.on_disk],
            budget=config.max_memory, workers=config.workers, fixed_bytes=held,
            out_copies=len(out_dtypes) + 1 if temporaries is None else temporaries,
            out_unit=unit)
        first = 0 if target is None else 1
        outs: list = []
        try:
            for dt in out_dtypes[first:]:
                outs.append(storage.create(config.scratch_dir, op, shape, dt, tile))
            read = tuple(x for i, x in enumerate(operands) if i not in unread)

            def fill(staging: str | None) -> None:
                written = list(outs)
                if staging is not None and target is not None:
                    written.insert(0, storage.StoreSpec(staging, target.shape, target.dtype,
                                                        target.chunks))
                dsk, keys = fused_graph(op, kernel, tuple(written), shape, tile, read,
                                        uuid.uuid4().hex)
                graph.run(dsk, keys, config.workers, cost)
                if staging is not None:
                    storage.forget_array(staging)

            if target is None:
                fill(None)
            else:  # the first output replaces target's data, atomically (as update_)
                durability.replace(target.path, _make_like(target), fill,
                                   durable=not target.managed)
                storage.forget_array(target.path)
        except BaseException:
            for out in outs:
                storage.discard(out)
            raise
        return ([target] if target is not None else []) + outs
    return run


def _store(sources: list, i: int | None) -> storage.StoreSpec | None:
    if i is None:
        return None
    source = sources[i]
    if not isinstance(source, storage.StoreSpec):
        raise TypeError(f"jask.fused: operand {i} must be a DiskArray")
    return source


class Fused(DiskPrimitive):
    """``kernel(*operands)`` -> one DiskArray per output dtype, in one pass.

    Operands are DiskArrays of ``shape`` and in-memory scalars; all are read
    in ``dtype``. With ``into`` (an operand's index) the first output is
    written into that operand's store and returned as it (never dead-code
    eliminated: the write is the point).
    """

    def __init__(self, kernel, in_avals, shape: tuple, dtype, out_dtypes: tuple, *,
                 into: int | None = None, align: int | None = None, unread: tuple = (),
                 temporaries: int | None = None, name: str = "fused",
                 config: Config | None = None):
        outs = tuple(DiskArrayType(shape, dt) for dt in out_dtypes)
        super().__init__(in_avals, outs, op=name, kernel=kernel, shape=tuple(shape),
                         dtype=np.dtype(dtype), out_dtypes=tuple(np.dtype(d) for d in out_dtypes),
                         into=into, align=align, unread=tuple(unread),
                         temporaries=temporaries, config=config)

    def expand(self, *args):
        on_disk = tuple(isinstance(a, DiskArrayType) for a in self.in_avals)
        run = fused_work(self.op, self.kernel, self.shape, on_disk, self.dtype,
                         self.out_dtypes, self.into, self.align, self.unread,
                         self.temporaries)
        disk = [x for x, d in zip(args, on_disk) if d]
        mem = [x for x, d in zip(args, on_disk) if not d]
        return _to_stores(run, disk, mem, self.out_aval, self.config)

    def mutates(self) -> bool:
        return self.params["into"] is not None

    def dce(self, used_outs):
        if self.into is not None:
            return True, True, self
        return super().dce(used_outs)


def _to_stores(run_work, arrays: Sequence[DiskArray], scalars: Sequence, out_avals: tuple,
               config: Config | None) -> tuple:
    """Run ``run_work`` producing several stores; return them as DiskArrays."""
    n = len(arrays)

    def run(*args, pending: bool):
        stores, values = dispatch._resolve(args, n)
        outs = run_work(stores, values, config or get_config())
        handles = [(out if out.handle else storage.register(out, pending=pending)).handle
                   for out in outs]
        return np.asarray(handles, HANDLE_DTYPE)

    handles = dispatch._call(run, jax.ShapeDtypeStruct((len(out_avals),), HANDLE_DTYPE),
                             arrays, scalars)
    return tuple(DiskArray._from_handle(handles[i], aval) for i, aval in enumerate(out_avals))


def fused(kernel: Callable, *operands, out_dtypes: Sequence, dtype=None, into: int | None = None,
          align: int | None = None, unread: Sequence[int] = (),
          temporaries: int | None = None, name: str = "fused",
          config: Config | None = None) -> tuple:
    """``kernel(*tiles)`` over DiskArrays of one shape, one new DiskArray per
    entry of ``out_dtypes``, all written in a single pass.

    ``operands`` are DiskArrays of one shape and in-memory scalars (sent to
    every task as 0-d arrays); every tile and scalar reaches ``kernel`` as a
    numpy array of ``dtype`` (default: the first DiskArray's), its task's own:
    the kernel may overwrite them rather than allocate. ``kernel``
    must be hashable (a module-level function or a frozen dataclass): it is
    part of the compiled program's key. With ``into=i`` the first output
    replaces the data of DiskArray operand ``i`` in its own store. Tiles
    are whole chunks of operand ``align`` (default: ``into``), so outputs
    share its chunks where the budget allows; operands listed in ``unread``
    lend their layout only (the kernel does not receive them). A kernel
    that works in place tells the planner how many tiles it allocates
    besides its inputs with ``temporaries`` (default: one per output, +1).

    Example:
      >>> import numpy as np, jask
      >>> from jask.fused import fused
      >>> x = jask.from_numpy(np.arange(4.0, dtype=np.float32))
      >>> lo, hi = fused(lambda a, c: (a - c, a + c), x, 1.0, out_dtypes=("f4", "f4"))
      >>> hi.to_numpy()
      array([1., 2., 3., 4.], dtype=float32)
    """
    kinds = [disk_type(x) for x in operands]
    disk = [k for k in kinds if k is not None]
    if not disk:
        raise TypeError("jask.fused needs at least one DiskArray operand")
    shape = disk[0].shape
    if any(k.shape != shape for k in disk):
        raise ValueError(f"jask.{name}: DiskArray operands must share one shape, got "
                         f"{[k.shape for k in disk]}")
    dtype = np.dtype(dtype or disk[0].dtype)
    values: list = []
    avals: list = []
    for x, k in zip(operands, kinds):
        if k is None:
            x = jax.numpy.asarray(x)
            if x.ndim != 0:
                raise ValueError(f"jask.{name}: in-memory operands must be scalars, got "
                                 f"shape {x.shape}")
            avals.append(ShapedArray((), x.dtype))
        else:
            avals.append(k)
        values.append(x)
    return Fused(kernel, tuple(avals), shape, dtype, tuple(out_dtypes), into=into, align=align,
                 unread=tuple(unread), temporaries=temporaries, name=name,
                 config=config)(*values)
