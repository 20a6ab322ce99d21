"""The ``.dpk`` container: a fixed header, a canonical-JSON manifest, then 64-byte aligned, checksummed sections.

Layout (all integers little-endian; docs/package-format.md is the normative description)::

    0   8   magic            b"\\x89DPK\\r\\n\\x1a\\n"
    8   4   format version   uint32 (FORMAT_VERSION)
    12  4   flags            uint32; bit 0 (FLAG_LITTLE_ENDIAN) must be set; bit 1 (FLAG_SIGNED): the file ends
                             with a signature trailer; every other bit clear
    16  8   manifest offset  uint64, always HEADER_SIZE (64)
    24  8   manifest size    uint64
    32  32  manifest sha256
    64  ..  manifest (UTF-8 JSON, sorted keys, no whitespace), zero padding, sections, each at an offset that is a
            multiple of the manifest's ``section_alignment`` and zero padding between them; the file ends where
            the last section ends, or, when FLAG_SIGNED is set, SIGNATURE_SIZE bytes after it: the signature
            trailer (SIGNATURE: magic, algorithm 1 = Ed25519, zero, raw public key, signature, zero padding;
            packager/signing.py makes and checks the signature).

Reading checks every byte: header fields exactly, the manifest against its checksum, each section against the
sha256 in the manifest, and every padding byte against zero; so one flipped byte anywhere is a PackageError.
The file is read once into memory the process owns before any check; weights and other sections are
handed out as read-only views into that one copy (never copied again, never read from the file again). Nothing
is pickled or evaluated; JSON is parsed with ``json.loads`` only, after
``jit.common.json_limits`` has bounded its nesting and integer lengths.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jit.common.json_limits import bounded_json
from packager.errors import PackageError
from targets.host_memory import huge_page_array

MAGIC = b"\x89DPK\r\n\x1a\n"
# 2: FLAG_SIGNED and the signature trailer; 3: the manifest's entries (one or more models per file), each entry's
# sections named under it (packager/entries.py). Versions 1 and 2 are refused: their single-model manifest has no
# entries, and reading it as one would keep a second loader alive for a layout nothing writes any more.
FORMAT_VERSION = 3
READS_VERSIONS = (3,)
FLAG_LITTLE_ENDIAN = 1
FLAG_SIGNED = 2
KNOWN_FLAGS = FLAG_LITTLE_ENDIAN | FLAG_SIGNED
SIGNATURE_MAGIC = b"DPKSIG\r\n"
SIGNATURE = struct.Struct("<8sII32s64s16s")
SIGNATURE_SIZE = 128
SIG_ED25519 = 1
HEADER = struct.Struct("<8sIIQQ32s")
HEADER_SIZE = 64
BASE_ALIGNMENT = 64
assert HEADER.size == HEADER_SIZE and SIGNATURE.size == SIGNATURE_SIZE


@dataclass(frozen=True)
class Section:
    """One section to write: its name (unique), kind, bytes and plain-data attributes (dtype, shape, ...)."""

    name: str
    kind: str
    data: bytes | memoryview
    attrs: dict[str, Any]


def canonical_json(doc: Any) -> bytes:
    """The one byte form of a plain-data document: sorted keys, no whitespace, UTF-8, no NaN."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _layout(manifest: dict[str, Any], sections: list[Section], alignment: int) -> bytes:
    """The manifest bytes with every section's offset, size and sha256 filled in. Offsets depend on the
    manifest's length and the length on the offsets' digits: iterate to the fixed point (lengths only grow)."""
    digests = [hashlib.sha256(s.data).hexdigest() for s in sections]
    size = 0
    for _ in range(16):
        offset, table = align_up(HEADER_SIZE + size, alignment), []
        for s, digest in zip(sections, digests, strict=True):
            nbytes = memoryview(s.data).nbytes
            table.append({**s.attrs, "name": s.name, "kind": s.kind, "offset": offset, "size": nbytes,
                          "sha256": digest})
            offset = align_up(offset + nbytes, alignment)
        data = canonical_json({**manifest, "section_alignment": alignment, "sections": table})
        if len(data) == size:
            return data
        size = len(data)
    raise PackageError(f"manifest: expected its layout to settle, got size {size} still changing")


def write_container(path: str | Path, manifest: dict[str, Any], sections: list[Section],
                    alignment: int = BASE_ALIGNMENT, sign: Callable[[bytes], tuple[bytes, bytes]] | None = None) -> int:
    """Write ``manifest`` (plain data; ``sections`` and ``section_alignment`` are filled in here) and the
    sections to ``path`` atomically (a temporary file renamed over it); returns the file size in bytes. With
    ``sign`` (header bytes -> (raw public key, signature), e.g. packager.signing.SigningKey.sign) the header
    has FLAG_SIGNED and the file ends with the signature trailer."""
    if alignment < BASE_ALIGNMENT or alignment % BASE_ALIGNMENT or alignment & (alignment - 1):
        raise PackageError(f"section_alignment: expected a power of two multiple of {BASE_ALIGNMENT}, got "
                           f"{alignment}")
    names = [s.name for s in sections]
    if len(set(names)) != len(names):
        raise PackageError(f"sections: names expected unique, got {sorted(n for n in names if names.count(n) > 1)}")
    body = _layout(manifest, sections, alignment)
    header = HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_LITTLE_ENDIAN | (FLAG_SIGNED if sign else 0), HEADER_SIZE,
                         len(body), hashlib.sha256(body).digest())
    trailer = b""
    if sign is not None:
        public_key, signature = sign(header)
        trailer = SIGNATURE.pack(SIGNATURE_MAGIC, SIG_ED25519, 0, public_key, signature, bytes(16))
    out = Path(path)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    pos = 0
    with tmp.open("wb") as f:
        for chunk in (header, body):
            f.write(chunk)
            pos += len(chunk)
        for s in sections:
            pad = align_up(pos, alignment) - pos
            f.write(b"\0" * pad)
            f.write(s.data)
            pos += pad + memoryview(s.data).nbytes
        f.write(trailer)
        pos += len(trailer)
    tmp.replace(out)
    return pos


@dataclass(frozen=True)
class Signature:
    """A signature trailer's fields: the signer's raw Ed25519 public key and the 64-byte signature."""

    public_key: bytes
    signature: bytes


@dataclass
class Container:
    """An opened, fully checked package file: header values, the manifest (plain data) and section views."""

    path: Path
    version: int
    flags: int
    manifest: dict[str, Any]
    buffer: Any  # the read-only view of the owned copy of the file (or b"") every section view points into
    index: dict[str, dict[str, Any]]  # name -> section entry: a lookup per section keeps loading linear
    signature: Signature | None = None  # the trailer's fields (checked by packager/signing.py); None: unsigned

    def section_entry(self, name: str) -> dict[str, Any]:
        entry = self.index.get(name)
        if entry is None:
            raise PackageError(f"sections: expected an entry named {name!r}, got none")
        return entry

    def has_section(self, name: str) -> bool:
        return name in self.index

    def view(self, name: str) -> memoryview:
        """The bytes of section ``name`` (read-only, no copy)."""
        e = self.section_entry(name)
        return memoryview(self.buffer)[e["offset"]:e["offset"] + e["size"]]


def _map(path: Path) -> Any:
    """The whole file, read once into anonymous memory this process owns (on huge pages: a replay binds the
    weight sections in it as they are, and reads them on every call; targets/host_memory.py), as a read-only view.
    Its start is page-aligned like a file mapping's, so aligned sections stay aligned. Every check then runs on
    the bytes the replay will use, and overwriting or truncating the file later changes nothing (a shared file
    mapping would see the overwrite and raise SIGBUS past a truncation)."""
    try:
        with path.open("rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b""
            view, got = memoryview(huge_page_array(size)), 0
            while got < size:
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
    except OSError as e:
        raise PackageError(f"{path}: expected a readable file, got {e.strerror or e}") from None
    if got != size:
        raise PackageError(f"{path}: size expected {size} bytes (its size when opened), got {got} (truncated "
                           "while reading)")
    return view.toreadonly()


def _other_kind(head: bytes, where: str) -> str:
    """What a file that is not a package looks like, and the command for it (empty when unknown)."""
    if where.endswith(".onnx") or head[:1] == b"\x08":  # an ONNX ModelProto starts with field 1, ir_version
        return (f": an ONNX model, not a package (check its ABI with `drivepack abi-check {where} --vehicle NAME`, "
                f"package it with `drivepack package {where} --vehicle NAME -o OUT.dpk`)")
    if head[:1] in (b"{", b"["):
        return f": a JSON file, not a package (an .abi.json ABI: `drivepack abi-check {where} --vehicle NAME`)"
    if head[:1] == b"\x80":
        return ": a Python pickle, not a package (never loaded: drivepack executes nothing from a file)"
    return ""


def read_header(data: Any, where: str) -> tuple[int, int, int]:
    """(version, flags, manifest size) after checking magic, version, flags and the manifest range."""
    if len(data) < HEADER_SIZE:
        raise PackageError(f"{where}: size expected at least the {HEADER_SIZE}-byte header, got {len(data)} bytes "
                           "(truncated)")
    magic, version, flags, m_off, m_size, _ = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise PackageError(f"{where}: magic expected {MAGIC!r} (a drivepack package), got {bytes(magic)!r}"
                           f"{_other_kind(bytes(data[:2]), where)}")
    if version not in READS_VERSIONS:
        raise PackageError(f"{where}: format version expected one of {list(READS_VERSIONS)} (this drivepack reads "
                           f"format version {', '.join(map(str, READS_VERSIONS))}), got {version}")
    if flags & ~KNOWN_FLAGS or not flags & FLAG_LITTLE_ENDIAN:
        raise PackageError(f"{where}: flags expected {FLAG_LITTLE_ENDIAN:#x} or {FLAG_LITTLE_ENDIAN | FLAG_SIGNED:#x} "
                           f"(little-endian, signed, no other bit), got {flags:#x}")
    if m_off != HEADER_SIZE:
        raise PackageError(f"{where}: manifest offset expected {HEADER_SIZE}, got {m_off}")
    if HEADER_SIZE + m_size > len(data):
        raise PackageError(f"{where}: manifest end expected <= file size {len(data)}, got {HEADER_SIZE + m_size} "
                           "(truncated)")
    return version, flags, m_size


def open_container(path: str | Path) -> Container:
    """Map ``path`` and check every byte of it (see the module docstring); PackageError on the first problem."""
    p = Path(path)
    where = str(p)
    data = _map(p)
    version, flags, m_size = read_header(data, where)
    body = data[HEADER_SIZE:HEADER_SIZE + m_size]
    if hashlib.sha256(body).digest() != data[32:64]:
        raise PackageError(f"{where}: manifest sha256 expected {bytes(data[32:64]).hex()} (the header's), got "
                           f"{hashlib.sha256(body).hexdigest()}")
    manifest = bounded_json(bytes(body), f"{where}: manifest", PackageError)
    if not isinstance(manifest, dict):
        raise PackageError(f"{where}: manifest expected a JSON object, got {type(manifest).__name__}")
    fv = manifest.get("format_version")
    if type(fv) is not int or fv != version:
        raise PackageError(f"{where}: manifest.format_version: expected {version} (the header's format version), "
                           f"got {fv!r}")
    end = len(data) - (SIGNATURE_SIZE if flags & FLAG_SIGNED else 0)
    if end < HEADER_SIZE + m_size:
        raise PackageError(f"{where}: size expected the manifest and the {SIGNATURE_SIZE}-byte signature trailer "
                           f"(flag {FLAG_SIGNED:#x}), got {len(data)} bytes (truncated)")
    # the sections end where the trailer starts: every check of theirs sees the file without it
    index = _check_sections(manifest, memoryview(data)[:end], HEADER_SIZE + m_size, where)
    signature = _signature(data[end:], where) if flags & FLAG_SIGNED else None
    return Container(p, version, flags, manifest, data, index, signature)


def _signature(trailer: bytes, where: str) -> Signature:
    magic, algorithm, zero, public_key, signature, pad = SIGNATURE.unpack(trailer)
    if magic != SIGNATURE_MAGIC or algorithm != SIG_ED25519 or zero or any(pad):
        raise PackageError(f"{where}: signature trailer expected magic {SIGNATURE_MAGIC!r}, algorithm {SIG_ED25519} "
                           f"(Ed25519) and zero padding, got magic {magic!r}, algorithm {algorithm}, "
                           f"{'non-zero' if zero or any(pad) else 'zero'} padding")
    return Signature(public_key, signature)


def _int(entry: dict[str, Any], key: str, where: str, minimum: int = 0) -> int:
    v = entry.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise PackageError(f"{where}.{key}: expected an integer >= {minimum}, got {v!r}")
    return v


def _check_sections(manifest: dict[str, Any], data: Any, start: int, where: str) -> dict[str, dict[str, Any]]:
    """Every section inside the file, aligned, in order, not overlapping, its sha256 matching; every gap zero;
    the file ending exactly at the last section's end (no byte after it, zero or not). Returns name -> entry."""
    align = _int(manifest, "section_alignment", f"{where}: manifest", BASE_ALIGNMENT)
    if align % BASE_ALIGNMENT or align & (align - 1):
        raise PackageError(f"{where}: manifest.section_alignment: expected a power of two multiple of "
                           f"{BASE_ALIGNMENT}, got {align}")
    entries = manifest.get("sections")
    if not isinstance(entries, list):
        raise PackageError(f"{where}: manifest.sections: expected a list, got {type(entries).__name__}")
    pos, names = start, {}
    for i, e in enumerate(entries):
        at = f"{where}: manifest.sections[{i}]"
        if not isinstance(e, dict):
            raise PackageError(f"{at}: expected an object, got {type(e).__name__}")
        name = e.get("name")
        if not isinstance(name, str) or not name or name in names:
            raise PackageError(f"{at}.name: expected a unique non-empty string, got {name!r}")
        names[name] = e
        if not isinstance(e.get("kind"), str):
            raise PackageError(f"{at}.kind: expected a string, got {e.get('kind')!r}")
        off, size = _int(e, "offset", at), _int(e, "size", at)
        if off % align:
            raise PackageError(f"{at}.offset: expected a multiple of {align}, got {off}")
        if off < pos:
            raise PackageError(f"{at}.offset: expected >= {pos} (after the previous section), got {off}")
        if off + size > len(data):
            raise PackageError(f"{at} ({name}): end expected <= file size {len(data)}, got {off + size} (truncated)")
        _check_zero(data, pos, off, where)
        digest = e.get("sha256")
        got = hashlib.sha256(memoryview(data)[off:off + size]).hexdigest()
        if got != digest:
            raise PackageError(f"{at} ({name}): sha256 expected {digest}, got {got} (corrupt section)")
        pos = off + size
    if len(data) != pos:
        raise PackageError(f"{where}: file size expected {pos} (the end of the last section), got {len(data)} "
                           f"({len(data) - pos} trailing bytes)")
    return names


def _check_zero(data: Any, lo: int, hi: int, where: str) -> None:
    if hi > lo and any(memoryview(data)[lo:hi]):
        first = next(i for i in range(lo, hi) if data[i])
        raise PackageError(f"{where}: bytes {lo}..{hi}: expected zero padding, got byte {data[first]:#04x} at {first}")
