"""A second process that compiles a PoCL replay's kernels while the replay's first call compiles them too.

PoCL's CPU driver compiles a kernel for its launch's work-group size when the kernel first runs, one kernel at a
time per process (its compiler lock: more queues run them no faster), and keeps the result in its disk cache
(``POCL_CACHE_DIR``). A replay's first call after a cold compile therefore spent most of a zoo model's cold time
(efficientnet_b0: 13.5 s of 17.5, benchmarks/bench_zoo.py) with one core busy. ``start_prewarm`` starts this module
as a helper process (``python -m targets.opencl_prewarm SPEC``) that builds the same programs and runs each launch
once, from the last dispatch backwards, while the first call works forwards: each finds the other's kernels in the
disk cache, and they meet in the middle. The replay closes the helper's standard input once its first call is done;
the helper stops before its next kernel.

The helper runs the launches on buffers of their bindings' sizes holding whatever the allocator left there: every
kernel passed targets/index_ranges.py, which proves each access within its binding for any buffer contents. It is
best effort: an error there stops the helper and changes nothing here (the first call compiles what is left).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jit.common.helpers import usable_cores

# fewer launches than this compile in less time than the helper takes to start, unless their sources are this long:
# a team of kernels (jit/schedule/chains.py) is one long source that takes PoCL a second or more
MIN_LAUNCHES = 16
MIN_SOURCE_CHARS = 50_000
PREWARM_ENV = "DRIVEPACK_OPENCL_PREWARM"  # 0: never start the helper
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Launch:
    """One kernel launch the helper runs: its program (an index into the spec's sources), entry, sizes (an empty
    ``local_size`` lets the runtime choose), its arguments (each buffer's bytes, then each scalar's raw bytes in
    hex), and the buffer arguments set to zeros before it (those the replay zeroes: a team's counters, whose waits
    end only from zero)."""

    program: int
    entry: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    buffer_bytes: tuple[int, ...]
    scalars: tuple[str, ...]
    zeroed: tuple[int, ...] = ()


def prewarm_wanted(platform: str, cpu_device: bool) -> bool:
    """Whether a helper can shorten a first call on this device: PoCL's CPU driver (module docstring) with its disk
    cache on, at least two cores to run on, and the helper not switched off."""
    return (cpu_device and "portable computing language" in platform.lower()
            and os.environ.get("POCL_KERNEL_CACHE", "1") != "0" and os.environ.get(PREWARM_ENV, "1") != "0"
            and usable_cores() >= 2)


class Prewarm:
    """The running helper; ``stop`` asks it to stop before its next kernel (never waits for it)."""

    def __init__(self, device_index: int, build_options: str, sources: Sequence[str],
                 launches: Sequence[Launch]) -> None:
        spec = {"device": device_index, "options": build_options, "sources": list(sources),
                "launches": [asdict(launch) for launch in launches]}
        fd, name = tempfile.mkstemp(prefix="drivepack-prewarm-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(spec, f)
            # its driver threads unpinned: PoCL pins worker i to core i in every process, and the helper's compiling
            # worker shared a core with the first call's while the other core idled (efficientnet_b0's first call
            # 6.0-6.3 s pinned, 4.8-4.9 s not)
            env = {**os.environ, "POCL_AFFINITY": "0",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))}
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "targets.opencl_prewarm", name], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it exits, without blocking here


def start_prewarm(device_index: int, build_options: str, sources: Sequence[str],
                  launches: Sequence[Launch]) -> Prewarm | None:
    """A helper running ``launches`` last first, or None when they are too little work to be worth it (fewer than two,
    or fewer than ``MIN_LAUNCHES`` of sources shorter than ``MIN_SOURCE_CHARS`` in all) or it cannot start (no
    temporary file, no interpreter to run it: the first call then compiles everything)."""
    if len(launches) < 2 or len(launches) < MIN_LAUNCHES and sum(map(len, sources)) < MIN_SOURCE_CHARS:
        return None
    try:
        return Prewarm(device_index, build_options, sources, list(reversed(launches)))
    except (OSError, ValueError):
        return None


# --- the helper process --------------------------------------------------------------------------------------------
def _stop_requested() -> bool:
    """The parent closed our standard input (select reports end of file as readable)."""
    return bool(select.select([sys.stdin], [], [], 0)[0])


def _run_launches(spec: dict[str, Any]) -> None:
    from targets.cl_binding import CL_MEM_READ_WRITE, check, checked_create, libopencl, list_devices

    ffi, lib = libopencl()
    _, device, _ = list_devices()[spec["device"]]
    dev = ffi.new("cl_device_id[1]", [device])
    context = checked_create("clCreateContext", lib.clCreateContext, ffi.NULL, 1, dev, ffi.NULL, ffi.NULL)
    queue = checked_create("clCreateCommandQueue", lib.clCreateCommandQueue, context, device, 0)
    programs: dict[int, Any] = {}
    pool: list[tuple[int, Any]] = []  # (bytes, cl_mem) per argument position, grown as launches need
    for launch in spec["launches"]:
        if _stop_requested():
            return
        index = launch["program"]
        if index not in programs:
            src = ffi.new("char[]", spec["sources"][index].encode())
            programs[index] = checked_create("clCreateProgramWithSource", lib.clCreateProgramWithSource, context,
                                             1, ffi.new("char*[1]", [src]), ffi.NULL)
            check("clBuildProgram", lib.clBuildProgram(programs[index], 1, dev, spec["options"].encode(), ffi.NULL,
                                                       ffi.NULL))
        kernel = checked_create("clCreateKernel", lib.clCreateKernel, programs[index], launch["entry"].encode())
        for arg, nbytes in enumerate(launch["buffer_bytes"]):
            if arg == len(pool) or pool[arg][0] < nbytes:
                mem = checked_create("clCreateBuffer", lib.clCreateBuffer, context, CL_MEM_READ_WRITE,
                                     max(nbytes, 1), ffi.NULL)
                if arg == len(pool):
                    pool.append((nbytes, mem))
                else:
                    lib.clReleaseMemObject(pool[arg][1])
                    pool[arg] = (nbytes, mem)
            check("clSetKernelArg", lib.clSetKernelArg(kernel, arg, ffi.sizeof("cl_mem"),
                                                       ffi.new("cl_mem*", pool[arg][1])))
            if arg in launch["zeroed"]:
                zeros = bytes(nbytes)
                check("clEnqueueWriteBuffer", lib.clEnqueueWriteBuffer(queue, pool[arg][1], 1, 0, nbytes,
                                                                       ffi.from_buffer(zeros), 0, ffi.NULL, ffi.NULL))
        for j, raw in enumerate(bytes.fromhex(s) for s in launch["scalars"]):
            check("clSetKernelArg", lib.clSetKernelArg(kernel, len(launch["buffer_bytes"]) + j, len(raw),
                                                       ffi.from_buffer(raw)))
        gsize, lsize = launch["global_size"], launch["local_size"]
        check("clEnqueueNDRangeKernel", lib.clEnqueueNDRangeKernel(
            queue, kernel, len(gsize), ffi.NULL, ffi.new("size_t[]", gsize),
            ffi.new("size_t[]", lsize) if lsize else ffi.NULL, 0, ffi.NULL, ffi.NULL))
        check("clFinish", lib.clFinish(queue))
        lib.clReleaseKernel(kernel)


def main(argv: Sequence[str]) -> int:
    path = Path(argv[0])
    try:  # the spec is ours to delete: the parent never waits for us
        spec = json.loads(path.read_text())
    finally:
        path.unlink(missing_ok=True)
    _run_launches(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
