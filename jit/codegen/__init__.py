"""Code generation: each lowered kernel is rewritten, in a fixed order, into a graph a renderer accepts.

Enters: one kernel's LOAD/ALU/REDUCE/STORE graph and the target it is for. Leaves: an optimised graph whose
dtypes the target supports. ``pipeline`` holds the pass order (symbolic, weak-dtype commit, dtype
decomposition, index simplification, optimizer); ``passes/`` the rewrite passes; ``opt/`` the optimizer
(tiling, vectors, threads, loop order, BEAM search); ``stats`` counts a kernel's FLOPs and bytes.
"""
