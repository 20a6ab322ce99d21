"""openpilot's pickled ``output_slices``: read by interpreting opcodes, never by loading; hostile pickles are
refused with one typed line and nothing runs."""

from __future__ import annotations

import base64
import builtins
import json
import os
import pickle
import random
import re
import struct
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from abi.errors import AbiError
from abi.infer import infer_abi
from abi.pickled_slices import FIELD, MAX_SLICES, MAX_TEXT_CHARS, read_output_slices
from packager.samples import VISION_OUTPUT_SLICES

PROTOCOLS = (2, 3, 4, 5)
SLICES = {"plan": (0, 4955), "lane_lines": (4955, 5483), "lead": (5483, 5585), "far": (2**40, 2**40 + 7),
          "meta": (5585, 5640)}


def pickled(obj: object, protocol: int) -> str:
    """What openpilot's metadata writer stores: base64 of ``pickle.dumps`` (dumps runs no __reduce__ result)."""
    return base64.b64encode(pickle.dumps(obj, protocol=protocol)).decode()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def as_slices(d: dict[str, tuple[int, int]]) -> dict[str, slice]:
    return {k: slice(a, b, None) for k, (a, b) in d.items()}


def refused(text: str) -> AbiError:
    with pytest.raises(AbiError) as e:
        read_output_slices(text)
    err = e.value
    assert len(err.errors) == 1 and "\n" not in str(err), str(err)
    assert err.errors[0].field.startswith(("metadata_props.output_slices", "output_slices")), str(err)
    return err


class Touch:
    """Pickles as a call of os.system: dumps records the callable's name, only a load would call it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return os.system, (f"touch {self.path}",)


# --- what openpilot writes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_protocols_round_trip(protocol: int) -> None:
    assert read_output_slices(pickled(as_slices(SLICES), protocol)) == SLICES


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_many_slices_use_long_memo_indices(protocol: int) -> None:
    # 300 slices: more than 256 memo entries, so protocols 2 and 3 switch to LONG_BINPUT / LONG_BINGET
    many = {f"s{i}": (i * 3, i * 3 + 3) for i in range(300)}
    assert read_output_slices(pickled(as_slices(many), protocol)) == many
    most = {f"s{i}": (i, i + 1) for i in range(MAX_SLICES)}
    assert read_output_slices(pickled(as_slices(most), protocol)) == most


def test_protocol_2_names_the_python_2_builtin() -> None:
    raw = pickle.dumps({"a": slice(0, 1, None)}, protocol=2)
    assert b"c__builtin__\nslice\n" in raw
    assert read_output_slices(b64(raw)) == {"a": (0, 1)}


def test_json_slices() -> None:
    assert read_output_slices(json.dumps({k: list(v) for k, v in SLICES.items()})) == SLICES
    assert read_output_slices('  {"a": [0, 4]}\n') == {"a": (0, 4)}


@pytest.mark.parametrize("text, needle", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "invalid base64"),
    ('{"a": [0, true]}', "[start, stop]"),
    ('{"a": [0]}', "[start, stop]"),
    ('{"a": [4, 2]}', "0 <= start < stop"),
    ('{"a": [-1, 2]}', "0 <= start < stop"),
    ('{"a": [0, ' + "9" * 5000 + "]}", "invalid JSON"),
    ('{"": [0, 1]}', "slice names"),
])
def test_bad_json_slices(text: str, needle: str) -> None:
    assert needle in str(refused(text))


def test_infer_reads_pickled_slices_and_keeps_string_metadata() -> None:
    vis = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1387])]
    out = helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [1, 1387])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["outputs"])], "g", vis, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    props = {"output_slices": pickled(as_slices(VISION_OUTPUT_SLICES), 4), "vision_model": "driving_vision",
             "policy_model": "driving_policy", "model_checkpoint": "a/b/c"}
    helper.set_model_props(model, props)
    abi = infer_abi(model)
    assert abi.outputs[0].slice_map() == VISION_OUTPUT_SLICES
    assert abi.metadata == (("model_checkpoint", "a/b/c"), ("policy_model", "driving_policy"),
                            ("vision_model", "driving_vision"))
    helper.set_model_props(model, {"output_slices": pickled({"plan": Touch(Path("/nonexistent/x"))}, 4)})
    with pytest.raises(AbiError) as e:
        infer_abi(model)
    assert e.value.errors[0].field == FIELD and "posix system" in str(e.value)


# --- hostile pickles ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_os_system_is_refused_and_runs_nothing(protocol: int, tmp_path: Path) -> None:
    sentinel = tmp_path / "SENTINEL"
    for obj in (Touch(sentinel), {"plan": Touch(sentinel)}, {"plan": slice(0, 1), "x": Touch(sentinel)}):
        err = refused(pickled(obj, protocol))
        assert f"'{os.system.__module__} system'" in str(err) and "at byte" in str(err)
        assert "global builtins slice" in str(err)
    assert not sentinel.exists()


def test_loaders_and_imports_are_never_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"called with {args!r}")

    class NoUnpickler:
        def __init__(self, *args: object, **kwargs: object) -> None:
            boom(*args)

        find_class = boom

    texts = [pickled(as_slices(SLICES), p) for p in PROTOCOLS]
    hostile = [pickled({"plan": Touch(tmp_path / "SENTINEL")}, p) for p in PROTOCOLS]
    real_import = builtins.__import__
    for name in ("loads", "load"):
        monkeypatch.setattr(pickle, name, boom)
    monkeypatch.setattr(pickle, "Unpickler", NoUnpickler)
    monkeypatch.setattr(pickle.Unpickler, "find_class", boom)
    errors = []
    builtins.__import__ = boom  # by hand, not monkeypatch: pytest itself imports between a test and its teardown
    try:
        results = [read_output_slices(t) for t in texts]
        for t in hostile:
            try:
                read_output_slices(t)
            except AbiError as e:
                errors.append(str(e))
    finally:
        builtins.__import__ = real_import
    assert results == [SLICES] * len(PROTOCOLS)
    assert len(errors) == len(hostile) and all("system" in e for e in errors)
    assert not (tmp_path / "SENTINEL").exists()


@pytest.mark.parametrize("global_", [b"builtins\neval\n", b"builtins\ngetattr\n", b"os\nsystem\n",
                                     b"builtins\nslice2\n", b"__builtin__\n__import__\n"])
def test_other_globals_are_refused(global_: bytes) -> None:
    raw = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01c" + global_ + b"q\x02K\x00K\x01N\x87q\x03Rq\x04s."
    module, attr = global_.decode().split()
    assert f"'{module} {attr}' at byte 13" in str(refused(b64(raw)))


def test_stack_global_of_a_non_string_is_refused() -> None:
    raw = b"\x80\x04K\x01K\x02\x93."
    assert "STACK_GLOBAL on two strings" in str(refused(b64(raw)))


@pytest.mark.parametrize("body, name", [
    (b"]", "'EMPTY_LIST'"), (b"b", "'BUILD'"), (b"\x81", "'NEWOBJ'"), (b"\x82\x01", "'EXT1'"),
    (b"Q", "'BINPERSID'"), (b"P1\n", "'PERSID'"), (b"i", "'INST'"), (b"o", "'OBJ'"), (b"0", "'POP'"),
    (b"G" + struct.pack(">d", 1.5), "'BINFLOAT'"), (b"C\x01a", "'SHORT_BINBYTES'"), (b"\x88", "'NEWTRUE'"),
    (b"\xff", "unknown opcode byte 0xff"), (b"\x00", "unknown opcode byte 0x00"),
])
def test_unknown_and_unsupported_opcodes(body: str, name: str) -> None:
    msg = str(refused(b64(b"\x80\x04}" + body + b".")))
    assert f"got {name} at byte 3" in msg and "pickle opcode one of PROTO" in msg


def test_no_protocol_or_a_wrong_one() -> None:
    for p in (0, 1):
        assert "PROTO (protocol 2 to 5) first" in str(refused(pickled(as_slices(SLICES), p)))
    assert "protocol 2 to 5" in str(refused(b64(b"\x80\x06}.")))
    assert "protocol 2 to 5" in str(refused(b64(b"\x80\x02\x80\x02}.")))


def test_deep_nesting_is_refused_early() -> None:
    nested: object = slice(0, 1)
    for _ in range(40):
        nested = (nested,)
    assert "TUPLE1 items int or None" in str(refused(pickled({"plan": nested}, 4)))
    # hand-built: 10,000 TUPLE1 around a None, and 10,000 MARKs: refused at the second TUPLE1 / fifth MARK
    assert "at byte 4" in str(refused(b64(b"\x80\x02N" + b"\x85" * 10_000 + b".")))
    assert "at most 4 open MARKs" in str(refused(b64(b"\x80\x02" + b"(" * 10_000 + b".")))
    # a stack that only grows: ints without a MARK
    assert "a stack of at most" in str(refused(b64(b"\x80\x02" + b"K\x01" * 20_000 + b".")))


def test_huge_ints_are_refused_undecoded() -> None:
    million = b"\x80\x02}X\x01\x00\x00\x00aL" + b"9" * 10**6 + b"L\n."
    assert f"at most {MAX_TEXT_CHARS} characters" in str(refused(b64(million)))
    # within the size bound: LONG (text) and LONG4 are refused by opcode, before their digits are read
    assert "got 'LONG' at byte" in str(refused(b64(b"\x80\x02}X\x01\x00\x00\x00aL" + b"9" * 20_000 + b"L\n.")))
    assert "got 'LONG4' at byte" in str(refused(b64(b"\x80\x02}\x8b" + struct.pack("<i", 30_000) + b"\x7f" * 30_000
                                                    + b".")))
    # LONG1 is what protocol 2+ writes for wide ints: read, but bounded to 64 bits
    wide = pickled({"a": slice(0, 2**70, None)}, 2)
    assert "an int within +-2**63" in str(refused(wide))
    assert "an int within +-2**63" in str(refused(b64(b"\x80\x02\x8a\xff" + b"\x7f" * 255 + b".")))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_truncation_is_refused(protocol: int) -> None:
    raw = pickle.dumps(as_slices(SLICES), protocol=protocol)
    for n in range(len(raw)):
        refused(b64(raw[:n]))
    assert "nothing after STOP" in str(refused(b64(raw + b"N")))


@pytest.mark.parametrize("text", ["not base64!!", "abc", "é", "gAJ9"[:-1], "gAJ9\n\nLg=="])
def test_bad_base64(text: str) -> None:
    assert "base64" in str(refused(text)) or "pickle" in str(refused(text))


@pytest.mark.parametrize("obj, needle", [
    ({"plan": 5}, "a slice"), ({"plan": "x"}, "a slice"), ({"plan": (0, 1)}, "a slice"), ({"plan": None}, "a slice"),
    ({"plan": slice(0, 5, 2)}, "step: None"), ({"plan": slice(None, 5)}, "start: int"),
    ({"plan": slice(5, 2)}, "0 <= start < stop"), ({"plan": slice(-1, 2)}, "0 <= start < stop"),
    ({"plan": slice(3, 3)}, "0 <= start < stop"), ({1: slice(0, 1)}, "dict keys str"),
    ({"plan": [slice(0, 1)]}, "'EMPTY_LIST'"), ({"plan": {"a": slice(0, 1)}}, "a second EMPTY_DICT"),
    ({"plan": slice(0.5, 2)}, "'BINFLOAT'"), ({"plan": slice(True, 2)}, "'NEWTRUE'"),
    ({"plan": {1}}, ("'EMPTY_SET'", "builtin__ set'", "'builtins set'")),
    ([slice(0, 1)], "'EMPTY_LIST'"), (slice(0, 1), "the dict on the stack at STOP"), ("x" * 300, "at STOP"),
    ({"x" * 300: slice(0, 1)}, "slice names of 1 to 256"), ({"plan": b"x"}, ("'SHORT_BINBYTES'", "'_codecs encode'")),
])
def test_non_slice_values(obj: object, needle: str | tuple[str, ...]) -> None:
    for p in PROTOCOLS:  # protocols 2 and 3 write sets and bytes as calls of a global
        msg = str(refused(pickled(obj, p)))
        assert any(n in msg for n in ((needle,) if isinstance(needle, str) else needle)), msg


def test_too_many_duplicate_and_dangling() -> None:
    assert f"at most {MAX_SLICES} slices" in str(refused(pickled({f"s{i}": slice(i, i + 1) for i in range(1001)}, 4)))
    one = b"X\x01\x00\x00\x00a" + b"c__builtin__\nslice\n" + b"K\x00K\x01N\x87R"
    assert "'a' twice" in str(refused(b64(b"\x80\x02}(" + one + one + b"u.")))
    assert "a memo index stored before" in str(refused(b64(b"\x80\x02}h\x07.")))
    assert "REDUCE on the global builtins slice" in str(refused(b64(b"\x80\x02}K\x00K\x01N\x87R.")))
    assert "key/value pairs" in str(refused(b64(b"\x80\x02}(X\x01\x00\x00\x00au.")))
    assert "the dict below the items" in str(refused(b64(b"\x80\x02NX\x01\x00\x00\x00aNs.")))


def test_random_corruptions_read_or_refuse(tmp_path: Path) -> None:
    rng = random.Random(23)
    seeds = [pickle.dumps(as_slices(SLICES), protocol=p) for p in PROTOCOLS]
    for _ in range(3000):
        raw = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        try:
            got = read_output_slices(b64(bytes(raw)))
        except AbiError as e:
            assert len(e.errors) >= 1
        else:
            assert all(isinstance(k, str) and 0 <= a < b for k, (a, b) in got.items())


def test_no_abi_module_can_unpickle() -> None:
    """The runtime's ABI code holds no way to load a pickle at all, whatever path a file takes through it."""
    for path in sorted((Path(__file__).resolve().parents[2] / "abi").glob("*.py")):
        text = path.read_text()
        for pattern in (r"\bimport _?pickle\b", r"\bfrom _?pickle\b", r"Unpickler", r"find_class", r"pickle\.load",
                        r"\beval\(", r"\bexec\(", r"__import__", r"import_module"):
            assert not re.search(pattern, text), (path.name, pattern)
