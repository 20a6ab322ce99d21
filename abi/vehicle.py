"""Vehicle profiles: load ``vehicles/<name>.yaml``, check it against ``vehicles/schema.yaml`` and the facts a
schema cannot state, and expose each model role's runtime ABI as an ``Abi``.

``check_vehicle`` finds every problem of a profile in one pass (schema first, then the semantic checks on what
the schema passed), each a ProfileProblem naming the file, the line and the dotted key; ``load_vehicle`` raises
them together as one ProfileProblems (a ProfileError). A profile says what the runtime
*provides* for each role (inputs: buffer, offset, dtype, shape, meaning) and what it *reads* (output slices by
name and length, and which slices it feeds back into a history); ``abi.check`` compares that with what a
model needs. Each role belongs to one openpilot model generation (``GENERATIONS``, ``ROLE_GENERATIONS``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from abi.errors import AbiError, AbiIssue, ProfileError, excerpt, quoted
from abi.frames import nv12_geometry
from abi.layout import layout_issues
from abi.records import Abi, CameraSemantics, HistorySemantics, TensorSpec
from abi.schema import SchemaViolation
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
# an input without `alignment:` is 64-byte aligned: the same default as TensorSpec and abi.infer's packing of a
# model's inputs, so that a profile and a model that both leave it out agree (vehicles/README.md "Alignment")
DEFAULT_ALIGNMENT = 64


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


@dataclass(frozen=True)
class ProfileProblem:
    """One problem of a profile: where it is (file, line 1-based or 0, dotted key), what was expected there,
    what was found, and the sentence saying so."""

    file: str
    line: int
    key: str
    expected: str
    got: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {excerpt(self.key) or '<top>'}: {self.message}"


# how many problems one ProfileProblems message spells out; `drivepack vehicle check` prints every one
MAX_LISTED_PROBLEMS = 10


class ProfileProblems(ProfileError):
    """Every problem of one profile. ``file`` / ``line`` / ``key`` are the first one's, so that code reading a
    ProfileError sees what it always saw; the message is one line that also names the others."""

    def __init__(self, problems: list[ProfileProblem]) -> None:
        self.problems = list(problems)
        first, rest = self.problems[0], self.problems[1:]
        shown = [f"{f'line {p.line}: ' if p.line else ''}{excerpt(p.key) or '<top>'}: {p.message}"
                 for p in rest[:MAX_LISTED_PROBLEMS - 1]]
        if len(rest) > len(shown):
            shown.append(f"{len(rest) - len(shown)} more")
        also = f" ({len(self.problems)} problems; also {'; '.join(shown)})" if rest else ""
        super().__init__(first.file, first.line, first.key, first.message + also)


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
        names = available_vehicles()
        close = difflib.get_close_matches(text, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ProfileError(excerpt(text), 0, "vehicle", f"expected one of {', '.join(names)} or a path to a .yaml "
                                                        f"profile, got {quoted(text)}{hint}")
    return path


def load_vehicle(name_or_path: str | Path) -> VehicleProfile:
    """Load, schema-check and semantically check a profile; ProfileProblems (a ProfileError naming the first
    problem's file, line and key, and the others after it) when anything is wrong."""
    profile, problems = check_vehicle(name_or_path)
    if problems or profile is None:
        raise ProfileProblems(problems)
    return profile


def check_vehicle(name_or_path: str | Path) -> tuple[VehicleProfile | None, list[ProfileProblem]]:
    """Every problem of a profile, in line order, and the profile when there is none. A file that cannot be
    found, read or parsed is a ProfileError: there is nothing to check in it."""
    path = resolve(name_or_path)
    data = load_yaml(path)
    with SCHEMA_PATH.open(encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    found = _Problems(path, schema_check(data, schema))
    _finite(data, "", found)
    profile = _build(data, found) if isinstance(data, LineDict) else None
    problems = sorted(found.items, key=lambda p: p.line)
    return (None if problems else profile), problems


class _Problems:
    """The problems found so far. Keys the schema found broken are remembered: a semantic check reads only values
    the schema passed, so it never trips over a missing key or a wrong type and never repeats a schema problem."""

    def __init__(self, path: Path, violations: list[SchemaViolation]) -> None:
        self.path = path
        self.items = [ProfileProblem(str(path), v.line, v.key, v.expected, v.got, v.message) for v in violations]
        self._broken = [v.key for v in violations]

    def ok(self, *keys: str) -> bool:
        """No schema problem at, inside or above any of ``keys``."""
        return not any(b == "<top>" or b == k or b.startswith((k + ".", k + "[")) or k.startswith((b + ".", b + "["))
                       for k in keys for b in self._broken)

    def has(self, key: str) -> bool:
        return any(p.key == key for p in self.items)

    def add(self, container: Any, k: Any, dotted: str, expected: str, got: object, message: str = "") -> None:
        got = str(got)
        self.items.append(ProfileProblem(str(self.path), line_of(container, k), dotted, expected, got,
                                         message or f"expected {expected}, got {got}"))

    def add_abi(self, container: Any, prefix: str, errors: list[AbiIssue]) -> None:
        """AbiIssues of a record built from ``container`` (the fields are the YAML keys, dotted below them)."""
        for e in errors:
            fld = e.field.split(".")[0]
            self.add(container, fld if fld in container else None, f"{prefix}.{e.field}", e.expected, e.actual)


def _finite(data: Any, key: str, found: _Problems) -> None:
    """No NaN or Inf anywhere, also where the schema leaves values untyped (model_overrides): every number of a
    profile is a size, a rate, a budget or a range, and NaN passes every comparison made with it."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        child = f"{key}[{k}]" if isinstance(data, list) else f"{key}.{k}" if key else str(k)
        if isinstance(v, float) and not math.isfinite(v) and not found.has(child):
            found.add(data, k, child, "a finite number", repr(v))
        _finite(v, child, found)


@dataclass(frozen=True)
class _RoleParts:
    """What could be built of one role: its input ABI and its output needs (None: it has problems)."""

    abi: Abi | None
    outputs: tuple[OutputNeed, ...] | None


def _build(d: LineDict, found: _Problems) -> VehicleProfile | None:
    path = found.path
    if found.ok("name") and d["name"] != path.stem:
        found.add(d, "name", "name", f"the file name {path.stem!r}", quoted(d["name"]))
    _check_target(d, found)
    if found.ok("budget_ms"):
        budget = d["budget_ms"]
        if budget["model_mean"] > budget["model_max"]:
            found.add(budget, "model_mean", "budget_ms.model_mean", f"<= model_max {budget['model_max']}",
                      budget["model_mean"])
        if budget["model_max"] > budget["frame"]:
            found.add(budget, "model_max", "budget_ms.model_max", f"<= frame {budget['frame']}", budget["model_max"])
    cam_data = d.get("cameras") if isinstance(d.get("cameras"), LineDict) else None
    cameras = {name: _camera(found, cam_data, name) for name in cam_data or {}}
    role_data = d["roles"] if isinstance(d.get("roles"), LineDict) else LineDict()
    parts = {}
    for name in role_data:
        if name not in ROLES:
            found.add(role_data, name, f"roles.{name}", f"one of {', '.join(ROLES)}", quoted(name))
        elif isinstance(role_data[name], LineDict):
            parts[name] = _role(found, role_data, name, list(cam_data) if cam_data is not None else None)
    for name, part in parts.items():
        if part.outputs is not None:
            _check_feeds(found, role_data, name, part.outputs, parts)
    if found.items:
        return None
    target, budget = d["target"], d["budget_ms"]
    options = target.get("options", {})
    roles = {}
    for name, part in parts.items():
        r = role_data[name]
        assert part.abi is not None and part.outputs is not None  # no problems: every part was built
        roles[name] = Role(name, part.abi, part.outputs, float(r["budget_ms"]["mean"]), float(r["budget_ms"]["max"]),
                           {k: dict(v) for k, v in r.get("model_overrides", {}).items()}, r.get("generation"))
    return VehicleProfile(d["name"], path, dict(d["device"]), target["name"], target.get("arch"),
                          tuple(options.get("EMULATED_DTYPES", [])), bool(options.get("images", False)),
                          float(d["frame_rate_hz"]), float(budget["frame"]), float(budget["model_mean"]),
                          float(budget["model_max"]), {n: c for n, c in cameras.items() if c is not None}, roles,
                          bool(options.get("float16", False)))


def _check_target(d: LineDict, found: _Problems) -> None:
    key = "target.options.EMULATED_DTYPES"
    if found.ok(key) and d["target"].get("options", {}).get("EMULATED_DTYPES"):
        from jit.codegen.passes.dtype_policy import parse_emulated
        from jit.common.errors import DTypeError

        options = d["target"]["options"]
        for name in options["EMULATED_DTYPES"]:
            try:
                parse_emulated(name)
            except DTypeError as e:
                found.add(options, "EMULATED_DTYPES", key, "dtype names EMULATED_DTYPES accepts", quoted(name), str(e))
    if found.ok("target.name", "target.arch"):
        target = d["target"]
        arch = target.get("arch")
        if (arch is None) != (target["name"] != "qcom"):
            want = "an adreno arch for target qcom" if target["name"] == "qcom" else "no arch for a non-qcom target"
            found.add(target, "arch" if arch else "name", "target.arch", want, quoted(arch))


def _camera(found: _Problems, cams: LineDict, name: str) -> Camera | None:
    """Checks one camera; the Camera when the schema passed it."""
    key = f"cameras.{name}"
    if name not in ("road", "wide", "driver"):
        found.add(cams, name, key, "road, wide or driver", quoted(name))
        return None
    c = cams[name]
    if not found.ok(f"{key}.width", f"{key}.height"):
        return None
    w, h = c["width"], c["height"]
    if w % 2 or h % 2:
        found.add(c, "width", key, "even width and height (NV12)", f"{w}x{h}")
    for axis, limit in (("cx", w), ("cy", h)):
        akey = f"{key}.intrinsics.{axis}"
        if found.ok(akey) and not 0 < c["intrinsics"][axis] < limit:
            found.add(c["intrinsics"], axis, akey, f"inside (0, {limit})", c["intrinsics"][axis])
    if isinstance(c.get("nv12"), LineDict) and not (w % 2 or h % 2):
        geom = nv12_geometry(w, h)
        for k, v in c["nv12"].items():
            if found.ok(f"{key}.nv12.{k}") and v != getattr(geom, k):
                found.add(c["nv12"], k, f"{key}.nv12.{k}", f"{getattr(geom, k)} (VisionIPC NV12 for {w}x{h})", v)
    if not found.ok(key):
        return None
    intr = c["intrinsics"]
    return Camera(name, tuple(c["sensors"]), w, h, float(intr["fx"]), float(intr["fy"]), float(intr["cx"]),
                  float(intr["cy"]))


def _role(found: _Problems, roles: LineDict, name: str, cameras: list[str] | None) -> _RoleParts:
    r, key = roles[name], f"roles.{name}"
    want_gen, gen = ROLE_GENERATIONS[name], r.get("generation")
    if found.ok(f"{key}.generation") and gen != want_gen:
        want = f"generation {want_gen!r}" if want_gen else "no generation"
        # a missing key is reported on the role's own line
        where, k = (r, "generation") if "generation" in r else (roles, name)
        found.add(where, k, f"{key}.generation", f"{want} for role {name}", quoted(gen))
    if found.ok(f"{key}.budget_ms"):
        b = r["budget_ms"]
        if b["mean"] > b["max"]:
            found.add(b, "mean", f"{key}.budget_ms.mean", f"<= max {b['max']}", b["mean"])
    abi = _role_abi(found, r, f"{key}.inputs", cameras) if isinstance(r.get("inputs"), LineDict) else None
    outputs = None
    if found.ok(f"{key}.outputs"):
        outputs = tuple(OutputNeed(o, spec["dtype"], spec.get("size"), dict(spec.get("slices", {})),
                                   dict(spec.get("feeds", {})))
                        for o, spec in r["outputs"].items())
    return _RoleParts(abi, outputs)


def _role_abi(found: _Problems, r: LineDict, key: str, cameras: list[str] | None) -> Abi | None:
    """The role's input ABI when every input is sound; the layout is checked among those that are."""
    inputs = r["inputs"]
    specs = [_input(found, inputs, iname, f"{key}.{iname}", cameras) for iname in inputs]
    sound = tuple(s for s in specs if s is not None)
    try:
        abi = Abi(sound)
    except AbiError as e:
        found.add_abi(r, key, e.errors)
        return None
    for problem in layout_issues(abi):
        found.add(inputs[problem.input], problem.field, f"{key}.{problem.input}.{problem.field}", problem.expected,
                  problem.actual)
    return abi if len(sound) == len(specs) else None


def _check_feeds(found: _Problems, roles: LineDict, name: str, outputs: tuple[OutputNeed, ...],
                 parts: dict[str, _RoleParts]) -> None:
    """Each fed-back slice names a slice the runtime reads and a history input (of this role or another one)
    whose per-step width is the slice's length: what one call appends to the history."""
    for need in outputs:
        feeds = roles[name]["outputs"][need.name].get("feeds", {})
        for sname, target in feeds.items():
            key = f"roles.{name}.outputs.{need.name}.feeds.{sname}"
            if sname not in need.slices:
                found.add(feeds, sname, key, f"a slice of outputs.{need.name} ({', '.join(need.slices) or 'none'})",
                          quoted(sname))
                continue
            rname, _, iname = target.rpartition(".")
            dest = parts.get(rname or name)
            if dest is None:
                if (rname or name) not in roles:
                    found.add(feeds, sname, key, f"a role of this profile before '.' ({', '.join(roles)})",
                              quoted(rname))
                continue
            if dest.abi is None:  # that role has problems of its own, reported there
                continue
            spec = next((s for s in dest.abi.inputs if s.name == iname), None)
            if spec is None or spec.history is None:
                have = ", ".join(s.name for s in dest.abi.inputs if s.history) or "none"
                found.add(feeds, sname, key, f"a history input of role {rname or name} ({have})", quoted(target))
                continue
            width = math.prod(spec.shape[2:])
            if need.slices[sname] != width:
                found.add(feeds, sname, key, f"slice length {width} (one step of {target} {list(spec.shape)})",
                          need.slices[sname])


def _input(found: _Problems, inputs: LineDict, iname: str, ikey: str, cameras: list[str] | None) -> TensorSpec | None:
    """One input's TensorSpec, or None (its problems recorded) when it cannot be built."""
    if not found.ok(ikey):
        return None
    s = inputs[iname]
    cam = hist = None
    built = True
    if "camera" in s:
        c = s["camera"]
        if cameras is not None and c["camera"] not in cameras:
            found.add(c, "camera", f"{ikey}.camera.camera", f"a camera of this profile ({', '.join(cameras)})",
                      quoted(c["camera"]))
        vr = c.get("value_range", [0, 255])
        try:
            cam = CameraSemantics(c["camera"], c["layout"], c["frames"], c["skip"], c.get("order", "oldest_first"),
                                  (vr[0], vr[1]), c.get("normalized_in_model", True))
        except AbiError as e:
            found.add_abi(c, f"{ikey}.camera", e.errors)
            built = False
    if "history" in s:
        h = s["history"]
        try:
            hist = HistorySemantics(h["length"], h["skip"], h.get("order", "oldest_first"))
        except AbiError as e:
            found.add_abi(h, f"{ikey}.history", e.errors)
            built = False
    if not built:
        return None
    try:
        return TensorSpec(iname, s["dtype"], tuple(s["shape"]), s.get("buffer", "inputs"), s["offset"],
                          s.get("alignment", DEFAULT_ALIGNMENT), s.get("device", "host"), cam, hist,
                          s.get("byte_size", -1), tuple(s.get("strides", ())))
    except AbiError as e:
        found.add_abi(s, ikey, e.errors)
        return None
