"""The packaging pipeline: ONNX model + vehicle profile -> a verified ``.dpk`` file.

Stages (each timed and reported through packager/progress.py): load (model bytes and sha256, vehicle profile,
ABI), capture (trace, fold weight-only work, schedule, compile: jit/trace.py) on the package's target, golden
(deterministic inputs; outputs on the target and on an independent reference, packager/reference.py: onnxruntime,
else a NOOPT CPU build; the target's must lie within the per-output tolerance of the reference's),
write (kernel names made canonical, sections, manifest), compile (the written file loaded back and its replay
built with nothing but the file) and verify (that replay reproduces the target's golden outputs bit for bit).

Determinism: the file depends only on the model bytes, the vehicle profile, the settings, the drivepack version
and the machine's fingerprint (recorded so verify knows when bits must match): no timestamps or paths, canonical
JSON, kernels renamed by position so names never depend on what the process compiled before.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
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
from packager.container import BASE_ALIGNMENT, FORMAT_VERSION, Section, align_up, canonical_json, write_container
from packager.environment import device_for, fingerprint
from packager.errors import PackageError
from packager.manifest import FORMAT_NAME
from packager.package import Package, golden_section, kernel_section, load_package, weight_section
from packager.progress import Progress
from packager.reference import reference_outputs
from packager.signing import load_signing_key, user_signing_key
from packager.verify import compare_exact, compare_tolerance, describe_reference
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


@dataclass
class BuildResult:
    """What was built: the loaded package, the stage times, and the numbers the summary prints."""

    package: Package
    path: Path
    size: int
    times: dict[str, float] = field(default_factory=dict)
    dtype_summary: str = ""
    abi_warnings: list[str] = field(default_factory=list)
    tuning_path: Path | None = None  # the tuning file read or written, if any
    tuning_summary: str = ""


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


def _tolerances(cmdbuf: CommandBuffer) -> list[dict[str, Any]]:
    return [{"name": b.name, "dtype": b.dtype, "shape": list(b.shape),
             "rtol": TOLERANCES.get(b.dtype, (0.0, 0.0))[0], "atol": TOLERANCES.get(b.dtype, (0.0, 0.0))[1]}
            for b in cmdbuf.outputs]


def _role(abi: Abi, profile: VehicleProfile) -> tuple[str | None, list[str]]:
    """The profile role the model's inputs match (None when none does) and the abi-check rows that fail."""
    try:
        role = match_role(abi, profile)
    except AbiError:
        return None, [f"no role of {profile.name} matches the model's inputs {abi.input_names()}"]
    rows = check_role(abi, profile.roles[role])
    return role, [f"{r.input}: {r.verdict}: expected {r.expected}, provided {r.provided}" for r in rows
                  if r.verdict != "ok"]


def _run_sets(captured: Any, sets: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    outs = []
    for inputs in sets:
        captured.reset_state()
        outs.append(captured(inputs))
    return outs


def build_package(model_path: str | Path, vehicle: str | Path, out: str | Path, options: BuildOptions | None = None,
                  progress: Progress | None = None) -> BuildResult:
    """Package ``model_path`` for ``vehicle`` into ``out`` (see the module docstring); PackageError when a stage
    cannot be done, VerifyError when the written package does not reproduce its golden outputs."""
    from jit.onnx.loader import load_onnx
    from jit.onnx.validate import OnnxError, checked_model
    from jit.trace import capture_onnx

    opts = options or BuildOptions()
    prog = progress or Progress(enabled=False)
    # the signing key first: a bad --sign fails before minutes of compiling, not after
    key = load_signing_key(opts.sign) if opts.sign is not None else user_signing_key()
    if opts.golden_sets < 1:
        raise PackageError(f"golden_sets: expected >= 1, got {opts.golden_sets}")
    with prog.stage("load", str(model_path)):
        try:
            model_bytes = Path(model_path).read_bytes()
        except OSError as e:
            raise PackageError(f"model: expected a readable .onnx file, got {model_path}: {e.strerror}") from None
        profile = load_vehicle(vehicle)
        vehicle_bytes = profile.path.read_bytes()
        try:  # validated; external data read from the model file's directory, never the current one
            proto = checked_model(model_bytes, model_path)
        except OnnxError as e:
            raise PackageError(f"model: {str(e).removeprefix(f'{model_path}: ')}") from None
        abi = infer_abi(proto)
        device = Device.canonical(opts.target) if opts.target else \
            device_for(profile.target, profile.target_arch, profile.images)
        emulate = opts.emulate if opts.emulate is not None else ",".join(profile.emulated_dtypes)
        emulated = sorted(d.name for d in parse_emulated(emulate)) if emulate else []
        role, abi_warnings = _role(abi, profile)
        for w in abi_warnings:
            prog.note("load", f"abi warning: {w}")
        table, tuning_path, beam = _tuning(opts, out)
    sets = [golden_inputs(abi, GOLDEN_SEED + i) for i in range(opts.golden_sets)]
    settings = {"EMULATED_DTYPES": ",".join(emulated), "NOOPT": int(NOOPT.value), "fold_weights": True,
                "golden_sets": opts.golden_sets, "golden_seed": GOLDEN_SEED}
    tuning_summary = ""
    with Context(EMULATED_DTYPES=settings["EMULATED_DTYPES"]):
        # only the package's own kernels are tuned: a NOOPT reference below compiles with the defaults
        tuned = use_tuning(table, beam) if table is not None else contextlib.nullcontext()
        with prog.stage("capture", f"trace, fold weights, schedule and compile for {device}"), tuned as session:
            target = Device[device]
            run = capture_onnx(load_onnx(proto, device=device), sets[0], target=device)
            assert run.report is not None
            prog.note("capture", run.report.summary())
            compiled = {k.name: compiled_kernel(target.name, k.name) for k in run.cmdbuf.kernels}
            if session is not None:
                assert table is not None and tuning_path is not None
                tuning_summary = (f"tuning: {session.hits} kernels from {tuning_path.name}, {session.searched} "
                                  f"searched (beam {beam}), {session.misses} at the defaults")
                prog.note("capture", tuning_summary)
                if opts.tune:
                    table.save(tuning_path)
                settings["tuning"] = {"sha256": table.digest(), "entries": len(table)}
        cmdbuf, renamed = canonical_kernels(run.cmdbuf)
        with prog.stage("golden", f"{opts.golden_sets} input sets on {device} and an independent reference"):
            target_outs = _run_sets(run, sets)

            def noopt_run() -> list[dict[str, np.ndarray]]:
                with Context(EMULATED_DTYPES="", NOOPT=1):
                    return _run_sets(capture_onnx(load_onnx(proto, device="CPU"), sets[0], target="CPU"), sets)

            reference = reference_outputs(model_bytes, sets, cmdbuf.outputs, noopt_run)
            reference_outs = reference.outputs
            prog.note("golden", f"reference: {describe_reference(reference.record)}")
            tolerances = _tolerances(cmdbuf)
            for i, (got, want) in enumerate(zip(target_outs, reference_outs, strict=True)):
                compare_tolerance(got, want, tolerances, f"golden set {i}: {device} target vs the {reference.label} "
                                                         "reference")
    policy = aggregate_policies((renamed[n], ck.dtype_policy) for n, ck in compiled.items() if ck is not None)
    kernel_list = []
    for i, (old, k) in enumerate(zip([k.name for k in run.cmdbuf.kernels], cmdbuf.kernels, strict=True)):
        ck = compiled[old]
        kernel_list.append({"name": k.name, "entry": k.entry, "section": kernel_section(i),
                            "flops": ck.stats.flops if ck else 0, "bytes": ck.stats.bytes if ck else 0})
    budget = profile.roles[role] if role else None
    manifest = {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "drivepack_version": __version__,
        "model": {"name": opts.model_name or Path(model_path).name,
                  "sha256": hashlib.sha256(model_bytes).hexdigest(), "bytes": len(model_bytes)},
        "target": {"device": device, "name": device.split(":", 1)[0],
                   "dtypes": sorted(d.name for d in target.supported_dtypes()),
                   "profile_dtypes": sorted(d.name for d in _declared(target)),
                   "emulated_dtypes": emulated},
        "vehicle": {"name": profile.name, "sha256": hashlib.sha256(vehicle_bytes).hexdigest(), "role": role,
                    "budget_mean_ms": budget.budget_mean_ms if budget else profile.model_mean_ms,
                    "budget_max_ms": budget.budget_max_ms if budget else profile.model_max_ms},
        "settings": settings,
        "kernels": {"traced": run.report.kernels_traced, "kept": len(cmdbuf.kernels),
                    "pruned": run.report.kernels_traced - len(cmdbuf.kernels), "dispatches": len(cmdbuf.dispatches),
                    "list": kernel_list},
        "arena_bytes": cmdbuf.arena_bytes,
        "weights": {"count": len(cmdbuf.weights), "bytes": sum(b.nbytes for b in cmdbuf.weights)},
        "dtype_policy": policy.as_dict(),
        "abi": abi.to_dict(),
        "abi_check": {"role": role, "ok": not abi_warnings, "problems": abi_warnings},
        "golden": {"sets": opts.golden_sets, "seed": GOLDEN_SEED, "outputs": tolerances,
                   "checked_on": fingerprint(target), "reference": reference.record,
                   "compare": "bit-exact against 'target' outputs where checked_on matches the replaying machine; "
                              "else within rtol/atol against 'reference' outputs (golden.reference says whose); "
                              "'target' outputs lie within rtol/atol of 'reference'"},
    }
    with prog.stage("write", str(out)):
        sections = _sections(cmdbuf, run.weights, sets, reference_outs, target_outs)
        size = write_container(out, manifest, sections, align_up(max(cmdbuf.alignment, BASE_ALIGNMENT),
                                                                 BASE_ALIGNMENT), sign=key.sign)
    with prog.stage("compile", f"{len(cmdbuf.kernels)} kernels from the written file"):
        pkg = load_package(out, trust=[key.fingerprint])  # the key it was just signed with, whoever's it is
        replay = pkg.make_replay()
        prog.bar("compile", len(cmdbuf.kernels), len(cmdbuf.kernels), "kernels built")
    with prog.stage("verify", "replay the golden inputs from the file, bit-exact against the target's outputs"):
        for i in range(pkg.manifest.golden_sets):
            g = pkg.golden(i)
            replay.reset_state()
            compare_exact(replay(g.inputs), g.target, f"golden set {i}")
            prog.bar("verify", i + 1, pkg.manifest.golden_sets, "golden sets")
    return BuildResult(pkg, Path(out), size, dict(prog.times), _summary_policy(policy), abi_warnings, tuning_path,
                       tuning_summary)


def _summary_policy(policy: Any) -> str:
    return policy.summary()


def _declared(target: Any) -> Any:
    """The dtypes the target's profile declares (QCOM: the Adreno set, whatever device runs it here)."""
    return target.profile_dtypes() if hasattr(target, "profile_dtypes") else target.supported_dtypes()


def _sections(cmdbuf: CommandBuffer, weights: dict[int, np.ndarray], sets: list[dict[str, np.ndarray]],
              reference: list[dict[str, np.ndarray]], target: list[dict[str, np.ndarray]]) -> list[Section]:
    """cmdbuf (kernel sources blanked: each is its own section), kernels, weights, then golden I/O per set."""
    blank = replace(cmdbuf, kernels=tuple(replace(k, source="") for k in cmdbuf.kernels))
    out = [Section("cmdbuf", "cmdbuf", canonical_json(blank.to_dict()), {"format": "drivepack-cmdbuf"})]
    for i, k in enumerate(cmdbuf.kernels):
        out.append(Section(kernel_section(i), "kernel_source", k.source.encode(), {"kernel": k.name,
                                                                                   "language": k.target}))
    for b in cmdbuf.weights:
        data = np.ascontiguousarray(weights[int(b.name)]).reshape(-1).view(np.uint8)
        out.append(Section(weight_section(int(b.name)), "weight", memoryview(data), {"dtype": b.dtype,
                                                                                       "shape": list(b.shape)}))
    for i, inputs in enumerate(sets):
        groups = (("input", cmdbuf.inputs, inputs), ("reference", cmdbuf.outputs, reference[i]),
                  ("target", cmdbuf.outputs, target[i]))
        for kind, specs, arrays in groups:
            for b in specs:
                data = np.ascontiguousarray(arrays[b.name]).reshape(-1).view(np.uint8)
                out.append(Section(golden_section(i, kind, b.name), f"golden_{kind}", memoryview(data),
                                   {"dtype": b.dtype, "shape": list(b.shape)}))
    return out
