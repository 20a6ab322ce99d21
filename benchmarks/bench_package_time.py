"""Packaging time of the sample vision model with a warm tuning file vs tinygrad's compile3-style flow, in one run.

    python3 benchmarks/bench_package_time.py [--runs N] [--tuning FILE] [--workdir DIR] [--no-tinygrad]

Issue 9's target: packaging (load -> package written) with a warm tuning file <= 0.5x tinygrad's compile3-style
flow (load + TinyJit capture runs) on the same model. Both sides are timed as the wall time of a fresh process
(interpreter start, imports and all), median of ``--runs`` processes each:

* drivepack: ``drivepack package vision.onnx --vehicle pc-cpu --tuning FILE`` (the sample vision model of
  packager/samples.py written to an .onnx file). FILE comes from a ``--tune`` run made first (a minute or so:
  a timed beam search per kernel) unless ``--tuning`` names one. That run covers everything up to a verified
  package: capture, golden outputs, write, reload and replay the written file.
* tinygrad 0.14 (optional: ``pip install -e '.[bench]'``), as openpilot's compile3.py does it: ``OnnxRunner``
  load, three ``TinyJit`` calls (the third replays the captured kernels), ``pickle.dump`` of the jit. On
  ``DEV=CPU`` compiled with clang (benchmarks/bench_models.py's ``_clang``). Its outputs are checked against
  onnxruntime once, outside the timing.

Each side twice: **warm**, with a kernel cache filled before timing and kept between runs (drivepack's
``DRIVEPACK_CACHE``, tinygrad's sqlite ``CACHEDB``, each a directory of this run's own), the realistic case of
re-packaging; and **cold**, a fresh empty cache directory per run (every kernel compiled). The processes are
interleaved, one of each per round, so a slow spell of the (shared, noisy) machine hits both sides. Printed: the
medians, every run's wall time, and the ratios drivepack / tinygrad, warm/warm and cold/cold, on wall time and on
in-process time (drivepack's stage sum; tinygrad's flow after its imports). Lower is better; the target is <= 0.5
warm/warm.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import peer_env  # noqa: E402
from bench_models import ORT_THREADS, _clang, _matches, _save_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VEHICLE = "pc-cpu"
TARGET_RATIO = 0.5

# compile3-style: the jit's outputs are realized contiguous float32 tensors read back with .numpy() each call,
# as compile3 reads its output; the import is timed apart so the table can show it
_TG_COMPILE = """
import json, pickle, sys, time
t0 = time.perf_counter()
import numpy as np
from tinygrad import Tensor, TinyJit
from tinygrad.nn.onnx import OnnxRunner
t1 = time.perf_counter()
run = OnnxRunner(sys.argv[1])
inputs = {k: np.load(v) for k, v in json.loads(sys.argv[2]).items()}
jit = TinyJit(lambda **kw: [v.contiguous().realize() for v in run(kw).values()], prune=True)
for _ in range(3):
    outs = [o.numpy() for o in jit(**{k: Tensor(v) for k, v in inputs.items()})]
with open(sys.argv[3], "wb") as f:
    pickle.dump(jit, f)
t2 = time.perf_counter()
np.savez(sys.argv[4], *outs)
print(json.dumps({"import_s": t1 - t0, "flow_s": t2 - t1}))
"""

_STAGES = re.compile(r"time per stage:(.*)$", re.MULTILINE)


def timed_process(cmd: list[str], env: Mapping[str, str]) -> tuple[float, str]:
    """Wall seconds of ``cmd`` in a fresh process and its stdout; RuntimeError (last stderr line) if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(env), capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise RuntimeError(f"{' '.join(cmd[:4])}...: exit {proc.returncode}: {lines[-1] if lines else '?'}")
    return wall, proc.stdout


def stage_seconds(summary: str) -> float | None:
    """The sum of the per-stage seconds ``drivepack package`` prints (its in-process time), None if absent."""
    m = _STAGES.search(summary)
    if m is None:
        return None
    return sum(float(s) for s in re.findall(r"([0-9.]+) s\b", m.group(1)))


def package_cmd(model: Path, out: Path, tuning: Path, tune: bool = False) -> list[str]:
    return [sys.executable, "-m", "packager.cli", "package", str(model), "--vehicle", VEHICLE, "-o", str(out),
            "--tuning", str(tuning), "--quiet", *(["--tune"] if tune else [])]


def _tg_flow_seconds(stdout: str) -> float | None:
    return float(json.loads(stdout.strip().splitlines()[-1])["flow_s"])


@dataclass(frozen=True)
class Flow:
    """One side of the comparison: the command of one packaging process, the environment variable naming its kernel
    cache (``cache_file``: a file inside the cache directory rather than the directory) and how to read its
    in-process seconds from its stdout."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    cache_var: str
    cache_file: str | None
    in_process: Callable[[str], float | None]

    def run(self, cache_dir: Path) -> tuple[float, float | None]:
        """(wall s, in-process s) of one process with its kernel cache in ``cache_dir``."""
        cache = cache_dir / self.cache_file if self.cache_file else cache_dir
        wall, stdout = timed_process(self.cmd, {**self.env, self.cache_var: str(cache)})
        return wall, self.in_process(stdout)


Rows = dict[str, list[tuple[float, float | None]]]


def measure(flows: list[Flow], runs: int, work: Path) -> dict[str, Rows]:
    """flow name -> {"warm": rows, "cold": rows}, ``runs`` rows each. Warm: one cache directory per flow, filled by
    an untimed process first and kept; cold: a fresh empty one per process. The processes are interleaved (each
    round runs every flow warm and cold) so a slow spell of this shared machine hits both sides alike."""
    warm_dirs = {f.name: work / f"{f.name}-cache-warm" for f in flows}
    for f in flows:
        warm_dirs[f.name].mkdir(parents=True, exist_ok=True)
        f.run(warm_dirs[f.name])
    out: dict[str, Rows] = {f.name: {"warm": [], "cold": []} for f in flows}
    for _ in range(runs):
        for f in flows:
            out[f.name]["warm"].append(f.run(warm_dirs[f.name]))
            cold = Path(tempfile.mkdtemp(prefix=f"{f.name}-cache-cold-", dir=work))
            try:
                out[f.name]["cold"].append(f.run(cold))
            finally:
                shutil.rmtree(cold, ignore_errors=True)
    return out


def tinygrad_flow(model: Path, inputs_json: str, work: Path) -> Flow | None:
    """tinygrad's compile3-style process on DEV=CPU, or None (printed why) without clang; its last outputs go to
    ``work/tg-outs.npz``."""
    cc = _clang()
    if cc is None:
        print("tinygrad CPU: no clang on PATH (its CPU device compiles with clang); skipped")
        return None
    return Flow("tinygrad", [sys.executable, "-c", _TG_COMPILE, str(model), inputs_json, str(work / "vision.pkl"),
                             str(work / "tg-outs.npz")],
                peer_env(DEV="CPU", CC=cc), "CACHEDB", "cache.db", _tg_flow_seconds)


def _med(rows: list[tuple[float, float | None]] | None, col: int) -> float | None:
    vals = [r[col] for r in rows or [] if r[col] is not None]
    return statistics.median(vals) if vals else None


def _s(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "-"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="processes per median (default 3)")
    ap.add_argument("--tuning", help="an existing tuning file for the vision model on pc-cpu (default: made by a "
                                     "--tune run first)")
    ap.add_argument("--workdir", help="where the model, caches and packages go (default: a temporary directory)")
    ap.add_argument("--no-tinygrad", action="store_true", help="drivepack only")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs: expected >= 1, got {args.runs}")
    import onnx
    import onnxruntime as ort

    from packager.samples import sample_inputs, vision_model

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-package-time-"))
    work.mkdir(parents=True, exist_ok=True)
    proto = vision_model()
    model = work / "vision.onnx"
    onnx.save(proto, str(model))
    tuning = Path(args.tuning) if args.tuning else work / "vision.tuning.json"
    if not args.tuning:
        tune_s, _ = timed_process(package_cmd(model, work / "tune.dpk", tuning, tune=True),
                                  {**os.environ, "DRIVEPACK_CACHE": str(work / "tune-cache")})
        print(f"tuning file {tuning.name} written by a --tune run in {tune_s:.1f} s")
    flows = [Flow("drivepack", package_cmd(model, work / "vision.dpk", tuning), dict(os.environ), "DRIVEPACK_CACHE",
                  None, stage_seconds)]
    want: list[np.ndarray] = []
    if not args.no_tinygrad:
        try:
            import tinygrad  # noqa: F401
        except ImportError:
            print("tinygrad: not installed; no peer measured (pip install -e '.[bench]')")
        else:
            feeds = sample_inputs(proto, seed=0)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = ORT_THREADS
            want = ort.InferenceSession(proto.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"]).run(None, feeds)
            tg = tinygrad_flow(model, _save_inputs(work, "vision", feeds), work)
            flows += [tg] if tg is not None else []
    try:
        res = measure(flows, args.runs, work)
    except RuntimeError as e:
        if len(flows) == 1:
            raise
        print(f"tinygrad failed ({e}); drivepack alone")
        flows = flows[:1]
        res = measure(flows, args.runs, work)
    if len(flows) > 1:
        with np.load(work / "tg-outs.npz") as z:
            if not _matches("tinygrad CPU", [z[f"arr_{i}"] for i in range(len(z.files))], want):
                del res["tinygrad"]  # a peer that computes something else is no peer
    empty: Rows = {"warm": [], "cold": []}
    dp, tg_rows = res["drivepack"], res.get("tinygrad", empty)
    print(f"\nsample vision model -> {VEHICLE} package; median of {args.runs} fresh processes each, interleaved "
          f"(seconds; wall = process start to exit, in-process = drivepack's stage sum / tinygrad's flow after "
          f"imports)")
    print(f"{'':26s} {'wall':>7s} {'in-process':>11s}  all walls")
    for name, rows in (("drivepack package", dp), ("tinygrad compile3", tg_rows)):
        for mode in ("warm", "cold"):
            walls = " ".join(f"{r[0]:.2f}" for r in rows[mode])
            print(f"{name + ' ' + mode:26s} {_s(_med(rows[mode], 0)):>7s} {_s(_med(rows[mode], 1)):>11s}  {walls}")
    ratios = {(mode, col): _ratio(_med(dp[mode], col), _med(tg_rows[mode], col))
              for mode in ("warm", "cold") for col in (0, 1)}
    print(f"ratio drivepack / tinygrad (wall): warm/warm {ratios['warm', 0]}, cold/cold {ratios['cold', 0]}; "
          f"in-process: warm/warm {ratios['warm', 1]}, cold/cold {ratios['cold', 1]}  "
          f"(target warm/warm <= {TARGET_RATIO}x)")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
