"""Issue 26's figures for the code as it stands: where code above ``store/``
asks what kind of location a path is, which ``store`` modules it imports,
the import cycles anywhere in jask (strongly connected groups of grimp's
graph, function-level imports included), and the module-level collections
of ``store/registry.py``.

Run from the repository's root: ``python tests/scripts/store_face_counts.py``
(with ``PYTHONPATH=.`` in a worktree, so grimp reads this copy).
"""
import ast
import re
import subprocess
import sys

import grimp

#: A question of kind: the path tests, or a call into the kinds' own modules.
KIND = re.compile(r"\bis_url\(|\bis_local_path\(|\bis_icechunk\(|\blocal_path\(|[\"']icechunk\+|"
                  r"[\"']://[\"']|\bkind_of\(|"
                  r"\.kind\s*[=!]=\s*(FOLDER|OBJECTS|ICECHUNK)\b|"
                  r"\b(objects|remote|icechunk_stores|object_sessions|buckets|repositories)\.[a-z_]+")


def _code(line: str) -> str:
    text = line.split(":", 2)[2]
    stripped = text.lstrip()
    return "" if stripped.startswith(("#", ">>>", "def ")) else text.split("#")[0]


def kind_questions() -> list[str]:
    lines = subprocess.run(["git", "grep", "-nE", ".", "--", "jask/*.py"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    return [line for line in lines
            if not line.startswith(("jask/store/", "jask/base/urls.py"))
            and KIND.search(_code(line))]


def cycles(graph) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    sys.setrecursionlimit(10_000)
    edges = {m: graph.find_modules_directly_imported_by(m) & graph.modules
             for m in graph.modules}
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    found: list = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def registry_collections() -> list[str]:
    """Module-level names of registry.py bound to a dict, set, list or deque."""
    tree = ast.parse(open("jask/store/registry.py").read())
    kinds = {"dict", "set", "list", "deque", "OrderedDict", "defaultdict", "WeakSet",
             "WeakValueDictionary", "WeakKeyDictionary"}
    names = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if not isinstance(target, ast.Name) or value is None:
            continue
        func = value.func if isinstance(value, ast.Call) else None
        called = getattr(func, "attr", getattr(func, "id", None))
        if target.id != "__all__" and (called in kinds
                                       or isinstance(value, (ast.Dict, ast.Set, ast.List))):
            names.append(target.id)
    return names


def main() -> None:
    hits = kind_questions()
    print(f"kind questions outside store/ and base/urls.py: {len(hits)}")
    for hit in hits:
        print("   ", hit.strip())
    graph = grimp.build_graph("jask", include_external_packages=False, cache_dir=None)
    store = {m for m in graph.modules if m == "jask.store" or m.startswith("jask.store.")}
    imported = sorted({i for m in graph.modules - store
                       for i in graph.find_modules_directly_imported_by(m) if i in store})
    print(f"store modules imported from outside: {len(imported)} {imported}")
    found = cycles(graph)
    print(f"import cycles: {len(found)}")
    for group in found:
        print("   ", group)
    names = registry_collections()
    print(f"module-level collections in registry.py: {len(names)} {names}")


if __name__ == "__main__":
    main()
