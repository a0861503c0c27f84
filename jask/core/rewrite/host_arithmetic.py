"""The arithmetic a merged op finishes on the host, in float64: the sums of
terms that restore a result whose scalars were taken out
(:func:`.linear.distributed`), which cancel when a scalar is a mean."""
from __future__ import annotations

import numpy as np

from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.equations import is_high

__all__ = ["HOST", "host_arithmetic"]


#: JAX's arithmetic a merged op finishes on the host, in float64 (``merge``'s
#: ``post``): the sums of terms that restore a result whose scalars were taken
#: out (:func:`.linear.distributed`), which cancel when a scalar is a mean.
HOST = ("mul", "add", "add_any", "sub", "neg", "convert_element_type")


def host_arithmetic(outs, after, restoring=frozenset()):
    """The equations of ``after`` that restore a result from its terms
    (``restoring``: their ids) or compute what those read, computable from
    the merged op's ``outs`` and numbers alone by :data:`HOST`'s
    arithmetic, as ``((description, outvars), the others)`` (``((), [])``
    and ``after`` when there are none): each description ``(name, operands,
    shape, dtype)``, an operand ``("value", k)`` (``outs`` first, then the
    descriptions' results) or ``("number", x)``. Any other arithmetic on
    the values (``sum(r * r) * (1 / n)``) stays JAX's, in the values' own
    dtype, as written."""
    needed: set = set()  # the restoring equations and those computing what they read
    for eqn in reversed(after):
        if id(eqn) in restoring or any(v in needed for v in eqn.outvars):
            needed.update(v for v in (*eqn.outvars, *eqn.invars) if isinstance(v, core.Var))
    index = {v: k for k, v in enumerate(outs)}
    described: list = []
    outvars: list = []
    rest: list = []
    for eqn in after:
        operands: list | None = []
        out = eqn.outvars[0] if len(eqn.outvars) == 1 else None
        if (eqn.primitive.name not in HOST or out is None or out not in needed
                or isinstance(out, core.DropVar)
                or is_high(out)
                or not np.issubdtype(out.aval.dtype, np.floating)
                or not any(isinstance(v, core.Var) and v in index for v in eqn.invars)):
            operands = None
        for v in eqn.invars if operands is not None else ():
            if isinstance(v, core.Literal) and np.shape(v.val) == ():
                operands.append(("number", float(np.asarray(v.val))))
            elif isinstance(v, core.Var) and v in index:
                operands.append(("value", index[v]))
            else:
                operands = None
                break
        if operands is None:
            rest.append(eqn)
            continue
        index[out] = len(outs) + len(described)
        described.append((eqn.primitive.name, tuple(operands), tuple(out.aval.shape),
                          np.dtype(out.aval.dtype)))
        outvars.append(out)
    if not described:
        return (), after
    return (tuple(described), outvars), rest
