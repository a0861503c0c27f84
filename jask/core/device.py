"""Products and reductions computed on an accelerator, data streamed from disk.

When the configuration names a device (:func:`jask.set_device`; by default
JAX's default backend's first device when it is a GPU or TPU), an eager
``X.T @ Y`` of two stores and a sum over the rows of a store run here
instead of as numpy tiles in Dask tasks: :func:`jask.engine.device.stream`
reads row bands into reused host buffers and hands them to a :class:`_Fold`,
which copies each band to the device (``jax.device_put``, dispatched
asynchronously, bands in flight ahead) and folds it into partials kept on the
device by one jitted program per band shape. Only the result comes back (a
sum to memory stays on the device as a ``jax.Array``).

Values: a float32 product follows JAX's matmul precision setting as
jax.numpy does (``jax.default_matmul_precision``: one bf16 pass by default on
a TPU); partials of successive bands are added with a compensated (Kahan)
sum, so the error is that of one band's product, no larger than jax.numpy's
product over all the rows.

Device memory is planned like host memory: the bands in flight and the
partials fit the device share (:func:`share`), and :func:`last_stream` says
what the last stream planned and held (:func:`device_bytes`, measured at
every band: what the device reports in use, else the arrays alive on it);
``jask.track`` reports the most any stream in its block held.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jask.base import counters
from jask.base.config import Config
from jask.base.memory import default_chunks, nbytes
from jask.engine import device as streaming
from jask.engine.blockwise import unchanged
from jask.engine.lazy import Recorded
from jask.store import registry
from jask.store.spec import StoreSpec
from jask.store.tiles import write
from jask.store.views import as_transposed

__all__ = ["target", "share", "gram", "row_sum", "dot_on_device", "sum_on_device",
           "last_stream", "Streamed", "device_bytes", "Meter", "finished",
           "SHARE_FRACTION", "CPU_SHARE", "blocked_sum"]

#: Fraction of the memory a device reports (``bytes_limit``) that is the
#: device share by default: the rest stays for the user's own arrays and
#: XLA's workspace.
SHARE_FRACTION = 0.5
#: The device share on a CPU device (which reports no limit).
CPU_SHARE = 256 * 2**20


def target(config: Config):
    """The device the configuration names, or None for the host path.

    Example:
      >>> import jax, jask
      >>> cfg = jask.get_config()
      >>> target(cfg) is None or target(cfg).platform != "cpu"
      True
    """
    chosen = config.device
    if chosen == "host":
        return None
    if chosen == "auto":
        first = jax.devices()[0]  # the default backend's
        return None if first.platform == "cpu" else first
    return chosen


def share(device, config: Config) -> int:
    """Bytes jask may hold on ``device``: the configuration's device memory,
    else :data:`SHARE_FRACTION` of the device's limit, :data:`CPU_SHARE` on a
    device reporting none."""
    if config.device_memory is not None:
        return int(config.device_memory)
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    return int(SHARE_FRACTION * limit) if limit else CPU_SHARE


@dataclass(frozen=True)
class Streamed:
    """What the last stream did: its plan, the device share, and the most
    bytes of arrays alive on the device beyond those alive when it began."""

    plan: streaming.StreamPlan
    share: int
    peak_device_bytes: int


_last: list = [None]


def last_stream() -> Streamed | None:
    """The last stream's :class:`Streamed` (None before any)."""
    return _last[0]


def _supported(dtype, device) -> bool:
    """float32 everywhere; float64 only where JAX keeps 64 bits and the
    device computes them natively (not a TPU)."""
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return True
    x64 = bool(jax.config.read("jax_enable_x64"))
    return dtype == np.float64 and x64 and device.platform != "tpu"


def _two_sum(acc, comp, part):
    """Kahan's compensated sum: ``acc - comp`` is the total so far."""
    y = part - comp
    total = acc + y
    return total, (total - acc) - y


@functools.partial(jax.jit, static_argnames="same")
def _gram_fold(acc, comp, a, b=None, *, same: bool):
    part = jnp.matmul(a.T, a if same else b).astype(acc.dtype)
    return _two_sum(acc, comp, part)


#: Rows summed together before their sums are added (a multiple of 8, the
#: TPU's sublane tiling): a band's sum is then a sum of short sums, whose
#: rounding error grows with the number of blocks, not of rows.
SUM_BLOCK = 256


def blocked_sum(x, axes: tuple, keepdims: bool = False):
    """``x`` summed over ``axes`` (the rows' axis among them) in blocks of
    :data:`SUM_BLOCK` rows, the blocks' sums then added."""
    rows = x.shape[0]
    padded = -(-rows // SUM_BLOCK) * SUM_BLOCK
    x = jnp.pad(x, [(0, padded - rows)] + [(0, 0)] * (x.ndim - 1))
    blocks = x.reshape((padded // SUM_BLOCK, SUM_BLOCK) + x.shape[1:])
    inner = tuple(a + 1 for a in axes)  # the rows' axis and the others summed, per block
    return jnp.sum(jnp.sum(blocks, axis=inner, keepdims=keepdims), axis=0)


@functools.partial(jax.jit, static_argnames="axes")
def _sum_fold(acc, comp, x, *, axes: tuple):
    return _two_sum(acc, comp, blocked_sum(x, axes).astype(acc.dtype))


@jax.jit
def _finish(acc, comp):
    return acc - comp


def device_bytes(device) -> int:
    """Bytes in use on ``device``: what it reports (``memory_stats()``'s
    ``bytes_in_use``, as a GPU or TPU does) where it does, else the bytes of
    the arrays alive on it (a CPU device reports nothing)."""
    used = (device.memory_stats() or {}).get("bytes_in_use")
    if used is not None:
        return int(used)
    return sum(x.nbytes for x in jax.live_arrays() if device in x.devices())


class Meter:
    """The most bytes in use on a device beyond those in use when the meter
    was made (before a stream puts anything there): what the stream held."""

    def __init__(self, device):
        self.device = device
        self.base = device_bytes(device)
        self.peak = 0

    def measure(self) -> None:
        self.peak = max(self.peak, device_bytes(self.device) - self.base)


def finished(planned: streaming.StreamPlan, room: int, meter: Meter) -> None:
    """Record a finished stream: :func:`last_stream`, and its peak device
    bytes for the open ``jask.track`` blocks."""
    _last[0] = Streamed(planned, room, meter.peak)
    counters.device_peak(meter.peak)


class _Fold:
    """The device side of a stream (:class:`jask.engine.device.Target`):
    partials ``(acc, comp)`` on the device, one jitted program per band."""

    def __init__(self, device, program, shape, dtype):
        self.device = device
        self.program = program
        self.meter = Meter(device)  # before the partials: they are the stream's too
        zeros = jax.device_put(np.zeros(shape, dtype), device)
        self.acc, self.comp = zeros, zeros

    def put(self, tiles: list) -> list:
        band = [jax.device_put(t, self.device) for t in tiles]
        self.meter.measure()
        return band

    def fold(self, band):
        self.acc, self.comp = self.program(self.acc, self.comp, *band)
        self.meter.measure()
        return self.acc

    def wait(self, token) -> None:
        token.block_until_ready()

    def result(self):
        return _finish(self.acc, self.comp)


def _run(stores: list, fold: _Fold, partial_bytes: int, device, config: Config, op: str):
    room = share(device, config)
    planned = streaming.plan(stores, partial_bytes, room, config)
    streaming.stream(stores, planned, fold, op)
    result = fold.result()
    fold.meter.measure()
    finished(planned, room, fold.meter)
    return result


def gram(a: StoreSpec, b: StoreSpec, dtype, device, config: Config, op: str = "dot"):
    """``a.T @ b`` over the rows of two stores (one read if the same store),
    on ``device``; the result stays there."""
    same = registry.canonical(a.path) == registry.canonical(b.path) and a.view == b.view
    stores = [a] if same else [a, b]
    shape = (a.shape[1], b.shape[1])
    fold = _Fold(device, functools.partial(_gram_fold, same=same), shape, dtype)
    return _run(stores, fold, 3 * nbytes(shape, dtype), device, config, op)


def row_sum(x: StoreSpec, axes: tuple, shape: tuple, dtype, device, config: Config,
            op: str = "sum"):
    """The sum of a store over ``axes`` (the rows among them), on ``device``,
    shaped ``shape``; the result stays there."""
    kept = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    fold = _Fold(device, functools.partial(_sum_fold, axes=axes), kept, dtype)
    return _run([x], fold, 3 * nbytes(kept, dtype), device, config, op).reshape(shape)


def _settled(handles) -> bool:
    """No input is a pending op's result: those stay with the band group
    that computes them in the same pass."""
    return not any(isinstance(registry.deferred(int(np.asarray(h))), Recorded)
                   for h in handles)


def dot_on_device(desc, handles, scalars, config: Config):
    """A work function computing an eager ``X.T @ Y`` of two stores on the
    configured device, or None where the host path runs it."""
    device = target(config)
    if (device is None or desc is None or desc.kind != "dot" or scalars
            or desc.on_disk != (True, True) or desc.params.get("tb")
            or desc.params.get("vectors") != (None, None)
            or not _supported(desc.dtype, device) or not _settled(handles)):
        return None

    def work(stores, values, cfg: Config) -> StoreSpec | None:
        a, b = stores
        ta = bool(desc.params["ta"])
        base, swapped = as_transposed(a)  # X.T @ Y: X's rows, read as they are stored
        if swapped:
            a, ta = base, not ta
        if (not ta or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[0] != b.shape[0]
                or not _supported(a.dtype, device) or not _supported(b.dtype, device)):
            return None
        value = np.asarray(gram(a, b, desc.dtype, device, cfg, desc.op))
        chunks = default_chunks(value.shape, value.dtype, cfg.max_memory, cfg.workers)
        with counters.op(desc.op), registry.new_store(
                cfg.scratch_dir, desc.op, value.shape, value.dtype, chunks, grad=desc.grad) as out:
            write(out, tuple(slice(0, n) for n in value.shape), value)
        return out

    return work


def sum_on_device(desc, handles, scalars, config: Config):
    """A work function computing an eager sum of a store over axes that
    include its rows on the configured device, or None for the host path."""
    device = target(config)
    if device is None or desc is None or desc.kind != "map" or scalars:
        return None
    p = desc.params
    if (p.get("reducer") != "sum" or p.get("kernel") is not unchanged
            or desc.on_disk != (True,) or p["axes"][0] != tuple(range(len(p["full_shape"])))
            or p["dtypes"][0] not in (None, desc.dtype) or not _supported(desc.dtype, device)
            or not _settled(handles)):
        return None
    kept = {a for a in p["out_axes"] if a is not None}
    axes = tuple(a for a in range(len(p["full_shape"])) if a not in kept)
    if 0 not in axes:
        return None  # a band's partial would be rows of the result, not a sum

    def work(stores, values, cfg: Config):
        (x,) = stores
        if np.dtype(x.dtype) != desc.dtype:
            return None
        return row_sum(x, axes, desc.shape, desc.dtype, device, cfg, desc.op)

    return work
