"""Capture on the CPU target: one trace over placeholders, weight folding, bindings, states, errors, @jit."""

from __future__ import annotations

import numpy as np
import pytest

from jit import DrivepackError, Tensor
from jit.realize import compiled_kernel, holds_data
from jit.trace import Captured, CaptureError, capture, jit
from targets.cmdbuf import Alias, CommandBuffer

RNG = np.random.default_rng(7)
W = RNG.standard_normal((8, 6)).astype(np.float32)
GAMMA = RNG.uniform(0.5, 2, 6).astype(np.float32)
VAR = RNG.uniform(0.5, 2, 6).astype(np.float32)
BIAS = RNG.standard_normal(6).astype(np.float32)


def bn_linear(x: Tensor) -> dict[str, Tensor]:
    """x @ W with batch-norm scale folded into W: the scale and the folded weight are weight-only work."""
    w, gamma, var, bias = Tensor(W), Tensor(GAMMA), Tensor(VAR), Tensor(BIAS)
    scale = gamma / (var + 1e-5).sqrt()
    y = x @ (w * scale.reshape(1, 6)) + bias
    return {"y": y.relu(), "total": y.sum(axis=1)}


def eager(fn, inputs: dict[str, np.ndarray], device: str = "CPU") -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in fn(**{n: Tensor(a, device=device) for n, a in inputs.items()}).items()}


def x_input(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float32)}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), f"{k}: not bit-identical"


def test_traces_once_with_unfilled_placeholders() -> None:
    calls = []

    def fn(x: Tensor) -> dict[str, Tensor]:
        calls.append(x)
        return bn_linear(x)

    cap = capture(fn, x_input())
    assert len(calls) == 1
    placeholder = calls[0].uop.base
    assert not holds_data(placeholder)  # never allocated, never filled
    cap(x_input(1))
    assert len(calls) == 1  # replays never call fn


def test_replay_is_bit_identical_to_eager_and_tracks_the_input() -> None:
    cap = capture(bn_linear, x_input())
    for seed in (0, 1):
        assert_same(cap(x_input(seed)), eager(bn_linear, x_input(seed)))
    a, b = cap(x_input(0)), cap(x_input(1))
    assert not np.array_equal(a["y"], b["y"]) and not np.array_equal(a["total"], b["total"])


def test_weight_only_work_is_pruned_and_only_read_weights_are_kept() -> None:
    folded = capture(bn_linear, x_input())
    inline = capture(bn_linear, x_input(), fold_weights=False)
    rep = folded.report
    assert rep.kernels_pruned > 0 and rep.kernels_traced == rep.kernels_pruned + rep.kernels_kept
    assert rep.kernels_kept == folded.n_dispatches
    assert rep.summary().startswith(f"pruned {rep.kernels_traced} -> {rep.kernels_kept} kernels")
    # folded: the replay reads the folded (8, 6) weight and the bias, never gamma and var themselves
    sizes = sorted(w.nbytes for w in folded.weights.values())
    assert sizes == sorted([W.nbytes, BIAS.nbytes])
    assert len(inline.weights) == 4  # inline: W, gamma, var and bias are all read by the replay
    assert_same(folded(x_input(3)), inline(x_input(3)))


def test_outputs_are_fresh_arrays_never_overwritten() -> None:
    cap = capture(bn_linear, x_input())
    first = cap(x_input(0))
    kept = {k: v.copy() for k, v in first.items()}
    for seed in range(1, 4):
        cap(x_input(seed))
    assert_same(first, kept)


def test_identity_duplicate_and_weight_only_outputs() -> None:
    w = Tensor(W)

    def fn(x: Tensor) -> dict[str, Tensor]:
        y = x * 2
        return {"same": x, "a": y, "b": y, "flat": x.reshape(32), "w": w.T}

    cap = capture(fn, x_input())
    inp = x_input(5)
    out = cap(inp)
    assert_same(out, eager(fn, inp))
    np.testing.assert_array_equal(out["same"], inp["x"])
    assert out["a"] is not out["b"] and not np.shares_memory(out["a"], out["b"])
    np.testing.assert_array_equal(out["w"], W.T)


@pytest.mark.usefixtures("no_chains")  # the kernels counted below, each a dispatch of its own
@pytest.mark.parametrize("target", ["CPU", pytest.param("OPENCL", marks=pytest.mark.opencl)])
def test_outputs_viewing_one_contiguous_value_are_written_by_its_kernel(target: str) -> None:
    """A value made contiguous and returned as two views in its element order (a GRU's state as Y and Y_h): its
    kernel writes the first output and the second is an alias of it (no kernel; the replay hands out a copy of its
    bytes); a transposed view still gets a kernel of its own."""
    def fn(x: Tensor) -> dict[str, Tensor]:
        h = (x * 2 + 1).contiguous()
        return {"y": h.reshape(1, 4, 8).permute(1, 0, 2), "y_h": h.reshape(1, 1, 4, 8), "t": h.T}

    cap = capture(fn, x_input(), target=target)
    inp = x_input(6)
    out = cap(inp)
    want = inp["x"] * 2 + 1
    np.testing.assert_array_equal(out["y"], want.reshape(4, 1, 8))
    np.testing.assert_array_equal(out["y_h"], want.reshape(1, 1, 4, 8))
    np.testing.assert_array_equal(out["t"], want.T)
    assert not np.shares_memory(out["y"], out["y_h"])
    assert sum(d.writes for d in cap.cmdbuf.dispatches) == 2  # the value into y, t transposed from y
    assert cap.cmdbuf.aliases == (Alias("output:y_h", "output:y"),)
    out["y"][...] = 0  # the alias is an array of its own
    np.testing.assert_array_equal(out["y_h"], want.reshape(1, 1, 4, 8))
    assert [b.shape for b in cap.cmdbuf.outputs] == [(4, 1, 8), (1, 1, 4, 8), (8, 4)]


def test_intermediates_share_the_arena() -> None:
    def chain(x: Tensor) -> dict[str, Tensor]:
        for i in range(8):
            x = (x @ Tensor(np.eye(8, dtype=np.float32) * (i + 1))).relu().contiguous()
        return {"y": x}

    cap = capture(chain, x_input())
    assert cap.report.arena_bytes <= cap.report.naive_bytes / 2
    assert cap.cmdbuf.arena_bytes == cap.report.arena_bytes
    assert_same(cap(x_input(2)), eager(chain, x_input(2)))


def shift_history(x: Tensor, history: Tensor) -> dict[str, Tensor]:
    """A ring buffer: drop the oldest row, append x; the output reads the history before the update."""
    new = Tensor.cat(history[1:], x.reshape(1, 3), dim=0)
    weights = Tensor(np.arange(1, 6, dtype=np.float32), device=x.device).reshape(5, 1)
    return {"history": new, "weighted": (history * weights).sum(0)}


def test_state_is_updated_in_place_across_calls() -> None:
    init = np.arange(15, dtype=np.float32).reshape(5, 3)
    cap = capture(shift_history, {"x": np.zeros(3, np.float32)}, state={"history": init})
    assert [b.name for b in cap.cmdbuf.states] == ["history"] and cap.replay.input_names == ["x"]
    hist = init.copy()
    for step in range(7):
        x = np.full(3, step + 100, np.float32)
        out = cap(x=x)
        expected = (hist * np.arange(1, 6, dtype=np.float32).reshape(5, 1)).sum(0)
        np.testing.assert_array_equal(out["weighted"], expected)
        hist = np.concatenate([hist[1:], x.reshape(1, 3)])
        np.testing.assert_array_equal(cap.read_state("history"), hist)
    assert list(out) == ["weighted"]
    cap.reset_state()
    np.testing.assert_array_equal(cap.read_state("history"), init)


def test_a_state_computed_into_its_own_buffer_is_written_back_without_a_copy() -> None:
    """Regression: a new state value that is already a materialised temporary (``.contiguous()``) was copied
    twice, temporary -> temporary -> state. A queue push is now computed in the state itself
    (tests/capture/test_states_in_place.py): no copy at all."""
    init = np.arange(12, dtype=np.float32).reshape(4, 3)

    def step(x: Tensor, history: Tensor) -> dict[str, Tensor]:
        new = Tensor.cat(history[1:], x.reshape(1, 3), dim=0).contiguous()
        return {"history": new, "total": new.sum(0)}

    cap = capture(step, {"x": np.zeros(3, np.float32)}, state={"history": init})
    writes = [d for d in cap.cmdbuf.dispatches if "state:history" == d.bindings[0]]
    assert len(writes) == 1 and cap.n_dispatches == 2  # the new queue, in the state, and its sum
    hist = init.copy()
    for step_no in range(3):
        x = np.full(3, step_no + 50, np.float32)
        hist = np.concatenate([hist[1:], x.reshape(1, 3)])
        np.testing.assert_array_equal(cap(x=x)["total"], hist.sum(0))
        np.testing.assert_array_equal(cap.read_state("history"), hist)


def test_from_cmdbuf_bytes_replays_without_the_model() -> None:
    cap = capture(bn_linear, x_input())
    again = Captured.from_cmdbuf(CommandBuffer.from_bytes(cap.cmdbuf.to_bytes()),
                                 {i: bytes(w) for i, w in cap.weights.items()}, "CPU")
    assert again.n_dispatches == cap.n_dispatches
    assert_same(again(x_input(4)), cap(x_input(4)))


def test_profile_times_every_dispatch() -> None:
    cap = capture(bn_linear, x_input())
    times = cap.profile(x_input())
    assert [t.index for t in times] == list(range(cap.n_dispatches))
    assert all(t.seconds >= 0 and t.kernel in {k.name for k in cap.cmdbuf.kernels} for t in times)


def test_jit_decorator_captures_on_first_call() -> None:
    calls = []

    @jit
    def fn(x: Tensor) -> dict[str, Tensor]:
        calls.append(1)
        return bn_linear(x)

    assert fn.captured is None
    first = fn(**x_input(0))
    second = fn(**x_input(1))
    assert len(calls) == 1 and isinstance(fn.captured, Captured)
    assert_same(first, eager(bn_linear, x_input(0)))
    assert_same(second, eager(bn_linear, x_input(1)))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"fn": lambda x: x * 2}, "fn: return expected a dict of output name -> Tensor, got Tensor"),
    ({"fn": lambda x: {"y": 3}}, "output y: type expected Tensor, got int"),
    ({"example_inputs": {"x": [1.0, 2.0]}}, "x: input value expected a numpy.ndarray, got list"),
    ({"example_inputs": {"x": np.array(["a"])}}, "x: dtype: expected one of"),
    ({"state": {"x": np.zeros(3, np.float32)}}, "state: names expected distinct from the inputs, got ['x']"),
    ({"state": {"h": np.zeros(3, np.float32)}}, "state: expected fn to return the new value of each state, "
                                                 "got none for ['h']"),
    ({"fn": lambda x, h: {"h": h.sum()}, "state": {"h": np.zeros(3, np.float32)}},
     "state h: new value expected float32 (3,), got float32 ()"),
])
def test_capture_errors_name_the_field(kwargs: dict, message: str) -> None:
    args = {"fn": lambda x, **_: {"y": x + 1}, "example_inputs": {"x": np.zeros(3, np.float32)}} | kwargs
    with pytest.raises(CaptureError) as e:
        capture(**args)
    assert message in str(e.value) and isinstance(e.value, DrivepackError)


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_a_long_fused_elementwise_chain_renders_shallow_enough_to_load(target: str) -> None:
    """Regression: 64 fused steps rendered as one expression 128 parentheses deep, which the load-time access
    check (targets/index_parse.py, nesting capped at 64) refused; the renderer now names deep subexpressions."""
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)

    def chain(x: Tensor) -> dict[str, Tensor]:
        y = x
        for _ in range(100):
            y = y * 1.01 + 0.5
        return {"y": y}

    cap = capture(chain, {"x": x}, target=target)
    assert cap.n_dispatches == 1
    want = x.copy()
    for _ in range(100):
        want = want * np.float32(1.01) + np.float32(0.5)
    np.testing.assert_allclose(cap(x=x)["y"], want, rtol=1e-4)


def test_two_kernels_of_one_name_are_refused_not_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command buffer keeps one spec per kernel name: two different kernels given one name (were the naming
    ever to allow it) must stop the capture, never run the first one's code for both."""
    import jit.realize as realize
    from jit.realize import clear_compiled_kernels
    clear_compiled_kernels()
    monkeypatch.setattr(realize.KernelNames, "name", lambda self, target, base, key: base)
    x = np.linspace(0.5, 1.5, 96, dtype=np.float32).reshape(8, 12)
    try:
        with pytest.raises(CaptureError, match="two kernels named E_8_12"):
            capture(lambda x: {"a": (x * 2).exp(), "b": (x + 1).log()}, {"x": x}, target="CPU")
    finally:
        clear_compiled_kernels()  # no kernel named by the patched function outlives the test


@pytest.mark.usefixtures("no_chains")  # two kernels, not one chain of them
def test_kernels_are_renamed_for_each_capture_they_are_reused_in() -> None:
    """Names are numbered per capture: a kernel compiled by an earlier capture under another name is renamed (its
    source edited) in the next, and each command buffer keeps one name per kernel."""
    x = np.linspace(0.5, 1.5, 96, dtype=np.float32).reshape(8, 12)
    both = {"a": np.exp(x * 2), "b": np.log(x + 1)}
    for target in ("CPU", "OPENCL"):
        runs = [capture(lambda x: {"a": (x * 2).exp(), "b": (x + 1).log()}, {"x": x}, target=target),
                capture(lambda x: {"b": (x + 1).log()}, {"x": x}, target=target)]
        # a package manifest's lookup of a kernel's stats tells the two kernels named E_8_12 apart by their source
        exp_kernel, log_kernel = runs[0].cmdbuf.kernels[0], runs[1].cmdbuf.kernels[0]
        found = [compiled_kernel(target, "E_8_12", k.source) for k in (exp_kernel, log_kernel)]
        assert [ck.program.source if ck else None for ck in found] == [exp_kernel.source, log_kernel.source]
        runs.append(capture(lambda x: {"a": (x * 2).exp(), "b": (x + 1).log()}, {"x": x}, target=target))
        names = [[k.name for k in run.cmdbuf.kernels] for run in runs]
        assert names[0] == names[2] == ["E_8_12", "E_8_12n2"] and names[1] == ["E_8_12"], names
        assert "E_8_12n2(" in runs[0].cmdbuf.kernels[1].source and "E_8_12(" in runs[1].cmdbuf.kernels[0].source
        for run in runs:
            out = run({"x": x})
            for name, got in out.items():
                np.testing.assert_allclose(got, both[name], rtol=1e-6)

