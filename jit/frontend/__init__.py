"""The front end: the lazy Tensor and the ops built on it.

Enters: Python/numpy values and calls on Tensor. Leaves: a tensor-level UOp graph (BUFFER, CONST, movement
ops, REDUCE_AXIS, GATHER, ALU, CAST; docs/architecture.md lists them) that nothing has run yet.

``tensor`` holds the Tensor class itself (data, realization, casts, broadcasting); each op module beside it
imports Tensor and lists its methods in a ``TENSOR_METHODS`` table: ``elementwise`` (ALU ops from a table,
operators, activations), ``creation``, ``movement``, ``getitem``, ``reduce``, ``nn_ops`` (matmul, convs,
norms), ``pooling``, ``autograd`` (gradients). This is the one place that attaches them, so the modules import only
downward and any import of ``jit.frontend.tensor`` (which runs this first) gets a complete Tensor. ``shapes``
normalizes shape, axis and padding arguments; ``winograd`` is conv2d's Winograd path.
"""

from jit.frontend import autograd, creation, elementwise, getitem, movement, nn_ops, pooling, reduce
from jit.frontend.tensor import Tensor


def _attach() -> None:
    for module in (elementwise, creation, movement, getitem, reduce, nn_ops, pooling, autograd):
        for name, method in module.TENSOR_METHODS.items():
            # a name defined twice would silently replace a method: refuse it
            assert name not in vars(Tensor), f"Tensor.{name}: defined by {module.__name__} and before it"
            setattr(Tensor, name, method)


_attach()
