"""benchmarks/bench_reliability.py: its probe machinery classifies a handful of probes as the table counts them."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_reliability as bench  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("rel")
    with bench.workspace(folder):
        return folder, bench.build_tiny(folder)


@pytest.mark.slow
def test_a_bit_flip_is_refused_an_untouched_package_accepted_and_a_wrong_replay_seen(
        built: tuple[Path, Path]) -> None:
    folder, src = built
    out = folder / "probes"
    out.mkdir()
    with bench.workspace(folder):
        raw = bytearray(src.read_bytes())
        raw[200] ^= 4  # inside the manifest
        (out / "flip.dpk").write_bytes(bytes(raw))
        # the weight binding of dispatch 1 replaced by the input x (64 of its 2048 bytes): reads other bytes, so
        # the replay differs (the load does not check a kernel's read ranges: docs/package-format.md)
        wrong = bench.rewrite(src, out / "wrong.dpk", cmdbuf=bench.set_field(("dispatches", 1, "bindings", 3),
                                                                             "input:x"))
        unsigned = bench.rewrite(src, out / "unsigned.dpk", sign=None)
        probes = [bench.Probe("c", "flip", "package", str(out / "flip.dpk")),
                  bench.Probe("c", "untouched", "package", str(src)),
                  bench.Probe("c", "re-signed", "package", str(bench.rewrite(src, out / "same.dpk"))),
                  bench.Probe("c", "unsigned", "package", str(unsigned)),
                  bench.Probe("c", "unsigned allowed", "package", str(unsigned), allow_unsigned=True),
                  bench.Probe("c", "wrong", "package", str(wrong))]
        results = bench.classify(probes, src)
    got = [r.outcome for r in results]
    assert got == ["refused", "accepted", "accepted", "refused", "accepted", "accepted, wrong"], got
    rows = bench.table(probes, results)
    assert rows[-1] == {"probe class": "total", "tried": 6, "refused": 2, "accepted": 3, "accepted, wrong": 1,
                        "crashed": 0}
    assert bench.markdown(rows).splitlines()[-1] == "| **total** | **6** | **2** | **3** | **1** | **0** |"


@pytest.mark.slow
def test_a_child_that_hangs_counts_its_probe_as_crashed_and_the_rest_still_run(tmp_path: Path) -> None:
    # a vehicle profile path that is a FIFO nobody writes blocks the child's read: the timeout kills it
    fifo = tmp_path / "blocks.yaml"
    os.mkfifo(fifo)
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [[[\n")
    probes = [bench.Probe("c", "bad", "vehicle", str(bad)), bench.Probe("c", "hang", "vehicle", str(fifo)),
              bench.Probe("c", "bad again", "vehicle", str(bad))]
    got = bench.run_in_children("load", probes, per_probe_s=1.0, base_s=3.0)
    assert [r.outcome for r in got] == ["refused", "crashed", "refused"], got
    assert got[1].detail.startswith("timeout"), got[1]


def test_quick_probe_set_covers_every_row(built: tuple[Path, Path]) -> None:
    folder, src = built
    out = folder / "set"
    out.mkdir()
    with bench.workspace(folder):
        probes = bench.package_probes(src, out, random.Random(1), quick=True) + bench.onnx_probes(out) + \
            bench.vehicle_probes(out)
    classes = {p.cls for p in probes}
    assert {f"bit flip: {r}" for r in set(bench.FLIP_ROWS.values())} <= classes
    assert {"truncation", "appended bytes", "re-checksummed structural edit", "crafted kernel flags",
            "crafted entry names", "crafted kernel sources", "unsigned / untrusted signer", "bad ONNX files",
            "bad vehicle YAML"} <= classes
    assert all(Path(p.path).exists() for p in probes)
