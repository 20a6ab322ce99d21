"""Packages of several entries (issue 23 item 5): one file, one entry per model named by its role, each with its
own command buffer, weights, ABI and golden I/O; each replays bit-identically to its own single-model package.
Entry names are checked at load; so is the ABI's input layout; the per-slice accuracy report is stored and shown."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest

from packager.accuracy import slice_rows
from packager.build import BuildOptions, build_package
from packager.cli import main
from packager.container import Section, open_container, write_container
from packager.entries import entry_name_for
from packager.errors import PackageError
from packager.package import load_package, read_package_abi, read_package_abis
from packager.samples import POLICY_OUTPUT_SLICES, VISION_OUTPUT_SLICES, policy_model, sample_inputs, vision_model
from packager.signing import user_signing_key
from tests.packager.crafted import read_sections, rewrite, tiny_package

NAMES = ("vision", "policy")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two sample models, each packaged alone, and both in one package through the CLI (vision first)."""
    d = tmp_path_factory.mktemp("entries")
    out = {}
    for name, make in (("vision", vision_model), ("policy", policy_model)):
        onnx.save(make(), str(d / f"{name}.onnx"))
        out[name] = build_package(d / f"{name}.onnx", "pc-cpu", d / f"{name}.dpk", BuildOptions(golden_sets=1)).path
    out["both"] = d / "both.dpk"
    assert main(["package", str(d / "vision.onnx"), str(d / "policy.onnx"), "--vehicle", "pc-cpu", "-o",
                 str(out["both"]), "--golden-sets", "1", "--quiet"]) == 0
    return out


def test_each_entry_replays_bit_identically_to_its_own_package(built: dict[str, Path]) -> None:
    both = load_package(built["both"])
    assert both.entries == NAMES and both.signature is not None and both.signature.fingerprint
    c = both.container
    for name, make in (("vision", vision_model), ("policy", policy_model)):
        single = load_package(built[name])
        assert single.entries == (name,)
        # every section of the single-model package is in the two-model one, same bytes, named the same
        for s in open_container(built[name]).manifest["sections"]:
            assert bytes(c.view(s["name"])) == bytes(single.container.view(s["name"])), s["name"]
        e = both.entry(name)
        assert e.manifest.role == name and e.manifest.raw["model"]["name"] == f"{name}.onnx"
        fresh = sample_inputs(make(), seed=7)  # not a golden set: the replays themselves must agree
        for inputs in (dict(e.golden(0).inputs), fresh):
            got, want = both.make_replay(entry=name)(inputs), single.make_replay()(inputs)
            assert set(got) == set(want) == {"outputs"}
            assert got["outputs"].tobytes() == want["outputs"].tobytes()
        assert got["outputs"].tobytes() != single.golden(0).target["outputs"].tobytes()  # fresh inputs differ


def test_entry_is_required_with_two_entries_and_must_be_known(built: dict[str, Path]) -> None:
    both = load_package(built["both"])
    listed = r"entry: expected one of \['vision', 'policy'\]"
    for attempt in (both.make_replay, lambda: both.cmdbuf, lambda: both.golden(0), lambda: both.manifest.role):
        with pytest.raises(PackageError, match=rf"{listed} \(the package has 2 entries\), got none"):
            attempt()
    with pytest.raises(PackageError, match=rf"{listed}, got 'dmonitoring'"):
        both.make_replay(entry="dmonitoring")
    assert both.entry("policy").abi.input_names() == list(policy_model_inputs())


def policy_model_inputs() -> tuple[str, ...]:
    return tuple(i.name for i in policy_model().graph.input)


def test_replay_verify_and_inspect_on_two_entries(built: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(built["both"]), "--iters", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "entry: expected one of ['vision', 'policy'] (the package has 2 entries)" in err
    assert main(["replay", str(built["both"]), "--entry", "nope", "--iters", "1"]) == 2
    assert "got 'nope'" in capsys.readouterr().err
    assert main(["replay", str(built["both"]), "--entry", "policy", "--iters", "2", "--warmup", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["entry"] == "policy" and doc["deadline_ms"] == 5.0  # pc-cpu's policy budget, not vision's (45)
    assert main(["verify", str(built["both"])]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[1].strip() for line in out.splitlines() if line.startswith("verify ok")] == \
        ["entry vision", "entry policy"]
    for name in (*VISION_OUTPUT_SLICES, *POLICY_OUTPUT_SLICES):
        assert f"outputs[{name} " in out
    assert main(["verify", str(built["both"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and [e["entry"] for e in doc["entries"]] == list(NAMES)
    assert {r["slice"] for r in doc["entries"][1]["accuracy"]["slices"]} == set(POLICY_OUTPUT_SLICES)
    assert main(["inspect", str(built["both"])]) == 0
    out = capsys.readouterr().out
    assert "entries (2): vision, policy" in out and "entry vision: model vision.onnx" in out
    assert "entry policy: model policy.onnx" in out
    assert out.count(f"  golden reference: onnxruntime {onnxruntime.__version__}\n") == 2
    # the models' own string metadata_props, as openpilot's build writes them
    assert "metadata vision_model = " in out and "metadata policy_model = " in out
    assert main(["inspect", str(built["both"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(e["name"], e["role"], e["reference"]["kind"]) for e in doc["entries"]] == \
        [("vision", "vision", "onnxruntime"), ("policy", "policy", "onnxruntime")]
    assert "vision_model" in doc["entries"][0]["metadata"] and "policy_model" in doc["entries"][1]["metadata"]


def test_accuracy_report_per_slice_is_in_the_manifest(built: dict[str, Path]) -> None:
    entry = load_package(built["vision"]).manifest.entry("vision")
    assert entry.raw["accuracy"]["reference"] == "onnxruntime"
    rows = {r["slice"]: r for r in entry.accuracy}
    assert {k: (r["start"], r["stop"]) for k, r in rows.items()} == VISION_OUTPUT_SLICES
    assert all(r["ok"] and r["outside"] == 0 and 0 < r["max_abs_err"] < 1e-4 for r in rows.values())


def test_slice_rows_measure_errors_and_flag_slices_outside_tolerance() -> None:
    ref = {"o": np.array([[1.0, 2.0, 0.0, np.nan, 4.0, 8.0]], np.float32)}
    got = {"o": np.array([[1.0, 2.1, 1e-6, np.nan, 4.0, np.nan]], np.float32)}
    a, b, c = slice_rows([("o", (("a", 0, 2), ("b", 2, 4), ("c", 4, 6)))], {"o": (1e-3, 1e-4)}, [got], [ref])
    assert (a["slice"], a["outside"], a["ok"]) == ("a", 1, False)
    assert abs(a["max_abs_err"] - 0.1) < 1e-6 and abs(a["max_rel_err"] - 0.05) < 1e-6
    assert (b["outside"], b["ok"], b["max_rel_err"]) == (0, True, 0.0)  # |ref| below atol: judged absolutely
    assert 0 < b["max_abs_err"] < 1e-4
    assert (c["outside"], c["ok"], c["max_abs_err"]) == (1, False, 0.0)  # NaN against 8: outside, not a maximum
    [whole] = slice_rows([("o", ())], {"o": (0.0, 0.0)}, [ref], [ref])
    assert (whole["slice"], whole["start"], whole["stop"], whole["ok"]) == (None, 0, 6, True)
    tiny = slice_rows([("o", ())], {"o": (0.0, 0.0)}, [{"o": np.ones(1)}], [{"o": np.array([5e-324])}])
    json.dumps(tiny, allow_nan=False)  # a ratio that overflows is clipped: the manifest stays finite JSON
    assert tiny[0]["ok"] is False and tiny[0]["max_rel_err"] == np.finfo(np.float64).max


def test_two_models_of_one_role_are_an_error_naming_both(built: dict[str, Path], tmp_path: Path) -> None:
    src = built["vision"].parent / "vision.onnx"
    shutil.copy(src, tmp_path / "vision2.onnx")
    with pytest.raises(PackageError, match=rf"models: expected one model per entry \(role, else file name\), got "
                                           rf"{src} and {tmp_path / 'vision2.onnx'}: both match role 'vision' of "
                                           "pc-cpu"):
        build_package([src, tmp_path / "vision2.onnx"], "pc-cpu", tmp_path / "x.dpk")
    assert not (tmp_path / "x.dpk").exists()


def test_entry_names() -> None:
    assert entry_name_for("vision", "x.onnx") == "vision"
    assert entry_name_for(None, "tiny.onnx") == "tiny"
    assert entry_name_for(None, "my model (v2).onnx") == "my_model__v2_"
    assert entry_name_for(None, "a" * 80 + ".onnx") == "a" * 64


def test_package_abis_per_entry(built: dict[str, Path]) -> None:
    abis = read_package_abis(built["both"])
    assert list(abis) == list(NAMES) and [role for role, _ in abis.values()] == list(NAMES)
    assert [i["name"] for i in abis["vision"][1]["inputs"]] == ["input_imgs", "big_input_imgs"]
    with pytest.raises(PackageError, match=r"entry: expected one of \['vision', 'policy'\]"):
        read_package_abi(built["both"])
    assert read_package_abi(built["policy"]).input_names() == list(policy_model_inputs())


def test_abi_check_of_a_package_checks_each_entry_against_its_role(built: dict[str, Path],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["abi-check", str(built["both"]), "--vehicle", "comma3x"]) == 0
    out = capsys.readouterr().out
    assert "entry vision on comma3x (qcom), role vision (the entry's role; generation split-0.10" in out
    assert "entry policy on comma3x (qcom), role policy (the entry's role; generation split-0.10" in out
    assert out.count("abi-check: ok") == 2
    assert main(["abi-check", str(built["both"]), "--vehicle", "comma3x", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and [e["role"] for e in doc["entries"]] == list(NAMES)
    # forcing one role on both: the policy entry differs first in its first input
    assert main(["abi-check", str(built["both"]), "--vehicle", "comma3x", "--role", "vision"]) == 1
    assert "entry policy on comma3x (qcom), role vision (--role; generation" in capsys.readouterr().out


# --- crafted packages (the tiny model; every checksum and the signature valid) ---------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_package(tmp_path_factory.mktemp("tiny"))


def renamed(src: Path, dst: Path, name: Any) -> Path:
    """``src`` with its one entry renamed ``name``: the manifest, its kernel list and every section name."""
    doc, sections, align = read_sections(src)
    old = doc["entries"][0]["name"]
    doc["entries"][0]["name"] = name
    for k in doc["entries"][0]["kernels"]["list"]:
        k["section"] = f"{name}/{k['section'].removeprefix(f'{old}/')}"
    out = [Section(f"{name}/{s.name.removeprefix(f'{old}/')}", s.kind, s.data, s.attrs) for s in sections]
    write_container(dst, doc, out, align, sign=user_signing_key().sign)
    return dst


def test_an_entry_named_as_a_modeld_step_loads_and_replays(tiny: Path, tmp_path: Path) -> None:
    pkg = load_package(renamed(tiny, tmp_path / "step.dpk", "run@1928x1208"))  # issue 24's entry names
    assert pkg.entries == ("run@1928x1208",)
    g = pkg.golden(0)
    assert pkg.make_replay(entry="run@1928x1208")(g.inputs)["outputs"].tobytes() == g.target["outputs"].tobytes()


@pytest.mark.parametrize("name", ["bad/name", "", "a" * 65, "sp ace", "quote'", 7, None])
def test_bad_entry_names_are_refused_at_load(tiny: Path, tmp_path: Path, name: Any) -> None:
    bad = renamed(tiny, tmp_path / "bad.dpk", name) if isinstance(name, str) and name else \
        rewrite(tiny, tmp_path / "bad.dpk", manifest=lambda m: m["entries"][0].update(name=name))
    with pytest.raises(PackageError, match=r"manifest\.entries\[0\]\.name: expected an entry name of 1\.\.64 "
                                           r"characters from \[A-Za-z0-9_\.@x-\], got "):
        load_package(bad)


def test_duplicate_entries_and_stray_sections_are_refused(tiny: Path, tmp_path: Path) -> None:
    def twice(m: dict[str, Any]) -> None:
        m["entries"].append(copy.deepcopy(m["entries"][0]))

    with pytest.raises(PackageError, match=r"manifest\.entries\[1\]\.name: expected a name no other entry has, got "
                                           "'tiny' twice"):
        load_package(rewrite(tiny, tmp_path / "dup.dpk", manifest=twice))
    ghost = rewrite(tiny, tmp_path / "ghost.dpk", extra=[Section("ghost/weight/0", "weight", b"\0" * 4, {})])
    with pytest.raises(PackageError, match=r"sections: expected only the sections of entries \['tiny'\], got 1 more, "
                                           "first 'ghost/weight/0'"):
        load_package(ghost)


def _offset(name: str, offset: int) -> Any:
    def edit(m: dict[str, Any]) -> None:
        next(i for i in m["entries"][0]["abi"]["inputs"] if i["name"] == name)["offset"] = offset
    return edit


@pytest.mark.parametrize(("offset", "message"), [
    (65, "x: offset expected a multiple of alignment 64, got 65"),
    (64, r"x: offset expected >= 128 \(end of frame; no overlap\), got 64"),
])
def test_unaligned_or_overlapping_abi_offsets_are_refused(tiny: Path, tmp_path: Path, offset: int,
                                                          message: str) -> None:
    bad = rewrite(tiny, tmp_path / "layout.dpk", manifest=_offset("x", offset))
    with pytest.raises(PackageError, match=rf"manifest\.entries\[tiny\]\.abi\.inputs: {message}"):
        load_package(bad)
    load_package(rewrite(tiny, tmp_path / "far.dpk", manifest=_offset("x", 192)))  # aligned, apart: fine
