"""Discrete Fourier transforms, as ``jax.numpy.fft``: ``jask.fft.fft(x, n, axis, norm)`` etc.

Over a DiskArray, a transform along one axis is streamed: each task holds
whole lanes of that axis (1-D slices along it) for a block of the other axes,
as many as the memory budget allows, transforms them in memory and writes
them as one chunk of a new DiskArray. A lane too long for the budget is
refused before anything is read (a :class:`~jask.BudgetError` naming the op,
the lane and what it needs). Multi-axis transforms (``fftn``, ``rfftn``, ...)
are one such pass per axis, as numpy composes them. The values are computed
in double precision and rounded to jax.numpy's dtypes (complex64 for float32
data, float32 from complex64 for the inverse real transforms). With no
DiskArray operand each function is its ``jax.numpy.fft`` counterpart.

Complex results have no derivative rules in jask: differentiating through
them is refused, naming the op.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jask.api.elementwise import astype
from jask.api.manipulation import roll
from jask.base.config import Config
from jask.core import primitives
from jask.core.array import disk_type

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fftn", "ifftn", "rfftn", "irfftn",
           "fft2", "ifft2", "rfft2", "irfft2", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

#: The norm modes, numpy's and the standard's (None: "backward").
NORMS = (None, "backward", "ortho", "forward")


@functools.lru_cache(maxsize=256)
def _result(kind: str, shape: tuple, dtype: np.dtype, n, axis: int, norm,
            x64: bool) -> jax.ShapeDtypeStruct:
    """jax.numpy's result type (and its checks of the arguments)."""
    struct = jax.ShapeDtypeStruct(shape, dtype)
    return jax.eval_shape(lambda v: getattr(jnp.fft, kind)(v, n=n, axis=axis, norm=norm), struct)


def _one_axis(kind: str, x, n, axis, norm, config: Config | None):
    """A transform along one axis: jax.numpy's for an in-memory ``x``, else streamed."""
    aval = disk_type(x)
    if aval is None:
        return getattr(jnp.fft, kind)(x, n=n, axis=axis, norm=norm)
    if norm not in NORMS:
        raise ValueError(f"jask.fft.{kind}: norm must be one of 'backward', 'ortho' or "
                         f"'forward', got {norm!r}")
    if aval.ndim == 0:
        raise ValueError(f"jask.fft.{kind}: a 0-d array has no axis to transform")
    if not isinstance(axis, (int, np.integer)) or not -aval.ndim <= axis < aval.ndim:
        raise ValueError(f"jask.fft.{kind}: axis {axis!r} is out of range for an array of shape "
                         f"{tuple(aval.shape)}")
    axis = int(axis) % aval.ndim
    m = aval.shape[axis]
    if n is None:
        n = 2 * (m - 1) if kind in ("irfft", "hfft") else m
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"jask.fft.{kind}: the transform's length n must be a positive int, "
                         f"got {n!r} (axis {axis} has {m} elements)")
    out = _result(kind, tuple(aval.shape), np.dtype(aval.dtype), int(n), axis, norm,
                  bool(jax.config.read("jax_enable_x64")))
    return primitives.fft(x, axis, kind, int(n), norm or "backward", tuple(out.shape),
                          np.dtype(out.dtype), config=config)


def fft(a, n=None, axis=-1, norm=None, *, config: Config | None = None):
    """The 1-D discrete Fourier transform along ``axis``, as ``jax.numpy.fft.fft``
    (``n``: the length, cropping or zero-padding the input; ``norm``:
    ``"backward"``, ``"ortho"`` or ``"forward"``).

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.array([[1.0, 0.0, -1.0, 0.0]], np.float32))
      >>> jask.fft.fft(x).to_numpy()
      array([[0.+0.j, 2.+0.j, 0.+0.j, 2.+0.j]], dtype=complex64)
    """
    return _one_axis("fft", a, n, axis, norm, config)


def ifft(a, n=None, axis=-1, norm=None, *, config: Config | None = None):
    """The inverse of :func:`fft`, as ``jax.numpy.fft.ifft``."""
    return _one_axis("ifft", a, n, axis, norm, config)


def rfft(a, n=None, axis=-1, norm=None, *, config: Config | None = None):
    """The transform of real data (``n // 2 + 1`` frequencies along ``axis``),
    as ``jax.numpy.fft.rfft``."""
    return _one_axis("rfft", a, n, axis, norm, config)


def irfft(a, n=None, axis=-1, norm=None, *, config: Config | None = None):
    """The inverse of :func:`rfft` (``n`` real values along ``axis``, by default
    ``2 * (m - 1)``), as ``jax.numpy.fft.irfft``."""
    return _one_axis("irfft", a, n, axis, norm, config)


def hfft(a, n=None, axis=-1, norm=None, *, config: Config | None = None):
    """The transform of a Hermitian-symmetric signal given by its first half
    (real results), as ``jax.numpy.fft.hfft``."""
    return _one_axis("hfft", a, n, axis, norm, config)


def ihfft(a, n=None, axis=-1, norm=None, *, config: Config | None = None):
    """The inverse of :func:`hfft`, as ``jax.numpy.fft.ihfft``."""
    return _one_axis("ihfft", a, n, axis, norm, config)


def _axes_lengths(kind: str, aval, s, axes) -> tuple[list, list]:
    """numpy's defaults: all axes (the last ``len(s)`` when ``s`` is given),
    lengths the input's (``irfftn``'s last: ``2 * (m - 1)``)."""
    ndim = aval.ndim
    if axes is None:
        axes = list(range(ndim)) if s is None else list(range(ndim - len(s), ndim))
    axes = [int(d) for d in np.atleast_1d(np.asarray(axes, dtype=np.int64))]
    if any(not -ndim <= d < ndim for d in axes):
        raise ValueError(f"jask.fft.{kind}: axes {axes} are out of range for an array of shape "
                         f"{tuple(aval.shape)}")
    axes = [d % ndim for d in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"jask.fft.{kind}: axes {axes} repeat an axis")
    if s is None:
        s = [aval.shape[d] for d in axes]
        if kind == "irfftn" and axes:
            s[-1] = 2 * (s[-1] - 1)
    s = [int(v) for v in s]
    if len(s) != len(axes):
        raise ValueError(f"jask.fft.{kind}: s {tuple(s)} and axes {tuple(axes)} must have the "
                         "same length")
    return s, axes


def _n_axes(kind: str, a, s, axes, norm, config: Config | None):
    aval = disk_type(a)
    if aval is None:
        return getattr(jnp.fft, kind)(a, s=s, axes=axes, norm=norm)
    s, axes = _axes_lengths(kind, aval, s, axes)
    if not axes:  # no transform: jax.numpy's dtype (complex for fftn and ifftn)
        struct = jax.ShapeDtypeStruct(tuple(aval.shape), np.dtype(aval.dtype))
        out = jax.eval_shape(lambda v: getattr(jnp.fft, kind)(v, axes=()), struct)
        return a if out.dtype == aval.dtype else astype(a, out.dtype, config=config)
    one = {"fftn": "fft", "ifftn": "ifft"}.get(kind)
    x: Any = a
    if one is not None:
        for n, d in zip(reversed(s), reversed(axes)):
            x = _one_axis(one, x, n, d, norm, config)
        return x
    if kind == "rfftn":  # the real transform first, along the last axis
        x = _one_axis("rfft", x, s[-1], axes[-1], norm, config)
        for n, d in zip(reversed(s[:-1]), reversed(axes[:-1])):
            x = _one_axis("fft", x, n, d, norm, config)
        return x
    for n, d in zip(reversed(s[:-1]), reversed(axes[:-1])):  # irfftn: the real one last
        x = _one_axis("ifft", x, n, d, norm, config)
    return _one_axis("irfft", x, s[-1], axes[-1], norm, config)


def fftn(a, s=None, axes=None, norm=None, *, config: Config | None = None):
    """The N-D transform over ``axes`` (lengths ``s``), as ``jax.numpy.fft.fftn``:
    one streamed pass per axis.

    Example:
      >>> import numpy as np, jask
      >>> x = jask.from_numpy(np.ones((2, 2)))
      >>> jask.fft.fftn(x).to_numpy().real
      array([[4., 0.],
             [0., 0.]], dtype=float32)
    """
    return _n_axes("fftn", a, s, axes, norm, config)


def ifftn(a, s=None, axes=None, norm=None, *, config: Config | None = None):
    """The inverse of :func:`fftn`, as ``jax.numpy.fft.ifftn``."""
    return _n_axes("ifftn", a, s, axes, norm, config)


def rfftn(a, s=None, axes=None, norm=None, *, config: Config | None = None):
    """The N-D transform of real data, as ``jax.numpy.fft.rfftn``."""
    return _n_axes("rfftn", a, s, axes, norm, config)


def irfftn(a, s=None, axes=None, norm=None, *, config: Config | None = None):
    """The inverse of :func:`rfftn`, as ``jax.numpy.fft.irfftn``."""
    return _n_axes("irfftn", a, s, axes, norm, config)


def fft2(a, s=None, axes=(-2, -1), norm=None, *, config: Config | None = None):
    """:func:`fftn` over the last two axes, as ``jax.numpy.fft.fft2``."""
    return _n_axes("fftn", a, s, axes, norm, config)


def ifft2(a, s=None, axes=(-2, -1), norm=None, *, config: Config | None = None):
    """:func:`ifftn` over the last two axes, as ``jax.numpy.fft.ifft2``."""
    return _n_axes("ifftn", a, s, axes, norm, config)


def rfft2(a, s=None, axes=(-2, -1), norm=None, *, config: Config | None = None):
    """:func:`rfftn` over the last two axes, as ``jax.numpy.fft.rfft2``."""
    return _n_axes("rfftn", a, s, axes, norm, config)


def irfft2(a, s=None, axes=(-2, -1), norm=None, *, config: Config | None = None):
    """:func:`irfftn` over the last two axes, as ``jax.numpy.fft.irfft2``."""
    return _n_axes("irfftn", a, s, axes, norm, config)


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of an ``n``-point transform (``n`` values, in
    memory), as ``jax.numpy.fft.fftfreq``."""
    return jnp.fft.fftfreq(n, d, dtype=dtype, device=device)


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of :func:`rfft` (``n // 2 + 1`` values, in
    memory), as ``jax.numpy.fft.rfftfreq``."""
    return jnp.fft.rfftfreq(n, d, dtype=dtype, device=device)


def _shifts(x, axes, sign: int):
    aval = disk_type(x)
    assert aval is not None  # the callers checked that x is a DiskArray
    ndim = aval.ndim
    if axes is None:
        axes = tuple(range(ndim))
    axes = tuple(int(d) % ndim for d in np.atleast_1d(np.asarray(axes, dtype=np.int64)))
    return [sign * (aval.shape[d] // 2) for d in axes], axes


def fftshift(x, axes=None, *, config: Config | None = None):
    """The zero frequency moved to the middle of ``axes`` (all by default),
    as ``jax.numpy.fft.fftshift``: a roll (a streamed gather) of a DiskArray."""
    if disk_type(x) is None:
        return jnp.fft.fftshift(x, axes)
    shift, axes = _shifts(x, axes, 1)
    return roll(x, shift, axes, config=config)


def ifftshift(x, axes=None, *, config: Config | None = None):
    """The inverse of :func:`fftshift`, as ``jax.numpy.fft.ifftshift``."""
    if disk_type(x) is None:
        return jnp.fft.ifftshift(x, axes)
    shift, axes = _shifts(x, axes, -1)
    return roll(x, shift, axes, config=config)
