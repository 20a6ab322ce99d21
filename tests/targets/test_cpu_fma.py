"""targets/cpu_fma.py: whether 16-lane FMAs pay on this machine, probed once and recorded per machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from targets import cpu_fma
from targets.cpu import CPU_VECTOR_WIDTH

decide = cpu_fma.wide_vectors_pay.__wrapped__  # the decision itself, past the per-process cache


def test_the_probe_times_both_widths() -> None:
    ratio = cpu_fma.probe_ratio()
    # 16 lanes take about as long as 8 (full-width units) or about twice (halves); with no 16-lane registers at all
    # (AVX2) GCC spills the split vectors and they take longer still, so only a lower bound holds there
    assert 0.3 < ratio and (CPU_VECTOR_WIDTH < 16 or ratio < 4)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[float]:
    """A fresh kernel cache and a probe that records its calls and answers 1.1 (16 lanes pay)."""
    calls: list[float] = []
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.delenv(cpu_fma.WIDE_ENV, raising=False)
    monkeypatch.setattr(cpu_fma, "probe_ratio", lambda: calls.append(1.1) or 1.1)
    return calls


def test_the_answer_is_recorded_per_machine_and_probed_once(probes: list[float], tmp_path: Path) -> None:
    assert decide(16) and decide(16)
    assert probes == [1.1]
    (record,) = tmp_path.glob("cpu-fma-*.json")
    assert record.name == f"cpu-fma-{cpu_fma.machine_digest()}.json"
    record.write_text("not json")  # a garbled record is probed again and replaced
    assert decide(16) and probes == [1.1, 1.1] and '"wide": true' in record.read_text()


def test_halved_wide_units_do_not_pay(probes: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_fma, "probe_ratio", lambda: 1.9)
    assert not decide(16)


def test_no_probe_without_16_lanes_and_the_environment_decides_first(probes: list[float],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert not decide(8) and probes == []
    monkeypatch.setenv(cpu_fma.WIDE_ENV, "0")
    assert not decide(16)
    monkeypatch.setenv(cpu_fma.WIDE_ENV, "1")
    assert decide(8) and probes == []
