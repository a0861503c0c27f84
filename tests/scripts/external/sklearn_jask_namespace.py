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
"""
import sklearn.utils._array_api as _array_api


def yield_namespaces(include_numpy_namespaces=True):
    """jask's namespace, the one the tests are pointed at."""
    yield "jask.array_api"


_array_api.yield_namespaces = yield_namespaces
