"""Load-time consistency of a package whose checksums and signature are valid: versions agree, the ABI is the
command buffer's, declared sizes and JSON are bounded, the command buffer's dispatches and kernels agree, and
loading stays linear in the number of sections."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from jit.common.json_limits import MAX_INT_DIGITS, MAX_JSON_DEPTH
from packager.container import FORMAT_VERSION, Section
from packager.errors import PackageError, SignatureError
from packager.package import load_package
from targets.cmdbuf import MAX_BUFFER_BYTES
from tests.packager.crafted import raw_manifest_package, replace_section, rewrite, tiny_package


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_package(tmp_path_factory.mktemp("pkg"))


def refused(path: Path, match: str) -> PackageError:
    with pytest.raises(PackageError, match=match) as e:
        load_package(path)
    assert not isinstance(e.value, SignatureError)  # signed by the suite's own key: the check under test refused it
    return e.value


def test_the_untouched_rewrite_loads(built: Path, tmp_path: Path) -> None:
    load_package(rewrite(built, tmp_path / "same.dpk"))  # what the other tests change is all that differs


@pytest.mark.parametrize("value", [FORMAT_VERSION + 1, FORMAT_VERSION - 1, str(FORMAT_VERSION), True, None])
def test_manifest_format_version_must_equal_the_headers(built: Path, tmp_path: Path, value: object) -> None:
    bad = rewrite(built, tmp_path / "v.dpk", manifest=lambda m: m.update(format_version=value))
    refused(bad, rf"manifest\.format_version: expected {FORMAT_VERSION} \(the header's format version\), got "
                 rf"{value!r}")


def _abi_output(m: dict) -> None:
    out = m["entries"][0]["abi"]["outputs"][0]
    out.update(dtype="float16", shape=[1, 32], byte_size=64)


def _abi_input(m: dict) -> None:
    x = next(i for i in m["entries"][0]["abi"]["inputs"] if i["name"] == "x")
    x.update(dtype="float16", shape=[1, 32], strides=[64, 2])


@pytest.mark.parametrize(("edit", "kind", "name"), [(_abi_output, "outputs", "outputs"), (_abi_input, "inputs", "x")])
def test_manifest_abi_must_equal_the_cmdbufs_inputs_and_outputs(built: Path, tmp_path: Path, edit, kind: str,
                                                                name: str) -> None:
    bad = rewrite(built, tmp_path / "abi.dpk", manifest=edit)
    refused(bad, rf"\[tiny\]\.abi\.{kind}: expected the cmdbuf's .*{name} float32 \(1, 16\).*, got .*{name} float16 "
                 rf"\(1, 32\).* \(differs in \['{name}'\]\)")


def test_an_abi_name_of_another_json_type_is_a_typed_error(built: Path, tmp_path: Path) -> None:
    bad = rewrite(built, tmp_path / "abi.dpk",
                  manifest=lambda m: m["entries"][0]["abi"]["outputs"][0].update(name=63))
    # the ABI record refuses it by type, before any comparison with the command buffer (issue 22 regression)
    refused(bad, r"\[tiny\]\.abi: <unnamed>: name expected a non-empty string, got 63")


def test_deep_json_and_long_integers_are_refused_before_parsing(built: Path, tmp_path: Path) -> None:
    deep = raw_manifest_package(tmp_path / "deep.dpk", b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(PackageError, match=f"manifest: nesting expected at most MAX_JSON_DEPTH = {MAX_JSON_DEPTH} "
                                           "levels, got more"):
        load_package(deep)  # not a RecursionError
    nested = rewrite(built, tmp_path / "nested.dpk", manifest=lambda m: m["settings"].update(x=_nested(200)))
    refused(nested, f"manifest: nesting expected at most MAX_JSON_DEPTH = {MAX_JSON_DEPTH} levels, got more")
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # the writer needs to print the integer; the reader must refuse it unprinted
    try:
        long = rewrite(built, tmp_path / "long.dpk",
                       manifest=lambda m: m["entries"][0]["model"].update(bytes=10 ** 5000))
    finally:
        sys.set_int_max_str_digits(limit)
    refused(long, f"manifest: integer literal expected at most MAX_INT_DIGITS = {MAX_INT_DIGITS} digits, got 5001")
    deep_cmdbuf = replace_section("tiny/cmdbuf", b"[" * 100_000 + b"]" * 100_000)
    cb_deep = rewrite(built, tmp_path / "cbdeep.dpk", sections=deep_cmdbuf)
    refused(cb_deep, f"tiny/cmdbuf: cmdbuf: nesting expected at most MAX_JSON_DEPTH = {MAX_JSON_DEPTH}")


def _nested(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


def test_a_huge_arena_is_refused_before_anything_is_allocated(built: Path, tmp_path: Path) -> None:
    def huge(cb: dict) -> None:
        cb["arena_bytes"] = 1 << 40

    bad = rewrite(built, tmp_path / "arena.dpk", cmdbuf=huge,
                  manifest=lambda m: m["entries"][0].update(arena_bytes=1 << 40))
    refused(bad, rf"cmdbuf: arena_bytes: expected 0..MAX_BUFFER_BYTES = {MAX_BUFFER_BYTES}, got {1 << 40}")


@pytest.mark.parametrize("binding", ["weight:0", "input:frame"])
def test_a_dispatch_writing_a_weight_or_an_input_is_refused(built: Path, tmp_path: Path, binding: str) -> None:
    def write_it(cb: dict) -> None:
        cb["dispatches"][0]["bindings"][0] = binding

    bad = rewrite(built, tmp_path / "w.dpk", cmdbuf=write_it)
    refused(bad, rf"dispatches\[0\]\.bindings\[0\]: expected the written buffer .* got '{binding}'")


def test_a_kernel_source_storing_into_a_weight_is_refused(built: Path, tmp_path: Path) -> None:
    def store_weight(name: str, data: bytes) -> bytes:
        # dispatch 0's data2 is weight:0: a store through it would write the mapped weight (SIGSEGV)
        return data.replace(b"*(data0+ridx0) =", b"*(data2+ridx0) =") if name == "tiny/kernel/0" else data

    bad = rewrite(built, tmp_path / "k.dpk", sections=store_weight)
    refused(bad, r"dispatches\[0\] \(kernel \w+\): stores expected through data0 only .* got stores through data2")


def test_a_dispatch_with_fewer_bindings_than_its_kernel_parameters_is_refused(built: Path, tmp_path: Path) -> None:
    bad = rewrite(built, tmp_path / "p.dpk", cmdbuf=lambda cb: cb["dispatches"][0]["bindings"].pop())
    refused(bad, r"dispatches\[0\] \(kernel \w+\): parameters expected 3 buffers \+ 0 scalars \(the dispatch's\), "
                 r"got 4 in the source")


def _with_weights(built: Path, dst: Path, n: int) -> Path:
    """``built`` with ``n`` more (empty) weights, each its own section: one lookup per section."""
    def more(cb: dict) -> None:
        cb["buffers"] += [{"binding": f"weight:{100 + i}", "dtype": "float32", "shape": [0], "nbytes": 0,
                           "init": None, "image": None} for i in range(n)]

    extra = [Section(f"tiny/weight/{100 + i}", "weight", b"", {"dtype": "float32", "shape": [0]}) for i in range(n)]
    return rewrite(built, dst, cmdbuf=more, extra=extra)


def test_loading_is_linear_in_the_number_of_sections(built: Path, tmp_path: Path) -> None:
    def seconds(path: Path) -> float:
        best = float("inf")
        for _ in range(2):
            t = time.perf_counter()
            load_package(path)
            best = min(best, time.perf_counter() - t)
        return best

    small, large = _with_weights(built, tmp_path / "s.dpk", 1000), _with_weights(built, tmp_path / "l.dpk", 8000)
    # 8x the sections: about 8x the time when linear, 64x when each lookup scans the section table
    assert seconds(large) < 20 * seconds(small) + 0.05
