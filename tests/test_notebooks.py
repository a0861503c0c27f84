"""Run every notebook in notebooks/ on small sizes, as a reader would.

Notebooks are committed without outputs; each is executed here with nbclient
in a fresh kernel, with sizes passed through JASK_NB_* environment variables,
and the executed copy (with its plots) is saved to the test's tmp dir.
"""
import base64
import pathlib
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"

#: Small sizes for CI; the notebooks' own defaults are larger.
SIZES = {
    "quickstart.ipynb": {"JASK_NB_ROWS": "100000", "JASK_NB_BUDGET": "2MB",
                         "JASK_NB_STEPS": "8"},
    "dashboard.ipynb": {"JASK_NB_ROWS": "400000", "JASK_NB_BUDGET": "8MB"},
}


def _execute(name, tmp_path, monkeypatch):
    for key, value in SIZES[name].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("JASK_NB_WORKDIR", str(tmp_path / "work"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    elapsed = time.perf_counter() - start
    nbformat.write(nb, tmp_path / name)
    return nb, elapsed


def _outputs(nb):
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def _text(nb):
    return "".join(out.get("text", "") for out in _outputs(nb) if out.output_type == "stream")


def _pngs(nb):
    return [base64.b64decode(out["data"]["image/png"]) for out in _outputs(nb)
            if "image/png" in out.get("data", {})]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (name, cell.source[:60])


def test_every_notebook_is_tested():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(SIZES)


def test_quickstart(tmp_path, monkeypatch):
    nb, elapsed = _execute("quickstart.ipynb", tmp_path, monkeypatch)
    text = _text(nb)
    assert "parameters stayed in their store: True" in text
    assert "x the budget" in text and "between them" in text
    pngs = _pngs(nbformat.read(tmp_path / "quickstart.ipynb", as_version=4))
    assert pngs and pngs[0].startswith(b"\x89PNG")
    assert "jask-dot" in "".join(o.get("text", "") for o in _outputs(nb))  # progress bars
    assert elapsed < 60, elapsed


def test_dashboard(tmp_path, monkeypatch):
    nb, elapsed = _execute("dashboard.ipynb", tmp_path, monkeypatch)
    text = _text(nb)
    assert "dashboard: http" in text
    reports = list((tmp_path / "work").glob("*.html"))
    assert reports and "jask-dot" in reports[0].read_text()
    assert text.count("= baseline +") == 2
    pngs = _pngs(nbformat.read(tmp_path / "dashboard.ipynb", as_version=4))
    assert pngs and pngs[0].startswith(b"\x89PNG")
    assert elapsed < 60, elapsed
