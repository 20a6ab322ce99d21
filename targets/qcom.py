"""The QCOM target: an Adreno 6xx-class profile (comma 3/3X: Snapdragon 845, Adreno 630) on the OpenCL target.

The profile is data: the OpenCL C flavour (no fp64, so integer POW by squaring and no double anywhere), the
dtypes the GPU computes in (float32 and float16 native; int64 emulated; no float64, bfloat16 or fp8) and the
limits of each Adreno model. Everything else (binding, buffers, program cache, launches, timing) is the
OpenCL target's.

``DEV=QCOM`` picks the first OpenCL device whose name says Adreno; on a machine without one it runs the
qcom-rendered kernels on the local OpenCL device (device 0 among the platforms ``$DRIVEPACK_CL_PLATFORM``
selects, PoCL in CI), says so once on stderr, and emulates on top whatever that device lacks: the dtypes
kernels use natively are the profile's set intersected with the local device's. ``QCOM:640`` picks another
model from ``ADRENO_MODELS``. Adreno's own compiler and KGSL submission cannot be exercised without the GPU.

``images`` (``QCOM:images``, ``QCOM:630:images`` or ``DRIVEPACK_QCOM_IMAGES=1``; off by default): capture binds the
weights that only conv/matmul (reduce) kernels read as ``image2d_t`` of RGBA float texels, read with
``read_imagef`` (jit/codegen/passes/images.py); the command buffer records each image's shape. Eager runs keep buffers.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

from jit.common.dtype import DType, dtypes
from jit.common.errors import UnsupportedOp
from targets.base import TargetLimits
from targets.opencl import GPU_OPTS, OPENCL_LANGUAGE, OpenCLDeviceError, OpenCLTarget, list_devices

IMAGES_ENV = "DRIVEPACK_QCOM_IMAGES"
DEFAULT_MODEL = "630"

# float32 and float16 native (cl_khr_fp16 on every Adreno 6xx); int64 is decomposed into 32-bit words by
# jit/codegen/passes/long_decomp.py (Adreno has no 64-bit integer ALU); no float64; bfloat16/fp8 emulated
QCOM_DTYPES: frozenset[DType] = frozenset({
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16, dtypes.uint32,
    dtypes.float16, dtypes.float32})

# OpenCL C for a device without fp64: no cl_khr_fp64 pragma, integer POW without (double)
QCOM_LANGUAGE = replace(OPENCL_LANGUAGE, int_pow="loop")


@dataclass(frozen=True)
class QCOMLimits(TargetLimits):
    """TargetLimits plus what an Adreno adds: the work-group size aimed for and the row pitch alignment of an
    image2d_t (bytes), which the packager needs once weights go to images."""

    preferred_local_size: int = 128
    image_pitch_alignment: int = 64


@dataclass(frozen=True)
class AdrenoModel:
    """One Adreno GPU as its OpenCL driver reports it (clinfo on the device; not measured here)."""

    name: str
    soc: str
    max_work_group_size: int = 1024
    max_work_item_sizes: tuple[int, ...] = (1024, 1024, 1024)
    # a wave is 64 fibers (wave128 mode doubles it); two waves per group hide latency without spilling
    preferred_local_size: int = 128
    buffer_alignment: int = 128  # CL_DEVICE_MEM_BASE_ADDR_ALIGN (1024 bits)
    image_pitch_alignment: int = 64
    image2d_max: tuple[int, int] = (16384, 16384)

    def limits(self, images: bool) -> QCOMLimits:
        return QCOMLimits(max_local_size=self.max_work_group_size, max_local_dims=self.max_work_item_sizes,
                          buffer_alignment=self.buffer_alignment, images=images,
                          preferred_local_size=self.preferred_local_size,
                          image_pitch_alignment=self.image_pitch_alignment, image2d_max=self.image2d_max)


ADRENO_MODELS: dict[str, AdrenoModel] = {
    "630": AdrenoModel("630", "SDM845"),
    "640": AdrenoModel("640", "SM8150"),
    "650": AdrenoModel("650", "SM8250", preferred_local_size=256),
    "660": AdrenoModel("660", "SM8350", preferred_local_size=256),
}

_announced = False  # the stand-in line is printed once per process


def _announce(line: str) -> None:
    global _announced
    if not _announced:
        _announced = True
        print(line, file=sys.stderr, flush=True)


def _local_device_index() -> tuple[int, bool]:
    """(OpenCL device index, whether it is an Adreno): the first Adreno, else device 0."""
    devices = list_devices()
    for _, _, info in devices:
        if "adreno" in info.name.lower():
            return info.index, True
    return 0, False


class QCOMTarget(OpenCLTarget):
    """The Adreno profile over an OpenCL device: a real Adreno when present, the local device otherwise."""

    name = "QCOM"

    def __init__(self, device: str = "QCOM", images: bool | None = None) -> None:
        parts = device.split(":")[1:]
        if "images" in parts:
            parts.remove("images")
            images = True
        model = parts[0] if parts else DEFAULT_MODEL
        if model not in ADRENO_MODELS or len(parts) > 1:
            raise OpenCLDeviceError(f"device {device!r}: expected QCOM[:<model>][:images] with a model in "
                                    f"{sorted(ADRENO_MODELS)}, got {':'.join(parts)!r}", -33)
        if images is None:
            images = os.environ.get(IMAGES_ENV, "0") not in ("", "0")
        self.model = ADRENO_MODELS[model]
        index, self.on_adreno = _local_device_index()
        super().__init__(f"OPENCL:{index}")
        self.name = device
        if not self.on_adreno:
            _announce(f"drivepack: QCOM: no Adreno GPU found; running Adreno {model}-rendered OpenCL C on the local "
                      f"OpenCL device {self.info.name!r} ({self.info.platform}), emulating the dtypes it lacks")
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

    def __repr__(self) -> str:
        where = "Adreno" if self.on_adreno else "stand-in"
        return f"<QCOMTarget {self.name}: Adreno {self.model.name} profile on {self.info.name} ({where})>"

    def profile_dtypes(self) -> frozenset[DType]:
        """What an Adreno 6xx computes in natively, whatever device runs the kernels here."""
        return QCOM_DTYPES

    def supported_dtypes(self) -> frozenset[DType]:
        """The profile's dtypes that the device running the kernels also has (all of them on an Adreno)."""
        return QCOM_DTYPES & super().supported_dtypes()
