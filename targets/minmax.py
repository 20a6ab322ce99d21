"""The float min/max helpers: the larger or smaller of two float32 vectors in one x86 instruction.

GCC's C vector extensions have no min or max, and a select is a compare and a blend: two instructions where x86's
``maxps``/``minps`` is one. Those compute exactly ``a > b ? a : b`` and ``a < b ? a : b`` lane by lane (``b``
where either is NaN or both are zeros), which is what the C renderer (targets/cstyle/vectors.py) spells with them:
a where of a comparison between the two values it picks (a ReLU's ``x < 0 ? 0 : x``) and a clamp to a constant
bound other than zero (for a zero bound, ``a <= 0 ? 0 : a`` gives +0.0 for a -0.0 ``a``, ``maxps(0, a)`` -0.0). The
exp lowering's two clamps and HardSwish's ``min(x, 6)`` are in every epilogue of EfficientNet and MobileNetV3.

``dp_max_float32x<n>(a, b)`` and ``dp_min_float32x<n>(a, b)`` for 4, 8 and 16 lanes, emitted by the C target
(targets/cpu.py) where the host has the instruction set. Compiled where it is missing (a package moved to such a
host), the helper computes the same lanes with a loop. The package checks accept exactly these texts
(targets/source_check.py; targets/index_parse.py, targets/index_calls.py evaluate the calls over intervals).
"""

from __future__ import annotations

MINMAX_LANES = (4, 8, 16)
# the instruction set each width needs, and GCC's built-ins for maxps/minps of that width (``{op}``: max, min)
_BUILTINS = {4: ("__SSE__", "__builtin_ia32_{op}ps(a, b)"), 8: ("__AVX__", "__builtin_ia32_{op}ps256(a, b)"),
             16: ("__AVX512F__", "__builtin_ia32_{op}ps512_mask(a, b, a, -1, 4)")}
_ORDER = {"max": ">", "min": "<"}


def helper_name(op: str, lanes: int) -> str:
    return f"dp_{op}_float32x{lanes}"


def _helper(op: str, lanes: int) -> str:
    fn, vt = helper_name(op, lanes), f"dp_float32x{lanes}"
    isa, builtin = _BUILTINS[lanes]
    return (f"#ifndef {fn.upper()}\n#define {fn.upper()}\n"
            f"static inline {vt} {fn}({vt} a, {vt} b) {{\n"
            f"#if defined({isa})\n  return {builtin.format(op=op)};\n#else\n"
            f"  for (int l = 0; l < {lanes}; l++) a[l] = a[l] {_ORDER[op]} b[l] ? a[l] : b[l];\n  return a;\n"
            f"#endif\n}}\n#endif")


def minmax_helpers(lanes: int) -> dict[str, str]:
    """The helpers' definitions for vectors of ``lanes`` lanes, by op (max, min); none for other lane counts."""
    return {op: _helper(op, lanes) for op in _ORDER} if lanes in MINMAX_LANES else {}


HELPER_TEXTS = frozenset(text for n in MINMAX_LANES for text in minmax_helpers(n).values())
# by helper name: max or min, and the lane count
MINMAX_CALLS = {helper_name(op, n): (op, n) for op in _ORDER for n in MINMAX_LANES}
