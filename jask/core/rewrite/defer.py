"""Value ops moved to their first reader, where those waiting together become
one op: one pass over the data.

Each ``movable`` op (one returning an in-memory value) waits until its
value is first read by one of jask's ops, an op that ``mutates`` or a
nested program holding our ops comes, or the program ends, and the ops
waiting together become one (``merge``): a value's computation reads the
disk, never changes it, so running it later in program order gives the same
value. JAX's own pure arithmetic on a waiting value (``sum(r * r) / n``)
waits with it: left in place it would be the value's first reader, and the
forward reductions of ``value_and_grad`` would run before the backward ones
exist. A walk (:class:`_Deferral`) takes these steps, equation by equation:

* :meth:`~_Deferral.read_as_stores`: a waiting value that runs along the
  rows (a row's ``logsumexp`` or max), read by an op of ours along its rows,
  is read as that store, made again where it is read (inside a band group
  each band computes its own rows of it), so the reader need not wait.
  JAX's elementwise arithmetic between such values follows as ops of ours.
* :meth:`~_Deferral.take_scalars_out`: an op reading waiting scalars
  linearly runs with 1 in their place (:mod:`.linear`), so a backward pass
  whose cotangent is a waiting scalar waits with the forward ops.
* :meth:`~_Deferral.place`: a value op waits; JAX's pure arithmetic on
  waiting values waits after them; any other reader of a waiting value, or
  a barrier, runs the waiting ones first (:meth:`~_Deferral.flush`).
* :meth:`~_Deferral.hoist`: when a group runs, later value ops reading
  only the stores it reads join it.
* At the end of a whole program the ops still waiting also take the stores
  it returns (``returned``), computed in the same pass.
"""
from __future__ import annotations

from jask.core._jax_internals import hi_primitive
from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.equations import is_barrier, is_high, is_pure_arithmetic
from jask.core.rewrite.host_arithmetic import host_arithmetic
from jask.core.rewrite.linear import NotLinear, distributed, linear_terms, unit_copy
from jask.core.rewrite.rules import Rules

__all__ = ["defer", "returned_stores"]


def defer(jaxpr, rules: Rules, returned=()):
    """The jaxpr with its value ops moved to their first reader and merged
    (see the module's notes); the ops waiting at the end also take the
    ``returned`` stores. Should a store made of terms reach a reader that
    is not linear in it, or the program's outputs, the walk starts again
    with the ops that made those terms left as they are (``r - m`` before a
    square runs once ``m`` is known), and without taking scalars out when
    that is not enough."""
    excluded: frozenset = frozenset()
    while True:
        try:
            return _Deferral(jaxpr, rules, excluded).run(returned)
        except NotLinear as err:
            if not err.origins or err.origins <= excluded:
                return _Deferral(jaxpr, rules, frozenset(), scalars_out=False).run(returned)
            excluded |= err.origins


def returned_stores(jaxpr, rules: Rules) -> list:
    """The hi-typed outputs of a jaxpr that ``rules.is_ours``'s ops made
    (stores the caller will claim), each once."""
    made = {v for e in jaxpr.eqns if rules.is_ours(hi_primitive(e)) for v in e.outvars}
    out: list = []
    for v in jaxpr.outvars:
        if isinstance(v, core.Var) and v in made and v.aval.is_high and v not in out:
            out.append(v)
    return out


class _Deferral:
    """One walk of :func:`defer` over a jaxpr: the state its steps share.

    ``excluded``: positions of ops whose scalars stay in (their terms
    reached a reader not linear in them); ``scalars_out``: whether scalars
    are taken out at all."""

    def __init__(self, jaxpr, rules: Rules, excluded: frozenset = frozenset(),
                 scalars_out: bool = True):
        self.jaxpr, self.rules = jaxpr, rules
        self.excluded, self.scalars_out = excluded, scalars_out
        self.eqns: list = []  # the rewritten program, so far
        self.held: list = []  # the value ops waiting
        self.after: list = []  # pure in-memory equations reading held values, in order
        self.restoring: set = set()  # those of after restoring a result from its terms (ids)
        self.waiting: set = set()  # outputs of held and after equations
        self.scale_of: dict = {}  # a store -> [(unit, scalar)]: it is the sum of scalar * unit
        self.unit_of: dict = {}  # a waiting value -> (it with 1 for its scalar, the scalar)
        self.made_by: dict = {}  # a held op's one output -> its equation
        self.made_after: dict = {}  # a waiting value of JAX's arithmetic -> its equation
        self.store_of: dict = {}  # a waiting row-wise value -> the store made again for its readers
        self.origins: dict = {}  # a store made as terms -> the positions of the ops that made them
        self.hoisted: set = set()  # positions of later value ops moved into an earlier group
        self.at = 0  # the position being placed

    def run(self, returned=()):
        for i, eqn in enumerate(self.jaxpr.eqns):
            if i in self.hoisted:
                continue  # placed already, in an earlier group
            self.at = i
            prim = hi_primitive(eqn)
            if prim is not None and (self.made_by or self.made_after):
                eqn, prim = self.read_as_stores(eqn, prim)
            if (prim is not None and self.scalars_out and i not in self.excluded
                    and self.take_scalars_out(i, eqn, prim)):
                continue
            if self._reads_terms(eqn.invars):
                raise NotLinear(self._made_them(eqn.invars))  # it would read one term of a store
            self.place(eqn, prim)
        if self._reads_terms(self.jaxpr.outvars):
            raise NotLinear(self._made_them(self.jaxpr.outvars))
        self.flush(returned)
        eqns = self.eqns
        if len(eqns) == len(self.jaxpr.eqns) and all(a is b for a, b in zip(eqns, self.jaxpr.eqns)):
            return self.jaxpr
        return self.jaxpr.replace(eqns=eqns)

    # -- reading row-wise values as stores

    def read_as_stores(self, eqn, prim):
        """The equation reading the waiting row-wise values it can as stores."""
        invars = list(eqn.invars)
        for k, v in enumerate(invars):
            if not (isinstance(v, core.Var) and v in self.waiting
                    and (v in self.made_by or v in self.made_after)):
                continue
            reader = self.rules.reading_store(prim, k)
            if reader is None:
                continue
            store = self.store_version(v, eqn)
            if store is None:
                continue
            invars[k], prim = store, reader
        if prim is hi_primitive(eqn):
            return eqn, prim
        return eqn.replace(invars=invars, params=dict(_prim=prim)), prim

    def store_version(self, v, template):
        """The store a waiting row-wise value is made again as (its op's, or
        JAX's arithmetic on such values lifted to ours), or None."""
        if v in self.store_of:
            return self.store_of[v]
        if v in self.made_by:
            made = self.made_by[v]
            maker = self.rules.as_store(hi_primitive(made))
            if maker is None:
                return None
            self.store_of[v] = core.Var(maker.out_aval)
            self.eqns.append(made.replace(outvars=[self.store_of[v]], params=dict(_prim=maker)))
            return self.store_of[v]
        made = self.made_after.get(v)
        if made is None:
            return None
        invars = []
        for u in made.invars:
            if isinstance(u, core.Var) and u in self.waiting:
                u = self.store_version(u, template)
                if u is None:
                    return None
            invars.append(u)
        lifted = self.rules.lift(made.primitive.name, made.params, [u.aval for u in invars],
                                 v.aval)
        if lifted is None:
            return None
        maker, order = lifted
        self.store_of[v] = core.Var(maker.out_aval)
        self.eqns.append(template.replace(invars=[invars[k] for k in order],
                                          outvars=[self.store_of[v]], params=dict(_prim=maker)))
        return self.store_of[v]

    # -- taking waiting scalars out of linear readers

    def take_scalars_out(self, i, eqn, prim) -> bool:
        """Place the op at position ``i`` distributed over the scalars its
        waiting operands carry linearly, if they do (:mod:`.linear`)."""
        terms = linear_terms(eqn, self.rules.linear(prim), self.waiting, self.scale_of,
                             self.unit_of, lambda k: self.rules.broadcast(prim, k))
        if terms is None:
            return False
        group, carried = terms
        copies, restore = distributed(eqn, group, carried, self.scale_of, self.rules.widen)
        for v in eqn.outvars:
            if v in self.scale_of:
                self.origins[v] = self._made_them(eqn.invars) | {i}
        for copy in copies:
            self.place(copy, hi_primitive(copy))
        self.after.extend(restore)
        self.restoring.update(id(e) for e in restore)
        self.waiting.update(v for e in restore for v in e.outvars)
        return True

    def _reads_terms(self, vs) -> bool:
        return any(isinstance(v, core.Var) and v in self.scale_of for v in vs)

    def _made_them(self, vs) -> frozenset:
        return frozenset().union(*(self.origins.get(v, ()) for v in vs
                                   if isinstance(v, core.Var)))

    # -- waiting, and running what waits

    def place(self, eqn, prim) -> None:
        """Hold a value op, let JAX's pure arithmetic on waiting values wait
        after it, or run the waiting ops before a reader or a barrier."""
        reads = any(isinstance(v, core.Var) and v in self.waiting for v in eqn.invars)
        if prim is not None and self.rules.movable(prim):
            if reads:  # it needs a waiting value: those run first
                self.flush()
            self.held.append(eqn)
            self.waiting.update(eqn.outvars)
            if len(eqn.outvars) == 1:
                self.made_by[eqn.outvars[0]] = eqn
            return
        if reads and prim is None and is_pure_arithmetic(eqn):
            unit = unit_copy(eqn, self.waiting, self.unit_of)
            if unit is not None:  # it with 1 for the scalar reads nothing waiting: now
                self.eqns.append(unit)
            self.after.append(eqn)
            self.waiting.update(eqn.outvars)
            if len(eqn.outvars) == 1:
                self.made_after[eqn.outvars[0]] = eqn
            return
        if reads or is_barrier(eqn, self.rules.mutates):
            self.flush()
        self.eqns.append(eqn)

    def hoist(self) -> None:
        """Later value ops reading only stores the held ops read, and nothing
        made since (``X.std(0)`` after ``X - X.mean(0)``), join the group run
        now: the same pass gives their values. Up to a barrier; never one
        that reads a waiting value or a store made of terms."""
        stores = {v for e in self.held for v in e.invars
                  if isinstance(v, core.Var) and is_high(v)}
        if not stores:
            return
        ready = set(self.jaxpr.invars) | set(self.jaxpr.constvars) | {
            v for e in self.eqns for v in e.outvars}
        for j in range(self.at + 1, len(self.jaxpr.eqns)):
            later = self.jaxpr.eqns[j]
            if is_barrier(later, self.rules.mutates):
                break
            prim = hi_primitive(later)
            if (prim is None or j in self.excluded or j in self.hoisted
                    or not self.rules.movable(prim)):
                continue
            operands = [v for v in later.invars if isinstance(v, core.Var)]
            high = [v for v in operands if is_high(v)]
            if (high and all(v in stores for v in high)
                    and all(v in ready and v not in self.scale_of for v in operands)):
                self.held.append(later)
                self.hoisted.add(j)

    def flush(self, keep=()) -> None:
        """Run the held ops now, as one (``merge``, with the stores ``keep``
        and the host's share of the arithmetic after them), then the
        arithmetic that waited after them."""
        held, after = self.held, self.after
        if held and not keep:
            self.hoist()
        outs = [v for e in held for v in e.outvars]
        post, rest = host_arithmetic(outs, after, self.restoring)
        if len(held) == 1 and not keep and not post:
            self.eqns.append(held[0])
        elif held:
            extra = (post[0],) if post else ()
            prim = self.rules.merge([hi_primitive(e) for e in held], [v.aval for v in keep],
                                    *extra)
            self.eqns.append(held[-1].replace(
                invars=[v for e in held for v in e.invars] + list(keep),
                outvars=outs + (post[1] if post else []), params=dict(_prim=prim)))
            after[:] = rest
        elif keep:  # no value op waits: the stores alone, one op of no outputs
            made = next(e for e in reversed(self.eqns) if hi_primitive(e) is not None)
            self.eqns.append(made.replace(
                invars=list(keep), outvars=[],
                params=dict(_prim=self.rules.merge([], [v.aval for v in keep]))))
        self.eqns.extend(after)
        for state in (held, after, self.restoring, self.waiting, self.made_by,
                      self.made_after, self.store_of):
            state.clear()
