"""Building packages: provenance in the manifest, canonical kernel names, golden inputs, determinism across
processes (whatever the process compiled before)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from abi.infer import infer_abi
from packager import __version__
from packager.build import BuildOptions, build_package, canonical_kernels, golden_inputs
from packager.container import FORMAT_VERSION
from packager.errors import PackageError
from packager.package import load_package
from packager.samples import vision_model
from packager.synthetic import tiny_model
from targets.cmdbuf import BufferSpec, CommandBuffer, Dispatch, KernelSpec

ROOT = Path(__file__).resolve().parents[2]
_BUILD = """
import sys
import onnx
from packager.build import BuildOptions, build_package
from packager.synthetic import tiny_model
if sys.argv[3] == "busy":  # compile other kernels first, so per-process kernel name counters have moved on
    from jit.trace import capture_onnx
    from jit.onnx.loader import load_onnx
    from packager.samples import sample_inputs
    import numpy as np
    for seed in (5, 6):
        m = tiny_model(seed)
        capture_onnx(load_onnx(m), {"frame": np.zeros((1, 2, 8, 8), np.uint8), "x": np.zeros((1, 16), np.float32)},
                     fold_weights=False)
onnx.save(tiny_model(), sys.argv[1])
build_package(sys.argv[1], "pc-cpu", sys.argv[2], BuildOptions(golden_sets=1))
"""


@pytest.mark.slow
def test_same_inputs_give_byte_identical_files_in_two_processes(tmp_path: Path) -> None:
    digests = []
    for mode in ("fresh", "busy"):
        (tmp_path / mode).mkdir()
        out = tmp_path / mode / "p.dpk"  # the model's file name is part of the manifest: keep it the same
        proc = subprocess.run([sys.executable, "-c", _BUILD, str(tmp_path / mode / "m.onnx"), str(out), mode],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


@pytest.fixture(scope="module")
def tiny_pkg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("build")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    return build_package(d / "tiny.onnx", "comma3x", d / "tiny.dpk", BuildOptions(target="CPU", emulate="long",
                                                                                  golden_sets=1, float16=False)).path


def test_comma_profiles_compute_in_float16_as_compile3_does(tmp_path: Path) -> None:
    onnx.save(tiny_model(), str(tmp_path / "tiny.onnx"))
    half = load_package(build_package(tmp_path / "tiny.onnx", "comma3x", tmp_path / "half.dpk",
                                      BuildOptions(target="CPU", golden_sets=1)).path)
    full = load_package(build_package(tmp_path / "tiny.onnx", "pc-cpu", tmp_path / "full.dpk",
                                      BuildOptions(golden_sets=1)).path)
    assert half.manifest.raw["settings"]["FLOAT16"] == 1 and full.manifest.raw["settings"]["FLOAT16"] == 0
    assert {w.dtype for w in half.cmdbuf.weights} == {"float16"} and {w.dtype for w in full.cmdbuf.weights} == {
        "float32"}
    # the I/O contract stays the model's; the golden tolerance is float16's, and the accuracy report shows why
    assert [b.dtype for b in half.cmdbuf.outputs] == ["float32"]
    [tol] = half.manifest.raw["entries"][0]["golden"]["outputs"]
    assert (tol["rtol"], tol["atol"]) == (1e-2, 1e-2)
    [row] = half.manifest.raw["entries"][0]["accuracy"]["slices"]
    assert row["ok"] and 1e-5 < row["max_abs_err"] < 1e-2


def test_manifest_records_provenance(tiny_pkg: Path, tmp_path: Path) -> None:
    m = load_package(tiny_pkg).manifest
    raw = m.raw
    model_bytes = (tiny_pkg.parent / "tiny.onnx").read_bytes()
    assert raw["drivepack_version"] == __version__ and raw["format_version"] == FORMAT_VERSION == 3
    assert [e["name"] for e in raw["entries"]] == ["tiny"] and m.entry_names == ("tiny",)
    entry = raw["entries"][0]  # no comma3x role matches tiny: the entry is named by the model's file name
    assert entry["model"] == {"name": "tiny.onnx", "sha256": hashlib.sha256(model_bytes).hexdigest(),
                              "bytes": len(model_bytes)}
    vehicle = (ROOT / "vehicles" / "comma3x.yaml").read_bytes()
    assert raw["vehicle"] == {"name": "comma3x", "sha256": hashlib.sha256(vehicle).hexdigest()}
    assert raw["target"]["device"] == "CPU" and "float32" in raw["target"]["dtypes"]
    assert raw["target"]["emulated_dtypes"] == ["int64"]
    assert raw["settings"]["EMULATED_DTYPES"] == "int64"
    assert entry["kernels"]["kept"] == len(entry["kernels"]["list"]) and entry["kernels"]["pruned"] >= 0
    assert entry["arena_bytes"] == load_package(tiny_pkg).cmdbuf.arena_bytes
    assert entry["dtype_policy"]["target"] == "CPU" and "float32" in entry["dtype_policy"]["native"]
    assert all(k["flops"] > 0 and k["bytes"] > 0 for k in entry["kernels"]["list"])
    assert all(k["section"] == f"tiny/kernel/{i}" for i, k in enumerate(entry["kernels"]["list"]))
    assert entry["golden"]["outputs"] == [{"name": "outputs", "dtype": "float32", "shape": [1, 16], "rtol": 1e-4,
                                           "atol": 1e-4}]
    assert entry["golden"]["reference"]["kind"] == "onnxruntime"  # the independent reference (test_golden_reference)
    assert entry["abi_check"]["ok"] is False and entry["role"] is None and m.role is None
    # tiny has no output_slices: one accuracy row for its whole output
    [row] = entry["accuracy"]["slices"]
    assert entry["accuracy"]["reference"] == "onnxruntime" and row["slice"] is None and row["ok"] is True
    assert (row["output"], row["start"], row["stop"], row["outside"]) == ("outputs", 0, 16, 0)
    golden = load_package(tiny_pkg).golden(0)  # onnxruntime may round as drivepack does: an error of 0 is possible
    diff = np.abs(golden.target["outputs"] - golden.reference["outputs"])
    assert row["max_abs_err"] >= float(diff.max()) and 0 <= row["max_abs_err"] < 1e-5 and 0 <= row["max_rel_err"] < 1e-3


def test_golden_inputs_are_deterministic_and_frames_span_0_to_255() -> None:
    abi = infer_abi(vision_model())
    a, b, c = golden_inputs(abi, 0), golden_inputs(abi, 0), golden_inputs(abi, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["input_imgs"], c["input_imgs"])
    frame = a["input_imgs"]
    assert frame.dtype == np.uint8 and frame.min() == 0 and frame.max() == 255


def test_canonical_kernel_names_drop_process_suffixes() -> None:
    # an identifier that merely starts with the entry's name is not renamed
    src = "void r_4n3(float* restrict data0) { int r_4n3x = 3; data0[r_4n3x] = 1.0f; }"
    cb = CommandBuffer("CPU", (KernelSpec("r_4n3", src, "r_4n3", "CPU"),),
                       (Dispatch(0, (1,), None, ("output:o",)),),
                       (BufferSpec("output:o", "float32", (4,), 16),), 0, 64)
    out, renamed = canonical_kernels(cb)
    assert renamed == {"r_4n3": "r_4_k0"}
    assert out.kernels[0].source == "void r_4_k0(float* restrict data0) { int r_4n3x = 3; data0[r_4n3x] = 1.0f; }"
    assert out.kernels[0].entry == "r_4_k0"


def test_bad_model_file_is_a_package_error(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"\xff\x00 not onnx")
    with pytest.raises(PackageError, match="model: expected a serialized ONNX model"):
        build_package(tmp_path / "bad.onnx", "pc-cpu", tmp_path / "o.dpk")
    with pytest.raises(PackageError, match="golden_sets: expected >= 1, got 0"):
        build_package(tmp_path / "bad.onnx", "pc-cpu", tmp_path / "o.dpk", BuildOptions(golden_sets=0))
