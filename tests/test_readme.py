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


def test_layout_names_every_module_of_the_package():
    """README's Layout is checked against the package: a new module is named
    there under its layer (its stem, in the layer's paragraph)."""
    layout = _layout_section()
    package = pathlib.Path(jask.__file__).resolve().parent
    blocks = re.split(r"\njask/", "\n" + layout.split("```")[1])
    named = {}
    for block in blocks[1:]:
        head = block.split()[0].rstrip("/,")
        named[head] = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", block))
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.name == "__init__.py" or "_build" in rel.parts:
            continue
        if len(rel.parts) == 1:  # a leaf module: named on a line of its own
            if rel.stem not in set().union(*named.values()):
                missing.append(str(rel))
            continue
        layer = rel.parts[0]
        words = named.get(layer, set())
        if rel.stem not in words and rel.parts[1] not in words:
            missing.append(str(rel))
    assert not missing, f"README's Layout does not name: {missing}"
