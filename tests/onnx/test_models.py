"""Whole models through the ONNX frontend: the onnx wheel's light CNNs and pytorch data sets, and our samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from jit.onnx.loader import load_onnx
from packager.samples import POLICY_OUTPUT_SLICES, openpilot_output_slices, policy_model, sample_inputs, vision_model
from tests.onnx.conformance.conformance import compare, run_case

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]
LIGHT_RTOL = {"densenet121": 2e-3}


def dummy_input(info: onnx.ValueInfoProto) -> np.ndarray:
    """The input onnx's backend runner feeds the light models: arange(n) / n in the declared shape."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in info.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_matches_reference_output(name: str) -> None:
    path = DATA / "light" / f"light_{name}.onnx"
    model = load_onnx(path)
    proto = onnx.load(str(path))
    inits = {t.name for t in proto.graph.initializer}
    feeds = {i.name: dummy_input(i) for i in proto.graph.input if i.name not in inits}
    want = numpy_helper.to_array(onnx.load_tensor(str(DATA / "light" / f"light_{name}_output_0.pb")))
    got = model(feeds)[model.output_names[0]].numpy()
    assert compare(got, want, rtol=LIGHT_RTOL.get(name, 1e-3)) is None


def _dataset_cases(kind: str) -> list[Path]:
    return sorted(p for p in (DATA / kind).iterdir() if (p / "model.onnx").exists())


@pytest.mark.slow
@pytest.mark.parametrize("case", _dataset_cases("pytorch-converted") + _dataset_cases("pytorch-operator"),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pytorch_data_sets(case: Path) -> None:
    assert run_case(case).reason is None


@pytest.mark.parametrize("make", [vision_model, policy_model], ids=["vision", "policy"])
def test_sample_model_matches_onnxruntime(make) -> None:
    proto = make()
    feeds = sample_inputs(proto, seed=3)
    if "input_imgs" in feeds:
        assert feeds["input_imgs"].min() == 0 and feeds["input_imgs"].max() == 255
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    model = load_onnx(proto)
    got = model(feeds)
    for name, w in zip(model.output_names, want, strict=True):
        np.testing.assert_allclose(got[name].numpy(), w, rtol=1e-4, atol=1e-4)


def test_load_from_path_bytes_and_proto(tmp_path: Path) -> None:
    proto = policy_model()
    path = tmp_path / "policy.onnx"
    path.write_bytes(proto.SerializeToString())
    for src in (proto, proto.SerializeToString(), path, str(path)):
        m = load_onnx(src)
        assert m.input_names == list(sample_inputs(proto))
        assert m.metadata["output_slices"] == openpilot_output_slices(POLICY_OUTPUT_SLICES)


def test_external_data_is_loaded(tmp_path: Path) -> None:
    proto = policy_model()
    feeds = sample_inputs(proto, seed=4)
    want = load_onnx(proto)(feeds)["outputs"].numpy()
    # save_model rewrites the proto's tensors into references to the external file
    onnx.save_model(proto, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=1024)
    assert (tmp_path / "weights.bin").stat().st_size > 1_000_000
    got = load_onnx(tmp_path / "m.onnx")(feeds)["outputs"].numpy()
    np.testing.assert_array_equal(got, want)


