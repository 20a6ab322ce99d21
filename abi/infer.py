"""Infer a model's ABI from its ONNX graph: bytes from the graph inputs, meaning from names and metadata.

Meaning comes, in increasing priority, from (1) openpilot's naming conventions (``CAMERA_INPUTS``,
``HISTORY_INPUTS``), (2) the model's own ``drivepack_abi`` metadata_props entry (JSON: input name ->
overrides) and (3) overrides passed in (a vehicle profile's ``model_overrides`` for the role). Inputs are
packed in graph-input order into one host buffer; ``output_slices`` comes from the model's metadata_props
(JSON, or openpilot's base64 pickle read without executing it: abi.pickled_slices); the other string props
(``vision_model``, ``policy_model``...) are kept in the record as ``metadata``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from abi import records
from abi.errors import AbiError, issue
from abi.layout import pack_offsets
from abi.pickled_slices import read_output_slices
from abi.records import DTYPES, Abi, CameraSemantics, HistorySemantics, OutputSpec, TensorSpec, itemsize
from jit.onnx.validate import read_model, validate_model

# openpilot's input names. Camera inputs: which camera feeds them. The dmonitoring model's `input_img` is taken
# as one luma plane (1440x960 crop of the driver camera, as in openpilot's dmonitoringmodeld: an assumption).
CAMERA_INPUTS = {"input_imgs": "road", "img": "road", "big_input_imgs": "wide", "big_img": "wide",
                 "input_img": "driver"}
# History inputs: (1, length, width) buffers of past samples, oldest first, one sample every SKIP frames.
HISTORY_INPUTS = ("features_buffer", "desire", "desire_pulse", "prev_desired_curv")
DEFAULT_SKIP = 4
METADATA_KEY = "drivepack_abi"
SLICES_KEY = "output_slices"
OVERRIDE_KEYS = {"camera", "history", "alignment", "device"}
# by enum, not through onnx.helper: older onnx releases map BFLOAT16 to its float32 storage type
_T = onnx.TensorProto
ONNX_DTYPES = {_T.BOOL: "bool", _T.UINT8: "uint8", _T.INT8: "int8", _T.UINT16: "uint16", _T.INT16: "int16",
               _T.UINT32: "uint32", _T.INT32: "int32", _T.INT64: "int64", _T.UINT64: "uint64",
               _T.FLOAT16: "float16", _T.FLOAT: "float32", _T.DOUBLE: "float64", _T.BFLOAT16: "bfloat16",
               _T.FLOAT8E4M3FN: "float8_e4m3fn", _T.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
               _T.FLOAT8E5M2: "float8_e5m2", _T.FLOAT8E5M2FNUZ: "float8_e5m2fnuz"}


def infer_abi(model: onnx.ModelProto | str | Path, *, overrides: Mapping[str, Any] | None = None,
              alignment: int = 64, buffer: str = "inputs", device: str = "host",
              base_dir: str | Path | None = None) -> Abi:
    """The ABI of ``model`` (a ModelProto or a path to an .onnx file; weights are not read), after the same
    validation the loader does (jit/onnx/validate.py: OnnxError); ``base_dir``: a ModelProto's directory,
    where its external data lives."""
    if isinstance(model, onnx.ModelProto):
        proto = model
        validate_model(proto, base_dir)
    else:
        proto, _ = read_model(model)
    props = {p.key: p.value for p in proto.metadata_props}
    # layers applied in order: the model's own metadata, then the caller's (profile) overrides
    layers = [_metadata_overrides(props), dict(overrides or {})]
    all_over: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for name, extra in layer.items():
            if not isinstance(extra, Mapping):
                raise AbiError([issue(str(name), "overrides", "a mapping of fields", repr(extra))])
            all_over.setdefault(name, {}).update({k: v for k, v in extra.items() if k not in ("camera", "history")})
    inits = {i.name for i in proto.graph.initializer}
    graph_inputs = [vi for vi in proto.graph.input if vi.name not in inits]
    names = {vi.name for vi in graph_inputs}
    unknown = sorted({n for layer in layers for n in layer} - names)
    if unknown:
        raise AbiError([issue(n, "overrides", f"an input of the model ({', '.join(sorted(names))})", "no such input")
                        for n in unknown])
    errs = []
    raw: list[tuple[str, str, tuple[int, ...]]] = []
    for vi in graph_inputs:
        try:
            raw.append((vi.name, *_tensor_type(vi)))
        except AbiError as e:
            errs += e.errors
    if errs:
        raise AbiError(errs)
    aligns = {n: int(all_over.get(n, {}).get("alignment", alignment)) for n, _, _ in raw}
    offsets = pack_offsets([(n, _nbytes(dt, sh), aligns[n]) for n, dt, sh in raw])
    inputs = []
    for name, dtype, shape in raw:
        over = all_over.get(name, {})
        bad = sorted({k for layer in layers for k in layer.get(name, {})} - OVERRIDE_KEYS)
        if bad:
            errs += [issue(name, f"overrides.{k}", "one of " + ", ".join(sorted(OVERRIDE_KEYS)), "unknown key")
                     for k in bad]
            continue
        cam, hist = conventional_semantics(name, dtype, shape)
        try:
            for layer in layers:
                cam = _merge(cam, layer.get(name, {}).get("camera", ...), name, "camera")
                hist = _merge(hist, layer.get(name, {}).get("history", ...), name, "history")
            inputs.append(TensorSpec(name, dtype, shape, buffer, offsets[name], aligns[name],
                                     over.get("device", device), cam, hist))
        except AbiError as e:
            errs += e.errors
    outputs = []
    try:
        outputs = _outputs(proto, props)
    except AbiError as e:
        errs += e.errors
    metadata = _metadata(props)
    errs += records.metadata_issues(metadata)
    if errs:
        raise AbiError(errs)
    return Abi(tuple(inputs), tuple(outputs), metadata)


def conventional_semantics(name: str, dtype: str, shape: tuple[int, ...]
                           ) -> tuple[CameraSemantics | None, HistorySemantics | None]:
    """Meaning implied by openpilot's input names (None where the name says nothing)."""
    if name in CAMERA_INPUTS:
        cam = CAMERA_INPUTS[name]
        uint8 = dtype == "uint8"
        if len(shape) == 4 and shape[1] % 6 == 0:
            return CameraSemantics(cam, "yuv420_6ch", shape[1] // 6, DEFAULT_SKIP, "oldest_first", (0, 255),
                                   uint8), None
        return CameraSemantics(cam, "luma", 1, 1, "oldest_first", (0, 255), uint8), None
    if name in HISTORY_INPUTS and len(shape) >= 2:
        return None, HistorySemantics(shape[1], DEFAULT_SKIP, "oldest_first")
    return None, None


def _merge(base: Any, over: Any, name: str, kind: str) -> Any:
    """Apply a partial override (a mapping of fields, or None to drop the semantics) to ``base``."""
    if over is ...:
        return base
    if over is None:
        return None
    if not isinstance(over, Mapping):
        raise AbiError([issue(name, f"overrides.{kind}", "a mapping of fields or null", repr(over))])
    cls, to_dict = ((CameraSemantics, records.camera_to_dict) if kind == "camera"
                     else (HistorySemantics, records.history_to_dict))
    fields = to_dict(base) if base is not None else {}
    fields.update(over)
    if "value_range" in fields:
        fields["value_range"] = tuple(fields["value_range"])
    try:
        return cls(**fields)
    except TypeError as e:
        raise AbiError([issue(name, f"overrides.{kind}", f"the fields of {cls.__name__}", str(e))]) from None
    except AbiError as e:
        raise AbiError([issue(name, f"{kind}.{x.field}", x.expected, x.actual) for x in e.errors]) from None


def _metadata_overrides(props: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    if METADATA_KEY not in props:
        return {}
    try:
        data = json.loads(props[METADATA_KEY])
    except json.JSONDecodeError as e:
        raise AbiError([issue("<model>", f"metadata_props.{METADATA_KEY}", "JSON", f"invalid JSON ({e})")]) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise AbiError([issue("<model>", f"metadata_props.{METADATA_KEY}", "an object input -> overrides",
                              type(data).__name__)])
    return data


def _tensor_type(vi: onnx.ValueInfoProto) -> tuple[str, tuple[int, ...]]:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise AbiError([issue(vi.name, "type", "a tensor", vi.type.WhichOneof("value") or "nothing")])
    dtype = ONNX_DTYPES.get(tt.elem_type)
    if dtype is None:
        try:
            kind = onnx.TensorProto.DataType.Name(tt.elem_type)
        except ValueError:
            kind = "unknown"
        raise AbiError([issue(vi.name, "dtype", "one of " + ", ".join(DTYPES),
                              f"onnx elem_type {tt.elem_type} ({kind})")])
    dims = []
    for i, d in enumerate(tt.shape.dim):
        if not d.HasField("dim_value") or d.dim_value <= 0:
            raise AbiError([issue(vi.name, f"shape[{i}]", "a fixed positive size", d.dim_param or "unknown")])
        dims.append(int(d.dim_value))
    return dtype, tuple(dims)


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * itemsize(dtype)


def _outputs(proto: onnx.ModelProto, props: Mapping[str, str]) -> list[OutputSpec]:
    slices: list[tuple[str, int, int]] = []
    if SLICES_KEY in props:
        slices = [(n, a, b) for n, (a, b) in read_output_slices(props[SLICES_KEY]).items()]
    outs = []
    graph_outputs = list(proto.graph.output)
    for vo in graph_outputs:
        dtype, shape = _tensor_type(vo)
        # openpilot: one flat vector sliced by name; the slices belong to the output named "outputs" (or the only one)
        mine = vo.name == "outputs" or len(graph_outputs) == 1
        outs.append(OutputSpec(vo.name, dtype, shape, tuple(slices) if mine else ()))
    return outs


def _metadata(props: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The model's other string props (openpilot's ``vision_model``, ``policy_model``, ``model_checkpoint``...),
    sorted by key so that two reads of one model give equal records."""
    return tuple(sorted((k, v) for k, v in props.items() if k not in (SLICES_KEY, METADATA_KEY)))
