"""OPENCL replay of the sample vision model: default kernel options vs BEAM-tuned ones, and tinygrad CL as peer.

    python3 benchmarks/bench_opencl.py [--iters N] [--beam N] [--tuning FILE] [--model vision|policy] [--no-peer]

What is timed: ``capture_onnx(model, inputs, target="OPENCL")`` once, then the median of ``--iters`` replay
calls (numpy inputs in, numpy outputs out), after 3 warm-up calls. Rows, all measured in this run:

* drivepack default: the optimizer's heuristic options (``OptOptions()``) and the OpenCL target's own
  work-group sizes;
* drivepack tuned: the same model captured inside ``use_tuning(table)``; the table is read from ``--tuning`` when
  that file exists, else searched now with ``--beam`` (default 2; search time printed) and written to it;
* tinygrad 0.14 CL TinyJit on the same OpenCL device (optional peer, in a subprocess:
  ``pip install -e '.[bench]'``; ``--no-peer`` skips it).

Ratios printed: tuned / default, and each drivepack row / tinygrad CL (below 1 = drivepack faster). Outputs of
the tuned replay are checked against the default's (within 1e-3 relative to the output's magnitude) first.
The machine is shared and noisy: compare only rows of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from jit.codegen.opt import tuning
from jit.codegen.opt.search import use_tuning
from jit.onnx.loader import load_onnx
from jit.trace import capture_onnx
from packager.samples import policy_model, sample_inputs, vision_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import peer_env  # noqa: E402

_TINYGRAD = """
import json, statistics, sys, time
import numpy as np
from tinygrad import Tensor, TinyJit
from tinygrad.nn.onnx import OnnxRunner
run = OnnxRunner(sys.argv[1])
inputs = {k: np.load(v) for k, v in json.loads(sys.argv[2]).items()}
jit = TinyJit(lambda **kw: next(iter(run(kw).values())).cast("float32").contiguous().realize())
for _ in range(3):
    jit(**{k: Tensor(v) for k, v in inputs.items()}).numpy()
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    jit(**{k: Tensor(v) for k, v in inputs.items()}).numpy()
    times.append(time.perf_counter() - t)
print(json.dumps({"median_s": statistics.median(times)}))
"""


def replay_median(run: Any, inputs: dict[str, np.ndarray], iters: int) -> tuple[float, dict[str, np.ndarray]]:
    for _ in range(3):
        out = run(inputs)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        out = run(inputs)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def tinygrad_cl(model_path: Path, inputs: dict[str, np.ndarray], iters: int, work: Path) -> float | None:
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        print("tinygrad: not installed; no peer (pip install -e '.[bench]')")
        return None
    files = {}
    for name, arr in inputs.items():
        files[name] = str(work / f"{name}.npy")
        np.save(files[name], arr)
    proc = subprocess.run([sys.executable, "-c", _TINYGRAD, str(model_path), json.dumps(files), str(iters)],
                          capture_output=True, text=True, timeout=1800, env=peer_env(DEV="CL"))
    if proc.returncode != 0:
        print(f"tinygrad CL: failed ({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else '?'})")
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["median_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--beam", type=int, default=2)
    ap.add_argument("--tuning", type=Path, help="tuning file to read, or to write after searching")
    ap.add_argument("--model", choices=("vision", "policy"), default="vision")
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    proto = vision_model() if args.model == "vision" else policy_model()
    inputs = sample_inputs(proto, seed=1)

    run = capture_onnx(load_onnx(proto, device="OPENCL"), sample_inputs(proto), target="OPENCL")
    default_s, default_out = replay_median(run, inputs, args.iters)
    print(f"drivepack OPENCL default: {default_s * 1e3:8.2f} ms  ({len(run.cmdbuf.kernels)} kernels)")

    path = args.tuning or Path(tempfile.gettempdir()) / f"drivepack-{args.model}-opencl.tuning.json"
    table = tuning.load(path) if path.exists() else tuning.TuningTable()
    t0 = time.perf_counter()
    with use_tuning(table, beam=0 if path.exists() else args.beam) as session:
        tuned_run = capture_onnx(load_onnx(proto, device="OPENCL"), sample_inputs(proto), target="OPENCL")
    search_s = time.perf_counter() - t0
    if session.searched:
        table.save(path)
    print(f"tuning: {session.hits} kernels from {path}, {session.searched} searched (beam {args.beam}) "
          f"in {search_s:.1f} s, {session.misses} at the defaults")
    tuned_s, tuned_out = replay_median(tuned_run, inputs, args.iters)
    for name, want in default_out.items():
        scale = max(float(np.max(np.abs(want))), 1.0)
        np.testing.assert_allclose(tuned_out[name], want, rtol=1e-3, atol=1e-3 * scale)
    print(f"drivepack OPENCL tuned:   {tuned_s * 1e3:8.2f} ms  (outputs equal to the default's within 1e-3)")
    print(f"ratio tuned / default: {tuned_s / default_s:.2f}x")

    if args.no_peer:
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "model.onnx"
        onnx.save(proto, str(model_path))
        tg = tinygrad_cl(model_path, inputs, args.iters, Path(tmp))
    if tg is not None:
        print(f"tinygrad 0.14 CL TinyJit:  {tg * 1e3:8.2f} ms")
        print(f"ratio drivepack default / tinygrad CL: {default_s / tg:.2f}x; tuned / tinygrad CL: "
              f"{tuned_s / tg:.2f}x (target <= 0.3x)")


if __name__ == "__main__":
    main()
