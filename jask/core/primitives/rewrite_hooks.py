"""What jask's primitives tell the jaxpr rewrite (:mod:`jask.core.rewrite`),
which knows none of them (it imports no primitive; the package hands these
to it, ``prune_before_lowering`` and ``take_over_jit``): the two ops only
the scheduler makes, after differentiation (:class:`Together`, several value
ops run as one band group; :class:`Forgetting`, a write in place told which
results nothing reads), and the questions the passes ask of an op: is it a
value op a band group computes, what is it linear in, which operands does a
VJP only read for their type, is it pure, and the Blockwise rewrites (a
row reduction into a store, an in-memory operand read as a store, a
broadcast operand alone, JAX's elementwise ops lifted onto stores, a centred
moment as one reduction).
"""
from __future__ import annotations

import numpy as np
from jax.experimental.hijax import ShapedArray

from jask.base.config import Config
from jask.core import dispatch, ufuncs
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _no_elements, _on_disk
from jask.core.primitives.elementwise import VJP, Blockwise
from jask.core.primitives.layout import Reshape, Slice, Transpose
from jask.core.primitives.products import Dot
from jask.engine.ops.reductions import REDUCERS, variance
from jask.engine.plan import Plan

__all__ = ["Together", "Forgetting"]


class Together(DiskPrimitive):
    """Several ops returning in-memory values, run as one callback so that
    those reading the same rows share one band group. ``keep``: the types of
    stores the program returns, extra operands computed in the same group
    (not each on its own when claimed). Made only by the scheduler, after
    differentiation (it has no VJP). ``post``: arithmetic on the values
    finished in float64 before they are rounded, results after the ops'
    (see :func:`jask.core.dispatch.to_values`)."""

    def __init__(self, prims: tuple, keep: tuple = (), post: tuple = ()):
        outs = tuple(p.out_aval for p in prims) + tuple(
            ShapedArray(shape, dtype) for *_, shape, dtype in post)
        super().__init__(tuple(a for p in prims for a in p.in_avals) + tuple(keep),
                         outs, op="together", prims=tuple(prims), keep=len(keep),
                         post=tuple(post))

    def expand(self, *args):
        parts, i = [], 0
        for p in self.prims:
            parts.append(args[i:i + len(p.in_avals)])
            i += len(p.in_avals)
        if any(_no_elements(a) for p in self.prims for a in (*p.in_avals, p.out_aval)):
            # an op over no elements has no bands to share (its value comes from shapes,
            # DiskPrimitive._run): each op as if alone, the returned stores when claimed
            values = [p.expand(*part) for p, part in zip(self.prims, parts)]
            return tuple(values) + dispatch.posted_traced(values, self.post)
        ops = [p.value_op(part) for p, part in zip(self.prims, parts)]
        return dispatch.to_values(ops, keep=args[i:], post=self.post)

    def plan(self, stores, config: Config | None = None) -> Plan:
        raise NotImplementedError(
            "jask.together: several ops run as one callback have no single plan; ask each of "
            "its ops (prims) for its own")


class Forgetting(DiskPrimitive):
    """A mutating op (``update_``) told which recorded results nothing
    reads any more: they are dropped first, not computed from the values the
    op overwrites. Made only by the scheduler, after differentiation."""

    def mutates(self) -> bool:
        return True

    def __init__(self, prim: DiskPrimitive, dead: tuple):
        super().__init__(tuple(prim.in_avals) + tuple(dead), prim.out_aval,
                         op=prim.params.get("op", "update_"),
                         prim=prim, dead=len(dead))

    def expand(self, *args):
        k = len(args) - self.dead
        dispatch.forget(args[k:])
        return self.prim.expand(*args[:k])

    def plan(self, stores, config: Config | None = None) -> Plan:
        """The plan of the op it wraps (the forgotten handles are not read)."""
        prim, dead = self.params["prim"], self.params["dead"]
        return prim.plan(list(stores)[:len(stores) - dead], config)  # type: ignore

    def dce(self, used_outs):
        return True, True, self


def _is_value_op(prim) -> bool:
    """An op returning an in-memory value that a band group can compute."""
    return (isinstance(prim, DiskPrimitive) and not _on_disk(prim.out_aval)
            and not isinstance(prim.out_aval, tuple) and prim.fusion() is not None)


def _linear_operands(prim) -> tuple:
    """The groups of operands an op's result is linear in (the others
    fixed), each a dict position -> sign, as the op declares them
    (:meth:`DiskPrimitive.linear_operands`; :meth:`Blockwise.linear_operands`,
    ``a @ b`` in each for a product); none for anything else (a mutation, an
    op of several outputs)."""
    return prim.linear_operands() if isinstance(prim, DiskPrimitive) else ()


def _unread(prim) -> tuple:
    """The operands a VJP reads only for their type (a rule reading only the
    cotangent, position 0, or the other factor of a product): see
    :func:`prune_before_lowering`."""
    if not isinstance(prim, Blockwise) or not isinstance(prim.params["ufunc"], VJP):
        return ()
    vjp = prim.params["ufunc"]
    if vjp.ufunc is ufuncs.MUL:  # d(a * b) = g * b for a: a itself is not read (a mean's VJP)
        return (1 + vjp.j,)
    if not getattr(vjp.ufunc.vjps[vjp.j], "g_only", False):
        return ()
    return tuple(range(1, len(prim.in_avals)))


def _pure(prim) -> bool:
    """Whether an op's outputs follow from its operands alone, so that two
    equal ones on the same operands are one value (see
    :func:`prune_before_lowering`): elementwise ops and reductions, products,
    views and reshapes; never a write, nor a kernel calling a user's function
    (``jask.map``: its closure may change between the two)."""
    if not isinstance(prim, (Blockwise, Dot, Transpose, Slice, Reshape)) or prim.mutates():
        return False
    ufunc = prim.params.get("ufunc")
    return not (getattr(ufunc, "at_call", False)
                or getattr(getattr(ufunc, "ufunc", None), "at_call", False))


def _centred_moment(reduce, square, sub, mean):
    """``sum(square(x - mean(x)))`` (or its ``mean``) over all of ``x``,
    from the four ops' primitives, as one reduction of ``x`` whose partials
    are (count, mean, M2) in float64, combined by Chan's update (the
    ``"m2"`` reducer, or the variance for a mean): no pass for the mean
    first, and no ``sum(x * x) - n * m * m``, whose cancellation a float32
    result cannot afford. None for anything else; with no ``reduce``, True
    when the other three are ``square(x - mean(x))``. See
    :func:`prune_before_lowering`."""
    def whole(prim) -> bool:  # a reduction of a stored x over all its axes
        p = prim.params
        return (isinstance(prim, Blockwise) and p["ufunc"] is ufuncs.IDENTITY
                and p["out_axes"] == () and not _on_disk(prim.out_aval)
                and _on_disk(prim.in_avals[0]) and p["axes"][0] == tuple(range(len(p["shape"])))
                and tuple(prim.in_avals[0].shape) == tuple(p["shape"]))

    def elementwise(prim, ufunc) -> bool:
        p = prim.params
        return (isinstance(prim, Blockwise) and p["ufunc"] is ufunc and p["reducer"] is None
                and _on_disk(prim.out_aval) and _on_disk(prim.in_avals[0])
                and tuple(prim.in_avals[0].shape) == tuple(p["shape"]) == tuple(prim.out_aval.shape)
                and p["axes"][0] == p["out_axes"] == tuple(range(len(p["shape"])))
                and p["dtypes"][0] in (None, prim.in_avals[0].dtype))

    if not ((reduce is None or whole(reduce)) and whole(mean)
            and elementwise(square, ufuncs.TABLE["square"]) and elementwise(sub, ufuncs.SUB)):
        return None
    x = mean.in_avals[0]
    kinds = {np.dtype(a.dtype).kind for a in (x, mean.out_aval, sub.out_aval)
             + ((reduce.out_aval,) if reduce is not None else ())}
    count = REDUCERS[mean.params["reducer"]].mean_count
    if (kinds != {"f"} or count != int(np.prod(x.shape)) or not count  # (no elements: as written)
            or sub.in_avals[1].shape != ()
            or sub.params["axes"][1] != () or mean.params["dtypes"][0] not in (None, x.dtype)
            or np.dtype(sub.out_aval.dtype) != np.dtype(x.dtype)):
        return None
    if reduce is None:
        return True
    if reduce.params["reducer"] == "sum":
        reducer = "m2"
    elif REDUCERS[reduce.params["reducer"]].mean_count == count:
        reducer = variance(0)
    else:
        return None
    p = reduce.params
    return Blockwise(ufuncs.IDENTITY, (x,), p["axes"], (None,), p["shape"], (),
                     reduce.out_aval.dtype, reducer=reducer, to_memory=True, grad=p["grad"],
                     config=p["config"], name="squared_deviations")


def _along_rows(prim) -> bool:
    """Whether every stored operand of a Blockwise runs along its full
    shape's rows (so it can join a band group)."""
    shape = prim.params["shape"]
    return bool(shape) and all(
        not _on_disk(a) or (ax and ax[0] == 0 and a.shape[0] == shape[0])
        for a, ax in zip(prim.in_avals, prim.params["axes"]))


def _blockwise_as(prim, in_avals, to_memory: bool):
    p = prim.params
    return Blockwise(p["ufunc"], in_avals, p["axes"], p["dtypes"], p["shape"], p["out_axes"],
                     prim.out_aval.dtype, reducer=p["reducer"], to_memory=to_memory,
                     grad=p["grad"], config=p["config"], name=p["op"])


def _row_store(prim):
    """A reduction to memory that keeps the rows (a row's logsumexp, max,
    mean) as the same reduction into a store, or None: see
    :func:`prune_before_lowering`."""
    if (not isinstance(prim, Blockwise) or _on_disk(prim.out_aval)
            or prim.params["reducer"] is None or REDUCERS[prim.params["reducer"]].pair
            or not prim.params["out_axes"] or prim.params["out_axes"][0] != 0
            or not _along_rows(prim)):
        return None
    return _blockwise_as(prim, prim.in_avals, to_memory=False)


def _axes_of(prim, k: int) -> tuple:
    return prim.params["axes"][k]


def _reading_row_store(prim, k: int):
    """A Blockwise reading its in-memory operand ``k`` along its rows as a
    store instead, or None."""
    if not isinstance(prim, Blockwise) or _on_disk(prim.in_avals[k]):
        return None
    aval, ax, rows = prim.in_avals[k], _axes_of(prim, k), prim.params["shape"][0]  # type: ignore
    if not ax or ax[0] != 0 or aval.shape[0] != rows or not _along_rows(prim):
        return None
    avals = list(prim.in_avals)
    avals[k] = DiskArrayType(tuple(aval.shape), aval.dtype)
    return _blockwise_as(prim, avals, to_memory=not _on_disk(prim.out_aval))


def _broadcast_operand(prim, k: int):
    """For a Blockwise into a store, its in-memory operand ``k`` alone broadcast
    to the result (in the result's dtype), or None: the store a waiting
    scalar's term stands for in ``r - m`` (see :func:`prune_before_lowering`)."""
    if (not isinstance(prim, Blockwise) or prim.params["reducer"] is not None
            or _on_disk(prim.in_avals[k]) or not _on_disk(prim.out_aval)):
        return None
    return _identity_of(prim, k)


def _identity_of(prim, k: int):
    p = prim.params
    return Blockwise(ufuncs.IDENTITY, (prim.in_avals[k],), (_axes_of(prim, k),),
                     (prim.out_aval.dtype,), p["shape"], p["out_axes"], prim.out_aval.dtype,
                     grad=p["grad"], config=p["config"], name=f"{p['op']}_broadcast")


#: JAX's elementwise primitives -> the op table's rows computing the same
#: (numpy's kernels, jax.numpy's semantics), for :func:`_lifted`.
_LIFTABLE = {"log": "log", "exp": "exp", "abs": "abs", "sign": "sign", "neg": "negative",
             "div": "divide", "mul": "multiply", "add": "add", "add_any": "add",
             "sub": "subtract", "max": "maximum", "min": "minimum", "sqrt": "sqrt",
             "tanh": "tanh", "square": "square", "log1p": "log1p", "expm1": "expm1",
             "logistic": "sigmoid", "ge": "greater_equal", "gt": "greater",
             "le": "less_equal", "lt": "less", "eq": "equal", "ne": "not_equal"}


def _lifted(name: str, params: dict, avals: list, out):
    """JAX's elementwise ``name`` on stores (and in-memory operands of the
    same shape or scalars) as a Blockwise into a store, with the order it
    takes the equation's operands in; or None."""
    row, order = _LIFTABLE.get(name), tuple(range(len(avals)))
    if name == "select_n" and len(avals) == 3:  # select_n(p, a, b): b where p, else a
        row, order = "where", (0, 2, 1)
    if (row is None or any(v is not None for v in params.values())
            or np.dtype(out.dtype).kind not in "fb" or not out.shape
            or not any(_on_disk(a) for a in avals)
            or any(tuple(a.shape) not in ((), tuple(out.shape)) for a in avals)):
        return None
    shape, ordered = tuple(out.shape), [avals[k] for k in order]
    axes = tuple(tuple(range(len(shape))) if a.shape else () for a in ordered)
    dtypes = tuple(None if np.dtype(a.dtype) == np.bool_ else np.dtype(a.dtype) for a in ordered)
    return Blockwise(ufuncs.TABLE[row], tuple(ordered), axes, dtypes, shape,
                     tuple(range(len(shape))), out.dtype, grad=True, name=row), order
