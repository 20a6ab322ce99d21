"""openpilot's ``output_slices`` metadata, read without executing anything.

openpilot stores ``base64(pickle.dumps({name: slice(start, stop, None)}))`` in the ONNX file's metadata_props.
Loading that with ``pickle`` would run whatever the file asks for, so it is read here by a small stack machine
over ``pickletools.genops``, which only parses. Exactly the opcodes protocols 2 to 5 emit for such a dict are
known, and ``builtins.slice`` is the one global: it is never imported, only recognised by name; the machine
builds the slice itself. Each opcode is checked before genops reads its argument, so a refused opcode's
payload (a megabyte LONG, say) is never decoded. A JSON object name -> [start, stop] is read too.

Imports only the standard library and ``abi.errors``: the runtime may use it.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickletools
from typing import Any

from abi.errors import AbiError, excerpt, issue, quoted

FIELD = "metadata_props.output_slices"
MAX_TEXT_CHARS = 1 << 16   # openpilot's real slices are a few hundred bytes; the bound keeps parsing cheap
MAX_SLICES = 1000          # pickle writes SETITEMS in batches of 1000, so the stack stays within 2 batches
MAX_STACK = 2 * MAX_SLICES + 16
MAX_MARKS = 4              # a dict's MARK plus, in older layouts, a tuple's
MAX_MEMO = 4 * MAX_SLICES + 16
MAX_NAME_CHARS = 256
INT_LIMIT = 1 << 63        # slice bounds are element indices; anything wider is hostile

PROTOCOLS = (2, 3, 4, 5)
SLICE_GLOBALS = (("builtins", "slice"), ("__builtin__", "slice"))  # protocol 2 and 3 write the Python 2 name
ALLOWED = ("PROTO", "FRAME", "EMPTY_DICT", "MARK", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8",
           "BININT", "BININT1", "BININT2", "LONG1", "NONE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
           "GLOBAL", "STACK_GLOBAL", "REDUCE", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
           "SETITEM", "SETITEMS", "STOP")
_OPNAMES = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}


class _Mark:
    """MARK on the stack."""


class _SliceGlobal:
    """The ``builtins.slice`` global, recognised by name and never imported."""


MARK = _Mark()
SLICE = _SliceGlobal()


def read_output_slices(text: str, where: str = "<model>") -> dict[str, tuple[int, int]]:
    """``output_slices`` (a JSON object name -> [start, stop], or base64 of a pickled dict name -> slice) as
    name -> (start, stop); AbiError (one line, naming the opcode, global or value and its byte) otherwise."""
    if not isinstance(text, str):
        raise _err(where, "a string", type(text).__name__)
    if len(text) > MAX_TEXT_CHARS:
        raise _err(where, f"at most {MAX_TEXT_CHARS} characters", f"{len(text)} characters")
    body = text.strip()
    raw = _from_json(body, where) if body.startswith("{") else _from_pickle(_b64(body, where), where)
    return _checked(raw, where)


def _from_json(body: str, where: str) -> dict[Any, Any]:
    try:
        data = json.loads(body)
    except ValueError as e:  # also int() refusing a number of too many digits
        raise _err(where, "JSON", f"invalid JSON ({excerpt(str(e))})") from None
    if not isinstance(data, dict):
        raise _err(where, "an object name -> [start, stop]", type(data).__name__)
    out = {}
    for name, v in data.items():
        if not (isinstance(v, list) and len(v) == 2 and all(_is_int(x) for x in v)):
            raise AbiError([issue(where, f"output_slices.{excerpt(name)}", "[start, stop]", quoted(v))])
        out[name] = (v[0], v[1])
    return out


def _b64(body: str, where: str) -> bytes:
    try:
        return base64.b64decode(body.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as e:
        raise _err(where, "a JSON object or base64 of a pickle", f"invalid base64 ({excerpt(str(e))})") from None


def _from_pickle(data: bytes, where: str) -> dict[Any, Any]:
    """Run the stack machine over ``data``; the value STOP leaves must be the dict."""
    return _Machine(data, where).run()


class _Machine:
    """Pickle opcodes interpreted over plain values: str, int, None, tuples, slices and one dict."""

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.where = where
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.result: dict[Any, Any] | None = None
        self.pos = 0

    def run(self) -> dict[Any, Any]:
        stream = io.BytesIO(self.data)
        ops = pickletools.genops(stream)
        first = True
        while True:
            self.pos = stream.tell()
            if self.pos >= len(self.data):
                raise self.fail("a STOP opcode", "the end of the data (truncated)")
            name = _OPNAMES.get(self.data[self.pos])
            if name not in ALLOWED:
                got = repr(name) if name else f"unknown opcode byte {self.data[self.pos]:#04x}"
                raise self.fail("opcode one of " + ", ".join(ALLOWED), got)
            if first and name != "PROTO":
                raise self.fail("opcode PROTO (protocol 2 to 5) first", repr(name))
            first = False
            if name == "GLOBAL":
                self.raw_global()
            try:
                _, arg, _ = next(ops)
            except (ValueError, EOFError) as e:  # genops: a truncated or malformed argument
                raise self.fail(f"a well-formed {name} argument", excerpt(str(e))) from None
            if name == "STOP":
                return self.stop()
            self.step(name, arg)
            if len(self.stack) > MAX_STACK:
                raise self.fail(f"a stack of at most {MAX_STACK} items", f"{len(self.stack)} items")

    def step(self, name: str, arg: Any) -> None:
        if name == "PROTO":
            if arg not in PROTOCOLS or self.pos != 0:
                raise self.fail("protocol 2 to 5, once at byte 0", repr(arg))
        elif name == "FRAME":
            pass  # framing only groups opcodes for buffered reads; the opcodes follow inline
        elif name == "EMPTY_DICT":
            if self.result is not None:
                raise self.fail("one dict", "a second EMPTY_DICT")
            self.result = {}
            self.stack.append(self.result)
        elif name == "MARK":
            if sum(1 for v in self.stack if v is MARK) >= MAX_MARKS:
                raise self.fail(f"at most {MAX_MARKS} open MARKs", "another MARK")
            self.stack.append(MARK)
        elif name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"):
            self.stack.append(arg)
        elif name in ("BININT", "BININT1", "BININT2", "LONG1"):
            if not -INT_LIMIT <= arg < INT_LIMIT:
                raise self.fail(f"an int within +-2**63 ({name})", f"an int of {arg.bit_length()} bits")
            self.stack.append(arg)
        elif name == "NONE":
            self.stack.append(None)
        elif name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"):
            self.tuple(name)
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            self.global_(name, arg)
        elif name == "REDUCE":
            self.reduce()
        elif name in ("MEMOIZE", "BINPUT", "LONG_BINPUT"):
            self.put(len(self.memo) if name == "MEMOIZE" else arg)
        elif name in ("BINGET", "LONG_BINGET"):
            if arg not in self.memo:
                raise self.fail("a memo index stored before", repr(arg))
            self.stack.append(self.memo[arg])
        elif name == "SETITEM":
            self.setitems(self.pop(2), self.top_dict())
        else:  # SETITEMS
            items = self.pop_mark()
            if len(items) % 2:
                raise self.fail("key/value pairs after MARK", f"{len(items)} items")
            self.setitems(items, self.top_dict())

    def tuple(self, name: str) -> None:
        items = self.pop_mark() if name == "TUPLE" else self.pop(int(name[-1]))
        for v in items:
            # slice arguments only: nesting (a tuple in a tuple) has no place here, so depth is bounded by construction
            if not (v is None or _is_int(v)):
                raise self.fail(f"{name} items int or None", _kind(v))
        self.stack.append(tuple(items))

    def raw_global(self) -> None:
        """GLOBAL's two text lines, compared as bytes before genops reads them: genops un-escapes them (with
        warnings for a hostile file's bad escapes), and only two exact spellings can be the slice global."""
        if any(self.data.startswith(b"c%s\n%s\n" % (m.encode(), a.encode()), self.pos) for m, a in SLICE_GLOBALS):
            return
        lines = self.data[self.pos + 1:self.pos + 1 + 2 * MAX_NAME_CHARS].split(b"\n")[:2]
        raise self.fail("global builtins slice (the only one allowed)",
                        quoted(" ".join(x.decode("latin-1") for x in lines)))

    def global_(self, name: str, arg: Any) -> None:
        if name == "GLOBAL":
            module, _, attr = str(arg).partition(" ")
        else:
            module, attr = self.pop(2)
            if not (isinstance(module, str) and isinstance(attr, str)):
                raise self.fail("STACK_GLOBAL on two strings", f"{_kind(module)}, {_kind(attr)}")
        if (module, attr) not in SLICE_GLOBALS:
            raise self.fail("global builtins slice (the only one allowed)", quoted(f"{module} {attr}"))
        self.stack.append(SLICE)

    def reduce(self) -> None:
        func, args = self.pop(2)
        if func is not SLICE:
            raise self.fail("REDUCE on the global builtins slice", _kind(func))
        if not (isinstance(args, tuple) and len(args) == 3 and _is_int(args[0]) and _is_int(args[1])
                and args[2] is None):
            raise self.fail("slice arguments (start: int, stop: int, step: None)", quoted(args))
        self.stack.append(slice(args[0], args[1], None))

    def put(self, index: Any) -> None:
        if not self.stack or self.stack[-1] is MARK:
            raise self.fail("a value to memoize", "an empty stack or a MARK")
        if index not in self.memo and len(self.memo) >= MAX_MEMO:
            raise self.fail(f"a memo of at most {MAX_MEMO} entries", "one more")
        self.memo[index] = self.stack[-1]

    def setitems(self, items: list[Any], target: dict[Any, Any]) -> None:
        for key, value in zip(items[::2], items[1::2], strict=True):
            if not isinstance(key, str):
                raise self.fail("dict keys str", _kind(key))
            if not isinstance(value, slice):
                raise self.fail(f"the value of {quoted(key)} a slice", _kind(value))
            if key in target:
                raise self.fail("unique slice names", f"{quoted(key)} twice")
            if len(target) >= MAX_SLICES:
                raise self.fail(f"at most {MAX_SLICES} slices", "more")
            target[key] = value

    def top_dict(self) -> dict[Any, Any]:
        if not self.stack or self.stack[-1] is not self.result or self.result is None:
            raise self.fail("the dict below the items", _kind(self.stack[-1]) if self.stack else "an empty stack")
        return self.result

    def pop(self, n: int) -> list[Any]:
        """The top ``n`` values (no MARK among them), oldest first."""
        if n == 0:
            return []
        items = self.stack[-n:] if len(self.stack) >= n else None
        if items is None or any(v is MARK for v in items):
            raise self.fail(f"{n} values on the stack", f"{len(self.stack)} (or a MARK among them)")
        del self.stack[-n:]
        return items

    def pop_mark(self) -> list[Any]:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is MARK:
                items = self.stack[i + 1:]
                del self.stack[i:]
                return items
        raise self.fail("a MARK on the stack", "none")

    def stop(self) -> dict[Any, Any]:
        if len(self.stack) != 1 or self.stack[0] is not self.result or self.result is None:
            raise self.fail("exactly the dict on the stack at STOP", ", ".join(_kind(v) for v in self.stack) or
                            "an empty stack")
        if self.pos + 1 != len(self.data):
            raise self.fail("nothing after STOP", f"{len(self.data) - self.pos - 1} more bytes")
        return {k: (v.start, v.stop) for k, v in self.result.items()}

    def fail(self, expected: str, actual: str) -> AbiError:
        return _err(self.where, f"pickle {expected}", f"{actual} at byte {self.pos}")


def _checked(raw: dict[Any, Any], where: str) -> dict[str, tuple[int, int]]:
    """Both forms: str names of bounded length, int bounds with 0 <= start < stop, a bounded count."""
    if len(raw) > MAX_SLICES:
        raise _err(where, f"at most {MAX_SLICES} slices", str(len(raw)))
    errs = []
    for name, (start, stop) in raw.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            errs.append(issue(where, "output_slices", f"slice names of 1 to {MAX_NAME_CHARS} characters",
                              quoted(name)))
        elif not (-INT_LIMIT <= start < INT_LIMIT and -INT_LIMIT <= stop < INT_LIMIT and 0 <= start < stop):
            errs.append(issue(where, f"output_slices.{name}", "0 <= start < stop", quoted([start, stop])))
    if errs:
        raise AbiError(errs)
    return dict(raw)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _kind(v: Any) -> str:
    if v is MARK:
        return "a MARK"
    if v is SLICE:
        return "the slice global"
    return f"{type(v).__name__} {quoted(v, 40)}"


def _err(where: str, expected: str, actual: str) -> AbiError:
    return AbiError([issue(where, FIELD, expected, actual)])
