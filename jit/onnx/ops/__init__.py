"""ONNX op handlers, one module per family; importing this package registers them all."""

from jit.onnx.ops import (  # noqa: F401
    attention,
    detection,
    elementwise,
    indexing,
    linalg,
    ml,
    movement,
    nn,
    quantize,
    recurrent,
    reduce,
    sampling,
    spectral,
    training,
)
