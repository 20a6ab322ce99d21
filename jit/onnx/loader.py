"""ONNX frontend: an ONNX model becomes a callable that builds lazy Tensors.

``load_onnx(path | bytes | ModelProto)`` parses with the ``onnx`` package (which never evaluates anything
here), validates the model (``validate.py``: opsets, node arity, single assignment, order, sizes, external
data) and returns an ``OnnxModel``. Calling it with named inputs (numpy arrays or Tensors) walks the graph
once, node by node, through the op handlers registered in ``jit/onnx/ops/`` (``jit/onnx/registry.py``);
every op computes through Tensor ops, i.e. as kernels on the target, except the few whose output shape depends
on data (``jit/onnx/host_ops.py``), which compute on the host and are recorded. Integer shape arithmetic
(``Shape -> Gather -> Concat -> Reshape``) is folded with numpy while the graph is walked (``fold.py``), so
the lazy graph never contains it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

import jit.onnx.ops  # noqa: F401  registers the handlers
from jit.common.dtype import DType, dtypes, from_numpy
from jit.common.errors import DrivepackError, DTypeError, UnsupportedOp
from jit.frontend.tensor import Tensor
from jit.ir.provenance import tag_new
from jit.onnx.fold import try_fold
from jit.onnx.host_ops import HOST_OPS, HostNode
from jit.onnx.registry import (
    MISSING,
    NONDETERMINISTIC,
    OPS,
    UNSUPPORTED_ATTRIBUTES,
    OnnxError,
    OpContext,
    Value,
    attribute_value,
    op_key,
    tensor_to_numpy,
)
from jit.onnx.validate import parse_model, read_model_digest, validate_model
from targets.registry import Device


# --- the model -----------------------------------------------------------------------------------------
class OnnxModel:
    """A loaded ONNX model; call it with named inputs to get named lazy output Tensors.

    ``float16=True`` computes what the model computes in float32 in float16 instead (openpilot's compile3
    ``FLOAT16=1``): float32 weights and constants become float16 Tensors, float32 inputs are cast on entry, every
    float32 a node produces is cast to float16, and each graph output is cast back to its declared dtype, so the
    model's I/O contract is unchanged. Host-side reads (shapes, scales) keep full precision.
    """

    def __init__(self, model: onnx.ModelProto, base_dir: str | None = None, device: str | None = None,
                 float16: bool = False, source_digest: str | None = None) -> None:
        self.proto = model
        self.device = device
        self.float16 = float16
        self.base_dir = base_dir
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        self.opset = self.opsets.get("", 1)
        graph = model.graph
        self.initializers: dict[str, np.ndarray] = {t.name: tensor_to_numpy(t, base_dir) for t in graph.initializer}
        # what the model computes, as bytes: the SHA-256 of the serialized model it was parsed from (None when it
        # came as a ModelProto), then each external tensor's; jit/capture_cache.py keys its captures by it
        self.content_digest: str | None = None
        if source_digest is not None:
            h = hashlib.sha256(source_digest.encode())
            for t in graph.initializer:
                if t.data_location == onnx.TensorProto.EXTERNAL:
                    arr = np.ascontiguousarray(self.initializers[t.name])
                    h.update(f"\n{t.name}\n".encode())
                    h.update(hashlib.sha256(arr.reshape(-1).view(np.uint8)).digest())
            self.content_digest = h.hexdigest()
        self.input_names = [i.name for i in graph.input if i.name not in self.initializers]
        self.output_names = [o.name for o in graph.output]
        self.metadata = {p.key: p.value for p in model.metadata_props}
        self._schema_defaults: dict[tuple[str, int, str, str], Any] = {}
        # the nodes that computed on the host during the last call (jit/onnx/host_ops.py)
        self.host_nodes: list[HostNode] = []
        self._check_ops(graph)

    def restore_host_nodes(self, pairs: list[list[str]]) -> None:
        """``host_nodes`` as a capture of this model recorded them ([node, op] pairs): a capture replayed from the
        capture cache (jit/capture_cache.py) ran no node itself."""
        self.host_nodes = [HostNode(node, op) for node, op in pairs]

    def _check_ops(self, graph: onnx.GraphProto) -> None:
        for node in graph.node:
            if op_key(node) not in OPS:
                raise UnsupportedOp(f"{op_key(node)} at node {node.name!r} (opset {self.opset}): "
                                    f"no handler for this op")
            refused = UNSUPPORTED_ATTRIBUTES.get(op_key(node), {})
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    self._check_ops(a.g)
                elif a.name in refused and attribute_value(a) in refused[a.name]:
                    raise UnsupportedOp(f"{node.op_type}({a.name}={attribute_value(a)!r}) at node {node.name!r} "
                                        f"(opset {self.opset})")

    def schema_default(self, op_type: str, opset: int, name: str, domain: str = "") -> Any:
        key = (op_type, opset, name, domain)
        if key not in self._schema_defaults:
            value: Any = MISSING
            try:
                schema = onnx.defs.get_schema(op_type, opset, "" if domain == "ai.onnx" else domain)
                spec = schema.attributes.get(name)
                if spec is not None and spec.default_value.type != onnx.AttributeProto.UNDEFINED:
                    value = attribute_value(spec.default_value)
                elif spec is not None and not spec.required:
                    value = None
            except onnx.defs.SchemaError:
                pass
            self._schema_defaults[key] = value
        return self._schema_defaults[key]

    @property
    def input_specs(self) -> dict[str, tuple[DType | None, tuple[int | str, ...]]]:
        """Declared dtype and shape (ints, or names for symbolic dims) of each graph input."""
        return {n: spec for n, spec in _value_specs(self.proto.graph.input).items() if n not in self.initializers}

    def __call__(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Tensor]:
        given = {**(inputs or {}), **kwargs}
        missing = [n for n in self.input_names if n not in given]
        extra = [n for n in given if n not in self.input_names and n not in self.initializers]
        if missing or extra:
            raise OnnxError(f"inputs: expected {self.input_names}, missing {missing}, unexpected {extra}")
        self.host_nodes = []
        env: dict[str, Value | None] = {"": None}
        for name, arr in self.initializers.items():
            env[name] = Value(host=arr, const=True, half=self.float16)
        for name, data in given.items():
            env[name] = self._demoted(_input_value(name, data))
        # a model loaded without a device computes where its inputs are (a capture's placeholders on its target)
        device = self.device or next((t.device for t in given.values() if isinstance(t, Tensor)), None)
        with Device.default_as(device):  # op handlers create constants without naming a device
            outputs = self.run_graph(self.proto.graph, env)
            result = {n: v.as_tensor(device) for n, v in zip(self.output_names, outputs, strict=True)}
            if self.float16:
                declared = {n: dt for n, (dt, _) in _value_specs(self.proto.graph.output).items()}
                result = {n: t.cast(declared[n]) if declared.get(n) is not None and t.dtype != declared[n] else t
                          for n, t in result.items()}
            return result

    def _demoted(self, v: Value) -> Value:
        """``v`` as float16 compute sees it: float32 host data marked half, a float32 Tensor cast to float16."""
        if not self.float16:
            return v
        if v.host is not None:
            v.half = True
        if v.tensor is not None and v.tensor.dtype == dtypes.float32:
            v.tensor = v.tensor.cast(dtypes.float16)
        return v

    def run_graph(self, graph: onnx.GraphProto, env: dict[str, Value | None]) -> list[Value]:
        """Walk ``graph``'s nodes in order; ``env`` maps value names (outer scopes included) to values."""
        for t in graph.initializer:  # a subgraph (If/Loop body) may carry constants of its own
            if t.name not in env:
                env[t.name] = Value(host=tensor_to_numpy(t, self.base_dir), const=True, known=True, half=self.float16)
        for node in graph.node:
            ins = []
            for name in node.input:
                if name not in env:
                    raise OnnxError(f"{node.op_type} at node {node.name!r}: input {name!r} is not defined earlier")
                ins.append(env[name])
            outs = self.run_node(node, ins, env)
            # what this node's ops newly built is this node's: kernels are named by it (jit/ir/provenance.py)
            tag_new((v.tensor.uop for v in outs if v is not None and v.tensor is not None), node_label(node))
            for name, v in zip(node.output, outs, strict=False):
                if name:
                    env[name] = v
        result = []
        for o in graph.output:
            v = env.get(o.name)
            if v is None:
                raise OnnxError(f"graph output {o.name!r} was never computed")
            result.append(v)
        return result

    def run_node(self, node: onnx.NodeProto, ins: list[Value | None], env: dict[str, Value | None]) -> list[Value]:
        domain = "" if node.domain == "ai.onnx" else node.domain
        ctx = OpContext(node, ins, self.opsets.get(domain, 1), self,
                        {a.name: attribute_value(a) for a in node.attribute}, env)
        folded = try_fold(ctx)
        if folded is not None:
            return folded
        host = HOST_OPS.get(op_key(node))
        on_host = host is not None and host.applies(ctx)
        if host is not None and on_host:
            host.check(ctx)
        try:
            out = OPS[op_key(node)](ctx)
        except DrivepackError:
            raise
        except Exception as e:  # a handler bug or a malformed node: name the node, not a deep frame
            raise OnnxError(f"{ctx.where()}: {type(e).__name__}: {e}") from e
        if on_host:
            self.host_nodes.append(HostNode(node.name, op_key(node)))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        deterministic = node.op_type not in NONDETERMINISTIC
        from_consts = deterministic and all(v is None or v.const for v in ins)
        from_known = deterministic and all(v is None or v.const or v.known for v in ins)
        return [self._demoted(o if isinstance(o, Value) else Value(host=o, const=True) if isinstance(o, np.ndarray)
                              else Value(tensor=o, const=from_consts, known=from_known)) for o in outs]


def node_label(node: onnx.NodeProto) -> str:
    """How a node is named in kernel provenance: its name, else ``OpType:first_output`` (names are optional)."""
    return node.name or f"{node.op_type}:{node.output[0] if node.output else '?'}"


def _value_specs(values: Any) -> dict[str, tuple[DType | None, tuple[int | str, ...]]]:
    """Declared dtype (None where drivepack has no such dtype) and shape of graph inputs or outputs."""
    out = {}
    for i in values:
        tt = i.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
        try:
            dt: DType | None = from_numpy(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (DTypeError, KeyError, TypeError):
            dt = None
        out[i.name] = (dt, dims)
    return out


def _input_value(name: str, data: Any) -> Value:
    if isinstance(data, Tensor):
        return Value(tensor=data)
    arr = np.asarray(data)
    try:
        from_numpy(arr.dtype)
    except DTypeError as e:
        raise OnnxError(f"{name}: {e}") from None
    # given host data stays visible so ops that need a static argument (a Reshape shape) can read it
    return Value(host=arr, known=True)


def load_onnx(src: str | os.PathLike[str] | bytes | onnx.ModelProto, device: str | None = None,
              base_dir: str | os.PathLike[str] | None = None, float16: bool = False) -> OnnxModel:
    """Parse and validate (``jit/onnx/validate.py``) an ONNX model from a path, serialized bytes, or a ModelProto.

    External data is read from the model file's directory (``base_dir`` for bytes or a ModelProto; without
    one such a model may not name external data), never from the current directory.
    """
    digest = None
    if isinstance(src, onnx.ModelProto):
        model = src
        validate_model(model, base_dir)
    elif isinstance(src, (bytes, bytearray)):
        model = parse_model(bytes(src))
        validate_model(model, base_dir)
        digest = hashlib.sha256(src).hexdigest()
    else:
        path = Path(src)
        if not path.exists():
            raise OnnxError(f"model: file {str(path)!r} does not exist")
        model, base, digest = read_model_digest(path)
        base_dir = base
    return OnnxModel(model, None if base_dir is None else str(base_dir), device, float16, digest)
