"""The layer rule, checked on the source: imports only run downward.

``api`` > ``core`` > ``engine`` > ``store`` > ``base``; above them ``nn`` and
``optim`` (built on ``api``), and the leaves ``testing``, ``demo`` and the
facade ``jask/__init__.py``. A module imports its own layer or lower ones,
imports inside a layer form no cycle, and the libraries each layer may use
are listed below. Unlike import-linter (which CI also runs, see
``pyproject.toml``), this reads every import statement where it stands,
inside functions included, and names the line.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "jask"

#: layer -> rank; a module may import modules of equal or lower rank.
RANK = {"base": 0, "store": 1, "engine": 2, "core": 3, "api": 4, "nn": 5, "optim": 5,
        "array_api": 5,
        "": 6, "testing": 7, "demo": 7, "xarray": 7}

#: third-party packages a layer may not import (nor anything above it).
FORBIDDEN = {
    "base": ("jax", "jaxlib", "optax", "zarr", "numcodecs", "distributed"),
    "store": ("jax", "jaxlib", "optax", "dask", "distributed"),
    "engine": ("jax", "jaxlib", "optax", "zarr", "numcodecs"),
    "core": ("zarr", "numcodecs"),
}


def _module_name(path: pathlib.Path) -> str:
    parts = ("jask",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: pathlib.Path, module: str | None = None):
    """(line, imported module) for every import statement in the file."""
    module = module or _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "jask" or (node.level and not node.module):
                for alias in node.names:  # from jask import storage: a module or a name
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target


def _own_module(name: str) -> str | None:
    """The jask module (file) an imported name refers to, if it is jask's."""
    if name != "jask" and not name.startswith("jask."):
        return None
    parts = name.split(".")
    while parts:
        candidate = ROOT.parent.joinpath(*parts)
        if candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists():
            return ".".join(parts)
        parts.pop()
    return "jask"


SOURCES = sorted(ROOT.rglob("*.py"))


def _edges():
    for path in SOURCES:
        importer = _module_name(path)
        for line, name in _imports(path):
            yield path, line, importer, name


def test_every_module_sits_in_a_layer():
    for path in SOURCES:
        assert _layer(_module_name(path)) in RANK, path


def test_imports_run_only_downward():
    upward = []
    for path, line, importer, name in _edges():
        target = _own_module(name)
        if target is None:
            continue
        facade = target == "jask" and _layer(importer) not in ("", "testing", "demo", "xarray")
        if RANK[_layer(target)] > RANK[_layer(importer)] or facade:
            upward.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_layers_use_only_their_libraries():
    found = []
    for path, line, importer, name in _edges():
        for banned in FORBIDDEN.get(_layer(importer), ()):
            if name == banned or name.startswith(banned + "."):
                found.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    assert not found, "\n".join(found)


#: the modules outside store/ that may import Zarr: a deny-list, so a new module is covered
ZARR_OUTSIDE_STORE = {"jask.api.save": "writes the user's codecs",
                      "jask.demo": "writes a user's data set"}


def test_zarr_only_in_store():
    found = []
    for path, line, importer, name in _edges():
        if _layer(importer) == "store" or importer in ZARR_OUTSIDE_STORE:
            continue
        if name.split(".")[0] in ("zarr", "numcodecs"):
            found.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    assert not found, "Zarr outside store/ (and api.save, demo):\n" + "\n".join(found)


#: leaves built on jask's public functions only (jask.api), never on what lies below it
ON_API_ONLY = ("nn", "optim", "array_api", "xarray")


def test_leaves_use_only_the_public_functions():
    found = []
    for path, line, importer, name in _edges():
        target = _own_module(name)
        if (_layer(importer) in ON_API_ONLY and target is not None
                and _layer(target) in ("core", "engine", "store", "base")):
            found.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    assert not found, "leaves that reach below jask.api:\n" + "\n".join(found)


def test_jax_internals_only_in_one_module():
    found = [f"{path.relative_to(ROOT.parent)}:{line}" for path, line, importer, name in _edges()
             if name.startswith("jax._src") and importer != "jask.core._jax_internals"]
    assert not found, "jax._src imported outside jask/core/_jax_internals.py: " + ", ".join(found)


@pytest.mark.parametrize("layer", ["base", "store", "engine", "core", "api", "array_api"])
def test_no_cycles_inside_a_layer(layer):
    graph: dict[str, set[str]] = {}
    for path, line, importer, name in _edges():
        target = _own_module(name)
        if target and target != importer and _layer(importer) == layer == _layer(target):
            graph.setdefault(importer, set()).add(target)
    seen: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, trail: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                cycle = trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in seen:
                visit(nxt, trail + [nxt])
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node, [node])


def test_checker_sees_every_import(tmp_path):
    """The checker itself: imports inside functions and relative ones count."""
    source = tmp_path / "m.py"
    source.write_text("import numpy\n\ndef f():\n    from jask.api import save\n"
                      "    from .. import engine\n    from jask import api\n")
    found = [(line, _own_module(name)) for line, name in _imports(source, "jask.store.m")]
    assert found == [(1, None), (4, "jask.api"), (5, "jask.engine"), (6, "jask.api")]


#: What names a kind of location, or tests a path for one: ``jask.store``'s
#: kinds and ``jask.base.urls``'s tests of a path's string.
KIND_NAMES = {"FOLDER", "OBJECTS", "ICECHUNK", "ICECHUNK_PREFIX", "kind_of", "is_url",
              "is_local_path"}
KIND_STRINGS = ("://", "folder", "objects", "icechunk", "s3:", "file:", "memory:")


def _kind_questions(path: pathlib.Path, module: str) -> list[int]:
    """Lines of ``path`` that ask what kind of location a path is: a test of
    its string (``"://" in p``, ``p.startswith("s3:")``, ``x.kind ==
    "objects"``), or, above ``base/``, a kind's name or a path test of
    ``jask.base.urls``. (``base/`` sits below the locations: it asks
    ``jask.base.urls``, and everything above asks a ``Location``.)"""
    above_base = _layer(module) != "base"
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare) or (isinstance(node, ast.Call)
                                             and isinstance(node.func, ast.Attribute)
                                             and node.func.attr in ("startswith", "endswith")):
            parts = ([node.left, *node.comparators] if isinstance(node, ast.Compare)
                     else [*node.args, *(a for x in node.args if isinstance(x, ast.Tuple)
                                         for a in x.elts)])
            kinds = isinstance(node, ast.Compare) and any(
                isinstance(p, ast.Attribute) and p.attr == "kind" for p in parts)
            for p in parts:
                text = p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else ""
                if "://" in text or (text in KIND_STRINGS and (kinds or ":" in text)):
                    lines.append(node.lineno)
        elif above_base and isinstance(node, (ast.Name, ast.Attribute, ast.alias)):
            name = (node.id if isinstance(node, ast.Name) else
                    node.attr if isinstance(node, ast.Attribute) else node.name)
            if name in KIND_NAMES or name == "jask.base.urls" or (
                    isinstance(node, ast.ImportFrom) and node.module == "jask.base.urls"):
                lines.append(node.lineno)
        elif above_base and isinstance(node, ast.ImportFrom) and node.module == "jask.base.urls":
            lines.append(node.lineno)
    return sorted(set(lines))


def test_kinds_of_location_asked_only_in_store():
    """Outside ``store/`` and ``base/urls.py`` no code tests a path's string
    for its kind: it asks the store's :class:`jask.store.Location`
    (``is_local``, ``supports_rename``, ``reads_by_request``, ...)."""
    found = [f"{path.relative_to(ROOT.parent)}:{line}" for path in SOURCES
             if _layer(module := _module_name(path)) != "store" and module != "jask.base.urls"
             for line in _kind_questions(path, module)]
    assert not found, "a path's kind tested outside store/ and base/urls.py: " + ", ".join(found)


@pytest.mark.parametrize("code, module, found", [
    ('def f(p):\n    return "://" in p\n', "jask.engine.m", [2]),
    ('def f(p):\n    return "://" not in p.path\n', "jask.base.m", [2]),
    ('def f(p):\n    return p.startswith(("x", "s3://"))\n', "jask.api.m", [2]),
    ('def f(w):\n    return w.kind == "objects"\n', "jask.api.m", [2]),
    ("from jask.store import OBJECTS\n\ndef f(w):\n    return w.kind == OBJECTS\n",
     "jask.api.m", [1, 4]),
    ("from jask.base.urls import is_url\n", "jask.engine.m", [1]),
    ("from jask.base import urls\n\nurls.is_local_path('/x')\n", "jask.core.m", [3]),
    ("from jask.base.urls import is_local_path\n", "jask.base.m", []),  # below the store: allowed
    ("def f(w, d):\n    return w.is_local and d.kind == 'f' and 'x' in d.name\n",
     "jask.api.m", []),
])
def test_kind_checker_sees_each_question(tmp_path, code, module, found):
    """The checker itself: each way of asking a path's kind is seen, and a
    location's capability or a dtype's kind is not."""
    source = tmp_path / "m.py"
    source.write_text(code)
    assert _kind_questions(source, module) == found


def _shared_class_names(paths) -> dict[str, list[str]]:
    """Class names defined more than once in ``paths`` (nested classes too),
    each with where: ``file:line``."""
    where: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{path.name}:{node.lineno}")
    return {name: places for name, places in where.items() if len(places) > 1}


def test_no_two_classes_share_a_name():
    """A class's name says what it is across the package: a reader (and a
    traceback) never has to ask which ``Plan`` or ``Location`` it is."""
    shared = _shared_class_names(SOURCES)
    assert not shared, f"classes sharing a name: {shared}"


def test_class_name_checker_sees_a_shared_name(tmp_path):
    (tmp_path / "a.py").write_text("class Plan:\n    pass\n\nclass Tile:\n    pass\n")
    (tmp_path / "b.py").write_text("def f():\n    class Plan:\n        pass\n")
    assert _shared_class_names(sorted(tmp_path.glob("*.py"))) == {"Plan": ["a.py:1", "b.py:2"]}
