"""The command buffer: a target-agnostic, plain-data description of one captured model run.

It holds everything a replay needs besides the weight bytes: the kernels (name, source, entry point, target,
compile flags), the dispatches in order (kernel id, global/local size, one binding per buffer parameter in
parameter order, then scalar arguments, and how many leading bindings the kernel writes: one, or each member's
output of a chain of small kernels run as one, jit/schedule/chains.py), and the buffer table (every binding with
its dtype, shape and byte size). Bindings are strings:

* ``input:<name>`` / ``output:<name>``: the caller's data, bound by name on every replay;
* ``weight:<id>``: constant bytes handed to the replay by id (``weights[id]``);
* ``state:<name>``: a buffer that persists across replays (initial bytes in ``weight:<init>``);
* ``arena:<offset>+<nbytes>``: intermediate bytes inside the one arena of ``arena_bytes``.

``zeroed`` (optional) lists arena bindings the replay fills with zeros once, when it is made, and whose bytes no
other arena binding shares (``validate`` checks it): a padded copy, whose producer writes only the interior on every
call while the zero border stays as it was made (jit/trace.py).

``aliases`` (optional) name outputs that no dispatch writes: each holds exactly the bytes of another output (its
``source``, same dtype and byte size, possibly another shape) after every call, and a replay hands the caller a copy
of them (a recurrent op's last state, which is also its one-step output sequence: no copy kernel on the device).

``segments`` (optional) mark runs of dispatches whose lanes may run concurrently, one thread each; no dispatch
of one lane touches bytes another lane of its segment writes (``validate`` checks it), so a replay that ignores
them and runs every dispatch in order computes the same results.

Serialised as canonical JSON (sorted keys, no whitespace): ``CommandBuffer.from_bytes(cb.to_bytes()) == cb``
and ``from_bytes(b).to_bytes() == b`` for every ``b`` this module wrote. Nothing is pickled or evaluated; a
document of another format or version is refused with a CmdbufError naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from jit.common.dtype import dtypes
from jit.common.errors import DrivepackError, DTypeError
from jit.common.json_limits import bounded_json
from targets.index_ranges import IndexRangeError, check_extents, check_kernel_text
from targets.kernel_params import KernelParamsError, check_kernel

FORMAT = "drivepack-cmdbuf"
VERSION = 1
BINDING_KINDS = ("input", "output", "weight", "state", "arena")
MAX_LANES = 64  # lanes of one segment; the driver's code grows with them
# bounds proven before a replay allocates anything (a crafted arena_bytes of 2**40 would ask for 1 TiB)
MAX_BUFFER_BYTES = 1 << 32  # one buffer, and the arena
MAX_RANK = 16
MAX_ALIGNMENT = 1 << 16
MAX_LAUNCH = 1 << 32  # work-items of one dispatch (a CPU replay loops over them)


class CmdbufError(DrivepackError, ValueError):
    """A command buffer that is malformed, of another version, or inconsistent (names the field)."""


@dataclass(frozen=True)
class KernelSpec:
    """One kernel's source and how to build it. ``name`` is unique in a command buffer."""

    name: str
    source: str
    entry: str
    target: str
    flags: str = ""


@dataclass(frozen=True)
class Scalar:
    """A scalar kernel argument: the raw bits of a value of ``dtype`` (exact for floats, NaN included)."""

    dtype: str
    bits: int


@dataclass(frozen=True)
class Dispatch:
    """One kernel launch. ``bindings`` follow the kernel's buffer parameters in order; ``scalars`` follow them.
    The kernel writes ``bindings[:writes]`` and only reads the rest."""

    kernel: int
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    bindings: tuple[str, ...]
    scalars: tuple[Scalar, ...] = ()
    writes: int = 1

    @property
    def written(self) -> tuple[str, ...]:
        return self.bindings[:self.writes]


@dataclass(frozen=True)
class Segment:
    """Dispatches ``start .. start + len(lanes) - 1`` run as concurrent lanes: ``lanes[i]`` is the lane of
    dispatch ``start + i``; each lane runs its dispatches in order. Running them all in order is also correct."""

    start: int
    lanes: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + len(self.lanes)


@dataclass(frozen=True)
class Alias:
    """Output ``binding`` holds the bytes of output ``source`` after every call; no dispatch binds it."""

    binding: str
    source: str


@dataclass(frozen=True)
class BufferSpec:
    """One entry of the buffer table. ``init`` (states only) is the weight id holding the initial bytes;
    ``image`` (float32 weights only) is (height, width) in RGBA float texels when kernels read the weight as an
    image2d_t (element i is component i % 4 of texel i // 4, texels row-major, zero-padded to fill the image)."""

    binding: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    init: int | None = None
    image: tuple[int, int] | None = None

    @property
    def kind(self) -> str:
        return self.binding.split(":", 1)[0]

    @property
    def name(self) -> str:
        return self.binding.split(":", 1)[1]

    @property
    def arena_offset(self) -> int:
        """The byte offset of an ``arena:<offset>+<nbytes>`` binding."""
        return parse_arena(self.binding)[0]


def arena_binding(offset: int, nbytes: int) -> str:
    return f"arena:{offset}+{nbytes}"


def parse_arena(binding: str) -> tuple[int, int]:
    """(offset, nbytes) of an arena binding; CmdbufError for anything else."""
    kind, _, rest = binding.partition(":")
    off, plus, size = rest.partition("+")
    if kind != "arena" or not plus or not off.isdigit() or not size.isdigit():
        raise CmdbufError(f"binding: expected arena:<offset>+<nbytes>, got {binding!r}")
    return int(off), int(size)


MAX_IDENTIFIER = 1024  # characters of a kernel entry point (a generated name holds every dim of a rank-16 kernel)


def check_identifier(value: str, where: str) -> None:
    """CmdbufError unless ``value`` is a plain C identifier ([A-Za-z_][A-Za-z0-9_]*, at most MAX_IDENTIFIER
    characters): a CPU replay writes entry points into the C driver it compiles (targets/replay_cpu.py)."""
    if not (value.isascii() and value.isidentifier() and len(value) <= MAX_IDENTIFIER):
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise CmdbufError(f"{where}: expected a C identifier [A-Za-z_][A-Za-z0-9_]* of at most {MAX_IDENTIFIER} "
                          f"characters, got {shown!r}")


def dtype_itemsize(name: str, where: str) -> int:
    try:
        return dtypes.from_name(name).itemsize
    except DTypeError:
        raise CmdbufError(f"{where}: dtype expected a drivepack dtype name, got {name!r}") from None


@dataclass(frozen=True)
class CommandBuffer:
    """A captured run: kernels, ordered dispatches, buffer table and arena size (see the module docstring)."""

    target: str
    kernels: tuple[KernelSpec, ...]
    dispatches: tuple[Dispatch, ...]
    buffers: tuple[BufferSpec, ...]
    arena_bytes: int
    alignment: int
    meta: dict[str, int | str] = field(default_factory=dict)
    segments: tuple[Segment, ...] = ()
    zeroed: tuple[str, ...] = ()
    aliases: tuple[Alias, ...] = ()

    def __post_init__(self) -> None:
        self.validate()

    # --- views of the buffer table ----------------------------------------------------------------------
    def of_kind(self, kind: str) -> list[BufferSpec]:
        return [b for b in self.buffers if b.kind == kind]

    @property
    def inputs(self) -> list[BufferSpec]:
        return self.of_kind("input")

    @property
    def outputs(self) -> list[BufferSpec]:
        return self.of_kind("output")

    @property
    def computed_outputs(self) -> list[BufferSpec]:
        """The outputs a dispatch writes: every output but the aliases, in table order."""
        aliased = {a.binding for a in self.aliases}
        return [b for b in self.outputs if b.binding not in aliased]

    @property
    def states(self) -> list[BufferSpec]:
        return self.of_kind("state")

    @property
    def weights(self) -> list[BufferSpec]:
        return self.of_kind("weight")

    def buffer(self, binding: str) -> BufferSpec:
        for b in self.buffers:
            if b.binding == binding:
                return b
        raise CmdbufError(f"binding: expected one of the buffer table, got {binding!r}")

    # --- consistency ------------------------------------------------------------------------------------
    def validate(self) -> None:
        """CmdbufError unless every reference resolves (kernel ids, bindings, arena ranges, byte sizes) and every
        dispatch's kernel accesses only bytes of the buffers bound to it (targets/index_ranges.py)."""
        if not 1 <= self.alignment <= MAX_ALIGNMENT or self.alignment & (self.alignment - 1):
            raise CmdbufError(f"alignment: expected a power of two <= MAX_ALIGNMENT = {MAX_ALIGNMENT}, got "
                              f"{self.alignment}")
        if not 0 <= self.arena_bytes <= MAX_BUFFER_BYTES:
            raise CmdbufError(f"arena_bytes: expected 0..MAX_BUFFER_BYTES = {MAX_BUFFER_BYTES}, got "
                              f"{self.arena_bytes}")
        names = [k.name for k in self.kernels]
        if len(set(names)) != len(names):
            raise CmdbufError(f"kernels: names expected unique, got {sorted(n for n in names if names.count(n) > 1)}")
        for k in self.kernels:
            check_identifier(k.entry, f"kernel {k.name}: entry")
        table: dict[str, BufferSpec] = {}
        for b in self.buffers:
            _check_buffer(b, self)
            if b.binding in table:
                raise CmdbufError(f"buffers: binding expected unique, got {b.binding!r} twice")
            table[b.binding] = b
        for b in self.buffers:
            if b.init is not None and b.kind != "state":
                raise CmdbufError(f"{b.binding}: init expected null (only states have initial bytes), got {b.init}")
        for b in self.states:
            init = table.get(f"weight:{b.init}")
            if b.init is None or init is None:
                raise CmdbufError(f"{b.binding}: init expected a weight id of the table, got {b.init}")
            if init.nbytes != b.nbytes:  # the replay copies the weight into the state buffer
                raise CmdbufError(f"{b.binding}: init expected a weight of the state's {b.nbytes} bytes, got "
                                  f"weight:{b.init} of {init.nbytes}")
        written: set[str] = set()
        for i, d in enumerate(self.dispatches):
            where = f"dispatches[{i}]"
            if not 0 <= d.kernel < len(self.kernels):
                raise CmdbufError(f"{where}.kernel: expected 0..{len(self.kernels) - 1}, got {d.kernel}")
            if not 1 <= len(d.global_size) <= 3 or any(not isinstance(g, int) or g < 1 for g in d.global_size) \
                    or math.prod(d.global_size) > MAX_LAUNCH:
                raise CmdbufError(f"{where}.global_size: expected positive sizes (1..3 of them, at most MAX_LAUNCH "
                                  f"= {MAX_LAUNCH} work-items), got {d.global_size}")
            if d.local_size is not None and (len(d.local_size) != len(d.global_size) or any(
                    not isinstance(n, int) or n < 1 for n in d.local_size)):
                raise CmdbufError(f"{where}.local_size: expected {len(d.global_size)} positive sizes, got "
                                  f"{d.local_size}")
            for bind in d.bindings:
                if bind not in table:
                    raise CmdbufError(f"{where}.bindings: expected entries of the buffer table, got {bind!r}")
            for s in d.scalars:
                dtype_itemsize(s.dtype, f"{where}.scalars")
            if d.bindings and not 1 <= d.writes <= len(d.bindings):
                raise CmdbufError(f"{where}.writes: expected 1..{len(d.bindings)} (its bindings), got {d.writes}")
            for j, bind in enumerate(d.written):
                if table[bind].kind in ("input", "weight"):
                    which = "the written buffer" if d.writes == 1 else "a written buffer"
                    raise CmdbufError(f"{where}.bindings[{j}]: expected {which} (an output, state or arena binding; "
                                      f"inputs and weights are read-only), got {bind!r}")
                written.add(bind)
            k = self.kernels[d.kernel]
            if k.source:  # a package's cmdbuf section carries none: checked again once the sources are in
                try:
                    check_kernel(k.source, k.entry, [(b, table[b].image is not None) for b in d.bindings],
                                 len(d.scalars), f"{where} (kernel {k.name})", d.writes, self.zeroed)
                    check_extents(k.source, k.entry, d.global_size, d.local_size,
                                  [(b, table[b].nbytes, table[b].image) for b in d.bindings],
                                  [(s.dtype, s.bits) for s in d.scalars], f"{where} (kernel {k.name})")
                except (KernelParamsError, IndexRangeError) as e:
                    raise CmdbufError(str(e)) from None
        dispatched = {d.kernel for d in self.dispatches}
        for j, k in enumerate(self.kernels):
            if k.source and j not in dispatched:  # built into the same file as the others: in the grammar too
                try:
                    check_kernel_text(k.source, k.entry, f"kernel {k.name}")
                except IndexRangeError as e:
                    raise CmdbufError(str(e)) from None
        _check_aliases(self, table)
        for b in self.computed_outputs + self.states:
            if b.nbytes and b.binding not in written:
                raise CmdbufError(f"{b.binding}: expected a dispatch writing it, got none")
        arena_end = max((parse_arena(b.binding)[0] + b.nbytes for b in self.of_kind("arena")), default=0)
        if self.arena_bytes != -(-arena_end // self.alignment) * self.alignment:
            raise CmdbufError(f"arena_bytes: expected {-(-arena_end // self.alignment) * self.alignment} (the end "
                              f"of the last arena binding, aligned), got {self.arena_bytes}")
        _check_arena_lifetimes(self)
        _check_zeroed(self, table)
        end = 0
        for j, seg in enumerate(self.segments):
            _check_segment(self, seg, f"segments[{j}]", end)
            end = seg.end

    # --- bytes ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "target": self.target, "arena_bytes": self.arena_bytes,
            "alignment": self.alignment, "meta": dict(self.meta),
            "kernels": [{"name": k.name, "source": k.source, "entry": k.entry, "target": k.target, "flags": k.flags}
                        for k in self.kernels],
            "dispatches": [{"kernel": d.kernel, "global_size": list(d.global_size),
                            "local_size": None if d.local_size is None else list(d.local_size),
                            "bindings": list(d.bindings),
                            "scalars": [{"dtype": s.dtype, "bits": s.bits} for s in d.scalars]}
                           | ({"writes": d.writes} if d.writes != 1 else {})  # written only where not one
                           for d in self.dispatches],
            "buffers": [{"binding": b.binding, "dtype": b.dtype, "shape": list(b.shape), "nbytes": b.nbytes,
                         "init": b.init, "image": None if b.image is None else list(b.image)} for b in self.buffers],
        } | ({"segments": [{"start": s.start, "lanes": list(s.lanes)} for s in self.segments]} if self.segments
             else {}) | ({"zeroed": list(self.zeroed)} if self.zeroed else {}) | (  # written only when present
            {"aliases": [{"binding": a.binding, "source": a.source} for a in self.aliases]} if self.aliases else {})

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode()

    @staticmethod
    def from_dict(doc: Any) -> CommandBuffer:
        root = _Reader(doc, "cmdbuf")
        fmt = root.get("format", str)
        if fmt != FORMAT:
            raise CmdbufError(f"cmdbuf.format: expected {FORMAT!r}, got {fmt!r}")
        version = root.get("version", int)
        if version != VERSION:
            raise CmdbufError(f"cmdbuf.version: expected {VERSION}, got {version} (this drivepack reads version "
                              f"{VERSION} only)")
        meta = root.get("meta", dict)
        for k, v in meta.items():
            if not isinstance(v, (int, str)) or isinstance(v, bool):
                raise CmdbufError(f"cmdbuf.meta.{k}: expected an int or a string, got {type(v).__name__}")
        kernels = tuple(KernelSpec(r.get("name", str), r.get("source", str), r.get("entry", str),
                                   r.get("target", str), r.get("flags", str))
                        for r in root.items("kernels"))
        dispatches = tuple(
            Dispatch(r.get("kernel", int), r.ints("global_size"),
                     None if r.raw("local_size") is None else r.ints("local_size"),
                     tuple(r.strs("bindings")),
                     tuple(Scalar(s.get("dtype", str), s.get("bits", int)) for s in r.items("scalars")),
                     r.get("writes", int) if "writes" in r.obj else 1)
            for r in root.items("dispatches"))
        buffers = tuple(BufferSpec(r.get("binding", str), r.get("dtype", str), r.ints("shape"), r.get("nbytes", int),
                                   None if r.raw("init") is None else r.get("init", int),
                                   None if r.raw("image") is None else r.ints("image"))
                        for r in root.items("buffers"))
        segments = tuple(Segment(r.get("start", int), r.ints("lanes"))
                         for r in (root.items("segments") if "segments" in root.obj else ()))
        zeroed = tuple(root.strs("zeroed")) if "zeroed" in root.obj else ()
        aliases = tuple(Alias(r.get("binding", str), r.get("source", str))
                        for r in (root.items("aliases") if "aliases" in root.obj else ()))
        return CommandBuffer(root.get("target", str), kernels, dispatches, buffers, root.get("arena_bytes", int),
                             root.get("alignment", int), dict(meta), segments, zeroed, aliases)

    @staticmethod
    def from_bytes(data: bytes) -> CommandBuffer:
        return CommandBuffer.from_dict(bounded_json(bytes(data), "cmdbuf", CmdbufError))


def _check_buffer(b: BufferSpec, cb: CommandBuffer) -> None:
    kind, sep, name = b.binding.partition(":")
    if kind not in BINDING_KINDS or not sep or not name:
        raise CmdbufError(f"buffers: binding expected <{'|'.join(BINDING_KINDS)}>:<name>, got {b.binding!r}")
    if len(b.shape) > MAX_RANK or any(not isinstance(s, int) or s < 0 for s in b.shape):
        raise CmdbufError(f"{b.binding}: shape expected at most MAX_RANK = {MAX_RANK} non-negative sizes, got "
                          f"{b.shape}")
    want = math.prod(b.shape) * dtype_itemsize(b.dtype, b.binding)
    if want > MAX_BUFFER_BYTES:
        raise CmdbufError(f"{b.binding}: nbytes expected <= MAX_BUFFER_BYTES = {MAX_BUFFER_BYTES}, got {want} "
                          f"({b.dtype} {b.shape})")
    if b.nbytes != want:
        raise CmdbufError(f"{b.binding}: nbytes expected {want} ({b.dtype} {b.shape}), got {b.nbytes}")
    if kind == "weight" and not name.isdigit():
        raise CmdbufError(f"{b.binding}: weight id expected a non-negative integer, got {name!r}")
    if b.image is not None:
        if kind != "weight" or b.dtype != "float32":
            raise CmdbufError(f"{b.binding}: image expected only on float32 weights, got a {b.dtype} {kind}")
        if len(b.image) != 2 or min(b.image) < 1 or b.image[0] * b.image[1] * 16 < b.nbytes:
            raise CmdbufError(f"{b.binding}: image expected (height, width) texels holding {b.nbytes} bytes, "
                              f"got {b.image}")
    if kind == "arena":
        off, size = parse_arena(b.binding)
        if size != b.nbytes:
            raise CmdbufError(f"{b.binding}: nbytes expected {size} (the binding's), got {b.nbytes}")
        if off % cb.alignment:
            raise CmdbufError(f"{b.binding}: offset expected a multiple of {cb.alignment}, got {off}")
        if off + size > cb.arena_bytes:
            raise CmdbufError(f"{b.binding}: end expected <= arena_bytes {cb.arena_bytes}, got {off + size}")


def _check_arena_lifetimes(cb: CommandBuffer) -> None:
    """CmdbufError if a dispatch writes arena bytes that hold a value still to be read: a value lives from the
    dispatch writing its binding to the last dispatch reading it before the binding is written again, and no
    other binding overlapping its bytes may be written in between (nor by a dispatch reading it). The values a
    dispatch writes (several for a chain) live at once: none may overlap another."""
    last_read: dict[tuple[int, str], int] = {}  # (dispatch, binding it wrote) -> the last dispatch reading that value
    writer: dict[str, int] = {}  # arena binding -> the dispatch that wrote its current value
    for i, d in enumerate(cb.dispatches):
        for b in d.bindings[d.writes:]:
            if b in writer:
                last_read[writer[b], b] = i
        for b in d.written:
            if b.startswith("arena:"):
                writer[b] = i
    live: dict[str, int] = {}  # arena binding -> the last dispatch reading its current value
    for i, d in enumerate(cb.dispatches):
        live = {b: last for b, last in live.items() if last >= i}
        for j, out in enumerate(d.written):
            if not out.startswith("arena:"):
                continue
            for b, last in live.items():
                if b != out and _same_bytes(b, out):
                    raise CmdbufError(f"dispatches[{i}].bindings[{j}]: expected arena bytes no live buffer holds, "
                                      f"got {out} overlapping {b} (read until dispatches[{last}])")
            live[out] = last_read.get((i, out), i)


def _check_zeroed(cb: CommandBuffer, table: dict[str, BufferSpec]) -> None:
    """CmdbufError unless every zeroed binding is an arena binding of the table, listed once, whose bytes no other
    arena binding overlaps: a value placed there would overwrite zeros the replay writes only once."""
    for j, z in enumerate(cb.zeroed):
        if z not in table or table[z].kind != "arena":
            raise CmdbufError(f"zeroed[{j}]: expected an arena binding of the buffer table, got {z!r}")
        if cb.zeroed.index(z) != j:
            raise CmdbufError(f"zeroed[{j}]: expected each binding once, got {z!r} again")
        for b in cb.of_kind("arena"):
            if b.binding != z and _same_bytes(b.binding, z):
                raise CmdbufError(f"zeroed[{j}]: expected bytes no other arena binding holds, got {z} overlapping "
                                  f"{b.binding}")


def _check_aliases(cb: CommandBuffer, table: dict[str, BufferSpec]) -> None:
    """CmdbufError unless every alias is an output of the table, listed once, that no dispatch binds, whose source is
    another output a dispatch computes, of the same dtype and byte size."""
    bound = {b for d in cb.dispatches for b in d.bindings}
    aliased = [a.binding for a in cb.aliases]
    for j, a in enumerate(cb.aliases):
        where = f"aliases[{j}]"
        if a.binding not in table or table[a.binding].kind != "output":
            raise CmdbufError(f"{where}.binding: expected an output binding of the buffer table, got {a.binding!r}")
        if aliased.index(a.binding) != j:
            raise CmdbufError(f"{where}.binding: expected each output once, got {a.binding!r} again")
        if a.binding in bound:
            raise CmdbufError(f"{where}.binding: expected an output no dispatch binds, got {a.binding!r} bound")
        if a.source not in table or table[a.source].kind != "output" or a.source in aliased:
            raise CmdbufError(f"{where}.source: expected an output binding a dispatch computes, got {a.source!r}")
        alias, source = table[a.binding], table[a.source]
        if (alias.dtype, alias.nbytes) != (source.dtype, source.nbytes):
            raise CmdbufError(f"{where}.source: expected {alias.dtype} of {alias.nbytes} bytes (the alias's), got "
                              f"{source.dtype} of {source.nbytes} bytes")


def _check_segment(cb: CommandBuffer, seg: Segment, where: str, prev_end: int) -> None:
    if seg.start < prev_end:
        raise CmdbufError(f"{where}.start: expected >= {prev_end} (segments in order, disjoint), got {seg.start}")
    if seg.end > len(cb.dispatches):
        raise CmdbufError(f"{where}: end expected <= {len(cb.dispatches)} dispatches, got {seg.end}")
    n_lanes = len(set(seg.lanes))
    if not 2 <= n_lanes <= MAX_LANES or set(seg.lanes) != set(range(n_lanes)):
        raise CmdbufError(f"{where}.lanes: expected every lane 0..L-1 used, 2 <= L <= {MAX_LANES}, got lanes "
                          f"{sorted(set(seg.lanes))}")
    touched: list[dict[str, bool]] = [{} for _ in range(n_lanes)]  # binding -> written, per lane
    for lane, d in zip(seg.lanes, cb.dispatches[seg.start:seg.end], strict=True):
        for k, b in enumerate(d.bindings):
            touched[lane][b] = touched[lane].get(b, False) or k < d.writes
    for a in range(n_lanes):
        for b in range(a + 1, n_lanes):
            for x, wx in touched[a].items():
                for y, wy in touched[b].items():
                    if (wx or wy) and _same_bytes(x, y):
                        raise CmdbufError(f"{where}.lanes: lanes {a} and {b} expected disjoint bytes where one "
                                          f"writes, got {x} ({'written' if wx else 'read'}) in lane {a} and {y} "
                                          f"({'written' if wy else 'read'}) in lane {b}")


def _same_bytes(x: str, y: str) -> bool:
    if x.startswith("arena:") and y.startswith("arena:"):
        (ox, nx), (oy, ny) = parse_arena(x), parse_arena(y)
        return ox < oy + ny and oy < ox + nx
    return x == y


class _Reader:
    """Typed access to one JSON object; every error names the path of the field."""

    def __init__(self, obj: Any, where: str) -> None:
        if not isinstance(obj, dict):
            raise CmdbufError(f"{where}: expected an object, got {type(obj).__name__}")
        self.obj, self.where = obj, where

    def raw(self, key: str) -> Any:
        if key not in self.obj:
            raise CmdbufError(f"{self.where}.{key}: expected a value, got none")
        return self.obj[key]

    def get(self, key: str, typ: type) -> Any:
        v = self.raw(key)
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise CmdbufError(f"{self.where}.{key}: expected {typ.__name__}, got {type(v).__name__}")
        return v

    def ints(self, key: str) -> tuple[int, ...]:
        v = self.get(key, list)
        if any(not isinstance(x, int) or isinstance(x, bool) for x in v):
            raise CmdbufError(f"{self.where}.{key}: expected a list of int, got {v!r}")
        return tuple(v)

    def strs(self, key: str) -> list[str]:
        v = self.get(key, list)
        if any(not isinstance(x, str) for x in v):
            raise CmdbufError(f"{self.where}.{key}: expected a list of str, got {v!r}")
        return v

    def items(self, key: str) -> list[_Reader]:
        return [_Reader(x, f"{self.where}.{key}[{i}]") for i, x in enumerate(self.get(key, list))]
