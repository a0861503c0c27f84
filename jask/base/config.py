"""Process-wide configuration: the memory budget and the scratch directory.

Every op reads the active :class:`Config` (or one passed explicitly) to size
its tiles and to know where its output stores go.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import dask.utils
import psutil

from jask.base import forks
from jask.base.urls import check_url, is_url

__all__ = ["Config", "set_memory_budget", "set_device", "get_config", "holding", "parse_budget"]

#: Budget used when a program never calls :func:`set_memory_budget`.
DEFAULT_MAX_MEMORY = "1GiB"
#: Scratch directory (relative to the working directory) when none is given.
DEFAULT_SCRATCH_DIR = ".jask_scratch"
#: Fraction of the RAM available at configuration time that a budget may use.
AVAILABLE_RAM_FRACTION = 0.8

# statfs(2) f_type magic numbers of RAM-backed filesystems.
_RAM_FS_MAGIC = {0x01021994: "tmpfs", 0x858458F6: "ramfs"}
_RAM_FS_NAMES = {"tmpfs", "ramfs"}


@dataclass(frozen=True)
class Config:
    """What one op needs to know about its environment.

    Attributes:
      max_memory: effective budget in bytes for all tasks of an op that run
        at once (already clamped to the available RAM).
      requested_memory: the budget as the user asked for it, in bytes.
      scratch_dir: absolute path of the directory for jask's own stores.
      allow_tmpfs: whether ``scratch_dir`` may be RAM-backed.
      workers: how many tasks run at once on the local threaded scheduler.
      storage_options: options of the object store when ``scratch_dir`` is a
        URL (``s3://bucket/prefix``), as sorted ``(key, value)`` pairs (a
        frozen dataclass holds no dict); empty: the environment's variables.
      lazy: whether eager ops that a band group can hold return at once
        and compute their store when it is first needed (on by default; see
        :func:`set_memory_budget`).
      device: where tiles are computed (:func:`set_device`): ``"auto"`` (an
        accelerator when JAX's default backend is one, else the host),
        ``"host"``, or a ``jax.Device`` (its CPU device too: the device path
        run on the host, as CI does).
      device_memory: the device share in bytes (bands in flight and partials
        on the device), or ``None`` for the default
        (:mod:`jask.core.device`).

    Example:
      >>> import jask
      >>> cfg = jask.Config(max_memory=64 * 2**20, requested_memory=64 * 2**20,
      ...                   scratch_dir="/tmp/jask-example")
      >>> cfg.max_memory
      67108864
    """

    max_memory: int
    requested_memory: int
    scratch_dir: str
    allow_tmpfs: bool = False
    workers: int = os.cpu_count() or 1
    storage_options: tuple = field(default=(), repr=False)  # credentials: never shown
    lazy: bool = True
    device: object = "auto"
    device_memory: int | None = None


def parse_budget(max_memory: int | str) -> int:
    """Return a budget in bytes from an int or a string with a unit.

    Decimal (``"512MB"``, ``"4GB"``) and binary (``"1GiB"``) units are
    accepted, as Dask spells them.

    Example:
      >>> parse_budget("512MB"), parse_budget("1GiB"), parse_budget(1000)
      (512000000, 1073741824, 1000)
    """
    if isinstance(max_memory, bool):
        raise ValueError(f"memory budget must be bytes or a size string, got {max_memory!r}")
    if isinstance(max_memory, int):
        nbytes = max_memory
    elif isinstance(max_memory, str):
        if not re.match(r"\s*\d", max_memory):
            raise ValueError(f"cannot read memory budget {max_memory!r}: it must start "
                             "with a number, as in '512MB', '4GB' or '1GiB'")
        try:
            nbytes = dask.utils.parse_bytes(max_memory.strip())
        except (ValueError, TypeError):
            raise ValueError(
                f"cannot read memory budget {max_memory!r}: use bytes or a number "
                "with a unit such as '512MB', '4GB' or '1GiB'") from None
    else:
        raise ValueError(f"memory budget must be int bytes or a string like '4GB', "
                         f"got {max_memory!r}")
    if nbytes <= 0:
        raise ValueError(f"memory budget must be positive, got {max_memory!r}")
    return int(nbytes)


def filesystem_type(path: str) -> str | None:
    """Name of the RAM-backed filesystem holding ``path``, or ``None``.

    Looks at the nearest existing ancestor, so the path need not exist yet.
    Uses ``statfs(2)`` and falls back to the mount table.
    """
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    magic = _statfs_magic(probe)
    if magic is not None:
        return _RAM_FS_MAGIC.get(magic)
    best = None
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint
        if probe == mount or probe.startswith(mount.rstrip("/") + "/"):
            if best is None or len(mount) > len(best.mountpoint):
                best = part
    return best.fstype if best is not None and best.fstype in _RAM_FS_NAMES else None


def _statfs_magic(path: str) -> int | None:
    """f_type of statfs(2) for path, or None where it cannot be called."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None or not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return None
    # struct statfs on Linux starts with `long f_type`; the rest we ignore.
    buf = ctypes.create_string_buffer(256)
    libc = ctypes.CDLL(libc_name, use_errno=True)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def make_config(max_memory: int | str, scratch_dir: str | None = None,
                allow_tmpfs: bool = False, workers: int | None = None,
                storage_options: dict | None = None, lazy: bool = True) -> Config:
    """Build a checked :class:`Config` without installing it.

    Example:
      >>> cfg = make_config("256MB", scratch_dir="/tmp/jask-example")
      >>> cfg.max_memory <= 256_000_000
      True
    """
    requested = parse_budget(max_memory)
    available = psutil.virtual_memory().available
    effective = min(requested, int(AVAILABLE_RAM_FRACTION * available))
    options = tuple(sorted((storage_options or {}).items()))
    if scratch_dir is not None and is_url(scratch_dir):  # object storage: no disk to check
        return Config(max_memory=effective, requested_memory=requested,
                      scratch_dir=check_url(scratch_dir, "scratch_dir"), allow_tmpfs=allow_tmpfs,
                      workers=workers or (os.cpu_count() or 1), storage_options=options,
                      lazy=bool(lazy))
    if options:
        raise ValueError("storage_options apply to a scratch_dir in object storage "
                         f"(s3://bucket/prefix), not to the local folder {scratch_dir!r}")
    # symlinks followed: a scratch store opened through a link is then known as itself
    scratch = os.path.realpath(scratch_dir if scratch_dir is not None else DEFAULT_SCRATCH_DIR)
    fstype = filesystem_type(scratch)
    if fstype is not None and not allow_tmpfs:
        raise RuntimeError(
            f"scratch_dir {scratch!r} is on a RAM-backed filesystem ({fstype}): jask's "
            "stores there would use memory, not disk. Choose a directory on disk, or "
            "pass allow_tmpfs=True to use it anyway.")
    return Config(max_memory=effective, requested_memory=requested, scratch_dir=scratch,
                  allow_tmpfs=allow_tmpfs, workers=workers or (os.cpu_count() or 1),
                  lazy=bool(lazy))


_lock = forks.lock()
_active: Config | None = None


def set_memory_budget(max_memory: int | str, scratch_dir: str | None = None,
                      allow_tmpfs: bool = False, storage_options: dict | None = None,
                      lazy: bool = True) -> None:
    """Set the process-wide configuration used by every jask op.

    The effective budget is ``min(max_memory, 0.8 * available RAM)``, taken
    once, now. Tiles are sized from it for the rest of the session. The
    scratch directory (default ``./.jask_scratch``) holds jask's own stores;
    it is created when first used, and refused if it is RAM-backed (tmpfs,
    ramfs) unless ``allow_tmpfs=True``.

    Args:
      max_memory: bytes, or a string with a unit: ``"512MB"``, ``"4GB"``,
        ``"1GiB"``.
      scratch_dir: directory for op outputs and gradients.
      allow_tmpfs: accept a RAM-backed ``scratch_dir``.
      storage_options: for a ``scratch_dir`` in object storage
        (``"s3://bucket/prefix"``: every store jask makes goes there, so
        workers on other machines read what others wrote), the object
        store's options (credentials, endpoint); by default the standard
        environment variables (``AWS_ENDPOINT_URL``, ...).
      lazy: (on by default) eager ops that read along rows
        (elementwise ops, broadcasts,
        reductions to a DiskArray, ``X @ w`` with ``w`` in memory) return at
        once, and their store is computed when something needs it: its data
        or ``filename``, a save, a non-fusable op, an ``update_`` of a store
        it reads, a jitted call, or a reduction to memory, which then runs
        the whole chain as one pass over the rows, intermediates never
        written. ``lazy=False`` runs every eager op at its call (one
        store written per op, errors while computing raised at the call).

    Raises:
      ValueError: if ``max_memory`` cannot be read.
      RuntimeError: if ``scratch_dir`` is RAM-backed and ``allow_tmpfs`` is
        False.

    Example:
      >>> import jask
      >>> jask.set_memory_budget("1GB")
      >>> jask.get_config().max_memory <= 1_000_000_000
      True
    """
    global _active
    config = make_config(max_memory, scratch_dir, allow_tmpfs, storage_options=storage_options,
                         lazy=lazy)
    with _lock:
        if _active is not None:  # the device chosen stays chosen (set_device)
            config = dataclasses.replace(config, device=_active.device,
                                         device_memory=_active.device_memory)
        _active = config


def set_device(device: object = "auto", memory: int | str | None = None) -> None:
    """Choose where jask computes tiles, for every op from now on.

    Args:
      device: ``"auto"`` (the default: JAX's default backend's first device
        when it is an accelerator, a GPU or TPU, else the host), ``"host"``
        (numpy on the host CPU, in Dask tasks), or a ``jax.Device``: products
        and reductions over stores then stream row bands to it, compute there
        and bring back only results. ``jax.devices("cpu")[0]`` runs that
        device path on the host's CPU backend (how CI tests it).
      memory: the device share: bytes (or a size string) that bands in flight
        and partials may hold on the device; ``None``: half of what the
        device reports as its limit, or 256 MiB on a CPU device.

    Example:
      >>> import jask
      >>> jask.set_device("host", memory="64MiB")
      >>> jask.get_config().device, jask.get_config().device_memory
      ('host', 67108864)
      >>> jask.set_device()
    """
    global _active, _effective
    if isinstance(device, str) and device not in ("auto", "host"):
        raise ValueError(f"device must be 'auto', 'host' or a jax.Device, got {device!r}")
    if not isinstance(device, str) and not hasattr(device, "platform"):
        raise TypeError(f"device must be 'auto', 'host' or a jax.Device, got a "
                        f"{type(device).__name__}")
    share = None if memory is None else parse_budget(memory)
    get_config()
    with _lock:
        assert _active is not None
        _active = dataclasses.replace(_active, device=device, device_memory=share)
        _effective = None


def get_config() -> Config:
    """The active configuration, creating the default one on first use.

    The default is a budget of ``1GiB`` (clamped to 80% of available RAM)
    and ``./.jask_scratch``. While something holds memory outside any op
    (:func:`holding`: a minibatch loader's buffers), ``max_memory`` is what
    is left of the budget, so ops planned meanwhile fit beside it.

    Example:
      >>> import jask
      >>> jask.get_config().max_memory > 0
      True
    """
    global _active, _effective
    with _lock:
        if _active is None:
            _active = make_config(DEFAULT_MAX_MEMORY)
        if not _held:
            return _active
        if _effective is None or _effective[0] is not _active:
            left = max(1, _active.max_memory - sum(_held.values()))
            _effective = (_active, dataclasses.replace(_active, max_memory=left))
        return _effective[1]


_held: dict[int, int] = {}  # holder's token -> bytes it keeps between ops
_effective: tuple | None = None  # (the active config, it less what is held)


@contextlib.contextmanager
def holding(nbytes: int):
    """Keep ``nbytes`` of the budget for the block's duration: ops planned
    meanwhile get the rest (:func:`get_config`).

    Example:
      >>> import jask
      >>> jask.set_memory_budget("64MiB")
      >>> with holding(16 * 2**20):
      ...     jask.get_config().max_memory
      50331648
      >>> jask.get_config().max_memory
      67108864
    """
    release = hold(nbytes)
    try:
        yield
    finally:
        release()


def hold(nbytes: int) -> Callable[[], None]:
    """Keep ``nbytes`` of the budget until the returned function is called
    (once; later calls do nothing): :func:`holding` for a holder that
    outlives a block (a loader's windows, kept between its iterations)."""
    global _effective
    token = object()
    with _lock:
        _held[id(token)] = int(nbytes)
        _effective = None

    def release() -> None:
        global _effective
        with _lock:
            if _held.pop(id(token), None) is not None:
                _effective = None
    return release  # (it keeps the token, so its id is not reused meanwhile)
