"""The packaging pipeline: ONNX models + vehicle profile -> a verified ``.dpk`` file of one entry per model.

Stages (each timed and reported through packager/progress.py; capture and golden once per model, their times
summed): load (model bytes and sha256, vehicle profile, ABI, role: abi.check.match_role; the entry is named by
its role, else by the model's file name, and two models of one role are an error), capture (trace, fold
weight-only work, schedule, compile: jit/trace.py) on the package's target, golden (deterministic inputs;
outputs on the target and on an independent reference, packager/reference.py: onnxruntime, else a NOOPT CPU
build; the target's must lie within the per-output tolerance of the reference's; the per-slice accuracy report,
packager/accuracy.py), write (kernel names made canonical, each entry's sections, one manifest, one signature),
compile (the written file loaded back and each entry's replay built with nothing but the file) and verify (each
replay reproduces its entry's target golden outputs bit for bit).

Determinism: the file depends only on the model bytes (and their order), the vehicle profile, the settings, the
drivepack version and the machine's fingerprint (recorded so verify knows when bits must match): no timestamps or
paths, canonical JSON, kernels renamed by position within their entry so names never depend on what the process
compiled before, nor on the other entries: an entry's sections are those of its own single-model package.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from abi.check import check_role, match_role
from abi.errors import AbiError
from abi.infer import infer_abi
from abi.records import Abi
from abi.vehicle import VehicleProfile, load_vehicle
from jit.codegen.opt import tuning as tuning_file
from jit.codegen.opt.search import use_tuning
from jit.codegen.opt.tuning import TuningTable
from jit.codegen.passes.dtype_policy import aggregate_policies, parse_emulated
from jit.common.helpers import BEAM, NOOPT, Context
from jit.realize import compiled_kernel
from packager import __version__
from packager.accuracy import accuracy_lines, slice_rows
from packager.container import BASE_ALIGNMENT, FORMAT_VERSION, Section, align_up, canonical_json, write_container
from packager.entries import cmdbuf_section, entry_name_for, golden_section, kernel_section, weight_section
from packager.environment import device_for, fingerprint
from packager.errors import AbiMismatchError, PackageError
from packager.manifest import FORMAT_NAME, MAX_CPU_THREADS, KernelCounts
from packager.package import Package, load_package
from packager.progress import Progress
from packager.reference import reference_outputs
from packager.signing import load_signing_key, user_signing_key
from packager.verify import accuracy_against, compare_exact, compare_tolerance, describe_reference
from targets.cmdbuf import CommandBuffer, KernelSpec
from targets.registry import Device

GOLDEN_SETS = 2
DEFAULT_BEAM = 2  # beam width of ``--tune`` when neither BuildOptions.beam nor BEAM says otherwise
GOLDEN_SEED = 0
# per output dtype: (rtol, atol) for comparing a target's outputs with the reference's; absent: bit-exact. float16
# and the narrower formats are loose: onnxruntime computes a float16 graph in float16, rounding every op's
# result, where drivepack's kernels may keep float32 accumulators (a few float16 ulps apart at |x| ~ 1)
TOLERANCES: dict[str, tuple[float, float]] = {"float32": (1e-4, 1e-4), "float64": (1e-9, 1e-9),
                                              "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2),
                                              "fp8e4m3fn": (0.25, 0.25), "fp8e5m2": (0.25, 0.25),
                                              "fp8e4m3fnuz": (0.25, 0.25), "fp8e5m2fnuz": (0.25, 0.25)}


@dataclass(frozen=True)
class BuildOptions:
    """What a package build takes besides the model and the vehicle (``--target``, ``--emulate``, ...)."""

    target: str | None = None  # a device name; default: the vehicle profile's
    emulate: str | None = None  # an EMULATED_DTYPES value; default: the vehicle profile's
    golden_sets: int = GOLDEN_SETS
    model_name: str | None = None  # default: the model file's name
    tuning: str | Path | None = None  # a tuning file (jit/codegen/opt/tuning.py) to compile with (``--tuning``)
    tune: bool = False  # search kernels the tuning file lacks, then write it (``--tune``; default <out>.tuning.json)
    beam: int = 0  # beam width of that search; 0: the BEAM setting, else DEFAULT_BEAM
    sign: str | Path | None = None  # private key file to sign with (``--sign``); default: the user's own key
    float16: bool | None = None  # compute float32 models in float16 (``--float16``); default: the vehicle profile's
    modeld: bool = False  # the whole modeld step per camera resolution (``--modeld``: run@WxH and prepare@WxH)
    cpu_threads: int | None = None  # the thread count a CPU replay of the package uses (``--cpu-threads``)
    # refuse a model whose ABI does not match its vehicle role (the CLI's default; ``--allow-abi-mismatch``
    # turns it off); False: build anyway and record the problems in the entry's abi_check
    refuse_abi_mismatch: bool = False
    role: str | None = None  # the vehicle role of the only model (``--role``); default: the one its inputs match


@dataclass
class BuildResult:
    """What was built: the loaded package, the stage times, and the numbers the summary prints."""

    package: Package
    path: Path
    size: int
    times: dict[str, float] = field(default_factory=dict)
    dtype_summaries: dict[str, str] = field(default_factory=dict)  # entry name -> its dtype-policy summary
    abi_warnings: list[str] = field(default_factory=list)
    tuning_path: Path | None = None  # the tuning file read or written, if any
    tuning_summary: str = ""

    @property
    def dtype_summary(self) -> str:
        """The dtype-policy summaries, each under its entry's name when there are several."""
        if len(self.dtype_summaries) == 1:
            return next(iter(self.dtype_summaries.values()))
        return "\n".join(f"{name}: {text}" for name, text in self.dtype_summaries.items())


def _tuning(opts: BuildOptions, out: str | Path) -> tuple[TuningTable | None, Path | None, int]:
    """The tuning table to compile with, where it is written back (``--tune``) or read from, and the search's
    beam width (0: read only). No tuning file and no ``--tune``: (None, None, 0), the optimizer's defaults."""
    if opts.beam < 0:
        raise PackageError(f"beam: expected an int >= 0, got {opts.beam}")
    if not opts.tune:
        return (tuning_file.load(opts.tuning), Path(opts.tuning), 0) if opts.tuning is not None else (None, None, 0)
    path = Path(opts.tuning) if opts.tuning is not None else Path(f"{out}.tuning.json")
    table = tuning_file.load(path) if path.exists() else TuningTable()  # a warm file: only new kernels searched
    return table, path, opts.beam or int(BEAM) or DEFAULT_BEAM


def golden_inputs(abi: Abi, seed: int) -> dict[str, np.ndarray]:
    """Deterministic random inputs: uint8 frames across 0-255 (both ends present), other integers in -8..8,
    floats standard normal."""
    from jit.common.dtype import dtypes, to_numpy

    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in abi.inputs:
        npd = to_numpy(dtypes.from_name(spec.dtype))
        shape = tuple(spec.shape)
        if npd == np.uint8:
            arr = rng.integers(0, 256, size=shape, dtype=np.uint8)
            if arr.size >= 2:
                arr.flat[0], arr.flat[-1] = 0, 255
        elif npd == np.bool_:
            arr = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(npd, np.integer):
            arr = rng.integers(-8 if np.issubdtype(npd, np.signedinteger) else 0, 9, size=shape).astype(npd)
        else:
            arr = rng.standard_normal(shape).astype(npd)
        out[spec.name] = np.ascontiguousarray(arr)
    return out


_SUFFIX = re.compile(r"n\d+$")


def canonical_kernels(cmdbuf: CommandBuffer) -> tuple[CommandBuffer, dict[str, str]]:
    """The command buffer with kernel ``i`` renamed ``<base>_k<i>`` (base: the name without the per-process
    ``n<k>`` suffix jit/realize.py adds), in its source too; and old name -> new name."""
    renamed, kernels = {}, []
    for i, k in enumerate(cmdbuf.kernels):
        new = f"{_SUFFIX.sub('', k.name)}_k{i}"
        pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(k.entry)}(?![A-Za-z0-9_])")
        source, count = pattern.subn(new, k.source)
        if count == 0:
            raise PackageError(f"kernel {k.name}: source expected to define entry {k.entry!r}, got no such name")
        kernels.append(KernelSpec(new, source, new, k.target, k.flags))
        renamed[k.name] = new
    return replace(cmdbuf, kernels=tuple(kernels)), renamed


def _tolerances(cmdbuf: CommandBuffer, float16_compute: bool) -> list[dict[str, Any]]:
    """Each output's tolerance against the reference; a float output computed in float16 gets float16's."""
    out = []
    for b in cmdbuf.outputs:
        rtol, atol = TOLERANCES.get(b.dtype, (0.0, 0.0))
        if float16_compute and b.dtype in ("float32", "float64"):
            rtol, atol = TOLERANCES["float16"]
        out.append({"name": b.name, "dtype": b.dtype, "shape": list(b.shape), "rtol": rtol, "atol": atol})
    return out


def _role(abi: Abi, profile: VehicleProfile, chosen: str | None = None) -> tuple[str | None, list[str]]:
    """The profile role ``chosen`` (``--role``), else the one the model's inputs match (None when none does), and
    the abi-check rows that fail."""
    try:
        role = chosen or match_role(abi, profile)
    except AbiError:
        return None, [f"no role of {profile.name} matches the model's inputs {abi.input_names()}"]
    rows = check_role(abi, profile.roles[role])
    return role, [f"{r.input}: {r.verdict}: expected {r.expected}, provided {r.provided}" for r in rows
                  if r.verdict != "ok"]


def _run_sets(captured: Any, sets: list[dict[str, np.ndarray]],
              states: list[dict[str, np.ndarray]] | None = None) -> list[dict[str, np.ndarray]]:
    """Each set's outputs, one call from the initial states; ``states`` gets each call's final states."""
    outs = []
    for inputs in sets:
        captured.reset_state()
        outs.append(captured(inputs))
        if states is not None:
            states.append({b.name: captured.read_state(b.name) for b in captured.cmdbuf.states})
    return outs


def _self_test(name: str, run: Any, outs: list[dict[str, np.ndarray]], make_inputs: Callable[[int], Any]) -> None:
    """openpilot's build self-test of its modeld step: another seed must give other outputs (a step that ignores
    its camera buffers would reproduce itself bit for bit and pass every other check)."""
    other = outs[1] if len(outs) > 1 else _run_sets(run, [make_inputs(GOLDEN_SEED + 1)])[0]
    if all(np.array_equal(v, other[k]) for k, v in outs[0].items()):
        raise PackageError(f"{name}: self-test: outputs expected to differ between golden seeds {GOLDEN_SEED} and "
                           f"{GOLDEN_SEED + 1}, got identical outputs")


@dataclass
class _Model:
    """One model file loaded for a build: its bytes, validated graph, ABI, role and entry name."""

    path: Path
    name: str  # the manifest's model.name
    data: bytes
    proto: Any
    abi: Abi
    role: str | None
    abi_warnings: list[str]
    entry: str = ""
    # a modeld step (packager/modeld/): captures itself on a device instead of one ONNX graph, and has no
    # onnxruntime reference (its golden sets are one call each from zeroed queues, with realistic transforms)
    capture: Callable[[str, bool], Any] | None = None
    inputs_for: Callable[[int], dict[str, np.ndarray]] | None = None


@dataclass
class _Built:
    """One entry captured and golden-tested: its manifest object, its sections and its dtype-policy summary."""

    name: str
    manifest: dict[str, Any]
    sections: list[Section]
    alignment: int
    policy_summary: str
    states: list[dict[str, np.ndarray]] = field(default_factory=list)  # per golden set, after its call


class _Stages:
    """Progress stages whose times add up over the entries (Progress keeps the last time of each name)."""

    def __init__(self, prog: Progress) -> None:
        self.prog = prog
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str, what: str = "") -> Iterator[None]:
        with self.prog.stage(name, what):
            yield
        self.times[name] = self.times.get(name, 0.0) + self.prog.times[name]


def _load_model(path: Path, model_name: str | None, profile: VehicleProfile, role: str | None = None) -> _Model:
    from jit.onnx.validate import OnnxError, checked_model

    try:
        data = path.read_bytes()
    except OSError as e:
        raise PackageError(f"model: expected a readable .onnx file, got {path}: {e.strerror}") from None
    try:  # validated; external data read from the model file's directory, never the current one
        proto = checked_model(data, path)
    except OnnxError as e:
        raise PackageError(f"model: {str(e).removeprefix(f'{path}: ')}") from None
    abi = infer_abi(proto)
    role, warnings = _role(abi, profile, role)
    return _Model(path, model_name or path.name, data, proto, abi, role, warnings)


def _name_entries(models: list[_Model], profile: VehicleProfile) -> None:
    """Each model's entry name (its role, else its file name); two models of one role or one name are an error
    naming both."""
    seen: dict[str, _Model] = {}
    for m in models:
        m.entry = entry_name_for(m.role, m.name)
        other = seen.get(m.entry)
        if other is not None:
            why = f"both match role {m.role!r} of {profile.name}" if m.role else f"both named {m.entry!r}"
            raise PackageError(f"models: expected one model per entry (role, else file name), got {other.path} and "
                               f"{m.path}: {why}")
        seen[m.entry] = m


def _refuse_abi_mismatch(models: list[_Model], profile: VehicleProfile, chosen: bool) -> None:
    """AbiMismatchError, with each failing model's abi-check table, when a model matches no role of the profile
    or its ABI differs from the role's."""
    from packager.abi_commands import role_report

    bad = [m for m in models if m.abi_warnings]
    if not bad:
        return
    table: list[str] = []
    for m in bad:
        why = "--role" if chosen else "the role its inputs match"
        report = role_report(str(m.path), m.abi, m.role, why, profile, None) \
            if m.role else None
        roles = ", ".join(f"{n} ({', '.join(r.abi.input_names())})" for n, r in profile.roles.items())
        table += report.lines if report else [f"{m.path} on {profile.name}: {m.abi_warnings[0]}; roles: {roles}"]
    first = bad[0]
    what = f"role {first.role!r}" if first.role else f"any role of {profile.name}"
    above = "the abi-check table" if first.role else "the profile's roles and their inputs"
    raise AbiMismatchError(f"abi: {first.path}: expected an ABI matching {what}, got {first.abi_warnings[0]} "
                           f"({above} above; --allow-abi-mismatch packages it anyway)", table)


def _step_models(models: list[_Model], profile: VehicleProfile) -> list[_Model]:
    """The entries of a --modeld package, each built like a model: its capture is the whole step."""
    from packager.modeld.entries import step_entries

    name = " + ".join(m.name for m in models)
    data = b"".join(hashlib.sha256(m.data).digest() for m in models)  # the models' digests, in order
    warnings = [f"{m.entry}: {w}" for m in models for w in m.abi_warnings]
    return [_Model(models[0].path, name, data, None, e.abi, None, warnings, e.name, e.capture, e.inputs_for)
            for e in step_entries([m.proto for m in models], profile)]


def build_package(models: str | Path | Sequence[str | Path], vehicle: str | Path, out: str | Path,
                  options: BuildOptions | None = None, progress: Progress | None = None) -> BuildResult:
    """Package one model or several (one entry each, named by role) for ``vehicle`` into ``out`` (see the module
    docstring); PackageError when a stage cannot be done, VerifyError when the written package does not
    reproduce its golden outputs."""
    paths = [Path(models)] if isinstance(models, (str, Path)) else [Path(m) for m in models]
    opts = options or BuildOptions()
    stages = _Stages(progress or Progress(enabled=False))
    if not paths:
        raise PackageError("models: expected at least one .onnx file, got none")
    if opts.model_name is not None and len(paths) > 1:
        raise PackageError(f"model_name: expected only with one model, got {len(paths)} models")
    # the signing key first: a bad --sign fails before minutes of compiling, not after
    key = load_signing_key(opts.sign) if opts.sign is not None else user_signing_key()
    if opts.cpu_threads is not None and not (isinstance(opts.cpu_threads, int)
                                             and 1 <= opts.cpu_threads <= MAX_CPU_THREADS):
        raise PackageError(f"cpu_threads: expected an integer in 1..{MAX_CPU_THREADS}, got {opts.cpu_threads!r}")
    if opts.golden_sets < 1:
        raise PackageError(f"golden_sets: expected >= 1, got {opts.golden_sets}")
    if opts.role is not None and len(paths) > 1:
        raise PackageError(f"role: expected only with one model, got {len(paths)} models")
    profile = load_vehicle(vehicle)  # a wrong vehicle is refused before any model is read
    if opts.role is not None and opts.role not in profile.roles:
        raise PackageError(f"--role: expected one of {', '.join(profile.roles)} for {profile.name}, got "
                           f"{opts.role!r}")
    with stages.stage("load", ", ".join(map(str, paths))):
        vehicle_bytes = profile.path.read_bytes()
        loaded = [_load_model(path, opts.model_name, profile, opts.role) for path in paths]
        _name_entries(loaded, profile)
        originals = loaded
        if opts.modeld:
            loaded = _step_models(loaded, profile)
        device = Device.canonical(opts.target) if opts.target else \
            device_for(profile.target, profile.target_arch, profile.images)
        emulate = opts.emulate if opts.emulate is not None else ",".join(profile.emulated_dtypes)
        emulated = sorted(d.name for d in parse_emulated(emulate)) if emulate else []
        table, tuning_path, beam = _tuning(opts, out)
        if opts.refuse_abi_mismatch:  # after every other input check: a bad --tuning is a usage error first
            _refuse_abi_mismatch(originals, profile, opts.role is not None)
        for m in loaded:
            for w in m.abi_warnings:  # a problem, never silenced by --quiet
                stages.prog.warn("load", f"abi warning: {m.entry}: {w}" if len(loaded) > 1 else f"abi warning: {w}")
    float16 = profile.float16 if opts.float16 is None else opts.float16
    settings: dict[str, Any] = {"EMULATED_DTYPES": ",".join(emulated), "NOOPT": int(NOOPT.value),
                                "FLOAT16": int(float16), "fold_weights": True, "golden_sets": opts.golden_sets,
                                "golden_seed": GOLDEN_SEED}
    if opts.cpu_threads is not None:
        settings["cpu_threads"] = opts.cpu_threads
    tuned = _TuningTotals()
    built = [_build_entry(m, device, profile, settings, table, beam, tuned, stages) for m in loaded]
    tuning_summary = ""
    if table is not None and tuning_path is not None:
        tuning_summary = (f"tuning: {tuned.hits} kernels from {tuning_path.name}, {tuned.searched} searched (beam "
                          f"{beam}), {tuned.misses} at the defaults")
        stages.prog.note("capture", tuning_summary)
        if opts.tune:
            table.save(tuning_path)
        settings["tuning"] = {"sha256": table.digest(), "entries": len(table)}
    target = Device[device]
    manifest = {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "drivepack_version": __version__,
        "target": {"device": device, "name": device.split(":", 1)[0],
                   "dtypes": sorted(d.name for d in target.supported_dtypes()),
                   "profile_dtypes": sorted(d.name for d in _declared(target)),
                   "emulated_dtypes": emulated},
        "vehicle": {"name": profile.name, "sha256": hashlib.sha256(vehicle_bytes).hexdigest()},
        "settings": settings,
        "entries": [b.manifest for b in built],
    }
    with stages.stage("write", str(out)):
        size = write_container(out, manifest, [s for b in built for s in b.sections],
                               align_up(max(b.alignment for b in built), BASE_ALIGNMENT), sign=key.sign)
    pkg = _check_written(out, key.fingerprint, stages, {b.name: b.states for b in built})
    warnings = [w if len(loaded) == 1 else f"{m.entry}: {w}" for m in loaded for w in m.abi_warnings]
    return BuildResult(pkg, Path(out), size, dict(stages.times), {b.name: b.policy_summary for b in built}, warnings,
                       tuning_path, tuning_summary)


def _check_written(out: str | Path, fingerprint: str, stages: _Stages,
                   states: dict[str, list[dict[str, np.ndarray]]]) -> Package:
    """The written file loaded back; each entry's replay built from it alone reproduces its target outputs and
    (``states``: entry -> per golden set) the states the capture ended each golden call with."""
    pkg = load_package(out, trust=[fingerprint])  # the key it was just signed with, whoever's it is
    replays = {}
    with stages.stage("compile", f"{sum(len(pkg.entry(n).cmdbuf.kernels) for n in pkg.entries)} kernels from the "
                                 "written file"):
        for n in pkg.entries:
            replays[n] = pkg.make_replay(entry=n)
            kernels = len(pkg.entry(n).cmdbuf.kernels)
            stages.prog.bar("compile", kernels, kernels, f"kernels built ({n})" if len(pkg.entries) > 1 else
                            "kernels built")
    with stages.stage("verify", "replay the golden inputs from the file, bit-exact against the target's outputs"):
        for n, replay in replays.items():
            e = pkg.entry(n)
            for i in range(e.manifest.golden_sets):
                g = e.golden(i)
                replay.reset_state()
                compare_exact(replay(g.inputs), g.target, f"{n}: golden set {i}")
                if states.get(n):  # and the queues it keeps on the device, bit for bit
                    compare_exact({b.name: replay.read_state(b.name) for b in e.cmdbuf.states}, states[n][i],
                                  f"{n}: golden set {i}: states")
                stages.prog.bar("verify", i + 1, e.manifest.golden_sets,
                                f"golden sets ({n})" if len(pkg.entries) > 1 else "golden sets")
    return pkg


@dataclass
class _TuningTotals:
    """Tuning-session counts summed over the entries."""

    hits: int = 0
    searched: int = 0
    misses: int = 0


def _build_entry(m: _Model, device: str, profile: VehicleProfile, settings: dict[str, Any],
                 table: TuningTable | None, beam: int, tuned: _TuningTotals, stages: _Stages) -> _Built:
    """Capture one model on ``device``, run its golden sets there and on the reference, describe it."""
    from jit.onnx.loader import load_onnx
    from jit.trace import capture_onnx

    name, golden_sets = m.entry, settings["golden_sets"]
    make_inputs = m.inputs_for or (lambda seed: golden_inputs(m.abi, seed))
    sets = [make_inputs(GOLDEN_SEED + i) for i in range(golden_sets)]
    float16 = bool(settings["FLOAT16"])

    def captured(device: str, half: bool, prog: Progress | None = None) -> Any:
        # ``prog``: one line per step, with a heartbeat while a step runs (the C compiler may take a minute)
        step = (lambda what: prog.step("capture", f"{name}: {what}")) if prog else \
            (lambda what: contextlib.nullcontext())
        if m.capture is not None:
            with step(f"trace the modeld step, fold weights, schedule, lower and compile kernels for {device}"):
                return m.capture(device, half)
        with step("ONNX graph to tensor ops"):
            model = load_onnx(m.proto, device=device, float16=half)
        with step(f"trace, fold weights, schedule, lower and compile kernels for {device}"):
            return capture_onnx(model, sets[0], target=device)

    with Context(EMULATED_DTYPES=settings["EMULATED_DTYPES"]):
        # only the package's own kernels are tuned: a NOOPT reference below compiles with the defaults
        tuning = use_tuning(table, beam) if table is not None else contextlib.nullcontext()
        with stages.stage("capture", f"{name}: trace, fold weights, schedule and compile for {device}"), \
                tuning as session:
            target = Device[device]
            run = captured(device, float16, stages.prog)
            assert run.report is not None
            counts = kernel_counts(run)
            cached = "; replayed from the capture cache (jit/capture_cache.py)" if run.cache_hit else ""
            stages.prog.note("capture", f"{name}: {counts.text()}; {_memory_text(run.report)}{cached}")
            compiled = {k.name: compiled_kernel(target.name, k.name, k.source) for k in run.cmdbuf.kernels}
            if session is not None:
                tuned.hits, tuned.searched = tuned.hits + session.hits, tuned.searched + session.searched
                tuned.misses += session.misses
        cmdbuf, renamed = canonical_kernels(run.cmdbuf)
        with stages.stage("golden", f"{name}: {golden_sets} input sets on {device} and an independent reference"):
            target_states: list[dict[str, np.ndarray]] = []
            target_outs = _run_sets(run, sets, target_states)
            if m.capture is not None:
                _self_test(name, run, target_outs, make_inputs)

            def noopt_run() -> list[dict[str, np.ndarray]]:
                with Context(EMULATED_DTYPES="", NOOPT=1):
                    return _run_sets(captured("CPU", False), sets)

            reference = reference_outputs(None if m.capture else m.data, sets, cmdbuf.outputs, noopt_run)
            stages.prog.note("golden", f"{name}: reference: {describe_reference(reference.record)}")
            tolerances = _tolerances(cmdbuf, float16)
            for i, (got, want) in enumerate(zip(target_outs, reference.outputs, strict=True)):
                compare_tolerance(got, want, tolerances, f"{name}: golden set {i}: {device} target vs the "
                                                         f"{reference.label} reference")
            rows = slice_rows([(o.name, o.slices) for o in m.abi.outputs],
                              {t["name"]: (t["rtol"], t["atol"]) for t in tolerances}, target_outs, reference.outputs)
            for line in accuracy_lines(rows, accuracy_against(reference.record)):
                stages.prog.note("golden", f"{name}: {line.strip()}")
    policy = aggregate_policies((renamed[n], ck.dtype_policy) for n, ck in compiled.items() if ck is not None)
    kernel_list = []
    nodes = run.report.kernel_nodes or ((),) * len(cmdbuf.kernels)  # a capture without ONNX nodes names none
    for i, (old, k) in enumerate(zip([k.name for k in run.cmdbuf.kernels], cmdbuf.kernels, strict=True)):
        ck = compiled[old]
        kernel_list.append({"name": k.name, "entry": k.entry, "section": kernel_section(name, i),
                            "flops": ck.stats.flops if ck else 0, "bytes": ck.stats.bytes if ck else 0,
                            "onnx_nodes": list(nodes[i])})
    budget = profile.roles[m.role] if m.role else None
    manifest = {
        "name": name, "role": m.role,
        "model": {"name": m.name, "sha256": hashlib.sha256(m.data).hexdigest(), "bytes": len(m.data)},
        "budget_mean_ms": budget.budget_mean_ms if budget else profile.model_mean_ms,
        "budget_max_ms": budget.budget_max_ms if budget else profile.model_max_ms,
        "kernels": {**counts.to_json(), "list": kernel_list},
        "arena_bytes": cmdbuf.arena_bytes,
        "weights": {"count": len(cmdbuf.weights), "bytes": sum(b.nbytes for b in cmdbuf.weights)},
        "dtype_policy": policy.as_dict(),
        "abi": m.abi.to_dict(),
        "abi_check": {"role": m.role, "ok": not m.abi_warnings, "problems": m.abi_warnings},
        "golden": {"sets": golden_sets, "seed": GOLDEN_SEED, "outputs": tolerances,
                   "checked_on": fingerprint(target), "reference": reference.record,
                   "compare": "bit-exact against 'target' outputs where checked_on matches the replaying machine; "
                              "else within rtol/atol against 'reference' outputs (golden.reference says whose); "
                              "'target' outputs lie within rtol/atol of 'reference'"},
        "accuracy": {"reference": reference.record["kind"], "slices": rows},
    }
    sections = _sections(name, cmdbuf, run.weights, sets, reference.outputs, target_outs)
    return _Built(name, manifest, sections, cmdbuf.alignment, _summary_policy(policy), target_states)


def kernel_counts(run: Any) -> KernelCounts:
    """A capture's kernel numbers (packager/manifest.py's KernelCounts): traced, dispatched, distinct kept."""
    return KernelCounts.of(run.report.kernels_traced, len(run.cmdbuf.dispatches), len(run.cmdbuf.kernels))


def _memory_text(report: Any) -> str:
    ratio = report.arena_bytes / report.naive_bytes if report.naive_bytes else 1.0
    lanes = sum(len(s.lanes) for s in report.segments)
    return (f"{report.weights} weights ({report.weight_bytes} bytes); arena {report.arena_bytes} bytes vs naive "
            f"{report.naive_bytes} ({ratio:.1%})" + (f"; {lanes} of the dispatches run as concurrent lanes in "
                                                     f"{len(report.segments)} segment(s)" if lanes else ""))


def _summary_policy(policy: Any) -> str:
    return policy.summary()


def _declared(target: Any) -> Any:
    """The dtypes the target's profile declares (QCOM: the Adreno set, whatever device runs it here)."""
    return target.profile_dtypes() if hasattr(target, "profile_dtypes") else target.supported_dtypes()


def _sections(entry: str, cmdbuf: CommandBuffer, weights: dict[int, np.ndarray], sets: list[dict[str, np.ndarray]],
              reference: list[dict[str, np.ndarray]], target: list[dict[str, np.ndarray]]) -> list[Section]:
    """An entry's sections: cmdbuf (kernel sources blanked: each is its own section), kernels, weights, then golden
    I/O per set."""
    blank = replace(cmdbuf, kernels=tuple(replace(k, source="") for k in cmdbuf.kernels))
    out = [Section(cmdbuf_section(entry), "cmdbuf", canonical_json(blank.to_dict()), {"format": "drivepack-cmdbuf"})]
    for i, k in enumerate(cmdbuf.kernels):
        out.append(Section(kernel_section(entry, i), "kernel_source", k.source.encode(), {"kernel": k.name,
                                                                                   "language": k.target}))
    for b in cmdbuf.weights:
        data = np.ascontiguousarray(weights[int(b.name)]).reshape(-1).view(np.uint8)
        out.append(Section(weight_section(entry, int(b.name)), "weight", memoryview(data), {"dtype": b.dtype,
                                                                                       "shape": list(b.shape)}))
    for i, inputs in enumerate(sets):
        groups = (("input", cmdbuf.inputs, inputs), ("reference", cmdbuf.outputs, reference[i]),
                  ("target", cmdbuf.outputs, target[i]))
        for kind, specs, arrays in groups:
            for b in specs:
                data = np.ascontiguousarray(arrays[b.name]).reshape(-1).view(np.uint8)
                out.append(Section(golden_section(entry, i, kind, b.name), f"golden_{kind}", memoryview(data),
                                   {"dtype": b.dtype, "shape": list(b.shape)}))
    return out
