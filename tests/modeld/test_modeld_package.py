"""``drivepack package VISION POLICY --modeld``: run@WxH and prepare@WxH entries, their ABI and self-test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from abi.frames import nv12_geometry
from abi.infer import infer_abi
from packager.cli import main
from packager.modeld.entries import golden_step_inputs
from packager.modeld.step import plan_step
from packager.package import load_package
from packager.samples import policy_pipeline_model, vision_pipeline_model

SIZE = "1928x1208"


@pytest.fixture(scope="module")
def step_pkg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("modeld")
    onnx.save(vision_pipeline_model(), str(d / "vision.onnx"))
    onnx.save(policy_pipeline_model(), str(d / "policy.onnx"))
    assert main(["package", str(d / "vision.onnx"), str(d / "policy.onnx"), "--vehicle", "pc-cpu", "--modeld",
                 "-o", str(d / "step.dpk"), "--golden-sets", "2", "--quiet"]) == 0
    return d / "step.dpk"


def test_the_package_has_a_run_and_a_prepare_entry_per_camera_size(step_pkg: Path) -> None:
    pkg = load_package(step_pkg)
    assert pkg.entries == (f"run@{SIZE}", f"prepare@{SIZE}")
    run, prep = pkg.entry(f"run@{SIZE}").abi, pkg.entry(f"prepare@{SIZE}").abi
    geom = nv12_geometry(1928, 1208)
    frames = {s.name: s for s in run.inputs}
    assert (frames["frame"].dtype, frames["frame"].shape, frames["frame"].camera.layout) == ("uint8", (geom.size,),
                                                                                            "nv12")
    assert frames["tfm"].shape == (3, 3) and {"big_frame", "big_tfm", "desire", "traffic_convention"} <= set(frames)
    assert [(t.name, t.shape) for t in run.states] == [("road_frames", (5, 6, 128, 256)),
                                                      ("wide_frames", (5, 6, 128, 256)), ("features", (97, 512)),
                                                      ("desires", (100, 8))]
    assert [t.name for t in prep.states] == ["road_frames", "wide_frames"]
    assert [s.name for s in prep.inputs] == ["frame", "tfm", "big_frame", "big_tfm"]
    assert all(o.dtype == "float32" for o in run.outputs) and "policy.outputs.plan" in {o.name for o in run.outputs}
    ref = pkg.entry(f"run@{SIZE}").manifest.reference
    assert ref is not None and ref["kind"] == "drivepack-noopt" and "modeld step" in ref["reason"]


def test_a_replay_from_the_package_reproduces_the_golden_step(step_pkg: Path) -> None:
    pkg = load_package(step_pkg)
    replay = pkg.make_replay(entry=f"run@{SIZE}")
    outs = []
    for i in range(2):
        g = pkg.entry(f"run@{SIZE}").golden(i)
        replay.reset_state()
        got = replay(g.inputs)
        for name, want in g.target.items():
            np.testing.assert_array_equal(got[name], want, err_msg=name)
        outs.append(got)
    # a second seed gives other frames, so other outputs
    assert not np.array_equal(outs[0]["vision.outputs.hidden_state"], outs[1]["vision.outputs.hidden_state"])
    assert main(["verify", str(step_pkg)]) == 0


def test_golden_transforms_sample_the_picture_not_the_border() -> None:
    geom = nv12_geometry(1928, 1208)
    plan = plan_step(infer_abi(vision_pipeline_model()), infer_abi(policy_pipeline_model()),
                     {"road": geom, "wide": geom})
    tfm = golden_step_inputs(plan, 3)["tfm"]
    corners = np.array([[0, 0, 1], [511, 0, 1], [0, 255, 1], [511, 255, 1]], np.float32) @ tfm.T
    assert ((corners[:, 0] > 0) & (corners[:, 0] < geom.width) & (corners[:, 1] > 0)
            & (corners[:, 1] < geom.height)).all()


def test_prepare_and_run_share_the_queues_on_the_device(step_pkg: Path) -> None:
    pkg = load_package(step_pkg)
    step = pkg.make_step()
    assert step.size == SIZE and step.run_replay.state_handle("road_frames") == \
        step.prepare_replay.state_handle("road_frames")
    plan = plan_step(infer_abi(vision_pipeline_model()), infer_abi(policy_pipeline_model()),
                     {"road": nv12_geometry(1928, 1208), "wide": nv12_geometry(1928, 1208)})
    frames = [golden_step_inputs(plan, 10 + i) for i in range(3)]
    step.reset()
    step.run(frames[0])
    imgs = step.prepare(frames[1])  # a dropped frame: pushed, no model run
    pushed = step.read_state("road_frames")[-1]
    np.testing.assert_array_equal(imgs["img"][0, 6:], pushed)  # the newest frame of the sampled pair
    assert not step.read_state("features")[:-1].any()  # one run so far: one hidden_state in the feature queue
    step.run(frames[2])
    np.testing.assert_array_equal(step.read_state("road_frames")[-2], pushed)
    assert step.read_state("features")[-2:].any(axis=1).tolist() == [True, True]
    step.reset()
    assert not step.read_state("road_frames").any() and not step.read_state("features").any()
    with pytest.raises(Exception, match="size: expected one of"):
        pkg.make_step("1344x760")


def test_replay_at_the_camera_rate_reports_latency_drops_and_the_prepare_cost(
        step_pkg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(step_pkg), "--rate", "20", "--frames", "12", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["frames"] == 12 and doc["runs"] + doc["prepared"] == 12 and doc["runs"] >= 1
    assert doc["deadline_ms"] == 50 and doc["latency_ms"]["p50"] > 0
    assert (doc["prepare_ms"] is None) == (doc["prepared"] == 0)
    # faster than any step can run (a frame every 0.1 ms; the sample step takes about 1.5 ms on 2 cores, so at
    # 1 kHz it could finish between two arrivals): most frames take the dropped-frame path, and their cost is reported
    assert main(["replay", str(step_pkg), "--rate", "10000", "--frames", "12", "--json"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["prepared"] > 0 and fast["prepare_ms"]["mean"] > 0 and fast["dropped_pct"] > 0
    assert main(["replay", str(step_pkg), "--rate", "20", "--frames", "3"]) == 0
    assert "step 1928x1208" in capsys.readouterr().out
    # --budget-check: exit 1 exactly when a run missed its frame's deadline
    code = main(["replay", str(step_pkg), "--rate", "1000", "--frames", "6", "--json", "--budget-check"])
    out, err = capsys.readouterr()
    misses = json.loads(out)["deadline_misses"]
    assert code == (1 if misses else 0) and ("deadline miss(es)" in err) == bool(misses)
    # options of the plain replay are refused here, not ignored
    assert main(["replay", str(step_pkg), "--rate", "20", "--frames", "2", "--threads", "2"]) == 2
    assert "--threads: expected none with --rate on a --modeld package" in capsys.readouterr().err
