"""OpenCL's scatter helpers (targets/scatter.py): a CPU device stores channel vectors into NCHW planes through one
call per vector, which PoCL compiles far faster than lane-by-lane stores; a GPU keeps the lane-by-lane stores."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jit import Tensor, capture
from targets.cl_binding import CL_DEVICE_TYPE_GPU
from targets.opencl import device_language
from targets.registry import Device
from targets.scatter import OPENCL_SCATTER_LANES, opencl_scatter_helpers
from targets.source_check import OPENCL, KernelSourceError, check_source

pytestmark = pytest.mark.opencl


def _spread(lanes: int) -> str:
    """A kernel scattering lanes 0, 3, 6... of a float and an int vector through the helpers."""
    helpers = opencl_scatter_helpers(lanes)
    offsets = ", ".join(str(3 * n) for n in range(lanes))
    return (helpers["float32"] + "\n" + helpers["int32"] + "\n"
            "__kernel void spread(__global float* restrict data0, __global int* restrict data1) {\n"
            f"  int{lanes} i = ((int{lanes})({offsets}));\n"
            f"  dp_scatter_float32x{lanes}(data0, i, convert_float{lanes}(i));\n"
            f"  dp_scatter_int32x{lanes}(data1, i, (i*2));\n}}\n")


@pytest.mark.parametrize("lanes", OPENCL_SCATTER_LANES)
def test_the_helpers_store_each_lane_at_its_offset_on_the_device(lanes: int) -> None:
    source = _spread(lanes)
    check_source(source, "spread", OPENCL)
    cl = Device["OPENCL"]
    (prog,) = cl.compile_many([("spread", source, {"global_size": (1,), "local_size": (1,)})])
    n = 3 * lanes
    bufs = [cl.allocate(4 * n), cl.allocate(4 * n)]
    cl.copyin(bufs[0], memoryview(np.full(n, -1, np.float32)).cast("B"))
    cl.copyin(bufs[1], memoryview(np.full(n, -1, np.int32)).cast("B"))
    cl.launch(prog, bufs, wait=True)
    floats, ints = np.empty(n, np.float32), np.empty(n, np.int32)
    cl.copyout(bufs[0], memoryview(floats).cast("B"))
    cl.copyout(bufs[1], memoryview(ints).cast("B"))
    want_floats, want_ints = np.full(n, -1, np.float32), np.full(n, -1, np.int32)
    want_floats[::3], want_ints[::3] = np.arange(0, n, 3), np.arange(0, 2 * n, 6)
    np.testing.assert_array_equal(floats, want_floats)
    np.testing.assert_array_equal(ints, want_ints)


def test_an_edited_helper_is_refused() -> None:
    edited = _spread(8).replace("p[at[l]] = lane[l]", "p[at[l] + 1] = lane[l]", 1)
    with pytest.raises(KernelSourceError, match="expected one of the renderer's helpers"):
        check_source(edited, "spread", OPENCL)


def test_a_cpu_devices_channel_vectors_into_planes_go_through_the_helper() -> None:
    """A 1x1 conv over a 7x7 map tiles channel vectors, each stored into NCHW planes 49 floats apart: one helper
    call per vector on a CPU device (lane by lane on a GPU), and the replay (its sources checked and their accesses
    bounded) computes the conv."""
    cl = Device["OPENCL"]
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 64, 7, 7), np.float32), rng.standard_normal((64, 64, 1, 1), np.float32) * 0.1
    cap = capture(lambda x: {"y": x.conv2d(Tensor(w, device="OPENCL")).relu()}, {"x": x}, target="OPENCL")
    lanes = cl.language.vector_width
    helper = any(f"dp_scatter_float32x{lanes}(data0, " in k.source for k in cap.cmdbuf.kernels)
    assert helper is not bool(cl.info.device_type & CL_DEVICE_TYPE_GPU)
    want = np.maximum(np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x), 0)
    np.testing.assert_allclose(cap(x=x)["y"], want, rtol=1e-4, atol=1e-4)


def test_a_gpu_stores_lane_by_lane() -> None:
    """A GPU's private arrays and calls cost more than its lane-by-lane stores: its language has no helper."""
    info = Device["OPENCL"].info
    gpu = replace(info, device_type=CL_DEVICE_TYPE_GPU)
    cpu = replace(info, device_type=info.device_type & ~CL_DEVICE_TYPE_GPU)
    assert device_language(gpu).vector_scatter == {}
    assert device_language(cpu).vector_scatter == opencl_scatter_helpers(device_language(cpu).vector_width)
