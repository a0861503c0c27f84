"""The Sphinx documentation builds without a warning, and covers the API."""
import pathlib
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
    for page in ("index", "getting_started", "concepts", "testing", "api", "array_api"):
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
