"""ONNX op handlers, one module per family; importing this package registers them all."""

from jit.onnx.ops import elementwise, extra, indexing, movement, nn, recurrent, reduce  # noqa: F401
