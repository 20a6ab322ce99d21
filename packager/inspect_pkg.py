"""What is inside a package, for people and tools: manifest, entries, and per entry its reference, ABI table,
kernels and command buffer; as text, JSON or a Graphviz graph (one cluster per entry; dispatches as boxes, buffers
as ellipses; an edge into a dispatch is a read, out of it the write: a dispatch's first binding is the buffer its
kernel writes)."""

from __future__ import annotations

import json
from typing import Any

from packager.package import Entry, Package
from packager.verify import describe_reference


def kernel_rows(entry: Entry) -> list[dict[str, Any]]:
    """Per kernel: name, the launch dims of its dispatches (distinct), dispatch count, FLOPs and bytes."""
    rows = []
    for i, (k, listed) in enumerate(zip(entry.cmdbuf.kernels, entry.manifest.kernels, strict=True)):
        ds = [d for d in entry.cmdbuf.dispatches if d.kernel == i]
        launches = sorted({(tuple(d.global_size), tuple(d.local_size) if d.local_size else None) for d in ds},
                          key=str)
        rows.append({"name": k.name, "dispatches": len(ds), "flops": listed.flops, "bytes": listed.bytes,
                     "launches": [{"global": list(g), "local": list(lo) if lo else None} for g, lo in launches],
                     "source_bytes": len(k.source.encode())})
    return rows


def abi_rows(entry: Entry) -> list[dict[str, Any]]:
    rows = [{"io": "input", "name": s.name, "dtype": s.dtype, "shape": list(s.shape), "bytes": s.byte_size,
             "buffer": s.buffer, "offset": s.offset} for s in entry.abi.inputs]
    rows += [{"io": "output", "name": o.name, "dtype": o.dtype, "shape": list(o.shape), "bytes": o.byte_size,
              "buffer": None, "offset": None} for o in entry.abi.outputs]
    return rows


def signature_json(pkg: Package) -> dict[str, Any]:
    """Who signed the package and whether that key is trusted here (``trusted_by``: why; null: not trusted)."""
    sig = pkg.signature
    return {"signed": bool(sig and sig.fingerprint), "fingerprint": sig.fingerprint if sig else None,
            "trusted": bool(sig and sig.trusted), "trusted_by": sig.trusted_by if sig else None}


def entry_json(entry: Entry) -> dict[str, Any]:
    cb, m = entry.cmdbuf, entry.manifest
    return {"name": entry.name, "role": m.role, "model": m.raw["model"], "reference": m.reference,
            "kernel_counts": m.kernel_counts.to_json(),
            "accuracy": list(m.accuracy), "abi": abi_rows(entry), "metadata": dict(entry.abi.metadata),
            "kernels": kernel_rows(entry),
            "command_buffer": {"target": cb.target, "arena_bytes": cb.arena_bytes, "alignment": cb.alignment,
                               "buffers": [{"binding": b.binding, "dtype": b.dtype, "shape": list(b.shape),
                                            "nbytes": b.nbytes} for b in cb.buffers],
                               "dispatches": [{"index": i, "kernel": cb.kernels[d.kernel].name,
                                               "global_size": list(d.global_size),
                                               "local_size": list(d.local_size) if d.local_size else None,
                                               "bindings": list(d.bindings), "writes": d.writes}
                                              for i, d in enumerate(cb.dispatches)],
                               "aliases": [{"binding": a.binding, "source": a.source} for a in cb.aliases]}}


def inspect_json(pkg: Package) -> dict[str, Any]:
    return {"path": str(pkg.path), "size": pkg.size, "manifest": pkg.manifest.raw, "signature": signature_json(pkg),
            "entries": [entry_json(pkg.entry(n)) for n in pkg.entries]}


def inspect_text(pkg: Package) -> list[str]:
    m, raw = pkg.manifest, pkg.manifest.raw
    out = [f"{pkg.path}: {pkg.size} bytes, format {raw['format']} v{raw['format_version']}, drivepack "
           f"{m.drivepack_version}",
           f"signature: {pkg.signature.describe() if pkg.signature else 'not checked'}",
           f"vehicle {m.vehicle_name}; target {m.target_device}; emulated dtypes "
           f"{raw['target']['emulated_dtypes'] or 'none'}; settings {json.dumps(raw['settings'], sort_keys=True)}",
           f"entries ({len(pkg.entries)}): {', '.join(pkg.entries)}"]
    for name in pkg.entries:
        out += ["", *_entry_text(pkg.entry(name))]
    return out


def _entry_text(entry: Entry) -> list[str]:
    m = entry.manifest
    out = [f"entry {entry.name}: model {m.model_name} sha256 {m.model_sha256[:16]}...; role {m.role} (budget mean "
           f"{m.budget_mean_ms:g} ms, max {m.budget_max_ms:g} ms)",
           f"  golden reference: {describe_reference(m.reference)}",
           f"  kernels: {m.kernel_counts.text()}",
           f"  arena {m.arena_bytes} bytes, {len(entry.weights)} weights "
           f"({sum(w.nbytes for w in entry.weights.values())} bytes), {m.golden_sets} golden sets", "", "  ABI:"]
    for r in abi_rows(entry):
        where = f" buffer {r['buffer']}+{r['offset']}" if r["buffer"] else ""
        out.append(f"    {r['io']:6s} {r['name']:24s} {r['dtype']:8s} {str(tuple(r['shape'])):20s}{where}")
    for key, value in entry.abi.metadata:  # the model's own metadata_props (vision_model, policy_model, ...)
        shown = value if len(value) <= 60 else value[:57] + "..."
        out.append(f"    metadata {key} = {shown!r}")
    out += ["", f"  {'kernel':40s} {'disp':>4s} {'MFLOP':>9s} {'MB':>8s}  launch (global / local)"]
    for r in kernel_rows(entry):
        launch = "; ".join(f"{tuple(x['global'])} / {tuple(x['local']) if x['local'] else '-'}"
                           for x in r["launches"])
        out.append(f"  {r['name']:40s} {r['dispatches']:4d} {r['flops'] / 1e6:9.2f} {r['bytes'] / 1e6:8.2f}  "
                   f"{launch}")
    out += ["", "  command buffer:"]
    for i, d in enumerate(entry.cmdbuf.dispatches):
        out.append(f"    {i:3d} {entry.cmdbuf.kernels[d.kernel].name:40s} {' '.join(d.bindings)}")
    for a in entry.cmdbuf.aliases:
        out.append(f"        {'alias (copied by the replay)':40s} {a.binding} = {a.source}")
    return out


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def inspect_dot(pkg: Package) -> str:
    """A Graphviz digraph of dispatches and buffers (see the module docstring); node ids are prefixed with the
    entry's name (``vision/input:input_imgs``, ``vision/d0``): entries never share a buffer."""
    lines = [f"digraph {_q(pkg.path.name)} {{", "  rankdir=LR;", "  node [fontname=monospace];"]
    for name in pkg.entries:
        cb = pkg.entry(name).cmdbuf
        lines += [f"  subgraph {_q(f'cluster_{name}')} {{", f"    label={_q(name)};"]
        for b in cb.buffers:
            label = _q(f"{b.binding}\n{b.dtype} {tuple(b.shape)}")
            lines.append(f"    {_q(f'{name}/{b.binding}')} [shape=ellipse, label={label}];")
        for i, d in enumerate(cb.dispatches):
            node, label = _q(f"{name}/d{i}"), _q(f"#{i} {cb.kernels[d.kernel].name}")
            lines.append(f"    {node} [shape=box, label={label}];")
            for b in d.written:
                lines.append(f"    {node} -> {_q(f'{name}/{b}')};")
            for b in d.bindings[d.writes:]:
                lines.append(f"    {_q(f'{name}/{b}')} -> {node};")
        for a in cb.aliases:
            lines.append(f"    {_q(f'{name}/{a.source}')} -> {_q(f'{name}/{a.binding}')} [style=dashed, label=alias];")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
