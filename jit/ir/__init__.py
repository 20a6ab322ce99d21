"""The one IR: UOps, the pattern matcher that rewrites them, and the ALU semantics they compute with.

Enters: dtypes from ``jit.common``. Leaves: ``uop`` (Ops, GroupOp, the hash-consed UOp), ``rewrite``
(UPat, PatternMatcher, graph_rewrite), ``alu`` (what each ALU op computes on Python values, used by constant
folding and tests), ``viz`` (VIZ=1 dumps of rewrite steps). Every later stage builds and rewrites these nodes.
"""
