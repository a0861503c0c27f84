"""pytest plugin for external_suites.py: jask as a backend of array-api-extra's suite.

array-api-extra's tests parametrize their ``library``/``xp`` fixtures over the
``array_api_extra._lib._backends.Backend`` enum (tests/main/conftest.py). An
enum cannot gain a member, so this plugin, imported before that conftest and
any test module, replaces the module's ``Backend`` by an enum with the same
members and methods plus ``JASK = "jask.array_api"``. The conftest's ``xp``
fixture then does for jask what it does for any backend it has no special
case for: ``pytest.importorskip("jask.array_api")`` and
``array_namespace(xp.empty(0))`` (jask.array_api itself). Markers naming other
backends (``skip_xp_backend(Backend.JAX)``, ...) keep naming those; no test's
body or assertion changes. ``-k jask`` selects the jask parametrizations.

array-api-extra's own pytest configuration turns warnings into errors, and
its ``TestDeprecatedFunctions`` counts on it (``pytest.raises(DeprecationWarning)``);
the wheel does not ship that configuration, so the plugin turns its own
deprecations (``xpx.<name> is deprecated``) into errors, and nothing else:
without it those tests fail for every backend, numpy's included.
"""
from enum import Enum

import array_api_extra._lib._backends as _backends

_Old = _backends.Backend
Backend = Enum("Backend", [(m.name, m.value) for m in _Old] + [("JASK", "jask.array_api")],
               module=_backends.__name__, qualname="Backend")
for _name in ("modname", "like", "pytest_param"):
    setattr(Backend, _name, _Old.__dict__[_name])
Backend.__doc__ = _Old.__doc__
_backends.Backend = Backend


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", r"error:`xpx\.:DeprecationWarning")
