"""The command buffer format: exact byte round trips, plain JSON, and typed errors for malformed documents."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from jit import DrivepackError, capture
from targets.cmdbuf import Alias, BufferSpec, CmdbufError, CommandBuffer, Dispatch, KernelSpec, Scalar, parse_arena

SCALE_C = "void scale(float* restrict data0, const float* restrict data1, float s) {\n" \
          "  for (int i = 0; i < 4; i++) data0[i] = data1[i] * s;\n}\n"


def scale_cmdbuf(factor: float = 2.5) -> CommandBuffer:
    """A hand-written command buffer: out = (x * factor) * factor through one arena temporary."""
    bits = struct.unpack("<I", struct.pack("<f", factor))[0]
    return CommandBuffer(
        target="CPU", kernels=(KernelSpec("scale", SCALE_C, "scale", "CPU"),),
        dispatches=(Dispatch(0, (1,), None, ("arena:0+16", "input:x"), (Scalar("float32", bits),)),
                    Dispatch(0, (1,), None, ("output:y", "arena:0+16"), (Scalar("float32", bits),))),
        buffers=(BufferSpec("input:x", "float32", (4,), 16), BufferSpec("output:y", "float32", (4,), 16),
                 BufferSpec("arena:0+16", "uint8", (16,), 16)),
        arena_bytes=64, alignment=64, meta={"note": "hand-written"})


def test_handmade_round_trip_is_exact() -> None:
    cb = scale_cmdbuf()
    data = cb.to_bytes()
    back = CommandBuffer.from_bytes(data)
    assert back == cb and back.to_bytes() == data
    doc = json.loads(data)  # plain JSON, nothing executable
    assert doc["format"] == "drivepack-cmdbuf" and doc["version"] == 1
    assert doc["dispatches"][0]["scalars"] == [{"dtype": "float32", "bits": 0x40200000}]


def test_captured_round_trip_is_exact() -> None:
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    from jit import Tensor
    weight = Tensor(w)

    def fn(x: Tensor) -> dict[str, Tensor]:
        return {"y": (x @ weight).relu(), "z": x.sum()}

    cap = capture(fn, {"x": np.ones((2, 3), np.float32)})
    data = cap.cmdbuf.to_bytes()
    back = CommandBuffer.from_bytes(data)
    assert back == cap.cmdbuf and back.to_bytes() == data
    assert [b.binding for b in back.inputs] == ["input:x"]
    assert [b.name for b in back.outputs] == ["y", "z"] and back.outputs[0].shape == (2, 4)
    assert all(k.source and k.entry in k.source and k.target == "CPU" for k in back.kernels)


def test_zeroed_bindings_round_trip_and_are_written_only_when_present() -> None:
    cb = scale_cmdbuf()
    assert "zeroed" not in json.loads(cb.to_bytes())  # a document without them reads the same in older drivepacks
    zeroed = CommandBuffer(cb.target, cb.kernels, cb.dispatches, cb.buffers, cb.arena_bytes, cb.alignment, cb.meta,
                           zeroed=("arena:0+16",))
    data = zeroed.to_bytes()
    assert json.loads(data)["zeroed"] == ["arena:0+16"]
    assert CommandBuffer.from_bytes(data) == zeroed and CommandBuffer.from_bytes(data).to_bytes() == data


def aliased_cmdbuf() -> CommandBuffer:
    """``scale_cmdbuf`` with a second output ``h``: y's bytes at shape (2, 2)."""
    cb = scale_cmdbuf()
    return CommandBuffer(cb.target, cb.kernels, cb.dispatches,
                         cb.buffers[:2] + (BufferSpec("output:h", "float32", (2, 2), 16),) + cb.buffers[2:],
                         cb.arena_bytes, cb.alignment, cb.meta, aliases=(Alias("output:h", "output:y"),))


def test_aliases_round_trip_and_are_written_only_when_present() -> None:
    assert "aliases" not in json.loads(scale_cmdbuf().to_bytes())
    cb = aliased_cmdbuf()
    data = cb.to_bytes()
    assert json.loads(data)["aliases"] == [{"binding": "output:h", "source": "output:y"}]
    assert CommandBuffer.from_bytes(data) == cb and CommandBuffer.from_bytes(data).to_bytes() == data
    assert [b.name for b in cb.outputs] == ["y", "h"] and [b.name for b in cb.computed_outputs] == ["y"]


def _with_alias(d: dict, alias: dict, dtype: str = "float32", shape: tuple[int, ...] = (2, 2)) -> None:
    d["buffers"].append({"binding": "output:h", "dtype": dtype, "shape": list(shape),
                         "nbytes": int(np.prod(shape)) * np.dtype(dtype).itemsize, "init": None, "image": None})
    d["aliases"] = [alias]


def test_views_and_lookup() -> None:
    cb = scale_cmdbuf()
    assert cb.buffer("output:y").nbytes == 16
    assert cb.buffer("arena:0+16").arena_offset == 0 and parse_arena("arena:128+8") == (128, 8)
    with pytest.raises(CmdbufError, match="binding: expected one of the buffer table, got 'input:q'"):
        cb.buffer("input:q")


def _doc() -> dict:
    return json.loads(scale_cmdbuf().to_bytes())


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(version=2), "cmdbuf.version: expected 1, got 2"),
    (lambda d: d.update(format="onnx"), "cmdbuf.format: expected 'drivepack-cmdbuf', got 'onnx'"),
    (lambda d: d.pop("kernels"), "cmdbuf.kernels: expected a value, got none"),
    (lambda d: d["dispatches"][0].update(kernel=3), "dispatches[0].kernel: expected 0..0, got 3"),
    (lambda d: d["dispatches"][1]["bindings"].__setitem__(1, "weight:9"),
     "dispatches[1].bindings: expected entries of the buffer table, got 'weight:9'"),
    (lambda d: d["buffers"][0].update(nbytes=12), "input:x: nbytes expected 16 (float32 (4,)), got 12"),
    (lambda d: d.update(arena_bytes=8), "arena:0+16: end expected <= arena_bytes 8, got 16"),
    (lambda d: d["buffers"][2].update(binding="arena:8+16"), "arena:8+16: offset expected a multiple of 64, got 8"),
    (lambda d: d["buffers"][0].update(dtype="float128"), "input:x: dtype expected a drivepack dtype name"),
    (lambda d: d["buffers"][0].update(binding="tmp:x"), "buffers: binding expected <input|output|weight|state|arena>"),
    (lambda d: d["dispatches"][0].update(global_size=[0]), "dispatches[0].global_size: expected positive sizes"),
    (lambda d: d["dispatches"][0].update(kernel="0"), "cmdbuf.dispatches[0].kernel: expected int, got str"),
    (lambda d: d["dispatches"].pop(1), "output:y: expected a dispatch writing it, got none"),
    (lambda d: d["kernels"].append(d["kernels"][0]), "kernels: names expected unique, got ['scale', 'scale']"),
    (lambda d: d.update(zeroed="arena:0+16"), "cmdbuf.zeroed: expected list, got str"),
    (lambda d: d.update(zeroed=["output:y"]),
     "zeroed[0]: expected an arena binding of the buffer table, got 'output:y'"),
    (lambda d: d.update(zeroed=["arena:0+16", "arena:0+16"]), "zeroed[1]: expected each binding once"),
    (lambda d: (d["buffers"].append({"binding": "arena:0+8", "dtype": "uint8", "shape": [8], "nbytes": 8,
                                     "init": None, "image": None}), d.update(zeroed=["arena:0+16"])),
     "zeroed[0]: expected bytes no other arena binding holds, got arena:0+16 overlapping arena:0+8"),
    (lambda d: _with_alias(d, {"binding": "output:h", "source": "input:x"}),
     "aliases[0].source: expected an output binding a dispatch computes, got 'input:x'"),
    (lambda d: _with_alias(d, {"binding": "output:h", "source": "output:h"}),
     "aliases[0].source: expected an output binding a dispatch computes, got 'output:h'"),
    (lambda d: _with_alias(d, {"binding": "input:x", "source": "output:y"}),
     "aliases[0].binding: expected an output binding of the buffer table, got 'input:x'"),
    (lambda d: _with_alias(d, {"binding": "output:y", "source": "output:h"}),
     "aliases[0].binding: expected an output no dispatch binds, got 'output:y' bound"),
    (lambda d: _with_alias(d, {"binding": "output:h", "source": "output:y"}, shape=(2, 3)),
     "aliases[0].source: expected float32 of 24 bytes (the alias's), got float32 of 16 bytes"),
    (lambda d: _with_alias(d, {"binding": "output:h", "source": "output:y"}, dtype="int32"),
     "aliases[0].source: expected int32 of 16 bytes (the alias's), got float32 of 16 bytes"),
    (lambda d: (_with_alias(d, {"binding": "output:h", "source": "output:y"}), d["aliases"].append(d["aliases"][0])),
     "aliases[1].binding: expected each output once, got 'output:h' again"),
    (lambda d: _with_alias(d, {"binding": "output:h"}), "cmdbuf.aliases[0].source: expected a value, got none"),
    (lambda d: d["buffers"].append({"binding": "output:h", "dtype": "float32", "shape": [4], "nbytes": 16,
                                    "init": None, "image": None}),
     "output:h: expected a dispatch writing it, got none"),
])
def test_malformed_documents_are_typed_errors(edit, message: str) -> None:
    doc = _doc()
    edit(doc)
    with pytest.raises(CmdbufError) as e:
        CommandBuffer.from_bytes(json.dumps(doc).encode())
    assert message in str(e.value) and isinstance(e.value, DrivepackError)


def test_non_json_bytes_are_refused() -> None:
    with pytest.raises(CmdbufError, match="cmdbuf: expected UTF-8 JSON"):
        CommandBuffer.from_bytes(b"\x80\x04\x95 pickle")
    with pytest.raises(CmdbufError, match="cmdbuf: expected an object, got list"):
        CommandBuffer.from_bytes(b"[]")
