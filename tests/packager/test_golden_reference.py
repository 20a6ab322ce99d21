"""Golden reference outputs come from an independent reference the manifest names (onnxruntime, else a NOOPT
build), the target's outputs must lie within tolerance of it, and verify and replay report the reference and the
replay mode (the OpenCL enqueue-loop fallback included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from jit.common.helpers import Context
from jit.onnx.loader import load_onnx
from jit.trace import capture_onnx
from packager import build, reference
from packager.build import BuildOptions, build_package
from packager.cli import main
from packager.errors import VerifyError
from packager.package import load_package
from packager.samples import float16_model
from packager.synthetic import tiny_model
from packager.verify import verify_package
from targets.cl_binding import COMMAND_BUFFER_EXT
from targets.opencl_runtime import OpenCLRuntime
from targets.replay_opencl import OpenCLReplay
from tests.packager.test_format import _rewrite
from tests.packager.test_verify import _nudge

ROOT = Path(__file__).resolve().parents[2]
ORT = {"kind": "onnxruntime", "version": onnxruntime.__version__, "provider": "CPUExecutionProvider"}


def _ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, inputs), strict=True))


def _one_ulp_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime's reference outputs one ulp up: the build's target then differs from its reference whether or not
    this machine's onnxruntime kernels happen to round as drivepack's do (they do on some AVX-512 hosts)."""
    run = reference.onnxruntime_outputs

    def nudged(*args: object, **kwargs: object) -> tuple[list[dict[str, np.ndarray]], str]:
        outs, version = run(*args, **kwargs)  # type: ignore[arg-type]
        return [{k: np.nextafter(v, np.inf).astype(v.dtype) for k, v in o.items()} for o in outs], version
    monkeypatch.setattr(reference, "onnxruntime_outputs", nudged)


@pytest.fixture(scope="module")
def cpu_pkg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("reference")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    return build_package(d / "tiny.onnx", "pc-cpu", d / "tiny.dpk", BuildOptions(golden_sets=2)).path


def test_manifest_records_onnxruntime_and_its_outputs_are_the_reference(cpu_pkg: Path) -> None:
    pkg = load_package(cpu_pkg)
    assert pkg.manifest.raw["entries"][0]["golden"]["reference"] == ORT and pkg.manifest.reference == ORT
    for i in range(2):
        g = pkg.golden(i)
        want = _ort(tiny_model(), dict(g.inputs))["outputs"]
        assert np.array_equal(g.reference["outputs"], want)  # onnxruntime's own bits


def test_the_reference_section_holds_the_references_outputs_not_the_targets(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _one_ulp_up(monkeypatch)
    onnx.save(tiny_model(), str(tmp_path / "tiny.onnx"))
    pkg = build_package(tmp_path / "tiny.onnx", "pc-cpu", tmp_path / "t.dpk", BuildOptions(golden_sets=1)).package
    g = pkg.golden(0)
    want = _ort(tiny_model(), dict(g.inputs))["outputs"]
    assert np.array_equal(g.reference["outputs"], np.nextafter(want, np.inf))
    assert not np.array_equal(g.reference["outputs"], g.target["outputs"])


_NO_ORT = textwrap.dedent("""
    import json, sys
    sys.modules["onnxruntime"] = None  # not importable, as on a machine without it
    import onnx
    from packager.build import BuildOptions, build_package
    from packager.synthetic import tiny_model
    onnx.save(tiny_model(), sys.argv[1])
    build_package(sys.argv[1], "pc-cpu", sys.argv[2], BuildOptions(golden_sets=1))
""")


def test_without_onnxruntime_the_reference_is_a_noopt_build(tmp_path: Path) -> None:
    out = tmp_path / "noort.dpk"
    proc = subprocess.run([sys.executable, "-c", _NO_ORT, str(tmp_path / "m.onnx"), str(out)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pkg = load_package(out)
    ref = pkg.manifest.raw["entries"][0]["golden"]["reference"]
    assert ref["kind"] == "drivepack-noopt" and ref["device"] == "CPU" and ref["version"] == build.__version__
    assert ref["reason"].startswith("onnxruntime is not importable: ")
    g = pkg.golden(0)
    with Context(NOOPT=1):
        noopt = capture_onnx(load_onnx(tiny_model(), device="CPU"), dict(g.inputs), target="CPU")
        assert np.array_equal(noopt(dict(g.inputs))["outputs"], g.reference["outputs"])
    report = verify_package(pkg)
    assert report.entries[0].reference == ref and "drivepack-noopt" in "\n".join(report.lines())
    # the accuracy report says it is against the NOOPT reference, in the manifest and in verify
    assert pkg.manifest.raw["entries"][0]["accuracy"]["reference"] == "drivepack-noopt"
    assert "accuracy per slice vs the NOOPT drivepack " in "\n".join(report.lines())
    assert "reference, not onnxruntime (onnxruntime is not importable: " in "\n".join(report.lines())


def test_a_target_beyond_tolerance_of_the_reference_fails_the_build(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # a reference one ulp off the target's outputs (or more: onnxruntime may round otherwise): a tolerance below
    # that must fail the build
    _one_ulp_up(monkeypatch)
    monkeypatch.setitem(build.TOLERANCES, "float32", (1e-12, 1e-12))
    onnx.save(tiny_model(), str(tmp_path / "tiny.onnx"))
    with pytest.raises(VerifyError, match=r"^tiny: golden set 0: CPU target vs the onnxruntime \S+ reference: outputs: "
                                          r"expected \|got - want\| <= 1e-12 \+ 1e-12\*\|want\|, got \d+ of 16 "
                                          r"elements outside, worst \|diff\| [0-9.e-]+ at \d+"):
        build_package(tmp_path / "tiny.onnx", "pc-cpu", tmp_path / "t.dpk", BuildOptions(golden_sets=1))


@pytest.mark.parametrize("mode", ["auto", "tolerance"])
def test_tampered_target_output_beyond_tolerance_is_reported(cpu_pkg: Path, tmp_path: Path, mode: str) -> None:
    bad = _rewrite(cpu_pkg, tmp_path / "tampered.dpk", section_edit=_nudge("target", scale=0.5))
    with pytest.raises(VerifyError, match=r"^tiny: golden set 1: the bundled target outputs vs the onnxruntime \S+ "
                                          r"reference: outputs: .* 1 of 16 elements outside, worst \|diff\| 0.5 at 3"):
        verify_package(load_package(bad, allow_unsigned=True), mode=mode)


def test_float16_reference_is_onnxruntime_in_float16_within_the_float16_tolerance(tmp_path: Path) -> None:
    onnx.save(float16_model(tiny_model()), str(tmp_path / "h.onnx"))
    pkg = build_package(tmp_path / "h.onnx", "pc-cpu", tmp_path / "h.dpk", BuildOptions(golden_sets=1)).package
    assert pkg.manifest.reference == ORT
    assert [(o.dtype, o.rtol, o.atol) for o in pkg.manifest.outputs] == [("float16", 1e-2, 1e-2)]
    assert pkg.golden(0).reference["outputs"].dtype == np.float16
    [report] = verify_package(pkg).entries
    assert report.mode == "exact" and 0 < report.max_abs_diff < 1e-2


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def test_verify_and_replay_print_the_reference_and_the_replay_mode_on_cpu(cpu_pkg: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cli(["verify", str(cpu_pkg)], capsys)
    assert code == 0, out
    assert f"  reference: onnxruntime {onnxruntime.__version__}; max |replay - reference| " in out
    assert "  replay mode: cpu_driver (one call into the generated C driver" in out
    code, out = _cli(["verify", str(cpu_pkg), "--json"], capsys)
    doc = json.loads(out)
    [entry] = doc["entries"]
    assert entry["reference"] == ORT and entry["replay_mode"] == "cpu_driver" and 0 <= entry["max_abs_diff"] < 1e-5
    golden = load_package(cpu_pkg).golden(0)
    assert entry["max_abs_diff"] >= float(np.abs(golden.target["outputs"] - golden.reference["outputs"]).max())
    code, out = _cli(["replay", str(cpu_pkg), "--iters", "2", "--warmup", "0", "--json"], capsys)
    assert json.loads(out)["replay_mode"] == "cpu_driver"


@pytest.mark.opencl
@pytest.mark.usefixtures("no_chains")  # the tiny model's kernels as dispatches of their own, not one chain: recorded
def test_verify_and_replay_report_the_command_buffer_and_the_enqueue_loop_fallback_on_opencl(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(tiny_model(), str(tmp_path / "tiny.onnx"))
    path = build_package(tmp_path / "tiny.onnx", "pc-opencl", tmp_path / "cl.dpk", BuildOptions(golden_sets=1)).path
    code, out = _cli(["verify", str(path)], capsys)
    assert code == 0 and f"reference: onnxruntime {onnxruntime.__version__}" in out
    assert f"replay mode: command_buffer ({COMMAND_BUFFER_EXT} on " in out  # PoCL offers the extension
    code, out = _cli(["verify", str(path), "--json"], capsys)
    [entry] = json.loads(out)["entries"]
    assert entry["replay_mode"] == "command_buffer" and entry["reference"] == ORT
    code, out = _cli(["replay", str(path), "--iters", "2", "--warmup", "0"], capsys)
    assert code == 0 and "replay mode: command_buffer" in out
    # a device without the extension: the replay falls back to the enqueue loop and says so
    pkg = load_package(path)
    rt = OpenCLRuntime("OPENCL")
    rt.info = replace(rt.info, extensions=rt.info.extensions - {COMMAND_BUFFER_EXT})
    loop = OpenCLReplay(pkg.cmdbuf, pkg.weights, rt)
    assert loop.mode == "enqueue_loop"
    assert loop.mode_reason == f"fallback: {rt.info.name} lacks {COMMAND_BUFFER_EXT}, dispatches enqueued one by one"
    g = pkg.golden(0)
    assert np.array_equal(loop(g.inputs)["outputs"], g.target["outputs"])
    forced = OpenCLReplay(pkg.cmdbuf, pkg.weights, rt, use_command_buffer=False)
    assert forced.mode == "enqueue_loop" and forced.mode_reason.startswith("use_command_buffer=False")
