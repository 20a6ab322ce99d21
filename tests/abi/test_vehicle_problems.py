"""Every problem of a vehicle profile in one run: schema problems and the semantic checks of abi/vehicle.py
together, in line order, each naming its file, line and key with what was expected and what was found; a bad
profile still loads as one one-line ProfileError naming the first problem, and a wrong name suggests a known one."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from abi.errors import ProfileError
from abi.frames import nv12_geometry
from abi.infer import infer_abi
from abi.records import TensorSpec
from abi.schema import check
from abi.vehicle import (
    DEFAULT_ALIGNMENT,
    MAX_LISTED_PROBLEMS,
    VEHICLES_DIR,
    ProfileProblem,
    ProfileProblems,
    available_vehicles,
    check_vehicle,
    load_vehicle,
)

COMMA3X = (VEHICLES_DIR / "comma3x.yaml").read_text()

# (old, new, key of the problem it makes, fragment of its message): schema problems and semantic ones mixed
EDITS = [
    ("device: {name: tizi,", "device: {name: tici3,", "device.name", "got 'tici3'"),
    ("frame_rate_hz: 20", "frame_rate_hz: .nan", "frame_rate_hz", "expected a finite number >= 1, got nan"),
    ("    nv12: {stride: 2048", "    nv12: {stride: 2047", "cameras.road.nv12.stride",
     "expected 2048 (VisionIPC NV12 for 1928x1208), got 2047"),
    ("budget_ms: {mean: 20, max: 28}", "budget_ms: {mean: 30, max: 28}", "roles.vision.budget_ms.mean",
     "expected <= max 28, got 30"),
    ("feeds: {hidden_state: policy.features_buffer}", "feeds: {pose: policy.features_buffer}",
     "roles.vision.outputs.outputs.feeds.pose", "expected slice length 512"),
    ("        offset: 52096", "        offset: 52100", "roles.policy.inputs.lateral_control_params.offset",
     "expected a multiple of alignment 64, got 52100"),
]


def write(tmp_path: Path, text: str, name: str = "comma3x") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def edited(edits: list[tuple[str, str, str, str]]) -> str:
    text = COMMA3X
    for old, new, _, _ in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def line_of(text: str, needle: str) -> int:
    return next(i + 1 for i, line in enumerate(text.splitlines()) if needle in line)


def test_every_problem_in_one_run_in_line_order(tmp_path: Path) -> None:
    text = edited(EDITS)
    path = write(tmp_path, text)
    profile, problems = check_vehicle(path)
    assert profile is None
    assert [p.key for p in problems] == [key for _, _, key, _ in EDITS]
    for p, (_, new, _, fragment) in zip(problems, EDITS, strict=True):
        assert p.file == str(path) and p.line == line_of(text, new.strip()), p
        assert fragment in p.message and p.message == f"expected {p.expected}, got {p.got}", p
        assert str(p) == f"{path}:{p.line}: {p.key}: {p.message}"


def test_load_raises_one_line_naming_the_first_and_the_others(tmp_path: Path) -> None:
    text = edited(EDITS)
    path = write(tmp_path, text)
    with pytest.raises(ProfileProblems) as e:
        load_vehicle(path)
    err, (first, *rest) = e.value, e.value.problems
    assert isinstance(err, ProfileError) and len(e.value.problems) == len(EDITS)
    assert (err.file, err.line, err.key) == (first.file, first.line, first.key)
    msg = str(err)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:{first.line}: {first.key}: {first.message} ({len(EDITS)} problems; also ")
    for p in rest:
        assert f"line {p.line}: {p.key}: {p.message}" in msg


def test_a_single_problem_reads_as_before(tmp_path: Path) -> None:
    path = write(tmp_path, edited(EDITS[2:3]))
    with pytest.raises(ProfileProblems) as e:
        load_vehicle(path)
    assert str(e.value) == f"{path}:{e.value.line}: cameras.road.nv12.stride: expected 2048 (VisionIPC NV12 for " \
                           "1928x1208), got 2047"


def test_many_problems_are_counted_past_the_listed_ones(tmp_path: Path) -> None:
    text = COMMA3X.replace("alignment: 64", "alignment: 48")  # every input: not a power of two
    n = COMMA3X.count("alignment: 64")
    assert n > MAX_LISTED_PROBLEMS
    _, problems = check_vehicle(write(tmp_path, text))
    assert len(problems) == n and all(p.key.endswith(".alignment") and p.got == "48" for p in problems)
    with pytest.raises(ProfileProblems) as e:
        load_vehicle(tmp_path / "comma3x.yaml")
    assert str(e.value).endswith(f"; {n - MAX_LISTED_PROBLEMS} more)")


def test_a_value_the_schema_refused_is_not_checked_again(tmp_path: Path) -> None:
    # NaN is refused by the schema (bounded) and by the finite scan: reported once; a width that is not an
    # integer is the schema's problem, never a crash of the even-size or intrinsics checks
    text = COMMA3X.replace("frame_rate_hz: 20", "frame_rate_hz: .nan").replace("    width: 1928", "    width: wide", 1)
    _, problems = check_vehicle(write(tmp_path, text))
    assert [(p.key, p.expected) for p in problems] == [("frame_rate_hz", "a finite number >= 1"),
                                                       ("cameras.road.width", "integer")]


def test_every_field_of_one_input_is_reported(tmp_path: Path) -> None:
    old = "        byte_size: 51200\n"
    new = "        byte_size: 51204\n        strides: [4]\n"
    assert old in COMMA3X
    _, problems = check_vehicle(write(tmp_path, COMMA3X.replace(old, new, 1)))
    assert [p.key for p in problems] == ["roles.policy.inputs.features_buffer.byte_size",
                                         "roles.policy.inputs.features_buffer.strides"]


def test_feeds_are_checked_when_the_role_has_other_problems(tmp_path: Path) -> None:
    text = COMMA3X.replace("value_range: [0, 255]", "value_range: [255, 0]", 1)
    text = text.replace("feeds: {hidden_state: policy.features_buffer}", "feeds: {hidden: policy.features_buffer}")
    _, problems = check_vehicle(write(tmp_path, text))
    assert [p.key for p in problems] == ["roles.vision.inputs.input_imgs.camera.value_range",
                                         "roles.vision.outputs.outputs.feeds.hidden"]
    assert problems[0].expected == "(low, high) with low < high" and problems[0].got == "(255, 0)"


@pytest.mark.slow
@pytest.mark.parametrize("start", range(9))
def test_a_profile_missing_any_line_never_crashes(tmp_path: Path, start: int) -> None:
    lines = COMMA3X.splitlines()
    for i in range(start, len(lines), 9):
        path = write(tmp_path, "\n".join(lines[:i] + lines[i + 1:]) + "\n")
        try:
            profile, problems = check_vehicle(path)
        except ProfileError:  # unparseable YAML: nothing to check
            continue
        assert (profile is None) == bool(problems), lines[i]
        assert all(isinstance(p, ProfileProblem) and p.file == str(path) for p in problems)


def test_unknown_name_names_the_field_and_suggests() -> None:
    with pytest.raises(ProfileError) as e:
        load_vehicle("comma3xx")
    assert e.value.key == "vehicle"
    msg = str(e.value)
    assert msg.startswith("comma3xx: vehicle: expected one of " + ", ".join(available_vehicles()))
    assert msg.endswith("got 'comma3xx' (did you mean 'comma3x'?)")
    with pytest.raises(ProfileError) as e:
        load_vehicle("zzzz")
    assert "did you mean" not in str(e.value)


def test_schema_violations_keep_expected_and_got_apart() -> None:
    [v] = check({"a": "x"}, {"properties": {"a": {"type": "integer"}}})
    assert (v.key, v.expected, v.got, v.message) == ("a", "integer", "str 'x'", "expected integer, got str 'x'")
    [v] = check({}, {"type": "object", "required": ["b"]})
    assert (v.key, v.expected, v.got, v.message) == ("b", "the required key", "missing", "required key is missing")


def test_default_alignment_is_the_models_default() -> None:
    assert DEFAULT_ALIGNMENT == 64
    assert TensorSpec("x", "uint8", (1,)).alignment == DEFAULT_ALIGNMENT
    assert inspect.signature(infer_abi).parameters["alignment"].default == DEFAULT_ALIGNMENT


def test_readme_documents_the_nv12_formula_and_the_alignment_rule() -> None:
    readme = (VEHICLES_DIR / "README.md").read_text()
    for w, h in ((1928, 1208), (1344, 760)):
        g = nv12_geometry(w, h)
        for text in (f"align({w}, 128) = {g.stride}", f"align({h}, 32) = {g.y_height}",
                     f"align({h // 2}, 16) = {g.uv_height}", f"{g.stride} * {g.y_height} = {g.uv_offset:,}",
                     f"= {g.size:,} |"):
            assert text in readme, (w, h, text)
    for text in ("stride    = align(w, 128)", "uv_offset = stride * y_height", "DEFAULT_ALIGNMENT",
                 "drivepack vehicle new", "drivepack vehicle check", "drivepack vehicle nv12"):
        assert text in readme, text
