"""The ONNX front end: an ONNX file becomes Tensor ops.

Enters: an ``onnx.ModelProto`` (or a path). Leaves: lazy Tensors for the graph's outputs, built by the
handlers in ``ops/`` (one module per op family, registered in ``registry``); ``loader`` walks the graph,
``fold`` computes integer shape arithmetic on the host at load time, and ``host_ops`` lists the few ops
whose output shape depends on data, which compute on the host too. Nothing here runs a kernel, except
``OpContext.host_of`` evaluating a value computed from constants that a handler must read on the host.
"""
