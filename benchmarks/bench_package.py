"""Package load time for a ~50 MB-weight model vs tinygrad's pickle load of the same model.

Builds ``packager.synthetic.gemm_model(3, 2048)`` (three 2048x2048 float32 Gemm layers: 50.3 MB of weights)
into a .dpk on the CPU target, then, in a fresh process, times ``load_package`` (read the file into the loader's
own memory, check every byte's checksum) + ``make_replay`` (prepare the replay: the compiled driver comes from the
kernel cache after the first run) + one replay. Peer, measured in the same run: tinygrad's ``OnnxRunner`` on the same
ONNX file captured with ``TinyJit``, pickled, and ``pickle.load``-ed in a fresh process (tinygrad is optional:
``pip install -e '.[bench]'``; without it only drivepack's numbers print).

    python3 benchmarks/bench_package.py [--workdir DIR] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_DPK_LOAD = """
import json, sys, time
t0 = time.perf_counter()
from packager.package import load_package
t1 = time.perf_counter()
times = []
for _ in range(int(sys.argv[2])):
    s = time.perf_counter()
    pkg = load_package(sys.argv[1])
    replay = pkg.make_replay()
    times.append(time.perf_counter() - s)
    g = pkg.golden(0)
out = replay(g.inputs)["outputs"]
assert (out == g.target["outputs"]).all()
print(json.dumps({"import_s": t1 - t0, "first_s": times[0], "best_s": min(times),
                  "weights_mb": sum(w.nbytes for w in pkg.weights.values()) / 1e6}))
"""

_TG_SAVE = """
import pickle, sys, numpy as np
from tinygrad import Tensor, TinyJit
from tinygrad.nn.onnx import OnnxRunner
run = OnnxRunner(sys.argv[1])
jit = TinyJit(lambda **kw: next(iter(run(kw).values())).cast("float32").contiguous().realize())
x = np.random.default_rng(0).standard_normal((1, 2048)).astype(np.float32)
for _ in range(3):
    jit(x=Tensor(x)).numpy()
with open(sys.argv[2], "wb") as f:
    pickle.dump(jit, f)
"""

_TG_LOAD = """
import json, pickle, sys, time
t0 = time.perf_counter()
import tinygrad  # noqa: F401  the import is timed apart from the load
t1 = time.perf_counter()
times = []
for _ in range(int(sys.argv[2])):
    s = time.perf_counter()
    with open(sys.argv[1], "rb") as f:
        pickle.load(f)
    times.append(time.perf_counter() - s)
print(json.dumps({"import_s": t1 - t0, "first_s": times[0], "best_s": min(times)}))
"""


def _py(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", help="where the model, package and pickle go (default: a temporary directory)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import onnx

    from packager.build import BuildOptions, build_package
    from packager.synthetic import gemm_model

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-package-"))
    work.mkdir(parents=True, exist_ok=True)
    model, pkg = work / "gemm.onnx", work / "gemm.dpk"
    onnx.save(gemm_model(3, 2048), str(model))
    build_package(model, "pc-cpu", pkg, BuildOptions(golden_sets=1))
    dpk = _py(_DPK_LOAD, str(pkg), str(args.repeats))
    print(f"model: 3 x Gemm 2048x2048 float32, {dpk['weights_mb']:.1f} MB of weights; package "
          f"{pkg.stat().st_size / 1e6:.1f} MB")
    print(f"drivepack load_package + make_replay: first {dpk['first_s'] * 1e3:.1f} ms, best of {args.repeats} "
          f"{dpk['best_s'] * 1e3:.1f} ms (import {dpk['import_s'] * 1e3:.0f} ms)  target < 1000 ms: "
          f"{'ok' if dpk['first_s'] < 1 else 'MISSED'}")
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        print("tinygrad: not installed; no peer measured (pip install -e '.[bench]')")
        return
    pickled = work / "gemm.pkl"
    try:
        _py(_TG_SAVE, str(model), str(pickled))
        tg = _py(_TG_LOAD, str(pickled), str(args.repeats))
    except RuntimeError as e:
        print(f"tinygrad: could not capture/pickle the model ({e}); no peer measured")
        return
    print(f"tinygrad TinyJit pickle.load ({pickled.stat().st_size / 1e6:.1f} MB pickle): first "
          f"{tg['first_s'] * 1e3:.1f} ms, best {tg['best_s'] * 1e3:.1f} ms (import {tg['import_s'] * 1e3:.0f} ms)")
    print(f"ratio drivepack / tinygrad (first load): {dpk['first_s'] / tg['first_s']:.2f}x; best: "
          f"{dpk['best_s'] / tg['best_s']:.2f}x (below 1 = drivepack faster; drivepack's time includes checking "
          f"every checksum and preparing the replay, tinygrad's only unpickling)")


if __name__ == "__main__":
    main()
