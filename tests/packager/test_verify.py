"""verify: bit-exact on the machine a package was built on, per-output tolerance elsewhere; mismatches caught."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from packager.build import BuildOptions, build_package
from packager.errors import VerifyError
from packager.package import load_package
from packager.synthetic import tiny_model
from packager.verify import choose_mode, compare_exact, compare_tolerance, verify_package
from targets.host_memory import HUGE_PAGE_BYTES
from tests.helpers import mapping_flags
from tests.packager.test_format import _rewrite
from tests.targets.test_replay_opencl import host_memory_of


@pytest.fixture(scope="module")
def cpu_pkg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("verify")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    return build_package(d / "tiny.onnx", "pc-cpu", d / "tiny.dpk", BuildOptions(golden_sets=2)).path


def _nudge(kind: str, ulps: int = 1, scale: float = 0.0):
    """A section edit moving golden set 1's ``kind`` output: by ``ulps`` in the last place, or by ``scale``."""
    def edit(name: str, data: bytes) -> bytes:
        if name != f"tiny/golden/1/{kind}/outputs":
            return data
        arr = np.frombuffer(data, dtype=np.float32).copy()
        if scale:
            arr[3] += scale
        else:
            arr.view(np.uint32)[3] += ulps
        return arr.tobytes()
    return edit


def test_verify_on_the_build_machine_is_bit_exact(cpu_pkg: Path) -> None:
    [report] = verify_package(load_package(cpu_pkg)).entries
    assert report.entry == "tiny" and report.mode == "exact" and report.sets == 2 and "same device CPU" in report.reason


def test_one_ulp_off_in_a_target_output_fails_exact_verify(cpu_pkg: Path, tmp_path: Path) -> None:
    bad = _rewrite(cpu_pkg, tmp_path / "ulp.dpk", section_edit=_nudge("target"))
    with pytest.raises(VerifyError, match=r"^tiny: golden set 1: outputs: expected bit-exact, got 1 of 16 elements "
                                          r"differing \(first at 3"):
        verify_package(load_package(bad))


def test_tolerance_mode_compares_with_the_reference(cpu_pkg: Path, tmp_path: Path) -> None:
    within = _rewrite(cpu_pkg, tmp_path / "in.dpk", section_edit=_nudge("reference", ulps=3))
    [report] = verify_package(load_package(within), mode="tolerance").entries
    assert report.mode == "tolerance" and 0 < report.max_abs_diff < 1e-5
    outside = _rewrite(cpu_pkg, tmp_path / "out.dpk", section_edit=_nudge("reference", scale=0.5))
    with pytest.raises(VerifyError, match=r"outputs: expected \|got - want\| <= 0.0001 \+ 0.0001\*\|want\|"):
        verify_package(load_package(outside), mode="tolerance")


def test_mode_is_exact_only_on_the_same_device_and_fingerprint() -> None:
    fp = {"target": "CPU", "machine": "x86_64", "compiler": "cc 12"}
    assert choose_mode(fp, dict(fp), "CPU", "CPU")[0] == "exact"
    mode, why = choose_mode(fp, {**fp, "compiler": "cc 13"}, "CPU", "CPU")
    assert mode == "tolerance" and "compiler ('cc 12' vs 'cc 13')" in why
    assert choose_mode(fp, fp, "QCOM:630", "OPENCL") == ("tolerance", "device OPENCL differs from the package's "
                                                                      "QCOM:630")


def test_compare_functions_handle_nan_and_shapes() -> None:
    want = {"o": np.array([1.0, np.nan], np.float32)}
    compare_exact({"o": want["o"].copy()}, want, "w")
    tol = [{"name": "o", "rtol": 1e-4, "atol": 1e-4}]
    assert compare_tolerance({"o": np.array([1.00001, np.nan], np.float32)}, want, tol, "w") < 1e-4
    with pytest.raises(VerifyError, match="1 of 2 elements outside"):
        compare_tolerance({"o": np.array([1.0, 0.0], np.float32)}, want, tol, "w")
    with pytest.raises(VerifyError, match=r"expected float32 \(2,\), got float32 \(3,\)"):
        compare_exact({"o": np.zeros(3, np.float32)}, want, "w")


@pytest.mark.opencl
def test_opencl_package_verifies_exact_and_within_tolerance_of_the_cpu(tmp_path: Path) -> None:
    onnx.save(tiny_model(), str(tmp_path / "tiny.onnx"))
    pkg = build_package(tmp_path / "tiny.onnx", "pc-opencl", tmp_path / "cl.dpk", BuildOptions(golden_sets=1)).package
    assert pkg.manifest.target_device == "OPENCL" and "device" in pkg.manifest.checked_on
    assert verify_package(pkg).entries[0].mode == "exact"
    assert verify_package(pkg, mode="tolerance").entries[0].max_abs_diff < 1e-4
    loaded = load_package(tmp_path / "cl.dpk")
    replay = loaded.make_replay()
    for b in loaded.cmdbuf.weights:  # PoCL reads the package's own bytes: no copy
        address = host_memory_of(replay.cl, replay._buffers[b.binding].handle)  # noqa: SLF001
        assert address == loaded.weights[int(b.name)].ctypes.data


def test_a_loaded_package_is_on_huge_pages_and_the_cpu_replay_binds_its_weights_there(cpu_pkg: Path) -> None:
    pkg = load_package(cpu_pkg)
    start = np.frombuffer(pkg.container.buffer, np.uint8).ctypes.data
    assert start % HUGE_PAGE_BYTES == 0 and ("hg" in mapping_flags(start)) == (pkg.size >= HUGE_PAGE_BYTES)
    replay = pkg.make_replay()
    assert pkg.weights
    for wid, w in pkg.weights.items():
        assert np.shares_memory(replay._keep[f"weight:{wid}"], w)  # noqa: SLF001 - what the driver binds
