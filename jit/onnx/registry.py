"""The ONNX handler registry and what a handler sees: ``onnx_op``, ``OpContext``, ``Value``, attribute decoding.

Handlers in ``jit/onnx/ops/`` import this module to register themselves; the loader imports it to look them
up. It knows the model only through ``GraphRunner`` (what ``OnnxModel`` offers a handler), so nothing here
imports the loader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import helper, numpy_helper

from jit.common.dtype import DType, from_numpy
from jit.common.errors import UnsupportedOp
from jit.frontend.tensor import Tensor
from jit.onnx.validate import OnnxError, external_tensor_bytes


# --- values --------------------------------------------------------------------------------------------
@dataclass
class Value:
    """A graph value: a lazy Tensor, host data known at load time, or both."""

    tensor: Tensor | None = None
    host: np.ndarray | None = None
    # a constant of the model (initializer, Constant, folded shape arithmetic), not data the caller passed
    const: bool = False
    # computable at load from constants and the host data the caller passed (a Range bound read from a
    # `size` input); a capture passes placeholders, so there only constants are known
    known: bool = False
    # float16 compute (OnnxModel(float16=True)): float32 host data becomes a float16 Tensor on the device,
    # while handlers that read the host data (shapes, scales) still see it in full precision
    half: bool = False

    def as_tensor(self, device: str | None = None) -> Tensor:
        if self.tensor is None:
            assert self.host is not None
            host = self.host.astype(np.float16) if self.half and self.host.dtype == np.float32 else self.host
            if self.const and host.size == 1 and host.dtype.kind in "biuf":
                # a one-element constant of the model is a CONST in the kernels that read it, not a buffer:
                # loads become immediates, and the symbolic pass can fold it (``x / 128`` is an exact multiply)
                value = host.reshape(()).item()
                self.tensor = Tensor.full(host.shape, value, from_numpy(host.dtype), device=device)
            else:
                self.tensor = Tensor(host, device=device)
        return self.tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return self.host.shape if self.host is not None else self.as_tensor().shape

    @property
    def dtype(self) -> DType:
        if self.host is None:
            return self.as_tensor().dtype
        return from_numpy(np.dtype(np.float16) if self.half and self.host.dtype == np.float32 else self.host.dtype)


Handler = Callable[["OpContext"], Any]
# ops whose output is not a function of their inputs: never treated as constants
NONDETERMINISTIC = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli",
                              "Multinomial"})
OPS: dict[str, Handler] = {}


# op key -> attribute -> values no handler can lower; checked for every node at load, before any call
UNSUPPORTED_ATTRIBUTES: dict[str, dict[str, frozenset[Any]]] = {}


def unsupported_attribute(op: str, attribute: str, *values: Any) -> None:
    """Declare attribute values of ``op`` that fail at load (the handler may still refuse more at call time)."""
    UNSUPPORTED_ATTRIBUTES.setdefault(op, {})[attribute] = frozenset(values)


def op_key(node: onnx.NodeProto) -> str:
    """``Conv`` for the default domain, ``ai.onnx.ml.Binarizer`` for others."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def onnx_op(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for one or more op types: ``"Conv"`` (default domain) or ``"ai.onnx.ml.Binarizer"``."""
    def register(fn: Handler) -> Handler:
        for n in names:
            OPS[n] = fn
        return fn
    return register


MISSING = object()  # "no default given" (None is a real default)


class GraphRunner(Protocol):
    """The model as a handler sees it: its device, where external data lives, schema defaults, and a way to
    walk a subgraph (If/Loop/Scan bodies)."""

    device: str | None
    base_dir: str | None

    def schema_default(self, op_type: str, opset: int, name: str, domain: str = "") -> Any: ...

    def run_graph(self, graph: onnx.GraphProto, env: dict[str, Value | None]) -> list[Value]: ...


@dataclass
class OpContext:
    """What a handler sees of one node: its inputs, attributes (with spec defaults) and the opset."""

    node: onnx.NodeProto
    inputs: list[Value | None]
    opset: int
    model: GraphRunner
    attrs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Value | None] = field(default_factory=dict)  # outer scope, for If/Loop bodies

    # inputs
    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def t(self, i: int) -> Tensor:
        """Input ``i`` as a Tensor."""
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None:
            raise OnnxError(f"{self.where()}: input {i} expected, got none")
        return v.as_tensor(self.model.device)

    def opt(self, i: int) -> Tensor | None:
        return self.t(i) if self.has(i) else None

    def static(self, i: int, what: str = "") -> np.ndarray:
        """Input ``i`` as host data; it must be known at load (a constant, folded arithmetic, or given data)."""
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None:
            raise OnnxError(f"{self.where()}: input {i} expected, got none")
        return self.host_of(v, f"input {what or i}")

    def host_of(self, v: Value, what: str) -> np.ndarray:
        """Host data of ``v``, which must be known at load (evaluated now if it was computed from known values)."""
        if v.host is None and (v.const or v.known):
            # computed only from known values (a float Range bound, a CastLike'd pad value): evaluate it now
            v.host = v.as_tensor(self.model.device).numpy()
        if v.host is None:
            raise UnsupportedOp(f"{self.describe()} at node {self.node.name!r} (opset {self.opset}): {what} "
                                f"must be a constant known at load, got a computed tensor")
        return v.host

    def static_opt(self, i: int) -> np.ndarray | None:
        return self.static(i) if self.has(i) else None

    # attributes
    def attr(self, name: str, default: Any = MISSING) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if default is not MISSING:
            return default
        spec = self.model.schema_default(self.node.op_type, self.opset, name, self.node.domain)
        if spec is MISSING:
            raise OnnxError(f"{self.where()}: attribute {name!r} is required and missing")
        return spec

    # errors
    def describe(self, **shown: Any) -> str:
        parts = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"{self.node.op_type}({parts})"

    def where(self) -> str:
        return f"{self.node.op_type} at node {self.node.name!r} (opset {self.opset})"

    def unsupported(self, **shown: Any) -> UnsupportedOp:
        return UnsupportedOp(f"{self.describe(**shown)} at node {self.node.name!r} (opset {self.opset})")


def attribute_value(attr: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if attr.type == onnx.AttributeProto.TENSOR:
        return tensor_to_numpy(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def tensor_to_numpy(t: onnx.TensorProto, base_dir: str | None = None) -> np.ndarray:
    if t.data_type == onnx.TensorProto.STRING:
        raise UnsupportedOp(f"tensor {t.name!r}: string tensors are not supported")
    if t.data_location == onnx.TensorProto.EXTERNAL:
        # read through the checked path (inside the model's directory, in range), never numpy_helper's own lookup
        inline = onnx.TensorProto()
        inline.CopyFrom(t)
        del inline.external_data[:]
        inline.data_location = onnx.TensorProto.DEFAULT
        inline.raw_data = external_tensor_bytes(t, base_dir)
        t = inline
    arr = numpy_helper.to_array(t)
    from_numpy(arr.dtype)  # raises DTypeError naming an unsupported element type
    return arr
