"""Composite neural-net ops (matmul, conv, normalization, softmax): Tensor methods built from others.

Every op here is a composition of existing Tensor methods and tensor-level UOps (movement ops, WINDOW,
reductions, ALU), so the scheduler sees one graph it can fuse: a matmul or a convolution with its bias is
a single reduce kernel. numpy never computes a result here. jit/frontend/__init__.py attaches
``TENSOR_METHODS`` (``Tensor.conv2d``, ...); pooling is jit/frontend/pooling.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jit.codegen.opt import target_default_opts
from jit.codegen.opt.options import DEFAULT_OPTS
from jit.common.dtype import DType, dtypes, least_upper_dtype
from jit.common.errors import AxisError, ShapeError
from jit.common.helpers import STORE_VIEWS
from jit.frontend.channel_scale import channel_scaled
from jit.frontend.movement import window
from jit.frontend.row_align import plane_aligned_rows, plane_of_padded_rows
from jit.frontend.shapes import IntOrTuple, broadcast_shape, int_tuple, spatial_pads
from jit.frontend.tensor import Tensor
from jit.frontend.weight_layout import TRANSPOSED_COPY_MIN, blocked_columns, weight_block_columns, weight_only
from jit.frontend.winograd import pick_tile, winograd_conv2d  # WINO: 3x3 convs by Winograd
from jit.ir.uop import GroupOp, Ops, UOp
from targets.registry import Device


# --- helpers -----------------------------------------------------------------------------------------
def _acc_dtype(d: DType) -> DType | None:
    """Accumulate narrow floats in float32 (their rounding per add is too coarse); None: Tensor.sum's default."""
    return dtypes.float32 if d.is_float and d.itemsize < 4 else None


def _sum_as(t: Tensor, axes: tuple[int, ...], out_dtype: DType) -> Tensor:
    """Sum over ``axes`` (dropped) and cast back to ``out_dtype``, as numpy's matmul/einsum return it."""
    return t.sum(axes, dtype=_acc_dtype(out_dtype)).cast(out_dtype)


# --- matmul ------------------------------------------------------------------------------------------
# rows of ``a`` from which a product copies a transposed activation ``b`` first: the copy reads b once, the product
# n times
TRANSPOSED_ACTIVATION_MIN_ROWS = 8


def matmul(self: Tensor, other: Tensor) -> Tensor:
    """numpy ``matmul``: 1-D operands, batch broadcasting; one fused multiply-reduce kernel."""
    if not isinstance(other, Tensor):
        other = Tensor(other, device=self.device)
    if self.ndim == 0 or other.ndim == 0:
        raise ShapeError(f"matmul: operands expected rank >= 1, got shapes {self.shape} and {other.shape}")
    a = self.reshape(1, *self.shape) if self.ndim == 1 else self
    b = other.reshape(*other.shape, 1) if other.ndim == 1 else other
    k = a.shape[-1]
    if b.shape[-2] != k:
        raise ShapeError(f"matmul: shapes {self.shape} and {other.shape} are incompatible "
                         f"(contraction sizes {k} and {b.shape[-2]})")
    try:
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError(f"matmul: shapes {self.shape} and {other.shape} have incompatible batch dims "
                         f"{a.shape[:-2]} and {b.shape[:-2]}") from None
    n, m = a.shape[-2], b.shape[-1]
    out_dtype = least_upper_dtype(a.dtype, b.dtype)
    cols = weight_block_columns(b, k, m)
    if cols:
        b = blocked_columns(b, cols)
    elif b.ndim == 2 and k * m >= TRANSPOSED_COPY_MIN and rows_across_memory(b) and weight_only(b):
        # a transposed weight (Gemm's transB, a 1x1 conv's (Cout, Cin)): read in place, a tile's row of b is a
        # gather, lane by lane; copied (k, m) once, a capture folds the copy into the stored weights
        b = b.contiguous()
    elif n >= TRANSPOSED_ACTIVATION_MIN_ROWS and b.numel() >= TRANSPOSED_COPY_MIN and \
            rows_across_memory(b, through_constants=True):
        # a transposed activation (attention's keys, q @ k^T): read in place, each output is a sum of scalar
        # products (a 25-token transformer's 4 x 25 x 25 x 64 scores); copied once per call, a pass over b that
        # the n rows reading it make up for, its rows are vectors
        b = b.contiguous()
    cols = cols or m
    # (..., n, 1, k) * (..., 1, m, k): both operands read along k contiguously, reduced in one kernel
    prod = a.reshape(*a.shape[:-1], 1, k) * b.transpose(-1, -2).reshape(*b.shape[:-2], 1, cols, k)
    out = _sum_as(prod, (-1,), out_dtype)
    if cols != m:  # the padded product is a kernel of its own: fused with the shrink, its row would not tile by 64
        out = out.contiguous().shrink((*[None] * (out.ndim - 1), (0, m)))
    assert out.shape == (*batch, n, m)
    if self.ndim == 1:
        out = out.reshape(*out.shape[:-2], m)
    if other.ndim == 1:
        out = out.reshape(*out.shape[:-1])
    return out


def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``self @ weight.T + bias`` with weight (out_features, in_features), as torch.nn.functional.linear."""
    out = self.matmul(weight.T if weight.ndim == 2 else weight)
    return out + bias if bias is not None else out


def gemm(self: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
         trans_a: bool = False, trans_b: bool = False) -> Tensor:
    """ONNX Gemm: ``alpha * A' @ B' + beta * C`` with A, B 2-D and C broadcast to the result."""
    if self.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"gemm: A and B expected 2-D, got shapes {self.shape} and {b.shape}")
    out = (self.T if trans_a else self).matmul(b.T if trans_b else b)
    if alpha != 1.0:
        out = out * alpha
    if c is not None and beta != 0.0:
        out = out + (c * beta if beta != 1.0 else c)
    return out


# --- convolution -------------------------------------------------------------------------------------
# A conv whose multiply-adds (output elements x Cin/groups x kernel elements) reach this reads its padded input
# from a buffer of its own. 2**20 is far below the sample vision model's smallest padded conv (1.4e7) and far
# above every conv of the ONNX node conformance tests (the largest, test_convtranspose_3d, does 22,680), so those
# keep their single kernel.
PAD_MATERIALIZE_MIN_MACS = 1 << 20
# still far above the conformance tests' convs (a depthwise one there does a few thousand)
DEPTHWISE_PAD_MATERIALIZE_MIN_MACS = 1 << 17


def _materialize_pad(pads: tuple[tuple[int, int], ...], kernel: tuple[int, ...], out_elements: int,
                     cin_per_group: int) -> bool:
    """Whether a conv's zero-padded input is worth its own copy kernel (Tensor.contiguous on the PAD).

    Read lazily, a PAD lowers to a select and clamped indices on every input load of the conv's reduce
    (``valid ? in[clamp(i)] : 0``); the C compiler then cannot vectorize the reduce's inner loops. Realized, the
    padded input is a plain buffer (a cheap elementwise kernel writes the zero border once, after whatever
    elementwise work precedes the pad, so the padded zeros are exactly the PAD's) and the conv's loads are plain
    contiguous ones. Worth it when there is padding, the window has more than one element (a 1x1 window reads
    each input element once: the mask costs no more than the copy would) and the conv is large enough that the
    extra kernel's launch and pass over memory are small against its work (``PAD_MATERIALIZE_MIN_MACS``; a
    depthwise conv, one input channel per group, from ``DEPTHWISE_PAD_MATERIALIZE_MIN_MACS``: its masked loads
    are gathers lane by lane, so even a small one costs several times the copy).

    Decided here rather than by a scheduler rule on any PAD read through a WINDOW: the conv knows its work and
    pooling reads a window once per output anyway. Capture treats the copy like any kernel: an activation in
    the arena when it reads an input, folded into a weight when the conv input is weight-only.
    """
    if not any(b or e for b, e in pads) or math.prod(kernel) <= 1:
        return False
    least = DEPTHWISE_PAD_MATERIALIZE_MIN_MACS if cin_per_group == 1 else PAD_MATERIALIZE_MIN_MACS
    return out_elements * cin_per_group * math.prod(kernel) >= least


# the blocked weights are a weight-only copy that a capture folds, so nothing at replay: below this the conv is too
# small for any tile to matter (the conformance tests' convs, the largest 22,680, keep their weights as they are);
# above it a short-row conv tiles its vectors across channels instead of running a tile of scalars
CHANNELS_LAST_MIN_MACS = 1 << 17
CHANNEL_VECTOR = DEFAULT_OPTS.channel_vector  # the block the optimizer vectorizes short rows across


def channel_block(cout_per_group: int, device: str) -> int:
    """The channel block of a conv's channel-blocked weights on ``device``: its optimizer's wide channel vector
    (``OptOptions.wide_channel_vector``, the CPU target's on a machine whose 16-lane FMAs pay) where the output
    channels divide into it, else ``CHANNEL_VECTOR``. The tiles read a block's taps contiguously only when their
    lanes are the block's width."""
    wide = target_default_opts(Device[device]).wide_channel_vector
    return wide if wide and cout_per_group % wide == 0 else CHANNEL_VECTOR


def _channels_last_weights(row: int, spatial_row: int, cout_per_group: int, macs: int, device: str,
                           strided_reduce: int = 0) -> bool:
    """Whether a conv stores its weights channel-blocked ((Cout/v, Cin, *k, v) for v = ``channel_block``, read back
    through a permute): when its output rows do not split into vectors (resnet's 14 and 7), the optimizer vectorizes
    across output channels instead (codegen/opt/tiling.py), which needs each tap's weights for v consecutive
    channels side by side; likewise where the output rows (``spatial_row``, the last output dim) are narrower than
    the device's wide vectors and the channels divide into them (openpilot-shaped inputs' 8-wide rows at 1/32
    scale), including a 1x1 conv's, whose tile a fused 3x3 conv's (resnet's projection shortcut) may set; and for a
    conv that reads its input rows at a stride over a reduce of ``strided_reduce`` steps (Cin/g x taps) of at least
    the device's ``OptOptions.strided_channel_trips``, whose tile runs across channels too where they fill the
    device's wide vectors (narrower ones would do half the work a row vector does). ``row`` is what the optimizer
    tiles: the last output dim, or all of them for a 1x1 stride-1 unpadded conv (its rows merge,
    jit/codegen/opt/merge.py). The copy is weight-only work: a capture folds it into the stored weights."""
    opts = target_default_opts(Device[device])
    wide = opts.wide_channel_vector
    narrow = wide and spatial_row < wide and cout_per_group % wide == 0
    strided = 0 < opts.strided_channel_trips <= strided_reduce and not (wide and cout_per_group % wide)
    return (row % CHANNEL_VECTOR != 0 or narrow or strided) and cout_per_group % CHANNEL_VECTOR == 0 and \
        macs >= CHANNELS_LAST_MIN_MACS


DEPTHWISE_CHANNELS_LAST_MIN_MACS = 1 << 18


def _channels_last_depthwise(row: int, kernel: tuple[int, ...], cin_per_group: int, cout_per_group: int, cout: int,
                             macs: int, device: str) -> bool:
    """Whether a depthwise conv (one input and one output channel per group) reads its input and weights
    channels-last (``_depthwise_channels_last``): when its output rows do not split into vectors (the 14- and
    7-wide rows of a 224 input), a row-vector tile falls back to one scalar accumulator per output; channels-last,
    the optimizer's channel-vector tile (codegen/opt/tiling.py) runs its vectors across channels instead, which
    every tap's input and weights then read contiguously. Not for a 1x1 window (nothing to share across taps) nor
    below ``DEPTHWISE_CHANNELS_LAST_MIN_MACS`` (the transposing copy would cost more than it saves), nor for a row
    of at least one of the device's wide vectors (``OptOptions.wide_channel_vector``: efficientnet_b0's 28-wide
    rows over 16 lanes): such a row runs as overlapped row vectors (jit/codegen/opt/overlap.py) over the plain
    layout, whose output stores stay whole vectors where channels-last ones scatter into the plain output, and
    whose input the producer stores itself (jit/schedule/padded_stores.py) where a channels-last copy of its rows
    gathers."""
    wide = target_default_opts(Device[device]).wide_channel_vector
    return cin_per_group == 1 and cout_per_group == 1 and math.prod(kernel) > 1 and row % CHANNEL_VECTOR != 0 \
        and cout % CHANNEL_VECTOR == 0 and macs >= DEPTHWISE_CHANNELS_LAST_MIN_MACS and not (wide and row >= wide)


def _depthwise_channels_last(x: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """A depthwise conv's padded input ``x`` copied channels-last ((N, *spatial, C): the copy the padding needs
    anyway, transposed) and its weights tap-major ((1, *k, C): weight-only work, which a capture folds into the
    stored weights), both read back through a permute in their original shapes, so the conv's loads step one
    channel at a time. The conv computes the same products in the same order from them (float results agree
    within rounding: the C compiler contracts multiply-adds differently in the vector code)."""
    nd = x.ndim - 2
    x = x.permute(0, *range(2, nd + 2), 1).contiguous().permute(0, nd + 1, *range(1, nd + 1))
    weight = weight.permute(1, *range(2, nd + 2), 0).contiguous().permute(nd + 1, 0, *range(1, nd + 1))
    return x, weight


def _phase_rows(x: Tensor, s: int, fill: float | int) -> Tensor:
    """``x`` (..., W) copied as (..., s, ceil(W / s)): each row's s phases side by side, ``x[..., p::s]`` at
    ``[..., p, :]`` (the end filled with ``fill``, which no valid output reads), materialized."""
    width = x.shape[-1]
    per_phase = -(-width // s)
    padded = x.pad(((0, 0),) * (x.ndim - 1) + ((0, per_phase * s - width),), value=fill)
    phases = padded.reshape(*padded.shape[:-1], per_phase, s)
    return phases.permute(*range(phases.ndim - 2), phases.ndim - 1, phases.ndim - 2).contiguous()


def phase_inputs(x: Tensor, s: int, kw: int, out_w: int, fill: float | int) -> list[tuple[int, int, Tensor]]:
    """For a window of ``kw`` taps at stride ``s`` over the last dim of the padded ``x``: per phase p, its tap count
    and the inputs it reads, ``x[..., p::s]`` from one phase copy (``_phase_rows``) as (..., W'). Each is exactly
    as wide as the ``out_w`` outputs need (a shrink of a reduce's output would make it a kernel of its own instead
    of fusing with the other phases)."""
    phases = _phase_rows(x, s, fill)
    views = []
    for p in range(min(s, kw)):
        taps = -(-(kw - p) // s)
        x_p = phases.shrink([None] * (phases.ndim - 2) + [(p, p + 1), (0, out_w + taps - 1)])
        views.append((p, taps, x_p.reshape(*x_p.shape[:-2], x_p.shape[-1])))
    return views


def _phase_split_conv(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, st: tuple[int, ...],
                      dl: tuple[int, ...], out_sp: tuple[int, ...]) -> Tensor:
    """A conv whose last dim has stride s > 1, over its already padded input ``x``, as the sum of s stride-1 convs
    in that dim, one per phase: ``x[..., p::s]`` convolved with the taps ``weight[..., p::s]``.

    Why: read directly, consecutive outputs of a row read inputs s apart, which a vector load cannot do (the
    renderer's two loads and a shuffle per row, or a gather). Here one copy kernel writes the padded input
    with each row's phases side by side (``(..., W) -> (..., s, W / s)``: the copy the padding needed anyway),
    and every phase's conv reads its rows contiguously. The phase convs' reduces fuse into one kernel (each
    with its own tile of accumulators); the weight slices are weight-only work, folded at capture.
    """
    s, kw = st[-1], weight.shape[-1]
    out: Tensor | None = None
    for p, taps, x_p in phase_inputs(x, s, kw, out_sp[-1], 0):
        w_p = weight.shrink([None] * (weight.ndim - 1) + [(p, p + (taps - 1) * s + 1)])
        w_p = w_p.stride([1] * (weight.ndim - 1) + [s]) if taps > 1 else w_p
        conv_p = conv2d(x_p, w_p, None, groups, (*st[:-1], 1), dl, 0)
        out = conv_p if out is None else out + conv_p
    assert out is not None
    return out + bias.reshape(1, -1, *(1,) * (x.ndim - 2)) if bias is not None else out


def _producer_stores_padded(x: Tensor) -> bool:
    """Whether a kernel computing ``x`` will store it straight into its padded copy (jit/schedule/padded_stores.py):
    ``x`` is a reduce's elementwise epilogue (the previous conv's activation), which the scheduler makes a kernel
    output of its own when a pad reads it. The padded copy then costs only its border, where a phase-split copy
    (``_phase_split_conv``) would cost the whole pass over memory or scatter that kernel's row vectors; a stride-2
    conv reads the plain padded copy two loads and a shuffle a vector instead."""
    if not STORE_VIEWS:
        return False
    node = x.uop
    while node.op in GroupOp.Elementwise or node.op is Ops.RESHAPE:
        if any(s.op is Ops.REDUCE_AXIS for s in node.src):
            return True
        node = next((s for s in node.src if s.op not in (Ops.CONST, Ops.BUFFER) and s.shape == node.shape),
                    node.src[0])
    return False


def rows_across_memory(x: Tensor, through_constants: bool = False) -> bool:
    """Whether ``x`` is a transposed view whose last axis is not its source's last: read in place, consecutive
    elements of a row lie a whole plane apart (timm's LayerNorm2d, ``Transpose -> LayerNormalization ->
    Transpose``, in front of every ConvNeXt 1x1 conv), and the conv's row vectors are gathered lane by lane.
    ``through_constants``: also through elementwise ops whose other operands are constants (attention's keys
    scaled after their transpose, ``k^T * sqrt(scale)``)."""
    node = x.uop
    while through_constants and node.op in GroupOp.Elementwise and \
            len(data := [s for s in node.src if not _constant(s)]) == 1:
        node = data[0]
    while node.op in GroupOp.Movement:
        if node.op is Ops.PERMUTE:
            return node.arg[-1] != len(node.arg) - 1 and node.shape is not None and node.shape[-1] > 1
        if node.op is not Ops.RESHAPE or node.shape is None or node.src[0].shape is None or \
                node.shape[-1] != node.src[0].shape[-1]:
            return False  # a reshape that regroups the last axis, or a window/pad: its rows are its own business
        node = node.src[0]
    return False


def _constant(u: UOp) -> bool:
    """Whether ``u`` is a constant seen through movement ops (a broadcast scalar)."""
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u.op is Ops.CONST


def _input_scaled(weight: Tensor, input_scale: Tensor | None) -> Tensor:
    """``weight`` (Cout, Cin/groups, *k) times ``input_scale`` (Cin,) per input channel; ``weight`` when None."""
    if input_scale is None:
        return weight
    return weight * input_scale.reshape(1, weight.shape[1], *(1,) * (weight.ndim - 2))


def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: IntOrTuple = 1,
           dilation: IntOrTuple = 1, padding: Any = 0, input_scale: Tensor | None = None) -> Tensor:
    """N-d convolution (cross-correlation): input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel).

    ``padding`` is an int, one value per spatial dim, (begin, end) pairs, or flat ONNX pads
    (begin..., end...) for asymmetric padding. Conv and bias compute in one reduce kernel. ``input_scale`` (Cin,):
    the conv of ``self`` times that scale per input channel, carried by the weights (jit/frontend/channel_scale.py).
    """
    if input_scale is None and (scaled := channel_scaled(self, weight, groups)):  # squeeze-and-excitation's scale
        return conv2d(scaled[0], weight, bias, groups, stride, dilation, padding, input_scale=scaled[1])
    if tile := pick_tile(self, weight, groups, stride, dilation, padding):
        return winograd_conv2d(self, _input_scaled(weight, input_scale), bias, padding, tile,
                               int_tuple(stride, 2, "conv stride")[0])
    nd = weight.ndim - 2
    if nd < 1 or self.ndim != weight.ndim:
        raise ShapeError(f"conv: input {self.shape} and weight {weight.shape} expected the same rank >= 3")
    cout, cin_g, *kernel = weight.shape
    bs, cin = self.shape[:2]
    if groups < 1 or cin != cin_g * groups or cout % groups:
        raise ShapeError(f"conv: input channels {cin} expected weight.shape[1] * groups = {cin_g} * {groups} "
                         f"= {cin_g * groups} (and output channels {cout} divisible by groups), "
                         f"input {self.shape}, weight {weight.shape}")
    if bias is not None and bias.shape != (cout,):
        raise ShapeError(f"conv: bias expected shape ({cout},), got {bias.shape}")
    if input_scale is not None and (groups != 1 or input_scale.shape != (cin,)):
        raise ShapeError(f"conv: input_scale expected shape ({cin},) with groups 1, got {input_scale.shape} with "
                         f"groups {groups}")
    st, dl = int_tuple(stride, nd, "conv stride"), int_tuple(dilation, nd, "conv dilation")
    pads = spatial_pads(padding, nd, "conv padding")
    x = self.pad(((0, 0), (0, 0), *pads))
    win = window(x, tuple(kernel), st, dl)  # (N, Cin, *out, *k)
    out_sp = win.shape[2:2 + nd]
    macs = bs * cout * math.prod(out_sp) * cin_g * math.prod(kernel)
    if macs >= PAD_MATERIALIZE_MIN_MACS and rows_across_memory(self):
        return conv2d(self.contiguous(), weight, bias, groups, stride, dilation, padding, input_scale)
    if math.prod(kernel) == 1 and max(st) > 1 and macs >= PAD_MATERIALIZE_MIN_MACS:
        # a strided 1x1 conv (resnet's projection shortcuts) over a subsampled copy: a stride-1 pointwise conv's
        # rows merge into one long vector row (jit/codegen/opt/merge.py) instead of 28- or 14-wide rows read at stride 2
        return conv2d(win.reshape(bs, cin, *out_sp).contiguous(), weight, bias, groups, input_scale=input_scale)
    if input_scale is not None and math.prod(kernel) > 1:
        weight, input_scale = _input_scaled(weight, input_scale), None
    if _channels_last_depthwise(out_sp[-1], tuple(kernel), cin_g, cout // groups, cout, macs, self.device):
        x, weight = _depthwise_channels_last(x, weight)
        win = window(x, tuple(kernel), st, dl)
    elif _materialize_pad(pads, tuple(kernel), bs * cout * math.prod(out_sp), cin_g):
        if st[-1] > 1 and dl[-1] == 1 and kernel[-1] > 1 and not _producer_stores_padded(self):
            return _phase_split_conv(x, weight, bias, groups, st, dl, out_sp)
        win = window(x.contiguous(), tuple(kernel), st, dl)
    g, cout_g = groups, cout // groups
    ones = (1,) * nd
    pointwise = math.prod(kernel) == 1 and all(s == 1 for s in st) and not any(b or e for b, e in pads)
    if pointwise and groups == 1 and macs >= PAD_MATERIALIZE_MIN_MACS and \
            (rows := plane_aligned_rows(self, cout)) is not None:
        out = conv2d(rows, weight.reshape(cout, cin, 1), bias, input_scale=input_scale)
        return plane_of_padded_rows(out, tuple(out_sp))
    if pointwise and groups == 1 and math.prod(out_sp) == 1:
        # over one pixel (squeeze-and-excitation's two convs after a global pool) a 1x1 conv is a matrix-vector
        # product: tiled as one, its weights stored (Cin, Cout) rows, not gathered a channel at a time
        matrix = _input_scaled(weight, input_scale).reshape(cout, cin)
        out = x.reshape(bs, cin).matmul(matrix.T).reshape(bs, cout, *out_sp)
        return out + bias.reshape(1, cout, *ones) if bias is not None else out
    row = math.prod(out_sp) if pointwise else out_sp[-1]
    strided_reduce = cin_g * math.prod(kernel) if st[-1] > 1 and kernel[-1] > 1 else 0
    if _channels_last_weights(row, out_sp[-1], cout_g, macs, self.device, strided_reduce):
        # blocks of v channels, each block's taps contiguous (Cout/v, Cin, *k, v): one block's reduce streams
        # 4v-byte steps through memory; plain channels-last (Cin, *k, Cout) steps Cout floats per tap, which at
        # resnet's 512 (2 KB) lands every tap in the same few cache sets (measured 3x slower)
        n, v = weight.ndim, channel_block(cout_g, self.device)
        blocked = weight.reshape(cout // v, v, *weight.shape[1:]).permute(0, *range(2, n + 1), 1).contiguous()
        if input_scale is not None:  # scaled in the layout the conv reads: one contiguous pass
            blocked = (blocked * input_scale.reshape(1, cin, *ones, 1)).contiguous()
            input_scale = None
        weight = blocked.permute(0, n, *range(1, n)).reshape(weight.shape)
    weight = _input_scaled(weight, input_scale)
    xw = win.reshape(bs, g, 1, cin_g, *out_sp, *kernel)
    ww = weight.reshape(1, g, cout_g, cin_g, *ones, *kernel)
    out_dtype = least_upper_dtype(self.dtype, weight.dtype)
    red = (3, *range(4 + nd, 4 + 2 * nd))  # Cin/g and the kernel dims
    out = _sum_as(xw * ww, red, out_dtype).reshape(bs, cout, *out_sp)
    return out + bias.reshape(1, cout, *ones) if bias is not None else out


def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                     stride: IntOrTuple = 1, dilation: IntOrTuple = 1, padding: Any = 0,
                     output_padding: IntOrTuple = 0) -> Tensor:
    """N-d transposed convolution: input (N, Cin, *spatial), weight (Cin, Cout/groups, *kernel) (PyTorch/ONNX).

    Zeros are inserted between input elements (stride), the result is padded by ``dilation*(k-1) - padding``
    and convolved with the spatially flipped, in/out-swapped weight.
    """
    nd = weight.ndim - 2
    if nd < 1 or self.ndim != weight.ndim:
        raise ShapeError(f"conv_transpose: input {self.shape} and weight {weight.shape} expected the same "
                         f"rank >= 3")
    cin, cout_g, *kernel = weight.shape
    if groups < 1 or self.shape[1] != cin or cin % groups:
        raise ShapeError(f"conv_transpose: input channels {self.shape[1]} expected weight.shape[0] = {cin} "
                         f"(divisible by groups {groups}), input {self.shape}, weight {weight.shape}")
    st, dl = int_tuple(stride, nd, "conv_transpose stride"), int_tuple(dilation, nd, "conv_transpose dilation")
    opad = int_tuple(output_padding, nd, "conv_transpose output_padding")
    pads = spatial_pads(padding, nd, "conv_transpose padding")
    bs, sp = self.shape[0], self.shape[2:]
    x = self
    if any(s > 1 for s in st):
        # (.., n) -> (.., n, 1) -> pad to (.., n, s) -> (.., n*s) -> keep (n-1)*s+1: zeros between elements
        x = x.reshape(bs, cin, *[v for n in sp for v in (n, 1)])
        x = x.pad(((0, 0), (0, 0), *[p for s in st for p in ((0, 0), (0, s - 1))]))
        x = x.reshape(bs, cin, *[n * s for n, s in zip(sp, st, strict=True)])
        x = x.shrink(((0, bs), (0, cin), *[(0, (n - 1) * s + 1) for n, s in zip(sp, st, strict=True)]))
    full = [d * (k - 1) for d, k in zip(dl, kernel, strict=True)]
    # negative amounts (padding > dilation*(k-1)) crop, which Tensor.pad does with a shrink
    x = x.pad(((0, 0), (0, 0), *[(f - b, f - e + o) for f, (b, e), o in zip(full, pads, opad, strict=True)]))
    g, cin_g = groups, cin // groups
    w = weight.reshape(g, cin_g, cout_g, *kernel).transpose(1, 2).reshape(g * cout_g, cin_g, *kernel)
    w = w.flip(*range(2, 2 + nd))
    return conv2d(x, w, bias, groups=groups, stride=1, dilation=dl, padding=0)


# --- softmax and normalization -----------------------------------------------------------------------
def _shifted(x: Tensor, axis: int, keep_inf: bool = False) -> tuple[Tensor, Tensor]:
    """(x - max, max) along ``axis``; a row that is all -inf shifts by 0 so it does not become nan, and so does a
    row whose max is +inf unless ``keep_inf`` (softmax: inf - inf makes the whole row NaN, as onnxruntime's)."""
    x = x._float_operand()
    m = x.max(axis, keepdim=True)
    m = (m == -math.inf).where(0.0, m) if keep_inf else m.isinf().where(0.0, m)
    return x - m, m


def softmax(self: Tensor, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``, shifted by the max so exp cannot overflow. Each row's sum is inverted
    once and multiplied in, as onnxruntime's softmax does, where a division per element costs a vector divide each
    (several multiplies' time)."""
    e = _shifted(self, axis, keep_inf=True)[0].exp()
    return e * e.sum(axis, keepdim=True).reciprocal()


def log_softmax(self: Tensor, axis: int = -1) -> Tensor:
    """``x - logsumexp(x)`` along ``axis``."""
    s = _shifted(self, axis, keep_inf=True)[0]
    return s - s.exp().sum(axis, keepdim=True).log()


def logsumexp(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis`` without overflow."""
    if axis is None:
        axis = tuple(range(self.ndim))
    s, m = _shifted(self, axis)  # type: ignore[arg-type]
    out = s.exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.squeeze(axis)


def layer_norm(self: Tensor, normalized_shape: IntOrTuple | None = None, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5, axis: int | None = None) -> Tensor:
    """Normalize over the trailing dims: ``normalized_shape`` (PyTorch) or every axis from ``axis`` (ONNX).

    Without either, the last axis. ``weight`` and ``bias`` broadcast against the normalized dims.
    """
    if axis is not None:
        if not -self.ndim <= axis < self.ndim:
            raise AxisError(f"layer_norm: axis expected in [{-self.ndim}, {self.ndim - 1}], got {axis}")
        start = axis % self.ndim
    elif normalized_shape is not None:
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if self.shape[self.ndim - len(ns):] != ns or len(ns) > self.ndim:
            raise ShapeError(f"layer_norm: normalized_shape {ns} expected to match the trailing dims of {self.shape}")
        start = self.ndim - len(ns)
    else:
        start = self.ndim - 1
    axes = tuple(range(start, self.ndim))
    x = self._float_operand()
    centered = x - x.mean(axes, keepdim=True)
    var = (centered * centered).mean(axes, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out + bias if bias is not None else out


def batch_norm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, var: Tensor | None = None,
               eps: float = 1e-5, invstd: Tensor | None = None, axis: int = 1) -> Tensor:
    """Inference batch norm: ``(x - mean) * invstd * weight + bias`` with per-channel (``axis``) parameters.

    Give either ``var`` (``invstd = 1/sqrt(var + eps)``) or ``invstd``.
    """
    ax = axis % self.ndim
    c = self.shape[ax]
    shape = tuple(c if i == ax else 1 for i in range(self.ndim))

    def chan(t: Tensor, what: str) -> Tensor:
        if t.numel() != c:
            raise ShapeError(f"batch_norm: {what} expected {c} elements (axis {ax} of {self.shape}), got {t.shape}")
        return t.reshape(shape)

    if invstd is None:
        if var is None:
            raise ShapeError("batch_norm: expected var or invstd, got neither")
        invstd = (var + eps).rsqrt()
    scale = chan(invstd, "invstd")
    if weight is not None:
        scale = scale * chan(weight, "weight")
    out = (self._float_operand() - chan(mean, "mean")) * scale
    return out + chan(bias, "bias") if bias is not None else out


# --- the methods -------------------------------------------------------------------------------------
TENSOR_METHODS: dict[str, Any] = {
    "matmul": matmul, "dot": matmul, "linear": linear, "gemm": gemm,
    "conv2d": conv2d, "conv1d": conv2d, "conv3d": conv2d, "conv": conv2d,
    "conv_transpose2d": conv_transpose2d, "conv_transpose1d": conv_transpose2d,
    "conv_transpose3d": conv_transpose2d, "conv_transpose": conv_transpose2d,
    "softmax": softmax, "log_softmax": log_softmax, "logsumexp": logsumexp,
    "layer_norm": layer_norm, "layernorm": layer_norm, "batch_norm": batch_norm, "batchnorm": batch_norm,
}
