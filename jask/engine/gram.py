"""Weighted Gram matrices in band groups: ``X.T @ (c * (X2 @ M))`` as ``(X.T @ (c * X2)) @ M``.

``jax.hessian`` of a GLM loss (forward over reverse, batched) reaches a band
group as a product of the data with a *batch of tangents*: ``T = X2 @ M``
(``M`` the ``p x k`` matrix of tangent directions in memory, the identity
for a Hessian), maps that are linear in ``T`` and scale each row by a
weight of its own (the loss's second derivative there, times the seed), and
the contraction ``X.T @ G`` over the rows. Computed as written, every band
carries ``k`` tangents a row through every kernel, and forms two products
of ``n x p x k``. But a map linear in its tangent operands, whose other
operands do not vary along the tangents' axis, is elementwise, so each of
its values is ``c[row] * T[row, j]``: ``G = c[:, None] * T``, and

    X.T @ G = (X.T @ (c[:, None] * X2)) @ M

one weighted Gram matrix per band (``p x p2``), then one small product in
memory. :func:`rewrite` finds such contractions in a group's nodes and
replaces each with that Gram product: the weights ``c`` come from the same
maps computed on one column (``T``'s place taken by ones), so no band
carries the tangents at all.

A map says which groups of its operands its kernel is linear in, jointly
(``params["linear"]``, from :mod:`jask.core.primitives`: a tangent kernel in
its tangents, a cotangent kernel in its cotangent, ``a * b`` in each,
``a + b`` in both); the rewrite needs the operands reached by ``T`` to be
exactly one such group. It is taken only where it is cheaper: a Gram matrix
of ``p x p2`` against ``k`` tangents, ``p * p2 <= k * (p + p2)`` (a
Hessian's ``k = p``; never a Hessian-vector product's one tangent).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jask.engine.blockwise import is_positional
from jask.engine.fusion import WEIGHTS, Node

__all__ = ["rewrite"]


@dataclass(frozen=True)
class _Linear:
    """A node whose value is ``c[row] * T`` along its axis ``col``: ``T =
    X2 @ M`` is the product ``base``, ``c`` a weight per row."""

    base: Node
    col: int


def _tangent_product(node: Node) -> _Linear | None:
    """``X2 @ M`` with ``M`` a ``p2 x k`` matrix in memory (``M.T`` with
    ``tb``), ``X2`` read by bands: a batch of ``k`` tangents a row."""
    if node.kind != "dot" or node._dot_case() != "rows" or len(node.shape) != 2:
        return None
    a, b = node.inputs
    p = node.params
    if (p["ta"] or p["vectors"] != (None, None) or not isinstance(b, np.ndarray)
            or b.ndim != 2 or isinstance(a, np.ndarray) or len(a.shape) != 2):
        return None
    return _Linear(node, 1)


def _linear_map(node: Node, linear: dict, tainted: dict) -> _Linear | None:
    """A map whose operands reached by one tangent product are exactly one
    group it is linear in, all of them along one full axis that no other
    operand has; every other axis but the rows of length 1. ``tainted``: for
    each node, the ids of the tangent products it is computed from (the
    other operands must not be computed from this one's)."""
    p = node.params
    if node.kind != "map" or p.get("reducer") is not None or is_positional(p["kernel"]):
        return None
    reached = [j for j, x in enumerate(node.inputs) if isinstance(x, Node) and id(x) in linear]
    if not reached or tuple(reached) not in {tuple(sorted(g)) for g in p.get("linear", ())}:
        return None
    bases = {id(linear[id(node.inputs[j])].base) for j in reached}
    if len(bases) != 1:
        return None
    if any(isinstance(x, Node) and bases <= tainted.get(id(x), set())
           for j, x in enumerate(node.inputs) if j not in reached):
        return None  # an operand computed from the tangents, not linearly: not c * T
    first = linear[id(node.inputs[reached[0]])]
    cols = set()
    for j in reached:
        ax = p["axes"][j]
        own = linear[id(node.inputs[j])].col
        if not ax or ax[0] != 0 or own >= len(ax) or ax[own] is None:
            return None
        cols.add(ax[own])
    if len(cols) != 1:
        return None
    (axis,) = cols
    full = p["full_shape"]
    if axis == 0 or axis not in p["out_axes"]:
        return None
    if any(n != 1 for a, n in enumerate(full) if a not in (0, axis)):
        return None  # a weight per row, not per row and something else
    if any(axis in p["axes"][j] for j in range(len(node.inputs)) if j not in reached):
        return None  # an operand varying along the tangents: not one weight a row
    return _Linear(first.base, p["out_axes"].index(axis))


def _gram(node: Node, linear: dict, tainted: dict) -> tuple[Node, Node] | None:
    """For ``X.T @ G`` with ``G = c * (X2 @ M)``: (G, the product ``X2 @ M``),
    when the weighted Gram matrix is the cheaper product."""
    if node.kind != "dot" or node._dot_case() != "contract" or not node.params["ta"]:
        return None
    a, g = node.inputs
    if (node.params["vectors"] != (None, None) or isinstance(a, np.ndarray)
            or len(a.shape) != 2 or not isinstance(g, Node) or id(g) not in linear
            or len(g.shape) != 2 or linear[id(g)].col != 1
            or isinstance(a, Node) and id(linear[id(g)].base) in tainted.get(id(a), set())):
        return None
    base = linear[id(g)].base
    x2, m = base.inputs
    p, p2, k = a.shape[1], x2.shape[1], g.shape[1]
    if p * p2 > k * (p + p2):
        return None  # a few tangents (a Hessian-vector product): as it is written
    return g, base


def _weights(node: Node, linear: dict, memo: dict) -> Node | np.ndarray:
    """The weights ``c`` of a node ``c * T``: the node computed on one column,
    ``T``'s place taken by ones (``T`` itself: ones)."""
    if id(node) in memo:
        return memo[id(node)]
    lin = linear[id(node)]
    if node is lin.base:
        ones = np.ones(1, node.dtype)  # broadcast along the rows: never a band of ones
        memo[id(node)] = ones
        return ones
    p = node.params
    (axis,) = {p["axes"][j][linear[id(x)].col] for j, x in enumerate(node.inputs)
               if isinstance(x, Node) and id(x) in linear}
    inputs: list = []
    axes: list = []
    for j, x in enumerate(node.inputs):
        if isinstance(x, Node) and id(x) in linear:
            c = _weights(x, linear, memo)
            if isinstance(c, np.ndarray):  # ones, along the tangents' axis only
                inputs.append(c)
                axes.append((axis,))
                continue
            inputs.append(c)
        else:
            inputs.append(x)
        axes.append(p["axes"][j])
    full = tuple(1 if a == axis else n for a, n in enumerate(p["full_shape"]))
    shape = tuple(1 if a == lin.col else n for a, n in enumerate(node.shape))
    made = Node(node.op, "map", inputs, shape, node.dtype,
                {**p, "axes": tuple(axes), "full_shape": full})
    memo[id(node)] = made
    return made


def rewrite(order: list, keep: set) -> tuple[list, dict]:
    """``order`` with each contraction ``X.T @ (c * (X2 @ M))`` replaced by
    ``(X.T @ (c * X2)) @ M``: the weights ``c`` computed on one column, a map
    scaling ``X2``'s rows by them, and a product whose band partial is the
    ``p x p2`` weighted Gram matrix, multiplied by ``M`` when it is finished
    (:func:`jask.engine.fusion.finish`). Nodes nothing reads any more (the
    tangents) are dropped unless ``keep`` (ids of the nodes written or
    returned) holds them. Returns (the new order, {id(replaced): new node});
    ``order`` itself, and no replacements, when nothing matches."""
    linear: dict = {}
    tainted: dict = {}  # id(node) -> the tangent products it is computed from
    swaps: dict = {}
    memo: dict = {}
    out: list = []
    for node in order:
        lin = _tangent_product(node) or _linear_map(node, linear, tainted)
        if lin is not None:
            linear[id(node)] = lin
        bases = set().union(*(tainted.get(id(x), set()) for x in node.inputs
                              if isinstance(x, Node)))
        if _tangent_product(node) is not None:
            bases.add(id(node))
        if bases:
            tainted[id(node)] = bases
        found = _gram(node, linear, tainted)
        if found is None:
            out.append(node)
            continue
        g, base = found
        a = node.inputs[0]
        x2, m = base.inputs
        c = _weights(g, linear, memo)
        made = [x for x in _new_nodes(c, memo) if all(x is not y for y in out)]
        if isinstance(c, np.ndarray):  # G = T itself: the rows of X2 unweighted
            scaled = x2
        else:
            scaled = Node(WEIGHTS, "map", [c, x2], tuple(x2.shape),
                          np.result_type(c.dtype, x2.dtype),
                          dict(kernel=np.multiply, axes=((0, 1), (0, 1)), dtypes=(None, None),
                               full_shape=tuple(x2.shape), out_axes=(0, 1), reducer=None,
                               linear=((0,), (1,))))
            made.append(scaled)
        product = Node(node.op, "dot", [a, scaled], tuple(node.shape), node.dtype,
                       dict(ta=True, tb=False, vectors=(None, None),
                            then=(m, bool(base.params["tb"]))))
        out.extend(made)
        out.append(product)
        swaps[id(node)] = product
    if not swaps:
        return order, {}
    roots = {id(swaps.get(id(x), x)) for x in order if id(x) in keep}
    return _reachable(out, roots), swaps


def _new_nodes(c, memo: dict) -> list:
    """The weight nodes behind ``c``, inputs first."""
    made: list = []
    seen: set = set()
    clones = {id(v) for v in memo.values() if isinstance(v, Node)}

    def visit(x):
        if not isinstance(x, Node) or id(x) in seen or id(x) not in clones:
            return
        seen.add(id(x))
        for y in x.inputs:
            visit(y)
        made.append(x)

    visit(c)
    return made


def _reachable(order: list, roots: set) -> list:
    """The nodes of ``order`` that ``roots`` read, directly or not."""
    by_id = {id(x): x for x in order}
    alive: set = set()
    stack = [by_id[r] for r in roots if r in by_id]
    while stack:
        x = stack.pop()
        if id(x) in alive:
            continue
        alive.add(id(x))
        stack.extend(y for y in x.inputs if isinstance(y, Node))
    return [x for x in order if id(x) in alive]
