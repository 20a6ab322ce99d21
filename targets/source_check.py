"""Kernel sources and flags of an untrusted command buffer, checked against what drivepack's renderers emit.

A package's kernels are text that the runtime hands to a compiler (the system C compiler, an OpenCL driver). Even
a signed or ``--allow-unsigned`` package may not steer that compiler: its recorded flags must be the target's own
(``check_flags``), and every source must have the shape the C-style renderer (targets/cstyle) gives it
(``check_source``): the dialect's fixed prelude (its includes or extension pragmas, then helpers inside
``#ifndef`` guards: vector typedefs, the OpenMP team-size variable, integer power, the image read, scatter and
min/max), then exactly one kernel named the command buffer's entry, whose body has no preprocessor line but the
renderer's loop pragmas.
Anything else is refused before anything is compiled: other ``#`` lines, ``asm``, ``_Pragma``, attributes other
than a vector typedef's ``vector_size``, storage classes (``extern``, ``static``), another top-level definition,
string or character literals, comments, backslashes, digraphs, reserved identifiers the renderer never writes,
and calls to functions outside the renderer's vocabulary (math, vector and work-item built-ins, its helpers).
What this closes is the compiler and the loader: nothing runs at build or load time, no file is included, no
symbol outside the kernel is defined. It is no sandbox for a kernel's body, which runs with the process's rights
when dispatched: that the code is what its signer built is the signature's job (packager/signing.py).

This module imports no renderer: the templates below mirror targets/cstyle and the target declarations
(targets/cpu.py, targets/opencl.py), and tests/targets/test_source_check.py checks every kernel the renderers
emit for the sample models and the ONNX conformance cases against it.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from targets.cmdbuf import CommandBuffer, KernelSpec
from targets.cpu_runtime import OMP_THREADS_SETUP
from targets.minmax import HELPER_TEXTS as MINMAX_HELPER_TEXTS
from targets.opencl_runtime import IMAGE_HELPER
from targets.replay import ReplayError
from targets.scatter import HELPER_TEXTS

C, OPENCL = "C", "OPENCL"
DIALECTS = (C, OPENCL)
EXCERPT = 80  # characters of an offending line quoted in an error

# the headers each dialect's target declares (CStyleLanguage.headers)
HEADERS = {C: frozenset({"#include <math.h>", "#include <stdint.h>"}),
           OPENCL: frozenset({"#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
                              "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"})}
# C integer types a helper may be written for, by dialect (the targets' type names)
_C_INTS = ("signed char", "unsigned char", "short", "unsigned short", "int", "unsigned int", "long long",
           "unsigned long long", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
           "uint64_t", "char", "uchar", "ushort", "uint", "long", "ulong")
_C_LANES = (*_C_INTS, "_Bool", "_Float16", "float", "double", "half")
# loop pragmas a kernel body may hold (CPU_LANGUAGE.parallel_for, OPENCL_LANGUAGE.unroll_hint)
BODY_PRAGMAS = {C: re.compile(r"#pragma omp parallel for collapse\([1-9]\) num_threads\(dp_omp_threads\) "
                              r"schedule\(static\)"),
                OPENCL: re.compile(r"#pragma unroll")}
KERNEL_PREFIX = {C: "void", OPENCL: "__kernel void"}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
# each identifier, with what follows it when that opens a call: _IDENT's words and _CALL's names in one scan
_WORD_OR_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\s*\()?")
_VECTOR_TYPEDEF = re.compile(r"#ifndef (DP_[A-Z0-9_]+_T)\n#define \1\ntypedef ([a-z_A-Z0-9 ]+) (dp_[a-z0-9_]+) "
                             r"__attribute__\(\(vector_size\(([0-9]+)\)\)\);\n#endif")
_IPOW = re.compile(r"#ifndef (DP_IPOW_[A-Z0-9_]+)\n#define \1\n([a-z_A-Z0-9 ]+) (dp_ipow_[a-z0-9_]+)\(\2 b, \2 e\) "
                   r"\{\n(  if \(e < 0\) return b == 1 \? 1 : b == -1 \? \(\(e & 1\) \? -1 : 1\) : 0;\n)?"
                   r"  ([a-z_A-Z0-9 ]+) r = 1, x = \(\5\)b;\n  while \(e > 0\) \{ if \(e & 1\) r \*= x; x \*= x; "
                   r"e >>= 1; \}\n  return \(\2\)r;\n\}\n#endif")
# tokens no rendered kernel holds: they would hide text from this check or reach past the kernel
_FORBIDDEN_TEXT = (("\\", "a backslash"), ('"', "a string literal"), ("'", "a character literal"),
                   ("//", "a comment"), ("/*", "a comment"), ("??", "a trigraph"), ("%:", "a digraph"),
                   ("<%", "a digraph"), ("%>", "a digraph"), ("<:", "a digraph"), (":>", "a digraph"))
_FORBIDDEN_WORDS = frozenset({"asm", "__asm", "__asm__", "_Pragma", "__attribute", "__attribute__", "constructor",
                              "destructor", "extern", "static", "typedef", "register", "goto", "__thread",
                              "_Thread_local", "thread_local", "__extension__", "__label__", "__typeof__",
                              "typeof", "inline", "__inline", "__inline__", "_Noreturn", "_Alignas", "_Generic"})
# reserved identifiers (leading "__" or "_" + capital) the renderers write
_RESERVED_OK = frozenset({"_Bool", "_Float16", "__builtin_memcpy", "__builtin_shuffle", "__builtin_convertvector",
                          "__kernel", "__global", "__local", "__constant", "__private", "__read_only",
                          "__builtin_isnan", "__builtin_isinf", "__builtin_nanf", "__builtin_nan",
                          "__builtin_inff", "__builtin_inf", "__builtin_prefetch"})
_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt", "sin", "cos", "tan",
         "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "trunc",
         "floor", "ceil", "rint", "round", "nearbyint", "fabs", "fmod", "remainder", "pow", "powr", "fmax", "fmin",
         "fma", "copysign", "hypot", "ldexp", "frexp", "nan")
# functions a rendered kernel may call: C keywords that take parentheses, math, the dialects' built-ins
_CALLABLE = frozenset({"if", "for", "while", "switch", "return", "sizeof",
                       *_MATH, *(f"{m}f" for m in _MATH), "isnan", "isinf", "isfinite", "signbit",
                       "get_global_id", "get_local_id", "get_group_id", "get_local_size", "get_global_size",
                       "get_num_groups", "atomic_inc", "atomic_add", "barrier", "mem_fence", "select", "shuffle",
                       "shuffle2", "read_imagef", "mad", "clamp",
                       "max", "min", "dp_read_image", *(w for w in _RESERVED_OK if w.startswith("__builtin_"))})
_CALLABLE_PATTERN = re.compile(r"(vload|vstore)(2|3|4|8|16)|(as|convert)_[a-z]+(2|3|4|8|16)?(_rte|_rtz|_sat)*|"
                               r"dp_ipow_[a-z0-9_]+|dp_scatter_(float32|int32)x(4|8|16)|dp_(max|min)_float32x(4|8|16)")
_C_KEYWORDS = frozenset({"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
                         "enum", "float", "int", "long", "restrict", "short", "signed", "struct", "union",
                         "unsigned", "void", "volatile", "main", "system", "memcpy", "memset", "malloc", "free"})
_NOT_ENTRIES = _CALLABLE | _FORBIDDEN_WORDS | _C_KEYWORDS


class KernelSourceError(ReplayError):
    """A kernel source, entry or compile flags other than what drivepack's renderers and targets produce."""


def check_flags(kernel: KernelSpec, allowed: Collection[str]) -> None:
    """KernelSourceError unless the recorded flags are one of the target's own (the runtime compiles with those)."""
    if kernel.flags not in allowed:
        raise KernelSourceError(f"kernel {kernel.name}: flags expected {_one_of(allowed)} (the target's own), got "
                                f"{_excerpt(kernel.flags)!r}")


def check_kernels(cmdbuf: CommandBuffer, dialect: str, allowed_flags: Collection[str]) -> None:
    """Every kernel's flags, entry and source (``check_source``) checked before a replay compiles any of them."""
    for k in cmdbuf.kernels:
        check_flags(k, allowed_flags)
        check_source(k.source, k.entry, dialect, f"kernel {k.name}")


def check_source(source: str, entry: str, dialect: str, where: str = "kernel") -> None:
    """KernelSourceError unless ``source`` is the dialect's prelude followed by one kernel named ``entry``."""
    if dialect not in DIALECTS:
        raise KernelSourceError(f"{where}: dialect expected one of {list(DIALECTS)}, got {dialect!r}")
    if not (entry.isascii() and entry.isidentifier()) or entry.startswith("_") or entry in _NOT_ENTRIES:
        # a leading '_' or a library name could bind a symbol the linker or loader treats specially (_init)
        raise KernelSourceError(f"{where}: entry expected a C identifier not starting with '_' and naming no C "
                                f"keyword or library function, got {_excerpt(entry)!r}")
    lines = source.split("\n")
    # checked on the whole text first: only a source with something to refuse is walked line by line, to name it
    clean = _NOT_PRINTABLE.search(source) is None and not any(text in source for text, _ in _FORBIDDEN_TEXT)
    for n, line in enumerate(() if clean else lines, 1):
        bad = next((c for c in line if not " " <= c <= "~"), None)
        if bad is not None:
            raise KernelSourceError(f"{where}: line {n}: expected printable ASCII, got {bad!r} in "
                                    f"{_excerpt(line)!r}")
        for text, what in _FORBIDDEN_TEXT:
            if text in line:
                raise KernelSourceError(f"{where}: line {n}: expected no {what} ({text!r}), got {_excerpt(line)!r}")
    n = _prelude_end(lines, dialect, where)
    _check_kernel(lines, n, entry, dialect, where)


def _prelude_end(lines: list[str], dialect: str, where: str) -> int:
    """The index of the first line after the prelude: headers, then guarded helper definitions."""
    n = 0
    while n < len(lines) and (lines[n] in HEADERS[dialect] or not lines[n]):  # no headers: the source opens blank
        n += 1
    while n < len(lines) and lines[n].startswith("#ifndef "):
        end = _guard_end(lines, n)
        if end is None:
            raise KernelSourceError(f"{where}: line {n + 1}: expected a guarded helper closed by #endif, got "
                                    f"{_excerpt(lines[n])!r} unclosed")
        block = "\n".join(lines[n:end + 1])
        if not _known_helper(block, dialect):
            raise KernelSourceError(f"{where}: line {n + 1}: expected one of the renderer's helpers (vector "
                                    f"typedef, OpenMP team size, integer power, image read, scatter, min/max), got "
                                    f"{_excerpt(' '.join(lines[n:end + 1]))!r}")
        n = end + 1
    return n


def _guard_end(lines: list[str], start: int) -> int | None:
    """The index of the ``#endif`` closing the ``#ifndef`` at ``start`` (a helper may hold an ``#if`` of its own)."""
    depth = 0
    for j in range(start, len(lines)):
        depth += lines[j].startswith("#if") - (lines[j] == "#endif")
        if depth == 0:
            return j
    return None


def _known_helper(block: str, dialect: str) -> bool:
    if block in HELPER_TEXTS[dialect] or (dialect == C and block in (OMP_THREADS_SETUP, *MINMAX_HELPER_TEXTS)):
        return True
    if dialect == OPENCL and block == IMAGE_HELPER:
        return True
    if (m := _VECTOR_TYPEDEF.fullmatch(block)) and dialect == C:
        guard, lane, name, nbytes = m.groups()
        return guard == f"{name.upper()}_T" and lane in _C_LANES and nbytes in ("2", "4", "8", "16", "32", "64")
    if m := _IPOW.fullmatch(block):
        guard, t, name, _, ut = m.groups()
        return guard == name.upper() and name == f"dp_ipow_{t.replace(' ', '_')}" and t in _C_INTS and \
            ut in _C_INTS
    return False


def _check_kernel(lines: list[str], start: int, entry: str, dialect: str, where: str) -> None:
    """Lines ``start..`` hold exactly one kernel, ``entry``, with a body of plain statements and loop pragmas."""
    if start >= len(lines):
        raise KernelSourceError(f"{where}: expected a kernel definition of entry {entry!r}, got none")
    sig = lines[start]
    prefix = f"{KERNEL_PREFIX[dialect]} {entry}("
    if not (sig.startswith(prefix) and sig.endswith(") {")):
        raise KernelSourceError(f"{where}: line {start + 1}: expected the kernel {prefix}...) {{ (or a prelude "
                                f"line of the renderer), got {_excerpt(sig)!r}")
    params = sig[len(prefix):-3]
    if not re.fullmatch(r"[A-Za-z0-9_ *,]*", params):
        raise KernelSourceError(f"{where}: line {start + 1}: parameters expected types and names, got "
                                f"{_excerpt(params)!r}")
    _check_words(params, start, where, sig)
    depth = 1
    statements: list[int] = []  # indices of the body's lines that are no pragma: their words are checked below
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if depth == 0:
            if line.strip():
                raise KernelSourceError(f"{where}: line {i + 1}: expected nothing after kernel {entry}, got "
                                        f"{_excerpt(line)!r}")
            continue
        if "#" in line:
            if not line.lstrip().startswith("#"):
                raise KernelSourceError(f"{where}: line {i + 1}: expected no '#' in a statement, got "
                                        f"{_excerpt(line)!r}")
            if not BODY_PRAGMAS[dialect].fullmatch(line.strip()):
                raise KernelSourceError(f"{where}: line {i + 1}: expected no preprocessor line but the renderer's "
                                        f"loop pragma, got {_excerpt(line)!r}")
            continue
        statements.append(i)
        if "{" in line or "}" in line:
            for m in _BRACE.finditer(line):
                depth += 1 if m.group() == "{" else -1
                if depth == 0 and line[m.end():].strip():
                    raise KernelSourceError(f"{where}: line {i + 1}: expected the body of kernel {entry} to end "
                                            f"the line (no other top-level definition), got {_excerpt(line)!r}")
    if depth:
        raise KernelSourceError(f"{where}: expected the body of kernel {entry} closed, got {depth} unclosed '{{'")
    _check_body_words(lines, statements, where)


def _check_body_words(lines: list[str], statements: list[int], where: str) -> None:
    """``_check_words`` on each of the body's ``statements`` (line indices), done once on their joined text: only
    where some word or call is refused are the lines checked one by one, for the error naming the line. A call
    whose name and parenthesis stand on two lines is refused too (the compiler reads it as a call)."""
    found = set(_WORD_OR_CALL.findall("\n".join(lines[i] for i in statements)))
    words, calls = {word for word, _ in found}, {word for word, paren in found if paren}
    if all(_word_allowed(w) for w in words) and all(_call_allowed(fn) for fn in calls):
        return
    for i in statements:
        _check_words(lines[i], i, where, lines[i])
    fn = next(fn for fn in sorted(calls) if not _call_allowed(fn))
    raise KernelSourceError(f"{where}: call expected a math, vector or work-item built-in or a renderer helper, got "
                            f"{fn}( split across lines")


_RESERVED_PREFIX = re.compile(r"_[A-Z]")


_BRACE = re.compile(r"[{}]")
_NOT_PRINTABLE = re.compile(r"[^\n -~]")


def _word_allowed(word: str) -> bool:
    return word not in _FORBIDDEN_WORDS and \
        (not (word.startswith("__") or _RESERVED_PREFIX.match(word)) or word in _RESERVED_OK)


def _call_allowed(fn: str) -> bool:
    return fn in _CALLABLE or _CALLABLE_PATTERN.fullmatch(fn) is not None


def _check_words(text: str, i: int, where: str, line: str) -> None:
    for m in _IDENT.finditer(text):
        word = m.group()
        if word in _FORBIDDEN_WORDS:
            raise KernelSourceError(f"{where}: line {i + 1}: expected no {word!r} (the renderer never writes it), "
                                    f"got {_excerpt(line)!r}")
        if not _word_allowed(word):
            raise KernelSourceError(f"{where}: line {i + 1}: expected no reserved identifier {word!r}, got "
                                    f"{_excerpt(line)!r}")
    for m in _CALL.finditer(text):
        fn = m.group(1)
        if not _call_allowed(fn):
            raise KernelSourceError(f"{where}: line {i + 1}: call expected a math, vector or work-item built-in "
                                    f"or a renderer helper, got {fn}( in {_excerpt(line)!r}")


def _one_of(allowed: Collection[str]) -> str:
    values = sorted(allowed)
    return repr(values[0]) if len(values) == 1 else f"one of {values}"


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[:EXCERPT - 3] + "..."
