"""The modeld step of one camera resolution: what it reads, keeps and returns, and the function a capture traces.

``StepPlan`` is derived from the models' ABIs (camera inputs: frames and skip; history inputs: length and skip;
the vision output's ``hidden_state`` slice) and the vehicle's camera geometry, never assumed for one model.
Per call (DESIGN.md, "The modeld step"): warp both NV12 buffers into model frames, push them on the frame
queues and sample every ``skip``-th; ``prepare`` stops there. ``run`` goes on: vision on the sampled frames, its
``hidden_state`` pushed on the feature queue (sampled every ``skip``-th into ``features_buffer``), ``desire``
pushed on the desire queue (max-pooled per group of ``skip`` into ``desire_pulse``), policy, every output cast
to float32 and split by its slices. A merged model (one ONNX file taking the frames and the histories) reads
the feature queue before its own ``hidden_state`` is pushed, for the next call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from abi.frames import CHANNEL_SHAPE, CHANNELS_PER_FRAME, Nv12Geometry
from abi.layout import pack_offsets
from abi.records import Abi, CameraSemantics, OutputSpec, StateSpec, TensorSpec, itemsize
from jit import Tensor, dtypes
from packager.errors import PackageError
from packager.modeld.warp import model_frame

FEATURES, DESIRE_PULSE, HIDDEN_STATE = "features_buffer", "desire_pulse", "hidden_state"
CAMERA_INPUTS = {"road": ("frame", "tfm"), "wide": ("big_frame", "big_tfm")}


@dataclass(frozen=True)
class StepPlan:
    """Everything the step function needs, derived from the ABIs and the camera geometry."""

    geometry: dict[str, Nv12Geometry]          # camera -> NV12 buffer geometry
    camera_inputs: dict[str, tuple[str, int, int]]  # model input -> (camera, frames, skip)
    history_skip: int
    history_length: int                        # samples in features_buffer
    feature_width: int
    desire_length: int                         # samples in desire_pulse
    desire_width: int
    hidden_slice: tuple[str, int, int]         # (vision output, start, stop)
    passthrough: dict[str, tuple[str, tuple[int, ...]]]  # per-frame inputs fed straight to the policy
    merged: bool                               # one model: vision and policy in one graph

    def queues_of(self, prepare: bool) -> list[StateSpec]:
        """The states of the ``run`` step, or of ``prepare`` (the frame queues only: it keeps no history)."""
        return [q for q in self.queues if not prepare or q.dtype == "uint8"]

    @property
    def queues(self) -> list[StateSpec]:
        """The queues the step keeps on the device (each starts at zero: ``zeroed(spec)``)."""
        out = []
        for cam in sorted({c for c, _, _ in self.camera_inputs.values()}, key=list(CAMERA_INPUTS).index):
            frames, skip = next((f, s) for c, f, s in self.camera_inputs.values() if c == cam)
            out.append(StateSpec(f"{cam}_frames", "uint8", (skip * (frames - 1) + 1, CHANNELS_PER_FRAME,
                                                              *CHANNEL_SHAPE),
                                 f"the last {skip * (frames - 1) + 1} warped {cam} frames, oldest first"))
        skip = self.history_skip
        out.append(StateSpec("features", "float32", (skip * (self.history_length - 1) + 1, self.feature_width),
                             f"{HIDDEN_STATE} of the last calls, oldest first; every {skip}th is {FEATURES}"))
        out.append(StateSpec("desires", "float32", (skip * self.desire_length, self.desire_width),
                             f"desire of the last calls, oldest first; max over each {skip} is {DESIRE_PULSE}"))
        return out

    def abi(self, outputs: Mapping[str, tuple[str, tuple[int, ...]]], prepare: bool = False) -> Abi:
        """The step's ABI: its inputs packed in one host buffer (camera buffers with their NV12 meaning), its
        float32 outputs by name, and its device-resident queues as states."""
        ins = self.inputs(prepare)
        offsets = pack_offsets([(n, math.prod(sh) * itemsize(dt), 64) for n, (dt, sh) in ins.items()])
        frames = {frame: cam for cam, (frame, _) in CAMERA_INPUTS.items()}
        specs = tuple(TensorSpec(n, dt, sh, "inputs", offsets[n], 64, "host",
                                 CameraSemantics(frames[n], "nv12", 1, 1) if n in frames else None)
                      for n, (dt, sh) in ins.items())
        return Abi(specs, tuple(OutputSpec(n, dtype, sh) for n, (dtype, sh) in outputs.items()), (),
                   tuple(self.queues_of(prepare)))

    def inputs(self, prepare: bool = False) -> dict[str, tuple[str, tuple[int, ...]]]:
        """The step's inputs by name: (dtype, shape); ``prepare`` takes the camera buffers and transforms only."""
        out: dict[str, tuple[str, tuple[int, ...]]] = {}
        for cam in sorted({c for c, _, _ in self.camera_inputs.values()}, key=list(CAMERA_INPUTS).index):
            frame, tfm = CAMERA_INPUTS[cam]
            out[frame] = ("uint8", (self.geometry[cam].size,))
            out[tfm] = ("float32", (3, 3))
        if prepare:
            return out
        out["desire"] = ("float32", (1, self.desire_width))
        out.update(self.passthrough)
        return out


def plan_step(vision: Abi, policy: Abi | None, geometry: Mapping[str, Nv12Geometry]) -> StepPlan:
    """The plan for split models (``policy`` given) or one merged model (``policy`` None, ``vision`` has it all).

    PackageError naming the input when the models do not have what the step feeds (camera inputs with frame
    semantics, a ``features_buffer`` and ``desire_pulse`` history, a ``hidden_state`` output slice)."""
    merged = policy is None
    reader = vision if merged else policy
    assert reader is not None
    cams = {}
    for spec in vision.inputs:
        if spec.camera is not None:
            cam = spec.camera
            if cam.camera not in CAMERA_INPUTS or cam.layout != "yuv420_6ch" or spec.dtype != "uint8":
                raise PackageError(f"{spec.name}: camera expected road or wide yuv420_6ch uint8, got {cam.camera} "
                                   f"{cam.layout} {spec.dtype}")
            if cam.camera not in geometry:
                raise PackageError(f"{spec.name}: camera expected one of the vehicle's ({', '.join(geometry)}), "
                                   f"got {cam.camera}")
            cams[spec.name] = (cam.camera, cam.frames, cam.skip)
    if not cams:
        raise PackageError(f"vision inputs: expected camera inputs with frame semantics, got {vision.input_names()}")
    by_name = {s.name: s for s in reader.inputs}
    missing = [n for n in (FEATURES, DESIRE_PULSE) if n not in by_name or by_name[n].history is None]
    if missing:
        raise PackageError(f"policy inputs: expected history inputs {FEATURES} and {DESIRE_PULSE}, got "
                           f"{reader.input_names()}")
    feats, desire = by_name[FEATURES], by_name[DESIRE_PULSE]
    if feats.history.skip != desire.history.skip:  # type: ignore[union-attr]
        raise PackageError(f"{DESIRE_PULSE}: history.skip expected {feats.history.skip} (as {FEATURES}), "  # type: ignore[union-attr]
                           f"got {desire.history.skip}")  # type: ignore[union-attr]
    hidden = [(o.name, a, b) for o in vision.outputs for n, a, b in o.slices if n == HIDDEN_STATE]
    if len(hidden) != 1:
        raise PackageError(f"vision outputs: expected one {HIDDEN_STATE} slice, got {len(hidden)}")
    width = hidden[0][2] - hidden[0][1]
    if feats.shape[-1] != width or len(feats.shape) != 3:
        raise PackageError(f"{FEATURES}: shape expected (1, n, {width}) ({HIDDEN_STATE} width), got {feats.shape}")
    fed = set(cams) | {FEATURES, DESIRE_PULSE}
    passthrough = {s.name: (s.dtype, s.shape) for s in reader.inputs if s.name not in fed}
    if not merged:
        extra = [s.name for s in vision.inputs if s.name not in cams]
        if extra:
            raise PackageError(f"vision inputs: expected only camera inputs, got also {extra}")
    return StepPlan(dict(geometry), cams, feats.history.skip, feats.shape[1], width,  # type: ignore[union-attr]
                    desire.shape[1], desire.shape[-1], hidden[0], passthrough, merged)


def zeroed(spec: StateSpec) -> np.ndarray:
    """A queue's initial value."""
    return np.zeros(spec.shape, dtype=spec.dtype)


ModelCall = Callable[[dict[str, Tensor]], dict[str, Tensor]]


def _push(queue: Tensor, item: Tensor) -> Tensor:
    """The queue with its oldest entry dropped and ``item`` appended (newest last)."""
    return Tensor.cat(queue[1:], item.reshape(1, *queue.shape[1:]), dim=0)


def step_function(plan: StepPlan, vision: ModelCall, policy: ModelCall | None,
                  slices: Mapping[str, Mapping[str, tuple[int, int]]], prepare: bool = False
                  ) -> Callable[..., dict[str, Tensor]]:
    """The function ``capture`` traces: keyword inputs and states in, outputs and new states out.

    Outputs are named ``MODEL.OUTPUT.SLICE`` (MODEL: vision, policy, or model for a merged one); ``slices``:
    ``MODEL.OUTPUT`` -> slice name -> (start, stop); an output without slices is returned whole."""

    def step(**args: Tensor) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        frames: dict[str, Tensor] = {}
        for cam in {c for c, _, _ in plan.camera_inputs.values()}:
            frame, tfm = CAMERA_INPUTS[cam]
            # materialised once: the models must read exactly the pixels the queue keeps (a warp fused into a
            # conv would be recompiled there, and round a tie differently under another FMA contraction)
            # the warp is its own kernel: fused into the queue shift, the shift's copies went at the warp's pace
            warped = model_frame(args[frame], args[tfm], plan.geometry[cam]).contiguous()
            queue = _push(args[f"{cam}_frames"], warped).contiguous()
            out[f"{cam}_frames"] = queue
            frames[cam] = queue
        imgs = {}
        for name, (cam, n, skip) in plan.camera_inputs.items():
            sampled = frames[cam][::skip]
            imgs[name] = sampled.reshape(1, n * CHANNELS_PER_FRAME, *CHANNEL_SHAPE)
        if prepare:
            out.update(imgs)
            return out
        skip = plan.history_skip
        desires = _push(args["desires"], args["desire"])
        pulse = desires.reshape(plan.desire_length, skip, plan.desire_width).max(axis=1).unsqueeze(0)
        per_frame = {n: args[n] for n in plan.passthrough}
        if plan.merged:
            model_in = {**imgs, FEATURES: args["features"][::skip].unsqueeze(0), DESIRE_PULSE: pulse, **per_frame}
            results = vision(model_in)
        else:
            results = vision(imgs)
        vout, a, b = plan.hidden_slice
        hidden = results[vout].reshape(-1)[a:b].cast(dtypes.float32)
        features = _push(args["features"], hidden)
        if plan.merged:
            results = {f"model.{k}": v for k, v in results.items()}
        else:
            assert policy is not None
            policy_out = policy({FEATURES: features[::skip].unsqueeze(0), DESIRE_PULSE: pulse, **per_frame})
            results = {**{f"vision.{k}": v for k, v in results.items()},
                       **{f"policy.{k}": v for k, v in policy_out.items()}}
        for name, t in results.items():
            flat = t.cast(dtypes.float32)
            own = slices.get(name, {})
            if not own:
                out[name] = flat
            for sname, (s0, s1) in own.items():
                out[f"{name}.{sname}"] = flat.reshape(-1)[s0:s1]
        out["features"], out["desires"] = features, desires
        return out

    return step
