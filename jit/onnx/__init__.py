"""The ONNX front end: an ONNX file becomes Tensor ops.

Enters: an ``onnx.ModelProto`` (or a path). Leaves: lazy Tensors for the graph's outputs, built by the
handlers in ``ops/`` (one module per op family); ``loader`` walks the graph, ``fold`` computes integer shape
arithmetic on the host at load time. Nothing here runs a kernel.
"""
