"""Checks an untrusted ONNX model must pass before anything walks it or allocates for it.

One validation for every way in (``load_onnx``, ABI inference, packaging): the file is not empty and parses,
every opset is one the handlers implement (``SUPPORTED_OPSETS``), every node's input and output counts fit its
schema, no value is written twice, every input is defined before the node that reads it (no cycles), every
declared tensor is at most ``MAX_TENSOR_ELEMENTS`` elements, ``onnx.checker`` passes, and external data
stays inside the model file's own directory, within the file it names. Each failure is a one-line
``OnnxError`` naming the node or tensor and the field. Only ``onnx``'s parser and checker run here (no
handler, no Tensor), so importing this module is cheap and cycle-free.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable
from pathlib import Path

import onnx
from onnx import helper, numpy_helper

from jit.common.errors import DrivepackError, UnsupportedOp


class OnnxError(DrivepackError, ValueError):
    """A malformed model, a bad input, or a failure inside one node (named in the message)."""


# domain -> (oldest, newest) opset the handlers in jit/onnx/ops/ implement: the default domain up to the newest
# opset of onnx 1.23 (the schemas and node tests the handlers were checked against), ai.onnx.ml up to 5
SUPPORTED_OPSETS: dict[str, tuple[int, int]] = {"": (1, 28), "ai.onnx.ml": (1, 5), "ai.onnx.preview": (1, 1),
                                                "ai.onnx.preview.training": (1, 1)}
# deprecated default-domain ops the handlers implement anyway (GroupNormalization-18's per-group scale)
DEPRECATED_KEPT = frozenset({"GroupNormalization"})
# the largest tensor (elements) a declared shape may describe: refused before anything is allocated for it
MAX_TENSOR_ELEMENTS = 1 << 30
# protobuf cannot parse a message of 2 GiB or more; larger weights must be external data
MAX_MODEL_BYTES = (1 << 31) - 1
# subgraph (If/Loop/Scan body) nesting
MAX_GRAPH_DEPTH = 32
# ops whose shape-like input, when a constant, says how many elements the output has
_SHAPE_INPUTS = {"ConstantOfShape": 0, "Expand": 1}


def supported_opsets() -> str:
    return ", ".join(f"{d or 'ai.onnx'} {lo}..{hi}" for d, (lo, hi) in SUPPORTED_OPSETS.items())


def parse_model(data: bytes, where: str = "model") -> onnx.ModelProto:
    """A ModelProto from the bytes of an .onnx file (not yet validated: see ``validate_model``)."""
    if not data:
        raise OnnxError(f"{where}: expected a serialized ONNX model, got an empty file (0 bytes)")
    if len(data) > MAX_MODEL_BYTES:
        raise OnnxError(f"{where}: size expected <= {MAX_MODEL_BYTES} bytes (protobuf's limit; store weights as "
                        f"external data), got {len(data)}")
    try:
        model = onnx.load_from_string(bytes(data))
    except Exception as e:  # protobuf's DecodeError and friends: a truncated or foreign file
        raise OnnxError(f"{where}: expected a serialized ONNX model, cannot parse ONNX "
                        f"({type(e).__name__}: {_first_line(e)})") from None
    if not model.HasField("graph") or not model.opset_import:
        raise OnnxError(f"{where}: expected an ONNX model with a graph and opset_import, got "
                        f"{'no graph' if not model.HasField('graph') else 'no opset_import'} (truncated or not ONNX)")
    return model


def read_model(path: str | os.PathLike[str]) -> tuple[onnx.ModelProto, Path]:
    """Parse and validate the model file at ``path``; returns it with its directory (where external data lives)."""
    model, base, _ = read_model_digest(path)
    return model, base


def read_model_digest(path: str | os.PathLike[str]) -> tuple[onnx.ModelProto, Path, str]:
    """``read_model``, and the SHA-256 of the file's bytes (what a cache of the model's captures is keyed by)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise OnnxError(f"model: expected a readable .onnx file, got {str(p)!r}: {e.strerror}") from None
    model = parse_model(data, str(p))
    validate_model(model, p.parent, str(p), serialized=data)
    return model, p.parent, hashlib.sha256(data).hexdigest()


def checked_model(data: bytes, path: str | os.PathLike[str]) -> onnx.ModelProto:
    """The model in ``data`` (read from ``path``), validated, with its external data read from ``path``'s
    directory into the proto, so that the result no longer depends on any file or on the current directory."""
    model = parse_model(data, str(path))
    base = Path(path).parent
    validate_model(model, base, str(path), serialized=data)
    for t in _all_initializers(model.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            raw = external_tensor_bytes(t, base)
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            t.raw_data = raw
    return model


def validate_model(model: onnx.ModelProto, base_dir: str | os.PathLike[str] | None, where: str = "model",
                   serialized: bytes | None = None) -> None:
    """Every check of the module docstring; ``base_dir`` is the model file's directory (None: the model came
    from memory, so it may not name external data); ``serialized``: the bytes ``model`` was parsed from, which
    the checker reads instead of serializing the model again (a large model's weights)."""
    opsets = _check_opsets(model, where)
    _check_graph(model.graph, opsets, set(), "graph", where, 0)
    judged = _for_checker(model)
    try:
        onnx.checker.check_model(serialized if judged is model and serialized is not None else judged)
    except Exception as e:  # ValidationError: one multi-line message naming the node
        raise OnnxError(f"{where}: onnx.checker: {_first_line(e)}") from None
    for t in _all_initializers(model.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            external_location(t, base_dir)


def _for_checker(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy the checker can judge without looking at files: graph outputs that leave their shape
    out declare an empty one (the checker insists on one; drivepack computes output shapes itself, and
    onnx.helper builds such models), and external tensors become empty ones (the checker would look for their
    file relative to the current directory; ``external_location`` checks them against the model's)."""
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    kept = [i for i, n in enumerate(model.graph.node) if _deprecated_kept(n, opsets)]
    bare = any(o.type.HasField("tensor_type") and not o.type.tensor_type.HasField("shape") for o in model.graph.output)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in _all_initializers(model.graph))
    if not bare and not external and not kept:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for i in kept:  # its arity was checked against its own schema (_check_arity); attributes by the handler
        node = copy.graph.node[i]
        inputs, outputs = [x for x in node.input if x], list(node.output)
        node.CopyFrom(helper.make_node("Max", inputs, outputs, name=node.name))
    for o in copy.graph.output:
        if o.type.HasField("tensor_type") and not o.type.tensor_type.HasField("shape"):
            o.type.tensor_type.shape.SetInParent()
    for t in _all_initializers(copy.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            del t.external_data[:]
            del t.dims[:]
            t.dims.append(0)
            t.data_location = onnx.TensorProto.DEFAULT
    return copy


def _deprecated_kept(node: onnx.NodeProto, opsets: dict[str, int]) -> bool:
    """A node of a deprecated op the handlers still implement: the checker refuses these outright, onnxruntime
    and the exporters that wrote them do not."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in DEPRECATED_KEPT or len(node.output) != 1:
        return False
    try:
        return bool(onnx.defs.get_schema(node.op_type, opsets.get("", 1)).deprecated)
    except onnx.defs.SchemaError:
        return False


def _check_opsets(model: onnx.ModelProto, where: str) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for o in model.opset_import:
        domain = "" if o.domain == "ai.onnx" else o.domain
        opsets[domain] = o.version
        if domain in SUPPORTED_OPSETS:
            lo, hi = SUPPORTED_OPSETS[domain]
            if not lo <= o.version <= hi:
                raise OnnxError(f"{where}: opset_import[{o.domain or 'ai.onnx'}] expected {lo}..{hi} (drivepack "
                                f"supports {supported_opsets()}), got {o.version}")
    return opsets


def _check_graph(graph: onnx.GraphProto, opsets: dict[str, int], outer: set[str], path: str, where: str,
                 depth: int) -> None:
    if depth > MAX_GRAPH_DEPTH:
        raise OnnxError(f"{where}: {path}: subgraph nesting expected <= {MAX_GRAPH_DEPTH} levels, got more")
    for kind, infos in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for vi in infos:
            _check_value_info(vi, f"{path}.{kind} {vi.name!r}", where)
    for t in graph.initializer:
        _check_elements(t.dims, f"{path}.initializer {t.name!r}", "dims", where)
    defined = set(outer) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    constants = {t.name: t for t in graph.initializer}
    producer: dict[str, str] = {}
    later = {o: (i, n) for i, n in enumerate(graph.node) for o in n.output if o}
    for i, node in enumerate(graph.node):
        label = f"{path}.node[{i}] {node.name!r} ({node.op_type})"
        _check_arity(node, opsets, label, where)
        for name in node.input:
            if name and name not in defined:
                if name in later:
                    j, other = later[name]
                    raise OnnxError(f"{where}: {label}: input {name!r} expected defined before use, got written "
                                    f"later by {path}.node[{j}] {other.name!r} (a cycle or nodes out of "
                                    f"topological order)")
                raise OnnxError(f"{where}: {label}: input {name!r} expected a graph input, initializer or earlier "
                                f"node output, got an undefined name")
        _check_constants(node, constants, label, where)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                _check_elements(a.t.dims, label, f"attribute {a.name}.dims", where)
            subgraphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else \
                list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
            for g in subgraphs:
                _check_graph(g, opsets, defined, f"{label}.{a.name}", where, depth + 1)
        for name in node.output:
            if not name:
                continue
            if name in defined:
                first = producer.get(name)
                by = f"{path}.node[{first}] {graph.node[first].name!r}" if first is not None else \
                    "a graph input or initializer" if name not in outer else "an outer graph"
                raise OnnxError(f"{where}: {label}: output {name!r} expected written once, got also written by {by}")
            defined.add(name)
            producer[name] = i
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        constants[name] = a.t
    seen: set[str] = set()
    for o in graph.output:
        if o.name in seen:
            raise OnnxError(f"{where}: {path}.output {o.name!r}: expected listed once, got a duplicate")
        seen.add(o.name)
        if o.name not in defined:
            raise OnnxError(f"{where}: {path}.output {o.name!r}: expected computed by a node, got never written")


def _check_arity(node: onnx.NodeProto, opsets: dict[str, int], label: str, where: str) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in opsets:
        raise OnnxError(f"{where}: {label}: domain expected one of the model's opset_import "
                        f"({', '.join(d or 'ai.onnx' for d in opsets)}), got {domain or 'ai.onnx'!r}")
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets[domain], domain)
    except onnx.defs.SchemaError:  # before the checker, which would say the same without the node's name
        key = node.op_type if not domain else f"{domain}.{node.op_type}"
        raise UnsupportedOp(f"{key} at node {node.name!r} (opset {opsets[domain]}): onnx defines no such op "
                            f"(in {label})") from None
    n_in, n_out = len(node.input), len(node.output)
    if not schema.min_input <= n_in <= schema.max_input:
        raise OnnxError(f"{where}: {label}: input count expected {_range(schema.min_input, schema.max_input)} "
                        f"(opset {opsets[domain]}), got {n_in}")
    if not schema.min_output <= n_out <= schema.max_output:
        raise OnnxError(f"{where}: {label}: output count expected {_range(schema.min_output, schema.max_output)} "
                        f"(opset {opsets[domain]}), got {n_out}")


def _range(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}..{hi}" if hi < 1 << 30 else f">= {lo}"


def _check_constants(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto], label: str, where: str) -> None:
    """A constant shape fed to ConstantOfShape/Expand may not describe more than MAX_TENSOR_ELEMENTS."""
    i = _SHAPE_INPUTS.get(node.op_type)
    if i is None or len(node.input) <= i or node.input[i] not in constants:
        return
    t = constants[node.input[i]]
    if t.data_type != onnx.TensorProto.INT64 or _count(t.dims) > 64:
        return
    try:
        shape = [int(d) for d in numpy_helper.to_array(t).reshape(-1)] if not t.external_data else []
    except Exception:  # a malformed constant: the checker or the handler names it
        return
    _check_elements(shape, label, f"input {node.input[i]!r} (shape)", where)


def _check_value_info(vi: onnx.ValueInfoProto, label: str, where: str) -> None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return
    dims = vi.type.tensor_type.shape.dim
    _check_elements([d.dim_value for d in dims if d.HasField("dim_value")], label, "shape", where)


def _check_elements(dims: Iterable[int], label: str, field: str, where: str) -> None:
    dims = list(dims)
    for k, d in enumerate(dims):
        if d < 0:
            raise OnnxError(f"{where}: {label}: {field}[{k}] expected >= 0, got {d}")
    n = _count(dims)
    if n > MAX_TENSOR_ELEMENTS:
        raise OnnxError(f"{where}: {label}: {field} {tuple(dims)} expected at most MAX_TENSOR_ELEMENTS="
                        f"{MAX_TENSOR_ELEMENTS} elements, got {n}")


def _count(dims: Iterable[int]) -> int:
    return math.prod(int(d) for d in dims)


def _all_initializers(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                yield from _all_initializers(g)


# --- external data -------------------------------------------------------------------------------------
def external_location(t: onnx.TensorProto, base_dir: str | os.PathLike[str] | None) -> tuple[Path, int, int]:
    """(file, offset, length) of ``t``'s external data, checked: the file lies inside ``base_dir`` (the model
    file's directory; no absolute path, no ``..``, no symlink leading out), exists, and holds exactly the
    tensor's bytes at offset..offset+length."""
    label = f"initializer {t.name!r}"
    entries = {e.key: e.value for e in t.external_data}
    location = entries.get("location", "")
    if base_dir is None:
        raise OnnxError(f"{label}: external_data location {_short(location)} expected a model loaded from a file "
                        f"(external data is read from the model file's directory), got a model from memory")
    if not location:
        raise OnnxError(f"{label}: external_data location expected a file name, got none")
    pure = Path(location)
    if pure.is_absolute() or os.path.isabs(location) or location.startswith(("/", "\\")):
        raise OnnxError(f"{label}: external_data location expected a path relative to the model's directory, "
                        f"got the absolute path {_short(location)}")
    if ".." in Path(location.replace("\\", "/")).parts:
        raise OnnxError(f"{label}: external_data location expected a path inside the model's directory, got "
                        f"{_short(location)} (leaves it through '..')")
    base = Path(base_dir).resolve()
    target = (base / location).resolve()
    if base != target and base not in target.parents:
        raise OnnxError(f"{label}: external_data location expected a file inside the model's directory {str(base)!r},"
                        f" got {_short(location)} (a symlink leading to {_short(str(target))})")
    if not target.is_file():
        raise OnnxError(f"{label}: external_data location {_short(location)} expected an existing file in "
                        f"{str(base)!r}, got {'a directory' if target.exists() else 'no such file'}")
    size = target.stat().st_size
    offset = _int_entry(entries, "offset", 0, label)
    length = _int_entry(entries, "length", size - offset, label)
    if offset > size or offset + length > size:
        raise OnnxError(f"{label}: external_data offset+length expected <= the size of {_short(location)} "
                        f"({size} bytes), got {offset}+{length}")
    want = _expected_nbytes(t)
    if want is not None and length != want:
        raise OnnxError(f"{label}: external_data length expected {want} bytes (dims {tuple(t.dims)}), got {length}")
    return target, offset, length


def external_tensor_bytes(t: onnx.TensorProto, base_dir: str | os.PathLike[str] | None) -> bytes:
    """The raw bytes of ``t``'s external data, read only after ``external_location`` accepted them."""
    path, offset, length = external_location(t, base_dir)
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(length)
    if len(data) != length:  # the file shrank since it was checked
        raise OnnxError(f"initializer {t.name!r}: external_data length expected {length} bytes, got {len(data)}")
    return data


def _int_entry(entries: dict[str, str], key: str, default: int, label: str) -> int:
    if key not in entries:
        return default
    text = entries[key]
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise OnnxError(f"{label}: external_data {key} expected a non-negative integer, got {_short(text)}")
    return int(text)


def _expected_nbytes(t: onnx.TensorProto) -> int | None:
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:  # an unknown element type: the loader refuses it with the dtype named
        return None
    if t.data_type in (onnx.TensorProto.STRING,) or itemsize == 0:
        return None
    bits = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4}.get(t.data_type)
    n = _count(t.dims)
    return (n * bits + 7) // 8 if bits else n * itemsize


def _short(text: str, limit: int = 80) -> str:
    """``text`` quoted, cut to ``limit`` characters: an error message never repeats a whole hostile string."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return _short(lines[0], 200)[1:-1] if lines else type(e).__name__
