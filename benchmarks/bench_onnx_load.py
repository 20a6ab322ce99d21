"""ONNX load-to-first-result time: drivepack (cold and warm kernel cache) against onnxruntime, in one run.

    python3 benchmarks/bench_onnx_load.py [--models vision,policy,light_resnet50]

For drivepack each measurement is a fresh process: load (parse + walk the graph into lazy Tensors), schedule +
compile (codegen, C compiler unless cached), and one inference (kernel launches). "cold" uses an empty kernel
cache directory, "warm" the same directory again. onnxruntime: session creation + first run, same process kind.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]

DRIVEPACK_RUN = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np, onnx
    from jit.onnx.loader import load_onnx
    from jit.realize import compile_kernels
    from jit.schedule.kernels import create_schedule
    from jit.realize import run_schedule
    from targets.registry import Device
    from benchmarks.bench_onnx_load import feeds_for
    proto = onnx.load(sys.argv[1])
    feeds = feeds_for(proto)
    t1 = time.perf_counter()
    model = load_onnx(proto)
    outs = model(feeds)
    t2 = time.perf_counter()
    kernels, _ = create_schedule([t.uop for t in outs.values()], Device.DEFAULT)
    compile_kernels(kernels, Device[Device.DEFAULT])
    t3 = time.perf_counter()
    run_schedule(kernels)
    t4 = time.perf_counter()
    print(json.dumps({"load": t2 - t1, "compile": t3 - t2, "run": t4 - t3, "kernels": len(kernels)}))
""")

ORT_RUN = textwrap.dedent("""
    import json, sys, time
    import onnx, onnxruntime as ort
    from benchmarks.bench_onnx_load import feeds_for
    proto = onnx.load(sys.argv[1])
    feeds = feeds_for(proto)
    t0 = time.perf_counter()
    opts = ort.SessionOptions(); opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    sess.run(None, feeds)
    t2 = time.perf_counter()
    print(json.dumps({"session": t1 - t0, "run": t2 - t1}))
""")


def feeds_for(proto: onnx.ModelProto) -> dict:
    from packager.samples import sample_inputs
    from tests.onnx.test_models import dummy_input
    inits = {t.name for t in proto.graph.initializer}
    if any(i.type.tensor_type.elem_type == onnx.TensorProto.UINT8 for i in proto.graph.input):
        return sample_inputs(proto)
    return {i.name: dummy_input(i) for i in proto.graph.input if i.name not in inits}


def model_path(name: str, tmp: Path) -> Path:
    if name.startswith("light_"):
        return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    from packager.samples import SAMPLES
    path = tmp / f"{name}.onnx"
    path.write_bytes(SAMPLES[name]().SerializeToString())
    return path


def run(code: str, path: Path, cache: str) -> dict:
    env = {"DRIVEPACK_CACHE": cache, "PYTHONPATH": str(ROOT)}
    import os
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="vision,policy,light_resnet50")
    args = ap.parse_args()
    print(f"{'model':16s} {'mode':6s} {'load s':>8s} {'compile s':>10s} {'run s':>8s} {'total s':>8s} "
          f"{'ort total s':>12s} {'ratio':>7s}")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for name in args.models.split(","):
            path = model_path(name, tmp)
            ort_res = run(ORT_RUN, path, str(tmp / "unused"))
            ort_total = ort_res["session"] + ort_res["run"]
            cache = tempfile.mkdtemp(dir=tmp)
            for mode in ("cold", "warm"):
                r = run(DRIVEPACK_RUN, path, cache)
                total = r["load"] + r["compile"] + r["run"]
                print(f"{name:16s} {mode:6s} {r['load']:8.2f} {r['compile']:10.2f} {r['run']:8.2f} {total:8.2f} "
                      f"{ort_total:12.2f} {total / ort_total:6.1f}x")


if __name__ == "__main__":
    main()
