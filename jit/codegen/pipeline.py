"""The codegen pipeline: the fixed, documented order of passes from a lowered kernel to renderable code.

``full_rewrite_to_sink(sink, target)`` runs, in this order:

1. symbolic (on concrete nodes only) + index simplification + ``commit_weak``, together to a fixed point:
   folding can remove a consumer and so change what a weak node must be, and committing a width turns weak
   constants into foldable ones;
2. ``lower_weak`` + index simplification, *without* symbolic: every weak node still left gets the default
   width of its kind;
3. the dtype policy for this kernel and target, then dtype decomposition: ``float_emulation`` (float16,
   bfloat16, fp8 as float32 over integer bits), then ``long_decomp`` (int64/uint64 as 32-bit words);
4. ``cast_const``: the final commit of any weak constant still bare, including ones a decomposition built;
5. codegen: symbolic, then (unless NOOPT) the kernel optimizer (jit/codegen/opt: register tiling of reduce kernels,
   unrolling of small loops in the rest), then symbolic again, then, for a target whose language has no vector
   ``exp`` or a slow one, ``lower_vector_exp`` (float32 exp and erf on vector lanes as arithmetic), and for one whose
   vector ``rint`` is slow, ``lower_vector_rint`` (float32 rint on vector lanes from adds); then
   ``fold_reciprocal_products`` (``a * (1 / b)`` as ``a / b`` where that saves an operation: SiLU's epilogue);
6. ``finish_kernel``, under NOOPT too: the optimizer's steps that shape how the renderer spells loops, addresses
   and accumulators (prefetches, unroll hints, base pointers, parked accumulators), where the kernel's options turn
   them on (the target's ``default_opts`` when no tuning chose any).

``rewrite_kernel`` returns the same graph together with the kernel's ``DTypePolicy``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jit.codegen.opt import OptOptions, finish_kernel, optimize_for_target, target_caches, target_default_opts
from jit.codegen.opt.search import kernel_options, with_options
from jit.codegen.passes.cast_const import pm_cast_const
from jit.codegen.passes.commit_weak import pm_commit_weak
from jit.codegen.passes.dtype_policy import DTypePolicy, decide_policy
from jit.codegen.passes.float_emulation import emulate_floats
from jit.codegen.passes.guards import skip_weak
from jit.codegen.passes.index_simplify import pm_index_simplify
from jit.codegen.passes.long_decomp import decompose_longs
from jit.codegen.passes.lower_weak import pm_lower_weak
from jit.codegen.passes.quotients import fold_reciprocal_products
from jit.codegen.passes.symbolic import pm_symbolic
from jit.codegen.passes.vector_exp import lower_vector_exp
from jit.codegen.passes.vector_rint import lower_vector_rint
from jit.common.dtype import DType
from jit.common.helpers import EMULATED_DTYPES, NOOPT, PREFETCH
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import UOp
from targets.base import Target

# symbolic never sees a weak node: folding `weak 2 * weak 3` or `x + weak 0` before the width is known would
# fix the result at the weak type's own precision (weakfloat folds in float64, weakint wraps at 32 bits)
pm_weak_fixpoint = skip_weak(pm_symbolic) + pm_index_simplify + pm_commit_weak
# No symbolic here, on purpose: symbolic builds its results with the dtype of the node it rewrites
# (`const_like`, `UOp.const(x.dtype, ...)`), so running it while weak nodes are being lowered re-creates weak
# constants (a fold of a not-yet-lowered `weak 2 * weak 3` is a new weak CONST) that this same stage must then
# lower again, and the outcome would depend on which rule reached a node first. Index arithmetic is all int32
# already, so index simplification is safe to keep.
pm_weak_lowering = pm_lower_weak + pm_index_simplify


@dataclass(frozen=True)
class RewrittenKernel:
    """A kernel graph ready for the renderer, and the dtype decisions taken for it."""

    sink: UOp
    dtype_policy: DTypePolicy


def commit_dtypes(sink: UOp) -> UOp:
    """Stages 1 and 2: every weak dtype committed (useful on its own to inspect weak-type decisions)."""
    sink = graph_rewrite(sink, pm_weak_fixpoint, name="commit weak")
    return graph_rewrite(sink, pm_weak_lowering, name="lower weak")


def decompose_dtypes(sink: UOp, policy: DTypePolicy, supported: frozenset[DType]) -> UOp:
    """Stage 3: emulate what the policy marks emulated (floats first: they may leave int64 CASTs behind).
    ``supported`` is the target's declared set (an emulation may compute in a dtype the kernel did not use)."""
    sink = emulate_floats(sink, policy.float_emulated)
    if policy.long_emulated:
        sink = decompose_longs(sink, supported - policy.emulated_dtypes)
    return sink


def rewrite_kernel(sink: UOp, target: Target, default_opts: OptOptions | None = None) -> RewrittenKernel:
    """Every codegen pass in order, and the kernel's dtype policy (computed afresh for this kernel).
    ``default_opts``: the options used where no tuning chose any (None: the target's defaults now)."""
    sink = commit_dtypes(sink)
    supported = frozenset(target.supported_dtypes())
    policy = decide_policy(sink, target.name, supported, str(EMULATED_DTYPES.value))
    sink = decompose_dtypes(sink, policy, supported)
    sink = graph_rewrite(sink, pm_cast_const, name="cast const")
    sink = graph_rewrite(sink, pm_symbolic, name="symbolic")
    # a tuning file's or BEAM search's choice, else the target's default
    opts = (None if NOOPT else kernel_options(sink, target)) or default_opts or target_default_opts(target)
    if not NOOPT:
        optimized = optimize_for_target(sink, opts, target)
        if optimized is not sink:  # an unchanged kernel is already simplified: the walk would find nothing
            sink = graph_rewrite(optimized, pm_symbolic, name="symbolic after optimizing")
        language = getattr(target, "language", None)
        if not getattr(language, "vector_math", True) or not getattr(language, "vector_exp", True):
            sink = lower_vector_exp(sink)
        if not getattr(language, "vector_rint", True):
            sink = lower_vector_rint(sink)
        sink = fold_reciprocal_products(sink)
    # the SINK records the options: the target reads launch choices (work-group size) from it, the renderer whether
    # accumulators are parked
    if not PREFETCH:
        opts = replace(opts, prefetch_next_slices=False)
    sink = with_options(finish_kernel(sink, opts, target_caches(target)[0]), opts)
    return RewrittenKernel(sink, policy)


def full_rewrite_to_sink(sink: UOp, target: Target) -> UOp:
    """Every codegen pass in order; the result only holds ops and dtypes the target's renderer accepts."""
    return rewrite_kernel(sink, target).sink
