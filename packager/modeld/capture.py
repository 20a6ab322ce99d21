"""Capture the modeld step of one camera resolution from the ONNX models (build side: imports the compiler)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from abi.frames import Nv12Geometry
from abi.infer import infer_abi
from abi.records import Abi
from jit import Captured, Tensor, capture, dtypes, load_onnx
from packager.modeld.step import ModelCall, StepPlan, plan_step, step_function, zeroed


def model_call(proto: onnx.ModelProto, abi: Abi, device: str, float16: bool = False) -> ModelCall:
    """The ONNX model as a function of named Tensors, each input cast to the dtype the model declares (the step
    keeps its queues in float32; a float16 model reads them as float16)."""
    model = load_onnx(proto, device=device, float16=float16)
    declared = {s.name: dtypes.from_name(s.dtype) for s in abi.inputs}

    def call(inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        return model({n: t.cast(declared[n]) if t.dtype != declared[n] else t for n, t in inputs.items()})

    return call


def step_plan(models: list[onnx.ModelProto], geometry: Mapping[str, Nv12Geometry]) -> tuple[StepPlan, list[Abi]]:
    """The plan of a split pair (vision, policy) or of one merged model, and the models' ABIs."""
    abis = [infer_abi(m) for m in models]
    return plan_step(abis[0], abis[1] if len(abis) > 1 else None, geometry), abis


def capture_step(models: list[onnx.ModelProto], geometry: Mapping[str, Nv12Geometry], device: str,
                 prepare: bool = False, float16: bool = False) -> tuple[Captured, StepPlan]:
    """The captured ``run`` (or ``prepare``) step on ``device``; its queues are states that start at zero."""
    plan, abis = step_plan(models, geometry)
    calls = [model_call(m, a, device, float16) for m, a in zip(models, abis, strict=True)]
    prefixes = ["model"] if plan.merged else ["vision", "policy"]
    slices = {f"{p}.{o.name}": o.slice_map() for p, a in zip(prefixes, abis, strict=True) for o in a.outputs}
    fn = step_function(plan, calls[0], calls[1] if len(calls) > 1 else None, slices, prepare=prepare)
    example = {n: np.zeros(sh, dtype=dt) for n, (dt, sh) in plan.inputs(prepare).items()}
    state = {q.name: zeroed(q) for q in plan.queues_of(prepare)}
    return capture(fn, example, target=device, state=state), plan

