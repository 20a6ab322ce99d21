"""A small JSON-Schema subset checked against YAML data that carries line numbers (abi.yaml_lines).

Supported keywords: type (object, array, string, integer, number, boolean, null, or a list of them),
properties, required, additionalProperties (false or a schema), items, enum, const, minimum, maximum,
minItems, maxItems, pattern, $ref to "#/$defs/<name>", $defs, description, title, and one of its own:
allowNonFinite (true: this number may be NaN or +-Inf; without it, YAML's ``.nan`` / ``.inf`` are refused
wherever a number or integer is expected, and always where there is a minimum or maximum, which NaN would pass
unnoticed). Any other keyword in a schema is refused, so the schema file cannot silently ask for a check that
is not made. Values from the file are quoted in messages cut to ``abi.errors.EXCERPT_CHARS`` characters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from abi.errors import quoted
from abi.yaml_lines import LineDict, LineList, line_of

KNOWN = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "minimum", "maximum",
         "minItems", "maxItems", "pattern", "$ref", "$defs", "description", "title", "allowNonFinite"}
_TYPES = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
          "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
          "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
          "null": lambda v: v is None}


@dataclass(frozen=True)
class SchemaViolation:
    """One place where the data breaks the schema: dotted key, line (1-based, 0 unknown), message, and the same
    split into what was expected and what was found (for reports that keep fields apart)."""

    key: str
    line: int
    message: str
    expected: str = ""
    got: str = ""


def _violation(key: str, line: int, expected: str, got: str, message: str = "") -> SchemaViolation:
    return SchemaViolation(key, line, message or f"expected {expected}, got {got}", expected, got)


class SchemaDefinitionError(ValueError):
    """The schema itself uses something this checker does not implement."""


def check(data: Any, schema: Mapping[str, Any]) -> list[SchemaViolation]:
    """Every violation of ``schema`` by ``data``, in document order of discovery."""
    out: list[SchemaViolation] = []
    _check(data, schema, schema, "", getattr(data, "line", 0), out)
    return out


def _describe(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return f"{type(v).__name__} {quoted(v)}"


def _check(data: Any, schema: Mapping[str, Any], root: Mapping[str, Any], key: str, line: int,
           out: list[SchemaViolation]) -> None:
    unknown = set(schema) - KNOWN
    if unknown:
        raise SchemaDefinitionError(f"schema at {key or '<top>'} uses unsupported keywords {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/") or ref[8:] not in root.get("$defs", {}):
            raise SchemaDefinitionError(f"unresolvable $ref {ref!r}")
        _check(data, root["$defs"][ref[8:]], root, key, line, out)
        return
    where = key or "<top>"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](data) for t in types):
            out.append(_violation(where, line, " or ".join(types), _describe(data)))
            return
    if "const" in schema and data != schema["const"]:
        out.append(_violation(where, line, repr(schema["const"]), quoted(data)))
    if "enum" in schema and data not in schema["enum"]:
        choices = ", ".join(repr(c) for c in schema["enum"])
        out.append(_violation(where, line, f"one of {choices}", quoted(data)))
    if isinstance(data, float) and not math.isfinite(data):
        bounded = "minimum" in schema or "maximum" in schema
        if bounded or not schema.get("allowNonFinite", False):
            bounds = " ".join(f"{op} {schema[k]}" for k, op in (("minimum", ">="), ("maximum", "<=")) if k in schema)
            out.append(_violation(where, line, f"a finite number{' ' + bounds if bounds else ''}", repr(data)))
        return
    if isinstance(data, int | float) and not isinstance(data, bool):
        if "minimum" in schema and data < schema["minimum"]:
            out.append(_violation(where, line, f">= {schema['minimum']}", repr(data)))
        if "maximum" in schema and data > schema["maximum"]:
            out.append(_violation(where, line, f"<= {schema['maximum']}", repr(data)))
    if isinstance(data, str) and "pattern" in schema and not re.fullmatch(schema["pattern"], data):
        out.append(_violation(where, line, f"a string matching {schema['pattern']!r}", quoted(data)))
    if isinstance(data, list):
        if "minItems" in schema and len(data) < schema["minItems"]:
            out.append(_violation(where, line, f"at least {schema['minItems']} items", str(len(data))))
        if "maxItems" in schema and len(data) > schema["maxItems"]:
            out.append(_violation(where, line, f"at most {schema['maxItems']} items", str(len(data))))
        if "items" in schema:
            for i, item in enumerate(data):
                _check(item, schema["items"], root, f"{key}[{i}]", _line(data, i, line), out)
    if isinstance(data, dict):
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            if req not in data:
                out.append(_violation(_join(key, req), line, "the required key", "missing", "required key is missing"))
        extra = schema.get("additionalProperties", True)
        for k, v in data.items():
            child = _join(key, str(k))
            if k in props:
                _check(v, props[k], root, child, _line(data, k, line), out)
            elif extra is False:
                allowed = ", ".join(props) or "none"
                out.append(_violation(child, _line(data, k, line), f"one of the keys {allowed}", quoted(k),
                                      f"unknown key (allowed: {allowed})"))
            elif isinstance(extra, Mapping):
                if not isinstance(k, str):
                    out.append(_violation(child, _line(data, k, line), "a string key", quoted(k)))
                _check(v, extra, root, child, _line(data, k, line), out)


def _join(key: str, part: str) -> str:
    return f"{key}.{part}" if key else part


def _line(container: Any, k: Any, default: int) -> int:
    return line_of(container, k) if isinstance(container, LineDict | LineList) else default
