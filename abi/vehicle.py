"""Vehicle profiles: load ``vehicles/<name>.yaml``, check it against ``vehicles/schema.yaml`` and the facts a
schema cannot state, and expose each model role's runtime ABI as an ``Abi``.

Every problem is a ProfileError naming the file, the line and the dotted key. A profile says what the runtime
*provides* for each role (inputs: buffer, offset, dtype, shape, meaning) and what it *reads* (output slices by
name and length, and which slices it feeds back into a history); ``abi.check`` compares that with what a
model needs. Each role belongs to one openpilot model generation (``GENERATIONS``, ``ROLE_GENERATIONS``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from abi.errors import AbiError, ProfileError, quoted
from abi.frames import nv12_geometry
from abi.layout import layout_issues
from abi.records import Abi, CameraSemantics, HistorySemantics, TensorSpec
from abi.schema import check as schema_check
from abi.yaml_lines import LineDict, line_of, load_yaml

VEHICLES_DIR = Path(__file__).resolve().parents[1] / "vehicles"
SCHEMA_PATH = VEHICLES_DIR / "schema.yaml"
# openpilot's driving-model generations (DESIGN.md "openpilot model generations"); schema.yaml enumerates the
# same names, and a test keeps the two equal
GENERATIONS = {
    "split-0.10": "openpilot 0.9-0.10 split vision + policy models; the caller warps the frames and keeps "
                  "the histories",
    "split-pipeline": "split vision + policy models fed by the in-graph frame pipeline (the modeld step)",
    "supercombo-0.11": "openpilot 0.11 merged float16 supercombo; its hidden_state slice is the next call's "
                       "features",
}
# a role's name fixes its generation, so that `--role vision` keeps meaning what it meant before generations
# existed; the profile states it anyway so that a reader of the YAML sees it, and a disagreement is an error
ROLE_GENERATIONS: dict[str, str | None] = {
    "vision": "split-0.10", "policy": "split-0.10", "vision_pipeline": "split-pipeline",
    "policy_pipeline": "split-pipeline", "supercombo": "supercombo-0.11", "dmonitoring": None}
ROLES = tuple(ROLE_GENERATIONS)


@dataclass(frozen=True)
class Camera:
    """One camera: sensors it may have, frame size, pinhole intrinsics (pixels)."""

    name: str
    sensors: tuple[str, ...]
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float


@dataclass(frozen=True)
class OutputNeed:
    """What the runtime reads from one model output: dtype, flat size (None: any), slice name -> length, and
    which slices it feeds back into a history input."""

    name: str
    dtype: str
    size: int | None
    slices: dict[str, int] = field(default_factory=dict)
    # slice name -> the history input the runtime appends it to: "input" of this role or "role.input"
    feeds: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Role:
    """One model role on this vehicle: the runtime's input ABI, the outputs it reads, its latency budget."""

    name: str
    abi: Abi
    outputs: tuple[OutputNeed, ...]
    budget_mean_ms: float
    budget_max_ms: float
    model_overrides: dict[str, dict[str, Any]]
    generation: str | None = None  # a key of GENERATIONS; None: not a driving model (dmonitoring)

    def generation_text(self) -> str:
        """``name: description`` of the role's generation, or ``none`` (what abi-check prints)."""
        return f"{self.generation}: {GENERATIONS[self.generation]}" if self.generation else "none"


@dataclass(frozen=True)
class VehicleProfile:
    """A deployment profile: device, compile target and options, cameras, per-role runtime ABI and budgets."""

    name: str
    path: Path
    device: dict[str, str]
    target: str
    target_arch: str | None
    emulated_dtypes: tuple[str, ...]
    images: bool
    frame_rate_hz: float
    frame_budget_ms: float
    model_mean_ms: float
    model_max_ms: float
    cameras: dict[str, Camera]
    roles: dict[str, Role]
    float16: bool = False  # compute in float16 (compile3's FLOAT16=1 where the GPU has it)


def available_vehicles() -> list[str]:
    """Names of the profiles shipped in vehicles/."""
    return sorted(p.stem for p in VEHICLES_DIR.glob("*.yaml") if p.name != SCHEMA_PATH.name)


def resolve(name_or_path: str | Path) -> Path:
    """A profile path from a shipped name (``comma3x``) or a path to a YAML file."""
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")) or "/" in text or Path(text).is_file():
        return Path(text)
    path = VEHICLES_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ProfileError(text, 0, "", f"no such vehicle; expected one of {', '.join(available_vehicles())} "
                                        "or a path to a .yaml profile")
    return path


def load_vehicle(name_or_path: str | Path) -> VehicleProfile:
    """Load, schema-check and semantically check a profile; ProfileError (file, line, key) on the first problem."""
    path = resolve(name_or_path)
    data = load_yaml(path)
    fname = str(path)
    with SCHEMA_PATH.open(encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    problems = schema_check(data, schema)
    if problems:
        p = problems[0]
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ProfileError(fname, p.line, p.key, p.message + more)
    _finite(data, path, "")
    return _build(data, path)


def _finite(data: Any, path: Path, key: str) -> None:
    """No NaN or Inf anywhere, also where the schema leaves values untyped (model_overrides): every number of a
    profile is a size, a rate, a budget or a range, and NaN passes every comparison made with it."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        child = f"{key}[{k}]" if isinstance(data, list) else f"{key}.{k}" if key else str(k)
        if isinstance(v, float) and not math.isfinite(v):
            raise _err(path, data, k, child, f"expected a finite number, got {v!r}")
        _finite(v, path, child)


def _err(path: Path, container: Any, key: Any, dotted: str, message: str) -> ProfileError:
    return ProfileError(str(path), line_of(container, key), dotted, message)


def _build(d: LineDict, path: Path) -> VehicleProfile:
    if d["name"] != path.stem:
        raise _err(path, d, "name", "name", f"expected the file name {path.stem!r}, got {quoted(d['name'])}")
    target = d["target"]
    options = target.get("options", {})
    emulated = tuple(options.get("EMULATED_DTYPES", []))
    if emulated:
        from jit.codegen.passes.dtype_policy import parse_emulated
        from jit.common.errors import DTypeError
        try:
            parse_emulated(",".join(emulated))
        except DTypeError as e:
            raise _err(path, options, "EMULATED_DTYPES", "target.options.EMULATED_DTYPES", str(e)) from None
    arch = target.get("arch")
    if (arch is None) != (target["name"] != "qcom"):
        want = "an adreno arch for target qcom" if target["name"] == "qcom" else "no arch for a non-qcom target"
        raise _err(path, target, "arch" if arch else "name", "target.arch", f"expected {want}, got {quoted(arch)}")
    budget = d["budget_ms"]
    if budget["model_mean"] > budget["model_max"]:
        raise _err(path, budget, "model_mean", "budget_ms.model_mean",
                   f"expected <= model_max {budget['model_max']}, got {budget['model_mean']}")
    if budget["model_max"] > budget["frame"]:
        raise _err(path, budget, "model_max", "budget_ms.model_max",
                   f"expected <= frame {budget['frame']}, got {budget['model_max']}")
    cameras = {name: _camera(path, d["cameras"], name) for name in d["cameras"]}
    roles = {}
    for name in d["roles"]:
        if name not in ROLES:
            raise _err(path, d["roles"], name, f"roles.{name}",
                       f"expected one of {', '.join(ROLES)}, got {quoted(name)}")
        roles[name] = _role(path, d["roles"], name, cameras)
    for name, role in roles.items():
        _check_feeds(path, d["roles"][name], role, roles)
    return VehicleProfile(d["name"], path, dict(d["device"]), target["name"], arch, emulated,
                          bool(options.get("images", False)), float(d["frame_rate_hz"]), float(budget["frame"]),
                          float(budget["model_mean"]), float(budget["model_max"]), cameras, roles,
                          bool(options.get("float16", False)))


def _camera(path: Path, cams: LineDict, name: str) -> Camera:
    c = cams[name]
    key = f"cameras.{name}"
    if name not in ("road", "wide", "driver"):
        raise _err(path, cams, name, key, f"expected road, wide or driver, got {quoted(name)}")
    w, h = c["width"], c["height"]
    if w % 2 or h % 2:
        raise _err(path, c, "width", key, f"expected even width and height (NV12), got {w}x{h}")
    intr = c["intrinsics"]
    for axis, limit in (("cx", w), ("cy", h)):
        if not 0 < intr[axis] < limit:
            raise _err(path, intr, axis, f"{key}.intrinsics.{axis}", f"expected inside (0, {limit}), got {intr[axis]}")
    if "nv12" in c:
        geom = nv12_geometry(w, h)
        for k, v in c["nv12"].items():
            want = getattr(geom, k)
            if v != want:
                raise _err(path, c["nv12"], k, f"{key}.nv12.{k}",
                           f"expected {want} (VisionIPC NV12 for {w}x{h}), got {v}")
    return Camera(name, tuple(c["sensors"]), w, h, float(intr["fx"]), float(intr["fy"]), float(intr["cx"]),
                  float(intr["cy"]))


def _role(path: Path, roles: LineDict, name: str, cameras: dict[str, Camera]) -> Role:
    r, key = roles[name], f"roles.{name}"
    want_gen, gen = ROLE_GENERATIONS[name], r.get("generation")
    if gen != want_gen:
        want = f"generation {want_gen!r}" if want_gen else "no generation"
        # a missing key is reported on the role's own line
        where, k = (r, "generation") if "generation" in r else (roles, name)
        raise _err(path, where, k, f"{key}.generation", f"expected {want} for role {name}, got {quoted(gen)}")
    b = r["budget_ms"]
    if b["mean"] > b["max"]:
        raise _err(path, b, "mean", f"{key}.budget_ms.mean", f"expected <= max {b['max']}, got {b['mean']}")
    specs = [_input(path, r["inputs"], iname, f"{key}.inputs.{iname}", cameras) for iname in r["inputs"]]
    try:
        abi = Abi(tuple(specs))
    except AbiError as e:
        raise _err(path, r, "inputs", f"{key}.inputs", str(e)) from None
    for problem in layout_issues(abi):
        raise _err(path, r["inputs"][problem.input], problem.field, f"{key}.inputs.{problem.input}.{problem.field}",
                   f"expected {problem.expected}, got {problem.actual}")
    outs = tuple(OutputNeed(o, spec["dtype"], spec.get("size"), dict(spec.get("slices", {})),
                            dict(spec.get("feeds", {})))
                 for o, spec in r["outputs"].items())
    overrides = {k: dict(v) for k, v in r.get("model_overrides", {}).items()}
    return Role(name, abi, outs, float(b["mean"]), float(b["max"]), overrides, gen)


def _check_feeds(path: Path, r: LineDict, role: Role, roles: dict[str, Role]) -> None:
    """Each fed-back slice names a slice the runtime reads and a history input (of this role or another one)
    whose per-step width is the slice's length: what one call appends to the history."""
    for need in role.outputs:
        feeds = r["outputs"][need.name].get("feeds", {})
        for sname, target in feeds.items():
            key = f"roles.{role.name}.outputs.{need.name}.feeds.{sname}"
            if sname not in need.slices:
                raise _err(path, feeds, sname, key, f"expected a slice of outputs.{need.name} "
                                                    f"({', '.join(need.slices) or 'none'}), got {quoted(sname)}")
            rname, _, iname = target.rpartition(".")
            dest = roles.get(rname or role.name)
            if dest is None:
                raise _err(path, feeds, sname, key, f"expected a role of this profile before '.' "
                                                    f"({', '.join(roles)}), got {quoted(rname)}")
            spec = next((s for s in dest.abi.inputs if s.name == iname), None)
            if spec is None or spec.history is None:
                have = ", ".join(s.name for s in dest.abi.inputs if s.history) or "none"
                raise _err(path, feeds, sname, key, f"expected a history input of role {dest.name} ({have}), "
                                                    f"got {quoted(target)}")
            width = math.prod(spec.shape[2:])
            if need.slices[sname] != width:
                raise _err(path, feeds, sname, key, f"expected slice length {width} (one step of {target} "
                                                    f"{list(spec.shape)}), got {need.slices[sname]}")


def _input(path: Path, inputs: LineDict, iname: str, ikey: str, cameras: dict[str, Camera]) -> TensorSpec:
    s = inputs[iname]
    cam = hist = None
    try:
        if "camera" in s:
            c = s["camera"]
            if c["camera"] not in cameras:
                raise _err(path, c, "camera", f"{ikey}.camera.camera",
                           f"expected a camera of this profile ({', '.join(cameras)}), got {quoted(c['camera'])}")
            vr = c.get("value_range", [0, 255])
            cam = CameraSemantics(c["camera"], c["layout"], c["frames"], c["skip"], c.get("order", "oldest_first"),
                                  (vr[0], vr[1]), c.get("normalized_in_model", True))
        if "history" in s:
            h = s["history"]
            hist = HistorySemantics(h["length"], h["skip"], h.get("order", "oldest_first"))
        return TensorSpec(iname, s["dtype"], tuple(s["shape"]), s.get("buffer", "inputs"), s["offset"],
                          s.get("alignment", 64), s.get("device", "host"), cam, hist, s.get("byte_size", -1),
                          tuple(s.get("strides", ())))
    except AbiError as e:
        first = e.errors[0]
        fld = first.field.split(".")[0]
        raise _err(path, s, fld if fld in s else None, f"{ikey}.{first.field}",
                   f"expected {first.expected}, got {first.actual}") from None
