"""Winograd F(2,3) / F(4,3) convolution for 3x3 convs of stride 1 and 2, built from Tensor ops (WINO setting).

A 3x3 stride-1 conv computes each m x m output tile from an (m+2) x (m+2) input tile d with
``Y = A^T [(G g G^T) * (B^T d B)] A`` (Lavin & Gray 2015): per tile, channel pair and r = m+2, r*r multiplies
instead of 9*m*m (2.25x fewer for F(2,3), 4x fewer for F(4,3)), paid for by the input and output transforms.

A stride-2 conv is the same product with other matrices (``strided_matrices``): along each axis its taps split
by phase, ``y[i] = (g0 x[2i] + g2 x[2i+2]) + g1 x[2i+1]``, a 2-tap stride-1 correlation of the even inputs
(Winograd F(m,2), m+1 points) plus a 1-tap one of the odd inputs (m points, no transform). An m x m output
tile reads a (2m+1) x (2m+1) input tile, tiles 2m apart, and costs r*r = (2m+1)^2 multiplies per channel pair
instead of 9*m*m (1.78x fewer for m = 4).

The graph, all lazy Tensor ops, so the normal scheduler and codegen see it (r: the input tile, m+2 or 2m+1):

1. U = G g G^T per (Cout, Cin), laid out as step 3 reads it. It reads only the weight. It is r*r/9 times larger
   than the filters, so capture's frontier folding (which keeps values no larger than the weights they read)
   leaves it alone, but its kernels read no input: capture (jit/trace.py) runs them once and binds U as a
   weight; a replay never sees the 3x3 filters;
2. V = B^T d B per input tile: the padded input is materialized channels-last (no bounds checks in the
   transform), then transformed one axis at a time in one elementwise kernel. B's entries are immediates
   (``_contract_const``: a stack of sums over its nonzero entries; the optimizer unrolls the stacked axes,
   jit/codegen/opt/select.py, so each value is its few terms and the first axis' results are shared by the second),
   reading and writing whole vectors of channels. Each of V's r*r planes ends in spare tiles where its size
   would put a tile's r*r stores in too few L1 sets (``spare_tiles``);
3. M = sum over Cin of V * U: r*r batched GEMMs (tiles x Cin) @ (Cin x Cout) in one reduce kernel. V holds each
   tile's channels contiguously (one broadcast per tile row of the register tile) and U is stored in blocks of
   16 output channels, each (Cin, 16) contiguous: M is written (r*r, N, Cout blocks, tiles, 16), so the kernel runs
   every tile against one block of U while it stays in cache (U is r*r/9 times the filters: re-read from memory
   per tile row, resnet50's 7x7 GEMMs ran at 13 GFLOP/s);
4. Y = A^T M A, again one axis at a time: the first step keeps M's blocks of channels (vectors in and out), the
   last writes (N, Cout, H, W) in place, four outputs of a tile row as one vector (jit/codegen/opt/split.py makes the
   tile's column a loop of its own), so the bias and the elementwise ops that follow (BN, activation, residual
   add) are that reduce's epilogue, fused by the scheduler as for a direct conv. Tiles that overhang the output
   are computed from zero padding and shrunk off, so any H, W and padding work.

Each transform step is a reduce against a small constant table (``_contract``): where its result is read at other
indices the scheduler makes it a kernel of its own, computed once (fused into the GEMM, a transform would be
recomputed once per output channel).
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import numpy as np

from jit.codegen.opt import target_default_opts
from jit.common.dtype import dtypes, least_upper_dtype
from jit.common.errors import DrivepackError, ShapeError
from jit.common.helpers import WINO
from jit.frontend.movement import window
from jit.frontend.shapes import int_tuple, spatial_pads
from jit.frontend.tensor import Tensor
from targets.base import CacheLevel
from targets.registry import Device

TILES = (2, 4)
_TILE_ROWS = 4  # the GEMM's reuse height (jit/codegen/opt/tiling.py): tile counts are padded to a multiple of it

STRIDES = (1, 2)
# F(m, 3) matrices: B^T (r x r), G (r x 3), A^T (m x r), r = m + 2, with interpolation points 0, +-1 (, +-2), inf
_MATRICES: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}


# F(m, 2) matrices (a 2-tap filter): B^T (m+1 x m+1), G (m+1 x 2), A^T (m x m+1), points 0, 1 (, -1, 2), inf
_MATRICES_2TAP: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
    2: (np.array([[1, -1, 0], [0, 1, 0], [0, -1, 1]], np.float64),
        np.array([[1, 0], [1, 1], [0, 1]], np.float64),
        np.array([[1, 1, 0], [0, 1, 1]], np.float64)),
    4: (np.array([[2, -1, -2, 1, 0], [0, -2, -1, 1, 0], [0, 2, -3, 1, 0], [0, -1, 0, 1, 0], [0, 2, -1, -2, 1]],
                 np.float64),
        np.array([[1 / 2, 0], [-1 / 2, -1 / 2], [-1 / 6, 1 / 6], [1 / 6, 1 / 3], [0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 0], [0, 1, -1, 2, 0], [0, 1, 1, 4, 0], [0, 1, -1, 8, 1]], np.float64)),
}


class WinogradSettingError(DrivepackError, ValueError):
    """A WINO value that is none of 0, 2, 4, auto."""


def matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(tile, 3) in float64."""
    if tile not in _MATRICES:
        raise ShapeError(f"winograd tile: expected one of {TILES}, got {tile}")
    return _MATRICES[tile]


def strided_matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of a 3x3 stride-2 conv's m x m output tile (r = 2m + 1), from F(m, 2) (module docstring):
    B^T's first m+1 rows transform the even inputs of a tile, its last m pick the odd ones; G maps taps (0, 2)
    through F(m, 2) and repeats tap 1; A^T adds the two parts."""
    if tile not in _MATRICES_2TAP:
        raise ShapeError(f"winograd tile: expected one of {TILES}, got {tile}")
    bt2, g2, at2 = _MATRICES_2TAP[tile]
    r = 2 * tile + 1
    bt, g, at = np.zeros((r, r)), np.zeros((r, 3)), np.zeros((tile, r))
    bt[:tile + 1, 0::2] = bt2
    bt[tile + 1:, 1::2] = np.eye(tile)
    g[:tile + 1, 0], g[:tile + 1, 2], g[tile + 1:, 1] = g2[:, 0], g2[:, 1], 1
    at[:, :tile + 1], at[:, tile + 1:] = at2, np.eye(tile)
    return bt, g, at


def conv_matrices(tile: int, stride: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) for a 3x3 conv of ``stride`` (1 or 2) by m x m output tiles."""
    if stride not in STRIDES:
        raise ShapeError(f"winograd stride: expected one of {STRIDES}, got {stride}")
    return matrices(tile) if stride == 1 else strided_matrices(tile)


def _contract(t: Tensor, mat: np.ndarray, out_axis: int) -> Tensor:
    """``sum_k mat[p, k] * t[..., k]`` over the trailing axis of ``t``, the new axis p at ``out_axis`` of the
    result. A reduce over k against a small constant table: where the result is read at other indices (the next
    transform step, the GEMM) the scheduler makes it a kernel of its own, computed once."""
    p, k = mat.shape
    lead = t.shape[:-1]
    x = t.reshape(*lead[:out_axis], 1, *lead[out_axis:], k)
    shape = [1] * (len(lead) + 2)
    shape[out_axis], shape[-1] = k, p
    # stored (k, p): where p is a kernel's contiguous output axis (the last step), its tile loads whole vectors
    order = list(range(len(shape)))
    order[out_axis], order[-1] = order[-1], order[out_axis]
    table = Tensor(np.ascontiguousarray(mat.T, np.float32), device=t.device).reshape(shape).permute(*order)
    return (x * table).sum(-1)


def _contract_const(t: Tensor, mat: np.ndarray, out_axis: int) -> Tensor:
    """``_contract`` with ``mat``'s entries as immediates: for each p the sum of its nonzero terms
    ``mat[p, k] * t[..., k]`` (no multiply for +-1), stacked along ``out_axis``. An elementwise result: it fuses
    into whatever reads it, so a caller that reads it at other indices makes it ``contiguous``."""
    lead = t.shape[:-1]
    whole = tuple((0, n) for n in lead)
    slices = [t.shrink((*whole, (k, k + 1))).reshape(*lead) for k in range(mat.shape[1])]
    terms = []
    for row in mat:  # the transforms' matrices have no all-zero row
        parts = [s if c == 1 else -s if c == -1 else s * float(c) for s, c in zip(slices, row, strict=True) if c]
        terms.append(functools.reduce(operator.add, parts).unsqueeze(out_axis))
    return Tensor.cat(*terms, dim=out_axis)


def plane_sets(plane_bytes: int, l1: CacheLevel) -> int:
    """How many sets of the L1 ``l1`` the same element of consecutive planes ``plane_bytes`` apart falls in: loads
    of one pixel's channels hold at most that many times ``l1.ways`` lines at once."""
    if plane_bytes % l1.line:
        return l1.sets  # lines not aligned to planes: the elements spread over every set
    return l1.sets // math.gcd(plane_bytes // l1.line, l1.sets)


def spare_tiles(batch: int, tiles: int, cin: int, planes: int, l1: CacheLevel, itemsize: int = 4) -> int:
    """Tiles of padding after each image's ``tiles`` in V's ``planes`` planes (``batch`` x tiles x ``cin`` values
    each) so that the input transform's ``planes`` stores of one tile, one per plane, fall in enough sets of the L1
    ``l1`` to be held at once: planes a multiple of sets x line apart (4 KB in a 32 KB 8-way L1 of 64-byte lines)
    put them all in one set (vision's 48 channels of 8 x 16 tiles: 24 KB planes: the transform took 152 us on one
    core, 94 us with one spare tile in a C harness; whole vision replay 9.23 -> 8.97 ms). 0 where no spare tile
    (of 1-7) spreads them enough: a tile of 256 channels is 16 cache lines, so planes stay in at most 4 sets."""
    sets = (plane_sets(batch * (tiles + p) * cin * itemsize, l1) for p in range(8))
    return next((p for p, n in enumerate(sets) if n * l1.ways >= planes), 0)


def cout_block(cout: int) -> int:
    """Output channels per block of U: the GEMM sweeps every tile against one block, which stays in cache."""
    return next((b for b in (16, 8) if cout % b == 0), cout)


def winograd_weight(weight: Tensor, tile: int, stride: int = 1) -> Tensor:
    """U = G g G^T for every (Cout, Cin) filter, laid out (r*r, Cout blocks, Cin, block) (``cout_block``),
    contiguous (weight-only work)."""
    cout, cin = weight.shape[:2]
    _, g, _ = conv_matrices(tile, stride)
    r = g.shape[0]
    u = _contract(weight.reshape(cout, cin, 3, 3), g, 0)  # (q, Cout, Cin, kh): G along each filter row
    u = _contract(u, g, 0)  # (p, q, Cout, Cin): G along each filter column
    cb = cout_block(cout)
    return u.reshape(r * r, cout // cb, cb, cin).permute(0, 1, 3, 2).contiguous()


def _fit(x: Tensor, axis: int, before: int, length: int) -> Tensor:
    """``x`` along ``axis`` with ``before`` zeros in front and cut or zero-padded at the end to ``length``."""
    n = x.shape[axis]
    keep = min(n, length - before)
    if keep < n:
        x = x.shrink(tuple((0, keep) if i == axis else (0, s) for i, s in enumerate(x.shape)))
    return x.pad(tuple((before, length - before - keep) if i == axis else (0, 0) for i in range(x.ndim)))


def winograd_conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, padding: Any = 0,
                    tile: int = 4, stride: int = 1) -> Tensor:
    """3x3 conv (groups 1, dilation 1, ``stride`` 1 or 2) of x (N, Cin, H, W) with weight (Cout, Cin, 3, 3) by
    m x m output tiles, m = ``tile``.

    ``padding`` as conv2d takes it (an int, two values, two pairs or flat ONNX pads). Computes in float32;
    the result has conv2d's dtype.
    """
    if x.ndim != 4 or weight.ndim != 4 or tuple(weight.shape[2:]) != (3, 3):
        raise ShapeError(f"winograd conv: input (N, Cin, H, W) and weight (Cout, Cin, 3, 3) expected, got input "
                         f"{x.shape}, weight {weight.shape}")
    bs, cin, h, w = x.shape
    cout = weight.shape[0]
    if weight.shape[1] != cin:
        raise ShapeError(f"winograd conv: weight.shape[1] expected {cin} (groups 1), got {weight.shape[1]}")
    if bias is not None and bias.shape != (cout,):
        raise ShapeError(f"winograd conv: bias expected shape ({cout},), got {bias.shape}")
    bt, _, at = conv_matrices(tile, stride)
    r, step = bt.shape[0], tile * stride  # input tile side, input rows between tiles
    (pt, pb), (pl, pr) = spatial_pads(padding, 2, "winograd conv padding")
    if h + pt + pb < 3 or w + pl + pr < 3:
        raise ShapeError(f"winograd conv: padded input {(h + pt + pb, w + pl + pr)} expected at least 3x3")
    oh, ow = (h + pt + pb - 3) // stride + 1, (w + pl + pr - 3) // stride + 1
    th, tw = math.ceil(oh / tile), math.ceil(ow / tile)
    # extra tile rows (zero input, outputs dropped) make the tile count a multiple of the GEMM's reuse height
    th_pad = th
    while th_pad * tw % _TILE_ROWS:
        th_pad += 1
    out_dtype = least_upper_dtype(x.dtype, weight.dtype)
    xf = x.cast(dtypes.float32) if x.dtype != dtypes.float32 else x
    wf = weight.cast(dtypes.float32) if weight.dtype != dtypes.float32 else weight
    # padded to whole tiles (cut where a stride-2 conv never reads the last rows) and channels-last
    # (N, Hp, Wp, Cin), materialized: the transform reads whole vectors of channels with no bounds checks and
    # writes V in the GEMM's layout
    xp = _fit(_fit(xf, 2, pt, (th_pad - 1) * step + r), 3, pl, (tw - 1) * step + r)
    l1 = Device[x.device].limits.l1  # the caches of the device the conv runs on
    if plane_sets(h * w * xf.dtype.itemsize, l1) * l1.ways < cin:
        # planes 4 KB apart put every channel of a pixel in the same L1 set (2 KB apart: in two), so the
        # channels-last copy gathering them straight from the input missed L1 on every load (vision's 48 channels
        # of 32x64: 0.22 ms, vs 0.10 + 0.04 for a padded copy first, whose planes are not; its 96 channels of
        # 16x32: 68-73 us, vs 9 + 11-18 us)
        xp = xp.contiguous()
    xp = xp.permute(0, 2, 3, 1).contiguous()
    rows = window(xp.permute(0, 1, 3, 2), (r,), (step,), (1,))  # (N, Hp, Cin, TW, r): overlapping column tiles
    t1 = _contract_const(rows.permute(0, 1, 3, 2, 4), bt, 2)  # (N, Hp, j, TW, Cin)
    cols = window(t1.permute(0, 2, 3, 4, 1), (r,), (step,), (1,))  # (N, j, TW, Cin, TH, k)
    # V laid out (i, j, N, TH, TW, Cin): each tile's channels contiguous, broadcast against a vector of U's Cout;
    # one kernel for both axes (jit/codegen/opt/select.py unrolls i and j), computed once: the GEMM reads each value
    # for every block of output channels
    v = _contract_const(cols.permute(1, 0, 4, 2, 3, 5), bt, 0).reshape(r, r, bs, th_pad * tw, cin)
    # each plane (i, j) of V padded with spare tiles, never read, so a tile's r*r stores do not share one L1 set
    spare = spare_tiles(bs, th_pad * tw, cin, r * r, l1)
    if spare:
        v = v.pad(((0, 0), (0, 0), (0, 0), (0, spare), (0, 0))).contiguous()
        v = v.shrink(((0, r), (0, r), (0, bs), (0, th_pad * tw), (0, cin)))
    else:
        v = v.contiguous()
    cb = cout_block(cout)
    u = winograd_weight(wf, tile, stride).reshape(r * r, 1, cout // cb, 1, cin, cb)
    m = (v.reshape(r * r, bs, 1, th_pad * tw, cin, 1) * u).sum(4)  # (r*r, N, Cout blocks, tiles, block)
    m = m.reshape(r, r, bs, cout // cb, th_pad, tw, cb)[:, :, :, :, :th]
    # output transform A^T M A, one axis at a time. The first step reads M's blocks of cb channels and writes them
    # as blocks again (whole vectors both ways); the last writes (N, Cout, TH, p, TW, q), a reduce whose only
    # movement ops up to the bias are a reshape and the shrink of overhanging tiles, so the scheduler treats
    # bias/BN/activation as its epilogue exactly as for a direct conv
    o1 = _contract(m.permute(2, 3, 4, 1, 5, 6, 0), at, 3)  # (N, COB, TH, p, j, TW, CB)
    y = _contract(o1.permute(0, 1, 6, 2, 3, 5, 4), at, 6)  # (N, COB, CB, TH, p, TW, q)
    y = y.reshape(bs, cout, th * tile, tw * tile)
    if th * tile != oh or tw * tile != ow:
        y = y.shrink(((0, bs), (0, cout), (0, oh), (0, ow)))
    y = y.cast(out_dtype) if out_dtype != dtypes.float32 else y
    return y + bias.reshape(1, cout, 1, 1) if bias is not None else y


def setting_tile(value: Any | None = None) -> int | str:
    """The WINO setting as 0 (off), 2, 4 or "auto"; a typed error for anything else."""
    raw = WINO.value if value is None else value
    text = str(raw).strip().lower()
    if text in ("", "0"):
        return 0
    if text == "auto":
        return "auto"
    if text in ("2", "4"):
        return int(text)
    raise WinogradSettingError(f"WINO: expected one of 0, 2, 4, auto, got {raw!r}")


# the fewest channels (in and out) F(4,3) pays from, and on halved 16-lane units (stride 1: auto_tile says why)
MIN_WINOGRAD_CHANNELS = 32
MIN_WINOGRAD_CHANNELS_HALVED = 16
# the smallest output side F(4,3) pays from (4 tiles at 7x7), and where the direct conv's tiles are 16 lanes wide
# (a machine where they pay: targets/cpu_fma.py): 16 tiles at 14x14
MIN_WINOGRAD_SIDE = 7
MIN_WINOGRAD_SIDE_WIDE = 14


def auto_tile(cin: int, cout: int, oh: int, ow: int, stride: int = 1, wide: bool = False,
              halved: bool = False) -> int:
    """The "auto" heuristic (the default): which m x m output tile to use for a conv of this size (``stride`` 1 or
    2), 0 for the direct conv; ``wide``: the device's direct conv tiles 16-lane vectors; ``halved``: on halved
    units.

    Winograd saves multiplies in the GEMM only; the transforms cost per tile and channel regardless of the other
    channel count, so small channel counts do not pay for them (cin, cout >= 32). Measured per conv with the
    profile of ``benchmarks/bench_models.py``'s models against the direct conv (about 75% of the FMA peak here),
    transforms included: F(4,3) takes resnet50's 3x3 convs from 3.9 to 2.6-2.9 ms at 56x56 (64 channels), 3.7-4.3
    to 2.3-2.6 at 28x28 (128), 4.1-4.5 to 2.9-3.0 at 14x14 (256) and 3.8-4.1 to 2.5 at 7x7 (512); F(2,3) wins
    less at every size. So F(4,3) from 7x7 outputs up (4 tiles); the direct conv below that. The same on OpenCL
    (PoCL): vision replay 26.4 -> 19.5 ms, resnet50 181 -> 130 ms.

    Stride 2 transforms weights into 81 points instead of 9 taps (36 for stride 1), so U is 9x the filters and
    must be re-read by enough tiles: from 32 tiles (512 outputs) up. Vision's 48 -> 96 channel conv (16x32
    outputs, 32 tiles): replay 11.13 -> 10.67 ms on the CPU (27 of 30 alternating blocks), 14.25 -> 13.78 on
    PoCL; its 96 -> 128 one (8 tiles) and its 24 -> 48 one (24 channels) were slower by Winograd.

    Where the direct conv runs 16-lane tiles (twice the FMA rate), 4 tiles no longer pay for the transforms and for
    U, 4x the filters streamed per call (37.7 MB at 512 channels): resnet18's 7x7 convs direct took its two-thread
    replay from 10.5-10.9 to 8.9-9.1 ms (one thread 16.0-16.5 to 15.6-15.8), so F(4,3) from 14x14 there.

    ``halved``: the device runs those 16-lane tiles on halved units (``Target.halved_wide_fma``), half the
    multiply-add rate of full-width ones, so saving multiply-adds pays from fewer channels: squeezenet1_1's 16 -> 64
    channel expands at 55x55 by F(4,3) took its replay 4-11% faster on such a machine (AMD EPYC, both orders of
    alternating A/B runs, one and two threads), so stride-1 convs from 16 channels there. Its stride-2 analogue
    (vision's 24 -> 48 conv) was neutral, so stride 2 keeps 32. And below 14x14, where F(4,3) no longer pays for
    16-lane tiles, F(2,3) (a quarter of U's size, 16 points a tile) still does there: resnet18's 7x7 convs and
    squeezenet1_1's 13x13 ones took resnet18 6-12% and squeezenet1_1 0-7% faster (both orders, one and two
    threads), resnet18_op (8x16) 1%; so F(2,3) for 7x7 up to 13x13 outputs on halved units. On full-width 16-lane
    units (Intel AVX-512) F(2,3) there was as fast or faster too (resnet18_op's 8x16 stage gained the most; the
    issue 25 notes have the figures), so every wide device takes it.
    """
    least = MIN_WINOGRAD_CHANNELS_HALVED if halved and stride == 1 else MIN_WINOGRAD_CHANNELS
    if min(cin, cout) < least or (stride == 2 and oh * ow < 512):
        return 0
    side = min(oh, ow)
    if side >= (MIN_WINOGRAD_SIDE_WIDE if wide else MIN_WINOGRAD_SIDE):
        return 4
    return 2 if wide and stride == 1 and side >= MIN_WINOGRAD_SIDE else 0


def pick_tile(x: Tensor, weight: Tensor, groups: int, stride: Any, dilation: Any, padding: Any) -> int:
    """The Winograd tile conv2d should use for this call under the WINO setting, 0 for the direct conv."""
    setting = setting_tile()
    if not setting or weight.ndim != 4 or x.ndim != 4 or tuple(weight.shape[2:]) != (3, 3) or groups != 1:
        return 0
    # U's kernels run on the conv's device and read the weight there: a weight held by another device (a
    # Tensor(array) on the default device in an OPENCL capture) handed them the CPU's memory and failed
    if weight.device != x.device:
        return 0
    strides = int_tuple(stride, 2, "conv stride")
    if strides not in ((1, 1), (2, 2)) or int_tuple(dilation, 2, "conv dilation") != (1, 1):
        return 0
    if not (x.dtype.is_float and weight.dtype.is_float):
        return 0
    if setting != "auto":
        return int(setting)
    (pt, pb), (pl, pr) = spatial_pads(padding, 2, "conv padding")
    s = strides[0]
    device = Device[x.device]
    wide = target_default_opts(device).wide_channel_vector > 0
    return auto_tile(x.shape[1], weight.shape[0], (x.shape[2] + pt + pb - 3) // s + 1,
                     (x.shape[3] + pl + pr - 3) // s + 1, s, wide, bool(getattr(device, "halved_wide_fma", False)))
