"""Sphinx configuration for jask's documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html`` (the test suite
does, into a temporary folder).
"""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import jask  # noqa: E402

project = "jask"
author = "jask maintainers"
copyright = "jask maintainers"
version = release = jask.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []
