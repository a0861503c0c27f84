"""Fit scikit-learn estimators on a DiskArray with Array API dispatch; print a table.

``python tests/scripts/sklearn_estimators.py [--budget 4MB] [--factor 3] [--json]``

Each estimator that scikit-learn's tags declare Array API support for (and
PCA's solvers separately; Ridge's only Array API solver is "svd", which
"auto" also picks, here without an intercept) is fitted on a float32 X of
``factor`` times the memory budget, held in a DiskArray (``jask.from_numpy``
of data this process made; the budget is set first), with
``sklearn.set_config(array_api_dispatch=True)``, and again on the same data in
numpy. A row says ``fit`` when fitting (and the estimator's transform or
predict, when it has one) ran and its fitted attributes and outputs match
numpy's within float32 rounding, ``wrong`` when it ran and something differs,
else the exception that stopped it, where it was raised, and its first line.
Run it after each change to re-measure the count.

SCIPY_ARRAY_API=1 is set here before scipy or scikit-learn is imported.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings

os.environ["SCIPY_ARRAY_API"] = "1"
# the jask of the checkout this script is in, not whichever one is installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis  # noqa: E402
from sklearn.kernel_approximation import Nystroem  # noqa: E402
from sklearn.linear_model import (  # noqa: E402
    LogisticRegression,
    PoissonRegressor,
    Ridge,
    RidgeClassifierCV,
    RidgeCV,
)
from sklearn.naive_bayes import GaussianNB  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    Binarizer,
    KernelCenterer,
    LabelEncoder,
    MinMaxScaler,
    Normalizer,
    PolynomialFeatures,
    StandardScaler,
)

import jask  # noqa: E402
from jask.base.rss import current_rss, peak_rss, reset_peak_rss  # noqa: E402

D = 20  # features (more than randomized PCA's 3 + 10 oversamples)

#: (name, make the estimator, y: None / "regression" / "classes" / "positive", what it is fitted on)
ESTIMATORS = [
    ("PCA(full)", lambda: PCA(3, svd_solver="full"), None),
    ("PCA(covariance_eigh)", lambda: PCA(3, svd_solver="covariance_eigh"), None),
    ("PCA(randomized)", lambda: PCA(3, svd_solver="randomized", random_state=0), None),
    ("Ridge(svd)", lambda: Ridge(1.0, solver="svd"), "regression"),
    ("Ridge(auto)", lambda: Ridge(1.0, fit_intercept=False), "regression"),
    ("RidgeCV", lambda: RidgeCV(alphas=(0.1, 1.0, 10.0)), "regression"),
    # alphas whose GCV errors differ by more than float32 rounding: with (0.1, 100.0) the mean
    # errors on this data differ by 1.4e-8 of their size (float64: 0.53634343, 0.53634342), a
    # tie that float32 (jask has no float64, where numpy's fit is float64) decides either way
    ("RidgeClassifierCV", lambda: RidgeClassifierCV(alphas=(0.1, 1e5)), "classes"),
    ("LinearDiscriminantAnalysis", lambda: LinearDiscriminantAnalysis(), "classes"),
    ("GaussianNB", lambda: GaussianNB(), "classes"),
    ("LogisticRegression", lambda: LogisticRegression(max_iter=50), "classes"),
    ("PoissonRegressor", lambda: PoissonRegressor(max_iter=50), "positive"),
    ("StandardScaler", lambda: StandardScaler(), None),
    ("MinMaxScaler", lambda: MinMaxScaler(), None),
    ("Normalizer", lambda: Normalizer(), None),
    ("Binarizer", lambda: Binarizer(threshold=0.1), None),
    ("PolynomialFeatures", lambda: PolynomialFeatures(2), None),
    ("Nystroem", lambda: Nystroem(n_components=20, random_state=0), None),
    ("KernelCenterer", lambda: KernelCenterer(), "kernel"),
    ("LabelEncoder", lambda: LabelEncoder(), "labels"),
]


def _numpy(v):
    if isinstance(v, jask.DiskArray):
        return v.to_numpy()
    if hasattr(v, "__array_namespace__") or hasattr(v, "__array__"):
        return np.asarray(v)
    return v


def _data(n: int, kind, rng):
    X = rng.standard_normal((n, D)).astype(np.float32) * np.arange(1, D + 1, dtype=np.float32)
    X += np.float32(0.5)
    w = rng.standard_normal(D).astype(np.float32)
    if kind is None:
        return X, None
    if kind == "regression":
        return X, (X @ w + 0.1 * rng.standard_normal(n)).astype(np.float32)
    if kind == "positive":
        return X, np.exp(0.1 * (X @ w) / D).astype(np.float32)
    if kind == "classes":
        return X, np.digitize(X @ w, np.quantile(X @ w, [1 / 3, 2 / 3])).astype(np.int32)
    if kind == "labels":  # LabelEncoder fits y alone
        return None, rng.integers(0, 5, n).astype(np.int32) * 3
    if kind == "kernel":  # a square kernel matrix, the same bytes as X
        m = int(np.sqrt(n * D))
        Z = rng.standard_normal((m, 4)).astype(np.float32)
        return Z @ Z.T, None
    raise ValueError(kind)


def _outputs(est, X, y) -> dict:
    """What the fitted estimator answers: its fitted attributes and outputs."""
    out = {}
    for name in sorted(vars(est)):
        if name.endswith("_") and not name.startswith("_") and name != "n_features_in_":
            out[name] = getattr(est, name)
    data = y if X is None else X
    for method in ("transform", "predict", "predict_proba"):
        if hasattr(est, method):
            try:
                out[method] = getattr(est, method)(data)
            except Exception as e:  # noqa: BLE001 - the table records it
                if method == "transform" or method == "predict":
                    raise
                out[method] = e
    return out


def _ties(est, X):
    """Which rows of X the numpy-fitted ``est`` scores its top two classes within float32
    rounding of (``predict`` there is float32 rounding, either way), or None."""
    for method in ("predict_joint_log_proba", "decision_function"):
        if hasattr(est, method) and X is not None:
            s = np.asarray(getattr(est, method)(X), dtype=np.float64)
            if s.ndim == 1:
                gap = np.abs(s)
            else:
                top = np.sort(s, axis=1)
                gap = top[:, -1] - top[:, -2]
            return gap <= 64 * np.finfo(np.float32).eps * np.max(np.abs(s))
    return None


def _poisson_objective(est, X, y):
    eta = X @ np.asarray(_numpy(est.coef_), np.float64) + float(_numpy(est.intercept_))
    w = np.asarray(_numpy(est.coef_), np.float64)
    return float(np.mean(np.exp(eta) - y * eta) + 0.5 * est.alpha * w @ w)


def _logistic_objective(est, X, y):
    w = np.asarray(_numpy(est.coef_), np.float64)
    z = X @ w.T + np.asarray(_numpy(est.intercept_), np.float64)
    z -= z.max(axis=1, keepdims=True)
    label = np.searchsorted(_numpy(est.classes_), y)
    loss = np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), label]
    return float(np.mean(loss) + 0.5 / (est.C * len(y)) * np.sum(w * w))


#: L-BFGS fits that stop at max_iter, or converge on a flat objective: any float32 rounding
#: moves their coefficients by more than 2e-3 (numpy's own float32 and float64 fits differ by
#: 0.2% (Poisson) and 3.3% (logistic) on this data, the logistic one's predictions on 592
#: rows). Their rows compare the coefficients by the objective they minimize (in float64),
#: within the larger of numpy's float32 vs float64 spread and float32 rounding of it, and
#: the other outputs with numpy's float64 fit's, within numpy's float32 vs float64 spread
OBJECTIVES = {"PoissonRegressor": _poisson_objective, "LogisticRegression": _logistic_objective}


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/sklearn/" in f.filename or "/array_api_" in f.filename]
    f = (ours or frames)[-1]
    return f"{f.filename.split('site-packages/')[-1]}:{f.lineno}"


#: fitted attributes that name scikit-learn's choice for the namespace, not a value: under
#: Array API dispatch Ridge's solver "auto" is "svd" (its one Array API solver), with numpy
#: "cholesky"; the row's detail says so when they differ, and the values are compared as ever
CHOICES = {"solver_"}
#: counts of an iterative solver's steps: where float32 rounding stops L-BFGS an iteration
#: earlier or later, the fitted values (compared) still agree within the solver's tol
ITERATIONS = {"n_iter_"}


def _compare(got: dict, want: dict, scales: dict | None = None, ties=None,
             skip=(), spread: dict | None = None) -> str | None:
    """The first of ``want``'s entries ``got`` differs in, or None. A float entry matches
    within float32 rounding of its own largest value, or of ``scales[name]`` where that is
    larger: an intercept near 0 is ``mean(y) - mean(X) @ coef``, rounded at y's scale.
    ``predict`` may differ on the rows ``ties`` marks; ``skip`` names entries not compared;
    ``spread[name]`` widens an entry's tolerance (floats: an absolute difference; others: a
    count of differing elements)."""
    scales = scales or {}
    spread = spread or {}
    for name, w in want.items():
        if name in skip:
            continue
        if name not in got:
            return f"{name} missing"
        g = got[name]
        if isinstance(w, Exception) or (name in CHOICES and isinstance(w, str)) \
                or name in ITERATIONS:
            continue
        g, w = _numpy(g), _numpy(w)
        if isinstance(w, np.ndarray) or np.isscalar(w):
            g, w = np.asarray(g), np.asarray(w)
            if g.shape != w.shape:
                return f"{name}: shape {g.shape}, numpy's {w.shape}"
            if w.dtype.kind in "fc":
                scale = max(np.max(np.abs(w)) if w.size else 1.0, scales.get(name, 0.0))
                if not np.allclose(g, w, rtol=2e-3, atol=max(2e-3 * scale, 1e-30,
                                                                  spread.get(name, 0.0))):
                    return f"{name}: max diff {np.max(np.abs(g - w)):.3g}"
            elif name in spread:
                if np.sum(g != w) > spread[name]:
                    return f"{name}: {np.sum(g != w)} differ, numpy float32's {spread[name]}"
            elif name == "predict" and ties is not None:
                if np.any((g != w) & ~ties):
                    return f"{name}: differs where numpy's class scores do not tie"
            elif not np.array_equal(g, w):
                return f"{name}: differs"
    return None


class Timeout(Exception):
    """An estimator that ran past ``--timeout`` seconds (a row of the table)."""


def _alarm(signum, frame):
    raise Timeout("still running")


def run(budget: str, factor: float, timeout: int = 120) -> list[dict]:
    jask.set_memory_budget(budget, scratch_dir=tempfile.mkdtemp(prefix="jask-sklearn-"))
    n = int(factor * jask.get_config().max_memory / (D * 4))
    rng = np.random.default_rng(0)
    rows = []
    for name, make, kind in ESTIMATORS:
        X, y = _data(n, kind, rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sklearn.set_config(array_api_dispatch=False)
            ref = make().fit(y) if X is None else make().fit(X, y)
            want = _outputs(ref, X, y)
            ties = _ties(ref, X)
            objective = OBJECTIVES.get(name)
            spread = {}
            if objective is not None:
                X64 = X.astype(np.float64)
                ref64 = make().fit(X64, y.astype(np.float64) if y.dtype.kind == "f" else y)
                want64 = _outputs(ref64, X64, y)
                for k, w in want.items():
                    w, w64 = _numpy(w), _numpy(want64[k])
                    if isinstance(w, np.ndarray) and w.dtype.kind in "fc":
                        spread[k] = float(np.max(np.abs(w - w64)))
                    elif isinstance(w, np.ndarray) and w.shape == np.shape(w64):
                        spread[k] = int(np.sum(w != w64))
                objs = {"numpy32": objective(ref, X64, y), "numpy64": objective(ref64, X64, y)}
                want, ties = want64, None
            sklearn.set_config(array_api_dispatch=True)
            t = time.perf_counter()
            base = current_rss()
            reset_peak_rss()
            fit_peak = None
            signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(timeout)
            try:
                dX = None if X is None else jask.from_numpy(X)
                dy = None if y is None else jask.from_numpy(y)
                est = make()
                est.fit(dy) if dX is None else est.fit(dX, dy)
                got = _outputs(est, dX, dy)
                fit_peak = peak_rss()  # before the comparison brings the outputs into memory
                target = {"intercept_": float(np.max(np.abs(y)))} \
                    if y is not None and y.dtype.kind == "f" else {}
                skip = {"coef_", "intercept_"} if objective is not None else ()
                wrong = _compare(got, want, target, ties, skip, spread)
                notes = []
                if objective is not None:
                    objs["jask"] = objective(est, X.astype(np.float64), y)
                    tol = max(abs(objs["numpy32"] - objs["numpy64"]),
                              4 * np.finfo(np.float32).eps * abs(objs["numpy64"]))
                    if not wrong and abs(objs["jask"] - objs["numpy64"]) > tol:
                        wrong = "objective: " + ", ".join(f"{k} {v:.9g}" for k, v in objs.items())
                    by = ", ".join(f"{k} {v - objs['numpy64']:+.2g}"
                                   for k, v in objs.items() if k != "numpy64")
                    notes.append(f"against numpy float64: coef_ by objective ({by}), "
                                 "outputs within numpy float32's spread")
                if ties is not None and "predict" in want:
                    flips = int(np.sum(_numpy(got["predict"]) != _numpy(want["predict"])))
                    if flips:
                        notes.append(f"predict: {flips} of {len(ties)} differ, where numpy's "
                                     "class scores tie to float32 rounding")
                notes += [f"{c}: {got[c]!r} (numpy: {want[c]!r}), scikit-learn's choice"
                         for c in CHOICES if c in want and got.get(c) != want[c]]
                row = {"estimator": name, "result": "wrong" if wrong else "fit",
                       "detail": wrong or "; ".join(notes)}
            except Exception as e:  # noqa: BLE001 - the table records it
                first = (str(e).splitlines() or [""])[0]
                row = {"estimator": name, "result": type(e).__name__,
                       "detail": f"{_where(e)}: {first[:150]}"}
            finally:
                signal.alarm(0)
                sklearn.set_config(array_api_dispatch=False)
        row["seconds"] = round(time.perf_counter() - t, 2)
        # above the resident set before the fit: numpy's copy of X and the reference fit are
        # already in it, so what is left is the DiskArray fit's and its outputs' (with JAX's
        # compiles), not the comparison's copies of them
        # (where it stopped, up to the stop)
        row["peak_mb"] = round(max((fit_peak or peak_rss()) - base, 0) / 1e6, 1)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="4MB")
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per estimator")
    parser.add_argument("--only", nargs="*", help="estimator names to run")
    args = parser.parse_args()
    if args.only:
        ESTIMATORS[:] = [e for e in ESTIMATORS if e[0] in args.only]
    rows = run(args.budget, args.factor, args.timeout)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        return
    width = max(len(r["estimator"]) for r in rows)
    for r in rows:
        print(f"{r['estimator']:<{width}}  {r['result']:<20} {r['seconds']:>6}s "
              f"{r['peak_mb']:>6} MB  {r['detail']}")
    print(f"\n{sum(r['result'] == 'fit' for r in rows)} of {len(rows)} fit with numpy's values "
          f"(X of {args.factor}x a {args.budget} budget, scikit-learn {sklearn.__version__})")


if __name__ == "__main__":
    main()
