"""Producers store into the padded copies conv2d reads (jit/schedule/padded_stores.py): the copy's kernel writes only
the zero border (or, for narrow rows, zeroes the whole copy before the producer), results unchanged, eager and
captured, on the CPU and OpenCL."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from jit import Context, Tensor, capture
from jit.realize import compile_uops
from jit.schedule.kernels import create_schedule
from jit.schedule.padded_stores import FILL_MAX_ROW_LINES
from targets.registry import Device
from tests.codegen.test_opt_tiling_threads import _conv_reference

RNG = np.random.default_rng(11)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape, dtype=np.float32)


def _block(x: Tensor, w1: np.ndarray, w2: np.ndarray, stride: int, padding: object) -> Tensor:
    """A pointwise conv's activation (a reduce's epilogue) into a depthwise conv: an inverted-residual block."""
    act = (x.conv2d(Tensor(w1)) + 0.5).relu()
    return act.conv2d(Tensor(w2), groups=w2.shape[0], stride=stride, padding=padding)


def _reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, stride: int,
               pads: tuple[int, int, int, int]) -> np.ndarray:
    act = np.maximum(_conv_reference(x, w1, np.zeros(w1.shape[0], np.float32), 0) + 0.5, 0)
    top, left, bottom, right = pads
    padded = np.pad(act, ((0, 0), (0, 0), (top, bottom), (left, right)))
    c, k = w2.shape[0], w2.shape[-1]
    h = (padded.shape[2] - k) // stride + 1
    w = (padded.shape[3] - k) // stride + 1
    out = np.zeros((1, c, h, w), np.float32)
    for ky in range(k):
        for kx in range(k):
            taps = padded[:, :, ky:ky + stride * h:stride, kx:kx + stride * w:stride]
            out += taps * w2[None, :, 0, ky, kx, None, None]
    return out


def _schedule(out: Tensor) -> list:
    kernels, _ = create_schedule([out.uop], "CPU")
    return kernels


CASES = [  # channels, size, kernel, stride, onnx pads (top, left, bottom, right), a channels-last copy
    (32, 56, 3, 1, (1, 1, 1, 1), False),
    (16, 48, 5, 1, (2, 2, 2, 2), False),
    (24, 40, 3, 1, (0, 1, 2, 1), False),  # asymmetric, one side none
    (32, 56, 3, 2, (1, 1, 1, 1), False),  # stride 2: a plain padded copy, no phase split
    (160, 14, 3, 1, (1, 1, 1, 1), True),  # short rows: a channels-last copy
    (256, 7, 5, 1, (2, 2, 2, 2), True),
]


@pytest.mark.parametrize(("c", "size", "k", "stride", "pads", "channels_last"), CASES)
def test_the_producer_writes_the_interior_and_a_border_kernel_the_rest(c: int, size: int, k: int, stride: int,
                                                                       pads: tuple[int, int, int, int],
                                                                       channels_last: bool) -> None:
    x, w1, w2 = _rand(1, 16, size, size), _rand(c, 16, 1, 1), _rand(c, 1, k, k)
    out = _block(Tensor(x), w1, w2, stride, (pads[0], pads[1], pads[2], pads[3]))
    kernels = _schedule(out)
    copy = next(kk for kk in kernels if kk.name.startswith("E_") and len(kk.buffers) == 1)  # reads nothing
    producer = next(kk for kk in kernels if kk.out_buffer is copy.out_buffer and kk is not copy)
    # plain rows of at most FILL_MAX_ROW_LINES cache lines are zeroed whole first, others get a border kernel after
    narrow = (size + pads[1] + pads[3]) * 4 <= FILL_MAX_ROW_LINES * Device["CPU"].limits.l1.line
    assert producer.name.startswith("r_") and (kernels.index(producer) > kernels.index(copy)) is \
        (narrow and not channels_last)
    want = _reference(x, w1, w2, stride, pads)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    with Context(STORE_VIEWS=0):
        plain = _schedule(_block(Tensor(x), w1, w2, stride, (pads[0], pads[1], pads[2], pads[3])))
    assert not any(kk.name.startswith("E_") and len(kk.buffers) == 1 for kk in plain)  # the copy reads the producer


def test_a_stride_2_conv_of_an_input_keeps_its_phase_split_copy() -> None:
    """No kernel computes a capture input: its padded copy is a pass over memory anyway, phase-split."""
    x, w2 = _rand(1, 32, 56, 56), _rand(32, 1, 3, 3)
    kernels = _schedule(Tensor(x).conv2d(Tensor(w2), groups=32, stride=2, padding=1))
    assert [kk.name for kk in kernels][0] == "E_32_58_2_29"


def test_a_producer_tiled_along_long_rows_keeps_its_channels_last_copy() -> None:
    """A 1x1 conv over 28 x 28 outputs tiles its merged rows as vectors, which would scatter into a channels-last
    copy: the copy a stride-2 depthwise conv over it reads (14-wide output rows: channels-last on any machine)
    stays a kernel reading the producer's own buffer."""
    x, w1, w2 = _rand(1, 16, 28, 28), _rand(192, 16, 1, 1), _rand(192, 1, 3, 3)
    out = _block(Tensor(x), w1, w2, 2, 1)
    kernels = _schedule(out)
    assert any(kk.name == "E_30_30_192" for kk in kernels)  # the channels-last padded copy
    assert not any(kk.name.startswith("E_") and len(kk.buffers) == 1 for kk in kernels)
    np.testing.assert_allclose(out.numpy(), _reference(x, w1, w2, 2, (1, 1, 1, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("wide_vectors")
def test_a_depthwise_conv_over_rows_of_a_wide_vector_keeps_the_plain_layout() -> None:
    """Where 16-lane vectors pay, a depthwise conv over 28-wide rows (efficientnet_b0's 5x5 at 28 x 28) tiles them as
    overlapped 16-lane row vectors over the plain layout: its producer writes the padded interior itself (no
    channels-last copy gathering its rows) and its own stores are whole vectors (no scatter into the plain output)."""
    x, w1, w2 = _rand(1, 16, 28, 28), _rand(96, 16, 1, 1), _rand(96, 1, 5, 5)
    out = _block(Tensor(x), w1, w2, 1, 2)
    kernels = _schedule(out)
    assert [kk.name for kk in kernels if kk.name.startswith("E_")] == ["E_96_32_32"]  # the zeros, written alone
    assert len(next(kk for kk in kernels if kk.name.startswith("E_")).buffers) == 1
    source = compile_uops([out.uop], "CPU")[-1].program.source
    assert "dp_scatter" not in source and "dp_float32x16" in source
    np.testing.assert_allclose(out.numpy(), _reference(x, w1, w2, 1, (2, 2, 2, 2)), rtol=1e-4, atol=1e-4)


def _garbage_arenas(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Every buffer the target allocates from now on starts as 0xFF bytes (NaN as float32), not the zeroed pages a
    fresh allocation usually gets: a replay must write every zero it reads."""
    runtime_type = type(Device.runtime(target))
    allocate = runtime_type.allocate

    def dirty(self: Any, nbytes: int) -> Any:
        buf = allocate(self, nbytes)
        if nbytes:
            self.copyin(buf, memoryview(b"\xff" * nbytes))
        return buf

    monkeypatch.setattr(runtime_type, "allocate", dirty)


@pytest.mark.usefixtures("no_chains")  # the border kernel and its producer, dispatches of their own
@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_a_capture_zeroes_the_border_once_and_the_producer_writes_the_interior_every_call(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The border's zeros are the same on every call and no kernel writes them but the border kernel: a capture drops
    that kernel and its replay zeroes the copy once, when it is made (``CommandBuffer.zeroed``). Regression (an
    earlier version): the border kernel reads no input, capture folded it as weight-only work, its zeros lived in a
    weight while the producer wrote into the arena, and the conv read garbage at the border."""
    w1, w2 = _rand(32, 16, 1, 1), _rand(32, 1, 3, 3)

    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": _block(x, w1, w2, 2, 1)}

    first, second = _rand(1, 16, 56, 56), _rand(1, 16, 56, 56)
    _garbage_arenas(monkeypatch, target)
    run = capture(model, {"x": first}, target=target)
    assert not any(len(d.bindings) == 1 for d in run.cmdbuf.dispatches)  # no border kernel left
    assert len(run.cmdbuf.zeroed) == 1 and run.cmdbuf.zeroed[0] in run.cmdbuf.dispatches[0].bindings[:1]
    for x in (first, second, first):
        np.testing.assert_allclose(run({"x": x})["y"], _reference(x, w1, w2, 2, (1, 1, 1, 1)), rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.usefixtures("no_chains")  # the arena as a dispatch per kernel plans it
@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_a_copy_larger_than_the_rest_of_the_arena_keeps_its_border_kernel(target: str) -> None:
    """Zeroed copies keep their bytes for the whole call; the smallest layouts are taken while their bytes stay
    within what the arena needs without them. Here the 96 x 58 x 58 copy is (the one copy of 16 x 58 x 58 fits): it
    keeps a border kernel run every call, and both convs stay right."""
    w1, w2, w3, w4 = _rand(16, 16, 1, 1), _rand(16, 1, 3, 3), _rand(96, 16, 1, 1), _rand(96, 1, 3, 3)

    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": _block(_block(x, w1, w2, 1, 1), w3, w4, 1, 1)}

    first, second = _rand(1, 16, 56, 56), _rand(1, 16, 56, 56)
    run = capture(model, {"x": first}, target=target)
    borders = [run.cmdbuf.kernels[d.kernel].name for d in run.cmdbuf.dispatches if len(d.bindings) == 1]
    assert len(borders) == 1 and borders[0].startswith("E_96_58_58") and len(run.cmdbuf.zeroed) == 1
    assert run.cmdbuf.zeroed[0].endswith(f"+{16 * 58 * 58 * 4}")
    for x in (first, second):
        mid = _reference(x, w1, w2, 1, (1, 1, 1, 1))
        np.testing.assert_allclose(run({"x": x})["y"], _reference(mid, w3, w4, 1, (1, 1, 1, 1)), rtol=1e-3,
                                   atol=1e-3)


def test_a_small_border_kernel_is_split_over_threads_like_its_producer() -> None:
    """Its stores land on the lines its producer's threads just wrote (one per row side): run on one thread it
    fetched them from the other core's cache line by line (mobilenet_v3_small's 72 x 58 x 58 border: the
    slowest of its small kernels). A kernel as small that loads something keeps one thread."""
    w1, w2 = _rand(72, 16, 1, 1), _rand(72, 1, 3, 3)
    x = Tensor(_rand(1, 16, 56, 56))
    compiled = compile_uops([_block(x, w1, w2, 2, 1).uop, (x[:, :4] + 1.0).uop], "CPU")
    borders = [ck for ck in compiled if ck.name.startswith("E_72_58_58")]
    assert len(borders) == 1 and "dp_lo" in borders[0].program.source  # 72 x 4 x 58 stores, under the work floor
    small = [ck for ck in compiled if ck.name.startswith("E_4_56_56")]
    assert small and all("dp_lo" not in ck.program.source for ck in small)


@pytest.mark.usefixtures("no_chains")  # zeroed copies only, no team's counters
@pytest.mark.parametrize("target", ["CPU", "OPENCL"])
def test_a_copy_of_narrow_rows_is_zeroed_whole_before_its_producer_every_call(target: str) -> None:
    """Rows of a few cache lines (efficientnet's 8 x 16 stages: 20 floats with a 5x5 conv's pads): the border touches
    every line of the copy anyway, one element at a time, so the whole buffer is zeroed with vector stores before the
    producer writes the interior. Regression: that fill reads nothing and comes before any kernel that reads the
    input, and capture folded it away as weight-only work, leaving whatever the arena held at the border."""
    w1, w2 = _rand(96, 16, 1, 1), _rand(96, 1, 5, 5)

    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": _block(x, w1, w2, 1, 2) + _block(x * 2.0, w1, w2, 1, 2)}  # two copies: arena regions reused

    first, second = _rand(1, 16, 8, 16), _rand(1, 16, 8, 16)
    kernels = _schedule(model(Tensor(first))["y"])
    fills = [kk for kk in kernels if len(kk.buffers) == 1]
    assert [kk.name for kk in fills] == ["E_96_12_20"] * 2
    for fill in fills:
        assert kernels.index(fill) < next(i for i, kk in enumerate(kernels) if kk.out_buffer is fill.out_buffer
                                          and kk is not fill)
    run = capture(model, {"x": first}, target=target)
    assert not any(len(d.bindings) == 1 for d in run.cmdbuf.dispatches)  # zeroed once, when the replay is made
    assert len(run.cmdbuf.zeroed) == 2  # one layout, but the last kernel reads both copies: bytes of their own
    for x in (first, second, first):
        want = _reference(x, w1, w2, 1, (2, 2, 2, 2)) + _reference(x * 2, w1, w2, 1, (2, 2, 2, 2))
        np.testing.assert_allclose(run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
