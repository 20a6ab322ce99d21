"""The whole modeld step's speed (issue 24): drivepack's captured step vs OpenCV + numpy + onnxruntime and tinygrad.

    python3 benchmarks/bench_modeld.py [--quick] [--repeat N] [--no-tinygrad] [--no-opencl] [--contention N] [--json]

The step (DESIGN.md, "The modeld step") for two 1928x1208 NV12 cameras and the sample split models
(``packager.samples.vision_pipeline_model``, ``policy_pipeline_model``), fed the realistic transforms of
``packager.modeld.entries.golden_step_inputs``. Two rows:

* ``run``: the whole step (warp, frame queues, vision, feature and desire queues, policy, float32 outputs).
* ``prepare``: the frame path alone (warp + frame queues + the sampled model frames), with the bytes it must touch
  over its time as a share of this machine's memory bandwidth. Bytes per camera: the sampled pixels read from the
  camera buffer (one byte per output pixel: 512x256 Y + 2 x 256x128 UV), the frame queue shifted (its older
  ``depth - 1`` frames read, all ``depth`` written) and the sampled frames read from it and written out. The
  bandwidth is probed here, the best of a few large numpy copies (bytes read + written over the time), on one
  thread and on all. The camera buffers (2 x 4.8 MB) stay in this machine's L3 between calls, as every peer's do.

Peers, all timed in alternating blocks (``interleaved_medians``) in one run, each call with numpy inputs in and
numpy outputs out:

* drivepack CPU / OPENCL: replay of ``packager.modeld.capture.capture_step`` (``prepare=True`` for that row).
* OpenCV: what a user would build on this machine. ``cv2.warpPerspective`` (``INTER_NEAREST | WARP_INVERSE_MAP``:
  the transform maps model pixels to camera pixels; ``BORDER_REPLICATE``: clamped to the plane) on Y and on the
  interleaved UV plane as one two-channel image (U and V share the half-resolution transform, so one warp
  de-interleaves both without a pass over the whole plane), packed into the six channels of the newest slot of a
  numpy frame queue; numpy feature and desire queues; onnxruntime (2 intra-op threads) for the two models. Its
  model inputs are checked against drivepack's, within the rounding-tie allowance, before timing.
* tinygrad 0.14 capturing the same step with ``TinyJit(prune=True)`` the way openpilot's compile_modeld does:
  Tensor ops for the warp (a gather by computed indices), queues as device Tensors shifted with ``Tensor.cat`` and
  ``assign``, ``OnnxRunner`` for the models; one process per device and row: CPU (``DEV=CPU``, compiled with clang:
  ``$CC`` or the first ``clang``/``clang-NN`` on PATH) and CL (``DEV=CL``, the PoCL drivepack uses). Its outputs
  are checked against the OpenCV peer's after the warm-up and, from empty queues, on a second input set.

Ratios (lower is better, < 1 = drivepack faster): drivepack CPU / OpenCV (issue target <= 1.0), drivepack CPU /
tinygrad CPU and drivepack OPENCL / tinygrad CL (target <= 0.3); the ``prepare`` row's bandwidth share, of the
whole call and of its kernels alone (each dispatch timed on its own, medians summed; target >= 50%), and of its
kernels' fastest runs (the minima summed: this shared machine's slow spells slow compute far more than copies).
``--contention N`` runs N busy-loop processes during the timed part. ``--json`` prints the figures as one JSON
line after the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx

from abi.frames import (
    CHANNEL_SHAPE,
    CHANNELS_PER_FRAME,
    MODEL_FRAME_HEIGHT,
    MODEL_FRAME_WIDTH,
    Nv12Geometry,
    nv12_geometry,
)
from abi.records import Abi
from jit import Captured
from packager import samples
from packager.modeld.capture import capture_step, step_plan
from packager.modeld.entries import golden_step_inputs
from packager.modeld.step import CAMERA_INPUTS, DESIRE_PULSE, FEATURES, StepPlan, zeroed
from targets.cpu_runtime import cpu_threads

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import interleaved_medians, peer_env  # noqa: E402
from bench_models import TinygradPeer  # noqa: E402

ORT_THREADS = 2
CAMERA = (1928, 1208)
WARMUP = 3
# as tests/modeld/test_warp.py: a source coordinate within a few ulps of a rounding tie may round the other way
# under another evaluation order (OpenCV computes the transform in double, drivepack in float32 with FMA)
MAX_TIE_FRACTION = 0.0005
OUTPUT_TOL = {"rtol": 2e-3, "atol": 2e-3}
PREFIXES = ("vision", "policy")


# --- the OpenCV + numpy + onnxruntime step -----------------------------------------------------------------------
def half_resolution(tfm: np.ndarray) -> np.ndarray:
    """The transform for the half-resolution chroma planes (DESIGN.md): (0,2), (1,2) halved, (2,0), (2,1) doubled."""
    return tfm.astype(np.float32) * np.array([[1, 1, 0.5], [1, 1, 0.5], [2, 2, 1]], np.float32)


def named_outputs(results: Mapping[str, Mapping[str, np.ndarray]], abis: list[Abi]) -> dict[str, np.ndarray]:
    """The models' outputs named as drivepack's step names them (MODEL.OUTPUT.SLICE), float32, flat."""
    out = {}
    for prefix, abi in zip(PREFIXES, abis, strict=True):
        for o in abi.outputs:
            flat = np.asarray(results[prefix][o.name], np.float32).reshape(-1)
            if not o.slices:
                out[f"{prefix}.{o.name}"] = flat.reshape(o.shape)
            for name, a, b in o.slices:
                out[f"{prefix}.{o.name}.{name}"] = flat[a:b]
    return out


class OpenCvStep:
    """The modeld step as a user would write it with OpenCV, numpy and onnxruntime (2 intra-op threads)."""

    def __init__(self, plan: StepPlan, models: list[onnx.ModelProto], abis: list[Abi]) -> None:
        import cv2
        import onnxruntime as ort
        self.cv2, self.plan, self.abis = cv2, plan, abis
        self.flags = cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = ORT_THREADS
        self.sessions = [ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
                         for m in models]
        self.names = [[o.name for o in s.get_outputs()] for s in self.sessions]
        self.y = np.empty((MODEL_FRAME_HEIGHT, MODEL_FRAME_WIDTH), np.uint8)
        self.uv = np.empty((*CHANNEL_SHAPE, 2), np.uint8)
        self.queues = {q.name: zeroed(q) for q in plan.queues}
        self.raw: dict[str, dict[str, np.ndarray]] = {}  # the last call's model outputs, as onnxruntime gave them

    def reset(self) -> None:
        for q in self.queues.values():
            q[...] = 0

    def _warp_into(self, slot: np.ndarray, buf: np.ndarray, tfm: np.ndarray, geom: Nv12Geometry) -> None:
        """Warp one NV12 buffer into ``slot`` (6, 128, 256): Y, then UV as one two-channel image."""
        cv2 = self.cv2
        y_plane = buf[:geom.stride * geom.y_height].reshape(geom.y_height, geom.stride)[:geom.height, :geom.width]
        uv_rows = buf[geom.uv_offset:geom.uv_offset + geom.stride * geom.uv_height].reshape(geom.uv_height, geom.stride)
        uv_plane = uv_rows[:geom.height // 2, :geom.width].reshape(geom.height // 2, geom.width // 2, 2)
        size = (MODEL_FRAME_WIDTH, MODEL_FRAME_HEIGHT)
        cv2.warpPerspective(y_plane, tfm, size, dst=self.y, flags=self.flags, borderMode=cv2.BORDER_REPLICATE)
        cv2.warpPerspective(uv_plane, half_resolution(tfm), (CHANNEL_SHAPE[1], CHANNEL_SHAPE[0]),
                            dst=self.uv, flags=self.flags, borderMode=cv2.BORDER_REPLICATE)
        y = self.y
        slot[0], slot[1], slot[2], slot[3] = y[0::2, 0::2], y[1::2, 0::2], y[0::2, 1::2], y[1::2, 1::2]
        slot[4], slot[5] = self.uv[..., 0], self.uv[..., 1]

    @staticmethod
    def _shift(queue: np.ndarray) -> np.ndarray:
        """The queue shifted by one in place (oldest dropped); returns the newest slot to fill."""
        queue[:-1] = queue[1:]
        return queue[-1]

    def push_frames(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Warp both cameras onto their queues."""
        for cam, (frame, tfm) in CAMERA_INPUTS.items():
            if f"{cam}_frames" in self.queues:
                self._warp_into(self._shift(self.queues[f"{cam}_frames"]), inputs[frame], inputs[tfm],
                                self.plan.geometry[cam])

    def imgs(self) -> dict[str, np.ndarray]:
        """The sampled model frames by model input name."""
        return {name: np.ascontiguousarray(self.queues[f"{cam}_frames"][::skip]).reshape(
                    1, n * CHANNELS_PER_FRAME, *CHANNEL_SHAPE)
                for name, (cam, n, skip) in self.plan.camera_inputs.items()}

    def prepare(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What drivepack's ``prepare`` entry does: frames pushed, the sampled model frames returned."""
        self.push_frames(inputs)
        return self.imgs()

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.push_frames(inputs)
        return self.run_models(inputs, self.imgs())

    def run_models(self, inputs: Mapping[str, np.ndarray], imgs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The rest of a call on the queued frames: vision, the feature and desire queues, policy."""
        plan, skip = self.plan, self.plan.history_skip
        vision = dict(zip(self.names[0], self.sessions[0].run(None, imgs), strict=True))
        out, a, b = plan.hidden_slice
        self._shift(self.queues["features"])[:] = vision[out].reshape(-1)[a:b]
        self._shift(self.queues["desires"])[:] = inputs["desire"].reshape(-1)
        fed = {FEATURES: self.queues["features"][::skip][None],
               DESIRE_PULSE: self.queues["desires"].reshape(plan.desire_length, skip, plan.desire_width).max(1)[None],
               **{n: inputs[n] for n in plan.passthrough}}
        policy = dict(zip(self.names[1], self.sessions[1].run(None, fed), strict=True))
        self.raw = {"vision": vision, "policy": policy}
        return named_outputs(self.raw, self.abis)


# --- tinygrad's step, the way compile_modeld captures it ---------------------------------------------------------
# one process per device and row, speaking bench_models.TinygradPeer's protocol: argv[1] is this step's JSON config;
# after WARMUP calls from empty queues it saves its outputs and answers "ready"; "call" runs one replay ("ok");
# "other" starts from empty queues again, runs the other inputs WARMUP times, saves those outputs and exits
_TINYGRAD_STEP = """
import json, sys
import numpy as np
from tinygrad import Device, Tensor, TinyJit, dtypes
from tinygrad.helpers import Context
cfg = json.load(open(sys.argv[1]))
g, skip, warmup = cfg["geometry"], cfg["skip"], cfg["warmup"]
HALF = [[1.0, 1.0, 0.5], [1.0, 1.0, 0.5], [2.0, 2.0, 1.0]]

def warp(flat, m, offset, step, width, height, out_w, out_h):
    xs = Tensor.arange(out_w, dtype=dtypes.float32).reshape(1, out_w)
    ys = Tensor.arange(out_h, dtype=dtypes.float32).reshape(out_h, 1)
    sx, sy, sw = (m[i, 0] * xs + m[i, 1] * ys + m[i, 2] for i in range(3))
    col = (sx / sw).round().clip(0, width - 1).cast(dtypes.int32)
    line = (sy / sw).round().clip(0, height - 1).cast(dtypes.int32)
    return flat[(line * g["stride"] + col * step + offset).reshape(-1)].reshape(out_h, out_w)

def model_frame(buf, tfm):
    half = tfm * Tensor(HALF, dtype=dtypes.float32)
    uv = dict(step=2, width=g["width"] // 2, height=g["height"] // 2, out_w=256, out_h=128)
    with Context(SPLIT_REDUCEOP=0):  # as compile_modeld: one gather per plane, not a split reduce
        y = warp(buf, tfm, 0, 1, g["width"], g["height"], 512, 256).realize()
        u = warp(buf, half, g["uv_offset"], **uv).realize()
        v = warp(buf, half, g["uv_offset"] + 1, **uv).realize()
    return Tensor.stack(y[0::2, 0::2], y[1::2, 0::2], y[0::2, 1::2], y[1::2, 1::2], u, v)

def push(queue, item):
    queue.assign(queue[1:].cat(item.reshape(1, *queue.shape[1:]), dim=0).contiguous())
    return queue

if not cfg["prepare"]:
    from tinygrad.nn.onnx import OnnxRunner
    vision, policy = OnnxRunner(cfg["vision"]), OnnxRunner(cfg["policy"])

def step(**kw):
    kw = {k: v.to(Device.DEFAULT) for k, v in kw.items()}  # the host inputs copied in, inside the capture
    imgs = {}
    for name, (queue, frame, tfm) in cfg["cameras"].items():
        sampled = push(kw[queue], model_frame(kw[frame], kw[tfm]))[::skip].contiguous()
        imgs[name] = sampled.reshape(1, -1, *sampled.shape[2:])
    if cfg["prepare"]:
        return [imgs[n].realize() for n in cfg["cameras"]]
    vout = vision(imgs)
    out, a, b = cfg["hidden"]
    features = push(kw["features"], vout[out].cast(dtypes.float32).reshape(-1)[a:b])
    desires = push(kw["desires"], kw["desire"])
    fed = {"features_buffer": features[::skip].unsqueeze(0), **{n: kw[n] for n in cfg["passthrough"]},
           "desire_pulse": desires.reshape(-1, skip, desires.shape[-1]).max(1).unsqueeze(0)}
    pout = policy(fed)
    return [r[n].cast(dtypes.float32).contiguous().realize() for r, n in
            [(vout, n) for n in cfg["vision_outputs"]] + [(pout, n) for n in cfg["policy_outputs"]]]

jit = TinyJit(step, prune=True)
def fresh():
    return {q: Tensor.zeros(*shape, dtype=dt).contiguous().realize() for q, (dt, shape) in cfg["queues"].items()}
def call(queues, feeds):
    # numpy inputs wrapped, not copied, and moved to the device inside the capture (as compile_modeld feeds its
    # transforms): Tensor(array) copied the two camera buffers on the host first, 12 ms on CPU, and was slower on CL
    return [o.numpy() for o in jit(**queues, **{k: Tensor(v, device="NPY") for k, v in feeds.items()})]
inputs = {k: np.load(v) for k, v in json.loads(sys.argv[2]).items()}
queues = fresh()
for _ in range(warmup):
    outs = call(queues, inputs)
np.savez(sys.argv[3], *outs)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "call":
        call(queues, inputs)
        print("ok", flush=True)
    elif line.strip() == "other":
        queues, other = fresh(), {k: np.load(v) for k, v in json.loads(sys.argv[4]).items()}
        for _ in range(warmup):
            outs = call(queues, other)
        np.savez(sys.argv[5], *outs)
        break
"""


def find_clang() -> str | None:
    """``$CC``, or the first ``clang``/``clang-NN`` on PATH (tinygrad's CPU device compiles with clang)."""
    import shutil
    if os.environ.get("CC"):
        return os.environ["CC"]
    return next((n for n in ("clang", *(f"clang-{v}" for v in range(21, 10, -1))) if shutil.which(n)), None)


def tinygrad_config(plan: StepPlan, abis: list[Abi], work: Path, prepare: bool) -> Path:
    """The JSON the tinygrad worker reads: geometry, queues, models and output order of one row."""
    geom = next(iter(plan.geometry.values()))
    cameras = {name: (f"{cam}_frames", *CAMERA_INPUTS[cam]) for name, (cam, _, _) in plan.camera_inputs.items()}
    cfg = {"geometry": {"width": geom.width, "height": geom.height, "stride": geom.stride,
                        "uv_offset": geom.uv_offset},
           "skip": plan.history_skip, "warmup": WARMUP, "prepare": prepare, "cameras": cameras,
           "queues": {q.name: (q.dtype, list(q.shape)) for q in plan.queues_of(prepare)},
           "vision": str(work / "vision.onnx"), "policy": str(work / "policy.onnx"),
           "hidden": list(plan.hidden_slice), "passthrough": list(plan.passthrough),
           "vision_outputs": [o.name for o in abis[0].outputs], "policy_outputs": [o.name for o in abis[1].outputs]}
    path = work / f"step-{'prepare' if prepare else 'run'}.json"
    path.write_text(json.dumps(cfg))
    return path


def start_tinygrad(dev: str, cfg: Path, inputs: Mapping[str, np.ndarray], other: Mapping[str, np.ndarray],
                   work: Path) -> TinygradPeer | None:
    """A warmed-up tinygrad step on ``dev``, or None (printed why) when it cannot run here."""
    env = peer_env(DEV=dev)
    if dev == "CPU":
        cc = find_clang()
        if cc is None:
            print(f"  tinygrad CPU {cfg.stem}: no clang on PATH; skipped")
            return None
        env["CC"] = cc
    t0 = time.perf_counter()
    try:
        peer = TinygradPeer(dev, cfg, inputs, work, other, env, _TINYGRAD_STEP)
    except RuntimeError as e:
        print(f"  tinygrad {dev} {cfg.stem}: failed ({e})")
        return None
    print(f"  tinygrad {dev} {cfg.stem}: captured and warmed up in {time.perf_counter() - t0:.1f} s")
    return peer


def tinygrad_results(peer: TinygradPeer) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The peer's warm-up outputs and, run now from empty queues, its other inputs' outputs; the process exits."""
    assert peer.proc.stdin is not None
    peer.proc.stdin.write("other\n")
    peer.proc.stdin.flush()
    peer.proc.wait(timeout=3600)
    out = []
    for path in (peer.got_path, peer.other_path):
        with np.load(path) as z:
            out.append([z[f"arr_{i}"] for i in range(len(z.files))])
    return out[0], out[1]


# --- checks ------------------------------------------------------------------------------------------------------
def frames_differ(what: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """Why ``got`` is not ``want`` within the rounding-tie allowance, or None."""
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, expected {want.shape}"
    differ = int((got != want).sum())
    return f"{what}: {differ} of {want.size} pixels differ" if differ > MAX_TIE_FRACTION * want.size else None


def outputs_differ(what: str, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> str | None:
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.shape != w.shape or not np.allclose(g, w, **OUTPUT_TOL):
            err = float(np.max(np.abs(g - w))) if g is not None and g.shape == w.shape else float("nan")
            return f"{what}: {name} differs (max abs error {err:.3g})"
    return None


def check_against_opencv(cv: OpenCvStep, caps: Mapping[str, Captured], preps: Mapping[str, Captured],
                         plan: StepPlan, feeds: Mapping[str, np.ndarray]) -> int:
    """WARMUP calls of each drivepack replay from empty queues against the OpenCV step: frame queues within the tie
    allowance (then the OpenCV queues take drivepack's, so that the models see the same pixels), outputs within
    ``OUTPUT_TOL``; the prepare replays' model frames likewise. Exits on a mismatch; the most pixels of one
    frame queue or model frame that differed."""
    frame_inputs = {n: feeds[n] for n in plan.inputs(prepare=True)}
    worst = 0
    for target, cap in caps.items():
        cv.reset()
        cap.reset_state()
        for i in range(WARMUP):
            got = cap(feeds)
            cv.push_frames(feeds)
            for q in plan.queues_of(prepare=True):
                state = cap.read_state(q.name)
                _raise(frames_differ(f"drivepack {target} call {i}: {q.name}", state, cv.queues[q.name]))
                worst = max(worst, int((state != cv.queues[q.name]).sum()))
                cv.queues[q.name][...] = state
            want = cv.run_models(feeds, cv.imgs())
            _raise(outputs_differ(f"drivepack {target} call {i}", got, want))
    for target, prep in preps.items():
        cv.reset()
        prep.reset_state()
        for i in range(WARMUP):
            got_imgs, imgs = prep(frame_inputs), cv.prepare(feeds)
            for name, w in imgs.items():
                _raise(frames_differ(f"drivepack {target} prepare call {i}: {name}", got_imgs[name], w))
                worst = max(worst, int((got_imgs[name] != w).sum()))
    return worst


def _raise(problem: str | None) -> None:
    if problem is not None:
        raise SystemExit(f"bench_modeld: {problem}; not timed")


def check_tinygrad(dev: str, row: str, peer: TinygradPeer, want: list[np.ndarray], other_want: list[np.ndarray],
                   frames: bool) -> bool:
    """Whether the tinygrad peer's warm-up outputs and its other inputs' outputs match the OpenCV step's (a replay
    that returned stale outputs is no peer); printed why not."""
    results = tinygrad_results(peer)
    for tag, got, expected in zip(("warm-up", "other inputs"), results, (want, other_want), strict=True):
        for i, w in enumerate(expected):
            if i >= len(got):
                problem: str | None = f"output {i} missing"
            elif frames:
                problem = frames_differ(f"output {i}", got[i], w)
            else:
                problem = outputs_differ(f"output {i}", {"o": got[i]}, {"o": w})
            if problem:
                print(f"  tinygrad {dev} {row} ({tag}): {problem} against OpenCV; not used")
                return False
    return True


# --- bandwidth, contention -----------------------------------------------------------------------------------------
def memory_bandwidth(mib: int = 256, runs: int = 5) -> float:
    """Bytes per second of the best large numpy copy (bytes read + written over its time), on one thread and split
    over every core (numpy releases the GIL while it copies): the most this machine's memory gave this run."""
    threads = max(1, cpu_threads())
    src = np.ones(mib << 20, np.uint8)
    dst = np.empty_like(src)
    chunks = np.array_split(np.arange(src.size), threads)
    bounds = [(int(c[0]), int(c[-1]) + 1) for c in chunks]
    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(runs):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            best = max(best, 2 * src.nbytes / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            list(pool.map(lambda b: np.copyto(dst[b[0]:b[1]], src[b[0]:b[1]]), bounds))
            best = max(best, 2 * src.nbytes / (time.perf_counter() - t0))
    return best


def prepare_bytes(plan: StepPlan) -> int:
    """Bytes the frame path must touch per call (see the module docstring)."""
    frame = CHANNELS_PER_FRAME * CHANNEL_SHAPE[0] * CHANNEL_SHAPE[1]
    total = 0
    for q in plan.queues_of(prepare=True):
        depth = q.shape[0]
        sampled = sum(n for cam, n, _ in plan.camera_inputs.values() if f"{cam}_frames" == q.name)
        total += frame + (2 * depth - 1) * frame + 2 * sampled * frame  # camera samples, shift, sampled frames
    return total


@contextmanager
def contention(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` busy-loop processes for the duration, stopped (by their ids) after."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


class KernelTimes(NamedTuple):
    """The prepare step's dispatches timed alone (``kernel_seconds``), in seconds."""

    median: float  # the sum over the dispatches of each one's median
    best: float  # the sum of each one's fastest run: the kernels in this run's quietest moments


def kernel_seconds(prep: Captured, feeds: Mapping[str, np.ndarray], repeat: int) -> KernelTimes:
    """The warp and queue kernels alone: every dispatch of the prepare step waited for on its own (no call
    overhead, no outputs copied to the host), runs back to back. Never interleaved with the bandwidth probe: its
    copy slows the warp for several runs after it, far longer than it takes to refill the caches."""
    per_dispatch = np.asarray([[d.seconds for d in prep.profile(feeds)] for _ in range(max(repeat, 10))])
    return KernelTimes(float(np.median(per_dispatch, axis=0).sum()), float(per_dispatch.min(axis=0).sum()))


def frame_path_figures(preps: Mapping[str, Captured], feeds: Mapping[str, np.ndarray], repeat: int,
                       busy: int = 0) -> tuple[dict[str, KernelTimes], float]:
    """The prepare kernels alone per target (``busy`` busy-loop processes alongside), then the memory bandwidth:
    in that order, since the probe slows the kernels timed after it (``kernel_seconds``)."""
    with contention(busy):
        kernels = {t: kernel_seconds(p, feeds, repeat) for t, p in preps.items()}
    return kernels, memory_bandwidth()


# --- the run -------------------------------------------------------------------------------------------------------
def bench(args: argparse.Namespace, work: Path) -> dict[str, object]:
    geom = nv12_geometry(*CAMERA)
    geometry = {"road": geom, "wide": geom}
    models = [samples.vision_pipeline_model(), samples.policy_pipeline_model()]
    plan, abis = step_plan(models, geometry)
    feeds, other = golden_step_inputs(plan, seed=0), golden_step_inputs(plan, seed=1)
    frame_names = list(plan.inputs(prepare=True))
    frame_feeds = {n: feeds[n] for n in frame_names}
    caps: dict[str, Captured] = {}
    preps: dict[str, Captured] = {}
    for target in ("CPU",) if args.no_opencl else ("CPU", "OPENCL"):
        t0 = time.perf_counter()
        caps[target] = capture_step(models, geometry, target)[0]
        preps[target] = capture_step(models, geometry, target, prepare=True)[0]
        print(f"  drivepack {target}: captured in {time.perf_counter() - t0:.1f} s, run {caps[target].n_dispatches} "
              f"dispatches, prepare {preps[target].n_dispatches}")
    # before any peer has run: the OpenCV check below runs onnxruntime, whose workers spin on the cores for a while
    # after a run
    kernels, bandwidth = frame_path_figures(preps, frame_feeds, args.repeat, args.contention)
    cv = OpenCvStep(plan, models, abis) if not args.no_opencv else None
    if cv is not None:
        worst = check_against_opencv(cv, caps, preps, plan, feeds)
        print(f"  OpenCV step: drivepack's frames differ in at most {worst} pixels of a queue (allowance "
              f"{MAX_TIE_FRACTION:.2%}), outputs within {OUTPUT_TOL}")
    peers: dict[str, Callable[[], object]] = {}
    for target in caps:
        t = target.lower()
        peers[f"run_dp_{t}"] = lambda c=caps[target]: c(feeds)
        peers[f"prepare_dp_{t}"] = lambda p=preps[target]: p(frame_feeds)
    if cv is not None:
        peers["run_cv"] = lambda: cv(feeds)
        peers["prepare_cv"] = lambda: cv.prepare(feeds)
    tinygrad: dict[tuple[str, str], TinygradPeer] = {}
    if not args.no_tinygrad:
        for name, proto in zip(PREFIXES, models, strict=True):
            onnx.save(proto, str(work / f"{name}.onnx"))
        for row in ("run", "prepare"):
            cfg = tinygrad_config(plan, abis, work, prepare=row == "prepare")
            pick = (lambda d: {n: d[n] for n in frame_names}) if row == "prepare" else dict
            for dev in ("CPU", "CL"):
                peer = start_tinygrad(dev, cfg, pick(feeds), pick(other), work)
                if peer is not None:
                    tinygrad[row, dev] = peer
                    peers[f"{row}_tg_{dev.lower()}"] = peer.call
    with contention(args.contention):
        medians = interleaved_medians(peers, args.repeat, warmup=WARMUP)
    bandwidth = max(bandwidth, memory_bandwidth())
    # every replay again on the other inputs from empty queues: a replay must compute, not return stale outputs
    if cv is not None:
        check_against_opencv(cv, caps, preps, plan, other)
    for (row, dev), peer in tinygrad.items():
        if cv is None:
            tinygrad_results(peer)
            continue
        want = tinygrad_expected(cv, plan, abis, feeds, row)
        other_want = tinygrad_expected(cv, plan, abis, other, row)
        if not check_tinygrad(dev, row, peer, want, other_want, frames=row == "prepare"):
            medians.pop(f"{row}_tg_{dev.lower()}", None)
    return {"camera": f"{CAMERA[0]}x{CAMERA[1]}", "repeat": args.repeat, "contention": args.contention,
            "bandwidth_gbs": bandwidth / 1e9, "prepare_bytes": prepare_bytes(plan),
            "ms": {k: v * 1e3 for k, v in medians.items()},
            "prepare_kernels_ms": {t.lower(): k.median * 1e3 for t, k in kernels.items()},
            "prepare_kernels_best_ms": {t.lower(): k.best * 1e3 for t, k in kernels.items()}}


def tinygrad_expected(cv: OpenCvStep, plan: StepPlan, abis: list[Abi], feeds: Mapping[str, np.ndarray],
                      row: str) -> list[np.ndarray]:
    """The OpenCV step's outputs after WARMUP calls from empty queues, in the tinygrad worker's order."""
    cv.reset()
    for _ in range(WARMUP):
        out = cv.prepare(feeds) if row == "prepare" else cv(feeds)
    if row == "prepare":
        return [out[name] for name in plan.camera_inputs]
    return [np.asarray(cv.raw[p][o.name], np.float32) for p, abi in zip(PREFIXES, abis, strict=True)
            for o in abi.outputs]


def _ms(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "-"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.3f}x" if a is not None and b is not None else "-"


def print_table(res: Mapping[str, object]) -> None:
    ms: Mapping[str, float] = res["ms"]  # type: ignore[assignment]
    bw = float(res["bandwidth_gbs"])  # type: ignore[arg-type]
    nbytes = int(res["prepare_bytes"])  # type: ignore[call-overload]
    busy = f", {res['contention']} busy-loop processes running" if res["contention"] else ""
    print(f"\nmodeld step {res['camera']}, medians (ms) of {res['repeat']} calls after {WARMUP} warm-up{busy}; "
          "ratios: lower is better")
    print(f"memory bandwidth (best numpy copy, read + write): {bw:.1f} GB/s; prepare touches {nbytes / 1e6:.2f} MB")
    print(f"{'row':8s} {'dp CPU':>8s} {'dp OCL':>8s} {'OpenCV':>8s} {'tg CPU':>8s} {'tg CL':>8s} {'CPU/OpenCV':>10s} "
          f"{'CPU/tgCPU':>10s} {'OCL/tgCL':>9s} {'CPU BW':>7s} {'OCL BW':>7s}")

    def share(row: str, t: float | None) -> str:
        return f"{100 * nbytes / (t / 1e3) / (bw * 1e9):.0f}%" if row == "prepare" and t else "-"

    best: Mapping[str, float] = res.get("prepare_kernels_best_ms", {})  # type: ignore[assignment]
    for dev, t in res.get("prepare_kernels_ms", {}).items():  # type: ignore[union-attr]
        print(f"prepare kernels alone, drivepack {dev.upper()}: {t:.3f} ms (sum of per-dispatch medians), "
              f"{share('prepare', t)} of the memory bandwidth (target >= 50%); {best[dev]:.3f} ms (sum of "
              f"per-dispatch minima), {share('prepare', best[dev])}")
    for row in ("run", "prepare"):
        v = {k: ms.get(f"{row}_{k}") for k in ("dp_cpu", "dp_opencl", "cv", "tg_cpu", "tg_cl")}
        print(f"{row:8s} {_ms(v['dp_cpu']):>8s} {_ms(v['dp_opencl']):>8s} {_ms(v['cv']):>8s} {_ms(v['tg_cpu']):>8s} "
              f"{_ms(v['tg_cl']):>8s} {_ratio(v['dp_cpu'], v['cv']):>10s} {_ratio(v['dp_cpu'], v['tg_cpu']):>10s} "
              f"{_ratio(v['dp_opencl'], v['tg_cl']):>9s} {share(row, v['dp_cpu']):>7s} "
              f"{share(row, v['dp_opencl']):>7s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 timed calls per peer")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls per median (default 30; quick: 5)")
    parser.add_argument("--no-tinygrad", action="store_true", help="skip the tinygrad peers")
    parser.add_argument("--no-opencl", action="store_true", help="skip drivepack OPENCL")
    parser.add_argument("--contention", type=int, default=0, help="busy-loop processes during the timed part")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line after the table")
    args = parser.parse_args()
    args.repeat = args.repeat or (5 if args.quick else 30)
    args.no_opencv = importlib.util.find_spec("cv2") is None
    if args.no_opencv:
        print("OpenCV: not installed; no OpenCV peer (pip install opencv-python-headless)")
    if not args.no_tinygrad and importlib.util.find_spec("tinygrad") is None:
        print("tinygrad: not installed; no tinygrad peers (pip install tinygrad==0.14.0)")
        args.no_tinygrad = True
    with tempfile.TemporaryDirectory(prefix="bench-modeld-") as tmp:
        res = bench(args, Path(tmp))
    print_table(res)
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
