"""pytest plugin for external_suites.py: jask's setup in every client suite.

Loaded with ``-p jask_budget`` before the client's conftest files. It turns on
JAX's x64 mode (array-api-extra's conftest does so for its JAX backend and
xarray's test_duck_array_wrapping.py at import; jask's default dtypes follow
it) and sets jask's memory budget from ``JASK_EXTERNAL_BUDGET`` (jask's own
tests' small budget, 64KB, by default) with a scratch directory of its own
(``JASK_EXTERNAL_SCRATCH``), so the suites' small arrays go through the
disk-backed paths with as many tiles as jask will cut.
"""
import os

import jax

import jask

jax.config.update("jax_enable_x64", True)
jask.set_memory_budget(os.environ.get("JASK_EXTERNAL_BUDGET", "64KB"),
                       scratch_dir=os.environ.get("JASK_EXTERNAL_SCRATCH"))
