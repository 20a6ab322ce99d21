"""targets/cpu_fma.py: whether 16-lane FMAs pay on this machine, probed once and recorded per machine."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from targets import cpu_fma
from targets.cpu import CPU_VECTOR_WIDTH
from targets.cpu_runtime import CFLAGS

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
    monkeypatch.setattr(cpu_fma, "wide_fma_ratio", cpu_fma.wide_fma_ratio.__wrapped__)  # past the per-process cache
    return calls


def test_the_answer_is_recorded_per_machine_and_probed_once(probes: list[float], tmp_path: Path) -> None:
    assert decide(16) and decide(16)
    assert probes == [1.1]
    (record,) = tmp_path.glob("cpu-fma-*.json")
    assert record.name == f"cpu-fma-{cpu_fma.machine_digest()}-{cpu_fma.PROBE_DIGEST}.json"
    record.write_text("not json")  # a garbled record is probed again and replaced
    assert decide(16) and probes == [1.1, 1.1] and '"wide": true' in record.read_text()


@pytest.mark.parametrize(("ratio", "wide"), [(1.0, True), (2.0, True), (3.0, False)])
def test_only_512_bit_ops_slower_than_their_halves_do_not_pay(probes: list[float], monkeypatch: pytest.MonkeyPatch,
                                                              ratio: float, wide: bool) -> None:
    """Full-width units (1.0) and halved ones (2.0: the same work in half the instructions) take 16-lane tiles; a
    core that slows down for 512-bit ops (3.0) does not."""
    monkeypatch.setattr(cpu_fma, "probe_ratio", lambda: ratio)
    assert decide(16) is wide


def test_the_probe_loops_run_every_chain(tmp_path: Path) -> None:
    """Regression: every chain started from the same value, so the compiler merged them into one and the loop timed
    one FMA's latency, the same at both widths: halved 512-bit units looked full-width. Each loop must issue
    ``ACCUMULATORS`` multiply-adds an iteration."""
    source = tmp_path / "probe.c"
    source.write_text(cpu_fma.PROBE_SOURCE)
    flags = [f for f in CFLAGS if f not in ("-shared", "-fPIC")]
    subprocess.run([os.environ.get("CC", "cc"), *flags, "-S", "-o", str(tmp_path / "probe.s"), str(source)], check=True)
    asm = (tmp_path / "probe.s").read_text()
    for fn in ("dp_fma8", "dp_fma16"):
        body = asm[asm.index(f"{fn}:"):]
        body = body[:body.index(".cfi_endproc")] if ".cfi_endproc" in body else body
        loops = re.findall(r"\n(\.L\d+):\n(.*?)\n\s+j\w+\s+\1\n", body, re.S)
        assert loops, f"{fn}: no loop found"
        assert max(len(re.findall(r"\bv?fn?madd\w*ps|\bv?mulps", text)) for _, text in loops) >= cpu_fma.ACCUMULATORS


def test_no_probe_without_16_lanes_and_the_environment_decides_first(probes: list[float],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert not decide(8) and probes == []
    monkeypatch.setenv(cpu_fma.WIDE_ENV, "0")
    assert not decide(16)
    monkeypatch.setenv(cpu_fma.WIDE_ENV, "1")
    assert decide(8) and probes == []


@pytest.mark.parametrize(("ratio", "halved"), [(1.0, False), (1.4, False), (2.0, True), (3.0, True)])
def test_halved_units_are_told_from_the_probe(probes: list[float], monkeypatch: pytest.MonkeyPatch,
                                              ratio: float, halved: bool) -> None:
    monkeypatch.setattr(cpu_fma, "probe_ratio", lambda: ratio)
    assert cpu_fma.halved_wide_fma(16) is halved
    assert cpu_fma.halved_wide_fma(8) is False  # no 16-lane vectors: nothing to tell


def test_the_cpu_target_declares_what_the_probe_measured() -> None:
    from targets.cpu import CPUTarget
    assert CPUTarget().halved_wide_fma is cpu_fma.halved_wide_fma(CPU_VECTOR_WIDTH)
