"""Second-order training on data larger than memory: Newton, Newton-CG and
L-BFGS in jask against dask-glm on one store (issue 28).

``python -m benchmarks.second_order [--quick] [--rows N] [--features K] [--budget B]
[--problems logistic,least-squares] [--only METHOD,...]``

X (rows x features float32, uncompressed Zarr, chunks of budget/16, written by
``benchmarks.workloads.write_data``: standard normal features, labels
``y = [X @ w_true + noise > 0]``) is several times the memory budget. Each
problem is solved from ``w = 0`` to ``|g| <= 1e-6 |g0|``, every method in a
fresh process (``benchmarks.measure.run_case``), the page cache dropped
before the timed solve as in ``benchmarks.passes``:

* ``jask newton``: ``jax.jit`` of the loss, ``jax.grad`` and ``jax.hessian``
  in one program (one pass over X), then ``jnp.linalg.solve``; a step that
  raises the loss is halved (never needed here from ``w = 0``, but it is
  what makes Newton safe to start anywhere).
* ``jask newton-cg``: inexact Newton, each step's direction from conjugate
  gradients on ``H s = g`` to the forcing tolerance
  ``min(0.5, sqrt(|g|/|g0|)) |g|``, each CG iteration one jitted
  Hessian-vector product ``jax.jvp(jax.grad(loss), (w,), (v,))`` (one pass).
  The value and gradient at a new point come with the product along the
  step that led there, ``jax.jvp(jax.value_and_grad(loss), (w,), (s,))``, in
  the same pass, so CG starts from the best multiple of the last step and
  often needs no product at all. ``jax.scipy.sparse.linalg.cg`` does not run
  under ``jax.jit`` with a DiskArray in its matrix (JAX's
  ``custom_linear_solve`` takes no hi-typed constant: an ``AttributeError``
  inside JAX's lowering), so CG is written out as a ``lax.while_loop`` (ten
  lines), which jask runs as one compiled loop; halving as for Newton.
* ``jask optax.lbfgs``: optax's own L-BFGS (zoom line search) with
  ``optax.value_and_grad_from_state``, the update jitted.
* ``dask-glm newton`` and ``dask-glm lbfgs`` (dask-glm 0.4.0, when it is
  installed; it is not one of jask's dependencies): ``dask_glm.algorithms``
  on ``da.from_array`` of a counting wrapper of the same ``zarr.Array`` that
  ``da.from_zarr`` would read, ``normalize=False`` (dask-glm standardises X
  by default: another problem, and one more pass).

The problems are the same in both libraries: dask-glm minimises the *sum*
over rows of the loss (``Logistic``: ``sum(softplus(X b) - y X b)``;
``Normal``: ``sum((y - X b)**2)``) and jask here the mean, which has the same
minimiser; neither is regularised, because dask-glm's ``newton`` takes no
regularizer (its ``**kwargs`` swallow ``regularizer=``). dask-glm's own
stopping rules are set so that they end at the same tolerance: ``lbfgs``'s
``tol`` (scipy's ``pgtol``, on the largest component of the sum's gradient)
is ``1e-6 |g0| / sqrt(features)``, and ``newton``'s (on the largest change of
a coefficient) ``--glm-newton-tol``.

Columns: passes over X (jask: ``jask.track().passes(X)``; dask-glm: the array
bytes its ``from_array`` read over X's size), seconds to tolerance (the timed
solve; ``first s`` is the untimed solve before it, in which every
program is compiled, jask's and the small in-memory ones: optax's L-BFGS
step compiles twice, as ``opt.init``'s state and the step's differ in weak
types), iterations (Newton steps; Newton-CG: steps and CG products;
L-BFGS: jask's iterations, dask-glm's evaluations of loss and gradient),
peak RSS of the solve over the RSS before it, ``|g|/|g0|`` and
``max |w - w64|`` at the returned ``w``, both in float64 against a float64
Newton solution computed in numpy from the same store.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
from dask.utils import format_bytes, parse_bytes

from benchmarks.measure import run_case, run_json
from benchmarks.passes import drop_page_cache
from benchmarks.report import fmt_seconds, text_table
from benchmarks.workloads import write_data

PROBLEMS = ("logistic", "least-squares")
METHODS = ("jask newton", "jask newton-cg", "jask optax.lbfgs", "dask-glm newton",
           "dask-glm lbfgs")
TOL = 1e-6
MAX_STEPS = {"newton": 30, "newton-cg": 30, "lbfgs": 500}


# --- the float64 reference (numpy over the store's chunks) ---------------------------

def _chunks(params: dict):
    """(X block, y block) as float64, one chunk of rows at a time."""
    import zarr
    zx, zy = zarr.open_array(params["X"], mode="r"), zarr.open_array(params["y"], mode="r")
    rows = zx.chunks[0]
    for start in range(0, zx.shape[0], rows):
        yield (zx[start:start + rows].astype(np.float64),
               zy[start:start + rows].astype(np.float64))


def _terms(params: dict, w: np.ndarray, hessian: bool = True):
    """The mean loss's gradient at the columns of ``w`` (d x k), and its
    Hessian at the first column."""
    from scipy.special import expit
    n = 0
    g = H = None
    for x, y in _chunks(params):
        z = x @ w
        if params["problem"] == "logistic":
            r, curv = expit(z) - y[:, None], expit(z) * (1 - expit(z))
        else:
            r, curv = 2 * (z - y[:, None]), np.full_like(z, 2.0)
        g = x.T @ r if g is None else g + x.T @ r
        if hessian:
            h = (x * curv[:, :1]).T @ x
            H = h if H is None else H + h
        n += x.shape[0]
    return g / n, (H / n if hessian else None)


def reference(params: dict) -> dict:
    """w64: float64 Newton to |g| <= 1e-13 |g0| (cached beside the store)."""
    path = os.path.join(os.path.dirname(params["X"]), f"reference-{params['problem']}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    import zarr
    d = zarr.open_array(params["X"], mode="r").shape[1]
    w = np.zeros((d, 1))
    g0 = None
    for _ in range(40):
        g, H = _terms(params, w)
        norm = float(np.linalg.norm(g))
        g0 = norm if g0 is None else g0
        if norm <= 1e-13 * g0:
            break
        w = w - np.linalg.solve(H, g)
    out = {"w": w[:, 0].tolist(), "g0": g0, "g": norm}
    with open(path, "w") as f:
        json.dump(out, f)
    return out


def gradient_norms(params: dict) -> list:
    """float64 |g| at each of ``params["ws"]`` (one pass for all of them)."""
    W = np.asarray(params["ws"], np.float64).T
    g, _ = _terms(params, W, hessian=False)
    return np.linalg.norm(g, axis=0).tolist()


# --- jask ------------------------------------------------------------------------------

def _jask_loss(problem: str, X, y):
    import jask
    n = X.shape[0]
    if problem == "logistic":
        def loss(w):
            z = X @ w
            return jask.sum(jask.nn.softplus(z) - y * z) / n
    else:
        def loss(w):
            return jask.sum(jask.square(X @ w - y)) / n
    return loss


def _halving(value_and_grad, v, g, w, step, counts):
    """``w - t step`` for the first t = 1, 1/2, ... that does not raise the loss
    (float32 rounding of the loss allowed): its value and gradient."""
    import jax.numpy as jnp
    t = 1.0
    while True:
        new = w - t * step
        out = value_and_grad(new)
        counts["evaluations"] += 1
        slope = float(jnp.vdot(g, step))
        if float(out[0]) <= float(v) - 1e-4 * t * slope + 1e-6 * abs(float(v)) or t < 1e-3:
            return new, out
        t /= 2
        counts["halvings"] += 1


def jask_case(params: dict):
    import jax
    import jax.numpy as jnp
    import optax

    import jask
    jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
    X, y = jask.open(params["X"]), jask.open(params["y"])
    loss = _jask_loss(params["problem"], X, y)
    d = X.shape[1]
    w0 = jnp.zeros(d, jnp.float32)
    method = params["method"].split()[-1].removeprefix("optax.")
    counts = {"steps": 0, "evaluations": 0, "halvings": 0, "products": 0}

    if method == "newton":
        @jax.jit
        def terms(w):  # value, gradient and Hessian: one program, one pass over X
            v, g = jax.value_and_grad(loss)(w)
            return v, g, jax.hessian(loss)(w)

        def solve():
            w, (v, g, H) = w0, terms(w0)
            counts["evaluations"] += 1
            g0 = float(jnp.linalg.norm(g))
            while float(jnp.linalg.norm(g)) > TOL * g0 and counts["steps"] < MAX_STEPS[method]:
                w, (v, g, H) = _halving(terms, v, g, w, jnp.linalg.solve(H, g), counts)
                counts["steps"] += 1
            return w, float(jnp.linalg.norm(g)) / g0
    elif method == "newton-cg":
        value_and_grad = jax.value_and_grad(loss)

        @jax.jit
        def terms(w, s):  # value, gradient and the product H s: one pass over X
            (v, g), (_, hs) = jax.jvp(value_and_grad, (w,), (s,))
            return v, g, hs

        @jax.jit
        def direction(w, x, r, tol):
            """Conjugate gradients on H s = g from s = x (residual r = g - H x)
            to |H s - g| <= tol: one Hessian-vector product (one pass) each."""
            def more(state):
                i, _, _, _, rr = state
                return (i < d) & (rr > tol * tol)

            def iteration(state):
                i, x, r, p, rr = state
                hp = jax.jvp(jax.grad(loss), (w,), (p,))[1]
                alpha = rr / jnp.vdot(p, hp)
                x, r = x + alpha * p, r - alpha * hp
                rr_new = jnp.vdot(r, r)
                return i + 1, x, r, r + (rr_new / rr) * p, rr_new

            i, x, *_ = jax.lax.while_loop(more, iteration, (0, x, r, r, jnp.vdot(r, r)))
            return x, i

        def solve():
            s = jnp.zeros_like(w0)
            w, (v, g, hs) = w0, terms(w0, s)
            counts["evaluations"] += 1
            g0 = norm = float(jnp.linalg.norm(g))
            while norm > TOL * g0 and counts["steps"] < MAX_STEPS[method]:
                forcing = min(0.5, (norm / g0) ** 0.5) * norm
                curvature = float(jnp.vdot(s, hs))
                if curvature > 0:  # start from the best multiple of the last step
                    alpha = jnp.vdot(g, s) / curvature
                    x, r = alpha * s, g - alpha * hs
                else:
                    x, r = jnp.zeros_like(g), g
                if float(jnp.linalg.norm(r)) > forcing:
                    x, products = direction(w, x, r, jnp.float32(forcing))
                    counts["products"] += int(products)
                s = x
                w, (v, g, hs) = _halving(lambda u: terms(u, s), v, g, w, s, counts)
                counts["steps"] += 1
                norm = float(jnp.linalg.norm(g))
            return w, norm / g0
    else:
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(loss)

        @jax.jit
        def step(w, state):
            v, g = value_and_grad(w, state=state)
            updates, state = opt.update(g, state, w, value=v, grad=g, value_fn=loss)
            return optax.apply_updates(w, updates), state, g

        def solve():
            w, state = w0, opt.init(w0)
            g0 = None
            while counts["steps"] < MAX_STEPS[method]:
                w, state, g = step(w, state)
                g0 = float(jnp.linalg.norm(g)) if g0 is None else g0
                counts["steps"] += 1
                norm = float(optax.tree.norm(optax.tree_utils.tree_get(state, "grad")))
                if norm <= TOL * g0:
                    break
            return w, norm / g0
    t0 = time.perf_counter()  # compile every program, jask's and the small in-memory
    jax.block_until_ready(solve())  # ones (solve, norm), in one untimed solve
    compile_s = time.perf_counter() - t0
    counts.update(steps=0, evaluations=0, halvings=0, products=0)
    how = drop_page_cache([params["X"], params["y"]])
    track = jask.track()
    result = {}

    def op():
        with track:
            w, ratio = solve()
            result["w"], result["own ratio"] = np.asarray(jax.block_until_ready(w)), ratio
        return result["w"]

    def counted() -> dict:
        if method == "newton-cg":
            iterations = f"{counts['steps']} + {counts['products']} CG"
        else:
            iterations = str(counts["steps"])
        if counts["halvings"]:
            iterations += f" ({counts['halvings']} halved)"
        return {"passes": track.passes(X), "iterations": iterations, "compile_s": compile_s,
                "w": result["w"].astype(np.float64).tolist(), "own": result["own ratio"],
                "cache": how}
    return op, lambda w: float(np.linalg.norm(w)), counted


# --- dask-glm --------------------------------------------------------------------------

def daskglm_case(params: dict):
    import dask.array as da
    import zarr
    from dask_glm import algorithms, families  # not a jask dependency: see main()

    from benchmarks.passes import CountingArray

    zx, zy = zarr.open_array(params["X"], mode="r"), zarr.open_array(params["y"], mode="r")
    cx, cy = CountingArray(zx), CountingArray(zy)
    X = da.from_array(cx, chunks=zx.chunks, name="X", lock=False)
    y = da.from_array(cy, chunks=zy.chunks, name="y", lock=False)
    base = families.Logistic if params["problem"] == "logistic" else families.Normal
    calls = {"hessian": 0, "loss": 0}

    class Counted(base):  # type: ignore[misc, valid-type]
        """dask-glm's family, counting its iterations (one Hessian a Newton step)
        and L-BFGS's evaluations of loss and gradient."""

        @staticmethod
        def hessian(Xbeta, X):
            calls["hessian"] += 1
            return base.hessian(Xbeta, X)

        @staticmethod
        def pointwise_loss(beta, X, y):
            calls["loss"] += 1
            return base.pointwise_loss(beta, X, y)

    method = params["method"].split()[-1]
    n, d = zx.shape
    if method == "newton":
        def op():
            return algorithms.newton(X, y, family=Counted, tol=params["glm_newton_tol"],
                                     max_iter=MAX_STEPS[method], normalize=False)
    else:  # scipy's pgtol bounds the largest component of the sum's gradient
        pgtol = TOL * params["g0"] * n / np.sqrt(d)

        def op():
            return algorithms.lbfgs(X, y, family=Counted, tol=pgtol,
                                    max_iter=MAX_STEPS[method], normalize=False)
    how = drop_page_cache([params["X"], params["y"]])
    result = {}

    def sample(w):
        result["w"] = np.asarray(w, np.float64).tolist()
        return float(np.linalg.norm(w))

    def counted() -> dict:
        iterations = (str(calls["hessian"]) if method == "newton"
                      else f"{calls['loss']} evaluations")
        return {"passes": cx.read / zx.nbytes, "iterations": iterations, "compile_s": 0.0,
                "w": result["w"], "cache": how}
    return op, sample, counted


# --- the table ---------------------------------------------------------------------------

def _row(problem: str, method: str, r: dict, ref: dict, norm: float | None) -> list:
    if "error" in r:
        return [problem, method, r["error"][:70]] + [""] * 6
    diff = float(np.max(np.abs(np.asarray(r["w"]) - np.asarray(ref["w"]))))
    ratio = "" if norm is None else f"{norm / ref['g0']:.1e}"
    return [problem, method, f"{r['passes']:.2f}", fmt_seconds(r["wall_s"]),
            fmt_seconds(r["compile_s"]) if r["compile_s"] else "-", r["iterations"],
            format_bytes(r["peak_rss"]), ratio, f"{diff:.1e}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.second_order",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="X of 2**19 x 32 (64 MiB) under an 8MB budget")
    parser.add_argument("--rows", type=int, default=None,
                        help="default 2**22 (512 MiB X, 32 features)")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--budget", default=None, help="default 64MB (8MB with --quick)")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--only", default=",".join(METHODS), help="methods, comma-separated")
    parser.add_argument("--glm-newton-tol", type=float, default=1e-5,
                        help="dask-glm newton's tol (largest change of a coefficient)")
    parser.add_argument("--data-dir", default=os.path.join(os.getcwd(), ".bench_data",
                                                           "second_order"))
    args = parser.parse_args(argv)
    rows = args.rows or (1 << 19 if args.quick else 1 << 22)
    budget = parse_bytes(args.budget or ("8MB" if args.quick else "64MB"))
    folder = os.path.join(args.data_dir, f"{rows}x{args.features}-{budget}")
    os.makedirs(folder, exist_ok=True)
    chunk_rows = max(1, budget // 16 // (args.features * 4))
    paths = write_data(folder, rows, args.features, chunk_rows)
    data_bytes = rows * args.features * 4
    try:
        import dask_glm
        glm = f"dask-glm {dask_glm.__version__}"
    except ImportError:
        glm = None
    load = os.getloadavg()
    print(f"X: {rows} x {args.features} float32 = {format_bytes(data_bytes)} "
          f"({data_bytes / budget:.1f}x the {format_bytes(budget)} budget), chunks of "
          f"{chunk_rows} rows; to |g| <= {TOL:g} |g0| from w = 0, one fresh process per "
          f"method; {glm or 'dask-glm not installed (pip install dask-glm): its rows skipped'}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start")
    methods = [m.strip() for m in args.only.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            parser.error(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    table, cache = [], set()
    for problem in [p.strip() for p in args.problems.split(",") if p.strip()]:
        if problem not in PROBLEMS:
            parser.error(f"unknown problem {problem!r}; choose from {', '.join(PROBLEMS)}")
        common = dict(paths, problem=problem, budget=budget,
                      scratch=os.path.join(folder, "scratch"),
                      glm_newton_tol=args.glm_newton_tol)
        ref = run_json("benchmarks.second_order", "reference", common, timeout=7200)
        if "error" in ref:
            print(f"{problem}: the float64 reference failed: {ref['error']}")
            continue
        common["g0"] = ref["g0"]
        results = {}
        for method in methods:
            if method.startswith("dask-glm") and glm is None:
                results[method] = {"error": "skipped: dask-glm is not installed"}
                continue
            func = "daskglm_case" if method.startswith("dask-glm") else "jask_case"
            results[method] = run_case("benchmarks.second_order", func,
                                       dict(common, method=method), timeout=7200)
            shutil.rmtree(common["scratch"], ignore_errors=True)
        done = [m for m in methods if "w" in results[m]]
        norms = run_json("benchmarks.second_order", "gradient_norms",
                         dict(common, ws=[results[m]["w"] for m in done]), timeout=7200)
        norms = dict(zip(done, norms)) if isinstance(norms, list) else {}
        cache |= {r["cache"] for r in results.values() if "cache" in r}
        for method in methods:
            table.append(_row(problem, method, results[method], ref, norms.get(method)))
    load = os.getloadavg()
    print(f"before each timed solve: {', '.join(sorted(cache)) or 'n/a'}; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end\n")
    print(text_table(["problem", "method", "passes X", "s to tol", "first s", "iterations",
                      "peak RSS", "|g|/|g0|", "max|w-w64|"], table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
