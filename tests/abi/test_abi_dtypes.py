"""Half-precision and 8-bit float inputs and outputs in ABI records: names, sizes, inference from ONNX, the
plain-data form and runtime validation (an ml_dtypes array for its dtype, nothing else of the same width)."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from abi.diff import diff
from abi.errors import AbiError
from abi.infer import infer_abi
from abi.records import DTYPES, Abi, OutputSpec, TensorSpec, is_float, itemsize, numpy_dtype
from abi.validate import validate, validate_packed

# ABI name, ONNX elem type, numpy type, bytes per element
CASES = [
    ("float16", TensorProto.FLOAT16, np.float16, 2),
    ("bfloat16", TensorProto.BFLOAT16, ml_dtypes.bfloat16, 2),
    ("float8_e4m3fn", TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 1),
    ("float8_e4m3fnuz", TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, 1),
    ("float8_e5m2", TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2, 1),
    ("float8_e5m2fnuz", TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, 1),
]
IDS = [c[0] for c in CASES]
SHAPE = (1, 4, 8)


def identity_model(elem: int, shape: tuple[int, ...] = SHAPE):
    vi = helper.make_tensor_value_info("features_buffer", elem, list(shape))
    out = helper.make_tensor_value_info("outputs", elem, list(shape))
    graph = helper.make_graph([helper.make_node("Identity", ["features_buffer"], ["outputs"])], "g", [vi], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def same_width_others(name: str) -> list[np.dtype]:
    """Every other ABI dtype of the same width: the arrays a careless caller would pass."""
    width = itemsize(name)
    return [numpy_dtype(d) for d in DTYPES if d != name and itemsize(d) == width]


@pytest.mark.parametrize("name, elem, np_type, size", CASES, ids=IDS)
def test_names_sizes_and_kinds(name: str, elem: int, np_type: type, size: int) -> None:
    assert name in DTYPES and itemsize(name) == size and is_float(name)
    assert numpy_dtype(name) == np.dtype(np_type)
    spec = TensorSpec("x", name, (3, 5))
    assert spec.byte_size == 15 * size and spec.strides == (5 * size, size)
    assert not is_float("uint16") and not is_float("int8")


@pytest.mark.parametrize("name, elem, np_type, size", CASES, ids=IDS)
def test_record_round_trip(name: str, elem: int, np_type: type, size: int) -> None:
    abi = Abi((TensorSpec("features_buffer", name, SHAPE),),
              (OutputSpec("outputs", name, (1, 32), (("hidden_state", 0, 16), ("plan", 16, 32))),))
    d = json.loads(json.dumps(abi.to_dict()))
    assert d["inputs"][0]["dtype"] == name and d["outputs"][0]["byte_size"] == 32 * size
    assert Abi.from_dict(d) == abi


@pytest.mark.parametrize("name, elem, np_type, size", CASES, ids=IDS)
def test_infer_from_onnx(name: str, elem: int, np_type: type, size: int) -> None:
    abi = infer_abi(identity_model(elem))
    (spec,), (out,) = abi.inputs, abi.outputs
    assert (spec.dtype, spec.byte_size, out.dtype, out.byte_size) == (name, 32 * size, name, 32 * size)
    assert spec.history is not None  # features_buffer keeps its meaning whatever its dtype


def test_infer_refuses_other_onnx_types_by_name() -> None:
    with pytest.raises(AbiError) as e:
        infer_abi(identity_model(TensorProto.COMPLEX64))
    assert "got onnx elem_type 14 (COMPLEX64)" in str(e.value)
    assert e.value.errors[0].field == "dtype"


def test_retyped_half_inputs_are_breaking() -> None:
    old, new = infer_abi(identity_model(TensorProto.FLOAT16)), infer_abi(identity_model(TensorProto.BFLOAT16))
    kinds = {(c.io, c.kind, c.old, c.new, c.severity) for c in diff(old, new)}
    assert kinds == {("input", "retyped", "float16", "bfloat16", "breaking"),
                     ("output", "retyped", "float16", "bfloat16", "breaking")}


@pytest.mark.parametrize("name, elem, np_type, size", CASES, ids=IDS)
def test_validate_accepts_its_dtype_and_refuses_others(name: str, elem: int, np_type: type, size: int) -> None:
    abi = Abi((TensorSpec("features_buffer", name, SHAPE),))
    good = np.linspace(-1, 1, 32, dtype=np.float32).astype(np_type).reshape(SHAPE)
    validate({"features_buffer": good}, abi)
    for other in [*same_width_others(name), np.dtype(np.float32)]:
        bad = np.zeros(SHAPE, other)
        with pytest.raises(AbiError) as e:
            validate({"features_buffer": bad}, abi)
        assert f"features_buffer: dtype expected {name}, got {other}" in str(e.value)
    # the packed form checks values with the same dtype: the record's bytes read back as finite
    validate_packed({"inputs": good.tobytes()}, abi)


@pytest.mark.parametrize("name, elem, np_type, size", CASES, ids=IDS)
def test_validate_finds_nan(name: str, elem: int, np_type: type, size: int) -> None:
    abi = Abi((TensorSpec("features_buffer", name, SHAPE),))
    arr = np.zeros(SHAPE, np_type)
    arr[0, 1, 2] = np.nan
    with pytest.raises(AbiError) as e:
        validate({"features_buffer": arr}, abi)
    assert "1 NaN and 0 inf (first at flat index 10)" in str(e.value)
    with pytest.raises(AbiError) as e:
        validate_packed({"inputs": arr.tobytes()}, abi)
    assert e.value.errors[0].field == "values"
    validate({"features_buffer": arr}, abi, reject_nonfinite=False)


def test_bfloat16_array_for_a_float16_input_is_refused() -> None:
    abi = Abi((TensorSpec("x", "float16", (4,)),))
    with pytest.raises(AbiError) as e:
        validate({"x": np.zeros(4, ml_dtypes.bfloat16)}, abi)
    assert str(e.value) == "x: dtype expected float16, got bfloat16"
