"""Device-resident states in the ABI record (a modeld package's frame and history queues) and in abi-diff."""

from __future__ import annotations

import pytest

from abi.diff import BREAKING, diff
from abi.errors import AbiError
from abi.records import Abi, StateSpec, TensorSpec

FRAMES = StateSpec("road_frames", "uint8", (5, 6, 128, 256), "the last 5 warped road frames, oldest first")


def _abi(*states: StateSpec) -> Abi:
    return Abi((TensorSpec("frame", "uint8", (64,)),), (), (), states)


def test_states_round_trip_and_are_checked() -> None:
    abi = _abi(FRAMES)
    assert Abi.from_dict(abi.to_dict()) == abi and abi.to_dict()["states"][0]["shape"] == [5, 6, 128, 256]
    assert FRAMES.byte_size == 5 * 6 * 128 * 256
    with pytest.raises(AbiError, match="road_frames: dtype expected one of"):
        StateSpec("road_frames", "uint7", (5,), "")
    with pytest.raises(AbiError, match="shape expected a tuple of positive ints"):
        StateSpec("q", "uint8", (0,), "")
    with pytest.raises(AbiError, match="q: name expected a unique state name, got a duplicate"):
        _abi(StateSpec("q", "uint8", (1,), ""), StateSpec("q", "uint8", (1,), ""))
    doc = abi.to_dict()
    doc["states"][0]["extra"] = 1
    with pytest.raises(AbiError, match="extra expected a known field"):
        Abi.from_dict(doc)


def test_abi_diff_reports_every_state_change_as_breaking() -> None:
    deeper = StateSpec("road_frames", "uint8", (9, 6, 128, 256), FRAMES.meaning)
    other = StateSpec("road_frames", "uint8", FRAMES.shape, "every 2nd frame")
    extra = StateSpec("features", "float32", (97, 512), "hidden_state history")
    got = {(c.kind, c.name, c.field) for c in diff(_abi(FRAMES), _abi(deeper, extra))}
    assert got == {("reshaped", "road_frames", "shape"), ("added", "features", "presence")}
    assert [(c.kind, c.severity) for c in diff(_abi(FRAMES), _abi(other))] == [("meaning", BREAKING)]
    assert [(c.kind, c.severity) for c in diff(_abi(FRAMES), _abi())] == [("removed", BREAKING)]
    assert diff(_abi(FRAMES), _abi(FRAMES)) == []
