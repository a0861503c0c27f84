"""What a (jitted) function will run: jask's ops, their shapes and tiles.

:func:`visualize` traces the function with ``jax.make_jaxpr`` (nothing is
computed or written), reads jask's primitives out of the jaxpr, and asks
each one for its plan under the current memory budget (``primitive.plan``:
the planner the op's own work calls, :mod:`jask.engine.plan`): the
argument stores' own chunks for the inputs, and for intermediates the
chunks the planned ops would give the stores they create. An op with no
plan shows why in its note, never a guessed tile. The result prints as a text
table, shows as an HTML table in a notebook, and becomes a graphviz graph
when the ``graphviz`` package is installed.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

import jax
import jax.extend.core
import numpy as np

from jask.base import memory
from jask.base.config import Config, get_config
from jask.base.sizes import format_bytes
from jask.core._jax_internals import hi_primitive
from jask.core.array import DiskArray, DiskArrayType
from jask.engine.plan import Plan
from jask.store.spec import StoreSpec

__all__ = ["visualize", "Step", "OpPlan"]


@dataclass(frozen=True)
class Step:
    """One jask op of a traced function and its planned tiles.

    ``tile`` is the output tile of one task (the input chunk read per task
    for a reduction), ``tasks`` how many tasks the op runs, ``held`` the
    bytes its concurrent tasks hold; all ``None`` with ``note`` set when no
    plan fits or the op has no tiles. ``sources`` are the steps whose
    results this one reads (``None``: an argument or an in-memory value).
    """

    op: str
    inputs: tuple[str, ...]
    output: str
    tile: tuple | None
    tasks: int | None
    held: int | None
    sources: tuple[int | None, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class OpPlan:
    """The jask ops a function runs, in program order (see :func:`visualize`)."""

    name: str
    steps: tuple[Step, ...]
    budget: int
    workers: int

    def _rows(self) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for i, s in enumerate(self.steps):
            plan_text = (f"{s.tile} x {s.tasks}" if s.tile is not None else s.note)
            held = format_bytes(s.held) if s.held is not None else ""
            rows.append((str(i), s.op, ", ".join(s.inputs), s.output, plan_text, held))
        return rows

    _HEADER = ("#", "op", "inputs", "output", "tile x tasks", "held at once")

    def __str__(self) -> str:
        rows = [self._HEADER] + self._rows()
        widths = [max(len(r[c]) for r in rows) for c in range(len(self._HEADER))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        title = (f"{self.name}: {len(self.steps)} jask op(s) under a budget of "
                 f"{format_bytes(self.budget)}, {self.workers} task(s) at once")
        return "\n".join([title] + lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        def cells(row, tag):
            return "".join(f"<{tag}>{html.escape(v)}</{tag}>" for v in row)
        body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in self._rows())
        return (f"<table><caption>{html.escape(str(self).splitlines()[0])}</caption>"
                f"<tr>{cells(self._HEADER, 'th')}</tr>{body}</table>")

    def graphviz(self):
        """A ``graphviz.Digraph`` of the ops (needs the graphviz package).

        Each op is a node labelled with its tile; an edge runs from the op
        that writes a store to each op that reads it.
        """
        try:
            import graphviz
        except ImportError:
            raise ImportError("OpPlan.graphviz needs the graphviz package "
                              "(pip install graphviz); print the plan for a text form") from None
        dot = graphviz.Digraph(self.name)
        for i, s in enumerate(self.steps):
            tile = f"\n{s.tile} x {s.tasks}" if s.tile is not None else ""
            dot.node(str(i), f"{i}: {s.op}\n{s.output}{tile}", shape="box")
            for src in s.sources:
                if src is not None:
                    dot.edge(str(src), str(i))
        return dot


def visualize(f, *args, config: Config | None = None, **kwargs) -> OpPlan:
    """The jask ops ``f(*args, **kwargs)`` runs, with their planned tiles.

    ``f`` is traced (``jax.make_jaxpr``), not run: nothing is computed or
    written. Works for jitted functions, ``jax.grad`` and training steps.

    Args:
      f: a function of DiskArrays (and other JAX values).
      *args: its arguments; DiskArrays' stores give the input chunks.
      config: a :class:`~jask.Config` to plan with instead of the active one.
      **kwargs: its keyword arguments.

    Returns:
      An :class:`OpPlan`: ``print`` it for a table, show it in a notebook,
      or call ``.graphviz()`` for a graph.

    Example:
      >>> import numpy as np, jax, jask
      >>> X = jask.from_numpy(np.ones((100, 4), np.float32))
      >>> w = jask.from_numpy(np.ones((4, 1), np.float32))
      >>> p = jask.visualize(jax.grad(lambda w: jask.sum(jask.square(X @ w))), w)
      >>> [s.op for s in p.steps]
      ['dot', 'square', 'sum', 'sum_vjp (grad)', 'square_vjp (grad)', 'dot a.T@b (grad)']
    """
    config = config or get_config()
    closed = jax.make_jaxpr(f)(*args, **kwargs)
    planner = _Planner(config)
    leaves = jax.tree.leaves((args, kwargs), is_leaf=lambda x: isinstance(x, DiskArray))
    env = planner.bind(closed.jaxpr.invars, leaves)
    env.update(planner.bind(closed.jaxpr.constvars, closed.consts))
    planner.walk(closed.jaxpr, env)
    name = getattr(f, "__name__", type(f).__name__)
    return OpPlan(name, tuple(planner.steps), config.max_memory, config.workers)


def _op_name(prim) -> str:
    params = getattr(prim, "params", {})
    named = [v for k in ("kernel", "op", "name") if isinstance(v := params.get(k), str)]
    name = named[0] if named else re.sub(r"(?<=[a-z])(?=[A-Z])", "_",
                                         type(prim).__name__).lower()
    if name == "update":
        name = "update_"
    if params.get("ta") or params.get("tb"):
        name += f" {'a.T' if params.get('ta') else 'a'}@{'b.T' if params.get('tb') else 'b'}"
    return name + (" (grad)" if params.get("grad") else "")


def _short(aval) -> str:
    try:
        return aval.str_short(short_dtypes=True)
    except Exception:  # not every aval spells itself short
        return str(aval)


class _Planner:
    """Walks a jaxpr, recording a :class:`Step` per jask op. ``env`` maps a
    jaxpr variable to (the store it holds, the step that wrote it)."""

    def __init__(self, config: Config):
        self.config = config
        self.steps: list[Step] = []

    def bind(self, variables, values) -> dict:
        if len(variables) != len(values):
            return {}
        return {v: (x._store(), None) for v, x in zip(variables, values)
                if isinstance(x, DiskArray) and x._owner is not None}

    def walk(self, jaxpr, env: dict) -> dict:
        for eqn in jaxpr.eqns:
            prim = hi_primitive(eqn)
            if prim is not None:
                self._step(prim, eqn, env)
                continue
            for sub in _subjaxprs(eqn.params):
                inner = getattr(sub, "jaxpr", sub)
                sub_env = {}
                if len(inner.invars) == len(eqn.invars):
                    sub_env = {iv: env[ov] for iv, ov in zip(inner.invars, eqn.invars)
                               if _is_var(ov) and ov in env}
                sub_env = self.walk(inner, sub_env)
                if len(inner.outvars) == len(eqn.outvars):
                    env.update({ov: sub_env[iv] for iv, ov in zip(inner.outvars, eqn.outvars)
                                if _is_var(iv) and iv in sub_env})
        return env

    def _store(self, var, aval, env) -> tuple[StoreSpec, int | None]:
        if _is_var(var) and var in env:
            return env[var]
        return self._new_store(aval.shape, aval.dtype), None

    def _new_store(self, shape, dtype, chunks=None) -> StoreSpec:
        cfg = self.config
        if chunks is None:
            chunks = memory.default_chunks(shape, dtype, cfg.max_memory, cfg.workers)
        return StoreSpec("<new store>", tuple(shape), np.dtype(dtype), tuple(chunks))

    def _step(self, prim, eqn, env) -> None:
        disk = [(self._store(v, a, env), a) for v, a in zip(eqn.invars, prim.in_avals)
                if isinstance(a, DiskArrayType)]
        stores = [s for (s, _), _ in disk]
        sources = tuple(src for (_, src), _ in disk)
        name = _op_name(prim)
        out = prim.out_aval
        try:
            planned = prim.plan(stores, self.config)
            tile, tasks, held = planned.tile, planned.tasks, planned.held
            out_store = self._out_store(planned, stores, out)
            note = ""
        except Exception as err:  # a BudgetError, or an op with no plan (it says which)
            tile = tasks = held = None
            out_store = (self._new_store(out.shape, out.dtype)
                         if isinstance(out, DiskArrayType) else None)
            note = str(err)
        index = len(self.steps)
        self.steps.append(Step(name, tuple(_short(a) for a in prim.in_avals), _short(out),
                               tile, tasks, held, sources, note))
        if out_store is not None and len(eqn.outvars) == 1:
            env[eqn.outvars[0]] = (out_store, index)

    def _out_store(self, planned: Plan, stores: list, out) -> StoreSpec | None:
        """The store the op's result is: an input it writes into, or a new
        one chunked as planned."""
        if not isinstance(out, DiskArrayType):
            return None
        if planned.into is not None:
            return stores[planned.into]
        return self._new_store(out.shape, out.dtype, planned.chunks)


def _is_var(v) -> bool:
    return not isinstance(v, jax.extend.core.Literal)


def _subjaxprs(params: dict):
    """Jaxprs nested in an equation's parameters (jit, cond, scan, custom_vjp...)."""
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if hasattr(item, "eqns") or hasattr(getattr(item, "jaxpr", None), "eqns"):
                yield item
