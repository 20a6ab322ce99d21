"""openpilot model generations as vehicle-profile roles: each generation's sample (packager/samples.py) passes
abi-check against its own role on every shipped profile, fails against another generation's role naming the
first differing field, and abi-check says which role and generation a model matched."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

from abi.check import EXTRA, MISMATCH, MISSING, check_role, first_difference, match_role, match_role_detail, passed
from abi.errors import AbiError, ProfileError
from abi.infer import infer_abi
from abi.records import Abi, TensorSpec
from abi.vehicle import GENERATIONS, ROLE_GENERATIONS, SCHEMA_PATH, VEHICLES_DIR, available_vehicles, load_vehicle
from packager.cli import main
from packager.samples import (
    POLICY_OUTPUT_SLICES,
    SAMPLES,
    SUPERCOMBO_OUTPUT_SLICES,
    VISION_OUTPUT_SLICES,
    float16_model,
    policy_pipeline_model,
    sample_inputs,
    supercombo_model,
    vision_model,
)

VEHICLES = available_vehicles()
GENERATION = {"vision": "split-0.10", "policy": "split-0.10", "vision_pipeline": "split-pipeline",
              "policy_pipeline": "split-pipeline", "supercombo": "supercombo-0.11"}
# (sample, role of another generation) -> the first row that differs: (row name, verdict)
FIRST_DIFFERENCE = {
    ("vision", "vision_pipeline"): ("input_imgs", MISSING),
    ("vision", "policy_pipeline"): ("input_imgs", MISSING),
    ("vision", "supercombo"): ("input_imgs", MISSING),
    ("policy", "vision_pipeline"): ("features_buffer", MISSING),
    ("policy", "policy_pipeline"): ("desire", MISSING),
    ("policy", "supercombo"): ("features_buffer.dtype", MISMATCH),
    ("vision_pipeline", "vision"): ("img", MISSING),
    ("vision_pipeline", "policy"): ("img", MISSING),
    ("vision_pipeline", "supercombo"): ("features_buffer", EXTRA),
    ("policy_pipeline", "vision"): ("features_buffer", MISSING),
    ("policy_pipeline", "policy"): ("desire_pulse", MISSING),
    ("policy_pipeline", "supercombo"): ("features_buffer.dtype", MISMATCH),
    ("supercombo", "vision"): ("img", MISSING),
    ("supercombo", "policy"): ("img", MISSING),
    ("supercombo", "vision_pipeline"): ("features_buffer", MISSING),
    ("supercombo", "policy_pipeline"): ("img", MISSING),
}


@pytest.fixture(scope="module")
def abis() -> dict[str, Abi]:
    return {name: infer_abi(build()) for name, build in SAMPLES.items()}


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("generations")
    paths = {}
    for name, build in SAMPLES.items():
        paths[name] = d / f"{name}.onnx"
        onnx.save(build(), paths[name])
    return paths


def test_every_profile_has_every_generations_roles() -> None:
    assert set(SAMPLES) == set(GENERATION) == {r for r, g in ROLE_GENERATIONS.items() if g}
    for vehicle in VEHICLES:
        roles = load_vehicle(vehicle).roles
        assert set(roles) == set(ROLE_GENERATIONS), vehicle
        assert {r: role.generation for r, role in roles.items()} == ROLE_GENERATIONS


@pytest.mark.parametrize("vehicle", VEHICLES)
@pytest.mark.parametrize("sample", sorted(GENERATION))
def test_sample_passes_its_role(abis: dict[str, Abi], vehicle: str, sample: str) -> None:
    profile = load_vehicle(vehicle)
    matched = match_role_detail(abis[sample], profile)
    assert (matched.role, matched.generation) == (sample, GENERATION[sample])
    assert match_role(abis[sample], profile) == sample
    rows = check_role(abis[sample], profile.roles[sample])
    assert passed(rows) and first_difference(rows) is None, [r for r in rows if r.verdict != "ok"]


def test_every_cross_generation_pair_is_listed() -> None:
    pairs = {(s, r) for s in GENERATION for r in GENERATION if GENERATION[s] != GENERATION[r]}
    assert set(FIRST_DIFFERENCE) == pairs


@pytest.mark.parametrize("vehicle", VEHICLES)
@pytest.mark.parametrize("sample, role", sorted(FIRST_DIFFERENCE))
def test_sample_fails_another_generations_role(abis: dict[str, Abi], vehicle: str, sample: str, role: str) -> None:
    rows = check_role(abis[sample], load_vehicle(vehicle).roles[role])
    first = first_difference(rows)
    assert not passed(rows) and first is not None
    assert (first.input, first.verdict) == FIRST_DIFFERENCE[(sample, role)]
    assert rows.index(first) == next(i for i, r in enumerate(rows) if r.verdict != "ok")


def test_history_lengths_tell_split_from_supercombo() -> None:
    """A float16 split-pipeline policy has the supercombo's dtypes, but 25 feature steps where the supercombo
    keeps 24 (it computes the newest itself): the first difference is the shape."""
    abi = infer_abi(float16_model(policy_pipeline_model()))
    first = first_difference(check_role(abi, load_vehicle("comma3x").roles["supercombo"]))
    assert first is not None and (first.input, first.expected, first.provided) == \
        ("features_buffer.shape", "(1, 25, 512)", "(1, 24, 512)")


def test_role_choice_uses_dtypes_and_shapes_after_names() -> None:
    profile = load_vehicle("comma3x")
    half = Abi((TensorSpec("features_buffer", "float16", (1, 24, 512)), TensorSpec("traffic_convention", "float16",
                                                                                   (1, 2))))
    assert match_role_detail(half, profile).role == "supercombo"  # three roles share both names; one the dtypes
    single = Abi((TensorSpec("features_buffer", "float32", (1, 25, 512)), TensorSpec("traffic_convention", "float32",
                                                                                     (1, 2))))
    with pytest.raises(AbiError, match="roles policy, policy_pipeline match equally"):
        match_role(single, profile)
    with pytest.raises(AbiError, match="no role shares an input name"):
        match_role(Abi((TensorSpec("steering", "float32", (1, 1)),)), profile)


def test_supercombo_role_records_the_feedback() -> None:
    for vehicle in VEHICLES:
        roles = load_vehicle(vehicle).roles
        sc = roles["supercombo"]
        (out,) = sc.outputs
        assert (out.dtype, out.size, out.slices["hidden_state"], out.feeds) == \
            ("float16", 2576, 512, {"hidden_state": "features_buffer"})
        assert sum(out.slices.values()) == 2576
        fb = sc.abi.input("features_buffer")
        assert fb.history is not None and (fb.dtype, fb.shape, fb.history.length, fb.history.skip) == \
            ("float16", (1, 24, 512), 24, 4)
        dp = sc.abi.input("desire_pulse").history
        assert dp is not None and (dp.length, dp.skip) == (25, 4)
        assert roles["vision"].outputs[0].feeds == {"hidden_state": "policy.features_buffer"}
        assert roles["vision_pipeline"].outputs[0].feeds == {"hidden_state": "policy_pipeline.features_buffer"}


def test_missing_generation_names_the_role(tmp_path: Path) -> None:
    text = (VEHICLES_DIR / "comma3x.yaml").read_text()
    old = "    generation: supercombo-0.11\n"
    assert text.count(old) == 1
    path = tmp_path / "comma3x.yaml"
    path.write_text(text.replace(old, ""))
    with pytest.raises(ProfileError) as e:
        load_vehicle(path)
    assert e.value.key == "roles.supercombo.generation"
    assert "expected generation 'supercombo-0.11' for role supercombo, got None" in str(e.value)
    assert e.value.line == text.splitlines().index("  supercombo:") + 1


def test_schema_names_the_generations_and_devices() -> None:
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    assert schema["$defs"]["role"]["properties"]["generation"]["enum"] == list(GENERATIONS)
    assert set(ROLE_GENERATIONS.values()) - {None} == set(GENERATIONS)
    assert schema["properties"]["device"]["properties"]["name"]["enum"] == ["tici", "tizi", "mici", "pc"]


def test_readme_documents_every_field() -> None:
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    names: set[str] = set()

    def walk(node: object) -> None:
        if not isinstance(node, dict):
            return
        for k, v in node.get("properties", {}).items():
            names.add(k)
            walk(v)
        for k in ("additionalProperties", "items"):
            walk(node.get(k))
        for v in node.get("$defs", {}).values():
            walk(v)

    walk(schema)
    readme = (VEHICLES_DIR / "README.md").read_text()
    assert {"generation", "feeds", "float16", "images"} <= names
    assert sorted(n for n in names if f"`{n}`" not in readme) == []
    assert all(f"`{r}`" in readme for r in ROLE_GENERATIONS) and all(f"`{g}`" in readme for g in GENERATIONS)


# --- the samples ---------------------------------------------------------------------------------------------

def _props(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_output_slices_are_written_as_openpilot_does(abis: dict[str, Abi], sample: str) -> None:
    props = _props(SAMPLES[sample]())
    # our own freshly built sample, so unpickling it here is safe; drivepack itself never does
    raw = pickle.loads(base64.b64decode(props["output_slices"]))
    assert all(isinstance(v, slice) and v.step is None for v in raw.values())
    (out,) = abis[sample].outputs
    assert [(k, v.start, v.stop) for k, v in raw.items()] == list(out.slices)
    assert ({"vision_model"} if "vision" in sample else set()) | \
        ({"policy_model"} if "policy" in sample else set()) <= set(props) - {"output_slices"}
    assert dict(abis[sample].metadata) == {k: v for k, v in props.items() if k != "output_slices"}


def test_split_010_slices_are_unchanged() -> None:
    assert VISION_OUTPUT_SLICES == {
        "plan": (0, 495), "lane_lines": (495, 623), "lane_lines_prob": (623, 631), "road_edges": (631, 695),
        "lead": (695, 797), "lead_prob": (797, 800), "desire_state": (800, 808), "meta": (808, 863),
        "pose": (863, 875), "hidden_state": (875, 1387)}
    assert POLICY_OUTPUT_SLICES == {"plan": (0, 495), "desire_state": (495, 503), "desired_curvature": (503, 504),
                                    "meta": (504, 559)}
    raw = pickle.loads(base64.b64decode(_props(vision_model())["output_slices"]))
    assert {k: (v.start, v.stop) for k, v in raw.items()} == VISION_OUTPUT_SLICES


def test_supercombo_layout() -> None:
    bounds = list(SUPERCOMBO_OUTPUT_SLICES.values())
    assert bounds[0][0] == 0 and bounds[-1][1] == 2576
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert SUPERCOMBO_OUTPUT_SLICES["hidden_state"] == (2064, 2576)
    abi = infer_abi(supercombo_model())
    assert [(s.name, s.dtype, s.shape) for s in abi.inputs] == [
        ("img", "uint8", (1, 12, 128, 256)), ("big_img", "uint8", (1, 12, 128, 256)),
        ("features_buffer", "float16", (1, 24, 512)), ("desire_pulse", "float16", (1, 25, 8)),
        ("traffic_convention", "float16", (1, 2)), ("action_t", "float16", (1, 2))]
    assert [(o.name, o.dtype, o.shape) for o in abi.outputs] == [("outputs", "float16", (1, 2576))]


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_samples_are_deterministic(sample: str) -> None:
    build = SAMPLES[sample]
    assert build().SerializeToString() == build().SerializeToString()
    default_seed = build.__defaults__[0]  # type: ignore[index]
    assert build(default_seed + 100).SerializeToString() != build().SerializeToString()  # type: ignore[call-arg]


def test_supercombo_hidden_state_feeds_the_next_call() -> None:
    """The hidden_state slice is this step's features (from the frames alone), and appending it to the history
    drives the next call: the loop the profile's ``feeds`` describes."""
    model = supercombo_model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a, b = SUPERCOMBO_OUTPUT_SLICES["hidden_state"]
    feeds = sample_inputs(model, seed=3)
    (first,) = sess.run(None, feeds)
    assert first.dtype == np.float16 and first.shape == (1, 2576) and np.isfinite(first).all()
    hidden = first[:, a:b]
    # the features history does not change this step's features, only the rest of the output
    other = dict(feeds, features_buffer=np.zeros_like(feeds["features_buffer"]))
    (second,) = sess.run(None, other)
    np.testing.assert_array_equal(second[:, a:b], hidden)
    assert not np.array_equal(second[:, :a], first[:, :a])
    fed = dict(feeds, features_buffer=np.concatenate([feeds["features_buffer"][:, 1:], hidden[:, None]], axis=1))
    (third,) = sess.run(None, fed)
    assert np.isfinite(third).all() and not np.array_equal(third[:, :a], first[:, :a])


# --- the abi-check command ------------------------------------------------------------------------------------

def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("sample", sorted(GENERATION))
def test_abi_check_names_role_and_generation(model_files: dict[str, Path], sample: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["abi-check", str(model_files[sample]), "--vehicle", "comma3x"], capsys)
    gen = GENERATION[sample]
    assert code == 0, out + err
    assert f"matched role {sample} (generation {gen}: {GENERATIONS[gen]}) by the same input names" in \
        out.splitlines()[0]
    assert out.rstrip().endswith("abi-check: ok")
    code, out, _ = _run(["abi-check", str(model_files[sample]), "--vehicle", "pc-cpu", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and (report["role"], report["generation"], report["first_difference"]) == (sample, gen, None)
    assert report["matched"].startswith("the same input names")


def test_abi_check_against_another_generation_names_the_first_field(model_files: dict[str, Path],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["abi-check", str(model_files["policy_pipeline"]), "--vehicle", "comma3x",
                         "--role", "supercombo"], capsys)
    assert code == 1
    assert "role supercombo (--role; generation supercombo-0.11:" in out.splitlines()[0]
    assert out.splitlines()[-1].endswith("; first: features_buffer.dtype: MISMATCH: expected float32, "
                                         "provided float16")
    code, out, _ = _run(["abi-check", str(model_files["supercombo"]), "--vehicle", "comma4", "--role",
                         "vision_pipeline", "--json"], capsys)
    report = json.loads(out)
    assert code == 1 and report["generation"] == "split-pipeline" and report["matched"] is None
    assert (report["first_difference"]["input"], report["first_difference"]["verdict"]) == \
        ("features_buffer", "MISSING")


def test_abi_check_role_flag_keeps_working(model_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["abi-check", str(model_files["vision"]), "--vehicle", "comma3x", "--role", "vision"], capsys)
    assert code == 0 and "role vision (--role; generation split-0.10:" in out.splitlines()[0]
    code, out, _ = _run(["abi-check", str(model_files["vision"]), "--vehicle", "comma3x", "--role", "dmonitoring"],
                        capsys)
    assert code == 1 and "generation none" in out.splitlines()[0]
    code, out, err = _run(["abi-check", str(model_files["vision"]), "--vehicle", "comma3x", "--role", "steering"],
                          capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "expected one of vision, policy, dmonitoring, vision_pipeline, policy_pipeline, supercombo" in err
