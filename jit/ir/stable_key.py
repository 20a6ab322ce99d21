"""Exact, process-independent keys of UOp graphs and of the plain values around them (target settings).

``structural_key(u)`` is a SHA-256 hex digest of ``u``'s whole graph: two graphs get the same key exactly when
they are the same graph (same ops, dtypes, args and sources), in any process, whatever the hash seed or object
ids. Unlike ``jit.codegen.opt.tuning.kernel_key`` (a repr of each arg, fine for a tuning table) it encodes every
value by type and in full: ``1`` / ``1.0`` / ``True``, ``0.0`` / ``-0.0`` and an image dtype's element count all
differ, so a cache keyed by it can never hand one kernel's result to another.

Keys are Merkle hashes: each node's key covers its op, dtype, arg and its sources' keys, and is kept in the
node's derived-facts cache, so a subgraph shared by many kernels is hashed once per process.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from typing import Any

from jit.common.errors import DrivepackError
from jit.ir.uop import UOp, toposort

_KEY = "structural_key"
_DTYPE_CODES: dict[Any, str] = {}


class UnkeyableError(DrivepackError, TypeError):
    """A value of a type ``value_code`` has no exact encoding for (the caller then must not cache by it)."""


def value_code(v: Any) -> str:
    """An exact text encoding of ``v``: None, bool, int, float (by its hex digits), str, enum members, tuples,
    lists, frozensets, dicts and dataclass instances of those (by class and every field, not by repr).
    Raises UnkeyableError for anything else."""
    if v is None:
        return "N"
    if isinstance(v, bool):  # before int: True == 1
        return "b1" if v else "b0"
    if isinstance(v, enum.Enum):  # before int: an IntEnum member is an int too
        return f"e{type(v).__module__}.{type(v).__qualname__}.{v.name}"
    if isinstance(v, int):
        return f"i{v}"
    if isinstance(v, float):
        return f"f{v.hex()}"
    if isinstance(v, str):
        return "s" + json.dumps(v)
    if isinstance(v, tuple):
        return "t(" + ",".join(value_code(x) for x in v) + ")"
    if isinstance(v, list):
        return "l(" + ",".join(value_code(x) for x in v) + ")"
    if isinstance(v, frozenset | set):
        return "z(" + ",".join(sorted(value_code(x) for x in v)) + ")"
    if isinstance(v, dict):
        return "m(" + ",".join(sorted(f"{value_code(k)}:{value_code(x)}" for k, x in v.items())) + ")"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        cls = type(v)
        fields = ",".join(f"{f.name}={value_code(getattr(v, f.name))}" for f in dataclasses.fields(v))
        return f"d{cls.__module__}.{cls.__qualname__}({fields})"
    raise UnkeyableError(f"no exact key for a {type(v).__module__}.{type(v).__qualname__} value")


def _dtype_code(d: Any) -> str:
    code = _DTYPE_CODES.get(d)
    if code is None:  # dtypes are few and compare by value: one encoding each per process
        code = _DTYPE_CODES[d] = value_code(d)
    return code


def _arg_code(arg: Any) -> str:
    t = type(arg)  # the common args first, exactly as value_code spells them
    if arg is None:
        return "N"
    if t is int:
        return f"i{arg}"
    if t is float:
        return f"f{arg.hex()}"
    return value_code(arg)


def structural_key(root: UOp) -> str:
    """The SHA-256 hex digest of ``root``'s graph (see the module docstring). Raises UnkeyableError when an arg
    or dtype has no exact encoding."""
    key = root._cache.get(_KEY)
    if key is not None:
        return key
    sha = hashlib.sha256
    for node in toposort([root], lambda n: tuple(s for s in n.src if _KEY not in s._cache)):
        cache = node._cache
        if _KEY in cache:
            continue
        text = f"{node.op.name}|{_dtype_code(node.dtype)}|{_arg_code(node.arg)}"
        if node.src:
            text += "|" + "|".join(s._cache[_KEY] for s in node.src)
        cache[_KEY] = sha(text.encode()).hexdigest()
    return root._cache[_KEY]
