"""jask.array_api against array-api-strict, the standard's reference namespace.

One table of cases, each a function of a namespace and its input arrays, run
through both namespaces on the same numpy data; results are compared in
values and dtypes. Inputs have shapes a 64 KB budget splits into several
tiles. The table runs with JAX's x64 mode on, where jask's default dtypes are
the standard's (int64, float64); with it off, jask's defaults are JAX's
(int32, float32) by design.
"""
from __future__ import annotations

import doctest
import io

import jax
import numpy as np
import pytest

import jask
import jask.array_api as xp
from jask.array_api import _array, _creation, _dtypes, _functions, _memory

strict = pytest.importorskip("array_api_strict")
strict.set_array_api_strict_flags(api_version="2024.12")

SHAPE = (37, 53)  # float64: 25 x 25 tiles under the 64 KB budget


def _numpy(x) -> np.ndarray:
    """A result of either namespace (or a Python scalar) as a numpy array."""
    if isinstance(x, jask.DiskArray):
        return x.to_numpy()
    if type(x).__module__.startswith("array_api_strict"):
        return np.asarray(x._array)  # strict arrays refuse numpy's conversion on purpose
    return np.asarray(x)


def _inputs(ns, rng_seed=0) -> dict:
    rng = np.random.default_rng(rng_seed)
    data = {
        "x": rng.standard_normal(SHAPE),                     # float64
        "p": rng.uniform(0.1, 0.9, SHAPE).astype(np.float32),
        "i": rng.integers(-50, 50, SHAPE, dtype=np.int8),
        "u": rng.integers(0, 200, SHAPE[1], dtype=np.uint8),
        "b": rng.random(SHAPE) > 0.5,
        "m": rng.standard_normal((SHAPE[1], 19)),
        "v": rng.standard_normal(SHAPE[1]),
        "z": rng.standard_normal(SHAPE) + 1j * rng.standard_normal(SHAPE),   # complex128
        "c": (rng.standard_normal(SHAPE[1]) + 1j * rng.standard_normal(SHAPE[1])).astype(
            np.complex64),
    }
    return {k: ns.asarray(v) for k, v in data.items()}


#: (case id, family, function of (namespace, inputs)); each runs in both namespaces
CASES = [
    ("zeros", "creation", lambda ns, d: ns.zeros((40, 30), dtype=ns.int16)),
    ("ones-default", "creation", lambda ns, d: ns.ones((33, 41))),
    ("full-bool", "creation", lambda ns, d: ns.full((41, 3), True)),
    ("full-int", "creation", lambda ns, d: ns.full((5, 64), 2**40)),
    ("arange", "creation", lambda ns, d: ns.arange(-7, 3000, 3)),
    ("arange-float", "creation", lambda ns, d: ns.arange(0.5, 900.0, 0.75, dtype=ns.float32)),
    ("linspace", "creation", lambda ns, d: ns.linspace(-2.0, 9.0, 2500)),
    ("linspace-open", "creation",
     lambda ns, d: ns.linspace(0, 1, 999, endpoint=False, dtype=ns.float32)),
    ("eye", "creation", lambda ns, d: ns.eye(70, 45, k=-3, dtype=ns.uint8)),
    ("full_like", "creation", lambda ns, d: ns.full_like(d["i"], 7)),
    ("zeros_like", "creation", lambda ns, d: ns.zeros_like(d["x"], dtype=ns.float32)),
    ("tril", "creation", lambda ns, d: ns.tril(d["x"], k=4)),
    ("triu", "creation", lambda ns, d: ns.triu(d["i"], k=-2)),
    ("astype", "compute", lambda ns, d: ns.astype(d["x"], ns.int16)),
    ("add-promote", "compute", lambda ns, d: ns.add(d["i"], d["u"])),
    ("pow-scalar", "compute", lambda ns, d: ns.pow(d["p"], 2.0)),
    ("clip", "compute", lambda ns, d: ns.clip(d["x"], -0.5, 0.25)),
    ("where", "compute", lambda ns, d: ns.where(d["b"], d["x"], -1.0)),
    ("sum-int8", "compute", lambda ns, d: ns.sum(d["i"], axis=1)),
    ("sum-dtype", "compute", lambda ns, d: ns.sum(d["p"], axis=0, dtype=ns.float64, keepdims=True)),
    # a small integer dtype asked for: the result in it, wrapped as numpy's (not in 64 bits)
    ("sum-uint8-in-uint8", "compute", lambda ns, d: ns.sum(d["u"], dtype=ns.uint8)),
    ("sum-int8-in-int8", "compute", lambda ns, d: ns.sum(d["i"], axis=0, dtype=ns.int8)),
    ("prod-int8-in-int8", "compute",
     lambda ns, d: ns.prod(d["i"], axis=1, dtype=ns.int8, keepdims=True)),
    ("mean", "compute", lambda ns, d: ns.mean(d["x"], axis=0)),
    ("var-correction", "compute", lambda ns, d: ns.var(d["x"], axis=1, correction=1)),
    ("std-all", "compute", lambda ns, d: ns.std(d["p"])),
    ("max", "compute", lambda ns, d: ns.max(d["i"], axis=0, keepdims=True)),
    ("argmin", "compute", lambda ns, d: ns.argmin(d["x"], axis=1)),
    ("cumulative_sum", "compute",
     lambda ns, d: ns.cumulative_sum(d["i"], axis=0, include_initial=True)),
    ("concat-none", "manipulation", lambda ns, d: ns.concat([d["x"], d["v"]], axis=None)),
    ("stack", "manipulation", lambda ns, d: ns.stack([d["x"], d["x"]], axis=-1)),
    ("reshape", "manipulation", lambda ns, d: ns.reshape(d["x"], (53, 37))),
    ("permute_dims", "manipulation",
     lambda ns, d: ns.permute_dims(ns.reshape(d["p"], (37, 1, 53)), (2, 0, 1))),
    ("mT", "manipulation", lambda ns, d: d["x"].mT),
    ("expand_squeeze", "manipulation",
     lambda ns, d: ns.squeeze(ns.expand_dims(d["i"], axis=1), axis=1)),
    ("moveaxis", "manipulation", lambda ns, d: ns.moveaxis(ns.reshape(d["x"], (37, 1, 53)), 0, -1)),
    ("broadcast_to", "manipulation", lambda ns, d: ns.broadcast_to(d["v"], SHAPE)),
    ("matmul", "manipulation", lambda ns, d: ns.matmul(d["x"], d["m"])),
    ("matmul-vector", "manipulation", lambda ns, d: ns.matmul(d["x"], d["v"])),
    ("meshgrid", "creation", lambda ns, d: ns.meshgrid(ns.arange(40), ns.arange(3), indexing="xy")),
    # complex data types: creation, the standard's promotion (complex with real floats,
    # Python complex scalars with real arrays), elementwise, reductions, products
    ("asarray-complex", "complex", lambda ns, d: ns.asarray([[1 + 2j, 3.0], [0.5j, -1.0]])),
    ("zeros-complex64", "complex", lambda ns, d: ns.zeros((40, 30), dtype=ns.complex64)),
    ("full-complex", "complex", lambda ns, d: ns.full((41, 3), 1.5 - 2j)),
    ("linspace-complex", "complex", lambda ns, d: ns.linspace(0, 3 + 4j, 2500)),
    ("ones_like-complex", "complex", lambda ns, d: ns.ones_like(d["c"])),
    ("astype-complex64", "complex", lambda ns, d: ns.astype(d["x"], ns.complex64)),
    ("add-complex-float64", "complex", lambda ns, d: ns.add(d["z"], d["x"])),
    ("multiply-complex64-float64", "complex", lambda ns, d: ns.multiply(d["c"], d["v"])),
    ("real-times-1j", "complex", lambda ns, d: d["p"] * 1j),
    ("complex64-times-float", "complex", lambda ns, d: d["c"] * 2.5 - 1),
    ("divide-complex", "complex", lambda ns, d: ns.divide(d["z"], d["c"])),
    ("parts", "complex", lambda ns, d: [ns.real(d["z"]), ns.imag(d["c"]), ns.conj(d["z"]),
                                        ns.abs(d["c"])]),
    ("exp-log-sqrt", "complex", lambda ns, d: [ns.exp(d["z"]), ns.log(d["z"]),
                                              ns.sqrt(d["c"]), ns.sign(d["z"])]),
    ("equal-complex", "complex", lambda ns, d: ns.equal(d["z"], ns.conj(d["z"]))),
    ("where-complex", "complex", lambda ns, d: ns.where(d["b"], d["z"], 1j)),
    ("sum-complex", "complex", lambda ns, d: ns.sum(d["z"], axis=0)),
    ("prod-complex64", "complex", lambda ns, d: ns.prod(d["c"] / 1.5)),
    ("mean-complex", "complex", lambda ns, d: ns.mean(d["z"], axis=1, keepdims=True)),
    ("vecdot-complex", "complex", lambda ns, d: ns.vecdot(d["z"], ns.conj(d["z"]) * 2)),
    ("matmul-complex", "complex",
     lambda ns, d: ns.matmul(d["z"], ns.astype(d["m"], ns.complex128))),
]


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield

FAMILIES = ["creation", "compute", "manipulation", "complex"]


def test_every_case_runs_in_a_family():
    """A case without a family (or with a misspelt one) would never run."""
    assert [c[0] for c in CASES if len(c) != 3 or c[1] not in FAMILIES] == []


@pytest.mark.parametrize("family", FAMILIES)
def test_matches_array_api_strict(family, small_budget, x64):
    # one test per family, not per case: each test's scratch check costs ~1 s
    ours, theirs = _inputs(xp), _inputs(strict)
    for name, _, case in [c for c in CASES if c[1] == family]:
        expected, got = case(strict, theirs), case(xp, ours)
        pairs = (list(zip(got, expected)) if isinstance(expected, (list, tuple))
                 else [(got, expected)])
        for g, e in pairs:
            want = _numpy(e)
            assert _numpy(g).dtype == want.dtype, name
            assert tuple(g.shape) == want.shape, name
            np.testing.assert_allclose(_numpy(g), want, rtol=1e-6, atol=1e-12, err_msg=name)
            # the namespace's arrays: DiskArrays, small results in memory behind its type
            assert isinstance(g, xp.Array) and not isinstance(g, jax.Array), name


def test_elementwise_functions_jask_has(small_budget, x64):
    """Every row of the elementwise table whose jask function exists, against strict."""
    rng = np.random.default_rng(1)
    inputs = {"float": (rng.uniform(0.1, 0.9, (9, 30)), rng.uniform(1.1, 3.0, (9, 30))),
              "int": (rng.integers(1, 30, (9, 30)), rng.integers(0, 5, (9, 30))),
              "bool": (rng.random((9, 30)) > 0.5, rng.random((9, 30)) > 0.3)}
    checked = []
    _complex_rows_match_strict(rng)
    for name, (nin, *names) in xp.ELEMENTWISE.items():
        if name in ("real", "imag", "conj"):  # the standard takes complex only (jask: as jnp)
            continue
        try:
            xp.jask_function(name, *names)
        except NotImplementedError:
            continue
        kind = ("int" if name.startswith("bitwise") else "bool" if name.startswith("logical")
                else "float")
        args = inputs[kind][:nin]
        got = getattr(xp, name)(*[xp.asarray(a) for a in args])
        expected = _numpy(getattr(strict, name)(*[strict.asarray(a) for a in args]))
        assert isinstance(got, jask.DiskArray), name
        assert got.dtype == expected.dtype, name
        np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-6, err_msg=name)
        checked.append(name)
    assert {"add", "exp", "equal", "pow", "atan", "maximum"} <= set(checked)


def _complex_rows_match_strict(rng):
    """Every elementwise function on complex128 operands: where strict refuses
    complex (an ordering, a rounding), jask refuses it too; elsewhere dtypes and
    values agree (random values, off the branch cuts)."""
    z = [rng.standard_normal((9, 30)) + 1j * rng.standard_normal((9, 30)) for _ in range(2)]
    agreed, refused = [], []
    for name, (nin, *names) in xp.ELEMENTWISE.items():
        if name.startswith("logical"):  # numbers as truth values, real ones too (as jnp)
            continue
        try:
            xp.jask_function(name, *names)
        except NotImplementedError:
            continue
        try:
            expected = _numpy(getattr(strict, name)(*[strict.asarray(a) for a in z[:nin]]))
        except (TypeError, ValueError):  # (strict checks a shift's sign before its dtype)
            with pytest.raises(TypeError, match="complex"):
                getattr(xp, name)(*[xp.asarray(a) for a in z[:nin]])
            refused.append(name)
            continue
        got = getattr(xp, name)(*[xp.asarray(a) for a in z[:nin]])
        assert got.dtype == expected.dtype, name
        np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-10, err_msg=name)
        agreed.append(name)
    assert {"add", "exp", "sqrt", "real", "imag", "conj", "abs", "equal", "pow"} <= set(agreed)
    assert {"less", "maximum", "floor", "remainder", "atan2", "hypot"} <= set(refused)


def test_missing_functions_name_themselves():
    with pytest.raises(NotImplementedError, match=r"jask\.array_api\.frobnicate: jask has no "
                                                  r"frobnicate"):
        xp.jask_function("frobnicate", "frobnicate")
    for name, (nin, *names) in xp.ELEMENTWISE.items():
        if name in ("real", "imag", "conj"):  # the standard takes complex only (jask: as jnp)
            continue
        try:
            xp.jask_function(name, *names)
        except NotImplementedError:
            with pytest.raises(NotImplementedError, match=f"jask.array_api.{name}:"):
                getattr(xp, name)(*([np.ones(2)] * nin))


def test_data_dependent_shapes_are_refused_with_a_way_out():
    # nonzero: until jask has its own (for values known outside jit)
    refused = ("nonzero",) if _functions._find("nonzero") is None else ()
    for name in refused:  # unique_*: tests/test_array_api_ecosystem.py
        with pytest.raises(NotImplementedError, match="depends on the data.*materialize"):
            getattr(xp, name)(np.ones(3))


def test_dtype_functions_match_strict(x64):
    dtypes = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float32", "float64", "complex64", "complex128"]
    for a in dtypes:
        for b in dtypes:
            ours, theirs = getattr(xp, a), getattr(strict, a)
            other, others = getattr(xp, b), getattr(strict, b)
            assert xp.can_cast(ours, other) == strict.can_cast(theirs, others), (a, b)
            try:
                expected = strict.result_type(theirs, others)
            except TypeError:
                with pytest.raises(TypeError):
                    xp.result_type(ours, other)
                continue
            assert xp.result_type(ours, other).name == str(expected).split(".")[-1], (a, b)
        for kind in ("bool", "signed integer", "unsigned integer", "integral", "real floating",
                     "complex floating", "numeric"):
            assert xp.isdtype(getattr(xp, a), kind) == strict.isdtype(getattr(strict, a), kind)
    assert xp.result_type(xp.float32, 1.5, 2) == xp.float32
    with jax.enable_x64(False):  # 64-bit types are kept with x64 off, as in jask's stores
        assert xp.result_type(xp.int16, xp.uint32) == xp.int64
    assert xp.finfo(xp.float32).eps == strict.finfo(strict.float32).eps
    assert xp.iinfo(xp.int16).min == strict.iinfo(strict.int16).min
    for name in ("complex64", "complex128"):  # a complex type's finfo: its parts' real type
        ours, theirs = xp.finfo(getattr(xp, name)), strict.finfo(getattr(strict, name))
        assert (ours.bits, ours.eps, ours.max) == (theirs.bits, theirs.eps, theirs.max)
        assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
        for scalar in (1, 1.5, 2j):  # Python scalars with a complex array
            assert xp.result_type(getattr(xp, name), scalar).name == name
    # a Python complex with a real floating array: its complex type, as strict promotes it
    assert xp.result_type(xp.float32, 1j) == xp.complex64
    assert xp.result_type(xp.float64, 1j) == xp.complex128
    with pytest.raises(TypeError, match="complex does not promote with int8"):
        xp.result_type(xp.int8, 1j)


def test_inspection_and_defaults_follow_x64():
    info = xp.__array_namespace_info__()
    assert info.default_device() == xp.DISK and info.devices() == [xp.DISK]
    assert not info.capabilities()["data-dependent shapes"]
    assert info.default_dtypes()["real floating"] == xp.float32
    assert set(info.dtypes(kind="integral")) == {"int8", "int16", "int32", "int64", "uint8",
                                                 "uint16", "uint32", "uint64"}
    with jax.enable_x64(True):
        assert info.default_dtypes()["integral"] == xp.int64
    assert xp.__array_api_version__ == "2024.12"


def test_array_attributes(small_budget):
    x = jask.from_numpy(np.arange(6.0).reshape(2, 3))
    assert x.__array_namespace__() is xp
    assert x.__array_namespace__(api_version="2023.12") is xp
    with pytest.raises(ValueError, match="2024.12"):
        x.__array_namespace__(api_version="2099.12")
    assert x.device == xp.DISK and x.to_device(xp.DISK) is x
    with pytest.raises(ValueError, match="materialize"):
        x.to_device("gpu")
    one = jask.from_numpy(np.array([[2.5]]))
    assert bool(one) and float(one) == 2.5 and int(one) == 2 and complex(one) == 2.5
    assert [10, 20, 30][jask.from_numpy(np.array([2]))] == 30  # __index__
    with pytest.raises(TypeError, match="integer"):
        [1][one]
    with pytest.raises(TypeError, match=r"shape \(2, 3\)"):
        bool(x)
    x[0] = 1.0  # the standard's __setitem__ (tests/test_array_api_ecosystem.py)
    assert x.to_numpy()[0].tolist() == [1.0, 1.0, 1.0]


def test_namespace_and_mT_under_jit(small_budget):
    x = jask.from_numpy(np.arange(6.0, dtype=np.float32).reshape(2, 3))

    def f(x):
        assert x.device == xp.DISK and x.__array_namespace__() is xp
        return x.mT

    assert jax.jit(f)(x).to_numpy().tolist() == [[0, 3], [1, 4], [2, 5]]


def test_creation_gradient_flows_through_tril(small_budget):
    w = jask.from_numpy(np.ones((30, 40), np.float32))
    g = jax.grad(lambda w: jask.sum(xp.tril(w * 3.0, k=1)))(w)
    np.testing.assert_array_equal(g.to_numpy(), 3.0 * np.tri(30, 40, 1, dtype=np.float32))


def test_bad_arguments_are_refused_before_writing(small_budget):
    with pytest.raises(ValueError, match="negative dimension"):
        xp.zeros((3, -1))
    with pytest.raises(OverflowError, match="int8"):
        xp.full((2,), 300, dtype=xp.int8)
    with pytest.raises(ValueError, match="step must not be 0"):
        xp.arange(0, 5, 0)
    with pytest.raises(ValueError, match="lives on|live on"):
        xp.ones(3, device="cuda")
    with pytest.raises(ValueError, match="copy=False"):
        xp.asarray(np.ones(3), copy=False)


def test_docstring_examples():
    """The namespace's doctest examples, run here as one test (the root
    conftest keeps pytest from collecting them one item each)."""
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    ran = 0
    for module in (xp, _dtypes, _creation, _functions, _array, _memory, xp.linalg, xp.fft):
        for test in doctest.DocTestFinder().find(module):
            runner.run(test, out=out.write)
            ran += len(test.examples)
    assert runner.failures == 0, out.getvalue()
    assert ran > 100


@pytest.mark.parametrize("call", [
    lambda x: xp.expand_dims(x, axis=3), lambda x: xp.expand_dims(x, axis=-4),
    lambda x: xp.squeeze(x, axis=2), lambda x: xp.flip(x, axis=-3),
    lambda x: xp.moveaxis(x, 0, 2), lambda x: xp.roll(x, 1, axis=5)],
    ids=["expand_dims", "expand_dims-negative", "squeeze", "flip", "moveaxis", "roll"])
@pytest.mark.parametrize("where", ["disk", "memory"])
def test_an_axis_out_of_range_is_an_index_error_as_the_standard_asks(call, where, small_budget):
    """The standard asks for an IndexError, numpy raises its AxisError (a ValueError too):
    jask raises numpy's, naming the array given, on disk and in memory (where
    jax.numpy raises a plain ValueError)."""
    x = xp.asarray(np.zeros((4, 1))) if where == "disk" else _memory.own(jax.numpy.zeros((4, 1)))
    assert isinstance(x, jask.DiskArray) == (where == "disk")
    with pytest.raises(IndexError, match=r"out of range for an array of shape \(4, 1\)") as err:
        call(x)
    assert isinstance(err.value, ValueError)


def test_fills_equal_as_numbers_stay_apart(small_budget):
    """0.0 and -0.0 compare (and hash) equal: each fill keeps its own bits, in
    whichever order fills are made (array-api-tests' test_repeat found ``full``
    handing back an earlier fill's sign of zero). A NaN fill keeps its bits too."""
    z, nz = 0.0, -0.0
    cases = [(v, d) for v in (complex(z, z), complex(z, nz), complex(nz, z), complex(nz, nz))
             for d in ("complex64", "complex128")]
    cases += [(v, d) for v in (z, nz, float("nan")) for d in ("float32", "float64")]
    for order in (cases, cases[::-1]):
        for value, dtype in order:
            got = xp.full((3,), value, dtype=getattr(xp, dtype)).to_numpy()
            assert got.tobytes() == np.full((3,), value, dtype).tobytes(), (value, dtype, got)
