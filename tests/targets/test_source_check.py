"""Package text never steers a compiler: foreign flags, entries that are not identifiers and kernel sources the
renderer would not write are refused with a typed error before anything is compiled (targets/source_check.py)."""

from __future__ import annotations

import copy
import json
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cffi
import numpy as np
import onnx
import pytest

import targets.cpu_runtime as cpu
from jit import DrivepackError, capture
from jit.onnx.loader import load_onnx
from jit.trace import capture_onnx
from packager import samples
from packager.build import BuildOptions, build_package
from packager.cli import main
from packager.container import Section, open_container, write_container
from packager.package import load_package
from packager.synthetic import tiny_model
from targets.cmdbuf import BufferSpec, CmdbufError, CommandBuffer, Dispatch, KernelSpec, Scalar
from targets.cpu import CPU_LANGUAGE
from targets.opencl import OPENCL_LANGUAGE
from targets.opencl_runtime import IMAGE_HELPER
from targets.registry import Device
from targets.replay import ReplayError, make_replay
from targets.replay_cpu import TARGET_FLAGS
from targets.scatter import SCATTER_HELPERS
from targets.source_check import OPENCL, C, KernelSourceError, check_kernels, check_source
from tests.conftest import DEFAULT_NODE_DIR
from tests.onnx.conformance.conformance import load_case

HEAD = "#include <math.h>\n#include <stdint.h>\n"
KERNEL = ("void scale(float* restrict data0, const float* restrict data1, float s) {\n"
          "  for (int i = 0; i < 4; i++) data0[i] = data1[i] * s;\n}\n")
CL_KERNEL = ("__kernel void scale(__global float* restrict data0, __global const float* restrict data1, float s) {\n"
             "  int i = get_global_id(0); data0[i] = data1[i] * s;\n}\n")


def _c_bytes(text: str) -> str:
    """``text`` as a C char-array initializer: a path in a payload without a string literal."""
    return ", ".join(str(b) for b in text.encode()) + ", 0"


def touch_in_constructor(sentinel: Path) -> str:
    """A CPU kernel source whose shared object creates ``sentinel`` when it is loaded (before any kernel runs)."""
    return (HEAD + "__attribute__((constructor)) void dp_init(void) {\n"
            f"  char cmd[] = {{{_c_bytes(f'touch {sentinel}')}}};\n"
            "  extern int system(const char *);\n  system(cmd);\n}\n" + KERNEL)


def scale_cmdbuf(source: str = HEAD + KERNEL, flags: str = "", entry: str = "scale",
                 target: str = "CPU") -> CommandBuffer:
    """out = (x * 2.5) * 2.5 through an arena temporary, one hand-written kernel."""
    bits = struct.unpack("<I", struct.pack("<f", 2.5))[0]
    size = (1,) if target == "CPU" else (4,)  # the C kernel loops, an OpenCL work-item does one element
    return CommandBuffer(
        target=target, kernels=(KernelSpec("scale", source, entry, target, flags),),
        dispatches=(Dispatch(0, size, None, ("arena:0+16", "input:x"), (Scalar("float32", bits),)),
                    Dispatch(0, size, None, ("output:y", "arena:0+16"), (Scalar("float32", bits),))),
        buffers=(BufferSpec("input:x", "float32", (4,), 16), BufferSpec("output:y", "float32", (4,), 16),
                 BufferSpec("arena:0+16", "uint8", (16,), 16)), arena_bytes=128, alignment=128)


# --- the checker on its own ----------------------------------------------------------------------------------

# (name, source, offending text quoted in the error, reason in the error)
C_REFUSED = [
    ("constructor", HEAD + "__attribute__((constructor)) void dp_init(void) { }\n" + KERNEL,
     "__attribute__((constructor))", "expected the kernel void scale("),
    ("destructor in the body", HEAD + KERNEL.replace("  for", "  __attribute__((destructor)) int q;\n  for"),
     "__attribute__((destructor)) int q;", "no '__attribute__'"),
    ("asm", HEAD + KERNEL.replace("  for", "  __asm__ volatile (nop);\n  for"), "__asm__ volatile",
     "no '__asm__'"),
    ("plain asm", HEAD + KERNEL.replace("  for", "  asm (nop);\n  for"), "asm (nop)", "no 'asm'"),
    ("extra include", HEAD + "#include <stdlib.h>\n" + KERNEL, "#include <stdlib.h>", "expected the kernel"),
    ("define in the body", HEAD + KERNEL.replace("  for", "#define data0 data1\n  for"), "#define data0 data1",
     "no preprocessor line but the renderer's loop pragma"),
    ("another pragma", HEAD + KERNEL.replace("  for", "  #pragma GCC optimize 0\n  for"), "#pragma GCC optimize",
     "no preprocessor line"),
    ("_Pragma", HEAD + KERNEL.replace("  for", "  _Pragma(x)\n  for"), "_Pragma(x)", "no '_Pragma'"),
    ("extra function before", HEAD + "void helper(void) { }\n" + KERNEL, "void helper(void)",
     "expected the kernel"),
    ("extra function after", HEAD + KERNEL + "void after(void) {\n}\n", "void after(void)",
     "expected nothing after kernel scale"),
    ("body closed early", HEAD + KERNEL.replace("  for", "  } void sneak(void) {\n  for"), "} void sneak",
     "no other top-level definition"),
    ("second kernel", HEAD + KERNEL + KERNEL.replace("scale", "other"), "void other(", "expected nothing after"),
    ("wrong entry", HEAD + KERNEL.replace("void scale", "void scaled"), "void scaled(", "expected the kernel"),
    ("string literal", HEAD + KERNEL.replace("  for", "  char *p = \"sh\";\n  for"), '"sh"', "string literal"),
    ("comment", HEAD + KERNEL.replace("  for", "  /* hidden */\n  for"), "/* hidden */", "a comment"),
    ("line splice", HEAD + KERNEL.replace("  for", "  #pragma omp parallel for collapse(1) \\\n  for"), "\\",
     "a backslash"),
    ("digraph directive", HEAD + KERNEL.replace("  for", "%:include <stdlib.h>\n  for"), "%:include",
     "a digraph"),
    ("libc call", HEAD + KERNEL.replace("  for", "  exit(1);\n  for"), "exit(1)", "got exit("),
    # the body's words are checked on its joined lines: a call's name and parenthesis on two lines is still a call
    ("call split across lines", HEAD + KERNEL.replace("  for", "  exit\n(1);\n  for"), "exit(", "split across lines"),
    ("carriage return", HEAD + KERNEL.replace("  for", "  int q = 0;\r\n  for"), "int q", "printable ASCII"),
    ("extern", HEAD + KERNEL.replace("  for", "  extern int environ;\n  for"), "extern int environ",
     "no 'extern'"),
    ("static", HEAD + KERNEL.replace("  for", "  static int calls;\n  for"), "static int calls", "no 'static'"),
    ("reserved builtin", HEAD + KERNEL.replace("  for", "  __builtin_trap();\n  for"), "__builtin_trap",
     "reserved identifier"),
    ("non-ASCII", HEAD + KERNEL.replace("  for", "  int \u00e9 = 0;\n  for"), "int", "printable ASCII"),
    ("foreign typedef guard", HEAD + "#ifndef DP_X\n#define DP_X\nint x;\n#endif\n" + KERNEL, "#ifndef DP_X",
     "one of the renderer's helpers"),
    ("attribute in a typedef", HEAD + "#ifndef DP_FLOAT32X8_T\n#define DP_FLOAT32X8_T\ntypedef float dp_float32x8 "
     "__attribute__((constructor));\n#endif\n" + KERNEL, "#ifndef DP_FLOAT32X8_T", "one of the renderer's helpers"),
    ("unclosed", HEAD + KERNEL[:-2], "", "unclosed"),
]


@pytest.mark.parametrize(("source", "quoted", "reason"), [c[1:] for c in C_REFUSED], ids=[c[0] for c in C_REFUSED])
def test_c_sources_the_renderer_would_not_write_are_refused(source: str, quoted: str, reason: str) -> None:
    check_source(HEAD + KERNEL, "scale", C, "kernel scale")  # the unedited kernel passes
    with pytest.raises(KernelSourceError) as e:
        check_source(source, "scale", C, "kernel scale")
    msg = str(e.value)
    assert msg.startswith("kernel scale: ") and "\n" not in msg and reason in msg and quoted in msg, msg


@pytest.mark.parametrize("entry", ["_init", "main", "expf", "for", "static", "scale;"])
def test_entries_that_could_bind_special_symbols_are_refused(entry: str) -> None:
    with pytest.raises(KernelSourceError, match=r"kernel scale: entry expected a C identifier not starting with "):
        check_source(HEAD + KERNEL.replace("void scale(", f"void {entry}("), entry, C, "kernel scale")


def test_opencl_sources_are_checked_in_their_own_dialect() -> None:
    check_source(CL_KERNEL, "scale", OPENCL)
    check_source("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + IMAGE_HELPER + "\n" + CL_KERNEL, "scale", OPENCL)
    for bad, reason in [("#include <stdio.h>\n" + CL_KERNEL, "expected the kernel __kernel void scale("),
                        ("#pragma OPENCL EXTENSION all : enable\n" + CL_KERNEL, "expected the kernel"),
                        (CL_KERNEL.replace("  int", "  #pragma omp parallel for\n  int"), "loop pragma"),
                        (HEAD + KERNEL, "expected the kernel __kernel void scale("),  # C is not OpenCL C
                        ("__attribute__((reqd_work_group_size(1,1,1))) " + CL_KERNEL, "expected the kernel")]:
        with pytest.raises(KernelSourceError, match=re.escape(reason)):
            check_source(bad, "scale", OPENCL)
    with pytest.raises(KernelSourceError, match="expected the kernel void scale"):
        check_source(CL_KERNEL, "scale", C)


def test_checker_templates_are_the_renderers() -> None:
    """The checker shares the renderer's prelude blocks (runtime-side constants both import) and its headers."""
    assert IMAGE_HELPER == OPENCL_LANGUAGE.image_helper
    assert set(CPU_LANGUAGE.headers) <= {"#include <math.h>", "#include <stdint.h>"}
    # parallel CPU kernels take their range as parameters (no pragma, no prelude); the pragma and its team-size
    # helper of an earlier renderer stay accepted for the command buffers it wrote
    assert CPU_LANGUAGE.parallel_range and not CPU_LANGUAGE.parallel_for and not CPU_LANGUAGE.parallel_setup
    assert cpu.OMP_THREADS_SETUP.count("\n") == 3


# --- every kernel the renderers emit passes -------------------------------------------------------------------

SAMPLES: dict[str, Callable[[], onnx.ModelProto]] = {
    "vision": samples.vision_model, "policy": samples.policy_model,
    "policy-float16": lambda: samples.float16_model(samples.policy_model())}


@pytest.mark.parametrize("device", ["CPU", "OPENCL", "QCOM", "QCOM:images"])
@pytest.mark.parametrize("model", list(SAMPLES))
def test_every_kernel_of_the_sample_models_passes(model: str, device: str) -> None:
    m = SAMPLES[model]()
    run = capture_onnx(load_onnx(m, device=device), samples.sample_inputs(m), target=device)
    assert run.cmdbuf.kernels
    check_kernels(run.cmdbuf, C if device == "CPU" else OPENCL,
                  TARGET_FLAGS if device == "CPU" else {Device[device].build_options})


def test_the_integer_power_helper_passes() -> None:
    """QCOM renders integer POW through a guarded helper (no fp64): the one prelude helper no sample model uses."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(-100, 100, (6, 9)).astype(np.int32), rng.integers(1, 9, (6, 9)).astype(np.int32)
    cap = capture(lambda x, y: {"out": (x % 7) ** (y % 6)}, {"x": x, "y": y}, target="QCOM")
    assert any("dp_ipow_" in k.source for k in cap.cmdbuf.kernels)
    check_kernels(cap.cmdbuf, OPENCL, {Device["QCOM"].build_options})


TYPEDEFS = "".join(f"#ifndef DP_{t.upper()}X16_T\n#define DP_{t.upper()}X16_T\ntypedef {c} dp_{t}x16 "
                   "__attribute__((vector_size(64)));\n#endif\n" for t, c in (("int32", "int"), ("float32", "float")))
SCATTER_KERNEL = ("void spread(float* restrict data0, int* restrict data1) {\n"
                  "  dp_int32x16 i = ((dp_int32x16){0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45});\n"
                  "  dp_scatter_float32x16(data0, i, __builtin_convertvector(i, dp_float32x16));\n"
                  "  dp_scatter_int32x16(data1, i, (i*2));\n}\n")


def test_the_scatter_helpers_pass_and_an_edited_one_is_refused() -> None:
    source = HEAD + TYPEDEFS + SCATTER_HELPERS["float32"] + "\n" + SCATTER_HELPERS["int32"] + "\n" + SCATTER_KERNEL
    check_source(source, "spread", C)
    edited = source.replace("l < 16", "l < 64", 1)
    with pytest.raises(KernelSourceError, match="expected one of the renderer's helpers"):
        check_source(edited, "spread", C)


@pytest.mark.parametrize("isa", ["native", "without AVX-512"])
def test_the_scatter_helpers_store_each_lane_at_its_offset(isa: str) -> None:
    """Both branches of the helper: AVX-512's scatter and the lane-by-lane stores a host without it compiles."""
    source = HEAD + TYPEDEFS + SCATTER_HELPERS["float32"] + "\n" + SCATTER_HELPERS["int32"] + "\n" + SCATTER_KERNEL
    flags = cpu.CFLAGS if isa == "native" else (*cpu.CFLAGS, "-mno-avx512f")
    ffi = cffi.FFI()
    ffi.cdef("void spread(float *data0, int *data1);")
    lib = ffi.dlopen(str(cpu.compile_shared(source, flags=flags)))
    floats, ints = np.full(48, -1, np.float32), np.full(48, -1, np.int32)
    lib.spread(ffi.cast("float*", floats.ctypes.data), ffi.cast("int*", ints.ctypes.data))
    want_floats, want_ints = np.full(48, -1, np.float32), np.full(48, -1, np.int32)
    want_floats[::3], want_ints[::3] = np.arange(0, 48, 3), np.arange(0, 96, 6)
    np.testing.assert_array_equal(floats, want_floats)
    np.testing.assert_array_equal(ints, want_ints)


ONNX_SAMPLE_STEP = 25  # every 25th official node case: ~75 models over the op families


@pytest.mark.slow
@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_every_kernel_of_onnx_node_cases_passes(device: str, pytestconfig: pytest.Config) -> None:
    given = pytestconfig.getoption("--onnx-node-dir")
    root = (Path(given) if given else DEFAULT_NODE_DIR) / "node"
    cases = sorted(root.iterdir())[::ONNX_SAMPLE_STEP]
    checked = 0
    for case in cases:
        model, sets = load_case(case)
        try:
            run = capture_onnx(load_onnx(model, device=device), sets[0][0], target=device)
        except DrivepackError:  # a case drivepack does not capture (unsupported op or dtype): nothing rendered
            continue
        for j, k in enumerate(run.cmdbuf.kernels):
            check_source(k.source, k.entry, C if device == "CPU" else OPENCL, f"{case.name} kernel {k.name}")
            checked += max(d.writes for d in run.cmdbuf.dispatches if d.kernel == j)  # a chain's kernels each
    assert checked >= 80, f"only {checked} kernels rendered from {len(cases)} cases"


# --- the replays refuse before compiling ----------------------------------------------------------------------

def test_the_sentinel_payloads_do_run_when_compiled(tmp_path: Path) -> None:
    """The control for the refusals below: compiled without the check, the flags and the constructor do run."""
    wrapped = tmp_path / "wrapped"
    (tmp_path / "k.c").write_text(HEAD + KERNEL)
    subprocess.run(["cc", "-wrapper", f"/bin/sh,-c,touch {wrapped}", "-c", str(tmp_path / "k.c"), "-o",
                    str(tmp_path / "k.o")], capture_output=True, check=False)
    assert wrapped.exists()
    loaded = tmp_path / "loaded"
    (tmp_path / "c.c").write_text(touch_in_constructor(loaded))
    subprocess.run(["cc", "-shared", "-fPIC", str(tmp_path / "c.c"), "-o", str(tmp_path / "c.so")], check=True)
    subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(tmp_path / 'c.so')!r})"], check=True)
    assert loaded.exists()


def test_cpu_replay_refuses_foreign_flags_before_compiling(tmp_path: Path) -> None:
    sentinel = tmp_path / "ran"
    runs = cpu.cc_invocations
    for flags in (f"-wrapper /bin/sh,-c,touch {sentinel}", "-O3 -march=native -std=gnu11 -fPIC -shared "
                  f"-fno-math-errno -fno-strict-aliasing -wrapper /bin/sh,-c,touch {sentinel}", "-O0"):
        with pytest.raises(KernelSourceError, match=r"kernel scale: flags expected one of \[.*\] \(the target's "
                                                    r"own\), got '"):
            make_replay(scale_cmdbuf(flags=flags), {}, "CPU")
    assert not sentinel.exists() and cpu.cc_invocations == runs
    for flags in TARGET_FLAGS:  # the target's own still replay
        rep = make_replay(scale_cmdbuf(flags=flags), {}, "CPU")
        x = np.array([1, -2, 0.5, 4], np.float32)
        np.testing.assert_array_equal(rep(x=x)["y"], x * np.float32(6.25))


# sources the command buffer's own check (targets/index_ranges.py: nothing it cannot bound) refuses as it is built,
# before any replay; the foreign pragma passes it and is the replay's check to refuse
BUILT_REFUSED = {"constructor", "asm", "extra include", "extra function after", "libc call"}


@pytest.mark.parametrize("case", [*sorted(BUILT_REFUSED), "foreign pragma"])
def test_cpu_replay_refuses_crafted_sources_before_compiling(case: str, tmp_path: Path) -> None:
    sentinel = tmp_path / "ran"
    source = touch_in_constructor(sentinel) if case == "constructor" else \
        HEAD + "#pragma GCC optimize(O0)\n" + KERNEL if case == "foreign pragma" else \
        next(c[1] for c in C_REFUSED if c[0] == case)
    runs = cpu.cc_invocations
    with pytest.raises(CmdbufError if case in BUILT_REFUSED else KernelSourceError, match=r"kernel scale\)?: "):
        make_replay(scale_cmdbuf(source), {}, "CPU")
    assert not sentinel.exists() and cpu.cc_invocations == runs


@pytest.mark.parametrize("entry", ["scale; int x", "scale x", "scale(p);system", "1scale", "", "sc\u00e4le",
                                   "s" * 1025])
def test_entries_that_are_not_identifiers_are_refused_at_load(entry: str) -> None:
    with pytest.raises(CmdbufError, match=r"kernel scale: entry: expected a C identifier"):
        scale_cmdbuf(entry=entry)
    doc = json.loads(scale_cmdbuf().to_bytes())
    doc["kernels"][0]["entry"] = entry
    with pytest.raises(CmdbufError, match=r"kernel scale: entry: expected a C identifier"):
        CommandBuffer.from_dict(doc)


def test_opencl_replay_refuses_foreign_flags_and_crafted_sources(tmp_path: Path) -> None:
    target = Device["OPENCL"]
    ok = make_replay(scale_cmdbuf(CL_KERNEL, target.build_options, target="OPENCL"), {}, target)
    x = np.array([1, -2, 0.5, 4], np.float32)
    np.testing.assert_array_equal(ok(x=x)["y"], x * np.float32(6.25))
    with pytest.raises(KernelSourceError, match=r"kernel scale: flags expected .* \(the target's own\), got "
                                                r"'-cl-opt-disable'"):
        make_replay(scale_cmdbuf(CL_KERNEL, "-cl-opt-disable", target="OPENCL"), {}, target)
    for source in ("#include \"/etc/passwd\"\n" + CL_KERNEL, "#include <stdio.h>\n" + CL_KERNEL,
                   CL_KERNEL + "__kernel void extra(__global float* data0) {\n}\n"):  # refused as it is built
        with pytest.raises(CmdbufError, match=r"^dispatches\[0\] \(kernel scale\): accesses expected bounded"):
            scale_cmdbuf(source, target.build_options, target="OPENCL")
    with pytest.raises(KernelSourceError, match=r"^kernel scale: line \d+: "):
        make_replay(scale_cmdbuf("__attribute__((constructor)) " + CL_KERNEL, target.build_options,
                                 target="OPENCL"), {}, target)
    assert issubclass(KernelSourceError, ReplayError)  # callers catching the replay's errors see these too


# --- packages: refused by the loader's replay and by verify, even with --allow-unsigned -------------------------

@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pkg")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    build_package(d / "tiny.onnx", "pc-cpu", d / "tiny.dpk", BuildOptions(golden_sets=1))
    return d / "tiny.dpk"


def rewrite(src: Path, dst: Path, cmdbuf_edit: Callable[[dict], None] | None = None,
            kernel_edit: Callable[[str], str] | None = None, manifest_edit: Callable[[dict], None] | None = None
            ) -> Path:
    """A copy of ``src`` written again through the writer (every checksum valid, unsigned) after the edits."""
    c = open_container(src)
    manifest = copy.deepcopy(c.manifest)
    entries = manifest.pop("sections")
    align = manifest.pop("section_alignment")
    manifest.pop("signature", None)
    sections = []
    for e in entries:
        data = bytes(c.view(e["name"]))
        if e["kind"] == "cmdbuf" and cmdbuf_edit:
            doc = json.loads(data)
            cmdbuf_edit(doc)
            data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        if e["name"].endswith("/kernel/0") and kernel_edit:  # the first entry's first kernel
            data = kernel_edit(data.decode()).encode()
        sections.append(Section(e["name"], e["kind"], data, {k: v for k, v in e.items()
                                                            if k not in ("name", "kind", "offset", "size", "sha256")}))
    if manifest_edit:
        manifest_edit(manifest)
    write_container(dst, manifest, sections, align)
    return dst


def _verify(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str]:
    code = main(["verify", str(path), "--allow-unsigned"])
    out, err = capsys.readouterr()
    return code, out + err


def test_package_with_wrapper_flags_is_refused_by_replay_and_verify(package: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    sentinel = tmp_path / "ran"

    def edit(doc: dict) -> None:
        doc["kernels"][0]["flags"] = f"-wrapper /bin/sh,-c,touch {sentinel}"

    bad = rewrite(package, tmp_path / "flags.dpk", cmdbuf_edit=edit)
    assert main(["verify", str(rewrite(package, tmp_path / "same.dpk")), "--allow-unsigned"]) == 0  # the control
    capsys.readouterr()
    with pytest.raises(KernelSourceError, match="flags expected one of"):
        load_package(bad, allow_unsigned=True).make_replay()
    code, out = _verify(capsys, bad)
    assert code != 0 and "flags expected one of" in out and "Traceback" not in out, out
    code = main(["replay", str(bad), "--allow-unsigned"])
    assert code != 0 and "flags expected one of" in capsys.readouterr().err
    assert not sentinel.exists()


def test_package_with_a_constructor_in_a_kernel_is_refused_by_verify(package: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    sentinel = tmp_path / "ran"
    payload = touch_in_constructor(sentinel).removesuffix(KERNEL)

    bad = rewrite(package, tmp_path / "ctor.dpk", kernel_edit=lambda src: src.replace(
        "#include <stdint.h>\n", "#include <stdint.h>\n" + payload.removeprefix(HEAD), 1))
    assert "constructor" in bytes(open_container(bad).view("tiny/kernel/0")).decode()
    code, out = _verify(capsys, bad)
    assert code != 0 and "constructor" in out and "Traceback" not in out, out
    assert not sentinel.exists()


def test_package_with_an_entry_that_is_not_an_identifier_is_refused(package: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def edit_cmdbuf(doc: dict) -> None:
        doc["kernels"][0]["entry"] = "k; int x"

    def edit_manifest(m: dict) -> None:
        m["entries"][0]["kernels"]["list"][0]["entry"] = "k; int x"

    bad = rewrite(package, tmp_path / "entry.dpk", cmdbuf_edit=edit_cmdbuf, manifest_edit=edit_manifest)
    with pytest.raises(DrivepackError, match="entry: expected a C identifier"):
        load_package(bad, allow_unsigned=True)
    code, out = _verify(capsys, bad)
    assert code != 0 and "entry: expected a C identifier" in out and "Traceback" not in out, out
