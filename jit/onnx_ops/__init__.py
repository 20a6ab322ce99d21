"""ONNX op handlers, one module per family; importing this package registers them all."""

from jit.onnx_ops import elementwise, indexing, movement, nn, reduce  # noqa: F401
from jit.onnx_ops import extra, recurrent  # noqa: F401
