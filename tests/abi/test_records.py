"""ABI records, inference from ONNX, the plain-data form, runtime validation, and the field failures it must catch."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from abi.diff import diff
from abi.errors import AbiError
from abi.infer import infer_abi
from abi.layout import pack_inputs
from abi.records import Abi, HistorySemantics, TensorSpec
from abi.validate import validate, validate_packed
from packager.samples import POLICY_INPUTS, POLICY_OUTPUT_SLICES, VISION_OUTPUT_SLICES, policy_model, vision_model


@pytest.fixture(scope="module")
def vision_abi() -> Abi:
    return infer_abi(vision_model())


@pytest.fixture(scope="module")
def policy_abi() -> Abi:
    return infer_abi(policy_model())


def policy_arrays(abi: Abi, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in abi.inputs}


def fields(err: AbiError) -> set[tuple[str, str]]:
    return {(e.input, e.field) for e in err.errors}


def tiny_model(inputs: list[tuple[str, int, list[int | str]]], metadata: dict[str, str] | None = None
               ) -> onnx.ModelProto:
    """A model whose output is the first input (Identity): only its I/O signature matters here."""
    vis = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    out = helper.make_tensor_value_info("outputs", inputs[0][1], inputs[0][2])
    graph = helper.make_graph([helper.make_node("Identity", [inputs[0][0]], ["outputs"])], "g", vis, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if metadata:
        helper.set_model_props(model, metadata)
    return model


# --- inference ------------------------------------------------------------------------------------------------

def test_vision_abi_bytes_and_meaning(vision_abi: Abi) -> None:
    road, wide = vision_abi.inputs
    assert (road.name, wide.name) == ("input_imgs", "big_input_imgs")
    for spec, cam, offset in ((road, "road", 0), (wide, "wide", 393216)):
        assert spec.dtype == "uint8" and spec.shape == (1, 12, 128, 256)
        assert spec.byte_size == 393216 and spec.offset == offset and spec.buffer == "inputs"
        assert spec.strides == (393216, 32768, 256, 1)
        assert spec.camera is not None and spec.camera.camera == cam
        assert (spec.camera.layout, spec.camera.frames, spec.camera.skip) == ("yuv420_6ch", 2, 4)
        assert spec.camera.value_range == (0, 255) and spec.camera.normalized_in_model
    (out,) = vision_abi.outputs
    assert out.shape == (1, 1387) and out.slice_map() == VISION_OUTPUT_SLICES
    assert vision_abi.buffer_sizes() == {"inputs": 786432}


def test_policy_abi_history_and_packing(policy_abi: Abi) -> None:
    assert policy_abi.input_names() == list(POLICY_INPUTS)
    offsets = {s.name: s.offset for s in policy_abi.inputs}
    assert offsets == {"features_buffer": 0, "desire": 51200, "traffic_convention": 52032,
                       "lateral_control_params": 52096, "prev_desired_curv": 52160}
    for name in ("features_buffer", "desire", "prev_desired_curv"):
        assert policy_abi.input(name).history == HistorySemantics(25, 4, "oldest_first")
    assert policy_abi.input("traffic_convention").history is None
    assert policy_abi.outputs[0].slice_map() == POLICY_OUTPUT_SLICES


def test_model_metadata_declares_meaning() -> None:
    meta = {"drivepack_abi": json.dumps({"features_buffer": {"history": {"length": 24}}})}
    abi = infer_abi(tiny_model([("features_buffer", TensorProto.FLOAT, [1, 25, 512])], meta))
    assert abi.input("features_buffer").history == HistorySemantics(24, 4, "oldest_first")
    over = infer_abi(tiny_model([("features_buffer", TensorProto.FLOAT, [1, 25, 512])], meta),
                     overrides={"features_buffer": {"history": {"skip": 2}}})
    assert over.input("features_buffer").history == HistorySemantics(24, 2, "oldest_first")


@pytest.mark.parametrize("overrides, field", [
    ({"nope": {"history": None}}, "overrides"),
    ({"desire": {"colour": "red"}}, "overrides.colour"),
    ({"desire": {"history": {"length": 0}}}, "history.length"),
])
def test_bad_overrides_name_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(AbiError) as e:
        infer_abi(tiny_model([("desire", TensorProto.FLOAT, [1, 25, 8])]), overrides=overrides)
    assert field in {x.field for x in e.value.errors}


def test_dynamic_dimension_is_refused() -> None:
    with pytest.raises(AbiError) as e:
        infer_abi(tiny_model([("desire", TensorProto.FLOAT, ["batch", 25, 8])]))
    assert ("desire", "shape[0]") in fields(e.value)
    assert "batch" in str(e.value)


@pytest.mark.parametrize("slices, field", [("{not json", "metadata_props.output_slices"),
                                           (json.dumps({"plan": [0, 9999]}), "output_slices.plan")])
def test_bad_output_slices(slices: str, field: str) -> None:
    with pytest.raises(AbiError) as e:
        infer_abi(tiny_model([("x", TensorProto.FLOAT, [1, 8])], {"output_slices": slices}))
    assert field in {x.field for x in e.value.errors}


# --- plain-data form ------------------------------------------------------------------------------------------

def test_to_dict_round_trips_through_json(vision_abi: Abi, policy_abi: Abi) -> None:
    for abi in (vision_abi, policy_abi):
        d = json.loads(json.dumps(abi.to_dict()))
        assert d["schema"] == "drivepack.abi" and d["version"] == 2
        assert Abi.from_dict(d) == abi


@pytest.mark.parametrize("mutate, where, field", [
    (lambda d: d.update(version=1), "<abi>", "version"),
    (lambda d: d.update(version=3), "<abi>", "version"),
    (lambda d: d.pop("metadata"), "<abi>", "metadata"),
    (lambda d: d.update(schema="pickle"), "<abi>", "schema"),
    (lambda d: d.update(extra=1), "<abi>", "extra"),
    (lambda d: d["inputs"][0].pop("offset"), "features_buffer", "offset"),
    (lambda d: d["inputs"][0].update(colour="red"), "features_buffer", "colour"),
    (lambda d: d["inputs"][0].update(byte_size=51196), "features_buffer", "byte_size"),
    (lambda d: d["inputs"][0].update(strides=[1, 1, 1]), "features_buffer", "strides"),
    (lambda d: d["inputs"][0].update(dtype="float33"), "features_buffer", "dtype"),
    (lambda d: d["inputs"][0]["history"].update(length=0), "history", "length"),
    (lambda d: d["inputs"][1].update(name="features_buffer"), "features_buffer", "name"),
])
def test_from_dict_is_strict(policy_abi: Abi, mutate, where: str, field: str) -> None:
    d = json.loads(json.dumps(policy_abi.to_dict()))
    mutate(d)
    with pytest.raises(AbiError) as e:
        Abi.from_dict(d)
    assert (where, field) in fields(e.value), e.value.errors


# --- validation: per-input arrays -----------------------------------------------------------------------------

def test_valid_arrays_pass(policy_abi: Abi, vision_abi: Abi) -> None:
    validate(policy_arrays(policy_abi), policy_abi)
    frames = {s.name: np.zeros(s.shape, np.uint8) for s in vision_abi.inputs}
    validate(frames, vision_abi)


def test_all_errors_of_one_call_are_reported_together(policy_abi: Abi) -> None:
    arrays = policy_arrays(policy_abi)
    arrays["desire"] = arrays["desire"].astype(np.float64)
    arrays["traffic_convention"] = np.zeros((1, 3), np.float32)
    del arrays["prev_desired_curv"]
    arrays["desire_pulse"] = np.zeros((1, 25, 8), np.float32)
    with pytest.raises(AbiError) as e:
        validate(arrays, policy_abi)
    got = fields(e.value)
    assert {("desire", "dtype"), ("desire", "byte_size"), ("traffic_convention", "shape"),
            ("traffic_convention", "byte_size"), ("prev_desired_curv", "presence"), ("desire_pulse", "name")} <= got
    msg = str(e.value)
    assert "desire: dtype expected float32, got float64" in msg
    assert "traffic_convention: shape expected (1, 2), got (1, 3)" in msg


def test_float32_frames_where_uint8_expected(vision_abi: Abi) -> None:
    """Field failure: frames normalised to float32 0-1 fed to a model that takes raw uint8."""
    frames = {s.name: np.random.default_rng(0).random(s.shape, dtype=np.float32) for s in vision_abi.inputs}
    with pytest.raises(AbiError) as e:
        validate(frames, vision_abi)
    assert ("input_imgs", "dtype") in fields(e.value) and ("big_input_imgs", "dtype") in fields(e.value)
    assert "normalised already" in str(e.value)
    assert ("input_imgs", "byte_size") in fields(e.value)  # 4x the bytes


def test_wrong_length_1d_input(policy_abi: Abi) -> None:
    """Field failure: a replay accepted a flat input one element short."""
    arrays = policy_arrays(policy_abi)
    arrays["features_buffer"] = np.zeros(25 * 512 - 1, np.float32)
    with pytest.raises(AbiError) as e:
        validate(arrays, policy_abi, allow_flat=True)
    assert {("features_buffer", "shape"), ("features_buffer", "byte_size")} <= fields(e.value)
    arrays["features_buffer"] = np.zeros(25 * 512, np.float32)
    validate(arrays, policy_abi, allow_flat=True)          # the right length, flat: fine when allowed
    with pytest.raises(AbiError) as e:
        validate(arrays, policy_abi)                        # but not by default
    assert fields(e.value) == {("features_buffer", "shape")}


def test_nonfinite_rejected_unless_allowed(policy_abi: Abi) -> None:
    arrays = policy_arrays(policy_abi)
    arrays["desire"][0, 3, 2] = np.nan
    arrays["traffic_convention"][0, 1] = np.inf
    with pytest.raises(AbiError) as e:
        validate(arrays, policy_abi)
    assert fields(e.value) == {("desire", "values"), ("traffic_convention", "values")}
    assert "1 NaN and 0 inf (first at flat index 26)" in str(e.value)
    validate(arrays, policy_abi, reject_nonfinite=False)


def test_non_contiguous_and_overlapping_arrays(policy_abi: Abi) -> None:
    arrays = policy_arrays(policy_abi)
    arrays["desire"] = np.zeros((1, 25, 16), np.float32)[:, :, ::2]
    shared = np.zeros((1, 2), np.float32)
    arrays["traffic_convention"] = shared
    arrays["lateral_control_params"] = shared
    with pytest.raises(AbiError) as e:
        validate(arrays, policy_abi)
    got = fields(e.value)
    assert ("desire", "contiguity") in got
    assert any(f == "overlap" for _, f in got)


def test_inputs_bind_by_name_not_position(policy_abi: Abi) -> None:
    arrays = policy_arrays(policy_abi)
    reordered = dict(reversed(list(arrays.items())))
    validate(reordered, policy_abi)
    packed = pack_inputs(reordered, policy_abi)["inputs"]
    tc = policy_abi.input("traffic_convention")
    assert bytes(packed[tc.offset:tc.end]) == arrays["traffic_convention"].tobytes()


# --- validation: one packed buffer ----------------------------------------------------------------------------

def test_packed_buffer(policy_abi: Abi) -> None:
    arrays = policy_arrays(policy_abi)
    buf = pack_inputs(arrays, policy_abi)["inputs"]
    assert len(buf) == 52260
    validate(bytes(buf), policy_abi)
    validate(np.frombuffer(bytes(buf), np.uint8), policy_abi)
    with pytest.raises(AbiError) as e:
        validate(bytes(buf[:-4]), policy_abi)
    assert {("inputs", "byte_size"), ("prev_desired_curv", "offset")} <= fields(e.value)
    bad = bytearray(buf)
    off = policy_abi.input("desire").offset
    bad[off:off + 4] = np.array([np.nan], np.float32).tobytes()
    with pytest.raises(AbiError) as e:
        validate(bad, policy_abi)
    assert fields(e.value) == {("desire", "values")}
    with pytest.raises(AbiError) as e:
        validate(np.zeros((2, len(buf)), np.uint8)[:, 0], policy_abi)
    assert ("inputs", "contiguity") in fields(e.value)


def test_packed_layout_errors(policy_abi: Abi) -> None:
    d = policy_abi.to_dict()
    d["inputs"][1]["offset"] = 51136          # desire now overlaps the end of features_buffer
    d["inputs"][2]["offset"] = 52036          # not a multiple of 64
    abi = Abi.from_dict(d)
    with pytest.raises(AbiError) as e:
        validate(bytes(abi.buffer_sizes()["inputs"]), abi)
    assert {("desire", "offset"), ("traffic_convention", "offset")} <= fields(e.value)


def test_several_buffers_need_validate_packed() -> None:
    abi = Abi((TensorSpec("a", "float32", (4,), "one"), TensorSpec("b", "uint8", (8,), "two")))
    with pytest.raises(AbiError) as e:
        validate(b"\0" * 16, abi)
    assert fields(e.value) == {("<abi>", "buffers")}
    validate_packed({"one": bytes(16), "two": bytes(8)}, abi)
    with pytest.raises(AbiError) as e:
        validate_packed({"one": bytes(16)}, abi)
    assert fields(e.value) == {("two", "presence")}


# --- the field failures, end to end ---------------------------------------------------------------------------

def test_swapped_positional_inputs_are_caught() -> None:
    """Two same-shape inputs swapped in graph order: a positional binder sees no difference; drivepack does."""
    old = policy_model()
    new = policy_model()
    ins = new.graph.input
    a = [i for i, x in enumerate(ins) if x.name == "traffic_convention"][0]
    b = [i for i, x in enumerate(ins) if x.name == "lateral_control_params"][0]
    va, vb = onnx.ValueInfoProto(), onnx.ValueInfoProto()
    va.CopyFrom(ins[a])
    vb.CopyFrom(ins[b])
    ins[a].CopyFrom(vb)
    ins[b].CopyFrom(va)
    old_abi, new_abi = infer_abi(old), infer_abi(new)
    positional = [[(s.dtype, s.shape) for s in x.inputs] for x in (old_abi, new_abi)]
    assert positional[0] == positional[1]
    changes = diff(old_abi, new_abi)
    moved = {(c.name, c.kind, c.field, c.severity) for c in changes}
    assert moved == {("traffic_convention", "moved", "offset", "breaking"),
                     ("lateral_control_params", "moved", "offset", "breaking")}


def test_history_length_drift_with_same_size_buffer() -> None:
    """Field failure: same bytes, different meaning (history 24 vs 25): only the recorded meaning catches it."""
    trained = infer_abi(policy_model())
    d = trained.to_dict()
    d["inputs"][0]["history"]["length"] = 24
    drifted = Abi.from_dict(d)
    assert drifted.input("features_buffer").byte_size == trained.input("features_buffer").byte_size
    (change,) = diff(trained, drifted)
    assert (change.kind, change.field, change.old, change.new, change.severity) == \
        ("meaning", "history.length", "25", "24", "breaking")
