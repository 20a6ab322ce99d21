"""Vehicle profiles: the shipped YAML files, their schema, line-numbered errors, and the sample models on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from abi.check import check_role, match_role, passed
from abi.errors import ProfileError
from abi.infer import infer_abi
from abi.schema import SchemaDefinitionError, check
from abi.vehicle import VEHICLES_DIR, available_vehicles, load_vehicle
from packager.samples import policy_model, vision_model

COMMA3X = (VEHICLES_DIR / "comma3x.yaml").read_text()


def test_shipped_profiles() -> None:
    assert available_vehicles() == ["comma3", "comma3x", "comma4", "pc-cpu", "pc-opencl"]
    p = load_vehicle("comma3x")
    assert (p.device["name"], p.target, p.target_arch, p.images, p.float16, p.emulated_dtypes) == \
        ("tizi", "qcom", "adreno630", True, True, ())
    assert (p.frame_rate_hz, p.frame_budget_ms, p.model_mean_ms, p.model_max_ms) == (20, 50, 25, 35)
    assert set(p.cameras) == {"road", "wide", "driver"}
    road = p.cameras["road"]
    assert (road.width, road.height, road.sensors, road.fx) == (1928, 1208, ("AR0231", "OX03C10"), 2648.0)
    assert load_vehicle("comma3").target_arch == "adreno630"
    c4 = load_vehicle("comma4")
    assert (c4.device["name"], c4.cameras["road"].width, c4.cameras["road"].height) == ("mici", 1344, 760)
    assert c4.cameras["road"].sensors == ("OS04C10",)
    assert load_vehicle("pc-opencl").target == "opencl"
    assert load_vehicle("pc-cpu").target == "cpu"


# openpilot's device types: tici = comma three, tizi = comma 3X, mici = comma four
@pytest.mark.parametrize("vehicle, device", [("comma3", "tici"), ("comma3x", "tizi"), ("comma4", "mici"),
                                             ("pc-cpu", "pc"), ("pc-opencl", "pc")])
def test_device_names_are_openpilots(vehicle: str, device: str) -> None:
    assert load_vehicle(vehicle).device["name"] == device


@pytest.mark.parametrize("vehicle, target, images, float16", [
    ("comma3", "qcom", True, True), ("comma3x", "qcom", True, True), ("comma4", "qcom", True, True),
    ("pc-cpu", "cpu", False, False), ("pc-opencl", "opencl", False, False)])
def test_compile3_defaults(vehicle: str, target: str, images: bool, float16: bool) -> None:
    """What openpilot builds by default: float16 compute and weights as images on the Adreno (FLOAT16=1
    IMAGE=2); a PC computes in float32 with plain buffers (PoCL has no fp16)."""
    p = load_vehicle(vehicle)
    assert (p.target, p.images, p.float16) == (target, images, float16)


def test_role_abis_hold_the_runtime_facts() -> None:
    p = load_vehicle("comma3x")
    policy = p.roles["policy"].abi
    for name in ("features_buffer", "desire", "prev_desired_curv"):
        h = policy.input(name).history
        assert h is not None and (h.length, h.skip) == (25, 4)
    vision = p.roles["vision"].abi
    assert [s.byte_size for s in vision.inputs] == [393216, 393216]
    dm = p.roles["dmonitoring"].abi
    assert (dm.input("input_img").dtype, dm.input("input_img").shape) == ("uint8", (1, 1382400))
    assert (dm.input("calib").dtype, dm.input("calib").shape) == ("float32", (1, 3))
    assert (p.roles["vision"].budget_mean_ms, p.roles["policy"].budget_mean_ms) == (20, 5)


@pytest.mark.parametrize("vehicle", ["comma3x", "comma3", "pc-cpu", "pc-opencl", "comma4"])
def test_sample_models_check_clean(vehicle: str) -> None:
    profile = load_vehicle(vehicle)
    for role, model in (("vision", vision_model()), ("policy", policy_model())):
        abi = infer_abi(model)
        assert match_role(abi, profile) == role
        rows = check_role(abi, profile.roles[role])
        assert passed(rows), [r for r in rows if r.verdict != "ok"]


def write(tmp_path: Path, text: str, name: str = "comma3x") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def line_of(text: str, needle: str, nth: int = 1) -> int:
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return lines[nth - 1]


@pytest.mark.parametrize("old, new, key, message", [
    ("frame_rate_hz: 20", "frame_rate_hz: 20\nwheels: 4", "wheels", "unknown key"),
    ("        dtype: uint8", "        dtype: uint9", "roles.vision.inputs.input_imgs.dtype", "got 'uint9'"),
    ("    nv12: {stride: 2048", "    nv12: {stride: 2047", "cameras.road.nv12.stride", "expected 2048"),
    ("        offset: 393216", "        offset: 393152", "roles.vision.inputs.big_input_imgs.offset", "overlap"),
    ("        offset: 52096", "        offset: 52100", "roles.policy.inputs.lateral_control_params.offset",
     "multiple of alignment 64"),
    ("camera: {camera: wide,", "camera: {camera: rear,", "roles.vision.inputs.big_input_imgs.camera.camera",
     "got 'rear'"),
    ("options: {EMULATED_DTYPES: []", "options: {EMULATED_DTYPES: [quad]", "target.options.EMULATED_DTYPES",
     "quad"),
    ("name: comma3x", "name: comma9", "name", "file name"),
    ("budget_ms: {mean: 20, max: 28}", "budget_ms: {mean: 30, max: 28}", "roles.vision.budget_ms.mean", "<= max"),
    ("        shape: [1, 25, 512]", "        shape: [1, 25, 512]\n        strides: [4]",
     "roles.policy.inputs.features_buffer.strides", "C-contiguous"),
    ("device: {name: tizi,", "device: {name: tici3,", "device.name", "got 'tici3'"),
    ("images: true, float16: true}", "images: true, float16: 1}", "target.options.float16", "expected boolean"),
    ("    generation: split-0.10", "    generation: split-0.7", "roles.vision.generation", "got 'split-0.7'"),
    ("    generation: split-0.10", "    generation: supercombo-0.11", "roles.vision.generation",
     "expected generation 'split-0.10' for role vision, got 'supercombo-0.11'"),
    ("    budget_ms: {mean: 15, max: 25}", "    budget_ms: {mean: 15, max: 25}\n    generation: split-pipeline",
     "roles.dmonitoring.generation", "expected no generation for role dmonitoring"),
    ("feeds: {hidden_state: policy.features_buffer}", "feeds: {pose: policy.features_buffer}",
     "roles.vision.outputs.outputs.feeds.pose", "expected slice length 512"),
    ("feeds: {hidden_state: policy.features_buffer}", "feeds: {hidden: policy.features_buffer}",
     "roles.vision.outputs.outputs.feeds.hidden", "expected a slice of outputs.outputs (plan,"),
    ("feeds: {hidden_state: policy.features_buffer}", "feeds: {hidden_state: policy.traffic_convention}",
     "roles.vision.outputs.outputs.feeds.hidden_state",
     "expected a history input of role policy (features_buffer, desire, prev_desired_curv)"),
    ("feeds: {hidden_state: policy.features_buffer}", "feeds: {hidden_state: planner.features_buffer}",
     "roles.vision.outputs.outputs.feeds.hidden_state", "expected a role of this profile"),
    ("feeds: {hidden_state: policy.features_buffer}", "feeds: {hidden_state: features_buffer}",
     "roles.vision.outputs.outputs.feeds.hidden_state", "expected a history input of role vision (none)"),
    ("feeds: {hidden_state: policy.features_buffer}", "feeds: {hidden_state: Policy features}",
     "roles.vision.outputs.outputs.feeds.hidden_state", "expected a string matching"),
])
def test_bad_profile_names_file_line_and_key(tmp_path: Path, old: str, new: str, key: str, message: str) -> None:
    assert old in COMMA3X
    text = COMMA3X.replace(old, new, 1)
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as e:
        load_vehicle(path)
    err = e.value
    assert err.file == str(path) and err.key == key, str(err)
    assert message in str(err)
    assert err.line == line_of(text, new.splitlines()[-1].strip())
    assert str(err).startswith(f"{path}:{err.line}: {key}: ")


def test_error_line_is_the_offending_line(tmp_path: Path) -> None:
    text = COMMA3X.replace("        dtype: uint8", "        dtype: uint9", 1)
    with pytest.raises(ProfileError) as e:
        load_vehicle(write(tmp_path, text))
    assert e.value.line == line_of(text, "dtype: uint9")


@pytest.mark.parametrize("text, line, fragment", [
    ("schema: drivepack.vehicle/1\nname: x\nname: y\n", 3, "duplicate key 'name'"),
    ("schema: drivepack.vehicle/1\nname: [unclosed\n", 3, "invalid YAML"),
    ("- just\n- a list\n", 1, "expected object"),
])
def test_malformed_yaml(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_vehicle(write(tmp_path, text, "x"))
    assert e.value.line == line and fragment in str(e.value)


def test_missing_required_key(tmp_path: Path) -> None:
    text = COMMA3X.replace("frame_rate_hz: 20\n", "")
    with pytest.raises(ProfileError) as e:
        load_vehicle(write(tmp_path, text))
    assert e.value.key == "frame_rate_hz" and "required key is missing" in str(e.value)


def test_yaml_cannot_construct_objects(tmp_path: Path) -> None:
    text = COMMA3X.replace("name: comma3x", "name: !!python/object/apply:os.system ['echo pwned']")
    with pytest.raises(ProfileError) as e:
        load_vehicle(write(tmp_path, text))
    assert "invalid YAML" in str(e.value)


def test_unknown_vehicle_lists_the_known_ones() -> None:
    with pytest.raises(ProfileError) as e:
        load_vehicle("comma9")
    assert "comma3x" in str(e.value) and "pc-cpu" in str(e.value)


def test_schema_checker_refuses_keywords_it_does_not_implement() -> None:
    with pytest.raises(SchemaDefinitionError):
        check({"a": 1}, {"type": "object", "oneOf": []})
    assert [v.message for v in check({"a": "x"}, {"properties": {"a": {"type": "integer"}}})] == \
        ["expected integer, got str 'x'"]
