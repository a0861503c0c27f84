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
``get_namespace(module.asarray(1))``. Before jask's namespace was closed that
0-d array was a ``jax.Array``, so the helper answered ``jax.numpy`` and the
"jask" tests ran on jax.numpy (a first count here did: 182 of 279 "passed"
on jax.numpy). It is now a ``jask.array_api.InMemoryArray``, so scikit-learn's
helper runs unchanged; the wrapper below only checks that it answered
jask's namespace, and stops the run if not, so a count is never jax.numpy's.
"""
import sklearn.utils._array_api as _array_api
import sklearn.utils._testing as _testing

_original_for_tests = _testing._array_api_for_tests


def yield_namespaces(include_numpy_namespaces=True):
    """jask's namespace, the one the tests are pointed at."""
    yield "jask.array_api"


_array_api.yield_namespaces = yield_namespaces


def _array_api_for_tests(array_namespace, device_name=None, dtype_name=None):
    """scikit-learn's helper, checked to answer the namespace it was named."""
    xp, device = _original_for_tests(array_namespace, device_name, dtype_name)
    if array_namespace == "jask.array_api" and xp.__name__ != "jask.array_api":
        raise RuntimeError(f"scikit-learn's _array_api_for_tests('jask.array_api') answered "
                           f"{xp.__name__}: the tests would not run on jask")
    return xp, device


_testing._array_api_for_tests = _array_api_for_tests
