"""`drivepack vehicle list / check / new / nv12`: text and JSON reports, exit codes 0 / 1 / 2, one-line errors,
and every sub-command's --help ending with its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abi.frames import nv12_geometry
from abi.vehicle import VEHICLES_DIR, available_vehicles, load_vehicle
from packager.cli import main

COMMA3X = (VEHICLES_DIR / "comma3x.yaml").read_text()
# three problems, in line order: a schema one, a camera-geometry one and an input-layout one
BROKEN = {"device: {name: tizi,": "device: {name: tici3,", "    nv12: {stride: 2048": "    nv12: {stride: 2047",
          "        offset: 52096": "        offset: 52100"}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def broken_profile(tmp_path: Path) -> Path:
    text = COMMA3X
    for old, new in BROKEN.items():
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / "comma3x.yaml"
    path.write_text(text)
    return path


def test_list_names_every_shipped_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["vehicle", "list"], capsys)
    assert code == 0
    heads = [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")]
    assert heads == available_vehicles()
    assert "comma3x: device tizi (sdm845/adreno630), target qcom:adreno630" in out
    assert "  cameras: road 1344x760, wide 1344x760, driver 1344x760" in out  # comma4


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["vehicle", "list", "--json"], capsys)
    docs = {d["name"]: d for d in json.loads(out)["vehicles"]}
    assert code == 0 and sorted(docs) == available_vehicles()
    c3x = docs["comma3x"]
    assert c3x["device"] == {"name": "tizi", "soc": "sdm845", "gpu": "adreno630"}
    assert c3x["target"] == {"name": "qcom", "arch": "adreno630", "emulated_dtypes": [], "images": True,
                             "float16": True}
    assert c3x["cameras"][0] == {"name": "road", "width": 1928, "height": 1208}
    assert {r["name"]: r["generation"] for r in c3x["roles"]} == \
        {r.name: r.generation for r in load_vehicle("comma3x").roles.values()}
    assert docs["pc-cpu"]["target"]["arch"] is None


def test_check_reports_several_problems_in_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = broken_profile(tmp_path)
    text = path.read_text()
    code, out, err = run(["vehicle", "check", str(path)], capsys)
    assert code == 1 and err == ""
    lines = out.splitlines()
    lines_no = [next(i + 1 for i, t in enumerate(text.splitlines()) if new.strip() in t) for new in BROKEN.values()]
    assert lines[:3] == [
        f"{path}:{lines_no[0]}: device.name: expected one of 'tici', 'tizi', 'mici', 'pc', got 'tici3'",
        f"{path}:{lines_no[1]}: cameras.road.nv12.stride: expected 2048 (VisionIPC NV12 for 1928x1208), got 2047",
        f"{path}:{lines_no[2]}: roles.policy.inputs.lateral_control_params.offset: expected a multiple of "
        "alignment 64, got 52100"]
    assert lines[3:] == ["vehicle check: 3 problems in 1 of 1 file"]


def test_check_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = broken_profile(tmp_path)
    code, out, _ = run(["vehicle", "check", str(path), "comma4", "--json"], capsys)
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert report["files"] == [{"file": str(path), "readable": True, "ok": False, "problems": 3},
                               {"file": "comma4", "readable": True, "ok": True, "problems": 0}]
    problems = report["problems"]
    assert [p["key"] for p in problems] == ["device.name", "cameras.road.nv12.stride",
                                            "roles.policy.inputs.lateral_control_params.offset"]
    for p in problems:
        assert set(p) == {"file", "line", "key", "expected", "got", "message"}
        assert p["file"] == str(path) and isinstance(p["line"], int) and p["line"] > 0
        assert p["message"] == f"expected {p['expected']}, got {p['got']}"
    assert (problems[1]["expected"], problems[1]["got"]) == ("2048 (VisionIPC NV12 for 1928x1208)", "2047")


def test_check_clean_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["vehicle", "check", str(VEHICLES_DIR / "comma3x.yaml"), "pc-cpu"], capsys)
    assert code == 0
    assert out.splitlines() == [f"{VEHICLES_DIR / 'comma3x.yaml'}: ok", "pc-cpu: ok", "vehicle check: ok"]


def test_check_unreadable_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: drivepack.vehicle/1\nname: [unclosed\n")
    broken = broken_profile(tmp_path)
    code, out, _ = run(["vehicle", "check", str(bad), str(broken), "comma3xx", "--json"], capsys)
    report = json.loads(out)
    assert code == 2 and report["ok"] is False
    assert [(f["readable"], f["problems"]) for f in report["files"]] == [(False, 1), (True, 3), (False, 1)]
    first, last = report["problems"][0], report["problems"][-1]
    assert first["file"] == str(bad) and first["line"] == 3 and first["got"].startswith("invalid YAML")
    assert last["key"] == "vehicle" and "did you mean 'comma3x'?" in last["message"]
    code, out, _ = run(["vehicle", "check", str(bad)], capsys)
    assert code == 2 and out.splitlines()[0].startswith(f"{bad}:3: <top>: invalid YAML")
    assert out.splitlines()[-1] == "vehicle check: 1 problem in 1 of 1 file (1 unreadable)"


def test_new_writes_a_copy_that_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "mycar.yaml"
    code, out, _ = run(["vehicle", "new", "mycar", "--from", "comma4", "-o", str(out_path), "--json"], capsys)
    assert code == 0
    assert json.loads(out) == {"name": "mycar", "base": "comma4", "path": str(out_path), "ok": True}
    text = out_path.read_text()
    assert "\nname: mycar\n" in text and "name: comma4" not in text
    assert text.splitlines()[2:] == (VEHICLES_DIR / "comma4.yaml").read_text().replace(
        "name: comma4", "name: mycar").splitlines()
    profile = load_vehicle(out_path)
    assert profile.name == "mycar" and profile.roles.keys() == load_vehicle("comma4").roles.keys()
    code, out, _ = run(["vehicle", "check", str(out_path)], capsys)
    assert code == 0 and out.splitlines()[-1] == "vehicle check: ok"


def test_new_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "mycar.yaml"
    out_path.write_text("mine\n")
    code, out, err = run(["vehicle", "new", "mycar", "--from", "comma3x", "-o", str(out_path)], capsys)
    assert code == 2 and out == "" and out_path.read_text() == "mine\n"
    assert err.splitlines() == [f"drivepack: error: -o: expected a path that does not exist (vehicle new never "
                                f"overwrites), got {str(out_path)!r}"]


@pytest.mark.parametrize("argv, fragment", [
    (["new", "mycar", "--from", "coma3x"], "--from: expected a shipped profile (comma3, comma3x, comma4, pc-cpu, "
                                           "pc-opencl), got 'coma3x' (did you mean comma3x?)"),
    (["new", "My.Car", "--from", "comma3x"], "NAME: expected a profile name matching '[a-z0-9][a-z0-9_-]*', got "
                                             "'My.Car'"),
    (["new", "mycar", "--from", "comma3x", "-o", "{tmp}/other.yaml"], "-o: expected a file named mycar.yaml"),
    (["new", "mycar", "--from", "comma3x", "-o", "{tmp}/no/mycar.yaml"], "-o: expected a path in an existing folder"),
    (["new", "mycar"], "the following arguments are required: --from"),
    (["nv12", "1927", "1208"], "nv12: width expected a positive even int, got 1927"),
    (["nv12", "-2", "4"], "nv12: width expected a positive even int, got -2"),
    (["nv12", "wide", "4"], "argument W: invalid int value: 'wide'"),
    (["check"], "the following arguments are required: FILE"),
    ([], "the following arguments are required: <action>"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                           fragment: str) -> None:
    code, out, err = run(["vehicle", *[a.replace("{tmp}", str(tmp_path)) for a in argv]], capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("drivepack: error: ") and fragment in lines[0], err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("w, h", [(1928, 1208), (1344, 760)])
def test_nv12(w: int, h: int, capsys: pytest.CaptureFixture[str]) -> None:
    g = nv12_geometry(w, h)
    code, out, _ = run(["vehicle", "nv12", str(w), str(h), "--json"], capsys)
    assert code == 0
    assert json.loads(out) == {"width": w, "height": h, "stride": g.stride, "y_height": g.y_height,
                               "uv_height": g.uv_height, "uv_offset": g.uv_offset, "size": g.size}
    code, out, _ = run(["vehicle", "nv12", str(w), str(h)], capsys)
    assert code == 0 and out.splitlines()[0] == f"VisionIPC NV12 buffer for {w}x{h}:"
    assert out.splitlines()[-1] == (f"profile: nv12: {{stride: {g.stride}, y_height: {g.y_height}, uv_height: "
                                    f"{g.uv_height}, uv_offset: {g.uv_offset}, size: {g.size}}}")


def test_nv12_known_values(capsys: pytest.CaptureFixture[str]) -> None:
    # DESIGN.md's VisionIPC facts
    code, out, _ = run(["vehicle", "nv12", "1928", "1208", "--json"], capsys)
    g = json.loads(out)
    assert code == 0 and (g["stride"], g["uv_offset"], g["size"]) == (2048, 2490368, 4804608)
    code, out, _ = run(["vehicle", "nv12", "1344", "760", "--json"], capsys)
    g = json.loads(out)
    assert code == 0 and (g["stride"], g["uv_offset"], g["size"]) == (1408, 1081344, 2428928)


@pytest.mark.parametrize("action, codes", [("list", "02"), ("check", "012"), ("new", "02"), ("nv12", "02"),
                                           (None, "012")])
def test_help_ends_with_exit_codes(action: str | None, codes: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["vehicle", *([action] if action else []), "--help"], capsys)
    assert code == 0
    tail = out.rstrip().split("exit codes:")[-1].splitlines()[1:]
    assert "exit codes:" in out and [line.split()[0] for line in tail] == [*codes, "141"]


def test_abi_check_suggests_a_vehicle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.abi.json"
    model.write_text('{"inputs": [], "outputs": []}')
    code, _, err = run(["abi-check", str(model), "--vehicle", "comma3xx"], capsys)
    assert code == 2 and "vehicle: expected one of comma3, comma3x" in err and "did you mean 'comma3x'?" in err
