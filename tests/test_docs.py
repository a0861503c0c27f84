"""The Sphinx documentation builds without a warning, and covers the API."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

import jask

pytest.importorskip("sphinx")

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs_html")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out / ".doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_pages_exist(html):
    for page in ("index", "getting_started", "concepts", "testing", "api", "array_api",
                 "object_storage", "promises", "accelerators"):
        assert (html / f"{page}.html").is_file(), page


def test_concepts_cover_the_topics(html):
    text = (html / "concepts.html").read_text()
    for topic in ("The memory budget and what it bounds", "Stores and their lifetime",
                  "update_", ".grad", "Running on a cluster"):
        assert topic in text, topic


def test_api_reference_documents_every_public_name(html):
    text = (html / "api.html").read_text() + (html / "testing.html").read_text()
    missing = [name for name in jask.__all__
               if f'id="jask.{name}"' not in text and name != "DiskArrayType"]
    assert not missing, missing
    assert 'id="jask.testing.jask_scratch"' in text


def test_docstring_examples_are_rendered(html):
    text = (html / "api.html").read_text()
    assert "Example" in text and "&gt;&gt;&gt;" in text


# --- the getting-started page runs as written --------------------------------

#: Smaller sizes for CI, the only edits made to the page's code before it runs.
SMALLER = {"1_000_000": "4_000", "10_000": "1_000", '"2GB"': '"1MB"',
           '"/data/jask-scratch"': '"scratch"', "range(30)": "range(11)"}


def _python_blocks(page: pathlib.Path) -> list[str]:
    """The ``.. code-block:: python`` blocks of an rst page, in order, dedented."""
    blocks, lines = [], page.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == ".. code-block:: python":
            body = []
            for text in lines[i + 1:]:
                if text.strip() and not text.startswith("   "):
                    break
                body.append(text[3:])
            blocks.append("\n".join(body).strip("\n"))
    return blocks


def test_getting_started_runs_and_its_model_learns(tmp_path):
    """The front page's example and the getting-started page, in one process."""
    script = "\n\n".join(_python_blocks(DOCS / "index.rst")
                         + _python_blocks(DOCS / "getting_started.rst"))
    for old, new in SMALLER.items():
        assert old in script, old
        script = script.replace(old, new)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"^\d+ ([\d.e+-]+)$", result.stdout, re.M)]
    assert len(losses) == 2, result.stdout  # steps 0 and 10
    # the loss starts at y's variance (about 16) and falls to the noise's (0.01)
    assert losses[0] > 5 and losses[-1] < 0.05 * losses[0], losses


def test_accelerators_page_runs_on_the_cpu_device(tmp_path):
    """The page's code as written, with the device it names being JAX's CPU
    device (no chip in CI): the device path, one pass, within the share."""
    script = "\n\n".join(_python_blocks(DOCS / "accelerators.rst"))
    env = {**os.environ, "PYTHONPATH": str(DOCS.parent)}  # this checkout's jask
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.split()
    assert lines[:2] == ["1.0", "True"], result.stdout  # one pass, within the share
    assert float(lines[2]) < 0.6931  # the loss fell below log 2 in three steps
    assert lines[3:] == ["True", "True"], result.stdout
