"""Command buffer validation against crafted documents: read-only bindings, kernel signatures and stores, live
arena bytes, and the bounds proven before a replay allocates anything."""

from __future__ import annotations

import json

import pytest

from targets.cmdbuf import (
    MAX_BUFFER_BYTES,
    MAX_LAUNCH,
    MAX_RANK,
    BufferSpec,
    CmdbufError,
    CommandBuffer,
    Dispatch,
    KernelSpec,
)
from targets.kernel_params import stored_params

COPY_C = "void copy(float* restrict data0, float* restrict data1) {\n" \
         "  for (int i = 0; i < 8; i++) {\n    float v = *(data1+i);\n    *(data0+i) = v;\n  }\n}\n"


def chain(arena: list[str], source: str = COPY_C) -> CommandBuffer:
    """x -> arena[0] -> arena[1] -> ... -> y, one copy kernel per step."""
    steps = ["input:x", *arena, "output:y"]
    ends = [sum(map(int, a.split(":")[1].split("+"))) for a in arena]
    return CommandBuffer(
        target="CPU", kernels=(KernelSpec("copy", source, "copy", "CPU"),),
        dispatches=tuple(Dispatch(0, (1,), None, (dst, src)) for src, dst in zip(steps, steps[1:], strict=False)),
        buffers=(BufferSpec("input:x", "float32", (8,), 32), BufferSpec("output:y", "float32", (8,), 32),
                 BufferSpec("weight:0", "float32", (8,), 32),
                 *(BufferSpec(a, "uint8", (n,), n) for a in dict.fromkeys(arena) for n in [int(a.split("+")[1])])),
        arena_bytes=-(-max(ends) // 64) * 64, alignment=64)


def test_reusing_dead_arena_bytes_is_accepted() -> None:
    # arena:0+32 is dead once arena:64+32 has read it, so arena:0+64 may take its bytes
    cb = chain(["arena:0+32", "arena:64+32", "arena:0+64"])
    assert CommandBuffer.from_bytes(cb.to_bytes()) == cb


@pytest.mark.parametrize(("arena", "message"), [
    (["arena:0+32", "arena:0+64"], r"dispatches\[1\]\.bindings\[0\]: expected arena bytes no live buffer holds, got "
                                   r"arena:0\+64 overlapping arena:0\+32 \(read until dispatches\[1\]\)"),
    (["arena:0+32", "arena:64+32", "arena:64+64"], r"got arena:64\+64 overlapping arena:64\+32"),
])
def test_writing_bytes_a_live_buffer_holds_is_refused(arena: list[str], message: str) -> None:
    with pytest.raises(CmdbufError, match=message):
        chain(arena)


def _doc(**kw: object) -> dict:
    doc = json.loads(chain(["arena:0+32"]).to_bytes())
    doc.update(kw)
    return doc


def _load(doc: dict) -> CommandBuffer:
    return CommandBuffer.from_bytes(json.dumps(doc).encode())


@pytest.mark.parametrize("binding", ["weight:0", "input:x"])
def test_a_dispatch_writing_a_weight_or_an_input_is_refused(binding: str) -> None:
    doc = _doc()
    doc["dispatches"][1]["bindings"][0] = binding
    with pytest.raises(CmdbufError, match=rf"dispatches\[1\]\.bindings\[0\]: expected the written buffer \(an output, "
                                          rf"state or arena binding; inputs and weights are read-only\), got "
                                          rf"'{binding}'"):
        _load(doc)


@pytest.mark.parametrize(("edit", "message"), [
    ("*(data1+i) = v;", r"stores expected through data0 only \(the written binding\), got stores through data1"),
    ("*(data0+i) = v; (*(data1+i))++;", "got stores through data1"),
    ("float* restrict p = data1; *p = v;", "got stores through data1"),
])
def test_a_kernel_storing_through_a_read_parameter_is_refused(edit: str, message: str) -> None:
    source = COPY_C.replace("*(data0+i) = v;", edit)
    with pytest.raises(CmdbufError, match=r"dispatches\[0\] \(kernel copy\): .*" + message):
        chain(["arena:0+32"], source=source)


def test_kernel_parameters_must_match_the_dispatch() -> None:
    three = COPY_C.replace("float* restrict data1)", "float* restrict data1, float* restrict data2)")
    with pytest.raises(CmdbufError, match=r"parameters expected 2 buffers \+ 0 scalars \(the dispatch's\), got 3"):
        chain(["arena:0+32"], source=three)
    renamed = COPY_C.replace("data1", "src")
    with pytest.raises(CmdbufError, match=r"parameter 1 \(input:x\) expected named data1, got 'float\* restrict src'"):
        chain(["arena:0+32"], source=renamed)
    with pytest.raises(CmdbufError, match=r"source expected a definition of copy\(\.\.\.\) \{, got none"):
        chain(["arena:0+32"], source=COPY_C.replace("void copy(", "void other("))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(arena_bytes=1 << 40), rf"arena_bytes: expected 0..MAX_BUFFER_BYTES = {MAX_BUFFER_BYTES}, "
                                              rf"got {1 << 40}"),
    (lambda d: d.update(arena_bytes=1024), r"arena_bytes: expected 64 \(the end of the last arena binding, "
                                           r"aligned\), got 1024"),
    (lambda d: d.update(alignment=48), r"alignment: expected a power of two <= MAX_ALIGNMENT = \d+, got 48"),
    (lambda d: d["buffers"][1].update(shape=[1 << 20, 1 << 20], nbytes=1 << 42),
     rf"output:y: nbytes expected <= MAX_BUFFER_BYTES = {MAX_BUFFER_BYTES}, got {1 << 42}"),
    (lambda d: d["buffers"][1].update(shape=[1] * (MAX_RANK + 1)), rf"shape expected at most MAX_RANK = {MAX_RANK}"),
    (lambda d: d["dispatches"][0].update(global_size=[1 << 20, 1 << 20]),
     rf"global_size: expected positive sizes \(1..3 of them, at most MAX_LAUNCH = {MAX_LAUNCH} work-items\)"),
])
def test_declared_sizes_are_bounded(edit, message: str) -> None:
    doc = _doc()
    edit(doc)
    with pytest.raises(CmdbufError, match=message):
        _load(doc)


def test_init_only_on_states_and_of_the_states_size() -> None:
    doc = _doc()
    doc["buffers"][2]["init"] = 0  # weight:0
    with pytest.raises(CmdbufError, match=r"weight:0: init expected null \(only states have initial bytes\), got 0"):
        _load(doc)
    doc = _doc()
    doc["buffers"].append({"binding": "state:h", "dtype": "float32", "shape": [4], "nbytes": 16, "init": 0,
                           "image": None})
    doc["dispatches"].append({"kernel": 0, "global_size": [1], "local_size": None, "bindings": ["state:h", "input:x"],
                              "scalars": []})
    with pytest.raises(CmdbufError, match=r"state:h: init expected a weight of the state's 16 bytes, got weight:0 of "
                                          r"32"):
        _load(doc)
    doc["buffers"][-1].update(shape=[8], nbytes=32)
    assert _load(doc).states[0].init == 0


def test_json_depth_and_integer_length_are_bounded() -> None:
    with pytest.raises(CmdbufError, match="cmdbuf: nesting expected at most MAX_JSON_DEPTH = 64 levels, got more"):
        CommandBuffer.from_bytes(b"[" * 100_000 + b"]" * 100_000)
    text = json.dumps(_doc()).replace('"arena_bytes": 64', '"arena_bytes": ' + "9" * 5000)
    with pytest.raises(CmdbufError, match="cmdbuf: integer literal expected at most MAX_INT_DIGITS = 20 digits, got "
                                          "5000 digits"):
        CommandBuffer.from_bytes(text.encode())
    with pytest.raises(CmdbufError, match="cmdbuf: number expected finite JSON, got NaN"):
        CommandBuffer.from_bytes(json.dumps(_doc()).replace('"arena_bytes": 64', '"arena_bytes": NaN').encode())


@pytest.mark.parametrize(("stmt", "stored"), [
    ("*(data0+ridx0) = ((0.0f<alu6)?alu6:0.0f);", {0}),
    ("float val4 = *(data2+(ridx0+(ridx1*32)));", set()),
    ("if (a<=b && c>=d && e!=f && g==h) y = *(data1);", set()),
    ("for (int i = 0; i < 4; i++) data0[i] = data1[i] * s;", {0}),
    ("x = 1, *(data2) += 2;", {2}),
    ("data5[3] <<= 1;", {5}),
    ("*(data6)++;", {6}),
    ("++*(data3+1);", {3}),
    ("x = y++ + *(data1);", set()),
    ("vstore4(vload4(0, data1+i), 0, data4+j);", {4}),
    ("__builtin_memcpy(data3, &v, 4);", {3}),
    ("__global float* restrict p = data7+1;", set()),
    ("__global float* restrict p = data7+1; *(p+2) = 0.0f;", {7}),
    ("float* p; p = data3; p[0] = 1.0f;", {3}),
    ("float* q = data2; float* p = q+1; *p = 1.0f;", {2}),
    # a pointer declared by a statement naming no parameter is still followed once it points into one
    ("float* p = 0; x = 1; p = data3; *p = 1.0f;", {3}),
    ("float* q = data2; y = 2; other_kernel(q);", {2}),
    ("long off = data0 - data1; *(data0 - off) = 1.0f;", {0, 1}),
    ("long off = (long)data3; *(data0 + off) = 1.0f;", {0, 3}),
    ("other_kernel(data0, data2+4);", {0, 2}),
    ("other_kernel(0, &data2[4]);", {2}),
    ("float v = exp2(*(data1+i)) + max(*(data2+i), 0.0f);", set()),
    ("float4 v = vload4(0, data1+(ridx0*4));", set()),
    ("float v = dp_read_image(data3, alu1, 16);", set()),
    ("*(data0+(ridx0-1)) = *(data1+(ridx0-1)) - *(data2+i);", {0}),
])
def test_stored_params(stmt: str, stored: set[int]) -> None:
    assert stored_params(stmt) == stored


SPLIT_C = "void split(float* restrict data0, float* restrict data1, float* restrict data2) {\n" \
          "  for (int i = 0; i < 8; i++) {\n    float v = *(data2+i);\n    *(data0+i) = v;\n    *(data1+i) = v;\n" \
          "  }\n}\n"


def split(first: str, second: str, writes: int = 2) -> CommandBuffer:
    """x -> (first, second) by one dispatch writing both (a chain's), then first -> y and second -> z."""
    arena = [b for b in (first, second) if b.startswith("arena:")]
    return CommandBuffer(
        target="CPU", kernels=(KernelSpec("split", SPLIT_C, "split", "CPU"), KernelSpec("copy", COPY_C, "copy", "CPU")),
        dispatches=(Dispatch(0, (1,), None, (first, second, "input:x"), writes=writes),
                    Dispatch(1, (1,), None, ("output:y", first)), Dispatch(1, (1,), None, ("output:z", second))),
        buffers=(BufferSpec("input:x", "float32", (8,), 32), BufferSpec("output:y", "float32", (8,), 32),
                 BufferSpec("output:z", "float32", (8,), 32),
                 *(BufferSpec(a, "uint8", (n,), n) for a in dict.fromkeys(arena) for n in [int(a.split("+")[1])])),
        arena_bytes=max(sum(map(int, a.split(":")[1].split("+"))) for a in arena), alignment=32)


def test_a_dispatch_writing_two_bindings_round_trips_and_older_documents_read_as_one() -> None:
    cb = split("arena:0+32", "arena:64+32")
    doc = json.loads(cb.to_bytes())
    assert [d.get("writes") for d in doc["dispatches"]] == [2, None, None]  # written only where not one
    assert CommandBuffer.from_bytes(cb.to_bytes()) == cb and cb.dispatches[0].written == ("arena:0+32", "arena:64+32")


@pytest.mark.parametrize(("first", "second", "writes", "message"), [
    ("arena:0+32", "arena:64+32", 1, r"dispatches\[0\] \(kernel split\): stores expected through data0 only \(the "
                                     r"written binding\), got stores through data1"),
    ("arena:0+32", "arena:64+32", 4, r"dispatches\[0\]\.writes: expected 1\.\.3 \(its bindings\), got 4"),
    ("arena:0+32", "arena:64+32", 0, r"dispatches\[0\]\.writes: expected 1\.\.3 \(its bindings\), got 0"),
    ("arena:0+32", "input:x", 2, r"dispatches\[0\]\.bindings\[1\]: expected a written buffer \(an output, state or "
                                 r"arena binding; inputs and weights are read-only\), got 'input:x'"),
    ("arena:0+64", "arena:32+32", 2, r"dispatches\[0\]\.bindings\[1\]: expected arena bytes no live buffer holds, "
                                     r"got arena:32\+32 overlapping arena:0\+64 \(read until dispatches\[1\]\)"),
])
def test_a_dispatch_writing_two_bindings_is_checked_like_one(first: str, second: str, writes: int,
                                                             message: str) -> None:
    with pytest.raises(CmdbufError, match=message):
        split(first, second, writes)
