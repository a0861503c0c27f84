"""jask.__version__ is the installed package's version, not a second copy."""
import importlib.metadata
import pathlib

import pytest

import jask

tomllib = pytest.importorskip("tomllib")


def test_version_comes_from_the_package_metadata():
    pyproject = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert jask.__version__ == importlib.metadata.version("jask") == declared
