"""The model's string metadata kept in the ABI record (bounded, informational in abi-diff), and the plain-data
form's strictness about the type of every field."""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, helper

from abi.diff import INFO, diff, interface_changes, is_breaking
from abi.errors import AbiError
from abi.infer import infer_abi
from abi.records import MAX_METADATA, MAX_METADATA_KEY, MAX_METADATA_VALUE, Abi, OutputSpec, TensorSpec

BASE = Abi((TensorSpec("x", "float32", (1, 8)),), (OutputSpec("outputs", "float32", (1, 8), (("a", 0, 4),)),))


def model(props: dict[str, str]):
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    out = helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [1, 8])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["outputs"])], "g", [vi], [out])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(m, props)
    return m


def with_meta(**meta: str) -> Abi:
    return Abi(BASE.inputs, BASE.outputs, tuple(sorted(meta.items())))


def plain(abi: Abi) -> dict:
    return json.loads(json.dumps(abi.to_dict()))


# --- metadata ---------------------------------------------------------------------------------------------------

def test_infer_keeps_string_props_but_not_the_ones_it_reads() -> None:
    props = {"vision_model": "driving_vision", "policy_model": "driving_policy", "output_slices": '{"a": [0, 4]}',
             "drivepack_abi": "{}", "model_checkpoint": ""}
    abi = infer_abi(model(props))
    assert abi.metadata == (("model_checkpoint", ""), ("policy_model", "driving_policy"),
                            ("vision_model", "driving_vision"))
    d = plain(abi)
    assert d["version"] == 2 and d["metadata"] == {"model_checkpoint": "", "policy_model": "driving_policy",
                                                   "vision_model": "driving_vision"}
    assert Abi.from_dict(d) == abi
    assert infer_abi(model({})).metadata == ()


def test_infer_refuses_oversized_metadata_naming_it() -> None:
    with pytest.raises(AbiError) as e:
        infer_abi(model({"notes": "x" * (MAX_METADATA_VALUE + 1)}))
    assert str(e.value) == (f"<metadata>: metadata.notes expected at most {MAX_METADATA_VALUE} characters, "
                            f"got {MAX_METADATA_VALUE + 1} characters")


@pytest.mark.parametrize("metadata, field", [
    (tuple((f"k{i}", "v") for i in range(MAX_METADATA + 1)), "metadata"),
    ((("k" * (MAX_METADATA_KEY + 1), "v"),), "metadata key"),
    ((("", "v"),), "metadata key"),
    ((("k", 5),), "metadata"),
    ((("k", "v", "w"),), "metadata"),
    ((("k", "v"), ("k", "w")), "metadata.'k'"),
    ({"k": "v"}, "metadata"),
])
def test_record_metadata_is_bounded(metadata: object, field: str) -> None:
    with pytest.raises(AbiError) as e:
        Abi(BASE.inputs, BASE.outputs, metadata)  # type: ignore[arg-type]
    assert field in {x.field for x in e.value.errors}, e.value.errors
    assert "\n" not in str(e.value.errors[0])


@pytest.mark.parametrize("meta", [[["k", "v"]], {"k": 5}, {"k": None}, "k=v"])
def test_from_dict_metadata_must_be_strings(meta: object) -> None:
    d = plain(BASE)
    d["metadata"] = meta
    with pytest.raises(AbiError) as e:
        Abi.from_dict(d)
    assert e.value.errors[0].field == "metadata"


def test_diff_reports_metadata_as_information() -> None:
    old = with_meta(vision_model="v1", policy_model="p1", gone="x")
    new = with_meta(vision_model="v2", policy_model="p1", fresh="y" * 500)
    changes = diff(old, new)
    assert [(c.kind, c.io, c.name, c.severity) for c in changes] == [
        ("metadata", "model", "fresh", INFO), ("metadata", "model", "gone", INFO),
        ("metadata", "model", "vision_model", INFO)]
    assert (changes[2].old, changes[2].new) == ("v1", "v2")
    assert changes[0].old == "absent" and "(500 characters)" in changes[0].new and changes[1].new == "absent"
    assert not is_breaking(changes) and interface_changes(changes) == []
    retyped = Abi((TensorSpec("x", "float16", (1, 8)),), new.outputs, new.metadata)
    mixed = diff(old, retyped)
    assert is_breaking(mixed) and [c.kind for c in interface_changes(mixed)] == ["retyped"]
    assert mixed[-1].severity == INFO  # information last, after the interface


# --- strictness of the plain-data form ---------------------------------------------------------------------------

@pytest.mark.parametrize("mutate, where, field", [
    (lambda d: d["outputs"][0].update(name=5), "<unnamed>", "name"),
    (lambda d: d["outputs"][0].update(name=""), "<unnamed>", "name"),
    (lambda d: d["outputs"][0].update(name=None), "<unnamed>", "name"),
    (lambda d: d["inputs"][0].update(name=5), "<unnamed>", "name"),
    (lambda d: d["inputs"][0].update(name=["x"]), "<unnamed>", "name"),
    (lambda d: d["inputs"][0].update(dtype=5), "x", "dtype"),
    (lambda d: d["outputs"][0].update(dtype=["float32"]), "outputs", "dtype"),
    (lambda d: d["inputs"][0].update(buffer=5), "x", "buffer"),
    (lambda d: d["inputs"][0].update(device=0), "x", "device"),
    (lambda d: d["outputs"][0].update(slices={5: [0, 4]}), "outputs", "output_slices"),
    (lambda d: d["outputs"][0].update(slices={"": [0, 4]}), "outputs", "output_slices"),
    (lambda d: d["outputs"][0].update(slices={"a": [False, True]}), "outputs", "output_slices"),
    (lambda d: d["outputs"][0].update(shape=[True, 8]), "outputs", "shape"),
    (lambda d: d["inputs"][0].update(shape=[True, 8]), "x", "shape"),
    (lambda d: d["inputs"][0].update(byte_size=32.0), "x", "byte_size"),
    (lambda d: d["outputs"][0].update(byte_size=32.0), "outputs", "byte_size"),
    (lambda d: d["inputs"][0].update(strides=[32.0, 4]), "x", "strides"),
    (lambda d: d["inputs"][0].update(offset=False), "x", "offset"),
])
def test_from_dict_checks_every_field_type(mutate, where: str, field: str) -> None:
    """Regression: a non-string output name (and other mistyped fields) used to be accepted."""
    d = plain(BASE)
    mutate(d)
    with pytest.raises(AbiError) as e:
        Abi.from_dict(d)
    assert (where, field) in {(x.input, x.field) for x in e.value.errors}, e.value.errors


def test_records_refuse_mistyped_fields_directly() -> None:
    with pytest.raises(AbiError) as e:
        OutputSpec(7, "float32", (4,))  # type: ignore[arg-type]
    assert str(e.value) == "<unnamed>: name expected a non-empty string, got 7"
    with pytest.raises(AbiError) as e:
        OutputSpec("o", "float32", (4,), [("a", 0, 1)])  # type: ignore[arg-type]
    assert e.value.errors[0].field == "output_slices"
    with pytest.raises(AbiError) as e:
        Abi([TensorSpec("x", "float32", (1,))])  # type: ignore[arg-type]
    assert e.value.errors[0].field == "inputs"
    with pytest.raises(AbiError) as e:
        Abi((), ("outputs",))  # type: ignore[arg-type]
    assert e.value.errors[0].field == "outputs"


def test_a_version_1_record_is_refused_by_its_version() -> None:
    d = plain(BASE)
    d.pop("metadata")
    d["version"] = 1
    with pytest.raises(AbiError) as e:
        Abi.from_dict(d)
    assert str(e.value) == "<abi>: version expected 2, got 1"
    d["metadata"] = {}
    for version in (True, 2.0, "2"):  # equal to an int in Python, or its text: still not the version
        d["version"] = version
        with pytest.raises(AbiError) as e:
            Abi.from_dict(d)
        assert e.value.errors[0].field == "version"
