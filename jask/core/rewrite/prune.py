"""The rewrite of a jaxpr holding jask's ops before JAX lowers it: the passes
in order, cached per jaxpr, installed at JAX's lowering step."""
from __future__ import annotations

import weakref

from jask.core._jax_internals import (
    dead_code_removed,
    hi_primitive,
    lower_rewritten,
    lowering_rewrite,
)
from jask.core._jax_internals import jaxpr_core as core
from jask.core.rewrite.centred_moments import centred_moments
from jask.core.rewrite.common_values import common_values
from jask.core.rewrite.defer import defer, returned_stores
from jask.core.rewrite.forget import forget_before_mutations
from jask.core.rewrite.rules import Rules

__all__ = ["Rewrite", "prune_before_lowering", "rewrite", "rewritten_jaxpr"]


def rewrite(hi_jaxpr, rules: Rules, whole: bool = True):
    """``hi_jaxpr`` (a ``ClosedJaxpr``) as JAX should lower it, ``whole``: a
    program of its own, lowered outside any trace. The passes, in order:

    1. Dead code goes (:func:`dead_code_removed`). ``jax.jit`` lowers the
       jaxpr it traced as is, and each hijax primitive becomes an ordered
       callback there, which XLA never removes: the forward ``sum`` of
       ``jax.jit(jax.grad(loss))`` would run although nothing reads it.
    2. One value however often it is written (:mod:`.common_values`).
    3. A centred second moment written out computed in one pass
       (:mod:`.centred_moments`), and the dead code it leaves goes.
    4. Value ops wait for their first reader and run together, a waiting
       scalar taken out of the ops reading it linearly (:mod:`.defer`,
       :mod:`.linear`). In a whole program the ops still waiting at the end
       also take the stores of jask's ops that the program returns (its
       outputs go back to Python, which claims them), so that they are
       computed in one pass with the values: the forward program of
       ``jax.grad(jax.jit(loss))`` returns its residuals beside the loss. A
       program lowered inside another's lowering returns its stores to that
       program, which may still fuse them: they stay as they are.
    5. A mutating op is handed the values it would otherwise compute from
       what it overwrites (:mod:`.forget`).
    """
    if not any(rules.is_ours(hi_primitive(e)) for e in hi_jaxpr.jaxpr.eqns):
        return hi_jaxpr
    jaxpr = common_values(dead_code_removed(hi_jaxpr.jaxpr), rules)
    moments = centred_moments(jaxpr, rules)
    if moments is not jaxpr:
        jaxpr = dead_code_removed(moments)
    jaxpr = defer(jaxpr, rules, returned_stores(jaxpr, rules) if whole else [])
    jaxpr = forget_before_mutations(jaxpr, rules)
    return core.ClosedJaxpr(jaxpr, hi_jaxpr.consts)


class Rewrite:
    """:func:`rewrite` with ``rules``, cached per jaxpr, so that a jaxpr is
    lowered (and its ops planned) once."""

    def __init__(self, rules: Rules):
        self.rules = rules
        self._done: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __call__(self, hi_jaxpr, whole: bool):
        try:
            return self._done[hi_jaxpr][whole]
        except (KeyError, TypeError):
            lean = rewrite(hi_jaxpr, self.rules, whole)
            try:
                self._done.setdefault(hi_jaxpr, {})[whole] = lean
            except TypeError:  # not weakly referenceable: rewrite again next time
                pass
            return lean

    def check(self, jaxpr) -> None:
        """Raise ``NotImplementedError(rules.refused(name))`` for a primitive
        JAX lowers without hi types that takes a hi-typed operand (jax
        0.10's ``lower_jaxpr`` fails on it with ``AttributeError: ...
        'val'``): a ``custom_linear_solve`` (``jax.scipy.sparse.linalg.cg``)
        whose matrix closes over a DiskArray, for one."""
        if self.rules.refused is None:
            return
        for eqn in jaxpr.eqns:
            if not any(isinstance(v, core.Var) and v.aval.is_high for v in eqn.invars):
                continue
            if not eqn.primitive.is_high(*[v.aval for v in eqn.invars], **eqn.params):
                raise NotImplementedError(self.rules.refused(eqn.primitive.name))


def prune_before_lowering(is_ours, **rules) -> None:
    """Rewrite each jaxpr holding ``is_ours``'s primitives before JAX lowers
    it (:func:`rewrite`), told the rest of :class:`Rules` by keyword. Once:
    a second call changes nothing."""
    if lowering_rewrite() is None:
        installed = Rewrite(Rules(is_ours=is_ours, **rules))
        lower_rewritten(installed, installed.check)


def rewritten_jaxpr(hi_jaxpr, whole: bool = True):
    """``hi_jaxpr`` as :func:`prune_before_lowering`'s rewrite leaves it before
    lowering (cached with the lowering's own), ``whole``: a program of its
    own; ``hi_jaxpr`` itself before any rewrite was installed."""
    installed = lowering_rewrite()
    return hi_jaxpr if installed is None else installed(hi_jaxpr, whole)
