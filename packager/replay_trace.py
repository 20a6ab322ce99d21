"""``replay --trace OUT.json``: one profiled replay as a Chrome / Perfetto trace (the JSON object format of the
Trace Event Format), loadable in chrome://tracing or ui.perfetto.dev.

One complete ("X") event per dispatch, in dispatch order on one track, each as long as that dispatch ran when
profiled (dispatches synchronised one by one, so they lie end to end); ``args`` name the kernel, the ONNX nodes it
computes (``"?"`` for a package written before kernels recorded them), the launch dims and the kernel's FLOPs and
bytes. Metadata ("M") events name the process and the track.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def chrome_trace(replay: Any, seconds: list[float], kernel_info: dict[str, Any], title: str) -> dict[str, Any]:
    """The trace document of one profiled replay: ``seconds`` per dispatch (``Replay.profile`` order),
    ``kernel_info`` the manifest's KernelEntry per kernel name."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "tid": 1, "name": "process_name", "args": {"name": title}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name",
         "args": {"name": "dispatches (profiled: synchronised one by one)"}}]
    ts = 0.0
    for i, (d, s) in enumerate(zip(replay.cmdbuf.dispatches, seconds, strict=True)):
        kernel = replay.cmdbuf.kernels[d.kernel].name
        info = kernel_info.get(kernel)
        nodes = info.onnx_nodes if info is not None and info.onnx_nodes is not None else "?"
        events.append({"ph": "X", "pid": 1, "tid": 1, "cat": "dispatch", "name": kernel, "ts": round(ts, 3),
                       "dur": round(s * 1e6, 3),
                       "args": {"dispatch": i, "kernel": kernel, "onnx_nodes": list(nodes) if nodes != "?" else "?",
                                "global_size": list(d.global_size),
                                "local_size": list(d.local_size) if d.local_size else None,
                                "flops": info.flops if info is not None else None,
                                "bytes": info.bytes if info is not None else None}})
        ts += s * 1e6
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: str | Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` (an OSError, e.g. a missing folder, is the CLI's one-line error)."""
    out = Path(path)
    out.write_text(json.dumps(doc))
    return out
