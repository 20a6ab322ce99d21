"""The captured modeld step over a sequence of frames equals the numpy reference step with onnxruntime models."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from abi.frames import nv12_geometry
from abi.records import Abi
from jit import Captured
from packager import samples
from packager.modeld.capture import capture_step, step_plan
from packager.modeld.step import StepPlan
from tests.modeld import reference
from tests.modeld.test_warp import MAX_TIE_FRACTION

FRAMES = 12
GEOMETRY = {"road": nv12_geometry(1928, 1208), "wide": nv12_geometry(1928, 1208)}


def _onnxruntime(model: onnx.ModelProto, abi: Abi) -> reference.Model:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    declared = {s.name: s.dtype for s in abi.inputs}
    names = [o.name for o in sess.get_outputs()]

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        got = sess.run(None, {n: np.asarray(v).astype(declared[n]) for n, v in inputs.items()})
        return dict(zip(names, got, strict=True))

    return run


def _frame_inputs(plan: StepPlan, index: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + index)
    out = {}
    for name, (dtype, shape) in plan.inputs().items():
        if dtype == "uint8":
            out[name] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif shape == (3, 3):  # zoomed out, a little rotated and shifted from frame to frame
            out[name] = np.array([[1.7123, -0.0517, 500.31 + index], [0.0517, 1.7123, 300.17 - index],
                                  [1.3e-6, 2.1e-6, 1.0]], np.float32)
        else:
            out[name] = (rng.random(shape) < 0.3).astype(dtype)
    return out


def _expected(want: dict[str, dict[str, np.ndarray]], prefixes: list[str], abis: list[Abi]) -> dict[str, np.ndarray]:
    """The step's outputs as named by packager/modeld/step.py: MODEL.OUTPUT.SLICE, float32."""
    out = {}
    for prefix, abi in zip(prefixes, abis, strict=True):
        for o in abi.outputs:
            flat = want[prefix][o.name].reshape(-1).astype(np.float32)
            if not o.slices:
                out[f"{prefix}.{o.name}"] = flat.reshape(o.shape)
            for name, a, b in o.slices:
                out[f"{prefix}.{o.name}.{name}"] = flat[a:b]
    return out


@pytest.fixture(scope="module", params=["split", "merged"])
def step(request: pytest.FixtureRequest) -> tuple:
    models = ([samples.vision_pipeline_model(), samples.policy_pipeline_model()] if request.param == "split"
              else [samples.supercombo_model()])
    cap, plan = capture_step(models, GEOMETRY, "CPU")
    prep, _ = capture_step(models, GEOMETRY, "CPU", prepare=True)
    _, abis = step_plan(models, GEOMETRY)
    runners = [_onnxruntime(m, a) for m, a in zip(models, abis, strict=True)]
    prefixes = ["vision", "policy"] if request.param == "split" else ["model"]
    return request.param, cap, prep, plan, runners, abis, prefixes


def test_queues_and_outputs_follow_the_reference_over_a_sequence(step: tuple) -> None:
    kind, cap, _, plan, runners, abis, prefixes = step
    ref = reference.ReferenceStep(plan, runners[0], runners[1] if len(runners) > 1 else None)
    cap.reset_state()
    # float32 models: 1e-4 relative; the float16 supercombo: float16 tolerance
    tol = {"rtol": 1e-4, "atol": 1e-5} if kind == "split" else {"rtol": 2e-2, "atol": 2e-2}
    for i in range(FRAMES):
        inputs = _frame_inputs(plan, i)
        got = cap(inputs)
        ref.push_frames(inputs)
        for q in plan.queues_of(prepare=True):
            state = cap.read_state(q.name)
            # a source coordinate at a rounding tie may round the other way under FMA contraction: count them,
            # then go on from the step's frames so that the models see the same inputs
            differ = int((state != ref.queues[q.name]).sum())
            assert differ <= MAX_TIE_FRACTION * state.size, f"frame {i}: {q.name}: {differ} pixels differ"
            ref.queues[q.name] = state
        want = _expected(ref.run_models(inputs), prefixes, abis)
        assert sorted(got) == sorted(want)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, **tol, err_msg=f"frame {i}: {name}")
        for q in plan.queues:
            if q.dtype != "uint8":
                np.testing.assert_allclose(cap.read_state(q.name), ref.queues[q.name], **tol, err_msg=q.name)


def test_prepare_advances_the_frame_queues_as_run_does_and_runs_no_model(step: tuple) -> None:
    _, cap, prep, plan, _, _, _ = step
    cap.reset_state()
    prep.reset_state()
    for i in range(6):
        inputs = _frame_inputs(plan, i)
        cap(inputs)
        imgs = prep({n: inputs[n] for n in plan.inputs(prepare=True)})
        for q in plan.queues_of(prepare=True):
            np.testing.assert_array_equal(prep.read_state(q.name), cap.read_state(q.name), err_msg=q.name)
    assert [q.name for q in plan.queues_of(prepare=True)] == [b.name for b in prep.cmdbuf.states]
    assert sorted(imgs) == sorted(plan.camera_inputs)
    # no model weights: besides the queues' initial (zero) bytes, the only constants are the warps' 3x3 scales

    def constants(c: Captured) -> int:
        inits = {b.init for b in c.cmdbuf.states}
        return sum(w.nbytes for w in c.cmdbuf.weights if int(w.name) not in inits)

    assert constants(prep) <= 2 * 9 * 4 < constants(cap)


def test_reset_zeroes_every_queue(step: tuple) -> None:
    _, cap, _, plan, _, _, _ = step
    cap(_frame_inputs(plan, 0))
    cap.reset_state()
    assert not any(cap.read_state(q.name).any() for q in plan.queues)
