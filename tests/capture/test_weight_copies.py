"""A capture's weights are copied once, together, onto huge pages (targets/host_memory.py), and bound by the replay
as they are: no second copy is made (on 4 KiB pages, a copy of a large model's weights faulted in so many pages that
it took a third of a warm capture's time on resnet18)."""

from __future__ import annotations

import numpy as np
import pytest

from jit import Context, Tensor, capture
from jit.frontend.winograd import pick_tile
from targets.host_memory import HUGE_PAGE_BYTES
from tests.helpers import mapping_flags

RNG = np.random.default_rng(5)
W = RNG.standard_normal((16, 3, 3, 3), dtype=np.float32)
X = RNG.standard_normal((1, 3, 12, 12), dtype=np.float32)


def _model(x: Tensor) -> dict[str, Tensor]:
    w = Tensor(W)
    return {"y": x.conv2d(w * 2 + 1, padding=1).relu()}  # the folded weight is a kernel's output


def test_cpu_weights_are_packed_on_huge_pages_read_only_and_bound_without_a_copy() -> None:
    fc = RNG.standard_normal((16 * 12 * 12, 256), dtype=np.float32)  # with the conv's, a huge page's worth

    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": x.conv2d(Tensor(W), padding=1).relu().reshape(1, -1).matmul(Tensor(fc))}

    run = capture(model, {"x": X}, target="CPU")
    assert len(run.weights) > 1 and sum(w.nbytes for w in run.weights.values()) >= HUGE_PAGE_BYTES
    alignment = run.cmdbuf.alignment
    starts = [data.ctypes.data for data in run.weights.values()]
    assert starts[0] % HUGE_PAGE_BYTES == 0  # one block, the weights in binding order
    assert starts == sorted(starts) and starts[-1] - starts[0] < 2 * HUGE_PAGE_BYTES
    for wid, data in run.weights.items():
        assert data.dtype == np.uint8 and not data.flags.writeable
        assert data.ctypes.data % alignment == 0
        assert "hg" in mapping_flags(data.ctypes.data)
        assert np.shares_memory(run.replay._keep[f"weight:{wid}"], data)  # noqa: SLF001 - what the driver binds
    with pytest.raises(ValueError, match="read-only"):
        next(iter(run.weights.values()))[0] = 1
    want = model(Tensor(X))["y"].numpy()
    np.testing.assert_allclose(run({"x": X})["y"], want, rtol=1e-5, atol=1e-4)


def test_weights_stay_valid_after_the_graph_is_gone() -> None:
    run = capture(_model, {"x": X}, target="CPU")
    before = {k: v.copy() for k, v in run.weights.items()}
    import gc
    gc.collect()  # the model's BUFFER nodes are dropped: the arrays keep their memory alive
    for _ in range(3):
        capture(_model, {"x": X * 3}, target="CPU")
    gc.collect()
    for k, v in run.weights.items():
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.usefixtures("full_width_units")  # the CPU reference a direct conv, as the OPENCL capture's
def test_weights_made_on_the_default_device_fold_for_an_opencl_capture() -> None:
    """Regression: Tensor(array) weights live on the default device (the CPU) whatever the capture's target; their
    weight-only work (a conv's channel-blocked weight copy) ran on OPENCL with the CPU's memory and failed with a
    TypeError. It is folded where the weights live and bound as weights."""
    x = RNG.standard_normal((1, 32, 27, 27), dtype=np.float32)
    w1 = RNG.standard_normal((16, 32, 1, 1), dtype=np.float32)
    w2 = RNG.standard_normal((48, 16, 3, 3), dtype=np.float32)

    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": x.conv2d(Tensor(w1)).conv2d(Tensor(w2), padding=1)}

    run = capture(model, {"x": x}, target="OPENCL")
    assert run.report.kernels_traced > run.report.kernels_kept  # the weight copy was folded
    want = Tensor(x).conv2d(Tensor(w1)).conv2d(Tensor(w2), padding=1).numpy()
    np.testing.assert_allclose(run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_a_winograd_sized_conv_with_default_device_weights_captures_for_opencl() -> None:
    """Regression: a 3x3 conv Winograd takes (32 channels and more), its weight a Tensor(array) on the default
    device, captured for OPENCL: U's transform kernels ran on OPENCL with the CPU's memory and failed with a
    TypeError. Such a conv is direct; the same conv with the weight on OPENCL still takes Winograd."""
    x = RNG.standard_normal((1, 32, 27, 27), dtype=np.float32)
    w = RNG.standard_normal((48, 32, 3, 3), dtype=np.float32)
    run = capture(lambda x: {"y": x.conv2d(Tensor(w), padding=1)}, {"x": x}, target="OPENCL")
    want = Tensor(x).conv2d(Tensor(w), padding=1).numpy()  # sums of 288 products: as the reference's own error
    np.testing.assert_allclose(run({"x": x})["y"], want, rtol=1e-4, atol=1e-3)
    assert pick_tile(Tensor(x, device="OPENCL"), Tensor(w), 1, 1, 1, 1) == 0
    with Context(WINO="4"):
        assert pick_tile(Tensor(x, device="OPENCL"), Tensor(w, device="OPENCL"), 1, 1, 1, 1) == 4


@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_weights_are_copied_on_a_thread_of_their_own_while_the_command_buffer_is_checked(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The weights' copy (fresh memory, a device's reads) overlaps the command buffer's checks (Python), and the
    report counts the weights the capture returns."""
    import threading

    from jit import trace
    from targets.cmdbuf import CommandBuffer
    threads: dict[str, threading.Thread] = {}
    copy, check = trace._Bindings.weights, CommandBuffer.validate  # noqa: SLF001 - wrapped to see where each runs

    def copying(self: trace._Bindings) -> dict[int, np.ndarray]:  # noqa: SLF001
        threads["weights"] = threading.current_thread()
        return copy(self)

    def checking(self: CommandBuffer) -> None:
        threads["validate"] = threading.current_thread()
        check(self)

    monkeypatch.setattr(trace._Bindings, "weights", copying)  # noqa: SLF001
    monkeypatch.setattr(CommandBuffer, "validate", checking)
    run = capture(_model, {"x": X}, target=target)
    assert threads["validate"] is threading.current_thread() and threads["weights"] is not threads["validate"]
    assert run.report.weights == len(run.weights) > 0
    assert run.report.weight_bytes == sum(w.nbytes for w in run.weights.values())
    want = _model(Tensor(X))["y"].numpy()
    np.testing.assert_allclose(run({"x": X})["y"], want, rtol=1e-5, atol=1e-4)
