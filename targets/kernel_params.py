"""What a command buffer's kernel source says about its buffers: its parameter list and which parameters it stores to.

The renderer (targets/cstyle/walk.py) names buffer parameter ``i`` ``data<i>``, in binding order, and stores only
through ``data0`` (the binding a dispatch writes, the first). A package's source is text from the file, so the
loader reads those facts back from it instead of trusting the dispatch: the parameter count must equal the
dispatch's binding count plus its scalars (else the driver passes too few pointers), not counting a parallel
kernel's trailing range parameters ``int dp_lo, int dp_hi``, which the launcher passes; an image parameter may only
be bound to a weight held as an image; and no statement may store through ``data<i>`` for ``i >= 1`` (a parameter a
dispatch may bind to a weight or an input). Anything that reads otherwise is a CmdbufError naming the kernel.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache

from jit.common.errors import DrivepackError
from targets import extents_cache


class KernelParamsError(DrivepackError, ValueError):
    """A kernel source whose signature or stores disagree with the command buffer (names the kernel)."""


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel's signature: its declaration text, and whether it is a buffer or an image."""

    text: str
    pointer: bool
    image: bool


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DATA = re.compile(r"data(\d+)")
_STORE_CALL = re.compile(r"\b(?:vstore\w*|__builtin_memcpy|memcpy|memmove|memset|write_image\w*)\s*\(")


def kernel_params(source: str, entry: str, where: str) -> list[Param]:
    """The parameters of the definition of ``entry`` in ``source``, in order."""
    text = _COMMENT.sub(" ", source)
    m = re.search(rf"\b{re.escape(entry)}\s*\(([^()]*)\)\s*\{{", text)
    if m is None:
        raise KernelParamsError(f"{where}: source expected a definition of {entry}(...) {{, got none")
    parts = [p.strip() for p in m.group(1).split(",")] if m.group(1).strip() else []
    return [Param(p, "*" in p, "image2d_t" in p) for p in parts]


RANGE_PARAMS = ("int dp_lo", "int dp_hi")


def has_range_params(params: list[Param]) -> bool:
    """Whether the last two parameters are a parallel kernel's range, ``int dp_lo, int dp_hi``
    (targets/cstyle/walk.py): the launcher passes them, a subrange of ``[0, global_size[0]]``, not the dispatch."""
    return tuple(" ".join(p.text.split()) for p in params[-2:]) == RANGE_PARAMS


def range_kernel(source: str, entry: str, where: str = "kernel") -> bool:
    """Whether ``entry`` of ``source`` takes the range parameters (see ``has_range_params``)."""
    return has_range_params(kernel_params(source, entry, where))


@lru_cache(maxsize=4096)  # a capture checks one kernel's source once per dispatch
def stored_params(source: str) -> frozenset[int]:
    """The indices ``i`` of every ``data<i>`` a statement of ``source`` may store through: left of an
    assignment, beside ``++``/``--``, or as the destination of a call that writes memory (vstore's last
    argument, memcpy/memset's and write_image's first); directly or through a pointer variable that was
    initialised or assigned from it (the renderer hoists ``float* ptr1 = data1+...`` out of loops)."""
    aliases: dict[str, set[int]] = {}  # pointer variable -> the parameters it may point into
    stored: set[int] = set()

    def params_in(text: str) -> set[int]:
        out: set[int] = set()
        for name in _IDENT.findall(text):
            m = _DATA.fullmatch(name)
            out |= {int(m.group(1))} if m else aliases.get(name, set())
        return out

    for stmt in re.split(r"[;{}]", _COMMENT.sub(" ", source)):
        assignments = _assignments(stmt)
        decl = _POINTER_DECL.search(stmt)
        if decl is not None and not assignments:
            aliases.setdefault(decl.group(1), set())  # declared now, assigned later
        for k in assignments:
            lhs = stmt[:k].rstrip("+-*/%&|^<>")
            decl = _POINTER_DECL.search(lhs)
            if decl is not None or lhs.strip() in aliases:  # a pointer (re)pointed, not a store
                name = decl.group(1) if decl is not None else lhs.strip()
                aliases[name] = aliases.get(name, set()) | params_in(stmt[k + 1:])
            else:
                stored |= params_in(lhs)
        if not any(_DATA.fullmatch(name) or aliases.get(name) for name in _IDENT.findall(stmt)):
            continue  # what follows only adds the parameters a name in the statement may point into: none
        for m in re.finditer(r"\+\+|--", stmt):
            stored |= params_in(_operand_before(stmt, m.start())) | params_in(_operand_after(stmt, m.end()))
        for call in _STORE_CALL.finditer(stmt):
            args = _call_args(stmt, call.end())
            if args:
                stored |= params_in(args[-1] if call.group().startswith("vstore") else args[0])
        # a pointer leaving what this analysis follows may be written through later: handed to another function
        # (another kernel of the translation unit), subtracted (an offset to another buffer), cast to an integer
        for call in re.finditer(r"\b(\w+)\s*\(", stmt):
            if call.group(1) not in _READ_CALLS and not _STORE_CALL.match(call.group()):
                stored |= {i for a in _call_args(stmt, call.end()) if _POINTER_ARG.match(a) for i in params_in(a)}
        for pattern in _POINTER_ESCAPE:
            stored |= {i for m in pattern.finditer(stmt) for i in params_in(m.group(1))}
    return frozenset(stored)


@lru_cache(maxsize=4096)
def kept_stored_params(source: str) -> frozenset[int]:
    """``stored_params``, kept on disk for the next process (targets/extents_cache.py)."""
    if not extents_cache.enabled():
        return stored_params(source)
    key = extents_cache.params_key(source)
    if (kept := extents_cache.load_params(key)) is not None:
        return kept
    stored = stored_params(source)
    extents_cache.store_params(key, stored)
    return stored


# calls that only read through a pointer argument (and C words followed by a parenthesis)
_READ_CALLS = frozenset({"vload", "vload2", "vload3", "vload4", "vload8", "vload16", "vload_half", "vloada_half",
                         "dp_read_image", "read_imagef", "read_imagei", "read_imageui", "if", "for", "while",
                         "switch", "return", "sizeof", "__builtin_prefetch"})
# an argument that is a pointer itself (a parameter or pointer variable, maybe cast to a pointer, plus an offset),
# not a value read through one
_POINTER_ARG = re.compile(r"^[\s(&]*(?:\(\s*[\w\s]+\*+\s*\)[\s(]*)?[A-Za-z_]\w*\s*(?:\[[^,]*\])?\s*(?:\+[^,]*)?[\s)]*$")
_POINTER_ESCAPE = (re.compile(r"(?<=-)\s*\(*\s*([A-Za-z_]\w*)"),  # - p
                   re.compile(r"\b([A-Za-z_]\w*)(?=\s*\)*\s*-(?![->]))"),  # p -
                   re.compile(r"\(\s*(?:unsigned\s+|signed\s+)?(?:long|int|short|char|size_t|uintptr_t|intptr_t|"
                              r"ptrdiff_t|uint\d+_t|int\d+_t)\s*\)\s*\(*\s*([A-Za-z_]\w*)"))  # (long)p


# a declaration of one pointer variable: a type (words), stars, qualifiers, the name, nothing after it
_POINTER_DECL = re.compile(r"^\s*\w+(?:\s+\w+)*\s*\*+\s*(?:(?:restrict|const)\s+)*(\w+)\s*$")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def _assignments(stmt: str) -> list[int]:
    """Offsets of the ``=`` of every assignment (plain or compound) in ``stmt``; comparisons are not."""
    out = []
    k = stmt.find("=")
    while k != -1:
        before = stmt[max(0, k - 2):k]
        if stmt[k + 1:k + 2] != "=" and before[-1:] not in ("=", "!") and \
                not (before[-1:] in ("<", ">") and before[:1] != before[-1:]):  # <= or >=, but not <<= or >>=
            out.append(k)
        k = stmt.find("=", k + 1)
    return out


def _operand_before(stmt: str, k: int) -> str:
    """The primary expression ending at ``k`` (an identifier, or a bracketed group with what it indexes)."""
    j = k
    while j > 0 and stmt[j - 1].isspace():
        j -= 1
    end = j
    while j > 0 and stmt[j - 1] in ")]":
        depth, j = 0, j - 1
        while j >= 0:
            depth += stmt[j] in ")]"
            depth -= stmt[j] in "(["
            if depth == 0:
                break
            j -= 1
    while j > 0 and (stmt[j - 1].isalnum() or stmt[j - 1] in "_*"):
        j -= 1
    return stmt[j:end]


def _operand_after(stmt: str, k: int) -> str:
    """The primary expression starting at ``k`` (a dereference, identifier or bracketed group)."""
    m = re.match(r"\s*[*&]*\s*(?:\w+|\()", stmt[k:])
    if m is None:
        return ""
    if not m.group().endswith("("):
        return m.group()
    return m.group() + "".join(_call_args(stmt, k + m.end()))


def _call_args(stmt: str, start: int) -> list[str]:
    """The top-level comma-separated arguments of the call whose ``(`` ends at ``start``."""
    args, depth, cur = [], 0, []
    for ch in stmt[start:]:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    return [*args, "".join(cur)]


_ATOMIC = re.compile(r"\batomic_\w+\s*\(")


def atomic_params(source: str, where: str) -> frozenset[int]:
    """The indices ``i`` of the ``data<i>`` whose ints an atomic call of ``source`` changes (a team's counters,
    targets/cstyle/chains.py); KernelParamsError where an atomic's pointer is not a parameter plus an offset."""
    out: set[int] = set()
    if "atomic_" not in source:  # most kernels: checked once per dispatch, the scan below skipped
        return frozenset()
    text = _COMMENT.sub(" ", source)
    for call in _ATOMIC.finditer(text):
        first = _call_args(text, call.end())[0]
        m = re.fullmatch(r"\s*data(\d+)\s*(?:\+[^,]*)?", first)
        if m is None:
            raise KernelParamsError(f"{where}: {call.group()[:-1].strip()} expected on data<i> plus an offset, got "
                                    f"{first.strip()[:40]!r}")
        out.add(int(m.group(1)))
    return frozenset(out)


def check_kernel(source: str, entry: str, bindings: list[tuple[str, bool]], n_scalars: int, where: str,
                 writes: int = 1, zeroed: Collection[str] = ()) -> None:
    """KernelParamsError unless ``source``'s ``entry`` takes one parameter per binding (each ``(binding, is an
    image weight)``) then one per scalar, images exactly where the binding is one, stores through the first
    ``writes`` parameters only (data0, or each output of a chain), and changes ints atomically only in bindings of
    ``zeroed`` (a team's counters, whose waits end only where a launch starts them at zero)."""
    params = kernel_params(source, entry, where)
    if has_range_params(params):
        params = params[:-2]  # what the launcher passes: a subrange of [0, the dispatch's global_size[0]]
    if len(params) != len(bindings) + n_scalars:
        raise KernelParamsError(f"{where}: parameters expected {len(bindings)} buffers + {n_scalars} scalars (the "
                                f"dispatch's), got {len(params)} in the source")
    for i, (p, (binding, image)) in enumerate(zip(params, bindings, strict=False)):
        if not re.search(rf"\bdata{i}$", p.text):
            raise KernelParamsError(f"{where}: parameter {i} ({binding}) expected named data{i}, got {p.text!r}")
        if p.image != image or not (p.pointer or p.image):
            want = "a read-only image (the binding is an image weight)" if image else "a pointer"
            raise KernelParamsError(f"{where}: parameter {i} ({binding}) expected {want}, got {p.text!r}")
    for p in params[len(bindings):]:
        if p.pointer or p.image:
            raise KernelParamsError(f"{where}: parameter {params.index(p)} expected a scalar, got {p.text!r}")
    bad = sorted(i for i in kept_stored_params(source) if i >= writes)
    if bad:
        allowed = "data0 only (the written binding)" if writes == 1 else f"data0..data{writes - 1} only (the " \
            "written bindings)"
        raise KernelParamsError(f"{where}: stores expected through {allowed}, got stores through "
                                f"{', '.join(f'data{i}' for i in bad)}")
    for i in sorted(atomic_params(source, where)):
        if i >= len(bindings) or bindings[i][0] not in zeroed:
            got = bindings[i][0] if i < len(bindings) else "no binding"
            raise KernelParamsError(f"{where}: atomic counters (data{i}) expected in a binding the replay zeroes "
                                    f"(the command buffer's zeroed list), got {got}")
