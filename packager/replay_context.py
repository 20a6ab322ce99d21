"""What a replay benchmark ran on, so a figure can be compared with another machine's: the CPU, cores and threads,
the OpenCL platform, device and driver, the compiler and kernel flags, the load average, what ran in place of an
emulated device profile; peak RSS and device memory; and the machine's measured peaks (``--profile``).

JSON (``replay --json``, docs/package-format.md): ``context`` is ``{"cpu", "cores", "threads", "opencl":
{"platform", "device", "driver"} or null, "compiler", "kernel_flags", "load_avg", "ran_on", "emulated"}``;
``memory`` is ``{"peak_rss_bytes", "device_bytes"}``; ``peaks`` is ``{"gflops", "gbs", "how"}``.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from typing import Any

import numpy as np

PEAK_COPY_BYTES = 64 << 20  # larger than any last-level cache here, so the copy streams from memory
PEAK_MATMUL_N = 512  # big enough for the BLAS kernel to reach its steady rate, small enough for ~10 ms
PEAK_REPEATS = 3  # best of


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo where there is one, else what ``platform`` says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ran_on(target: Any) -> tuple[str, str | None]:
    """(the device that actually ran, what it emulated or None): an OpenCL stand-in for the QCOM profile says
    both, e.g. ``OPENCL (Portable Computing Language: cpu-haswell) emulating QCOM:630``."""
    info = getattr(target, "info", None)
    if info is None:
        return f"CPU ({cpu_model()})", None
    real = f"OPENCL ({info.platform}: {info.name})"
    # the QCOM profile's kernels on a stand-in device: its dtypes and limits, not its hardware
    emulated = target.name if target.name.startswith("QCOM") and not getattr(target, "on_adreno", False) else None
    return (f"{real} emulating {emulated}" if emulated else real), emulated


def compiler(target: Any) -> str:
    """Who built the kernels: the C compiler's banner on the CPU, the OpenCL driver's compiler elsewhere."""
    info = getattr(target, "info", None)
    if info is not None:
        return f"OpenCL C compiler of {info.platform} {info.platform_version} (driver {info.driver_version})"
    import shutil

    from targets.cpu_runtime import compiler_identity

    return compiler_identity(os.environ.get("CC") or shutil.which("cc") or "cc")


def replay_context(replay: Any) -> dict[str, Any]:
    """The ``context`` object of the module docstring for ``replay`` (a targets.replay.Replay)."""
    target = replay.target
    info = getattr(target, "info", None)
    where, emulated = ran_on(target)
    flags = sorted({k.flags for k in replay.cmdbuf.kernels if k.flags})
    return {"cpu": cpu_model(), "cores": os.cpu_count() or 1,
            "threads": int(replay.threads) if replay.threaded else None,
            "opencl": {"platform": info.platform, "device": info.name, "driver": info.driver_version}
            if info is not None else None,
            "compiler": compiler(target), "kernel_flags": flags,
            "load_avg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "ran_on": where, "emulated": emulated}


def context_lines(ctx: dict[str, Any]) -> list[str]:
    threads = f", {ctx['threads']} thread(s) used" if ctx["threads"] is not None else ""
    out = [f"cpu: {ctx['cpu']}, {ctx['cores']} cores{threads}"]
    if ctx["opencl"] is not None:
        cl = ctx["opencl"]
        out.append(f"opencl: platform {cl['platform']}, device {cl['device']}, driver {cl['driver']}")
    flags = "; ".join(ctx["kernel_flags"]) or "none recorded"
    out.append(f"compiler: {ctx['compiler']}; kernel flags: {flags}")
    if ctx["load_avg"] is not None:
        out.append("load average: " + " ".join(f"{x:g}" for x in ctx["load_avg"]) + " (1, 5, 15 min)")
    return out


def peak_rss_bytes() -> int:
    """This process's peak resident set size (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def device_bytes(replay: Any) -> int | None:
    """Device memory the replay holds (its buffers and arena) on an OpenCL device; None on the CPU, whose
    buffers are host memory, counted in the RSS."""
    if getattr(replay.target, "info", None) is None:
        return None
    cb = replay.cmdbuf
    return int(sum(b.nbytes for b in cb.buffers if b.kind != "arena") + cb.arena_bytes)


def measure_peaks() -> dict[str, Any]:
    """The host's memory bandwidth (a numpy copy: bytes read + written per second) and float32 matmul rate,
    best of PEAK_REPEATS; what a kernel's GB/s and GFLOP/s are set against."""
    src = np.ones(PEAK_COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    a = np.ones((PEAK_MATMUL_N, PEAK_MATMUL_N), np.float32)
    copy = mm = float("inf")
    for _ in range(PEAK_REPEATS):
        t = time.perf_counter()
        np.copyto(dst, src)
        copy = min(copy, time.perf_counter() - t)
        t = time.perf_counter()
        a @ a
        mm = min(mm, time.perf_counter() - t)
    return {"gbs": 2 * src.nbytes / copy / 1e9, "gflops": 2 * PEAK_MATMUL_N ** 3 / mm / 1e9,
            "how": f"host numpy: {PEAK_COPY_BYTES >> 20} MiB copy, {PEAK_MATMUL_N}^3 float32 matmul, best of "
                   f"{PEAK_REPEATS}"}
