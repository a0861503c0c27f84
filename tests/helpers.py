"""Shared helpers for jask's tests."""
import numpy as np

#: Small enough that the odd shapes used in the tests span many tiles.
SMALL_BUDGET = "64KB"


def tolerance(dtype):
    if np.dtype(dtype) == np.float32:
        return dict(rtol=2e-4, atol=2e-4)
    return dict(rtol=1e-10, atol=1e-10)


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)
