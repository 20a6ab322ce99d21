"""Which dtypes a kernel computes natively and which it emulates, and why; per kernel and per model.

A dtype a kernel uses is emulated when it is listed in ``EMULATED_DTYPES`` (a run setting such as
``EMULATED_DTYPES=long,half``; it says nothing about the hardware) or when the target's
``supported_dtypes()`` lacks it. Only int64/uint64 (two 32-bit words) and float16, bfloat16 and the four
fp8 formats (float32 compute over integer storage) can be emulated; any other unsupported dtype is a
CompileError naming it. int64 and uint64 share one word layout, so emulating one emulates the other.

The policy is computed afresh for every kernel (nothing found in one kernel carries over to the next).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from jit.common.dtype import DTYPES_BY_NAME, FP8_DTYPES, DType, PtrDType, dtypes
from jit.common.errors import CompileError, DTypeError
from jit.ir.uop import UOp, toposort

LONG_DTYPES: frozenset[DType] = frozenset({dtypes.int64, dtypes.uint64})
FLOAT_EMULATED: frozenset[DType] = frozenset({dtypes.float16, dtypes.bfloat16, *FP8_DTYPES})
DECOMPOSABLE: frozenset[DType] = LONG_DTYPES | FLOAT_EMULATED
# what an emulation computes with: the target must have these natively
HELPER_DTYPES: frozenset[DType] = frozenset({dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32})
STORAGE: dict[DType, DType] = {dtypes.float16: dtypes.uint16, dtypes.bfloat16: dtypes.uint16,
                               **{d: dtypes.uint8 for d in FP8_DTYPES}, dtypes.int64: dtypes.uint32,
                               dtypes.uint64: dtypes.uint32}

REASON_SETTING = "EMULATED_DTYPES"
REASON_LONG_PAIR = "shares the 2×32-bit word layout with int64/uint64"

# names ml_dtypes and ONNX use, on top of drivepack's own dtype names
_EXTRA_NAMES: dict[str, DType] = {"float8_e4m3fn": dtypes.fp8e4m3fn, "float8_e5m2": dtypes.fp8e5m2,
                                  "float8_e4m3fnuz": dtypes.fp8e4m3fnuz, "float8_e5m2fnuz": dtypes.fp8e5m2fnuz,
                                  "fp16": dtypes.float16, "i64": dtypes.int64, "u64": dtypes.uint64}


def parse_emulated(setting: str) -> frozenset[DType]:
    """The dtypes named by an ``EMULATED_DTYPES`` value (comma separated, case-insensitive)."""
    out: set[DType] = set()
    for raw in str(setting).split(","):
        name = raw.strip().lower()
        if not name:
            continue
        d = DTYPES_BY_NAME.get(name) or _EXTRA_NAMES.get(name)
        if d is None or d not in DECOMPOSABLE:
            names = sorted({n for n, v in (DTYPES_BY_NAME | _EXTRA_NAMES).items() if v in DECOMPOSABLE})
            raise DTypeError(f"EMULATED_DTYPES: expected names among {names}, got {raw.strip()!r}")
        out.add(d)
    return frozenset(out)


def used_dtypes(sink: UOp) -> frozenset[DType]:
    """Every scalar dtype a kernel graph uses, pointer element types included."""
    out: set[DType] = {p.base for p in getattr(sink.arg, "params", ())}  # the signature, read or not
    for u in toposort([sink]):
        d = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
        if isinstance(d, DType) and d is not dtypes.void and d != dtypes.void:
            out.add(d)
    return frozenset(out)


@dataclass(frozen=True)
class DTypePolicy:
    """One kernel's dtype decisions: ``native`` dtypes, and ``emulated`` as (dtype, reason) pairs."""

    target: str
    native: tuple[DType, ...] = ()
    emulated: tuple[tuple[DType, str], ...] = ()

    @property
    def emulated_dtypes(self) -> frozenset[DType]:
        return frozenset(d for d, _ in self.emulated)

    def emulates(self, d: object) -> bool:
        return isinstance(d, DType) and d in self.emulated_dtypes

    @property
    def long_emulated(self) -> bool:
        return bool(self.emulated_dtypes & LONG_DTYPES)

    @property
    def float_emulated(self) -> frozenset[DType]:
        return self.emulated_dtypes & FLOAT_EMULATED

    def debug_lines(self) -> list[str]:
        """The DEBUG=2 lines: one per emulated family (``emulating long as 2×int32`` at most once)."""
        reasons = dict(self.emulated)
        lines = []
        if self.long_emulated:
            why = sorted({reasons[d] for d in LONG_DTYPES if d in reasons})
            lines.append(f"emulating long as 2×int32 ({'; '.join(why)})")
        for d in sorted(self.float_emulated):
            lines.append(f"emulating {d.name} as float32 over {STORAGE[d].name} bits ({reasons[d]})")
        return lines

    def as_dict(self) -> dict[str, object]:
        return {"target": self.target, "native": [d.name for d in self.native],
                "emulated": {d.name: why for d, why in self.emulated}}


def decide_policy(sink: UOp, target_name: str, supported: Iterable[DType], setting: str) -> DTypePolicy:
    """The policy for one kernel graph (weak dtypes already lowered) on a target declaring ``supported``."""
    used = used_dtypes(sink)
    supported = frozenset(supported)
    requested = parse_emulated(setting)
    emulated: dict[DType, str] = {}
    for d in sorted(used):
        if d.weak:
            raise CompileError(f"dtype policy: expected concrete dtypes after weak lowering, got {d.name}")
        if d in requested:
            emulated[d] = REASON_SETTING
        elif d not in supported:
            if d not in DECOMPOSABLE:
                raise CompileError(f"dtype policy: {d.name} is not supported by target {target_name} "
                                   f"(supports {sorted(x.name for x in supported)}) and has no emulation")
            emulated[d] = f"unsupported by target {target_name}"
    if emulated.keys() & LONG_DTYPES:
        for d in sorted(LONG_DTYPES & used):
            emulated.setdefault(d, REASON_LONG_PAIR)
    if emulated:
        need = HELPER_DTYPES | {STORAGE[d] for d in emulated}
        missing = sorted(d.name for d in need - supported)
        if missing:
            raise CompileError(f"dtype policy: emulating {sorted(d.name for d in emulated)} needs {missing}, "
                               f"which target {target_name} does not support")
    native = tuple(sorted(used - emulated.keys()))
    return DTypePolicy(target_name, native, tuple(sorted(emulated.items())))


@dataclass
class ModelDTypeReport:
    """A model's dtype decisions over its kernels: for each dtype, where it ran natively and where emulated."""

    target: str
    native_in: dict[str, list[str]] = field(default_factory=dict)  # dtype name -> kernel names
    emulated_in: dict[str, list[str]] = field(default_factory=dict)
    reasons: dict[str, list[str]] = field(default_factory=dict)  # dtype name -> distinct reasons

    def as_dict(self) -> dict[str, object]:
        return {"target": self.target, "native": dict(self.native_in), "emulated": dict(self.emulated_in),
                "reasons": dict(self.reasons)}

    def summary(self) -> str:
        lines = [f"dtype policy on {self.target}:"]
        for name in sorted(set(self.native_in) | set(self.emulated_in)):
            nat, emu = self.native_in.get(name, []), self.emulated_in.get(name, [])
            text = f"  {name:12s} native in {len(nat)} kernel(s), emulated in {len(emu)}"
            if emu:
                text += f" ({'; '.join(self.reasons[name])})"
            lines.append(text)
        return "\n".join(lines)


def aggregate_policies(kernels: Iterable[tuple[str, DTypePolicy]]) -> ModelDTypeReport:
    """One report over (kernel name, policy) pairs."""
    items = list(kernels)
    report = ModelDTypeReport(items[0][1].target if items else "?")
    for name, policy in items:
        for d in policy.native:
            report.native_in.setdefault(d.name, []).append(name)
        for d, why in policy.emulated:
            report.emulated_in.setdefault(d.name, []).append(name)
            if why not in report.reasons.setdefault(d.name, []):
                report.reasons[d.name].append(why)
    return report
