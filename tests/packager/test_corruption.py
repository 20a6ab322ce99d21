"""Corruption and fuzz: a few thousand mutations of one small package, each refused with a typed DrivepackError.

Bit flips over every region (header, manifest, every section kind, the signature trailer), truncations,
appended bytes, and structural edits written back with valid checksums and a trusted signature (versions, sizes,
bindings, dispatch targets, arena ranges). Loading runs only Python checks, so it runs here; a mutation that
loads is replayed in a child process, whose exit status shows a signal. Seeded: every run tries the same
mutations.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jit.common.errors import DrivepackError
from packager.container import HEADER_SIZE, SIGNATURE_SIZE, open_container
from packager.package import load_package
from tests.packager.crafted import read_sections, rewrite, tiny_package

FLIPS_PER_REGION = 120
RANDOM_EDITS = 600  # cmdbuf edits; half as many manifest edits
EDGE_VALUES: list[Any] = [-1, 0, 1, 3, 63, 64, 65, 128, 1 << 31, 1 << 40, 1 << 64, "", "weight:0", "input:frame",
                          "input:x", "output:outputs", "arena:0+128", "arena:64+128", "arena:0+64", "float16", None,
                          [], {}, 1.5, True]
REPLAY_CHILD = """
import sys
from jit.common.errors import DrivepackError
from packager.package import load_package
for path in sys.argv[1:]:
    try:
        pkg = load_package(path)
        pkg.make_replay()(pkg.golden(0).inputs)
        print("ran", path, flush=True)
    except DrivepackError as e:
        print("refused", path, type(e).__name__, flush=True)
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_package(tmp_path_factory.mktemp("pkg"))


def outcome(path: Path) -> str:
    """"refused" (a DrivepackError), "accepted", or the name of any other exception (a defect)."""
    try:
        load_package(path)
    except DrivepackError:
        return "refused"
    except Exception as e:  # noqa: BLE001 - any other exception is exactly what this test looks for
        return f"{type(e).__name__}: {e}"
    return "accepted"


def regions(path: Path) -> dict[str, tuple[str, int, int]]:
    """Every byte range of the file by name: (kind, start, end)."""
    c = open_container(path)
    size = len(c.buffer)
    manifest_end = HEADER_SIZE + int.from_bytes(bytes(c.buffer[24:32]), "little")
    out = {"header": ("header", 0, HEADER_SIZE), "manifest": ("manifest", HEADER_SIZE, manifest_end)}
    for e in c.manifest["sections"]:
        if e["size"]:
            out[e["name"]] = (e["kind"], e["offset"], e["offset"] + e["size"])
    if c.signature is not None:
        out["signature"] = ("signature", size - SIGNATURE_SIZE, size)
    return out


def test_bit_flips_in_every_region_are_refused(built: Path, tmp_path: Path) -> None:
    raw, rng, bad = built.read_bytes(), random.Random(22), []
    found = regions(built)
    assert {k for k, _, _ in found.values()} >= {"header", "manifest", "cmdbuf", "kernel_source", "weight",
                                                 "golden_input", "golden_reference", "golden_target", "signature"}
    out = tmp_path / "flip.dpk"
    for name, (_, lo, hi) in found.items():
        for _ in range(FLIPS_PER_REGION):
            pos, bit = rng.randrange(lo, hi), rng.randrange(8)
            data = bytearray(raw)
            data[pos] ^= 1 << bit
            out.write_bytes(bytes(data))
            if (got := outcome(out)) != "refused":
                bad.append((name, pos, bit, got))
    assert not bad, bad[:10]


def test_truncations_and_appended_bytes_are_refused(built: Path, tmp_path: Path) -> None:
    raw, bad, out = built.read_bytes(), [], tmp_path / "cut.dpk"
    cuts = set(range(0, len(raw), max(1, len(raw) // 300))) | {len(raw) - k for k in (1, 2, 63, 64, 127, 128, 129)}
    cuts |= {lo for _, lo, _ in regions(built).values()} | {hi - 1 for _, _, hi in regions(built).values()}
    for n in sorted(c for c in cuts if 0 <= c < len(raw)):
        out.write_bytes(raw[:n])
        if (got := outcome(out)) != "refused":
            bad.append((n, got))
    for tail in (b"\0", b"\1", b"\0" * 63, b"\0" * 64, b"\0" * SIGNATURE_SIZE, raw[-SIGNATURE_SIZE:], raw[:4096]):
        out.write_bytes(raw + tail)
        if (got := outcome(out)) != "refused":
            bad.append((f"+{len(tail)}", got))
    assert not bad, bad[:10]


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Any], None]:
    def edit(doc: Any) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value
    return edit


# each: where (manifest or cmdbuf), what it changes; every one of them must be refused
NAMED_EDITS: list[tuple[str, tuple[Any, ...], Any]] = [
    ("manifest", ("format_version",), 2), ("manifest", ("format_version",), 4),
    ("manifest", ("entries", 0, "arena_bytes"), 1 << 40), ("manifest", ("entries", 0, "arena_bytes"), 0),
    ("manifest", ("entries", 0, "kernels", "kept"), 5),
    ("manifest", ("entries", 0, "kernels", "list", 0, "entry"), "main"),
    ("manifest", ("entries", 0, "kernels", "list", 0, "section"), "tiny/kernel/1"),
    ("manifest", ("entries", 0, "golden", "sets"), 2),
    ("manifest", ("entries", 0, "golden", "outputs", 0, "shape"), [1, 32]),
    ("manifest", ("entries", 0, "abi", "inputs", 1, "dtype"), "float16"),
    ("manifest", ("entries", 0, "abi", "outputs", 0, "shape"), [1, 32]),
    ("cmdbuf", ("version",), 2), ("cmdbuf", ("format",), "onnx"), ("cmdbuf", ("arena_bytes",), 1 << 40),
    ("cmdbuf", ("arena_bytes",), 192), ("cmdbuf", ("alignment",), 48), ("cmdbuf", ("alignment",), 1 << 20),
    ("cmdbuf", ("dispatches", 0, "kernel"), 2), ("cmdbuf", ("dispatches", 0, "kernel"), -1),
    ("cmdbuf", ("dispatches", 0, "kernel"), 1), ("cmdbuf", ("dispatches", 1, "kernel"), 0),
    ("cmdbuf", ("dispatches", 0, "bindings", 0), "weight:0"), ("cmdbuf", ("dispatches", 0, "bindings", 0), "input:x"),
    ("cmdbuf", ("dispatches", 1, "bindings", 0), "input:frame"),
    ("cmdbuf", ("dispatches", 0, "bindings", 1), "weight:9"),
    ("cmdbuf", ("dispatches", 0, "bindings", 1), "arena:0+64"),
    ("cmdbuf", ("dispatches", 0, "bindings"), ["arena:0+128"]), ("cmdbuf", ("dispatches", 0, "global_size"), [0]),
    ("cmdbuf", ("dispatches", 0, "global_size"), [1 << 40]), ("cmdbuf", ("dispatches", 0, "global_size"), [1] * 4),
    ("cmdbuf", ("buffers", 3, "nbytes"), 16380), ("cmdbuf", ("buffers", 3, "shape"), [4097]),
    ("cmdbuf", ("buffers", 3, "shape"), [1 << 40]), ("cmdbuf", ("buffers", 0, "shape"), [1] * 17),
    ("cmdbuf", ("buffers", 7, "binding"), "arena:64+128"), ("cmdbuf", ("buffers", 7, "binding"), "arena:8+128"),
    ("cmdbuf", ("buffers", 2, "dtype"), "float16"), ("cmdbuf", ("buffers", 1, "shape"), [1, 32]),
    ("cmdbuf", ("buffers", 3, "image"), [1, 1]), ("cmdbuf", ("buffers", 0, "binding"), "state:frame"),
]


@pytest.mark.parametrize(("where", "path", "value"), NAMED_EDITS, ids=[f"{w}.{'.'.join(map(str, p))}={v!r}"[:60]
                                                                      for w, p, v in NAMED_EDITS])
def test_structural_edits_are_refused(built: Path, tmp_path: Path, where: str, path: tuple[Any, ...],
                                      value: Any) -> None:
    bad = rewrite(built, tmp_path / "edit.dpk", **{where: _set(path, value)})
    assert outcome(bad) == "refused"


def _leaves(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*prefix, k))]
    if isinstance(doc, list) and doc:
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*prefix, i))]
    return [prefix]


def test_a_binding_smaller_than_its_kernel_reads_is_refused(built: Path, tmp_path: Path) -> None:
    # dispatch 0 reads 16 KB through data2 (weight:0); input:x holds 64 bytes
    bad = rewrite(built, tmp_path / "small.dpk", cmdbuf=_set(("dispatches", 0, "bindings", 2), "input:x"))
    with pytest.raises(DrivepackError) as e:
        load_package(bad)
    msg = str(e.value)
    assert "dispatches[0] (kernel " in msg and "data2 (input:x)" in msg and "got a binding of 64 bytes" in msg, msg
    assert "\n" not in msg


@pytest.mark.slow
def test_random_structural_edits_are_refused_or_replay_without_a_signal(built: Path, tmp_path: Path) -> None:
    cmdbuf = json.loads(bytes(open_container(built).view("tiny/cmdbuf")))
    # the fields a replay sizes, indexes and launches by (kernel text and flags have tests of their own)
    leaves = [p for p in _leaves(cmdbuf) if p[0] in ("arena_bytes", "alignment", "dispatches", "buffers", "version")]
    rng, bad, accepted = random.Random(2022), [], []

    def try_edits(n: int, prefix: str, section: str, leaves: list[tuple[Any, ...]]) -> None:
        """``n`` random edits of ``section`` ("cmdbuf" or "manifest"): each refused, or kept to replay below."""
        for i in range(n):
            path, value = rng.choice(leaves), rng.choice(EDGE_VALUES)
            out = rewrite(built, tmp_path / f"{prefix}{i}.dpk", **{section: _set(path, value)})
            got = outcome(out)
            if got == "accepted":
                accepted.append(out)
            elif got != "refused":
                bad.append((path, value, got))
            else:
                out.unlink()

    try_edits(RANDOM_EDITS, "r", "cmdbuf", leaves)
    manifest, _, _ = read_sections(built)
    # the manifest fields the loader cross-checks (shown-only fields such as target.dtypes may take any value)
    leaves = [p for p in _leaves(manifest) if p[0] == "format_version" or
              (p[0] == "entries" and p[2] in ("arena_bytes", "kernels", "golden", "abi"))]
    try_edits(RANDOM_EDITS // 2, "m", "manifest", leaves)
    assert not bad, bad[:10]
    assert len(accepted) < RANDOM_EDITS // 5  # the edits are structural: nearly all must be refused
    child = subprocess.run([sys.executable, "-c", REPLAY_CHILD, *map(str, accepted)], capture_output=True, text=True,
                           timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert child.returncode == 0, (child.returncode, child.stdout[-2000:], child.stderr[-2000:])
    assert child.stdout.count("\n") == len(accepted)
