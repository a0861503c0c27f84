"""One hijax primitive per kind of op: its forward (``expand``) and its VJP side by side.

``expand`` hands the op's disk work (:mod:`jask.engine.work`) to :mod:`jask.core.dispatch`,
which runs it now or stages it into the compiled program. Backward rules are
written with the same primitives, flagged ``grad=True`` so the stores they
make end in ``.grad``; a cotangent is computed only for inputs that need one.

Operands may be DiskArrays or in-memory arrays (the avals say which); an
in-memory operand's cotangent is an in-memory array, so optimizers see
ordinary JAX arrays.

The base every primitive shares is :mod:`~jask.core.primitives.base`; op
families live in modules of their own (:mod:`~jask.core.primitives.elementwise`:
every elementwise op, broadcast and reduction, one primitive, :class:`Blockwise`;
:mod:`~jask.core.primitives.creation`: a store written from an in-memory
array and read back whole; :mod:`~jask.core.primitives.mutation`: writes in
place (``update_``, ``x[key] = v``); :mod:`~jask.core.primitives.fft`: discrete
Fourier transforms along one axis; :mod:`~jask.core.primitives.layout`: transposes, slices,
reshapes and joins;
:mod:`~jask.core.primitives.gathers`:
gathers, scatter-adds, sorts, searchsorted; :mod:`~jask.core.primitives.scans`:
cumulative sums and products; :mod:`~jask.core.primitives.products`: matrix
products and fused ops; :mod:`~jask.core.primitives.reductions`: the
reductions' derivative rows; :mod:`~jask.core.primitives.rewrite_hooks`: what
the jaxpr rewrite asks of them), re-exported here where callers need them.
The package itself holds only re-exports and registrations: a cotangent's
zero and sum, and the hooks handed to :mod:`jask.core.rewrite` (which
imports no primitive).
"""
from __future__ import annotations

from jask.core.array import DiskArrayType
from jask.core.primitives.base import DiskPrimitive as DiskPrimitive
from jask.core.primitives.creation import FromValue as FromValue
from jask.core.primitives.creation import Materialize as Materialize
from jask.core.primitives.creation import from_value as from_value
from jask.core.primitives.creation import materialize as materialize
from jask.core.primitives.elementwise import JVP as JVP
from jask.core.primitives.elementwise import VJP as VJP
from jask.core.primitives.elementwise import Blockwise as Blockwise
from jask.core.primitives.elementwise import _reshaped as _reshaped
from jask.core.primitives.elementwise import _squeezed as _squeezed
from jask.core.primitives.elementwise import add as add
from jask.core.primitives.elementwise import fill as fill
from jask.core.primitives.elementwise import full as full
from jask.core.primitives.elementwise import outer as outer
from jask.core.primitives.elementwise import reduce as reduce
from jask.core.primitives.fft import FFT as FFT
from jask.core.primitives.fft import fft as fft
from jask.core.primitives.gathers import Gather as Gather
from jask.core.primitives.gathers import ScatterAdd as ScatterAdd
from jask.core.primitives.gathers import Search as Search
from jask.core.primitives.gathers import Sort as Sort
from jask.core.primitives.gathers import gather as gather
from jask.core.primitives.gathers import searchsorted as searchsorted
from jask.core.primitives.gathers import sort as sort
from jask.core.primitives.layout import Concatenate as Concatenate
from jask.core.primitives.layout import Reshape as Reshape
from jask.core.primitives.layout import Scatter as Scatter
from jask.core.primitives.layout import Slice as Slice
from jask.core.primitives.layout import Transpose as Transpose
from jask.core.primitives.layout import concatenate as concatenate
from jask.core.primitives.layout import moved as moved
from jask.core.primitives.layout import reshape as reshape
from jask.core.primitives.layout import take_slice as take_slice
from jask.core.primitives.layout import transpose as transpose
from jask.core.primitives.mutation import Update as Update
from jask.core.primitives.mutation import update as update
from jask.core.primitives.products import Dot as Dot
from jask.core.primitives.products import Fused as Fused
from jask.core.primitives.products import dot as dot
from jask.core.primitives.products import widened
from jask.core.primitives.rewrite_hooks import Forgetting as Forgetting
from jask.core.primitives.rewrite_hooks import Together as Together
from jask.core.primitives.rewrite_hooks import (
    _broadcast_operand,
    _centred_moment,
    _is_value_op,
    _lifted,
    _linear_operands,
    _pure,
    _reading_row_store,
    _row_store,
    _unread,
)
from jask.core.primitives.scans import Cumsum as Cumsum
from jask.core.rewrite import prune_before_lowering, take_over_jit

# Inside a compiled program: drop the forward ops nothing reads (jit(grad(f))
# would run them), and run the value ops that can wait together (one pass).
prune_before_lowering(lambda prim: isinstance(prim, DiskPrimitive), movable=_is_value_op,
                      mutates=lambda prim: isinstance(prim, DiskPrimitive) and prim.mutates(),
                      merge=lambda prims, keep, post=(): Together(tuple(prims), tuple(keep),
                                                                 tuple(post)),
                      forgetting=lambda prim, avals: Forgetting(prim, tuple(avals)),
                      linear=_linear_operands, as_store=_row_store,
                      reading_store=_reading_row_store, broadcast=_broadcast_operand,
                      lift=_lifted, centred=_centred_moment, widen=widened,
                      unread=_unread, pure=_pure,
                      refused=lambda name: (
                          f"jax.jit of {name} with a DiskArray operand is not supported: JAX "
                          "lowers it without jask's types ("
                          + ("jax.scipy.sparse.linalg.cg, gmres and bicgstab are "
                             "custom_linear_solve; " if name == "custom_linear_solve" else "")
                          + "a matrix closing over a DiskArray, for one). Write the solver's "
                          "loop with lax.while_loop or lax.fori_loop, which run under jax.jit "
                          "with DiskArrays in the body (each Hessian-vector product one pass "
                          "over the data), or call it outside jax.jit"))


# Cotangents of a DiskArray are DiskArrays: their zero and their sum are ops
# made here, so the type (jask.core.array) gets them from this module.
setattr(DiskArrayType, "vspace_zero", lambda self: fill(0, self, grad=True))
setattr(DiskArrayType, "vspace_add", lambda self, x, y: add(x, y, grad=True))

# An eager jitted step holding a band group runs as compiled pieces with the
# group streamed to the configured device between them (jask.core.rewrite):
# a Together of value ops, or a value op alone (a Together of none only
# computes the stores a program returns).
take_over_jit(ours=lambda prim: isinstance(prim, DiskPrimitive),
              group=lambda prim: (bool(prim.params["prims"]) if isinstance(prim, Together)
                                  else isinstance(prim, DiskPrimitive) and _is_value_op(prim)))
