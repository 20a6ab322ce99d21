"""The runtime stands alone: loading, verifying and replaying a package imports no compiler code.

A package is built here (the compiler is loaded in this process), then a fresh interpreter runs ``drivepack
verify``, ``replay`` and ``inspect`` on it through packager.cli's ``main`` and reports its ``sys.modules``: none
of onnx, yaml, the renderer (targets.cstyle) or jit's IR, front end, ONNX loader, codegen, scheduler, capture and
realize may be there. The OpenCL package runs on PoCL: these tests never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest

from jit import Device
from packager.build import BuildOptions, build_package
from packager.package import load_package
from packager.synthetic import tiny_model
from targets.base import Target
from targets.cl_binding import OpenCLDeviceError, libopencl
from targets.cpu_runtime import CPURuntime
from targets.qcom_runtime import parse_qcom_device

ROOT = Path(__file__).resolve().parents[2]
# module name prefixes the runtime must not import ("onnx" covers onnx.*, "targets.cstyle" its subpackage)
FORBIDDEN = ("onnx", "yaml", "targets.cstyle", "jit.ir", "jit.frontend", "jit.onnx", "jit.codegen", "jit.schedule")
FORBIDDEN_EXACT = ("jit.trace", "jit.realize")

# runs in the fresh interpreter: each CLI command, then the forbidden modules present, as JSON on the last line
CHILD = textwrap.dedent("""
    import json, sys
    from packager.cli import main
    codes = [main(args) for args in json.loads(sys.argv[1])]
    print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
""")


def forbidden(modules: list[str]) -> list[str]:
    """The modules of ``modules`` the runtime must not import."""
    return [m for m in modules if m.startswith(FORBIDDEN) or m in FORBIDDEN_EXACT
            or m.startswith(tuple(f"{e}." for e in FORBIDDEN_EXACT))]


def run_fresh(commands: list[list[str]]) -> tuple[list[int], list[str], str]:
    """(exit codes, sys.modules, stdout) of ``commands`` run one after another in a new interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DEV", None)
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(commands)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    return report["codes"], report["modules"], r.stdout


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("runtime")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    opts = BuildOptions(golden_sets=1)
    return {v: build_package(d / "tiny.onnx", v, d / f"tiny-{v}.dpk", opts).path for v in ("pc-cpu", "pc-opencl")}


def test_forbidden_matches_the_compiler_modules() -> None:
    assert forbidden(["onnx", "onnx.helper", "yaml", "targets.cstyle", "targets.cstyle.render", "jit.ir.uop",
                      "jit.trace", "jit.realize", "jit.codegen.opt"]) == [
        "onnx", "onnx.helper", "yaml", "targets.cstyle", "targets.cstyle.render", "jit.ir.uop", "jit.trace",
        "jit.realize", "jit.codegen.opt"]
    assert forbidden(["jit.common.dtype", "targets.cpu_runtime", "packager.package", "abi.records"]) == []


@pytest.mark.parametrize("vehicle", ["pc-cpu", "pc-opencl"])
def test_verify_and_replay_import_no_compiler(packages: dict[str, Path], vehicle: str) -> None:
    pkg = str(packages[vehicle])
    codes, modules, out = run_fresh([["verify", pkg], ["replay", pkg, "--iters", "3", "--warmup", "1"],
                                     ["inspect", pkg]])
    assert codes == [0, 0, 0], out
    assert "verify ok: entry tiny: 1 golden set(s)" in out and "3 iters after 1 warmup" in out
    engine = "targets.replay_cpu" if vehicle == "pc-cpu" else "targets.replay_opencl"
    assert engine in modules  # the replay really ran in that interpreter
    assert forbidden(modules) == []


@pytest.mark.opencl
def test_replay_on_another_device_imports_no_compiler(packages: dict[str, Path]) -> None:
    """``--device QCOM``: the QCOM profile's device side (a stand-in on PoCL) runs the OpenCL package."""
    pkg = str(packages["pc-opencl"])
    codes, modules, out = run_fresh([["replay", pkg, "--iters", "2", "--warmup", "0", "--device", "QCOM"],
                                     ["verify", pkg, "--device", "QCOM"]])
    assert codes == [0, 0], out
    # replay names the device that ran: the OpenCL stand-in, emulating the QCOM profile (or an Adreno itself)
    assert "emulating QCOM: 2 iters" in out or "Adreno" in out
    assert "verify ok: entry tiny: 1 golden set(s) on QCOM, tolerance" in out
    assert "targets.qcom_runtime" in modules and "targets.qcom" not in modules
    assert forbidden(modules) == []


def test_package_abi_reads_without_onnx(packages: dict[str, Path]) -> None:
    pkg = str(packages["pc-cpu"])
    codes, modules, out = run_fresh([["abi-diff", pkg, pkg]])
    assert codes == [0] and "abi-diff: identical" in out
    assert [m for m in modules if m.startswith("onnx")] == []


def test_runtime_is_the_target_once_made() -> None:
    """A process that made ``Device[name]`` replays on that Target (one context per device); the runtime of a
    name no Target was made for is the device side alone."""
    target = Device["CPU"]
    assert Device.runtime("cpu") is target
    fresh = subprocess.run([sys.executable, "-c", "from targets.registry import Device; r = Device.runtime('CPU'); "
                            "print(type(r).__module__, type(r).__name__, r is Device.runtime('CPU'))"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert fresh.stdout.split() == ["targets.cpu_runtime", "CPURuntime", "True"], fresh.stderr
    assert issubclass(type(target), CPURuntime) and not issubclass(CPURuntime, Target)


@pytest.mark.opencl
def test_one_opencl_binding(packages: dict[str, Path]) -> None:
    """The OpenCL target and the replay share one cffi binding of libOpenCL (one dlopen)."""
    replay = load_package(packages["pc-opencl"]).make_replay()
    ffi, lib = libopencl()
    assert replay.ffi is ffi and replay.lib is lib and Device["OPENCL"].ffi is ffi
    assert "clCreateSubBuffer" in dir(lib) and ffi.typeof("clEnqueueCommandBufferKHR_fn")


def test_qcom_device_names() -> None:
    assert parse_qcom_device("QCOM") == ("630", False)
    assert parse_qcom_device("QCOM:640:images") == ("640", True)
    assert parse_qcom_device("QCOM:999") == ("999", False)  # no model list given: any name parses
    with pytest.raises(OpenCLDeviceError, match=r"with a model in \['630'\], got '999'"):
        parse_qcom_device("QCOM:999", ["630"])
    with pytest.raises(OpenCLDeviceError, match=r"expected QCOM\[:<model>\]\[:images\], got '640:650'"):
        parse_qcom_device("QCOM:640:650")


@pytest.mark.opencl
def test_qcom_runtime_refuses_unknown_models() -> None:
    """The runtime knows the same Adreno models as the target: a replay on QCOM:999 is refused, not run."""
    with pytest.raises(OpenCLDeviceError, match=r"with a model in \['630', '640', '650', '660'\], got '999'"):
        Device.runtime("QCOM:999")
