"""Where a replay runs: the target's device string for a vehicle profile, and the fingerprint of the machine
and driver that decides whether a golden output can be compared bit-exactly."""

from __future__ import annotations

import platform

from targets.base import Runtime

# vehicle profile target name -> device name; qcom takes its Adreno model from the profile's arch
_VEHICLE_TARGETS = {"cpu": "CPU", "opencl": "OPENCL", "qcom": "QCOM"}


def device_for(target: str, arch: str | None, images: bool = False) -> str:
    """The device name (``CPU``, ``OPENCL``, ``QCOM:630``, ``QCOM:630:images``) of a vehicle profile's target,
    arch and images option (conv/matmul weights in image2d_t: the QCOM profile only)."""
    base = _VEHICLE_TARGETS.get(target.lower(), target.upper())
    if base == "QCOM":
        return ":".join(["QCOM", *([arch.removeprefix("adreno")] if arch else []), *(["images"] if images else [])])
    return base


def fingerprint(target: Runtime) -> dict[str, str]:
    """What must be equal for two runs of the same kernels to give the same bits: the target, the CPU
    architecture and, per target kind, the C compiler banner or the OpenCL platform, device and driver."""
    out = {"target": target.name, "machine": platform.machine()}
    info = getattr(target, "info", None)
    if info is not None:  # OpenCL and the QCOM profile on top of it
        out |= {"platform": info.platform, "device": info.name, "driver": info.driver_version}
    else:
        import os
        import shutil

        from targets.cpu_runtime import compiler_identity

        out["compiler"] = compiler_identity(os.environ.get("CC") or shutil.which("cc") or "cc")
    return out
