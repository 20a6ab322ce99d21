"""The .dpk container and loader: round trip, zero-copy weights, and refusal of anything it cannot trust."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jit import DrivepackError
from packager.build import BuildOptions, build_package
from packager.container import (
    FLAG_LITTLE_ENDIAN,
    FLAG_SIGNED,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    Section,
    open_container,
    write_container,
)
from packager.errors import PackageError
from packager.package import load_package
from packager.signing import user_signing_key
from packager.synthetic import tiny_model


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pkg")
    onnx.save(tiny_model(), str(d / "tiny.onnx"))
    build_package(d / "tiny.onnx", "pc-cpu", d / "tiny.dpk", BuildOptions(golden_sets=2))
    return d / "tiny.dpk"


def _rewrite(src: Path, dst: Path, manifest_edit=None, section_edit=None) -> Path:
    """A copy of ``src`` rewritten through the writer (so every checksum is valid) after the edits, signed again
    with the (test session's) user key, so the loader's checks after the signature's are what refuses it."""
    c = open_container(src)
    manifest = copy.deepcopy(c.manifest)
    entries = manifest.pop("sections")
    align = manifest.pop("section_alignment")
    sections = [Section(e["name"], e["kind"], bytes(c.view(e["name"])),
                        {k: v for k, v in e.items() if k not in ("name", "kind", "offset", "size", "sha256")})
                for e in entries]
    if section_edit:
        sections = [Section(s.name, s.kind, section_edit(s.name, s.data), s.attrs) for s in sections]
    if manifest_edit:
        manifest_edit(manifest)
    write_container(dst, manifest, sections, align, sign=user_signing_key().sign)
    return dst


def test_round_trip_weights_golden_and_cmdbuf(built: Path) -> None:
    pkg = load_package(built)
    assert pkg.manifest.golden_sets == 2 and pkg.manifest.target_device == "CPU"
    assert len(pkg.cmdbuf.kernels) == len(pkg.manifest.kernels) >= 1
    assert all(k.source for k in pkg.cmdbuf.kernels)
    g = pkg.golden(1)
    assert set(g.inputs) == {"frame", "x"} and g.inputs["frame"].dtype == np.uint8
    out = pkg.make_replay()(g.inputs)
    assert np.array_equal(out["outputs"], g.target["outputs"])
    with pytest.raises(PackageError, match="golden set: expected 0..1, got 2"):
        pkg.golden(2)


def test_weights_are_aligned_zero_copy_views_of_the_file(built: Path) -> None:
    pkg = load_package(built)
    start = np.frombuffer(pkg.container.buffer, dtype=np.uint8).ctypes.data
    for wid, w in pkg.weights.items():
        entry = pkg.container.section_entry(f"tiny/weight/{wid}")
        assert entry["offset"] % 64 == 0
        assert w.ctypes.data == start + entry["offset"]  # a view of the mapping, not a copy
        assert not w.flags.writeable
    assert all(e["offset"] % pkg.manifest.raw["section_alignment"] == 0 for e in pkg.manifest.raw["sections"])


def test_header_fields(built: Path) -> None:
    magic, version, flags, m_off, m_size, _ = HEADER.unpack_from(built.read_bytes(), 0)
    assert (magic, version, flags, m_off) == (b"\x89DPK\r\n\x1a\n", FORMAT_VERSION,
                                          FLAG_LITTLE_ENDIAN | FLAG_SIGNED, HEADER_SIZE)
    assert json.loads(built.read_bytes()[HEADER_SIZE:HEADER_SIZE + m_size])["format_version"] == FORMAT_VERSION


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_one_flipped_byte_anywhere_is_refused(built: Path, tmp_path: Path, data: st.DataObject) -> None:
    raw = bytearray(built.read_bytes())
    offset = data.draw(st.integers(0, len(raw) - 1), label="offset")
    bit = data.draw(st.integers(0, 7), label="bit")
    raw[offset] ^= 1 << bit
    bad = tmp_path / "flipped.dpk"
    bad.write_bytes(bytes(raw))
    with pytest.raises(PackageError):
        load_package(bad)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_truncated_at_any_length_is_refused(built: Path, tmp_path: Path, data: st.DataObject) -> None:
    raw = built.read_bytes()
    n = data.draw(st.integers(0, len(raw) - 1), label="length")
    bad = tmp_path / "short.dpk"
    bad.write_bytes(raw[:n])
    with pytest.raises(PackageError):
        load_package(bad)


@pytest.mark.parametrize("tail", [b"\1", b"\0", b"\0" * 64])
def test_trailing_bytes_are_refused(built: Path, tmp_path: Path, tail: bytes) -> None:
    bad = tmp_path / "long.dpk"
    bad.write_bytes(built.read_bytes() + tail)  # zero bytes too: the file ends where its last section ends
    with pytest.raises(PackageError, match=rf"file size expected \d+ \(the end of the last section\), got \d+ "
                                           rf"\({len(tail)} trailing bytes\)"):
        load_package(bad)


def test_wrong_magic_names_it(tmp_path: Path, built: Path) -> None:
    bad = tmp_path / "m.dpk"
    bad.write_bytes(b"PK\x03\x04" + built.read_bytes()[4:])
    with pytest.raises(PackageError, match="magic expected"):
        load_package(bad)


@pytest.mark.parametrize("version", [0, 1, 2, 4, 99])
def test_other_format_versions_say_which_it_reads(built: Path, tmp_path: Path, version: int) -> None:
    raw = bytearray(built.read_bytes())
    struct.pack_into("<I", raw, 8, version)
    bad = tmp_path / "v.dpk"
    bad.write_bytes(bytes(raw))
    with pytest.raises(PackageError, match=rf"format version expected one of \[3\] \(this drivepack reads format "
                                           rf"version 3\), got {version}"):
        load_package(bad)


def test_unknown_flag_is_refused(built: Path, tmp_path: Path) -> None:
    raw = bytearray(built.read_bytes())
    struct.pack_into("<I", raw, 12, FLAG_LITTLE_ENDIAN | FLAG_SIGNED | 4)
    (tmp_path / "f.dpk").write_bytes(bytes(raw))
    with pytest.raises(PackageError, match="flags expected 0x1"):
        load_package(tmp_path / "f.dpk")


def test_rewrite_without_edits_loads(built: Path, tmp_path: Path) -> None:
    same = _rewrite(built, tmp_path / "same.dpk")
    assert same.read_bytes() == built.read_bytes()  # the writer is canonical


def _drop(path: str):
    def edit(m: dict) -> None:
        *parents, last = path.split(".")
        for p in parents:
            m = m[int(p)] if isinstance(m, list) else m[p]
        del m[last]
    return edit


def _set(path: str, value: object):
    def edit(m: dict) -> None:
        *parents, last = path.split(".")
        for p in parents:
            m = m[int(p)] if isinstance(m, list) else m[p]
        m[last] = value
    return edit


@pytest.mark.parametrize("edit, fragment", [
    (_drop("entries.0.model.sha256"), "manifest.entries[tiny].model.sha256: expected a value, got none"),
    (_set("entries.0.model.sha256", "xyz"), "entries[tiny].model.sha256: expected to match"),
    (_set("format", "zip"), "format: expected one of ['drivepack-package']"),
    (_set("target.name", "GPU"), "target.name: expected one of"),
    (_set("entries.0.arena_bytes", -1), "entries[tiny].arena_bytes: expected an integer >= 0, got -1"),
    (_set("entries.0.golden.sets", 0), "entries[tiny].golden.sets: expected an integer in 1..64, got 0"),
    (_set("entries.0.golden.sets", 3), "tiny/golden/2/input"),
    (_set("entries.0.golden.sets", 1), "sections: expected only the sections of entries ['tiny'], got 4 more, "
                                       "first 'tiny/golden/1/input/frame'"),
    (_set("entries.0.kernels.pruned", 7), "kernels.pruned: expected traced - dispatches"),
    (_set("entries.0.kernels.kept", 9), "kernels.kept: expected"),
    (_set("entries.0.budget_max_ms", "fast"), "entries[tiny].budget_max_ms: expected a number"),
    (_drop("entries.0.abi"), "entries[tiny].abi: expected a value, got none"),
    (_set("entries.0.abi.version", 9), "manifest.entries[tiny].abi"),
    (_set("entries.0.arena_bytes", 4), "manifest.entries[tiny].arena_bytes: expected"),
    (_drop("entries.0.golden.reference"), "entries[tiny].golden.reference: expected a value, got none"),
    (_set("entries.0.accuracy.slices", [{}]), "entries[tiny].accuracy.slices[0].output: expected a value"),
    (_set("entries", []), "manifest.entries: expected 1..MAX_ENTRIES = 64 entries, got 0"),
])
def test_bad_manifest_fields_are_named(built: Path, tmp_path: Path, edit, fragment: str) -> None:
    bad = _rewrite(built, tmp_path / "bad.dpk", manifest_edit=edit)
    with pytest.raises(PackageError) as e:
        load_package(bad)
    assert fragment in str(e.value)


def _cmdbuf_edit(fn):
    def edit(name: str, data: bytes) -> bytes:
        if name != "tiny/cmdbuf":
            return data
        doc = json.loads(data)
        fn(doc)
        return json.dumps(doc).encode()
    return edit


def test_binding_outside_the_arena_is_refused(built: Path, tmp_path: Path) -> None:
    def push_out(doc: dict) -> None:
        arena = doc["arena_bytes"]
        bind = f"arena:{arena}+4"
        doc["buffers"].append({"binding": bind, "dtype": "uint8", "shape": [4], "nbytes": 4, "init": None,
                               "image": None})
        doc["dispatches"][0]["bindings"][0] = bind
    bad = _rewrite(built, tmp_path / "b.dpk", section_edit=_cmdbuf_edit(push_out))
    with pytest.raises(PackageError, match=r"end expected <= arena_bytes"):
        load_package(bad)


def test_binding_to_an_unknown_buffer_is_refused(built: Path, tmp_path: Path) -> None:
    def unknown(doc: dict) -> None:
        doc["dispatches"][0]["bindings"][-1] = "weight:999"
    bad = _rewrite(built, tmp_path / "b.dpk", section_edit=_cmdbuf_edit(unknown))
    with pytest.raises(PackageError, match="weight:999"):
        load_package(bad)


def test_weight_section_of_the_wrong_size_is_refused(built: Path, tmp_path: Path) -> None:
    bad = _rewrite(built, tmp_path / "w.dpk",
                   section_edit=lambda n, d: d[:-4] if n == "tiny/weight/0" else d)
    with pytest.raises(PackageError, match=r"tiny/weight/0: size expected \d+ \(its buffer's nbytes\)"):
        load_package(bad)


def test_errors_are_drivepack_errors_and_nothing_is_unpickled() -> None:
    assert issubclass(PackageError, DrivepackError)
    for path in Path(__file__).resolve().parents[2].joinpath("packager").rglob("*.py"):
        text = path.read_text()
        assert not any(word in text for word in ("pickle.load", "Unpickler", "eval(", "exec(")), path
        # the samples write output_slices the way openpilot's build does (pickle.dumps); nothing else may import it
        assert "import pickle" not in text or path.name == "samples.py", path


def test_missing_file_is_a_package_error(tmp_path: Path) -> None:
    with pytest.raises(PackageError, match="expected a readable file"):
        load_package(tmp_path / "none.dpk")
