"""A corpus of bad vehicle profiles: deep nesting, aliases, huge files and numbers, NaN/Inf where a number has
bounds (and anywhere else), huge strings: each a one-line ProfileError naming FILE:LINE and the key, quoting at
most a short excerpt of the file, also through ``drivepack abi-check`` (exit 2, no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from abi.errors import EXCERPT_CHARS, ProfileError
from abi.schema import check
from abi.vehicle import VEHICLES_DIR, load_vehicle
from abi.yaml_lines import MAX_PROFILE_BYTES, MAX_YAML_DEPTH
from packager.cli import main

COMMA3X = (VEHICLES_DIR / "comma3x.yaml").read_text()
HUGE = "z" * 100_000


def _edit(old: str, new: str) -> str:
    assert old in COMMA3X, old
    return COMMA3X.replace(old, new, 1)


# name -> (profile text, line the error names (0: none, -1: the first edited line, a string: the line holding it),
# key, fragments of the message)
CORPUS: dict[str, tuple[str, int | str, str, tuple[str, ...]]] = {
    "deep_flow_list": ("schema: drivepack.vehicle/1\nname: x\nextra: " + "[" * 10_000 + "]" * 10_000 + "\n", 3,
                       "<top>", ("nesting expected at most MAX_YAML_DEPTH=32",)),
    "deep_block_list": ("schema: drivepack.vehicle/1\nname: x\nextra:\n  " + "- " * 10_000 + "1\n", 4, "<top>",
                        ("nesting expected at most MAX_YAML_DEPTH=32",)),
    "deep_mapping": ("a:\n" + "".join(" " * i + "b:\n" for i in range(1, 200)), MAX_YAML_DEPTH, "<top>",
                     ("nesting expected at most",)),
    "alias": ("schema: drivepack.vehicle/1\nname: &n x\nother: *n\n", 3, "<top>", ("aliases are not allowed",)),
    "huge_integer": (_edit("frame_rate_hz: 20", "frame_rate_hz: " + "9" * 5000), 0, "<top>",
                     ("invalid YAML", "4300 digits")),
    "nan_frame_rate": (_edit("frame_rate_hz: 20", "frame_rate_hz: .nan"), -1, "frame_rate_hz",
                       ("expected a finite number >= 1, got nan",)),
    "inf_frame_rate": (_edit("frame_rate_hz: 20", "frame_rate_hz: .inf"), -1, "frame_rate_hz",
                       ("expected a finite number >= 1, got inf",)),
    "nan_budget": (_edit("budget_ms: {mean: 20, max: 28}", "budget_ms: {mean: .nan, max: 28}"), -1,
                   "roles.vision.budget_ms.mean", ("expected a finite number >= 0, got nan",)),
    "neg_inf_intrinsic": (_edit("fx: 567.0", "fx: -.inf"), -1, "cameras.wide.intrinsics.fx",
                          ("expected a finite number >= 0, got -inf",)),
    "nan_value_range": (_edit("value_range: [0, 255]", "value_range: [0, .nan]"), -1,
                        "roles.vision.inputs.input_imgs.camera.value_range[1]", ("expected a finite number, got nan",)),
    "nan_in_untyped_override": (_edit("    budget_ms: {mean: 20, max: 28}\n",
                                      "    budget_ms: {mean: 20, max: 28}\n    model_overrides:\n"
                                      "      input_imgs: {camera: {value_range: [0, .nan]}}\n"), "[0, .nan]",
                                "roles.vision.model_overrides.input_imgs.camera.value_range[1]",
                                ("expected a finite number, got nan",)),
    "huge_enum_string": (_edit("        dtype: uint8", "        dtype: " + HUGE), -1,
                         "roles.vision.inputs.input_imgs.dtype", ("expected one of", "(100002 characters)")),
    "huge_pattern_string": (_edit("name: comma3x", "name: " + HUGE.upper()), -1, "name",
                            ("expected a string matching", "(100002 characters)")),
    # PyYAML itself refuses a plain key over 1024 characters
    "huge_unknown_key": (_edit("frame_rate_hz: 20", "frame_rate_hz: 20\n" + "z" * 1000 + ": 1"), -1,
                         "z" * EXCERPT_CHARS, ("unknown key", "... (1000 characters)")),
    "overlong_key": (_edit("frame_rate_hz: 20", "frame_rate_hz: 20\n" + HUGE + ": 1"), -1, "<top>",
                     ("invalid YAML: could not find expected ':'",)),
}


def _line(text: str, key: str) -> int:
    """The line the offending edit is on: the first line that differs from the shipped profile."""
    for i, (a, b) in enumerate(zip(text.splitlines(), COMMA3X.splitlines(), strict=False)):
        if a != b:
            return i + 1
    raise AssertionError(key)


@pytest.mark.parametrize("case", list(CORPUS))
def test_bad_profile_is_one_short_line(case: str, tmp_path: Path) -> None:
    text, line, key, fragments = CORPUS[case]
    path = tmp_path / "comma3x.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_vehicle(path)
    msg = str(e.value)
    want_line = _line(text, key) if line == -1 else \
        next(i + 1 for i, t in enumerate(text.splitlines()) if line in t) if isinstance(line, str) else line
    assert e.value.line == want_line, msg
    assert msg.startswith(f"{path}:{want_line}: " if want_line else f"{path}: "), msg
    assert (e.value.key or "<top>").startswith(key) if len(key) < EXCERPT_CHARS else key in msg, msg
    assert "\n" not in msg and len(msg) < len(str(path)) + 600, msg
    for f in fragments:
        assert f in msg, (f, msg)


@pytest.mark.parametrize("case", ["deep_flow_list", "nan_frame_rate", "huge_enum_string"])
def test_abi_check_prints_one_line_and_exits_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "comma3x.yaml"
    path.write_text(CORPUS[case][0])
    model = tmp_path / "m.abi.json"
    model.write_text('{"inputs": [], "outputs": []}')
    assert main(["abi-check", str(model), "--vehicle", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and len(err) < 700, err
    assert str(path) in err


def test_oversized_profile_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "comma3x.yaml"
    path.write_text(COMMA3X + "#" * MAX_PROFILE_BYTES)
    with pytest.raises(ProfileError, match=f"size expected <= MAX_PROFILE_BYTES={MAX_PROFILE_BYTES} bytes"):
        load_vehicle(path)


def test_schema_allows_non_finite_only_where_it_says_so() -> None:
    assert check(float("nan"), {"type": "number", "allowNonFinite": True}) == []
    assert [v.message for v in check(float("inf"), {"type": "number"})] == ["expected a finite number, got inf"]
    # a bound always refuses NaN: it would pass `nan < minimum` unnoticed
    bounded = check(float("nan"), {"type": "number", "minimum": 1, "allowNonFinite": True})
    assert [v.message for v in bounded] == ["expected a finite number >= 1, got nan"]


def test_shipped_profiles_still_load() -> None:
    for name in ("comma3x", "comma3", "comma4", "pc-cpu", "pc-opencl"):
        load_vehicle(name)
