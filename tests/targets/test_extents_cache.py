"""The on-disk cache of proven access extents (targets/extents_cache.py): a proof made once is read back in a
later process without parsing, keyed by the source, the launch and the checker's code; a bad file is a miss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import targets.index_ranges as index_ranges
from targets import extents_cache, kernel_params
from targets.index_ranges import Extents, access_extents

SOURCE = """void copy(float* restrict data0, float* restrict data1, int n) {
  for (int i = 0; i < n; i++) {
    *(data0+i) = *(data1+(i+1));
  }
}
"""
SCALARS = (("int32", 10),)
WANT = Extents({0: (0, 40), 1: (4, 44)}, {})


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    access_extents.cache_clear()  # the in-process memo in front of the disk
    index_ranges._parsed.cache_clear()
    yield tmp_path
    access_extents.cache_clear()
    index_ranges._parsed.cache_clear()


def _no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("parsed although a proof was stored")
    monkeypatch.setattr(index_ranges, "parse_kernel", refuse)
    access_extents.cache_clear()
    index_ranges._parsed.cache_clear()


def test_a_stored_proof_is_read_back_without_parsing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert access_extents(SOURCE, "copy", (1,), None, SCALARS) == WANT
    assert len(list(cache.glob("extents-*.json"))) == 1
    _no_parsing(monkeypatch)
    assert access_extents(SOURCE, "copy", (1,), None, SCALARS) == WANT


def test_another_launch_or_source_is_proven_again(cache: Path) -> None:
    access_extents(SOURCE, "copy", (1,), None, SCALARS)
    assert access_extents(SOURCE, "copy", (1,), None, (("int32", 20),)) == Extents({0: (0, 80), 1: (4, 84)}, {})
    assert access_extents(SOURCE.replace("i+1", "i+2"), "copy", (1,), None, SCALARS).buffers[1] == (8, 48)
    assert len(list(cache.glob("extents-*.json"))) == 3


def test_the_key_holds_the_checkers_code(monkeypatch: pytest.MonkeyPatch) -> None:
    key = extents_cache.launch_key(SOURCE, "copy", (1,), None, SCALARS)
    monkeypatch.setattr(extents_cache, "checker_fingerprint", lambda: "an edited checker")
    assert extents_cache.launch_key(SOURCE, "copy", (1,), None, SCALARS) != key


@pytest.mark.parametrize("damage", [
    lambda doc: "not json {",
    lambda doc: json.dumps({**doc, "key": "0" * 64}),
    lambda doc: json.dumps({**doc, "format": 99}),
    lambda doc: json.dumps({**doc, "buffers": [[0, 0, "40"], [1, 4, 44]]}),
    lambda doc: json.dumps({**doc, "buffers": [[0, 0, 4.0e1]]}),
    lambda doc: json.dumps({**doc, "images": [[0, 0, 1]]}),
    lambda doc: json.dumps([doc]),
])
def test_a_damaged_file_is_a_miss_and_the_launch_is_proven_again(cache: Path, damage) -> None:
    access_extents(SOURCE, "copy", (1,), None, SCALARS)
    (path,) = cache.glob("extents-*.json")
    path.write_text(damage(json.loads(path.read_text())))
    access_extents.cache_clear()
    assert access_extents(SOURCE, "copy", (1,), None, SCALARS) == WANT
    assert extents_cache.load(path.stem.removeprefix("extents-")) == (WANT.buffers, WANT.images)  # rewritten


def test_a_failed_proof_is_not_stored(cache: Path) -> None:
    unbounded = SOURCE.replace("*(data1+(i+1))", "launch_missiles(data1)")
    assert isinstance(access_extents(unbounded, "copy", (1,), None, SCALARS), str)
    assert not list(cache.glob("extents-*.json"))


def test_the_cache_can_be_turned_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(extents_cache.ENV, "0")
    assert access_extents(SOURCE, "copy", (1,), None, SCALARS) == WANT
    assert not list(cache.glob("extents-*.json"))


# --- which parameters a source stores through (targets/kernel_params.py) ----------------------------------------

def _clear_params_memo() -> None:
    kernel_params.stored_params.cache_clear()
    kernel_params.kept_stored_params.cache_clear()


@pytest.fixture
def params_cache(cache: Path) -> Path:
    _clear_params_memo()
    yield cache
    _clear_params_memo()


def test_the_stored_through_parameters_are_read_back_without_scanning(params_cache: Path) -> None:
    kernel_params.check_kernel(SOURCE, "copy", [("out", False), ("in", False)], 1, "k")
    (path,) = params_cache.glob("params-*.json")
    assert json.loads(path.read_text())["stored"] == [0]
    _clear_params_memo()  # as in a new process
    kernel_params.check_kernel(SOURCE, "copy", [("out", False), ("in", False)], 1, "k")
    assert kernel_params.stored_params.cache_info().misses == 0  # read back, not scanned


@pytest.mark.parametrize("damage", [lambda doc: "{", lambda doc: json.dumps({**doc, "stored": [0, "1"]}),
                                    lambda doc: json.dumps({**doc, "key": "0" * 64}),
                                    lambda doc: json.dumps({**doc, "stored": 0})])
def test_a_damaged_params_file_is_a_miss_and_rewritten(params_cache: Path, damage) -> None:
    writes_data1 = SOURCE.replace("*(data0+i) =", "*(data1+i) =")
    with pytest.raises(kernel_params.KernelParamsError, match="through data1"):
        kernel_params.check_kernel(writes_data1, "copy", [("out", False), ("in", False)], 1, "k")
    (path,) = params_cache.glob("params-*.json")
    path.write_text(damage(json.loads(path.read_text())))
    _clear_params_memo()
    with pytest.raises(kernel_params.KernelParamsError, match="through data1"):
        kernel_params.check_kernel(writes_data1, "copy", [("out", False), ("in", False)], 1, "k")
    assert json.loads(path.read_text())["stored"] == [1]


def test_no_params_file_with_the_cache_off(params_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(extents_cache.ENV, "0")
    kernel_params.check_kernel(SOURCE, "copy", [("out", False), ("in", False)], 1, "k")
    assert not list(params_cache.glob("params-*.json"))
