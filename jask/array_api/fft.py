"""The standard's ``fft`` extension: ``jask.array_api.fft``.

The standard's signatures (``fft(x, /, *, n=None, axis=-1, norm="backward")``,
``fftn(x, /, *, s=None, axes=None, norm="backward")``, ...) over
:mod:`jask.fft`: a transform of a DiskArray along one axis is streamed, whole
lanes of that axis per task for a block of the other axes, and refused (a
:class:`~jask.BudgetError` naming the op and what one lane needs) when a lane
does not fit in the budget; multi-axis transforms are one pass per axis.
Results are the namespace's arrays; ``fftfreq`` and ``rfftfreq`` are
creation functions, DiskArrays as the namespace's others are. Dtypes are the
standard's: ``complex64`` from ``float32`` and ``complex64`` data, ``float32``
from ``irfft`` of ``complex64``.

Example:
  >>> import numpy as np, jask.array_api as xp
  >>> x = xp.asarray(np.array([1.0, 0.0, -1.0, 0.0], np.float32))
  >>> xp.fft.rfft(x).to_numpy()
  array([0.+0.j, 2.+0.j, 0.+0.j], dtype=complex64)
"""
from __future__ import annotations

import numpy as np

from jask.api import fft as transforms
from jask.array_api._creation import asarray, check_device
from jask.array_api._dtypes import default_float
from jask.array_api._memory import wrap_module

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def _one_axis(kind: str, doc: str):
    """The standard's signature of a one-axis transform over :mod:`jask.fft`'s."""
    transform = getattr(transforms, kind)

    def function(x, /, *, n=None, axis=-1, norm="backward"):
        return transform(x, n=n, axis=axis, norm=norm)
    function.__name__ = function.__qualname__ = kind
    function.__doc__ = doc
    return function


def _n_axes(kind: str, doc: str):
    """The standard's signature of a transform over several axes."""
    transform = getattr(transforms, kind)

    def function(x, /, *, s=None, axes=None, norm="backward"):
        return transform(x, s=s, axes=axes, norm=norm)
    function.__name__ = function.__qualname__ = kind
    function.__doc__ = doc
    return function


fft = _one_axis("fft", "The 1-D discrete Fourier transform along ``axis`` (length ``n``).")
ifft = _one_axis("ifft", "The inverse of :func:`fft`.")
fftn = _n_axes("fftn", "The N-D transform over ``axes`` (lengths ``s``).")
ifftn = _n_axes("ifftn", "The inverse of :func:`fftn`.")
rfft = _one_axis("rfft", "The transform of real data: ``n // 2 + 1`` frequencies along "
                         "``axis``.")
irfft = _one_axis("irfft", "The inverse of :func:`rfft`: ``n`` real values (by default "
                           "``2 * (m - 1)``).")
rfftn = _n_axes("rfftn", "The N-D transform of real data (the real transform along the last "
                         "axis).")
irfftn = _n_axes("irfftn", "The inverse of :func:`rfftn`.")
hfft = _one_axis("hfft", "The transform of a Hermitian-symmetric signal given by its first "
                         "half.")
ihfft = _one_axis("ihfft", "The inverse of :func:`hfft`.")


def _frequencies(op: str, values: np.ndarray, dtype, device):
    check_device(op, device)
    dtype = default_float() if dtype is None else dtype
    return asarray(values, dtype=dtype)


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of an ``n``-point transform: a DiskArray of
    ``dtype`` (the default floating type)."""
    return _frequencies("fftfreq", np.fft.fftfreq(n, d), dtype, device)


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of :func:`rfft`: ``n // 2 + 1`` values."""
    return _frequencies("rfftfreq", np.fft.rfftfreq(n, d), dtype, device)


def fftshift(x, /, *, axes=None):
    """The zero frequency moved to the middle of ``axes`` (all by default)."""
    return transforms.fftshift(x, axes)


def ifftshift(x, /, *, axes=None):
    """The inverse of :func:`fftshift`."""
    return transforms.ifftshift(x, axes)


# every function takes the namespace's arrays (unwrapped) and answers them
wrap_module(globals(), __all__)
