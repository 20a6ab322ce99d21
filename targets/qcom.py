"""The QCOM target: an Adreno 6xx-class profile (comma 3/3X: Snapdragon 845, Adreno 630) on the OpenCL target.

The profile is data: the OpenCL C flavour (no fp64, so integer POW by squaring and no double anywhere), the
dtypes the GPU computes in (float32 and float16 native; int64 emulated; no float64, bfloat16 or fp8) and the
limits of each Adreno model. Everything else (binding, buffers, program cache, launches, timing) is the
OpenCL target's; the choice of device is targets/qcom_runtime.py's, the device side a QCOM replay uses alone.

``DEV=QCOM`` picks the first OpenCL device whose name says Adreno; on a machine without one it runs the
qcom-rendered kernels on the local OpenCL device (device 0 among the platforms ``$DRIVEPACK_CL_PLATFORM``
selects, PoCL in CI), says so once on stderr, and emulates on top whatever that device lacks: the dtypes
kernels use natively are the profile's set intersected with the local device's. ``QCOM:640`` picks another
model from ``ADRENO_MODELS`` (targets/adreno_models.py). Adreno's own compiler and KGSL submission cannot be
exercised without the GPU.

``images`` (``QCOM:images``, ``QCOM:630:images`` or ``DRIVEPACK_QCOM_IMAGES=1``; off by default): capture binds the
weights that only conv/matmul (reduce) kernels read as ``image2d_t`` of RGBA float texels, read with
``read_imagef`` (jit/codegen/passes/images.py); the command buffer records each image's shape. Eager runs keep buffers.
"""

from __future__ import annotations

import os
from dataclasses import replace

from jit.common.dtype import DType, dtypes
from jit.common.errors import UnsupportedOp
from targets.adreno_models import ADRENO_MODELS
from targets.opencl import GPU_OPTS, OPENCL_LANGUAGE, OpenCLTarget
from targets.qcom_runtime import QCOMRuntime, parse_qcom_device

IMAGES_ENV = "DRIVEPACK_QCOM_IMAGES"

# float32 and float16 native (cl_khr_fp16 on every Adreno 6xx); int64 is decomposed into 32-bit words by
# jit/codegen/passes/long_decomp.py (Adreno has no 64-bit integer ALU); no float64; bfloat16/fp8 emulated
QCOM_DTYPES: frozenset[DType] = frozenset({
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16, dtypes.uint32,
    dtypes.float16, dtypes.float32})

# OpenCL C for a device without fp64: no cl_khr_fp64 pragma, integer POW without (double)
QCOM_LANGUAGE = replace(OPENCL_LANGUAGE, int_pow="loop")


class QCOMTarget(QCOMRuntime, OpenCLTarget):
    """The Adreno profile over an OpenCL device (targets/qcom_runtime.py: a real Adreno when present, the local
    device otherwise): the model's limits, the profile's dtypes and its OpenCL C."""

    name = "QCOM"

    def __init__(self, device: str = "QCOM", images: bool | None = None) -> None:
        model, named_images = parse_qcom_device(device, ADRENO_MODELS)
        if named_images:
            images = True
        if images is None:
            images = os.environ.get(IMAGES_ENV, "0") not in ("", "0")
        self.model = ADRENO_MODELS[model]
        super().__init__(device)  # the device that runs the kernels (QCOMRuntime), then OpenCLTarget's rendering
        m = self.model
        if images and not self.info.image_support:
            raise UnsupportedOp(f"{device}: images=True needs an OpenCL device with image support; "
                                f"{self.info.name!r} has none")
        self.limits = replace(m.limits(images=images), max_local_size=min(m.max_work_group_size, self.max_group),
                              buffer_alignment=max(m.buffer_alignment, self.limits.buffer_alignment),
                              image2d_max=(min(m.image2d_max[0], self.info.image2d_max[0]),
                                           min(m.image2d_max[1], self.info.image2d_max[1])))
        self.max_group = self.limits.max_local_size
        self.max_items = tuple(min(a, b) for a, b in zip(m.max_work_item_sizes, self.max_items, strict=False))
        self.preferred_local = m.preferred_local_size
        fp16 = ("#pragma OPENCL EXTENSION cl_khr_fp16 : enable",) if dtypes.float16 in self.supported_dtypes() \
            else ()
        self.language = replace(QCOM_LANGUAGE, headers=fp16)
        self.default_opts = GPU_OPTS  # an Adreno is a GPU, whichever device stands in for it
        # and not the stand-in's host CPU: the Adreno's choices of Winograd and of work-groups, each kernel a dispatch
        self.halved_wide_fma, self.large_kernel_groups, self.chain_limits, self.team_limits = False, 0, None, None

    def __repr__(self) -> str:
        where = "Adreno" if self.on_adreno else "stand-in"
        return f"<QCOMTarget {self.name}: Adreno {self.model.name} profile on {self.info.name} ({where})>"

    def profile_dtypes(self) -> frozenset[DType]:
        """What an Adreno 6xx computes in natively, whatever device runs the kernels here."""
        return QCOM_DTYPES

    def supported_dtypes(self) -> frozenset[DType]:
        """The profile's dtypes that the device running the kernels also has (all of them on an Adreno)."""
        return QCOM_DTYPES & super().supported_dtypes()
