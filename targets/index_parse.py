"""A parser for the C and OpenCL C kernel bodies drivepack's renderer writes, for the index-range check.

``parse_kernel(source, entry)`` turns a kernel source into its vector typedefs, its parameters and the body as
a small tree of tuples (``Stmt`` and ``Expr`` below), for targets/index_ranges.py to evaluate. The grammar is the
renderer's (targets/cstyle): declarations, assignments, ``for (int v = A; v < B; v++)`` loops, ``if``, blocks,
``while (condition) {}`` waits with an empty body,
GCC statement expressions, casts, compound literals and OpenCL vector literals, calls, subscripts, lane members
and C's operators without the comma operator. Anything outside it is an ``IndexParseError``; the parser never
raises anything else on any input (its nesting depth is bounded), so a crafted source is refused, not crashed on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jit.common.errors import DrivepackError
from targets.minmax import HELPER_TEXTS as MINMAX_HELPER_TEXTS
from targets.scatter import HELPER_TEXTS

MAX_DEPTH = 64  # nested expressions and statements; the renderer's deepest brackets nest 18 levels

Expr = tuple[Any, ...]  # ("num", int | None, suffix[, float text]) ("id", name) ("bin", op, a, b) ("un", op, a) ...
Stmt = tuple[Any, ...]  # ("decl", type, name, array_len | None, init | None) ("expr", e) ("for", ...) ...


class IndexParseError(DrivepackError, ValueError):
    """A kernel source outside the grammar the renderer writes (names the token it stopped at)."""


@dataclass(frozen=True)
class CType:
    """A C type as far as index ranges care: ``kind`` int, float, void or image; ``size`` in bytes of one
    lane; ``lanes`` (1: a scalar); ``pointee`` for pointers (``kind`` "ptr")."""

    kind: str
    size: int = 0
    signed: bool = True
    lanes: int = 1
    pointee: CType | None = None
    boolean: bool = False  # _Bool: a conversion to it gives 0 or 1

    @property
    def nbytes(self) -> int:
        return self.size * (4 if self.lanes == 3 else self.lanes)


_INT_WORDS = {
    "char": (1, True), "signed char": (1, True), "unsigned char": (1, False), "uchar": (1, False),
    "short": (2, True), "unsigned short": (2, False), "ushort": (2, False), "int": (4, True),
    "unsigned int": (4, False), "unsigned": (4, False), "uint": (4, False), "long": (8, True),
    "unsigned long": (8, False), "ulong": (8, False), "long long": (8, True), "unsigned long long": (8, False),
    "int8_t": (1, True), "int16_t": (2, True), "int32_t": (4, True), "int64_t": (8, True), "uint8_t": (1, False),
    "uint16_t": (2, False), "uint32_t": (4, False), "uint64_t": (8, False), "_Bool": (1, False),
    "bool": (1, False), "size_t": (8, False)}
_FLOAT_WORDS = {"float": 4, "double": 8, "half": 2, "_Float16": 2}
_CL_VECTOR = re.compile(r"(char|uchar|short|ushort|int|uint|long|ulong|float|double|half)(2|3|4|8|16)")
QUALIFIERS = frozenset({"const", "volatile", "restrict", "__global", "global", "__local", "local", "__private",
                        "private", "__constant", "constant", "read_only", "__read_only", "signed"})
_TYPE_WORDS = frozenset({"signed", "unsigned", "char", "short", "int", "long", "float", "double", "half", "void",
                         "image2d_t", "sampler_t", *_INT_WORDS, *_FLOAT_WORDS,
                         *(f"{t}{n}" for t in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
                                               "float", "double", "half") for n in (2, 3, 4, 8, 16))})
_VECTOR_TYPEDEF = re.compile(r"typedef ([a-z_A-Z0-9 ]+?) (dp_[a-z0-9_]+) __attribute__\(\(vector_size\(([0-9]+)\)\)\);")
# numbers, names, operators; any other character is a token of its own (refused by ``tokenize``)
_TOKEN = re.compile(r"(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[A-Za-z]*|[A-Za-z_]\w*|<<=|>>=|\+\+|--|->|&&|\|\||==|!=|"
                    r"<=|>=|<<|>>|[-+*/%&|^]=|\S")
_PUNCTUATION = frozenset("-+*/%&|^!~<>=?:;,.(){}[]")
_UNARY_OPS = frozenset({"-", "+", "!", "~", "*", "&", "++", "--"})
_ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})
_NAME = re.compile(r"[A-Za-z_]\w*")
_VECTOR_NAME = re.compile(r"dp_(int|uint|float)(8|16|32|64)x(2|4|8|16|32|64)")
_PREPROCESSOR_OK = re.compile(r"#ifndef [A-Z][A-Z0-9_]*|#define [A-Z][A-Z0-9_]*|#endif|#include <(?:math|stdint)\.h>|"
                              r"#pragma [ -~]*")
_PRELUDE_POINTER = re.compile(r"\*\s*[A-Za-z_(),]|[\[\]]|->")  # not ``x *= y``: integer power's squaring
# what targets/index_calls.py assumes of the image helper (targets/opencl_runtime.py IMAGE_HELPER, which
# targets/source_check.py pins before anything is compiled)
IMAGE_READ_SHAPE = ("int t = i >> 2, c = i & 3;", "(int2)(t % width, t / width)", "CLK_NORMALIZED_COORDS_FALSE")


def scalar_type(words: str) -> CType | None:
    """The scalar type spelled ``words`` (qualifiers removed), None for a word this grammar does not know."""
    if words in _INT_WORDS:
        size, signed = _INT_WORDS[words]
        return CType("int", size, signed, boolean=words in ("_Bool", "bool"))
    if words in _FLOAT_WORDS:
        return CType("float", _FLOAT_WORDS[words])
    if words == "void":
        return CType("void")
    if words == "image2d_t":
        return CType("image")
    if m := _CL_VECTOR.fullmatch(words):
        lane = scalar_type(m.group(1))
        assert lane is not None
        return CType(lane.kind, lane.size, lane.signed, int(m.group(2)))
    return None


def tokenize(text: str) -> list[str]:
    tokens = _TOKEN.findall(text)
    for tok in set(tokens):  # each distinct token once (a kernel repeats its names and operators)
        if len(tok) == 1 and not (tok.isalnum() or tok == "_") and tok not in _PUNCTUATION:
            raise IndexParseError(f"unexpected character {next(t for t in tokens if t == tok)!r}")
    return tokens


@dataclass(frozen=True)
class Kernel:
    """A parsed kernel: its parameters (type, name) in order and its body."""

    params: tuple[tuple[CType, str], ...]
    body: tuple[Stmt, ...]


def parse_kernel(source: str, entry: str) -> Kernel:
    """The parameters and body of ``entry``'s definition in ``source``. Before: any text. After: the source holds
    no preprocessor line that could change what the compiler reads (only include guards, the renderer's headers
    and pragmas), no backslash; the text before the kernel holds vector typedefs whose size agrees with their name
    (kernels compiled as one file share the first definition of a guarded typedef) and helpers that handle
    values only (no pointer, dereference or subscript: nothing a helper does reaches a buffer); nothing follows
    the kernel."""
    if "\\" in source:
        raise IndexParseError("expected no backslash (a line splice would hide text from this analysis)")
    if (sig := re.search(rf"(?:__kernel\s+)?void\s+{re.escape(entry)}\s*\(", source)) is not None:
        # the scatter helpers reach memory, which targets/index_calls.py follows at each call, and the min/max
        # helpers' fallback subscripts its parameters: exactly their texts
        head = source[:sig.start()]
        for helper in (*HELPER_TEXTS["C"], *HELPER_TEXTS["OPENCL"], *MINMAX_HELPER_TEXTS):
            head = head.replace(helper, "")
        source = head + source[sig.start():]
    for line in source.split("\n"):
        if line.lstrip().startswith("#") and not _PREPROCESSOR_OK.fullmatch(line.strip()):
            raise IndexParseError(f"expected no preprocessor line but include guards, <math.h>, <stdint.h> and "
                                  f"pragmas, got {line.strip()[:80]!r}")
    text = "\n".join(ln for ln in source.split("\n") if not ln.lstrip().startswith("#"))
    m = re.search(rf"(?:__kernel\s+)?void\s+{re.escape(entry)}\s*\(", text)
    if m is None:
        raise IndexParseError(f"expected a definition of {entry}(...), got none")
    typedefs = _typedefs(text[:m.start()])
    prelude = _VECTOR_TYPEDEF.sub("", text[:m.start()])
    if bad := _PRELUDE_POINTER.search(prelude):
        # a helper reaching memory (a pointer parameter, a dereference, a cast to a pointer) is not followed here
        heads = [ln.strip() for ln in prelude[:bad.end()].split("\n") if ln.rstrip().endswith("{")]
        where = f" in {heads[-1][:80]!r}" if heads else ""
        raise IndexParseError(f"expected helpers before the kernel to handle values only, got {bad.group()!r}{where}")
    if re.search(r"\bdp_read_image\s*\(", prelude) and not all(part in prelude for part in IMAGE_READ_SHAPE):
        raise IndexParseError("expected dp_read_image to read element i as component i % 4 of texel i / 4 in rows "
                              "of width texels (the renderer's helper)")
    p = _Parser(tokenize(text[m.end():]), typedefs)
    params = p.params()
    body = p.block_body()
    if p.i != p.end:
        raise IndexParseError(f"expected nothing after the kernel body, got {p.peek()!r}")
    return Kernel(params, body)


def _typedefs(prelude: str) -> dict[str, CType]:
    """The vector typedefs of ``prelude``: ``dp_<dtype>x<n>`` must be ``n`` lanes of ``dtype`` (another kernel of
    the same file may have defined the guarded name first: the name, not this definition, is what holds)."""
    out: dict[str, CType] = {}
    for t in _VECTOR_TYPEDEF.finditer(prelude):
        lane = scalar_type(" ".join(w for w in t.group(1).split() if w not in QUALIFIERS - {"signed"}) or "int")
        named = _VECTOR_NAME.fullmatch(t.group(2))
        if lane is None or named is None or int(t.group(3)) != lane.size * int(named.group(3)) or \
                lane.size * 8 != int(named.group(2)) or lane.kind != ("float" if named.group(1) == "float" else "int") \
                or lane.kind == "int" and lane.signed != (named.group(1) == "int"):
            raise IndexParseError(f"expected vector typedef {t.group(2)} of the lanes its name says, got "
                                  f"{t.group(1)!r} x {t.group(3)} bytes")
        out[t.group(2)] = CType(lane.kind, lane.size, lane.signed, int(named.group(3)))
    return out


class _Parser:
    def __init__(self, toks: list[str], typedefs: dict[str, CType]) -> None:
        self.toks, self.i, self.typedefs, self.depth = [*toks, "", ""], 0, typedefs, 0  # "": the end
        self.end = len(toks)
        self.assigned: list[set[str]] = []  # per loop being parsed: the variables its body may assign

    # --- tokens ------------------------------------------------------------------------------------------
    def peek(self, k: int = 0) -> str:
        return self.toks[self.i + k] if k else self.toks[self.i]

    def take(self, want: str | None = None) -> str:
        tok = self.toks[self.i]
        if tok == "" or (want is not None and tok != want):
            raise IndexParseError(f"expected {want or 'a token'!r}, got {tok or 'the end'!r}")
        self.i += 1
        return tok

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise IndexParseError(f"expected expressions nested at most {MAX_DEPTH} deep")

    # --- types -------------------------------------------------------------------------------------------
    def is_type_word(self, tok: str) -> bool:
        return tok in _TYPE_WORDS or tok in QUALIFIERS or tok in self.typedefs

    def type_at(self) -> bool:
        """Whether a type name starts here (not a variable: the renderer never names one like a type)."""
        return self.is_type_word(self.peek())

    def type_name(self) -> CType:
        words = []
        while self.is_type_word(self.peek()):
            tok = self.take()
            if tok not in QUALIFIERS or tok == "signed":
                words.append(tok)
        spelled = " ".join(words)
        t = self.typedefs.get(spelled) or scalar_type(spelled)
        if t is None:
            raise IndexParseError(f"expected a type name, got {spelled!r}")
        while self.peek() == "*":
            self.take()
            t = CType("ptr", 8, False, 1, t)
            while self.peek() in QUALIFIERS:
                self.take()
        return t

    def params(self) -> tuple[tuple[CType, str], ...]:
        out: list[tuple[CType, str]] = []
        while self.peek() != ")":
            t = self.type_name()
            out.append((t, self.ident()))
            if self.peek() != ")":
                self.take(",")
        self.take(")")
        return tuple(out)

    def ident(self) -> str:
        tok = self.take()
        if not _NAME.fullmatch(tok) or self.is_type_word(tok):
            raise IndexParseError(f"expected a name, got {tok!r}")
        return tok

    # --- statements --------------------------------------------------------------------------------------
    def block_body(self) -> tuple[Stmt, ...]:
        self.take("{")
        out = []
        while self.peek() != "}":
            out.append(self.statement())
        self.take("}")
        return tuple(out)

    def statement(self) -> Stmt:
        self.deeper()
        try:
            return self._statement()
        finally:
            self.depth -= 1

    def _statement(self) -> Stmt:
        tok = self.peek()
        if tok == "{":
            return ("block", self.block_body())
        if tok == ";":
            self.take()
            return ("block", ())
        if tok == "for":
            return self.for_loop()
        if tok == "while":  # a team's wait for its other work-groups (targets/cstyle/chains.py render_team)
            self.take()
            self.take("(")
            cond = self.expr()
            self.take(")")
            self.take("{")
            self.take("}")
            return ("wait", cond)
        if tok == "if":
            self.take()
            self.take("(")
            cond = self.expr()
            self.take(")")
            then = self.statement()
            other = None
            if self.peek() == "else":
                self.take()
                other = self.statement()
            return ("if", cond, then, other)
        if tok == "return":
            self.take()
            self.take(";")
            return ("return",)
        if self.type_at():
            return self.declaration()
        e = self.expr()
        self.take(";")
        return ("expr", e)

    def declaration(self) -> Stmt:
        t = self.type_name()
        decls: list[Stmt] = []
        while True:
            name, length, init = self.ident(), None, None
            if self.peek() == "[":
                self.take()
                length = self.expr()
                self.take("]")
            if self.peek() == "=":
                self.take()
                init = self.expr()
            decls.append(("decl", t, name, length, init))
            if self.peek() != ",":
                break
            self.take()
        self.take(";")
        return decls[0] if len(decls) == 1 else ("seq", tuple(decls))

    def for_loop(self) -> Stmt:
        """``for (int v = A; v < B; v++) body``: the one loop shape the renderer writes."""
        self.take("for")
        self.take("(")
        if self.type_name() != CType("int", 4, True):  # a narrower one could wrap (signed char: to -128)
            raise IndexParseError("expected a loop over an int variable")
        var = self.ident()
        self.take("=")
        start = self.expr()
        self.take(";")
        if self.take() != var or self.take() != "<":
            raise IndexParseError(f"expected the loop condition {var} < bound")
        self.assigned.append(set())  # the bound is evaluated before every iteration: what it assigns is carried
        bound = self.expr()
        self.take(";")
        if self.take() != var or self.take() != "++":
            raise IndexParseError(f"expected the loop step {var}++")
        self.take(")")
        body = self.statement()
        assigned = self.assigned.pop()
        if self.assigned:
            self.assigned[-1] |= assigned
        return ("for", var, start, bound, body, frozenset(assigned))

    def note_assigned(self, e: Expr) -> Expr:
        """``e`` (the target of an assignment or increment, or a local whose address is taken: memcpy fills it)
        as it is, noted as assigned by every loop being parsed."""
        if e[0] == "id" and self.assigned:
            self.assigned[-1].add(e[1])
        return e

    # --- expressions -------------------------------------------------------------------------------------
    def expr(self) -> Expr:
        """An assignment expression (right to right: ``a = b = c``) or a conditional one."""
        self.deeper()
        try:
            lhs = self.ternary()
            op = self.toks[self.i]
            if op in _ASSIGN_OPS:
                self.i += 1
                return ("assign", op, self.note_assigned(lhs), self.expr())
            return lhs
        finally:
            self.depth -= 1

    def ternary(self) -> Expr:
        cond = self.binary(0)
        if self.toks[self.i] != "?":
            return cond
        self.take()
        a = self.expr()
        self.take(":")
        self.deeper()
        try:
            b = self.ternary()
        finally:
            self.depth -= 1
        return ("tern", cond, a, b)

    _PRECEDENCE = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, ">": 7, "<=": 7, ">=": 7,
                   "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}

    def binary(self, floor: int) -> Expr:
        """Operators binding at least as tightly as ``floor``, left to right (precedence climbing: one frame per
        precedence step, not per level of C's grammar)."""
        a = self.unary()
        while (prec := self._PRECEDENCE.get(self.toks[self.i], 0)) > floor:
            op = self.toks[self.i]
            self.i += 1
            a = ("bin", op, a, self.binary(prec))
        return a

    def unary(self) -> Expr:
        tok = self.toks[self.i]
        if tok in _UNARY_OPS:
            self.take()
            self.deeper()
            try:
                operand = self.unary()
                return ("un", tok, self.note_assigned(operand) if tok in ("++", "--", "&") else operand)
            finally:
                self.depth -= 1
        if tok == "sizeof":
            self.take()
            self.take("(")
            if self.type_at():
                t = self.type_name()
                self.take(")")
                return ("sizeof_t", t)
            e = self.expr()
            self.take(")")
            return ("sizeof_e", e)
        if tok == "(" and self.is_type_word(self.toks[self.i + 1]):
            self.take()
            t = self.type_name()
            self.take(")")
            if self.peek() == "{":  # a compound literal: GCC vector lanes
                return ("ctor", t, self.list_of("{", "}"))
            if self.peek() == "(" and t.lanes > 1:  # an OpenCL vector literal, or one value to every lane
                items = self.list_of("(", ")")
                return ("ctor", t, items) if len(items) > 1 else ("cast", t, items[0])
            self.deeper()
            try:
                return ("cast", t, self.unary())
            finally:
                self.depth -= 1
        return self.postfix(self.primary())

    def list_of(self, open_: str, close: str) -> tuple[Expr, ...]:
        self.take(open_)
        items = [self.item()]
        while self.toks[self.i] == ",":
            self.i += 1
            items.append(self.item())
        self.take(close)
        return tuple(items)

    def item(self) -> Expr:
        """One element of a list: an expression, or a type name (``__builtin_convertvector``'s second argument)."""
        if self.toks[self.i + 1] in (",", ")") and self.type_at():
            return ("type", self.type_name())
        return self.expr()

    def primary(self) -> Expr:
        tok = self.take()
        if tok == "(":
            if self.toks[self.i] == "{":  # a GCC statement expression
                body = self.block_body()
                self.take(")")
                return ("stmts", body)
            e = self.expr()
            self.take(")")
            return e
        if tok[0].isdigit() or tok[0] == ".":
            return _number(tok)
        if tok in ("asm", "__asm", "__asm__"):
            raise IndexParseError("expected no inline assembly (asm), whose accesses cannot be bounded")
        if (tok[0].isalpha() or tok[0] == "_") and not self.is_type_word(tok):  # a name: tokens are whole words
            if self.toks[self.i] == "(":
                if self.toks[self.i + 1] == ")":
                    self.i += 2
                    return ("call", tok, ())
                return ("call", tok, self.list_of("(", ")"))
            return ("id", tok)
        raise IndexParseError(f"expected an expression, got {tok!r}")

    def postfix(self, e: Expr) -> Expr:
        while True:
            tok = self.toks[self.i]
            if tok == "[":
                self.take()
                e = ("index", e, self.expr())
                self.take("]")
            elif tok == ".":
                self.take()
                e = ("member", e, self.ident())
            elif tok in ("++", "--"):
                self.take()
                e = ("post", tok, self.note_assigned(e))
            else:
                return e


_INT_LITERAL = re.compile(r"(\d+)([uUlL]*)")
_FLOAT_LITERAL = re.compile(r"((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)([fF]?)")


@lru_cache(maxsize=4096)  # a kernel repeats its literals (a vector constant's lanes): the same immutable tuple
def _number(tok: str) -> Expr:
    """("num", value, suffix): an integer literal's value and its suffix; a float literal is ("num", None,
    suffix, text): its suffix ("f" for float, "" for double) and its digits (targets/index_floats.py reads them)."""
    m = _INT_LITERAL.fullmatch(tok)
    if m is not None:
        if len(m.group(1)) > 1 and m.group(1).startswith("0"):
            raise IndexParseError(f"expected a decimal integer, got {tok!r}")  # octal: the renderer writes none
        return ("num", int(m.group(1)), m.group(2).lower())
    m = _FLOAT_LITERAL.fullmatch(tok)
    if m is None:
        raise IndexParseError(f"expected a number, got {tok!r}")
    return ("num", None, m.group(2).lower(), m.group(1))
