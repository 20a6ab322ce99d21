"""abi-diff: each kind of change and its severity, and property tests over random ABIs and random mutations
(diff classifies every mutation; validate accepts exactly the valid buffers)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abi.diff import BREAKING, COMPATIBLE, diff, is_breaking
from abi.errors import AbiError
from abi.layout import pack_inputs, pack_offsets
from abi.records import Abi, CameraSemantics, HistorySemantics, OutputSpec, TensorSpec, is_float, numpy_dtype
from abi.validate import validate

NAMES = ["a", "b", "c", "d", "e", "f"]
DTYPES = ["uint8", "float32", "float16", "int32", "bfloat16", "float8_e4m3fn"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def abis(draw: st.DrawFn) -> Abi:
    n = draw(st.integers(1, 5))
    names = draw(st.permutations(NAMES))[:n]
    raw = []
    for name in names:
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
        alignment = draw(st.sampled_from([1, 4, 16, 64]))
        hist = cam = None
        if len(shape) >= 2 and dtype != "uint8" and draw(st.booleans()):
            hist = HistorySemantics(shape[1], draw(st.integers(1, 4)))
        elif dtype == "uint8" and draw(st.booleans()):
            cam = CameraSemantics(draw(st.sampled_from(["road", "wide"])), "luma", 1, 1)
        raw.append((name, dtype, shape, alignment, cam, hist))
    probe = [TensorSpec(n, d, s, alignment=a) for n, d, s, a, _, _ in raw]
    offsets = pack_offsets([(s.name, s.byte_size, s.alignment) for s in probe])
    inputs = tuple(TensorSpec(n, d, s, "inputs", offsets[n], a, "host", c, h) for n, d, s, a, c, h in raw)
    width = draw(st.integers(4, 40))
    cuts = sorted(set(draw(st.lists(st.integers(1, width - 1), max_size=3))))
    bounds = [0, *cuts, width]
    slices = tuple((f"s{i}", lo, hi) for i, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)))
    return Abi(inputs, (OutputSpec("outputs", "float32", (1, width), slices),))


def _replace_input(abi: Abi, i: int, **kw: object) -> Abi:
    old = abi.inputs[i]
    fields = {"byte_size": -1, "strides": ()} if {"dtype", "shape"} & set(kw) else {}
    new = dataclasses.replace(old, **fields, **kw)
    return Abi(abi.inputs[:i] + (new,) + abi.inputs[i + 1:], abi.outputs)


def mutations(abi: Abi, i: int) -> list[tuple[str, Abi, str, str, str]]:
    """(mutation, mutated ABI, expected kind, severity, name) for input i and the output."""
    s = abi.inputs[i]
    out = abi.outputs[0]
    other_dtype = next(d for d in DTYPES if d != s.dtype)
    unused = next(n for n in NAMES + ["z"] if n not in abi.input_names())
    hist = HistorySemantics(99, 3) if s.history is None else dataclasses.replace(s.history, skip=s.history.skip + 1)
    cases = [
        ("retype", _replace_input(abi, i, dtype=other_dtype), "retyped", BREAKING, s.name),
        ("reshape", _replace_input(abi, i, shape=(*s.shape, 2)), "reshaped", BREAKING, s.name),
        ("move", _replace_input(abi, i, offset=s.offset + 64 * s.alignment), "moved", BREAKING, s.name),
        ("device", _replace_input(abi, i, device="device"), "moved", BREAKING, s.name),
        ("meaning", _replace_input(abi, i, history=hist), "meaning", BREAKING, s.name),
        ("rename", _replace_input(abi, i, name="renamed_" + s.name), "renamed", BREAKING, s.name),
        ("tighten", _replace_input(abi, i, alignment=s.alignment * 2), "realigned", BREAKING, s.name),
        ("remove", Abi(abi.inputs[:i] + abi.inputs[i + 1:], abi.outputs), "removed", BREAKING, s.name),
        ("add", Abi(abi.inputs + (TensorSpec(unused, "float32", (3,), offset=4096 * 64),), abi.outputs),
         "added", BREAKING, unused),
        ("add slice", Abi(abi.inputs, (dataclasses.replace(out, slices=out.slices + (("extra", 0, 1),)),)),
         "added", COMPATIBLE, "outputs[extra]"),
        ("remove slice", Abi(abi.inputs, (dataclasses.replace(out, slices=out.slices[1:]),)),
         "removed", BREAKING, f"outputs[{out.slices[0][0]}]"),
        ("add output", Abi(abi.inputs, abi.outputs + (OutputSpec("aux", "float32", (2,)),)),
         "added", COMPATIBLE, "aux"),
    ]
    if s.alignment > 1 and s.offset % (s.alignment // 2) == 0:
        cases.append(("loosen", _replace_input(abi, i, alignment=s.alignment // 2), "realigned", COMPATIBLE, s.name))
    return cases


@SETTINGS
@given(abis(), st.data())
def test_diff_classifies_every_mutation(abi: Abi, data: st.DataObject) -> None:
    assert diff(abi, abi) == []
    i = data.draw(st.integers(0, len(abi.inputs) - 1))
    for label, mutated, kind, severity, name in mutations(abi, i):
        changes = diff(abi, mutated)
        assert [(c.kind, c.severity, c.name) for c in changes] == [(kind, severity, name)], (label, changes)
        assert is_breaking(changes) == (severity == BREAKING)


def valid_arrays(abi: Abi, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for s in abi.inputs:
        if is_float(s.dtype):
            out[s.name] = rng.standard_normal(s.shape).astype(numpy_dtype(s.dtype))
        else:
            out[s.name] = rng.integers(0, 100, s.shape).astype(s.dtype)
    return out


CORRUPTIONS = ["none", "dtype", "shape", "drop", "unknown", "strided", "nan", "alias", "flat_short"]


def corrupt(arrays: dict[str, np.ndarray], abi: Abi, how: str, i: int) -> bool:
    """Apply one corruption to input i; False when it cannot apply to this input (the case is skipped)."""
    s = abi.inputs[i]
    a = arrays[s.name]
    if how == "dtype":
        arrays[s.name] = np.zeros(a.shape, numpy_dtype(next(d for d in DTYPES if d != s.dtype)))
    elif how == "shape":
        arrays[s.name] = np.zeros((*s.shape, 2), s.dtype)
    elif how == "drop":
        del arrays[s.name]
    elif how == "unknown":
        arrays["zz"] = np.zeros(1, np.float32)
    elif how == "strided":
        wide = np.zeros((*s.shape[:-1], s.shape[-1] * 2), s.dtype)[..., ::2]
        if wide.flags.c_contiguous:
            return False
        arrays[s.name] = wide
    elif how == "nan":
        if not is_float(s.dtype):
            return False
        a.reshape(-1)[0] = np.nan
    elif how == "alias":
        twin = next((t for t in abi.inputs if t.name != s.name and t.byte_size == s.byte_size), None)
        if twin is None:
            return False
        # through the flat bytes: a uint8 (4, 3) viewed as float32 directly would split its 3-byte rows
        arrays[twin.name] = arrays[s.name].reshape(-1).view(twin.dtype).reshape(twin.shape)
    elif how == "flat_short":
        arrays[s.name] = a.reshape(-1)[:-1].copy() if a.size > 1 else np.zeros(0, s.dtype)
    return True


@SETTINGS
@given(abis(), st.sampled_from(CORRUPTIONS), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_validate_accepts_exactly_the_valid_arrays(abi: Abi, how: str, i: int, seed: int) -> None:
    arrays = valid_arrays(abi, np.random.default_rng(seed))
    i %= len(abi.inputs)
    if not corrupt(arrays, abi, how, i):
        return
    if how == "none":
        validate(arrays, abi)
        return
    try:
        validate(arrays, abi)
    except AbiError as e:
        assert e.errors and all(x.input and x.field for x in e.errors)
    else:
        raise AssertionError(f"{how} on {abi.inputs[i].name} was accepted")


@SETTINGS
@given(abis(), st.sampled_from(["none", "short", "long", "nan"]), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_validate_accepts_exactly_the_valid_packed_buffers(abi: Abi, how: str, i: int, seed: int) -> None:
    arrays = valid_arrays(abi, np.random.default_rng(seed))
    buf = pack_inputs(arrays, abi)["inputs"]
    s = abi.inputs[i % len(abi.inputs)]
    if how == "short":
        buf = buf[:-1]
    elif how == "long":
        buf = buf + b"\0"
    elif how == "nan":
        if not is_float(s.dtype):
            return
        nan = np.array([np.nan], numpy_dtype(s.dtype))
        buf[s.offset:s.offset + nan.nbytes] = nan.tobytes()
    if how == "none":
        validate(bytes(buf), abi)
        return
    try:
        validate(bytes(buf), abi)
    except AbiError:
        pass
    else:
        raise AssertionError(f"packed buffer with {how} was accepted")


def test_output_slice_moves_and_resizes() -> None:
    old = Abi((), (OutputSpec("outputs", "float32", (1, 10), (("plan", 0, 4), ("meta", 4, 6))),))
    new = Abi((), (OutputSpec("outputs", "float32", (1, 10), (("plan", 0, 4), ("meta", 5, 7))),))
    newer = Abi((), (OutputSpec("outputs", "float32", (1, 10), (("plan", 0, 5), ("meta", 5, 7))),))
    assert [(c.kind, c.name) for c in diff(old, new)] == [("moved", "outputs[meta]")]
    assert [(c.kind, c.name) for c in diff(new, newer)] == [("reshaped", "outputs[plan]")]
    assert "moved" in str(diff(old, new)[0]) and "[4:6] -> [5:7]" in str(diff(old, new)[0])
