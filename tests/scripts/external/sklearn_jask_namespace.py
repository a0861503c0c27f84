"""pytest plugin for external_suites.py: jask.array_api as scikit-learn's test namespace.

scikit-learn parametrizes its Array API tests (``check_array_api_input`` over
every estimator whose tags declare support, the metric compliance checks,
``utils/tests/test_array_api.py``, PCA's, the scalers', ...) with
``sklearn.utils._array_api.yield_namespace_device_dtype_combinations()``, which
walks ``yield_namespaces()`` (numpy, array_api_strict, cupy, torch, dpnp) and
hands each name to ``_array_api_for_tests``, which imports it. This plugin,
imported before any test module, makes ``yield_namespaces`` yield
``"jask.array_api"`` (device and dtype ``None``, as scikit-learn does for every
namespace but torch, dpnp and array_api_strict) and nothing else; every test
then runs as written, with ``array_api_dispatch=True`` where it sets it.
SCIPY_ARRAY_API=1 comes from the environment external_suites.py gives.

``_array_api_for_tests(name)`` turns the name into the namespace by
``get_namespace(module.asarray(1))``; for jask that 0-d array is a
``jax.Array`` (jask makes no 0-d store), so it would answer ``jax.numpy`` and
the tests would run on jax.numpy, not jask. For ``"jask.array_api"`` it is
wrapped to take the namespace of a one-element array instead
(``get_namespace(jask.array_api.asarray([1]))``, which is
``jask.array_api``), device ``None``, after the same SCIPY_ARRAY_API check;
every other name goes to scikit-learn's helper unchanged.
"""
import os
from unittest import SkipTest

import sklearn.utils._array_api as _array_api
import sklearn.utils._testing as _testing

_original_for_tests = _testing._array_api_for_tests


def yield_namespaces(include_numpy_namespaces=True):
    """jask's namespace, the one the tests are pointed at."""
    yield "jask.array_api"


_array_api.yield_namespaces = yield_namespaces


def _array_api_for_tests(array_namespace, device_name=None, dtype_name=None):
    """scikit-learn's helper, with jask's namespace taken from a 1-element array."""
    if array_namespace != "jask.array_api":
        return _original_for_tests(array_namespace, device_name, dtype_name)
    if os.environ.get("SCIPY_ARRAY_API") is None:
        raise SkipTest("SCIPY_ARRAY_API is not set: not checking array_api input")
    from sklearn.externals.array_api_compat import get_namespace

    import jask.array_api

    return get_namespace(jask.array_api.asarray([1])), None


_testing._array_api_for_tests = _array_api_for_tests
