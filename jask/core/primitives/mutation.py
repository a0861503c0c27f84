"""Mutation: :class:`Update`, a write into an existing store in place
(``target.update_(new)``, and ``x[key] = v`` of a basic key), with its
forward (its works, in :mod:`jask.engine.ops.mutation`), its tangent and
VJP, and the function that binds it.

Its effect is the point: it is never dead-code eliminated, and no op is
moved across it (:meth:`Update.mutates`). ``update_`` passes ``new``'s
derivative on (the target now holds it); a write at a key has none
(refused, naming it: differentiate ``x.at[key].set(v)``). It declares no
``linear_operands`` and has no batching rule (``jax.vmap`` is refused,
naming the op, by :meth:`DiskPrimitive.batched`).
"""
from __future__ import annotations

from jask.base.config import Config
from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive, _accum, _aval
from jask.engine.ops import mutation as ops

__all__ = ["Update", "update"]


class Update(DiskPrimitive):
    """target.update_(new): new's data written into target's own store;
    with ``at`` (per axis ``(start, stop, step)`` of a basic key), ``new``
    is the DiskArray ``v`` of ``x[key] = v`` (the selection's shape with
    the key's integer axes kept, length-1 axes broadcast) and the rest of
    target is kept.

    Never dead-code eliminated: its effect is the point, even when the
    returned value is unused.
    """

    def mutates(self) -> bool:
        return True

    def __init__(self, aval: DiskArrayType, config: Config | None,
                 new: DiskArrayType | None = None, at: tuple | None = None):
        params = {} if at is None else {"at": tuple(tuple(int(i) for i in a) for a in at)}
        super().__init__((aval, aval if new is None else new), aval, config=config, **params)

    def disk_work(self):
        at = self.params.get("at")
        if at is None:
            return ops.update
        return ops.set_region(at)

    def expand(self, target, new):
        return self._run(self.disk_work(), [target, new])

    def dce(self, used_outs):
        return True, True, self

    def tangent(self, primals, out, tangents):
        if "at" in self.params:
            raise NotImplementedError("jask: no derivative of x[key] = v written in place; "
                                      "differentiate x.at[key].set(v)")
        return tangents[1]  # the target now holds new

    def backward(self, res, g, ctarget, cnew):
        if "at" in self.params:
            raise NotImplementedError("jask: no derivative of x[key] = v written in place; "
                                      "differentiate x.at[key].set(v)")
        _accum(cnew, lambda: g)


def update(target, new, *, config=None, at=None):
    if at is None:
        return Update(_aval(target), config)(target, new)
    return Update(_aval(target), config, _aval(new), at)(target, new)
