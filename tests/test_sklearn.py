"""scikit-learn estimators with ``array_api_dispatch=True`` on a DiskArray over the budget.

One run of ``tests/scripts/sklearn_estimators.py`` in a process of its own
(``SCIPY_ARRAY_API=1`` must be set before scipy is first imported, which this
process may already have done) fits each estimator on a float32 X three times a
512 KB budget, held in a Zarr store, and again in numpy; a row is "fit" when
the fitted attributes and the transform / predict outputs match numpy's within
float32 rounding (L-BFGS fits: by their objective, and within numpy's own float32
vs float64 spread; class predictions: except where numpy's class scores tie to
float32 rounding). Each estimator that fits today is one test here; the others
are listed with the line of scikit-learn (or what jask lacks) that stops them,
in ``docs/array_api.rst``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("sklearn")

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "sklearn_estimators.py")

#: every estimator scikit-learn 1.9's tags declare Array API support for that fits a
#: DiskArray over the budget with numpy's values (PCA's three solvers, Ridge's two spellings)
FITS = ["PCA(full)", "PCA(covariance_eigh)", "PCA(randomized)", "Ridge(svd)", "Ridge(auto)",
        "RidgeCV", "RidgeClassifierCV", "LinearDiscriminantAnalysis", "GaussianNB",
        "LogisticRegression", "PoissonRegressor", "StandardScaler", "MinMaxScaler",
        "Normalizer", "Binarizer", "PolynomialFeatures", "Nystroem", "KernelCenterer",
        "LabelEncoder"]


@pytest.fixture(scope="module")
def rows():
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run(
        [sys.executable, SCRIPT, "--budget", "512KB", "--factor", "3", "--json",
         "--timeout", "120", "--only", *FITS],
        capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["estimator"]: r for r in json.loads(done.stdout)}


@pytest.mark.parametrize("name", FITS)
def test_estimator_fits_a_disk_array_with_numpys_values(name, rows):
    row = rows[name]
    assert row["result"] == "fit", f"{name}: {row['result']}: {row['detail']}"
