"""The QCOM profile's device side: which OpenCL device runs Adreno-rendered kernels, on the OpenCL runtime.

The first OpenCL device whose name says Adreno; on a machine without one, the local OpenCL device (device 0
among the platforms ``$DRIVEPACK_CL_PLATFORM`` selects, PoCL in CI), said once on stderr. This is all a QCOM
replay needs: the compiler-facing QCOMTarget (targets/qcom.py) adds the Adreno models' limits, dtypes and the
OpenCL C flavour on top. ``QCOM:<model>`` names one of targets/adreno_models.py's models, on both sides.
"""

from __future__ import annotations

import sys
from collections.abc import Collection

from targets.adreno_models import ADRENO_MODELS
from targets.cl_binding import CLDeviceInfo, OpenCLDeviceError, list_devices
from targets.opencl_runtime import OpenCLRuntime

DEFAULT_MODEL = "630"

_announced = False  # the stand-in line is printed once per process


def parse_qcom_device(device: str, models: Collection[str] | None = None) -> tuple[str, bool]:
    """(Adreno model, whether ``:images`` was given) of ``QCOM[:<model>][:images]``; OpenCLDeviceError when
    the name has more parts or, with ``models`` given, names a model outside it."""
    parts = device.split(":")[1:]
    images = "images" in parts
    if images:
        parts.remove("images")
    model = parts[0] if parts else DEFAULT_MODEL
    if len(parts) > 1 or (models is not None and model not in models):
        known = f" with a model in {sorted(models)}" if models is not None else ""
        raise OpenCLDeviceError(f"device {device!r}: expected QCOM[:<model>][:images]{known}, got "
                                f"{':'.join(parts)!r}", -33)
    return model, images


def adreno_device_index() -> tuple[int, bool]:
    """(OpenCL device index, whether it is an Adreno): the first Adreno, else device 0."""
    for _, _, info in list_devices():
        if "adreno" in info.name.lower():
            return info.index, True
    return 0, False


def announce_stand_in(model: str, info: CLDeviceInfo) -> None:
    """Say once per process that ``info``'s device runs Adreno ``model``'s kernels in place of an Adreno."""
    global _announced
    if not _announced:
        _announced = True
        print(f"drivepack: QCOM: no Adreno GPU found; running Adreno {model}-rendered OpenCL C on the local OpenCL "
              f"device {info.name!r} ({info.platform}), emulating the dtypes it lacks", file=sys.stderr, flush=True)


class QCOMRuntime(OpenCLRuntime):
    """The OpenCL runtime of the device that runs the QCOM profile's kernels here (an Adreno, else a stand-in);
    ``name`` is the QCOM device name, as a package records it."""

    name = "QCOM"

    def __init__(self, device: str = "QCOM") -> None:
        model, _ = parse_qcom_device(device, ADRENO_MODELS)
        index, self.on_adreno = adreno_device_index()
        super().__init__(f"OPENCL:{index}")
        self.name = device
        if not self.on_adreno:
            announce_stand_in(model, self.info)

