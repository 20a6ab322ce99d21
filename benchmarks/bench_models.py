"""Whole-model replay speed: drivepack CPU and OPENCL vs onnxruntime and tinygrad, in one run, plus per-layer GFLOP/s.

    python3 benchmarks/bench_models.py [--quick] [--repeat N] [--models vision,policy,resnet50] [--layers K]
                                       [--no-tinygrad] [--no-opencl]

Models: the sample openpilot-shaped vision and policy models (packager/samples.py) and the onnx wheel's
``light_resnet50`` with seeded random weights (``random_weights``: the wheel stores each weight as one repeated
value; input arange(n)/n as onnx's backend runner feeds it). ``--quick``: vision
and policy only, 3 timed calls each.

What is timed (median of ``--repeat`` calls after 3 warm-up calls; numpy inputs in, numpy outputs out):

* drivepack CPU / OPENCL: **replay** of ``jit.trace.capture_onnx`` (captured once, before timing: one FFI call
  into the generated C driver on the CPU target, one command-buffer enqueue on OPENCL). Outputs are checked
  against onnxruntime first.
* onnxruntime CPU with 2 intra-op threads (the issue's peer).
* tinygrad 0.14 ``OnnxRunner`` captured with ``TinyJit``, each in its own process, kept alive and asked for one
  replay at a time: CPU (``DEV=CPU``, compiled with clang: ``$CC`` or the first ``clang``/``clang-NN`` on PATH)
  and CL (``DEV=CL``, the same PoCL drivepack uses).

All five are timed in alternating blocks of calls (``interleaved_medians``): this machine has slow spells minutes
long, and peers timed one after another could land on either side of one (vision on OPENCL read 16 and 24 ms a
few minutes apart).
  Optional: ``pip install -e '.[bench]'`` (tinygrad 0.14.0); without
  it, or with ``--no-tinygrad``, those columns print ``-``.

Ratios printed per model (lower is better, < 1 = drivepack faster): drivepack CPU / onnxruntime, drivepack CPU /
tinygrad CPU, drivepack OPENCL / tinygrad CL.

Per layer (CPU target): the ``--layers`` slowest kernels of each model, each launched alone from its own
schedule, with time, GFLOP/s (FLOPs counted from the kernel graph, jit/codegen/stats.py) and the share of the machine's
FMA peak, which this script measures itself by compiling a small C kernel of independent FMAs that runs on every
core (OpenMP).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx

from jit.onnx.loader import load_onnx
from jit.realize import compile_kernels, device_buffer
from jit.schedule.kernels import create_schedule
from jit.trace import capture_onnx
from targets.cpu_runtime import cpu_threads
from targets.registry import Device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import interleaved_medians, peer_env  # noqa: E402

ORT_THREADS = 2
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

# 12 independent vector accumulators per thread (widest vectors the machine has): enough FMAs in flight to
# hide their latency on two ports; the result is stored so the compiler cannot drop the work
FMA_PEAK_C = r"""
#include <omp.h>
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));
#define STEP(x) x = x * b + a;
#define ALL(M) M(c0) M(c1) M(c2) M(c3) M(c4) M(c5) M(c6) M(c7) M(c8) M(c9) M(c10) M(c11)
double fma_peak(long iters, float* out) {
  int nt = 1;
  double t0 = omp_get_wtime();
  #pragma omp parallel
  {
    vf a, b;
    for (int j = 0; j < LANES; j++) { a[j] = 1e-7f * j; b[j] = 0.999999f; }
    vf c0 = a, c1 = a + 1, c2 = a + 2, c3 = a + 3, c4 = a + 4, c5 = a + 5, c6 = a + 6, c7 = a + 7, c8 = a + 8,
       c9 = a + 9, c10 = a + 10, c11 = a + 11;
    for (long it = 0; it < iters; it++) { ALL(STEP) }
    vf s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
    out[omp_get_thread_num()] = s[0];
    #pragma omp single
    nt = omp_get_num_threads();
  }
  double secs = omp_get_wtime() - t0;
  return 2.0 * 12 * LANES * (double)iters * nt / secs;  /* FLOP/s: 2 per lane-FMA */
}
"""


def fma_probe(threads: int) -> Callable[[], float]:
    """The FMA kernel compiled and loaded: a call returns the rate of one run on ``threads`` threads, in GFLOP/s."""
    import cffi
    tmp = Path(tempfile.mkdtemp(prefix="fma-peak-"))
    src, lib_path = tmp / "peak.c", tmp / "peak.so"
    src.write_text(FMA_PEAK_C)
    subprocess.run(["cc", "-O2", "-march=native", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib_path)],
                   check=True)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # libgomp reads it when it is loaded
    ffi = cffi.FFI()
    ffi.cdef("double fma_peak(long iters, float* out);")
    lib = ffi.dlopen(str(lib_path))
    shutil.rmtree(tmp)  # the loaded library stays mapped
    out = ffi.new("float[]", 256)
    return lambda: lib.fma_peak(5_000_000, out) / 1e9  # lib's accessors hold the FFI that loaded it


class FmaPeak:
    """The machine's FMA peak as the best rate any probe of this run reached. Other tenants slow this machine for
    minutes at a time, the FMA units included: one run probed 55.1 GFLOP/s at its start (76-80 is usual) and its
    layer table then read 112-118% of peak. So the table probes again beside the kernels it times."""

    def __init__(self, probe: Callable[[], float]) -> None:
        self._probe = probe
        self.best = 0.0

    def measure(self, runs: int = 3) -> float:
        """Probe ``runs`` times; the best rate seen so far."""
        self.best = max(self.best, *(self._probe() for _ in range(runs)))
        return self.best


def light_inputs(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name for t in proto.graph.initializer}
    feeds = {}
    for info in proto.graph.input:
        if info.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in info.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[info.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def load_case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from packager.samples import policy_model, sample_inputs, vision_model
    if name == "vision":
        proto = vision_model()
        return proto, sample_inputs(proto, seed=3)
    if name == "policy":
        proto = policy_model()
        return proto, sample_inputs(proto, seed=3)
    proto = random_weights(onnx.load(str(LIGHT_DIR / f"light_{name}.onnx")))
    return proto, light_inputs(proto)


def random_weights(proto: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light model with every ``ConstantOfShape`` weight replaced by a seeded random initializer (as the
    issue's peers were measured): the wheel's light models store each weight as one repeated value, which lets a
    compiler that folds constants skip the convolutions. Conv/Gemm weights are He-scaled, BatchNorm variances
    and scales positive around 1, means and biases small, so activations keep their scale through the net."""
    from onnx import numpy_helper
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    kept, inits = [], []
    for node in proto.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            kept.append(node)
            continue
        shape, out = tuple(int(v) for v in shapes[node.input[0]]), node.output[0]
        if out.endswith("_w_0"):
            arr = rng.standard_normal(shape) * np.sqrt((2.0 if len(shape) == 4 else 1.0) / np.prod(shape[1:]))
        elif out.endswith(("_riv_0", "_s_0")):
            arr = rng.uniform(0.5, 1.5, shape)
        else:
            arr = rng.standard_normal(shape) * 0.1
        inits.append(numpy_helper.from_array(arr.astype(np.float32), out))
    out_proto = onnx.ModelProto.FromString(proto.SerializeToString())
    del out_proto.graph.node[:]
    out_proto.graph.node.extend(kept)
    out_proto.graph.initializer.extend(inits)
    # IR 3 (the wheel's) requires every initializer to be a graph input too; from IR 4 on it need not be
    out_proto.ir_version = max(out_proto.ir_version, 4)
    return out_proto


# tinygrad in a process of its own per device (its device is chosen by DEV before import), kept alive while the
# peers are timed in turn: after its warm-up it saves its outputs and answers "ready"; each "call" line then runs
# one replay ("ok"); "other" runs the second input set once, saves those outputs and exits
_TINYGRAD = """
import json, sys
import numpy as np
from tinygrad import Tensor, TinyJit
from tinygrad.nn.onnx import OnnxRunner
run = OnnxRunner(sys.argv[1])
inputs = {k: np.load(v) for k, v in json.loads(sys.argv[2]).items()}
jit = TinyJit(lambda **kw: [v.contiguous().realize() for v in run(kw).values()])
call = lambda feeds: [o.numpy() for o in jit(**{k: Tensor(v) for k, v in feeds.items()})]
for _ in range(3):
    outs = call(inputs)
np.savez(sys.argv[3], *outs)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "call":
        call(inputs)
        print("ok", flush=True)
    elif line.strip() == "other":
        np.savez(sys.argv[5], *call({k: np.load(v) for k, v in json.loads(sys.argv[4]).items()}))
        break
"""


class TinygradPeer:
    """tinygrad 0.14 TinyJit replay on ``dev`` ("CPU" or "CL") in its own process, one call per ``call()``."""

    def __init__(self, dev: str, model_path: Path, inputs: Mapping[str, np.ndarray], work: Path,
                 other: Mapping[str, np.ndarray], env: dict[str, str], script: str = _TINYGRAD) -> None:
        self.dev = dev
        self.got_path, self.other_path = (work / f"{model_path.stem}-{dev}-{tag}.npz" for tag in "ab")
        self.proc = subprocess.Popen([sys.executable, "-c", script, str(model_path),
                                      _save_inputs(work, model_path.stem + "-a", inputs), str(self.got_path),
                                      _save_inputs(work, model_path.stem + "-b", other), str(self.other_path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self._expect("ready")

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != word:
            self.proc.kill()
            err = (self.proc.stderr.read() if self.proc.stderr else "").strip().splitlines()
            raise RuntimeError(err[-1] if err else f"exited with {self.proc.wait()}")

    def call(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("call\n")
        self.proc.stdin.flush()
        self._expect("ok")

    def outputs_match(self, want: list[np.ndarray], other_want: list[np.ndarray]) -> bool:
        """Whether the warm-up outputs and, run now, the other inputs' outputs match onnxruntime's (a replay that
        returned stale outputs is no peer); the process exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("other\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=3600)
        for path, expected in ((self.got_path, want), (self.other_path, other_want)):
            with np.load(path) as z:
                if not _matches(f"tinygrad {self.dev}", [z[f"arr_{i}"] for i in range(len(z.files))], expected):
                    return False
        return True


def _clang() -> str | None:
    if os.environ.get("CC"):
        return os.environ["CC"]
    for name in ("clang", *(f"clang-{v}" for v in range(21, 10, -1))):
        if shutil.which(name):
            return name
    return None


def _save_inputs(work: Path, tag: str, inputs: Mapping[str, np.ndarray]) -> str:
    files = {}
    for name, arr in inputs.items():
        files[name] = str(work / f"{tag}-{name.replace('/', '_')}.npy")
        np.save(files[name], arr)
    return json.dumps(files)


def _matches(what: str, got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    for i, w in enumerate(want):
        if i >= len(got) or got[i].shape != w.shape or not np.allclose(got[i], w, rtol=2e-3, atol=2e-3):
            err = float(np.max(np.abs(got[i] - w))) if i < len(got) and got[i].shape == w.shape else float("nan")
            print(f"  {what}: output {i} differs from onnxruntime (max abs error {err:.3g}); not used")
            return False
    return True


def start_tinygrad(dev: str, model_path: Path, inputs: Mapping[str, np.ndarray], work: Path,
                   other: Mapping[str, np.ndarray]) -> TinygradPeer | None:
    """A warmed-up tinygrad peer on ``dev``, or None (printed why) when it cannot run here."""
    env = peer_env(DEV=dev)
    if dev == "CPU":
        cc = _clang()
        if cc is None:
            print("  tinygrad CPU: no clang on PATH (tinygrad's CPU device compiles with clang); skipped")
            return None
        env["CC"] = cc
    try:
        return TinygradPeer(dev, model_path, inputs, work, other, env)
    except RuntimeError as e:
        print(f"  tinygrad {dev}: failed ({e})")
        return None


def check_outputs(what: str, got: Mapping[str, np.ndarray], names: list[str], want: list[np.ndarray]) -> None:
    for n, w in zip(names, want, strict=True):
        np.testing.assert_allclose(np.asarray(got[n], np.float32), w, rtol=2e-3, atol=2e-3, err_msg=f"{what}: {n}")


def base_name(kernel: str) -> str:
    """A kernel's name without the ``n2``, ``n3``... that tells same-shaped kernels apart."""
    return re.sub(r"n\d+$", "", kernel)


def layer_table(name: str, proto: onnx.ModelProto, feeds: dict[str, np.ndarray], layers: int, peak: FmaPeak,
                replayed: set[str]) -> None:
    """The slowest CPU kernels of the model that compute (FLOPs > 0) and that its replay runs (``replayed``: base
    names), each launched alone (best of 3), with GFLOP/s and share of the FMA peak, probed again between the
    kernels' launches (``FmaPeak``)."""
    model = load_onnx(proto, device="CPU")
    outs = model(feeds)
    kernels, _ = create_schedule([outs[n].uop for n in model.output_names], "CPU")
    target = Device["CPU"]
    compiled = compile_kernels(kernels, target)
    rows = []
    for k, ck in zip(kernels, compiled, strict=True):
        if base_name(ck.name) not in replayed:  # weight-only work a capture folds (Winograd's U, layout copies)
            continue
        bufs = [device_buffer(b) for b in k.buffers]
        times = [target.launch(ck.program, bufs, wait=True) or 0.0 for _ in range(3)]
        rows.append((min(times), ck))
        peak.measure(1)
    rows.sort(key=lambda r: -r[0])
    total = sum(t for t, _ in rows)
    print(f"  {name}: {len(rows)} replayed kernels (eager schedule), sum of best kernel times {total * 1e3:.2f} ms; "
          f"FMA peak {peak.best:.1f} GFLOP/s (best probe so far)")
    for t, ck in [r for r in rows if r[1].stats.flops][:layers]:
        gflops = ck.stats.flops / t / 1e9 if t else 0.0
        print(f"    {ck.name:40s} {t * 1e3:8.3f} ms {ck.stats.flops / 1e9:7.3f} GFLOP {gflops:8.1f} GFLOP/s "
              f"{100 * gflops / peak.best:5.1f}% of peak")


def bench_model(name: str, args: argparse.Namespace, peak: FmaPeak, work: Path) -> dict[str, float | None]:
    import onnxruntime as ort
    proto, feeds = load_case(name)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ORT_THREADS
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = sess.run(None, feeds)
    # a second input set, run once after timing: a replay must compute, not return what it returned before
    other_feeds = {k: (v[..., ::-1].copy() if v.ndim else v) for k, v in feeds.items()}
    other_want = sess.run(None, other_feeds)
    peers: dict[str, Callable[[], object]] = {"ort": lambda: sess.run(None, feeds)}
    runs = {}
    for target in ("CPU", "OPENCL"):
        if target == "OPENCL" and args.no_opencl:
            continue
        t0 = time.perf_counter()
        run = runs[target] = capture_onnx(load_onnx(proto, device=target), feeds, target=target)
        check_outputs(f"drivepack {target}", run(feeds), names, want)
        print(f"  {name}: drivepack {target} capture {time.perf_counter() - t0:.1f} s, {run.n_dispatches} dispatches")
        peers["dp_" + target.lower()] = lambda run=run: run(feeds)
    model_path = work / f"{name}.onnx"
    onnx.save(proto, str(model_path))
    tinygrad = {dev: None if args.no_tinygrad else start_tinygrad(dev, model_path, feeds, work, other_feeds)
                for dev in ("CPU", "CL")}
    peers.update({"tg_" + dev.lower(): peer.call for dev, peer in tinygrad.items() if peer is not None})
    # every peer timed in alternating blocks: the machine's slow spells (minutes long) fall on all of them alike
    row: dict[str, float | None] = {"dp_cpu": None, "dp_opencl": None, "tg_cpu": None, "tg_cl": None,
                                    **interleaved_medians(peers, args.repeat, warmup=3)}
    for target, run in runs.items():
        check_outputs(f"drivepack {target} (other inputs)", run(other_feeds), names, other_want)
    for dev, peer in tinygrad.items():
        if peer is not None and not peer.outputs_match(want, other_want):
            row["tg_" + dev.lower()] = None
    if args.layers:
        replayed = {base_name(k.name) for k in runs["CPU"].cmdbuf.kernels}
        runs.clear()
        layer_table(name, proto, feeds, args.layers, peak, replayed)
    return row


def _ms(v: float | None) -> str:
    return f"{v * 1e3:.2f}" if v is not None else "-"


def _ratio(a: float | None, b: float | None) -> str:
    # three decimals: the tinygrad targets sit at 0.1x and 0.3x, where two would round 0.096 up to the target
    return f"{a / b:.3f}x" if a is not None and b is not None else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="vision and policy, 3 timed calls, 3 layers")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls per median (default 20; quick: 3)")
    parser.add_argument("--models", default=None, help="comma list of vision,policy,resnet50")
    parser.add_argument("--layers", type=int, default=None, help="slowest kernels listed per model (0: none)")
    parser.add_argument("--no-tinygrad", action="store_true", help="skip the tinygrad peers")
    parser.add_argument("--no-opencl", action="store_true", help="skip drivepack OPENCL")
    args = parser.parse_args()
    args.repeat = args.repeat or (3 if args.quick else 20)
    args.layers = args.layers if args.layers is not None else (3 if args.quick else 5)
    models = (args.models or ("vision,policy" if args.quick else "vision,policy,resnet50")).split(",")
    if importlib.util.find_spec("tinygrad") is None:  # not imported here: it reads this process's WINO, BEAM
        print("tinygrad: not installed; no tinygrad peers (pip install tinygrad==0.14.0)")
        args.no_tinygrad = True
    threads = cpu_threads()
    peak = FmaPeak(fma_probe(threads))
    print(f"FMA peak measured on {threads} threads: {peak.measure():.1f} GFLOP/s")
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        results = [(name, bench_model(name, args, peak, Path(tmp))) for name in models]
    print(f"\nreplay medians (ms), {args.repeat} calls after 3 warm-up; ratios: lower is better")
    print(f"{'model':10s} {'dp CPU':>8s} {'ORT':>8s} {'tg CPU':>8s} {'dp OCL':>8s} {'tg CL':>8s} "
          f"{'CPU/ORT':>8s} {'CPU/tgCPU':>10s} {'OCL/tgCL':>9s}")
    for name, r in results:
        print(f"{name:10s} {_ms(r['dp_cpu']):>8s} {_ms(r['ort']):>8s} {_ms(r['tg_cpu']):>8s} {_ms(r['dp_opencl']):>8s} "
              f"{_ms(r['tg_cl']):>8s} {_ratio(r['dp_cpu'], r['ort']):>8s} {_ratio(r['dp_cpu'], r['tg_cpu']):>10s} "
              f"{_ratio(r['dp_opencl'], r['tg_cl']):>9s}")


if __name__ == "__main__":
    main()
