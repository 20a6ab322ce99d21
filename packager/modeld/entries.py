"""The entries of a ``--modeld`` package: ``run@WxH`` and ``prepare@WxH`` for every road/wide camera resolution
of the vehicle profile, each a captured step (packager/modeld/capture.py) with its ABI and golden inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from abi.frames import nv12_geometry
from abi.records import Abi
from abi.vehicle import VehicleProfile
from jit import Captured
from packager.errors import PackageError
from packager.modeld.capture import capture_step, step_plan
from packager.modeld.step import StepPlan


@dataclass(frozen=True)
class StepEntry:
    """One entry to build: its name, ABI, how to capture it on a device, and its golden inputs per seed."""

    name: str
    abi: Abi
    capture: Callable[[str, bool], Captured]
    inputs_for: Callable[[int], dict[str, np.ndarray]]


def resolutions(profile: VehicleProfile) -> list[tuple[int, int]]:
    """The distinct road camera resolutions of the profile (the wide camera must match each: one warp per size)."""
    road, wide = profile.cameras.get("road"), profile.cameras.get("wide")
    if road is None:
        raise PackageError(f"{profile.name}: cameras.road expected for --modeld, got none")
    if wide is not None and (wide.width, wide.height) != (road.width, road.height):
        raise PackageError(f"{profile.name}: cameras.wide expected the road camera's {road.width}x{road.height}, got "
                           f"{wide.width}x{wide.height}")
    return [(road.width, road.height)]


def golden_step_inputs(plan: StepPlan, seed: int, prepare: bool = False) -> dict[str, np.ndarray]:
    """Seeded NV12 frames (every byte 0-255), transforms that zoom out of the middle of the frame, a little
    rotated (the warp samples the picture, not the clamped border), sparse desires, random per-frame inputs.

    The transforms' entries are multiples of 1/64 (``TFM_STEP``) and affine: every source coordinate is then exact
    in float32, so a kernel compiled with FMA contraction and one without (the NOOPT reference) sample the same
    pixels; with arbitrary entries a few pixels per frame lie within an ulp of a rounding tie and may differ."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, (dtype, shape) in plan.inputs(prepare).items():
        if dtype == "uint8":
            out[name] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif shape == (3, 3):
            geom = next(iter(plan.geometry.values()))
            angle, zoom = rng.uniform(-0.05, 0.05), rng.uniform(1.5, 2.5)
            c, s = _grid(np.cos(angle) * zoom), _grid(np.sin(angle) * zoom)
            cx, cy = _grid(geom.width / 2 - (c * 256 - s * 128)), _grid(geom.height / 2 - (s * 256 + c * 128))
            out[name] = np.array([[c, -s, cx], [s, c, cy], [0.0, 0.0, 1.0]], np.float32)
        elif name == "desire":
            out[name] = (rng.random(shape) < 0.2).astype(dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


TFM_STEP = 1 / 64


def _grid(value: float) -> float:
    return round(value / TFM_STEP) * TFM_STEP


def step_entries(models: list[onnx.ModelProto], profile: VehicleProfile) -> list[StepEntry]:
    """``run@WxH`` then ``prepare@WxH`` per resolution, for split (vision, policy) or one merged model."""
    if len(models) not in (1, 2):
        raise PackageError(f"models: expected vision and policy, or one merged model, for --modeld, got {len(models)}")
    out = []
    for width, height in resolutions(profile):
        geom = nv12_geometry(width, height)
        geometry = {cam: geom for cam in ("road", "wide") if cam in profile.cameras}
        plan, abis = step_plan(models, geometry)
        for prepare in (False, True):
            name = f"{'prepare' if prepare else 'run'}@{width}x{height}"

            def capture(device: str, float16: bool, prepare: bool = prepare, geometry: Any = geometry) -> Captured:
                return capture_step(models, geometry, device, prepare=prepare, float16=float16)[0]

            outputs = _output_shapes(plan, abis, prepare)
            out.append(StepEntry(name, plan.abi(outputs, prepare), capture,
                                 lambda seed, plan=plan, prepare=prepare: golden_step_inputs(plan, seed, prepare)))
    return out


def _output_shapes(plan: StepPlan, abis: list[Abi], prepare: bool) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The step's outputs by name (packager/modeld/step.py naming), all float32 but the prepare entry's frames."""
    if prepare:
        return {name: ("uint8", (1, n * 6, 128, 256)) for name, (_, n, _) in plan.camera_inputs.items()}
    prefixes = ["model"] if plan.merged else ["vision", "policy"]
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for prefix, abi in zip(prefixes, abis, strict=True):
        for o in abi.outputs:
            if not o.slices:
                out[f"{prefix}.{o.name}"] = ("float32", o.shape)
            for sname, a, b in o.slices:
                out[f"{prefix}.{o.name}.{sname}"] = ("float32", (b - a,))
    return out
