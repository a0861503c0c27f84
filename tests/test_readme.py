"""README's op lists are checked against what jask exports and the op table."""
import pathlib
import re

import jask
from jask.core.ufuncs import TABLE

README = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
NAMED = set(re.findall(r"`(?:jask\.)?([A-Za-z_][A-Za-z_0-9]*)", README))

#: Public names that are not ops (classes, configuration, tools), named in
#: README's prose where they matter, or the standard's aliases of named ops.
NOT_OPS = {"BudgetError", "Config", "Counts", "DiskArray", "DiskArrayType", "DiskFullError",
           "StoreChangedError", "DamagedStoreError", "Stats", "collect", "get_config",
           "progress_bars", "progress_enabled", "reset_stats", "stats", "track",
           "set_memory_budget", "show_progress", "visualize", "open", "open_group", "save",
           "from_numpy", "from_dask", "to_dask", "materialize", "update_", "dynamic_slice",
           "mul", "sub", "logsumexp", "map"}
ALIASES = {name for name in jask.__all__
           if getattr(jask, name) is not None and any(
               getattr(jask, other) is getattr(jask, name) and other != name and other in NAMED
               for other in jask.__all__)}


def test_readme_names_every_public_op():
    missing = sorted(n for n in jask.__all__ if n not in NAMED and n not in NOT_OPS
                     and n not in ALIASES)
    assert not missing, f"public ops README does not list: {missing}"


def test_readme_names_every_public_row_of_the_op_table():
    missing = sorted(name for name, row in TABLE.items() if row.public and name not in NAMED
                     and getattr(jask, name, None) is not None)
    assert not missing, f"op table rows README does not list: {missing}"


def test_readme_lists_no_op_jask_lacks():
    listed = re.search(r"\*\*The op table\.\*\*(.*?)\n- \*\*Mixed", README, re.S).group(1)
    names = set(re.findall(r"`([a-z_0-9]+)`", listed)) - {"f", "jask"}
    assert not sorted(n for n in names if not hasattr(jask, n) and not hasattr(jask.nn, n))


def test_ci_runs_the_readmes_test_command_in_a_fresh_environment():
    """CI fails exactly when a new machine would: .ci/run makes its own virtual
    environment and runs the README's test line as written."""
    root = pathlib.Path(__file__).resolve().parent.parent
    ci = (root / ".ci" / "run").read_text()
    test_line = next(line for line in README.splitlines()
                     if line.startswith('python -m pip install -e ".[test]"'))
    assert test_line.split("#")[0].strip() in ci.splitlines()
    assert "python3 -m venv" in ci and 'source "$venv/bin/activate"' in ci


def _layout_section() -> str:
    return re.search(r"\n## Layout\n(.*?)(?:\n## |\Z)", README, re.S).group(1)


def _layout_blocks() -> dict[str, set[str]]:
    """Layout's paragraphs by what they describe (``"api"`` for ``jask/api/``,
    ``""`` for the top-level modules), each with the modules it names:
    ``name.py`` for a module, ``name/ (its modules)`` for a subpackage."""
    blocks: dict[str, set[str]] = {}
    for block in re.split(r"\njask/", "\n" + _layout_section().split("```")[1])[1:]:
        head, _, body = block.partition(" ")
        if head.endswith("/"):
            where, names = head.rstrip("/"), set()
        else:  # top-level modules: "nn.py, optim.py"
            where, names = "", {head.rstrip(",")}
            while body.lstrip().split(" ", 1)[0].endswith((".py", ".py,")):
                first, _, body = body.lstrip().partition(" ")
                names.add(first.rstrip(","))
        names |= {m + ".py" for m in re.findall(r"\b([A-Za-z_][A-Za-z_0-9]*)\.py\b", body)}
        names |= {m + "/" for m in re.findall(r"(?<![\w/])([a-z_][a-z_0-9]*)/ \(", body)}
        blocks[where] = blocks.get(where, set()) | names
    return blocks


def _package_modules() -> dict[str, set[str]]:
    """The same map read from the package: a layer's modules, those of its
    subpackages and the subpackages themselves (``__init__.py`` files aside)."""
    package = pathlib.Path(jask.__file__).resolve().parent
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if "_build" in rel.parts:
            continue
        if len(rel.parts) == 1:
            found.setdefault("", set()).add(rel.name)
            continue
        layer = found.setdefault(rel.parts[0], set())
        layer.update(part + "/" for part in rel.parts[1:-1])
        if rel.name != "__init__.py":
            layer.add(rel.name)
    return found


def test_layout_names_every_module_of_the_package():
    """README's Layout is checked against the package: a new module is named
    there under its layer (as ``name.py``, in the layer's paragraph)."""
    named, found = _layout_blocks(), _package_modules()
    missing = sorted(f"{layer}/{m}".lstrip("/") for layer, modules in found.items()
                     for m in modules - named.get(layer, set()))
    assert not missing, f"README's Layout does not name: {missing}"


def test_layout_names_no_module_the_package_lacks():
    named, found = _layout_blocks(), _package_modules()
    extra = sorted(f"{layer}/{m}".lstrip("/") for layer, modules in named.items()
                   for m in modules - found.get(layer, set()))
    assert not extra, f"README's Layout names modules jask does not have: {extra}"
