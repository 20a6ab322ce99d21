"""The QCOM (Adreno 6xx) profile: its kernels built and run on the machine's OpenCL device (PoCL in CI).

These tests never skip: a machine without an OpenCL device fails them, on purpose. What they cannot check
(Adreno's own OpenCL C compiler, KGSL submission) is stated in the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

import targets.qcom as qcom
from jit import Tensor, capture_onnx, dtypes, load_onnx
from jit.codegen.passes.images import weights_to_images
from jit.common.dtype import image_shape
from jit.common.errors import CompileError
from jit.realize import compile_uops, schedule_dtype_policy
from jit.schedule.kernels import create_schedule
from packager.environment import device_for
from packager.samples import float16_model, policy_model, sample_inputs, vision_model
from targets.adreno_models import ADRENO_MODELS, QCOMLimits
from targets.base import DEFAULT_L1, DEFAULT_L2
from targets.cl_binding import OpenCLDeviceError
from targets.cmdbuf import BufferSpec, CmdbufError, CommandBuffer
from targets.registry import Device
from tests.onnx.test_models import DATA, dummy_input

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(5)
pytestmark = pytest.mark.opencl
# what an fp64-less, int64-less OpenCL C source must not spell
FORBIDDEN = re.compile(r"\b(double|long|ulong|int64_t|uint64_t)\b|\d+u?ll\b|cl_khr_fp64")


@pytest.fixture(scope="module")
def target() -> qcom.QCOMTarget:
    t = Device["QCOM"]
    assert isinstance(t, qcom.QCOMTarget)
    return t


def both(fn, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``fn`` over the same host arrays as Tensors on CPU and on QCOM."""
    cpu = fn(*[Tensor(a, device="CPU") for a in arrays]).numpy()
    q = fn(*[Tensor(a, device="QCOM") for a in arrays]).numpy()
    return cpu, q


# --- the declared profile ----------------------------------------------------------------------------------

def test_profile_dtypes_and_limits(target: qcom.QCOMTarget) -> None:
    prof = target.profile_dtypes()
    assert {dtypes.float32, dtypes.float16} <= prof
    assert not prof & {dtypes.float64, dtypes.int64, dtypes.uint64, dtypes.bfloat16}
    assert not any("fp8" in d.name or "float8" in d.name for d in prof)
    # the kernels run on the local device: its own missing dtypes are emulated on top
    local = super(qcom.QCOMTarget, target).supported_dtypes()
    assert target.supported_dtypes() == prof & local
    if not target.on_adreno and dtypes.float16 not in local:  # PoCL: fp16 emulated here, native on Adreno
        assert dtypes.float16 not in target.supported_dtypes()
    lim = target.limits
    assert isinstance(lim, QCOMLimits) and lim.images is False
    assert lim.max_local_size <= 1024 and target.max_group <= 1024
    assert lim.buffer_alignment % 128 == 0 and lim.image_pitch_alignment == 64
    assert lim.preferred_local_size == 128 and target.preferred_local == 128
    a630 = ADRENO_MODELS["630"]
    assert (a630.max_work_group_size, a630.max_work_item_sizes, a630.soc) == (1024, (1024, 1024, 1024), "SDM845")
    assert {"630", "640", "650", "660"} <= ADRENO_MODELS.keys()
    assert "Adreno 630" in repr(target)


def test_each_model_declares_its_caches(target: qcom.QCOMTarget) -> None:
    """Every model's caches are data (not the stand-in device's): 630 and 640 a 128 KB L2, the rest the
    defaults where no figure is public."""
    want_l2 = {"630": 128 * 1024, "640": 128 * 1024, "650": DEFAULT_L2.size, "660": DEFAULT_L2.size}
    for name, model in ADRENO_MODELS.items():
        assert model.l1 == DEFAULT_L1 and model.l2.size == want_l2[name]
        assert (model.limits(images=False).l1, model.limits(images=False).l2) == (model.l1, model.l2)
    assert (target.limits.l1, target.limits.l2) == (DEFAULT_L1, ADRENO_MODELS["630"].l2)


def test_other_models_and_bad_names() -> None:
    t = Device["QCOM:650"]
    assert isinstance(t, qcom.QCOMTarget) and t.model.name == "650" and t.preferred_local == 256
    with pytest.raises(OpenCLDeviceError, match=r"QCOM\[:<model>\]\[:images\].*'999'"):
        qcom.QCOMTarget("QCOM:999")
    with pytest.raises(OpenCLDeviceError, match="'640:650'"):
        qcom.QCOMTarget("QCOM:640:650")


def test_images_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not Device["QCOM"].limits.images
    t = Device["QCOM:640:images"]
    assert t.limits.images and t.model.name == "640"
    # the profile's largest image, cut to what the device running the kernels takes (PoCL: 8192 x 8192)
    model, device = t.model.image2d_max, t.info.image2d_max
    assert t.limits.image2d_max == (min(model[0], device[0]), min(model[1], device[1]))
    monkeypatch.setenv(qcom.IMAGES_ENV, "1")
    assert qcom.QCOMTarget("QCOM").limits.images


def test_image_shape_and_pass_refusals() -> None:
    assert image_shape(10, (8, 8)) == (1, 3) and image_shape(4 * 20, (8, 8)) == (3, 8)
    assert image_shape(4 * 65, (8, 8)) is None
    x, w = Tensor(np.ones((2, 8), np.float32)), Tensor(np.ones((8, 3), np.float32))
    (k,) = create_schedule([x.matmul(w).uop], "CPU")[0]
    with pytest.raises(CompileError, match=r"parameters \[0\]: image expected a read-only parameter"):
        weights_to_images(k.ast, {0: (1, 2)})
    with pytest.raises(CompileError, match="parameter 2: image of 1x1 texels holds 4 floats, expected at least 24"):
        weights_to_images(k.ast, {2: (1, 1)})
    ints = Tensor(np.ones((2, 8), np.int32)).sum(axis=1)
    (k,) = create_schedule([ints.uop], "CPU")[0]
    with pytest.raises(CompileError, match="parameter 1: image expected a float32 buffer, got int32"):
        weights_to_images(k.ast, {1: (1, 4)})


@pytest.mark.parametrize("make", [vision_model, policy_model], ids=["vision", "policy"])
def test_weights_in_images_replay_bit_identical(make) -> None:
    """With images on, conv/matmul weights are image2d_t read through read_imagef: same bits as buffers."""
    proto = make()
    feeds = sample_inputs(proto, seed=4)
    want = capture_onnx(load_onnx(proto, device="QCOM"), feeds, target="QCOM")(feeds)
    run = capture_onnx(load_onnx(proto, device="QCOM:images"), feeds, target="QCOM:images")
    images = [b for b in run.cmdbuf.buffers if b.image is not None]
    assert images and all(b.kind == "weight" and b.dtype == "float32" for b in images)
    assert all(b.image[0] * b.image[1] * 16 >= b.nbytes for b in images)
    readers = [k.source for k in run.cmdbuf.kernels if "read_only image2d_t" in k.source]
    assert readers and all("read_imagef" in src for src in readers)
    assert CommandBuffer.from_bytes(run.cmdbuf.to_bytes()) == run.cmdbuf  # image shapes travel with it
    got = run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    for name, arr in run(sample_inputs(proto, seed=5)).items():
        assert not np.array_equal(arr, got[name])


def test_image_is_only_for_float32_weights() -> None:
    with pytest.raises(CmdbufError, match="input:x: image expected only on float32 weights, got a float32 input"):
        CommandBuffer("QCOM", (), (), (BufferSpec("input:x", "float32", (4,), 16, image=(1, 1)),), 0, 64, {})
    with pytest.raises(CmdbufError, match=r"weight:0: image expected \(height, width\) texels holding 32 bytes"):
        CommandBuffer("QCOM", (), (), (BufferSpec("weight:0", "float32", (8,), 32, image=(1, 1)),), 0, 64, {})


def test_vehicle_images_option_picks_the_image_device() -> None:
    assert device_for("qcom", "adreno630", images=True) == "QCOM:630:images"
    assert device_for("qcom", "adreno630") == "QCOM:630"


def test_dev_qcom_announces_the_stand_in_once(target: qcom.QCOMTarget) -> None:
    code = textwrap.dedent("""
        import numpy as np
        from targets.registry import Device
        from jit.frontend.tensor import Tensor
        assert Device.DEFAULT == "QCOM"
        print((Tensor(np.arange(4, dtype=np.float32)) * 2).numpy().tolist())
        print((Tensor(np.arange(4, dtype=np.float32)) + 1).numpy().tolist())
    """)
    env = {**os.environ, "DEV": "QCOM"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[0.0, 2.0, 4.0, 6.0]", "[1.0, 2.0, 3.0, 4.0]"]
    lines = [ln for ln in r.stderr.splitlines() if "QCOM" in ln]
    if not target.on_adreno:
        assert len(lines) == 1 and "no Adreno GPU found" in lines[0], r.stderr
    from targets.registry import TARGETS
    assert next(iter(TARGETS)) == "CPU" and "QCOM" in TARGETS


# --- Tensor programs on QCOM against the CPU target ---------------------------------------------------------

def _programs() -> dict[str, tuple]:
    a = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    b = RNG.standard_normal((5, 7)).astype(np.float32)
    i = RNG.integers(-100, 100, (6, 9)).astype(np.int32)
    j = RNG.integers(1, 9, (6, 9)).astype(np.int32)
    big = RNG.integers(-(2**40), 2**40, (6, 9)).astype(np.int64)
    h = RNG.standard_normal((4, 33)).astype(np.float16)
    return {
        "float32": (lambda x, y: (x * y + 1.5).exp() - x.sqrt().abs(), a, b),
        "where_cmp": (lambda x, y: (x < y).where(x.sin(), y.cos().maximum(x)), a, b),
        "int32": (lambda x, y: (x // y) + (x % y) * 3 - (x << 2) ^ y, i, j),
        "int_pow": (lambda x, y: (x % 7) ** (y % 6), i, j),
        "int64_mul_add": (lambda x, y: x.cast(dtypes.int64) * (2**33) + y, i, j),
        "int64_ops": (lambda x, y: (x * 3 + y.cast(dtypes.int64)) // 5 - (x > 0).where(x, -x), big, j),
        "int64_reduce": (lambda x: x.sum(1) + x.max(0).sum(), big),
        "float16": (lambda x: (x * 2 + 1).exp().sum(1) / 33, h),
        "reduce": (lambda x: (x * 2).exp().mean((0, 2)) + x.max(1).sum(), a),
        "matmul": (lambda x, y: x @ y, RNG.standard_normal((37, 64)).astype(np.float32),
                   RNG.standard_normal((64, 29)).astype(np.float32)),
        "conv2d": (lambda x, w, bias: x.conv2d(w, bias, stride=2, padding=1).relu().max_pool2d(2),
                   RNG.standard_normal((2, 3, 12, 10)).astype(np.float32),
                   RNG.standard_normal((8, 3, 3, 3)).astype(np.float32), RNG.standard_normal((8,)).astype(np.float32)),
    }


PROGRAMS = _programs()


@pytest.mark.parametrize("case", list(PROGRAMS))
def test_tensor_programs_match_cpu(case: str) -> None:
    fn, *args = PROGRAMS[case]
    cpu, q = both(fn, *args)
    assert cpu.dtype == q.dtype and cpu.shape == q.shape
    if cpu.dtype.kind in "iub":
        np.testing.assert_array_equal(q, cpu)
    elif cpu.dtype == np.float16:
        np.testing.assert_allclose(q.astype(np.float32), cpu.astype(np.float32), rtol=1e-3, atol=1e-3)
    else:
        np.testing.assert_allclose(q, cpu, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", list(PROGRAMS))
def test_rendered_source_has_no_double_or_64bit_ints(target: qcom.QCOMTarget, case: str) -> None:
    fn, *args = PROGRAMS[case]
    out = fn(*[Tensor(a, device="QCOM") for a in args])
    kernels = compile_uops([out.uop], "QCOM")
    assert kernels
    for ck in kernels:
        src = ck.program.source
        assert "__kernel void" in src
        assert not FORBIDDEN.search(src), f"{ck.program.name}: {FORBIDDEN.search(src)}\n{src}"
        if case.startswith("int64"):
            assert dtypes.int64 in ck.dtype_policy.emulated_dtypes
        if case == "int_pow":
            assert "pow(" not in src.replace("dp_ipow_", "")
    if case == "float16" and dtypes.float16 not in target.supported_dtypes():  # PoCL: no cl_khr_fp16
        assert all("half" not in ck.program.source for ck in kernels)


def test_integer_pow_without_double_matches_numpy() -> None:
    base = np.array([-3, -2, -1, 0, 1, 2, 3, 7, 2, -2], np.int32)
    exp = np.array([0, 1, 2, 3, 4, 5, 6, 7, 30, 31], np.int32)
    for d in (np.int32, np.uint8, np.int16):
        b, e = base.astype(d), exp.astype(d)
        cpu, q = both(lambda x, y: x ** y, b, e)
        np.testing.assert_array_equal(q, cpu)
        if d is np.int32:
            np.testing.assert_array_equal(q, b ** e)


# --- whole models on OPENCL and QCOM against the CPU target ------------------------------------------------

@pytest.mark.parametrize("device", ["OPENCL", "QCOM"])
@pytest.mark.parametrize("make", [vision_model, policy_model], ids=["vision", "policy"])
def test_sample_models_match_cpu(make, device: str) -> None:
    proto = make()
    feeds = sample_inputs(proto, seed=3)
    want = load_onnx(proto, device="CPU")(feeds)
    model = load_onnx(proto, device=device)
    got = model(feeds)
    for name in model.output_names:
        assert got[name].device.split(":")[0] == device
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), rtol=1e-4, atol=1e-4)


# each model on one device: the emulation is the same on both (the stand-in QCOM is PoCL with weights in images),
# and each pairing costs 30-60 s of the suite from a cold kernel cache
@pytest.mark.parametrize(("make", "device"), [(vision_model, "QCOM"), (policy_model, "OPENCL")],
                         ids=["vision-QCOM", "policy-OPENCL"])
def test_float16_models_match_onnxruntime(make, device: str) -> None:
    """PoCL has no cl_khr_fp16: every half value is stored as 16 bits and computed through the emulation."""
    import onnxruntime as ort

    proto = float16_model(make())
    feeds = sample_inputs(proto, seed=5)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    model = load_onnx(proto, device=device)
    got = model(feeds)
    report = schedule_dtype_policy([t.uop for t in got.values()], device)
    assert report.emulated_in.get("float16") and not report.native_in.get("float16"), report.summary()
    for name in model.output_names:
        out = got[name].numpy()
        assert out.dtype == np.float16 == want[name].dtype
        # both round every stored tensor to half; accumulation order and where rounding happens differ
        np.testing.assert_allclose(out.astype(np.float32), want[name].astype(np.float32), rtol=1e-2, atol=1e-2)


@pytest.fixture(scope="module")
def resnet50() -> tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """light_resnet50 from the onnx wheel, the input onnx's runner feeds it, and the CPU target's outputs."""
    path = DATA / "light" / "light_resnet50.onnx"
    proto = onnx.load(str(path))
    inits = {t.name for t in proto.graph.initializer}
    feeds = {i.name: dummy_input(i) for i in proto.graph.input if i.name not in inits}
    want = {k: v.numpy() for k, v in load_onnx(path, device="CPU")(feeds).items()}
    return path, feeds, want


@pytest.mark.slow
@pytest.mark.parametrize("device", ["OPENCL", "QCOM"])
def test_light_resnet50_matches_cpu(resnet50, device: str) -> None:
    path, feeds, want = resnet50
    model = load_onnx(path, device=device)
    got = model(feeds)
    assert set(got) == set(want)
    for name in model.output_names:
        assert got[name].device.split(":")[0] == device
        np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-4, atol=1e-4)
