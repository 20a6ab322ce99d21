"""ABI records: what every model input and output is (bytes and meaning), with a strict plain-data form.

A record is immutable and self-consistent: ``byte_size`` equals the element count times the dtype size and
``strides`` are the C-contiguous byte strides of ``shape`` (inputs live packed in a host buffer, so a
non-contiguous input is not representable). Layout rules that involve several records (offsets aligned, no
overlaps) are checked by ``abi.layout``, so a bad layout can still be loaded and reported field by field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from abi.errors import AbiError, AbiIssue, excerpt, issue, quoted

SCHEMA = "drivepack.abi"
SCHEMA_VERSION = 2  # 2: the model's string metadata_props (``metadata``), device-resident ``states``
# numpy knows the first twelve by name; the others are ml_dtypes' types (numpy finds them by name only once
# ml_dtypes is imported, so the table holds the types themselves)
_NUMPY_DTYPES: dict[str, np.dtype] = {
    **{n: np.dtype(n) for n in ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "int64", "uint64",
                                "float16", "float32", "float64")},
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2), "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
}
DTYPES = tuple(_NUMPY_DTYPES)
FLOAT_DTYPES = ("float16", "float32", "float64", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                "float8_e5m2fnuz")
# bounds on the model's metadata kept in the record: it ends up in every package manifest
MAX_METADATA = 64
MAX_METADATA_KEY = 128
MAX_METADATA_VALUE = 16384
# six-channel YUV420 (DESIGN.md), one Y plane, or a whole VisionIPC NV12 camera buffer (abi/frames.py geometry)
LAYOUTS = ("yuv420_6ch", "luma", "nv12")
ORDERS = ("oldest_first", "newest_first")  # temporal order of stacked frames / history rows
DEVICES = ("host", "device")
CAMERAS = ("road", "wide", "driver")


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of an ABI dtype name (ml_dtypes' for bfloat16 and the float8 kinds; KeyError if unknown)."""
    return _NUMPY_DTYPES[dtype]


def is_float(dtype: str) -> bool:
    """Whether an ABI dtype is a floating-point kind (numpy's ``kind`` says 'V' for most ml_dtypes floats)."""
    return dtype in FLOAT_DTYPES


def itemsize(dtype: str) -> int:
    """Bytes per element of an ABI dtype name."""
    return int(numpy_dtype(dtype).itemsize)


def metadata_issues(metadata: object) -> list[AbiIssue]:
    """Problems of a record's ``metadata``: a tuple of at most MAX_METADATA unique (key, value) string pairs of
    bounded length."""
    where = "<metadata>"
    if not isinstance(metadata, tuple):
        return [issue(where, "metadata", "a tuple of (key, value) strings", type(metadata).__name__)]
    if len(metadata) > MAX_METADATA:
        return [issue(where, "metadata", f"at most {MAX_METADATA} entries", len(metadata))]
    errs, seen = [], set()
    for pair in metadata:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(v, str) for v in pair)):
            errs.append(issue(where, "metadata", "(key, value) strings", quoted(pair)))
            continue
        key, value = pair
        if not 0 < len(key) <= MAX_METADATA_KEY:
            errs.append(issue(where, "metadata key", f"1 to {MAX_METADATA_KEY} characters", quoted(key)))
        elif len(value) > MAX_METADATA_VALUE:
            errs.append(issue(where, f"metadata.{key}", f"at most {MAX_METADATA_VALUE} characters",
                              f"{len(value)} characters"))
        if key in seen:
            errs.append(issue(where, f"metadata.{quoted(key)}", "a unique key", "a duplicate"))
        seen.add(key)
    return errs


def contiguous_strides(shape: tuple[int, ...], dtype: str) -> tuple[int, ...]:
    """C-contiguous byte strides of ``shape``."""
    strides, step = [], itemsize(dtype)
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


@dataclass(frozen=True)
class CameraSemantics:
    """What a camera input means: frame layout, how many frames are stacked, their order and value range."""

    camera: str                       # which camera: road / wide / driver
    layout: str                       # yuv420_6ch: channel order of DESIGN.md; luma: one Y plane
    frames: int                       # frames stacked in the tensor
    skip: int                         # frames between two stacked frames (20 Hz ring: 4)
    order: str = "oldest_first"
    value_range: tuple[int, int] = (0, 255)
    normalized_in_model: bool = True  # raw uint8 in, the model scales it itself

    def __post_init__(self) -> None:
        errs = []
        _check_choice(errs, "camera", "camera", self.camera, CAMERAS)
        _check_choice(errs, "camera", "layout", self.layout, LAYOUTS)
        _check_choice(errs, "camera", "order", self.order, ORDERS)
        _check_int(errs, "camera", "frames", self.frames, 1)
        _check_int(errs, "camera", "skip", self.skip, 1)
        lo_hi = self.value_range
        if not (isinstance(lo_hi, tuple) and len(lo_hi) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in lo_hi) and lo_hi[0] < lo_hi[1]):
            errs.append(issue("camera", "value_range", "(low, high) with low < high", repr(lo_hi)))
        if not isinstance(self.normalized_in_model, bool):
            errs.append(issue("camera", "normalized_in_model", "a bool", repr(self.normalized_in_model)))
        if errs:
            raise AbiError(errs)


@dataclass(frozen=True)
class HistorySemantics:
    """What a history input means: ``length`` past samples, ``skip`` frames apart, in ``order``."""

    length: int
    skip: int
    order: str = "oldest_first"

    def __post_init__(self) -> None:
        errs: list[AbiIssue] = []
        _check_int(errs, "history", "length", self.length, 1)
        _check_int(errs, "history", "skip", self.skip, 1)
        _check_choice(errs, "history", "order", self.order, ORDERS)
        if errs:
            raise AbiError(errs)


@dataclass(frozen=True)
class TensorSpec:
    """One model input: its bytes (dtype, shape, size, strides, place in a named shared buffer) and meaning."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    buffer: str = "inputs"
    offset: int = 0
    alignment: int = 64
    device: str = "host"
    camera: CameraSemantics | None = None
    history: HistorySemantics | None = None
    byte_size: int = -1                # -1: computed from dtype and shape
    strides: tuple[int, ...] = ()      # (): computed (C-contiguous)

    def __post_init__(self) -> None:
        errs: list[AbiIssue] = []
        name = _spec_name(errs, self.name)
        _check_choice(errs, name, "dtype", self.dtype, DTYPES)
        _check_choice(errs, name, "device", self.device, DEVICES)
        _check_shape(errs, name, self.shape)
        if not isinstance(self.buffer, str) or not self.buffer:
            errs.append(issue(name, "buffer", "a non-empty string", repr(self.buffer)))
        _check_int(errs, name, "offset", self.offset, 0)
        _check_int(errs, name, "alignment", self.alignment, 1)
        if isinstance(self.alignment, int) and self.alignment & (self.alignment - 1):
            errs.append(issue(name, "alignment", "a power of two", self.alignment))
        if self.camera is not None and not isinstance(self.camera, CameraSemantics):
            errs.append(issue(name, "camera", "CameraSemantics or None", type(self.camera).__name__))
        if self.history is not None and not isinstance(self.history, HistorySemantics):
            errs.append(issue(name, "history", "HistorySemantics or None", type(self.history).__name__))
        if not _is_int(self.byte_size):
            errs.append(issue(name, "byte_size", "an int", repr(self.byte_size)))
        if not (isinstance(self.strides, tuple) and all(_is_int(v) for v in self.strides)):
            errs.append(issue(name, "strides", "a tuple of ints", repr(self.strides)))
        if errs:
            raise AbiError(errs)
        size = math.prod(self.shape) * itemsize(self.dtype)
        if self.byte_size == -1:
            object.__setattr__(self, "byte_size", size)
        elif self.byte_size != size:
            errs.append(issue(name, "byte_size", f"{size} ({self.dtype} x {self.shape})", self.byte_size))
        strides = contiguous_strides(self.shape, self.dtype)
        if self.strides == ():
            object.__setattr__(self, "strides", strides)
        elif self.strides != strides:
            errs.append(issue(name, "strides", f"{strides} (C-contiguous)", tuple(self.strides)))
        if errs:
            raise AbiError(errs)

    @property
    def end(self) -> int:
        """One past the last byte this input occupies in its buffer."""
        return self.offset + self.byte_size


@dataclass(frozen=True)
class OutputSpec:
    """One model output: dtype, shape, byte size and its named slices (name -> [start, stop) of the flat vector)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    slices: tuple[tuple[str, int, int], ...] = ()
    byte_size: int = -1

    def __post_init__(self) -> None:
        errs: list[AbiIssue] = []
        name = _spec_name(errs, self.name)
        _check_choice(errs, name, "dtype", self.dtype, DTYPES)
        _check_shape(errs, name, self.shape)
        if not _is_int(self.byte_size):
            errs.append(issue(name, "byte_size", "an int", repr(self.byte_size)))
        if not isinstance(self.slices, tuple):
            errs.append(issue(name, "output_slices", "a tuple of (name, start, stop)", type(self.slices).__name__))
        if errs:
            raise AbiError(errs)
        n = math.prod(self.shape)
        size = n * itemsize(self.dtype)
        if self.byte_size == -1:
            object.__setattr__(self, "byte_size", size)
        elif self.byte_size != size:
            errs.append(issue(name, "byte_size", size, self.byte_size))
        seen = set()
        for s in self.slices:
            if not (isinstance(s, tuple) and len(s) == 3 and isinstance(s[0], str) and s[0]
                    and all(_is_int(v) for v in s[1:])):
                errs.append(issue(name, "output_slices", "(name: str, start: int, stop: int)", quoted(s)))
                continue
            sname, start, stop = s
            if sname in seen:
                errs.append(issue(name, f"output_slices.{sname}", "a unique name", "a duplicate"))
            seen.add(sname)
            if not 0 <= start < stop <= n:
                errs.append(issue(name, f"output_slices.{sname}", f"0 <= start < stop <= {n}", [start, stop]))
        if errs:
            raise AbiError(errs)

    def slice_map(self) -> dict[str, tuple[int, int]]:
        """The slices as name -> (start, stop)."""
        return {n: (a, b) for n, a, b in self.slices}


@dataclass(frozen=True)
class StateSpec:
    """A buffer a package keeps on the device across calls (a frame or history queue): its bytes and meaning.
    It starts at zero and ``reset()`` zeroes it; the caller never passes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    meaning: str

    def __post_init__(self) -> None:
        errs: list[AbiIssue] = []
        name = _spec_name(errs, self.name)
        _check_choice(errs, name, "dtype", self.dtype, DTYPES)
        _check_shape(errs, name, self.shape)
        if not (isinstance(self.meaning, str) and len(self.meaning) <= MAX_METADATA_VALUE):
            errs.append(issue(name, "meaning", f"a string of at most {MAX_METADATA_VALUE} characters",
                              quoted(self.meaning)))
        if errs:
            raise AbiError(errs)

    @property
    def byte_size(self) -> int:
        return math.prod(self.shape) * itemsize(self.dtype)


@dataclass(frozen=True)
class Abi:
    """A model's whole I/O contract: inputs (bound by name, never by position) and outputs, plus the model's
    own string metadata (``vision_model``, ``policy_model``...: informational, sorted (key, value) pairs)."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[OutputSpec, ...] = field(default=())
    metadata: tuple[tuple[str, str], ...] = field(default=())
    states: tuple[StateSpec, ...] = field(default=())

    def __post_init__(self) -> None:
        errs = metadata_issues(self.metadata)
        for kind, recs, cls in (("input", self.inputs, TensorSpec), ("output", self.outputs, OutputSpec),
                                ("state", self.states, StateSpec)):
            if not (isinstance(recs, tuple) and all(isinstance(r, cls) for r in recs)):
                raise AbiError([issue("<abi>", f"{kind}s", f"a tuple of {cls.__name__}", quoted(recs))])
            names = [r.name for r in recs]
            for dup in sorted({n for n in names if names.count(n) > 1}):
                errs.append(issue(dup, "name", f"a unique {kind} name", "a duplicate"))
        if errs:
            raise AbiError(errs)

    def input(self, name: str) -> TensorSpec:
        """The input called ``name`` (KeyError if absent)."""
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    def buffer_sizes(self) -> dict[str, int]:
        """Each shared buffer's size in bytes: the furthest end of an input placed in it."""
        sizes: dict[str, int] = {}
        for s in self.inputs:
            sizes[s.buffer] = max(sizes.get(s.buffer, 0), s.end)
        return sizes

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready) with the schema name and version; ``from_dict`` reads it back exactly."""
        return {"schema": SCHEMA, "version": SCHEMA_VERSION,
                "inputs": [_input_to_dict(s) for s in self.inputs],
                "outputs": [_output_to_dict(o) for o in self.outputs],
                "metadata": dict(self.metadata),
                "states": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "meaning": t.meaning}
                           for t in self.states]}

    @staticmethod
    def from_dict(d: Any) -> Abi:
        """Read ``to_dict`` output; refuses other schema versions and unknown or missing fields (AbiError)."""
        where = "<abi>"
        # schema and version first: a record of another version is named as such, not by the fields it lacks
        if isinstance(d, Mapping) and d.get("schema", SCHEMA) != SCHEMA:
            raise AbiError([issue(where, "schema", SCHEMA, quoted(d["schema"]))])
        if isinstance(d, Mapping) and "version" in d and not (_is_int(d["version"]) and d["version"] == SCHEMA_VERSION):
            raise AbiError([issue(where, "version", SCHEMA_VERSION, quoted(d["version"]))])
        _exact_keys(d, {"schema", "version", "inputs", "outputs", "metadata", "states"}, where)
        for key in ("inputs", "outputs", "states"):
            if not isinstance(d[key], list):
                raise AbiError([issue(where, key, "a list", type(d[key]).__name__)])
        meta = d["metadata"]
        if not (isinstance(meta, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())):
            raise AbiError([issue(where, "metadata", "a mapping of strings to strings", quoted(meta))])
        return Abi(tuple(_input_from_dict(x) for x in d["inputs"]), tuple(_output_from_dict(x) for x in d["outputs"]),
                   tuple(meta.items()), tuple(_state_from_dict(x) for x in d["states"]))


def camera_to_dict(c: CameraSemantics) -> dict[str, Any]:
    return {"camera": c.camera, "layout": c.layout, "frames": c.frames, "skip": c.skip, "order": c.order,
            "value_range": list(c.value_range), "normalized_in_model": c.normalized_in_model}


def history_to_dict(h: HistorySemantics) -> dict[str, Any]:
    return {"length": h.length, "skip": h.skip, "order": h.order}


def camera_from_dict(d: Any, where: str) -> CameraSemantics:
    keys = {"camera", "layout", "frames", "skip", "order", "value_range", "normalized_in_model"}
    _exact_keys(d, keys, f"{where}.camera")
    vr = d["value_range"]
    if not (isinstance(vr, list) and len(vr) == 2):
        raise AbiError([issue(where, "camera.value_range", "[low, high]", repr(vr))])
    return CameraSemantics(d["camera"], d["layout"], d["frames"], d["skip"], d["order"], (vr[0], vr[1]),
                           d["normalized_in_model"])


def history_from_dict(d: Any, where: str) -> HistorySemantics:
    _exact_keys(d, {"length", "skip", "order"}, f"{where}.history")
    return HistorySemantics(d["length"], d["skip"], d["order"])


def _input_to_dict(s: TensorSpec) -> dict[str, Any]:
    return {"name": s.name, "dtype": s.dtype, "shape": list(s.shape), "byte_size": s.byte_size,
            "strides": list(s.strides), "buffer": s.buffer, "offset": s.offset, "alignment": s.alignment,
            "device": s.device, "camera": camera_to_dict(s.camera) if s.camera else None,
            "history": history_to_dict(s.history) if s.history else None}


def _output_to_dict(o: OutputSpec) -> dict[str, Any]:
    return {"name": o.name, "dtype": o.dtype, "shape": list(o.shape), "byte_size": o.byte_size,
            "slices": {n: [a, b] for n, a, b in o.slices}}


def _input_from_dict(d: Any) -> TensorSpec:
    keys = {"name", "dtype", "shape", "byte_size", "strides", "buffer", "offset", "alignment", "device",
            "camera", "history"}
    where = _where(d, "<input>")
    _exact_keys(d, keys, where)
    for k in ("shape", "strides"):
        if not isinstance(d[k], list):
            raise AbiError([issue(where, k, "a list of ints", repr(d[k]))])
    cam = camera_from_dict(d["camera"], where) if d["camera"] is not None else None
    hist = history_from_dict(d["history"], where) if d["history"] is not None else None
    return TensorSpec(d["name"], d["dtype"], tuple(d["shape"]), d["buffer"], d["offset"], d["alignment"],
                      d["device"], cam, hist, d["byte_size"], tuple(d["strides"]))


def _output_from_dict(d: Any) -> OutputSpec:
    where = _where(d, "<output>")
    _exact_keys(d, {"name", "dtype", "shape", "byte_size", "slices"}, where)
    if not isinstance(d["shape"], list):
        raise AbiError([issue(where, "shape", "a list of ints", repr(d["shape"]))])
    if not isinstance(d["slices"], Mapping):
        raise AbiError([issue(where, "slices", "a mapping name -> [start, stop]", repr(d["slices"]))])
    slices = []
    for n, v in d["slices"].items():
        if not (isinstance(v, list) and len(v) == 2):
            raise AbiError([issue(where, f"output_slices.{n}", "[start, stop]", repr(v))])
        slices.append((n, v[0], v[1]))
    return OutputSpec(d["name"], d["dtype"], tuple(d["shape"]), tuple(slices), d["byte_size"])


def _where(d: Any, default: str) -> str:
    """The record's name for messages: a string name (cut short), else ``default`` (the name check reports it)."""
    name = d.get("name") if isinstance(d, Mapping) else None
    return excerpt(name) if isinstance(name, str) and name else default


def _state_from_dict(d: Any) -> StateSpec:
    where = d.get("name", "<state>") if isinstance(d, Mapping) else "<state>"
    _exact_keys(d, {"name", "dtype", "shape", "meaning"}, quoted(where))
    if not isinstance(d["shape"], list):
        raise AbiError([issue(quoted(where), "shape", "a list of ints", quoted(d["shape"]))])
    return StateSpec(d["name"], d["dtype"], tuple(d["shape"]), d["meaning"])


def _exact_keys(d: Any, keys: set[str], where: str) -> None:
    """Strict plain data: exactly ``keys``, reported all at once."""
    if not isinstance(d, Mapping):
        raise AbiError([issue(where, "<record>", "a mapping", type(d).__name__)])
    errs = [issue(where, k, "a known field", "unknown field") for k in sorted(set(d) - keys)]
    errs += [issue(where, k, "present", "missing") for k in sorted(keys - set(d))]
    if errs:
        raise AbiError(errs)


def _spec_name(errs: list[AbiIssue], value: object) -> str:
    """A spec's name for its messages: ``value``, or "<unnamed>" with the problem recorded."""
    if isinstance(value, str) and value:
        return value
    errs.append(issue("<unnamed>", "name", "a non-empty string", quoted(value)))
    return "<unnamed>"


def _check_shape(errs: list[AbiIssue], where: str, shape: object) -> None:
    if not (isinstance(shape, tuple) and all(_is_int(d) and d > 0 for d in shape)):
        errs.append(issue(where, "shape", "a tuple of positive ints", quoted(shape)))


def _check_choice(errs: list[AbiIssue], where: str, fld: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        errs.append(issue(where, fld, "one of " + ", ".join(choices), repr(value)))


def _check_int(errs: list[AbiIssue], where: str, fld: str, value: object, minimum: int) -> None:
    if not _is_int(value) or value < minimum:  # type: ignore[operator]
        errs.append(issue(where, fld, f"an int >= {minimum}", repr(value)))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
