"""jask.visualize: the ops a jitted function runs, read from its jaxpr, with
the tiles the ops themselves then use."""
import os

import jax
import numpy as np
import pytest
import zarr

import jask
from jask.store import registry


def _loss(w, X, y):
    return jask.sum(jask.square(X @ w - y))


def _data(rng, rows=2000, cols=16):
    X = jask.from_numpy(rng.standard_normal((rows, cols)).astype(np.float32))
    y = jask.from_numpy(rng.standard_normal((rows, 1)).astype(np.float32))
    w = jask.from_numpy(np.zeros((cols, 1), np.float32))
    return X, y, w


def test_a_training_step_lists_every_op_and_runs_nothing(small_budget, rng, tmp_path):
    X, y, w = _data(rng)
    step = jax.jit(lambda w, X, y: w.update_(w - jax.grad(_loss)(w, X, y) * 0.1))
    before = registry.live_paths()
    plan = jask.visualize(step, w, X, y)
    assert registry.live_paths() == before  # traced, not run
    assert [s.op for s in plan.steps] == [
        "dot", "subtract", "square", "sum", "sum_vjp (grad)", "square_vjp (grad)",
        "dot a.T@b (grad)", "multiply", "subtract", "update_"]
    dot = plan.steps[0]
    assert dot.inputs == ("Disk[float32[2000, 16]]", "Disk[float32[16, 1]]")
    assert dot.output == "Disk[float32[2000, 1]]"
    assert plan.steps[3].output == "f32[]"
    assert plan.steps[1].sources == (0, None) and plan.steps[9].sources == (None, 8)
    assert all(s.tile is not None and s.tasks >= 1 for s in plan.steps)
    assert all(s.held <= jask.get_config().max_memory for s in plan.steps)
    text = str(plan)
    assert text.splitlines()[0].startswith("<lambda>: 10 jask op(s) under a budget of")
    assert "dot a.T@b (grad)" in text and "<table" in plan._repr_html_()


def test_planned_tiles_are_the_ops_own(small_budget, rng, tmp_path):
    """Tiles of each step equal the chunks the eager op writes, for
    arguments jask made and one chunked by another tool."""
    X, y, w = _data(rng)
    z = zarr.create_array(store=tmp_path / "y.zarr", shape=(2000, 1), chunks=(300, 1),
                          dtype="float32")
    z[...] = y.to_numpy()
    y_opened = jask.open(tmp_path / "y.zarr")
    for target in (y, y_opened):
        plan = jask.visualize(lambda w, X, y: (X @ w - y).T * 2.0, w, X, target)
        # each op computed at its call, as one op on stored inputs (lazy, a pending
        # chain would run as one band group, whose tiles are its bands)
        r = (X @ w).block_until_ready()
        d = (r - target).block_until_ready()
        t = d.T
        s = (t * 2.0).block_until_ready()
        assert [p.tile for p in plan.steps] == [r.chunks, d.chunks, t.chunks, s.chunks]
        counts = [int(np.prod([-(-n // c) for n, c in zip(a.shape, a.chunks)]))
                  if a is not t else 0 for a in (d, t, s)]  # t: a view, no task
        assert [p.tasks for p in plan.steps[1:]] == counts


def test_an_op_that_cannot_fit_shows_why(tmp_path):
    jask.set_memory_budget("16KB", scratch_dir=str(tmp_path / "scratch"))
    z = zarr.create_array(store=tmp_path / "big.zarr", shape=(400, 400), chunks=(400, 400),
                          dtype="float32")
    plan = jask.visualize(lambda a: a * 3.0, jask.open(tmp_path / "big.zarr"))
    (step,) = plan.steps
    assert step.tile is None and "budget of 16000 bytes" in step.note
    assert "budget of 16000 bytes" in str(plan)
    assert not os.path.exists(tmp_path / "scratch")  # nothing was written
    assert z.nchunks_initialized == 0


def test_nested_jit_and_keyword_arguments(small_budget, rng):
    X, y, w = _data(rng, rows=300)
    inner = jax.jit(lambda a, b: a + b)
    plan = jask.visualize(lambda a, *, b: jask.sum(inner(a, b)), y, b=y)
    assert [s.op for s in plan.steps] == ["add", "sum"]
    assert plan.steps[0].tile == y.chunks and plan.steps[1].sources == (0,)


def test_graphviz_when_installed(small_budget, rng):
    graphviz = pytest.importorskip("graphviz")
    X, y, w = _data(rng, rows=300)
    g = jask.visualize(jax.grad(_loss), w, X, y).graphviz()
    assert isinstance(g, graphviz.Digraph) and "square_vjp" in g.source
