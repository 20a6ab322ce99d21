"""Weights as images: chosen read-only float32 parameters of a kernel become ``image2d_t`` parameters.

Before: a lowered kernel (SINK whose KernelInfo lists every parameter's PtrDType; DEFINE_GLOBAL nodes with
PtrDType). After: each parameter index in the context (index -> (height, width) in texels) has an ImageDType
in KernelInfo.params and on its DEFINE_GLOBAL; the LOADs through it are unchanged, the renderer reads element i
as component i % 4 of texel i // 4 (jit.common.dtype.ImageDType). Nothing else changes, so a kernel computes the same
values as long as the image holds the buffer's elements in order (the replay engine uploads them so).
Only parameters that the kernel reads and never stores to may become images (an image is read-only).
"""

from __future__ import annotations

from jit.common.dtype import ImageDType, PtrDType, dtypes
from jit.common.errors import CompileError
from jit.ir.rewrite import PatternMatcher, UPat, graph_rewrite
from jit.ir.uop import Ops, UOp, toposort
from jit.schedule.lower import KernelInfo

ImageParams = dict[int, tuple[int, int]]


def _image_of(p: PtrDType, index: int, hw: tuple[int, int]) -> ImageDType:
    if p.base is not dtypes.float32:
        raise CompileError(f"parameter {index}: image expected a float32 buffer, got {p.base.name}")
    if hw[0] * hw[1] * 4 < p.size:
        raise CompileError(f"parameter {index}: image of {hw[0]}x{hw[1]} texels holds {hw[0] * hw[1] * 4} floats, "
                           f"expected at least {p.size}")
    return ImageDType(p.base, p.size, hw[0], hw[1])


def _global(ctx: ImageParams, g: UOp) -> UOp | None:
    if g.arg not in ctx or isinstance(g.dtype, ImageDType):
        return None
    assert isinstance(g.dtype, PtrDType)
    return UOp(Ops.DEFINE_GLOBAL, _image_of(g.dtype, g.arg, ctx[g.arg]), (), g.arg)


def _sink(ctx: ImageParams, sink: UOp) -> UOp | None:
    info = sink.arg
    if not isinstance(info, KernelInfo) or all(isinstance(p, ImageDType) or i not in ctx
                                               for i, p in enumerate(info.params)):
        return None
    params = tuple(_image_of(p, i, ctx[i]) if i in ctx and not isinstance(p, ImageDType) else p
                   for i, p in enumerate(info.params))
    return UOp(Ops.SINK, sink.dtype, sink.src, KernelInfo(params))


pm_images = PatternMatcher([
    (UPat(Ops.DEFINE_GLOBAL, name="g"), _global),
    (UPat(Ops.SINK, name="sink"), _sink),
])


def stored_params(sink: UOp) -> set[int]:
    """Parameter indices the kernel writes to."""
    return {u.src[0].src[0].arg for u in toposort([sink]) if u.op is Ops.STORE}


def weights_to_images(sink: UOp, images: ImageParams) -> UOp:
    """``sink`` with the parameters in ``images`` read as images (see the module docstring)."""
    if written := sorted(stored_params(sink) & set(images)):
        raise CompileError(f"parameters {written}: image expected a read-only parameter, got one the kernel stores to")
    return graph_rewrite(sink, pm_images, ctx=images, name="weights to images")
