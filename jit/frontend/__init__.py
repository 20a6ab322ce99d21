"""The front end: the lazy Tensor and the ops built on it.

Enters: Python/numpy values and calls on Tensor. Leaves: a tensor-level UOp graph (BUFFER, CONST, movement
ops, REDUCE_AXIS, GATHER, ALU, CAST; docs/architecture.md lists them) that nothing has run yet. ``tensor``
holds Tensor, ``nn_ops`` convs/pools/norms, ``winograd`` the Winograd conv rewrite, ``autograd`` gradients.
"""
