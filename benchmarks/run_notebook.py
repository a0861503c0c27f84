"""Run a notebook's code cells as written, in one namespace, timing each cell:
``python -m benchmarks.run_notebook NOTEBOOK [host]`` (``host``: jask's
device set to the host after the first cell). For machines without Jupyter
(an accelerator's): matplotlib is stubbed with no-ops where it is absent.
"""
from __future__ import annotations

import json
import sys
import time
import types


class _NoOps(types.ModuleType):
    def __getattr__(self, name):
        return lambda *a, **k: None


def _stub_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        top = types.ModuleType("matplotlib")
        top.pyplot = _NoOps("matplotlib.pyplot")  # type: ignore[attr-defined]
        sys.modules["matplotlib"], sys.modules["matplotlib.pyplot"] = top, top.pyplot


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    _stub_matplotlib()
    with open(argv[0]) as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    namespace: dict = {"__name__": "__main__"}
    for i, cell in enumerate(cells):
        start = time.perf_counter()
        exec(compile("".join(cell["source"]), f"cell {i}", "exec"), namespace)
        if i == 0:
            import jax

            import jask
            if argv[1:] == ["host"]:
                jask.set_device("host")
            print(f"[JAX's backend {jax.default_backend()}, jask's device "
                  f"{jask.get_config().device!r}]")
        print(f"[cell {i}: {time.perf_counter() - start:.2f} s]", flush=True)


if __name__ == "__main__":
    main()
