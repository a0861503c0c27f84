"""Per-op benchmark cases: the same op written with jask, dask.array and numpy.

Each case function takes one ``params`` dict and does its *untimed* setup,
then returns ``(op, sample)``: ``op()`` performs the timed work and returns a
result handle; ``sample(result)`` returns one float (a position-weighted sum
of a corner of the output, or the scalar itself) used to cross-check the
implementations.  :mod:`benchmarks.measure` runs each case in a fresh process.

``params`` keys: ``op``, ``inputs`` (name -> {zarr, raw, shape, chunks}),
``out`` (empty directory for outputs), ``target`` (a private copy of an input
for in-place ops), ``budget`` (bytes), ``scratch`` (jask scratch dir), ``lr``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import zarr

DTYPE = np.float32
SCALAR = 2.5
CORNER = (slice(0, 48), slice(0, 16))


@dataclass(frozen=True)
class Row:
    """One table row: op key, its inputs, and which input is copied as target."""

    label: str
    op: str
    inputs: tuple
    target: str | None = None


ROWS = (
    Row("add", "add", ("x", "y")),
    Row("mul-by-scalar", "mul", ("x",)),
    Row("square", "square", ("x",)),
    Row("transpose", "transpose", ("x",)),
    Row("sum", "sum", ("x",)),
    Row("dot", "dot", ("a", "b")),
    Row("update_", "update", ("x",), target="y"),
    Row("train step", "train", ("x", "ty"), target="w0"),
)

ROW_INPUTS = {row.op: row.inputs for row in ROWS}
CASE_FUNCS = {"jask": "jask_case", "dask": "dask_case", "numpy": "numpy_case"}


# ----------------------------------------------------------------- sampling
def weighted_corner(block) -> float:
    """Position-weighted sum of a small 2-D block (detects transposes/shifts)."""
    block = np.asarray(block, dtype=np.float64)
    block = block.reshape(block.shape[0], -1)
    i, j = np.indices(block.shape)
    return float((block * (1 + i + 7 * j)).sum())


def zarr_sample(path: str) -> float:
    """Weighted corner of a zarr array on disk."""
    return weighted_corner(zarr.open_array(path, mode="r")[CORNER])


def raw_sample(path: str, shape) -> float:
    """Weighted corner of a raw float32 file."""
    return weighted_corner(np.memmap(path, DTYPE, "r", shape=tuple(shape))[CORNER])


# --------------------------------------------------------------------- jask
def _ready(value):
    """Block until an (async) result is materialised, if it supports that."""
    if hasattr(value, "block_until_ready"):
        value.block_until_ready()
    return value


def _jask_sample(result) -> float:
    """Sample a jask result: a DiskArray's store, or a scalar."""
    if hasattr(result, "filename"):
        return zarr_sample(result.filename)
    return float(np.asarray(result))


JASK_OPS = {
    "add": lambda j, a: j.add(a["x"], a["y"]),
    "mul": lambda j, a: j.mul(a["x"], SCALAR),
    "square": lambda j, a: j.square(a["x"]),
    "transpose": lambda j, a: j.transpose(a["x"]),
    "sum": lambda j, a: j.sum(a["x"]),
    "dot": lambda j, a: j.dot(a["a"], a["b"]),
}


def _jask_train_op(jask, arrays, params):
    """Build one jitted step of least squares on disk: forward + grad + update_."""
    import jax

    X, y = arrays["x"], arrays["ty"]
    w = jask.DiskArray.from_numpy(zarr.open_array(params["target"]["zarr"], mode="r")[:])
    lr = params["lr"]

    def loss(w):
        return jask.sum(jask.square(X @ w - y))

    step = jax.jit(lambda w: w.update_(w - lr * jax.grad(loss)(w)))
    return lambda: _ready(step(w))


def jask_case(params):
    """jask: open the zarr inputs, run the op under the memory budget."""
    import jask

    jask.set_memory_budget(params["budget"], scratch_dir=params["scratch"])
    arrays = {k: jask.open(v["zarr"]) for k, v in params["inputs"].items()}
    op = params["op"]
    if op == "train":
        return _jask_train_op(jask, arrays, params), _jask_sample
    if op == "update":
        # a private copy of y (made by the runner), overwritten in place
        target = jask.open(params["target"]["zarr"])
        return (lambda: _ready(target.update_(arrays["x"]))), _jask_sample
    return (lambda: _ready(JASK_OPS[op](jask, arrays))), _jask_sample


# --------------------------------------------------------------------- dask
DASK_OPS = {
    "add": lambda a: a["x"] + a["y"],
    "mul": lambda a: a["x"] * DTYPE(SCALAR),
    "square": lambda a: a["x"] * a["x"],
    "transpose": lambda a: a["x"].T,
    "dot": lambda a: a["a"] @ a["b"],
}


def _dask_train(arrays, lr):
    """Least-squares step as one dask graph: w - lr * 2 X^T (X w - y)."""
    X, y = arrays["x"], arrays["ty"]
    return arrays["w"] - DTYPE(lr * 2) * (X.T @ (X @ arrays["w"] - y))


def dask_case(params):
    """dask.array: from_zarr -> op -> to_zarr with the input's chunking."""
    import dask.array as da

    arrays = {k: da.from_zarr(v["zarr"]) for k, v in params["inputs"].items()}
    op = params["op"]
    if op == "sum":
        return (lambda: arrays["x"].sum().compute()), float
    if op in ("update", "train"):
        target = zarr.open_array(params["target"]["zarr"], mode="r+")
        if op == "update":
            result = arrays["x"]
        else:
            # w is small: load it now so the graph never reads the store it writes
            arrays["w"] = da.from_array(target[:], chunks=(arrays["x"].chunks[1], 1))
            result = _dask_train(arrays, params["lr"])
        path = params["target"]["zarr"]
    else:
        result = DASK_OPS[op](arrays)
        path = os.path.join(params["out"], "out.zarr")
        target = zarr.create_array(store=path, shape=result.shape, dtype=DTYPE,
                                   chunks=tuple(c[0] for c in result.chunks),
                                   compressors=None)
    return (lambda: da.to_zarr(result, target)), (lambda _: zarr_sample(path))


# -------------------------------------------------------------------- numpy
def _band_rows(n_rows: int, row_bytes: int, budget: int, buffers: int) -> int:
    """Rows per band so that ``buffers`` bands fit in ``budget`` bytes.

    Rounded down to a multiple of 1024 when possible, so float32 column
    strips of that width are whole pages.
    """
    rows = max(1, budget // (buffers * row_bytes))
    return int(min(n_rows, rows - rows % 1024 if rows >= 1024 else rows))


def _bands(n_rows: int, rows: int):
    """Row slices of height ``rows`` covering ``n_rows``."""
    return [slice(r, min(r + rows, n_rows)) for r in range(0, n_rows, rows)]


def _window(path: str, shape, rows: slice, mode: str = "r") -> np.memmap:
    """Memory-map only the row band ``rows`` of a raw C-order float32 file."""
    row_bytes = shape[1] * np.dtype(DTYPE).itemsize
    return np.memmap(path, DTYPE, mode, offset=rows.start * row_bytes,
                     shape=(rows.stop - rows.start, shape[1]))


def _new_raw(path: str, shape) -> None:
    """Create an (empty, sparse) raw float32 file of ``shape``."""
    with open(path, "wb") as f:
        f.truncate(int(np.prod(shape)) * np.dtype(DTYPE).itemsize)


NUMPY_ELEMENTWISE = {
    "add": lambda x, y: np.add(x, y),
    "mul": lambda x: x * DTYPE(SCALAR),
    "square": lambda x: np.square(x),
    "update": lambda x: x,
}


def _np_elementwise(params, out_path):
    """Band loop: map input bands, apply the op, write the output band."""
    names = list(params["inputs"])
    shape = params["inputs"][names[0]]["shape"]
    fn = NUMPY_ELEMENTWISE[params["op"]]
    rows = _band_rows(shape[0], shape[1] * 4, params["budget"], buffers=4)
    for band in _bands(shape[0], rows):
        ins = [_window(params["inputs"][n]["raw"], shape, band) for n in names]
        out = _window(out_path, shape, band, "r+")
        out[:] = fn(*ins)
        del ins, out  # unmap before the next band


def _np_sum(params):
    """Band loop: float32 pairwise sum per band, float64 across bands."""
    x = params["inputs"]["x"]
    rows = _band_rows(x["shape"][0], x["shape"][1] * 4, params["budget"], buffers=2)
    total = 0.0
    for band in _bands(x["shape"][0], rows):
        total += float(_window(x["raw"], x["shape"], band).sum(dtype=DTYPE))
    return total


def _np_transpose(params, out_path):
    """Tile loop: tile (i, j) of the input becomes tile (j, i) of the output."""
    x = params["inputs"]["x"]
    n0, n1 = x["shape"]
    rows = _band_rows(n0, n1 * 4, params["budget"], buffers=4)
    for band in _bands(n0, rows):
        src = _window(x["raw"], x["shape"], band)
        for cols in _bands(n1, rows):
            dst = _window(out_path, (n1, n0), cols, "r+")
            dst[:, band] = src[:, cols].T
            del dst
        del src


def _np_dot(params, out_path):
    """Tile loop C[i, j] = A[i, :] @ B[:, j] with row/column bands of A/B."""
    a, b = params["inputs"]["a"], params["inputs"]["b"]
    n, k = a["shape"]
    m = b["shape"][1]
    rows = _band_rows(max(n, m), k * 4, params["budget"], buffers=4)
    for ib in _bands(n, rows):
        a_band = np.array(_window(a["raw"], a["shape"], ib))
        for jb in _bands(m, rows):
            b_map = np.memmap(b["raw"], DTYPE, "r", shape=tuple(b["shape"]))
            b_band = np.array(b_map[:, jb])
            del b_map
            out = _window(out_path, (n, m), ib, "r+")
            out[:, jb] = a_band @ b_band
            del out


def _np_train(params):
    """One fused pass over X: r = X_b w - y_b; g += X_b^T r; then update w."""
    x, ty, tgt = params["inputs"]["x"], params["inputs"]["ty"], params["target"]
    n, d = x["shape"]
    w = np.fromfile(tgt["raw"], DTYPE).reshape(d, 1)
    grad = np.zeros((d, 1), DTYPE)
    rows = _band_rows(n, d * 4, params["budget"], buffers=3)
    for band in _bands(n, rows):
        xb = _window(x["raw"], x["shape"], band)
        r = xb @ w - _window(ty["raw"], ty["shape"], band)
        grad += xb.T @ r
        del xb
    w_out = np.memmap(tgt["raw"], DTYPE, "r+", shape=(d, 1))
    w_out[:] = w - DTYPE(params["lr"] * 2) * grad
    w_out.flush()


def numpy_case(params):
    """Hand-written numpy loop over raw files via per-band np.memmap windows."""
    op = params["op"]
    if op == "sum":
        return (lambda: _np_sum(params)), float
    if op in ("update", "train"):
        tgt = params["target"]
        run = _np_train if op == "train" else (lambda p: _np_elementwise(p, tgt["raw"]))
        return (lambda: run(params)), (lambda _: raw_sample(tgt["raw"], tgt["shape"]))
    first = params["inputs"][ROW_INPUTS[op][0]]
    shape = list(first["shape"])
    if op == "transpose":
        shape = shape[::-1]
    elif op == "dot":
        shape = [shape[0], params["inputs"]["b"]["shape"][1]]
    out_path = os.path.join(params["out"], "out.f32")
    _new_raw(out_path, shape)
    run = {"transpose": _np_transpose, "dot": _np_dot}.get(op, _np_elementwise)
    return (lambda: run(params, out_path)), (lambda _: raw_sample(out_path, shape))

