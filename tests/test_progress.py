"""Progress bars: off by default, one bar per op with many tiles, from any thread."""
import io
import threading

import dask
import jax
import numpy as np
import pytest

import jask


@pytest.fixture
def tiled(tmp_path):
    """A 1000x1000 float32 array cut into many tiles by a small budget."""
    jask.set_memory_budget("4MB", scratch_dir=str(tmp_path / "scratch"))
    a = jask.from_numpy(np.ones((1000, 1000), np.float32))
    assert _tiles(a) >= 9
    return a


def _tiles(a) -> int:
    return int(np.prod([-(-s // c) for s, c in zip(a.shape, a.chunks)]))


def _bars(text: str) -> list[str]:
    """The final state of every bar drawn into ``text``."""
    return [line for line in text.replace("\r", "\n").splitlines() if "100%" in line]


def test_off_by_default_and_silent(tiled, capsys):
    assert not jask.progress_enabled()
    jask.sum(tiled + tiled)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_show_progress_draws_one_bar_per_op_to_stderr(tiled, capsys):
    assert jask.show_progress(True, min_tasks=2) is False
    try:
        product = (tiled * tiled).block_until_ready()  # computed now, not in sum's pass
        jask.sum(product)
    finally:
        assert jask.show_progress(False) is True
    bars = _bars(capsys.readouterr().err)
    assert [b.split(":")[0] for b in bars] == ["jask-multiply", "jask-sum"]
    n = _tiles(product)  # one task per tile of the output (the planner's tiles)
    assert f"{n}/{n}" in bars[0]


def test_context_manager_restores_and_min_tasks_filters(tiled):
    out = io.StringIO()
    with jask.progress_bars(min_tasks=_tiles(tiled) + 1, file=out):
        assert jask.progress_enabled()
        tiled + tiled                         # one task per tile: below the threshold
        jask.concatenate([tiled, tiled + 0])  # twice as many tiles: shown
    assert not jask.progress_enabled()
    assert [b.split(":")[0] for b in _bars(out.getvalue())] == ["jask-concatenate"]


class _ThreadRecordingIO(io.StringIO):
    """A text file that remembers which threads wrote to it."""

    def __init__(self):
        super().__init__()
        self.threads = set()

    def write(self, text):
        self.threads.add(threading.current_thread() is threading.main_thread())
        return super().write(text)


def test_bar_under_jit(tiled):
    out = _ThreadRecordingIO()

    @jax.jit
    def step(w):
        return w.update_(w - w * 0.5), jask.sum(w @ w)

    with jask.progress_bars(min_tasks=2, file=out):
        w, total = step(tiled)
        total = float(total)
    names = [b.split(":")[0] for b in _bars(out.getvalue())]
    assert {"jask-dot", "jask-sum", "jask-update"} <= set(names), names
    np.testing.assert_allclose(w.to_numpy()[:2, :2], 0.5)


def test_bar_from_a_thread_that_is_not_main(tiled):
    """XLA may run a jitted step's callbacks on its own threads."""
    out = _ThreadRecordingIO()
    with jask.progress_bars(min_tasks=2, file=out):
        worker = threading.Thread(target=lambda: jask.sum(tiled))
        worker.start()
        worker.join()
    assert out.threads == {False}
    assert _bars(out.getvalue())[0].startswith("jask-sum")


def test_bar_is_closed_when_a_task_fails(tiled):
    from jask.engine.execute import run
    out = io.StringIO()

    def boom():
        raise RuntimeError("tile failed")

    graph = {("jask-boom-1", i): (boom,) for i in range(3)}
    with jask.progress_bars(min_tasks=1, file=out), pytest.raises(RuntimeError, match="tile"):
        run(graph, list(graph), workers=2)
    assert "jask-boom" in out.getvalue()


def test_synchronous_scheduler(tiled):
    out = io.StringIO()
    with dask.config.set(scheduler="synchronous"), jask.progress_bars(min_tasks=2, file=out):
        assert float(jask.sum(tiled)) == 1e6
    assert _bars(out.getvalue())[0].startswith("jask-sum")


def test_distributed_client_counts_output_tiles(tiled):
    distributed = pytest.importorskip("distributed")
    out = io.StringIO()
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None) as client, \
            jask.progress_bars(min_tasks=2, file=out):
        assert client.status == "running"
        b = (tiled + tiled).block_until_ready()  # on the client, not when read later
    np.testing.assert_array_equal(b.to_numpy()[::100, ::100], 2.0)
    bars = _bars(out.getvalue())
    n = _tiles(b)  # one task per tile of the output
    assert bars and bars[0].startswith("jask-add") and f"{n}/{n}" in bars[0]
    assert "(output tiles; " in bars[0]


def test_distributed_bar_names_the_dashboard(tiled):
    """On a cluster the bar counts output tiles (a sum has one) and says where
    every task shows, never a bar that silently stays at 0 until the end."""
    distributed = pytest.importorskip("distributed")
    out = io.StringIO()
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address="127.0.0.1:0") as client, \
            jask.progress_bars(min_tasks=2, file=out):
        assert float(jask.sum(tiled * 2.0)) == 2e6
        link = client.dashboard_link
    bars = _bars(out.getvalue())
    assert bars and f"(output tiles; every task: {link})" in bars[-1] and "1/1" in bars[-1]


def test_invalid_min_tasks():
    with pytest.raises(ValueError, match="min_tasks"):
        jask.show_progress(True, min_tasks=0)
    assert not jask.progress_enabled()
