"""VIZ=1: record every graph_rewrite pass and write the graphs before and after as one HTML file."""

from __future__ import annotations

import atexit
import html
import os
import tempfile

from jit.common.helpers import VIZ
from jit.ir.uop import UOp

_records: list[tuple[str, str, str, int, int]] = []
_path: str | None = None


def record(name: str, before: UOp, after: UOp) -> None:
    """Remember one pass (only when VIZ is set); the file is rewritten after each pass."""
    if not VIZ:
        return
    _records.append((name, repr(before), repr(after), len(before.toposort()), len(after.toposort())))
    write()


def to_dot(root: UOp) -> str:
    """Graphviz text of a UOp graph, one node per distinct UOp."""
    ids = {u: i for i, u in enumerate(root.toposort())}
    lines = ["digraph uops {", "  rankdir=BT; node [shape=box, fontname=monospace];"]
    for u, i in ids.items():
        arg = "" if u.arg is None else html.escape(str(u.arg))[:60].replace('"', "'")
        lines.append(f'  n{i} [label="{u.op.name}\\n{u.dtype!r}\\n{arg}"];')
        lines.extend(f"  n{ids[s]} -> n{i};" for s in u.src)
    lines.append("}")
    return "\n".join(lines)


def write() -> str:
    """Write the HTML report and return its path (printed once)."""
    global _path
    first = _path is None
    if _path is None:
        _path = os.path.join(tempfile.gettempdir(), f"drivepack_viz_{os.getpid()}.html")
    parts = ["<!doctype html><meta charset=utf-8><title>drivepack VIZ</title>",
             "<style>body{font-family:sans-serif} pre{background:#f4f4f4;padding:6px;overflow:auto;max-height:40em}"
             " .row{display:flex;gap:1em} .row>div{flex:1;min-width:0}</style>",
             f"<h1>drivepack rewrite passes ({len(_records)})</h1>"]
    for i, (name, before, after, nb, na) in enumerate(_records):
        parts.append(f"<details><summary>{i}: {html.escape(name)} ({nb} → {na} nodes)</summary><div class=row>"
                     f"<div><h3>before</h3><pre>{html.escape(before)}</pre></div>"
                     f"<div><h3>after</h3><pre>{html.escape(after)}</pre></div></div></details>")
    with open(_path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    if first:
        print(f"VIZ: writing rewrite passes to {_path}")
        atexit.register(write)
    return _path
