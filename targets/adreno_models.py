"""The Adreno 6xx models as data: the limits and caches each one's OpenCL driver reports.

Both sides read it: the QCOM target (targets/qcom.py) renders for a model's limits, and the QCOM runtime
(targets/qcom_runtime.py) accepts only the model names listed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from targets.base import DEFAULT_L1, DEFAULT_L2, CacheLevel, TargetLimits


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
    # caches (TargetLimits.l1 / .l2). No public figure for a shader processor's data cache (the 1 KB texture
    # caches are not one): DEFAULT_L1. L2 is the GPU-wide UCHE, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, where known
    l1: CacheLevel = DEFAULT_L1
    l2: CacheLevel = DEFAULT_L2

    def limits(self, images: bool) -> QCOMLimits:
        return QCOMLimits(max_local_size=self.max_work_group_size, max_local_dims=self.max_work_item_sizes,
                          buffer_alignment=self.buffer_alignment, images=images,
                          preferred_local_size=self.preferred_local_size,
                          image_pitch_alignment=self.image_pitch_alignment, image2d_max=self.image2d_max,
                          l1=self.l1, l2=self.l2)


# Adreno 630 and 640: a 128 KB L2, the CL_DEVICE_GLOBAL_MEM_CACHE_SIZE that clvk declares for them to match
# Qualcomm's driver (kpet/clvk src/device_properties.cpp) and Chips and Cheese measured on the 640 ("Inside the
# Snapdragon 855's iGPU", 2024). Its associativity and line size are not published: DEFAULT_L2's (8 ways of
# 64 bytes). Adreno 650 and 660: no public figure for the L2 size either, so DEFAULT_L2 whole.
ADRENO_L2_128K = CacheLevel(128 * 1024, DEFAULT_L2.ways, DEFAULT_L2.line)
ADRENO_MODELS: dict[str, AdrenoModel] = {
    "630": AdrenoModel("630", "SDM845", l2=ADRENO_L2_128K),
    "640": AdrenoModel("640", "SM8150", l2=ADRENO_L2_128K),
    "650": AdrenoModel("650", "SM8250", preferred_local_size=256),
    "660": AdrenoModel("660", "SM8350", preferred_local_size=256),
}
