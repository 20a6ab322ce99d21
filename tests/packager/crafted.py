"""Crafted packages for tests: a copy of a real package edited and written back with every checksum valid.

``rewrite`` is what an attacker who recomputes the checksums can do: edit the manifest, the command buffer
document or any section's bytes, then write the file through the real writer (signed by the suite's own user
key unless ``sign=False``), so that what refuses it is the check under test and not a checksum or signature.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from packager.build import BuildOptions, build_package
from packager.container import (
    FLAG_LITTLE_ENDIAN,
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    Section,
    canonical_json,
    open_container,
    write_container,
)
from packager.signing import user_signing_key
from packager.synthetic import tiny_model

ENTRY_KEYS = ("name", "kind", "offset", "size", "sha256")


def tiny_package(folder: Path, golden_sets: int = 1) -> Path:
    """``packager.synthetic.tiny_model`` packaged for pc-cpu in ``folder`` (about a second)."""
    onnx.save(tiny_model(), str(folder / "tiny.onnx"))
    build_package(folder / "tiny.onnx", "pc-cpu", folder / "tiny.dpk", BuildOptions(golden_sets=golden_sets))
    return folder / "tiny.dpk"


def read_sections(src: Path) -> tuple[dict[str, Any], list[Section], int]:
    """(manifest without its section table, the sections, the section alignment) of ``src``."""
    c = open_container(src)
    manifest = copy.deepcopy(c.manifest)
    entries = manifest.pop("sections")
    align = manifest.pop("section_alignment")
    sections = [Section(e["name"], e["kind"], bytes(c.view(e["name"])),
                        {k: v for k, v in e.items() if k not in ENTRY_KEYS}) for e in entries]
    return manifest, sections, align


def rewrite(src: Path, dst: Path, manifest: Callable[[dict[str, Any]], Any] | None = None,
            cmdbuf: Callable[[dict[str, Any]], Any] | None = None,
            sections: Callable[[str, bytes], bytes] | None = None,
            extra: list[Section] | None = None, sign: bool = True) -> Path:
    """``src`` rewritten to ``dst``: ``manifest`` / ``cmdbuf`` edit the plain-data documents in place,
    ``sections(name, data)`` returns each section's new bytes, ``extra`` sections are appended. ``cmdbuf`` edits
    every command buffer section (a single-entry package has one: ``<entry>/cmdbuf``)."""
    doc, secs, align = read_sections(src)
    if manifest is not None:
        manifest(doc)
    out = []
    for s in secs:
        data = bytes(s.data)
        if s.kind == "cmdbuf" and cmdbuf is not None:
            cb = json.loads(data)
            cmdbuf(cb)
            data = canonical_json(cb)
        if sections is not None:
            data = sections(s.name, data)
        out.append(Section(s.name, s.kind, data, s.attrs))
    write_container(dst, doc, out + list(extra or ()), align, sign=user_signing_key().sign if sign else None)
    return dst


def raw_manifest_package(dst: Path, manifest: bytes) -> Path:
    """A package of a valid header whose manifest bytes are ``manifest`` (any bytes: a document the writer could
    not produce, e.g. JSON nested 100,000 deep) and no sections; the manifest checksum is correct."""
    header = HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_LITTLE_ENDIAN, HEADER_SIZE, len(manifest),
                         hashlib.sha256(manifest).digest())
    dst.write_bytes(header + manifest)
    return dst


def replace_section(name: str, data: bytes) -> Callable[[str, bytes], bytes]:
    """A ``sections`` edit giving section ``name`` the bytes ``data`` and leaving the others as they are."""
    return lambda n, d: data if n == name else d
