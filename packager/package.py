"""Reading a ``.dpk`` package: checked container + manifest, the command buffer with its kernel sources, weights
as read-only views of the one copy of the file the loader owns, golden I/O, the ABI; and a replay built from
those alone (changing or truncating the file after the load reaches none of them).

``load_package(path)`` refuses anything it cannot trust with a PackageError before any of it is used: the
container checks (packager/container.py), the signature (packager/signing.py: signed by a trusted key, unless
``allow_unsigned``; a SignatureError naming the signer's fingerprint), the manifest fields (packager/manifest.py),
then cross-checks between sections: the command buffer is valid (targets/cmdbuf.py: bindings, bounded sizes,
read-only weights and inputs, live arena bytes, each kernel source's parameters and stores), every weight, golden
input and golden output section has exactly its buffer's byte size, the kernel list matches the command buffer,
the ABI's inputs and outputs are the command buffer's and its input layout is sound (offsets aligned, no overlap),
all of it per entry (packager/entries.py names the sections), and no section belongs to no entry
(docs/package-format.md lists every rule). This module does not import the ONNX front end or the compiler.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from abi.errors import AbiError
from abi.layout import layout_issues
from abi.records import Abi
from jit.common.dtype import dtypes, to_numpy
from packager.container import Container, open_container
from packager.entries import cmdbuf_section, golden_section, kernel_section, weight_section
from packager.errors import PackageError
from packager.manifest import EntryManifest, Manifest, parse_manifest
from packager.signing import SignatureInfo, check_signature
from packager.step_replay import StepReplay, make_step
from targets.cmdbuf import BufferSpec, CmdbufError, CommandBuffer
from targets.cpu_runtime import THREADS_ENV
from targets.replay import Replay, make_replay

GOLDEN_KINDS = ("input", "reference", "target")


@dataclass(frozen=True)
class GoldenSet:
    """One golden replay: inputs, the reference outputs (``manifest.reference`` says whose), and the package
    target's own outputs."""

    index: int
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    target: dict[str, np.ndarray]


@dataclass
class Entry:
    """One entry of a loaded package: its manifest part, command buffer, weights, ABI and golden sets. Arrays are
    read-only views of the loader's own copy of the file."""

    name: str
    manifest: EntryManifest
    cmdbuf: CommandBuffer
    weights: dict[int, np.ndarray]
    abi: Abi
    container: Container
    target_device: str  # the package's (file-level) device: the replay's default
    cpu_threads: int | None = None  # the package's settings.cpu_threads

    def golden(self, index: int) -> GoldenSet:
        if not 0 <= index < self.manifest.golden_sets:
            raise PackageError(f"{self.name}: golden set: expected 0..{self.manifest.golden_sets - 1}, got {index}")
        parts = {kind: {b.name: self._array(golden_section(self.name, index, kind, b.name), b)
                        for b in (self.cmdbuf.inputs if kind == "input" else self.cmdbuf.outputs)}
                 for kind in GOLDEN_KINDS}
        return GoldenSet(index, parts["input"], parts["reference"], parts["target"])

    def _array(self, section: str, spec: BufferSpec) -> np.ndarray:
        npd = to_numpy(dtypes.from_name(spec.dtype))
        return np.frombuffer(self.container.view(section), dtype=np.uint8).view(npd).reshape(spec.shape)

    def make_replay(self, device: str | None = None, share_states_with: Replay | None = None) -> Replay:
        """The replay of this entry on ``device`` (default: the device the package was built for); with
        ``share_states_with``, the states of the same name are that replay's device buffers (a modeld step's
        ``prepare`` entry pushes frames on the queues its ``run`` entry reads)."""
        replay = make_replay(self.cmdbuf, self.weights, device or self.target_device, share_states_with)
        # the package's thread count, unless the one who runs it chose one ($DRIVEPACK_CPU_THREADS)
        if self.cpu_threads is not None and replay.threaded and THREADS_ENV not in os.environ:
            replay.set_threads(self.cpu_threads)
        return replay


@dataclass
class Package:
    """A loaded package: the file-level manifest, the entries in order and who signed it. ``cmdbuf``, ``weights``,
    ``abi``, ``golden(i)`` and ``make_replay()`` without ``entry`` are those of the only entry (a PackageError
    listing the names when there are several)."""

    container: Container
    manifest: Manifest
    views: dict[str, Entry]  # entry name -> its view, in the manifest's order
    signature: SignatureInfo | None = None  # who signed it and why it was accepted (packager/signing.py)

    @property
    def path(self) -> Path:
        return self.container.path

    @property
    def size(self) -> int:
        return len(self.container.buffer)

    @property
    def entries(self) -> tuple[str, ...]:
        """The entry names in order."""
        return tuple(self.views)

    def entry(self, name: str | None = None) -> Entry:
        """Entry ``name``; ``None``: the only entry (PackageError listing the names when there are several)."""
        return self.views[self.manifest.entry(name).name]

    @property
    def cmdbuf(self) -> CommandBuffer:
        return self.entry().cmdbuf

    @property
    def weights(self) -> dict[int, np.ndarray]:
        return self.entry().weights

    @property
    def abi(self) -> Abi:
        return self.entry().abi

    def golden(self, index: int) -> GoldenSet:
        return self.entry().golden(index)

    def make_replay(self, device: str | None = None, entry: str | None = None,
                    share_states_with: Replay | None = None) -> Replay:
        """The replay of entry ``entry`` (may be omitted when the package has one entry) on ``device``
        (default: the device it was built for), sharing states with ``share_states_with`` (Entry.make_replay)."""
        return self.entry(entry).make_replay(device, share_states_with)

    def make_step(self, size: str | None = None, device: str | None = None) -> StepReplay:
        """The modeld step of camera size ``size`` (``1928x1208``) of a ``--modeld`` package: its run and prepare
        entries sharing their queues (packager/step_replay.py)."""
        return make_step(self, size, device)


def _sized(c: Container, name: str, nbytes: int) -> None:
    if not c.has_section(name):
        raise PackageError(f"{c.path}: sections: expected an entry named {name!r}, got none")
    size = c.section_entry(name)["size"]
    if size != nbytes:
        raise PackageError(f"{c.path}: {name}: size expected {nbytes} (its buffer's nbytes), got {size}")


def _cmdbuf(c: Container, m: EntryManifest) -> CommandBuffer:
    """The entry's command buffer with each kernel's source read from its own section."""
    where = f"{c.path}: {cmdbuf_section(m.name)}"
    if not c.has_section(cmdbuf_section(m.name)):
        raise PackageError(f"{c.path}: sections: expected an entry named {cmdbuf_section(m.name)!r}, got none")
    try:
        raw = CommandBuffer.from_bytes(bytes(c.view(cmdbuf_section(m.name))))
    except CmdbufError as e:
        raise PackageError(f"{where}: {e}") from None
    if len(raw.kernels) != len(m.kernels):
        raise PackageError(f"{where}.kernels: expected {len(m.kernels)} (the manifest's), got {len(raw.kernels)}")
    kernels = []
    for i, (k, entry) in enumerate(zip(raw.kernels, m.kernels, strict=True)):
        section = kernel_section(m.name, i)
        if (k.name, k.entry) != (entry.name, entry.entry) or entry.section != section:
            raise PackageError(f"{c.path}: manifest.entries[{m.name}].kernels.list[{i}]: expected name {k.name!r}, "
                               f"entry {k.entry!r}, section {section!r}; got {entry.name!r}, {entry.entry!r}, "
                               f"{entry.section!r}")
        if not c.has_section(section):
            raise PackageError(f"{c.path}: sections: expected an entry named {section!r}, got none")
        try:
            source = bytes(c.view(section)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise PackageError(f"{c.path}: {section}: expected UTF-8 source, got {e}") from None
        kernels.append(replace(k, source=source))
    try:
        cb = replace(raw, kernels=tuple(kernels))  # __post_init__ validates again: bindings, arena ranges
    except CmdbufError as e:
        raise PackageError(f"{where}: {e}") from None
    if cb.arena_bytes != m.arena_bytes:
        raise PackageError(f"{c.path}: manifest.entries[{m.name}].arena_bytes: expected {cb.arena_bytes} (the "
                           f"cmdbuf's), got {m.arena_bytes}")
    return cb


def _load_entry(c: Container, m: EntryManifest, device: str, cpu_threads: int | None) -> tuple[Entry, set[str]]:
    """One entry, every cross-check of the module docstring made; and the names of the sections it owns."""
    where = f"{c.path}: manifest.entries[{m.name}]"
    cb = _cmdbuf(c, m)
    owned = {cmdbuf_section(m.name), *(kernel_section(m.name, i) for i in range(len(cb.kernels)))}
    weights = {}
    for b in cb.weights:
        name = weight_section(m.name, int(b.name))
        _sized(c, name, b.nbytes)
        weights[int(b.name)] = np.frombuffer(c.view(name), dtype=np.uint8)
        owned.add(name)
    outs = {b.name: b for b in cb.outputs}
    for o in m.outputs:
        b = outs.get(o.name)
        if b is None or (b.dtype, tuple(b.shape)) != (o.dtype, o.shape):
            got = "none" if b is None else f"{b.dtype} {tuple(b.shape)}"
            raise PackageError(f"{where}.golden.outputs: {o.name} expected {o.dtype} {o.shape} as in the cmdbuf, got "
                               f"{got}")
    if {o.name for o in m.outputs} != set(outs):
        raise PackageError(f"{where}.golden.outputs: names expected {sorted(outs)}, got "
                           f"{sorted(o.name for o in m.outputs)}")
    for i in range(m.golden_sets):
        for kind in GOLDEN_KINDS:
            for b in cb.inputs if kind == "input" else cb.outputs:
                name = golden_section(m.name, i, kind, b.name)
                _sized(c, name, b.nbytes)
                owned.add(name)
    try:
        abi = Abi.from_dict(m.abi)
    except AbiError as e:
        raise PackageError(f"{where}.abi: {' '.join(str(e).split())}") from None
    issues = layout_issues(abi)
    if issues:  # the ABI is the byte layout callers pack their buffers by: an overlap would corrupt an input
        raise PackageError(f"{where}.abi.inputs: {issues[0]}")
    _check_abi(where, cb, abi)
    return Entry(m.name, m, cb, weights, abi, c, device, cpu_threads), owned


def load_package(path: str | Path, trust: Iterable[str | Path] = (), allow_unsigned: bool = False) -> Package:
    """Open, check every byte and cross-check a package (see the module docstring). ``trust``: public key files
    or fingerprints trusted besides the user's own key and ``$DRIVEPACK_TRUST``; ``allow_unsigned`` accepts an
    unsigned package or one signed by a key not trusted here."""
    c = open_container(path)
    signer = check_signature(c, trust, allow_unsigned)  # before any section is interpreted
    m = parse_manifest(c.manifest, f"{c.path}: manifest")
    views, owned = {}, set()
    for em in m.entries:
        views[em.name], names = _load_entry(c, em, m.target_device, m.cpu_threads)
        owned |= names
    # every section is one an entry reads: bytes no check interprets have no place in the file
    stray = [n for n in c.index if n not in owned]
    if stray:
        raise PackageError(f"{c.path}: sections: expected only the sections of entries {list(views)}, got "
                           f"{len(stray)} more, first {stray[0]!r}")
    return Package(c, m, views, signature=signer)


def _check_abi(where: str, cb: CommandBuffer, abi: Abi) -> None:
    """The manifest's ABI names exactly the command buffer's inputs, outputs and states, each with its dtype and
    shape: a caller sizes its buffers from the ABI, the replay reads and writes the command buffer's."""
    for kind, specs, bufs in (("inputs", abi.inputs, cb.inputs), ("outputs", abi.outputs, cb.outputs),
                              ("states", abi.states, cb.states)):
        # one dtype under two spellings (the ABI's float8_e4m3fn is the compiler's fp8e4m3fn) is the same dtype
        want = {b.name: (dtypes.from_name(b.dtype).name, tuple(b.shape)) for b in bufs}
        got = {s.name: (dtypes.from_name(s.dtype).name, tuple(s.shape)) for s in specs}
        if got != want:  # names from the manifest may be of any JSON type: sort and show them as text
            differ = sorted({str(n) for n, _ in set(got.items()) ^ set(want.items())})
            raise PackageError(f"{where}.abi.{kind}: expected the cmdbuf's "
                               f"{', '.join(f'{n} {d} {s}' for n, (d, s) in sorted(want.items()))}, got "
                               f"{', '.join(f'{n} {d} {s}' for n, (d, s) in sorted(got.items(), key=str))} "
                               f"(differs in {differ})")


def read_package_abis(path: Path) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """Each entry's role and ABI (``abi.records.Abi.to_dict`` form), in the package's order: what ``abi-check``
    checks against the vehicle, entry by entry. Metadata only, nothing of it is compiled or run, so the signer
    need not be trusted (as for ``inspect``)."""
    pkg = load_package(path, allow_unsigned=True)
    return {name: (e.manifest.role, e.manifest.abi) for name, e in pkg.views.items()}


def read_package_abi(path: Path) -> Any:
    """The ABI stored in a single-entry package (the reader abi/load.py uses for ``.dpk``); a package of several
    entries is a PackageError listing them (``read_package_abis`` reads each)."""
    return load_package(path, allow_unsigned=True).abi
