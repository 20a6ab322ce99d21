"""The independent reference a package's golden outputs are checked against, and what the manifest says of it.

At package time the golden inputs are run by onnxruntime (CPU execution provider, one thread, the model bytes
as given) when it can be imported and runs the model; else by a NOOPT drivepack build of the same graph on the
CPU with no dtype emulation (``Context(NOOPT=1)``: no kernel fusion or optimizer passes, so it shares the front
end with the target but not its schedule). The manifest records which in ``golden.reference``:
``{"kind": "onnxruntime", "version": "1.x", "provider": "CPUExecutionProvider"}`` or ``{"kind":
"drivepack-noopt", "version": <drivepack version>, "device": "CPU", "reason": why onnxruntime was not used}``.

onnxruntime computes a float16 graph in float16 (its CPU kernels, with casts it inserts for kernels it lacks), so
a float16 output differs from drivepack's in the last bits: the per-dtype tolerances of packager/build.py allow
for it. This module is on the compiler side only (the runtime never imports onnxruntime).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from jit.common.dtype import dtypes, to_numpy
from packager import __version__
from targets.cmdbuf import BufferSpec

ORT_PROVIDER = "CPUExecutionProvider"
_REASON_CHARS = 200  # an onnxruntime error quoted in the manifest is cut here (its messages can run to pages)


@dataclass(frozen=True)
class Reference:
    """The reference outputs per golden set, and the manifest's ``golden.reference`` record of where they came
    from."""

    outputs: list[dict[str, np.ndarray]]
    record: dict[str, str]

    @property
    def label(self) -> str:
        """``onnxruntime 1.x`` / ``drivepack-noopt 0.y``: how the build names it in a mismatch."""
        return f"{self.record['kind']} {self.record['version']}"


def _short(e: BaseException) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def onnxruntime_outputs(model_bytes: bytes, sets: Sequence[dict[str, np.ndarray]],
                        outputs: Sequence[BufferSpec]) -> tuple[list[dict[str, np.ndarray]], str]:
    """Each set's outputs from onnxruntime and its version; ImportError when it is not installed, another
    exception (ValueError for a disagreement on an output's dtype or shape) when it cannot run the model."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1  # one thread: the same bits on every run
    opts.log_severity_level = 3
    session = onnxruntime.InferenceSession(model_bytes, sess_options=opts, providers=[ORT_PROVIDER])
    names = [b.name for b in outputs]
    result = []
    for inputs in sets:
        got = dict(zip(names, session.run(names, dict(inputs)), strict=True))
        for b in outputs:
            want = to_numpy(dtypes.from_name(b.dtype))
            arr = np.asarray(got[b.name])
            if arr.dtype != want or arr.shape != tuple(b.shape):
                raise ValueError(f"output {b.name}: expected {np.dtype(want).name} {tuple(b.shape)} (the command "
                                 f"buffer's), got {arr.dtype} {arr.shape} from onnxruntime")
            got[b.name] = np.ascontiguousarray(arr)
        result.append(got)
    return result, str(onnxruntime.__version__)


def reference_outputs(model_bytes: bytes | None, sets: Sequence[dict[str, np.ndarray]],
                      outputs: Sequence[BufferSpec], noopt_run: Callable[[], list[dict[str, np.ndarray]]]) -> Reference:
    """The reference of the module docstring: onnxruntime's outputs, else ``noopt_run()`` (the caller's NOOPT CPU
    build run over the same sets), recorded with the reason onnxruntime was not used. ``model_bytes`` None: what
    is packaged is not one ONNX graph (a modeld step), so only the NOOPT build can run it."""
    if model_bytes is None:
        return Reference(noopt_run(), {"kind": "drivepack-noopt", "version": __version__, "device": "CPU",
                                       "reason": "not one ONNX graph: the modeld step (warp, queues and models)"})
    try:
        outs, version = onnxruntime_outputs(model_bytes, sets, outputs)
    except ImportError as e:
        reason = f"onnxruntime is not importable: {_short(e)}"
    except Exception as e:  # onnxruntime raises its own Fail/InvalidArgument/NotImplemented types
        reason = f"onnxruntime cannot run the model: {_short(e)}"
    else:
        return Reference(outs, {"kind": "onnxruntime", "version": version, "provider": ORT_PROVIDER})
    return Reference(noopt_run(), {"kind": "drivepack-noopt", "version": __version__, "device": "CPU",
                                   "reason": reason})

