"""drivepack's tensor compiler: ONNX or Tensor code in, kernels and a replayable command buffer out.

The stages, in the order data flows (docs/architecture.md describes each):

- ``jit.onnx``: an ONNX model becomes lazy Tensor ops;
- ``jit.frontend``: the lazy Tensor, nn ops, Winograd, autograd; builds the tensor-level UOp graph;
- ``jit.ir``: the UOp, the pattern matcher and ALU semantics every stage shares;
- ``jit.schedule``: kernels, lowering, the arena plan and lanes;
- ``jit.codegen``: the pass pipeline and the optimizer, ending in what a renderer in ``targets/`` accepts;
- ``jit.realize`` runs a graph now; ``jit.trace`` records one call as a command buffer (``capture``; no
  submodule may share a name with an export, or importing it would replace the export on the package);
- ``jit.common``: errors, dtypes and settings, shared with the runtime.

The names below are the public API; internal modules may move. They are imported on first use, so that
``import jit.common.errors`` (which the runtime does) pulls in no compiler stage.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPORTS: dict[str, str] = {
    "Tensor": "jit.frontend.tensor",
    "dtypes": "jit.common.dtype",
    "DType": "jit.common.dtype",
    "UOp": "jit.ir.uop",
    "Ops": "jit.ir.uop",
    "GroupOp": "jit.ir.uop",
    "UPat": "jit.ir.rewrite",
    "PatternMatcher": "jit.ir.rewrite",
    "graph_rewrite": "jit.ir.rewrite",
    "load_onnx": "jit.onnx.loader",
    "OnnxModel": "jit.onnx.loader",
    "capture": "jit.trace",
    "capture_onnx": "jit.trace",
    "Captured": "jit.trace",
    "Device": "targets.registry",
    "Context": "jit.common.helpers",
    "DrivepackError": "jit.common.errors",
}

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
