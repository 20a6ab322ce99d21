"""Reading a ``.dpk`` package: checked container + manifest, the command buffer with its kernel sources, weights
as read-only views of the one copy of the file the loader owns, golden I/O, the ABI; and a replay built from
those alone (changing or truncating the file after the load reaches none of them).

``load_package(path)`` refuses anything it cannot trust with a PackageError before any of it is used: the
container checks (packager/container.py), the signature (packager/signing.py: signed by a trusted key, unless
``allow_unsigned``; a SignatureError naming the signer's fingerprint), the manifest fields (packager/manifest.py),
then cross-checks between sections: the command buffer is valid (targets/cmdbuf.py: bindings, bounded sizes,
read-only weights and inputs, live arena bytes, each kernel source's parameters and stores), every weight, golden
input and golden output section has exactly its buffer's byte size, the kernel list matches the command buffer,
the ABI's inputs and outputs are the command buffer's (docs/package-format.md lists every rule). This module does
not import the ONNX front end or the compiler.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from abi.errors import AbiError
from abi.records import Abi
from jit.common.dtype import dtypes, to_numpy
from packager.container import Container, open_container
from packager.errors import PackageError
from packager.manifest import Manifest, parse_manifest
from packager.signing import SignatureInfo, check_signature
from targets.cmdbuf import BufferSpec, CmdbufError, CommandBuffer
from targets.replay import Replay, make_replay

GOLDEN_KINDS = ("input", "reference", "target")


def weight_section(wid: int) -> str:
    return f"weight/{wid}"


def kernel_section(index: int) -> str:
    return f"kernel/{index}"


def golden_section(index: int, kind: str, name: str) -> str:
    return f"golden/{index}/{kind}/{name}"


@dataclass(frozen=True)
class GoldenSet:
    """One golden replay: inputs, the reference outputs (``manifest.reference`` says whose), and the package
    target's own outputs."""

    index: int
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    target: dict[str, np.ndarray]


@dataclass
class Package:
    """A loaded package. Arrays are read-only views of the loader's own copy of the file (never the file itself)."""

    container: Container
    manifest: Manifest
    cmdbuf: CommandBuffer
    weights: dict[int, np.ndarray]
    abi: Abi
    signature: SignatureInfo | None = None  # who signed it and why it was accepted (packager/signing.py)

    @property
    def path(self) -> Path:
        return self.container.path

    @property
    def size(self) -> int:
        return len(self.container.buffer)

    def golden(self, index: int) -> GoldenSet:
        if not 0 <= index < self.manifest.golden_sets:
            raise PackageError(f"golden set: expected 0..{self.manifest.golden_sets - 1}, got {index}")
        parts = {kind: {b.name: self._array(golden_section(index, kind, b.name), b)
                        for b in (self.cmdbuf.inputs if kind == "input" else self.cmdbuf.outputs)}
                 for kind in GOLDEN_KINDS}
        return GoldenSet(index, parts["input"], parts["reference"], parts["target"])

    def _array(self, section: str, spec: BufferSpec) -> np.ndarray:
        npd = to_numpy(dtypes.from_name(spec.dtype))
        return np.frombuffer(self.container.view(section), dtype=np.uint8).view(npd).reshape(spec.shape)

    def make_replay(self, device: str | None = None) -> Replay:
        """The replay of this package on ``device`` (default: the device it was built for)."""
        return make_replay(self.cmdbuf, self.weights, device or self.manifest.target_device)


def _sized(c: Container, name: str, nbytes: int) -> None:
    if not c.has_section(name):
        raise PackageError(f"{c.path}: sections: expected an entry named {name!r}, got none")
    size = c.section_entry(name)["size"]
    if size != nbytes:
        raise PackageError(f"{c.path}: {name}: size expected {nbytes} (its buffer's nbytes), got {size}")


def _cmdbuf(c: Container, m: Manifest) -> CommandBuffer:
    """The command buffer with each kernel's source read from its own section."""
    try:
        raw = CommandBuffer.from_bytes(bytes(c.view("cmdbuf")))
    except CmdbufError as e:
        raise PackageError(f"{c.path}: cmdbuf: {e}") from None
    if len(raw.kernels) != len(m.kernels):
        raise PackageError(f"{c.path}: cmdbuf.kernels: expected {len(m.kernels)} (the manifest's), got "
                           f"{len(raw.kernels)}")
    kernels = []
    for i, (k, entry) in enumerate(zip(raw.kernels, m.kernels, strict=True)):
        if (k.name, k.entry) != (entry.name, entry.entry) or entry.section != kernel_section(i):
            raise PackageError(f"{c.path}: manifest.kernels.list[{i}]: expected name {k.name!r}, entry {k.entry!r},"
                               f" section {kernel_section(i)!r}; got {entry.name!r}, {entry.entry!r}, "
                               f"{entry.section!r}")
        try:
            source = bytes(c.view(entry.section)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise PackageError(f"{c.path}: {entry.section}: expected UTF-8 source, got {e}") from None
        kernels.append(replace(k, source=source))
    try:
        cb = replace(raw, kernels=tuple(kernels))  # __post_init__ validates again: bindings, arena ranges
    except CmdbufError as e:
        raise PackageError(f"{c.path}: cmdbuf: {e}") from None
    if cb.arena_bytes != m.arena_bytes:
        raise PackageError(f"{c.path}: manifest.arena_bytes: expected {cb.arena_bytes} (the cmdbuf's), got "
                           f"{m.arena_bytes}")
    return cb


def load_package(path: str | Path, trust: Iterable[str | Path] = (), allow_unsigned: bool = False) -> Package:
    """Open, check every byte and cross-check a package (see the module docstring). ``trust``: public key files
    or fingerprints trusted besides the user's own key and ``$DRIVEPACK_TRUST``; ``allow_unsigned`` accepts an
    unsigned package or one signed by a key not trusted here."""
    c = open_container(path)
    signer = check_signature(c, trust, allow_unsigned)  # before any section is interpreted
    m = parse_manifest(c.manifest, f"{c.path}: manifest")
    cb = _cmdbuf(c, m)
    weights = {}
    for b in cb.weights:
        name = weight_section(int(b.name))
        _sized(c, name, b.nbytes)
        weights[int(b.name)] = np.frombuffer(c.view(name), dtype=np.uint8)
    outs = {b.name: b for b in cb.outputs}
    for o in m.outputs:
        b = outs.get(o.name)
        if b is None or (b.dtype, tuple(b.shape)) != (o.dtype, o.shape):
            got = "none" if b is None else f"{b.dtype} {tuple(b.shape)}"
            raise PackageError(f"{c.path}: manifest.golden.outputs: {o.name} expected {o.dtype} {o.shape} as in the "
                               f"cmdbuf, got {got}")
    if {o.name for o in m.outputs} != set(outs):
        raise PackageError(f"{c.path}: manifest.golden.outputs: names expected {sorted(outs)}, got "
                           f"{sorted(o.name for o in m.outputs)}")
    for i in range(m.golden_sets):
        for b in cb.inputs:
            _sized(c, golden_section(i, "input", b.name), b.nbytes)
        for kind in GOLDEN_KINDS[1:]:
            for b in cb.outputs:
                _sized(c, golden_section(i, kind, b.name), b.nbytes)
    try:
        abi = Abi.from_dict(m.abi)
    except AbiError as e:
        raise PackageError(f"{c.path}: manifest.abi: {' '.join(str(e).split())}") from None
    _check_abi(c, cb, abi)
    return Package(c, m, cb, weights, abi, signature=signer)


def _check_abi(c: Container, cb: CommandBuffer, abi: Abi) -> None:
    """The manifest's ABI names exactly the command buffer's inputs and outputs, each with its dtype and shape:
    a caller sizes its buffers from the ABI, the replay reads and writes the command buffer's."""
    for kind, specs, bufs in (("inputs", abi.inputs, cb.inputs), ("outputs", abi.outputs, cb.outputs)):
        want = {b.name: (b.dtype, tuple(b.shape)) for b in bufs}
        got = {s.name: (s.dtype, tuple(s.shape)) for s in specs}
        if got != want:  # names from the manifest may be of any JSON type: sort and show them as text
            differ = sorted({str(n) for n, _ in set(got.items()) ^ set(want.items())})
            raise PackageError(f"{c.path}: manifest.abi.{kind}: expected the cmdbuf's "
                               f"{', '.join(f'{n} {d} {s}' for n, (d, s) in sorted(want.items()))}, got "
                               f"{', '.join(f'{n} {d} {s}' for n, (d, s) in sorted(got.items(), key=str))} "
                               f"(differs in {differ})")


def read_package_abi(path: Path) -> Any:
    """The ABI stored in a package (the reader abi/load.py uses for ``.dpk``): metadata only, nothing of it is
    compiled or run, so the signer need not be trusted (as for ``inspect``)."""
    return load_package(path, allow_unsigned=True).abi
