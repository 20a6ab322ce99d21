"""``vector_erf``: float32 ERF over vector lanes as a rational polynomial the vector units run, for a target whose
language has no vector libm (the CPU's C: ``erff`` takes one float, so a vector of them is one library call per
lane, and the exact GELU epilogue of a 1x1 conv then costs more than the conv's multiply-adds).

Before: a kernel graph after the optimizer, where a value depending on a RANGE of kind "vector" is a vector of
lanes. After (``pm_vector_erf``, run by ``jit.codegen.passes.vector_exp.lower_vector_exp``): every float32 ERF
depending on such a range is replaced by the arithmetic below, built from ops the renderer spells as whole vectors
(multiply-add, min/max, compare and select, one division); ERF elsewhere (scalars, other dtypes) is left to the
library.

The math (Eigen's and XLA's float ``erf``): ``x`` clamped to [-4, 4] (beyond, erf rounds to +-1 in float32),
``erf(x) = x P(x^2) / Q(x^2)`` with ``P`` of degree 6 and ``Q`` of degree 4. The rational function is within 7e-8
of erf on the clamped range; evaluated in float32 the result is within 5e-7 absolute and relative of the correctly
rounded erf (library ``erff``: 1 ulp). NaN stays NaN (the clamp's MAX and MIN are numpy's maximum and minimum,
which keep it, and the arithmetic after it too: no compare and select spent on it), +-inf give +-1, -0 stays -0.
"""

from __future__ import annotations

from jit.common.dtype import dtypes
from jit.ir.rewrite import PatternMatcher, UPat
from jit.ir.uop import Ops, UOp

F32 = dtypes.float32
# numerator x (A0 + A1 x^2 + ... + A6 x^12), denominator B0 + B1 x^2 + ... + B4 x^8
NUMERATOR = (-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05,
             -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10)
DENOMINATOR = (-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03, -2.13374055278905e-04,
               -1.45660718464996e-05)
CLAMP = 4.0


def _f(v: float) -> UOp:
    return UOp.const(F32, v)


def _alu(op: Ops, *src: UOp) -> UOp:
    return UOp(op, src[0].dtype, src)


def _horner(x2: UOp, coeffs: tuple[float, ...]) -> UOp:
    """``coeffs[0] + coeffs[1] x2 + ...`` by Horner's rule (highest degree first)."""
    acc = _f(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = _alu(Ops.ADD, _alu(Ops.MUL, acc, x2), _f(c))
    return acc


def vector_erf(x: UOp) -> UOp:
    """``erf(x)`` for float32 ``x`` as the module docstring's arithmetic."""
    clamped = _alu(Ops.MIN, _alu(Ops.MAX, x, _f(-CLAMP)), _f(CLAMP))
    x2 = _alu(Ops.MUL, clamped, clamped)
    return _alu(Ops.FDIV, _alu(Ops.MUL, clamped, _horner(x2, NUMERATOR)), _horner(x2, DENOMINATOR))


def _on_lanes(u: UOp) -> bool:
    return any(n.op is Ops.RANGE and n.arg[1] == "vector" for n in u.toposort())


pm_vector_erf = PatternMatcher([
    (UPat(Ops.ERF, dtype=F32, name="e"), lambda e: vector_erf(e.src[0]) if _on_lanes(e.src[0]) else None),
])
