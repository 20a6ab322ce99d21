"""Machine caches as target data: the CPU probe (targets/cpu_caches.py), the defaults it falls back to, the OpenCL
and Adreno declarations, and the tuning key that depends on them."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from jit.codegen.opt import target_caches
from jit.codegen.opt.tuning import device_fingerprint
from targets.base import DEFAULT_L1, DEFAULT_L2, CacheLevel, CacheLevelError, TargetLimits
from targets.cpu import CPUTarget
from targets.cpu_caches import CPUCaches, cpu_caches, parse_size, sysfs_caches
from targets.registry import Device

# a Zen 4 core as Linux describes it: L1d and L1i 32 KB 8-way, L2 1 MB 8-way, L3 32 MB 16-way, 64-byte lines
ZEN4 = [(1, "Data", "32K", "8", "64"), (1, "Instruction", "32K", "8", "64"), (2, "Unified", "1024K", "8", "64"),
        (3, "Unified", "32768K", "16", "64")]


def fake_sysfs(root: Path, entries: list[tuple[object, ...]]) -> Path:
    """A cpu0/cache folder holding one index<i> per entry (level, type, size, ways, line; None: file missing)."""
    names = ("level", "type", "size", "ways_of_associativity", "coherency_line_size")
    for i, entry in enumerate(entries):
        folder = root / f"index{i}"
        folder.mkdir(parents=True)
        for name, value in zip(names, entry, strict=True):
            if value is not None:
                (folder / name).write_text(f"{value}\n")
    return root


@pytest.fixture
def no_sysconf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sysconf_names", {})


def test_defaults_are_the_constants_the_optimizer_had() -> None:
    """32 KB 8-way L1 of 64-byte lines (64 sets: planes 4 KB apart share one) and a 512 KB L2."""
    assert (DEFAULT_L1.size, DEFAULT_L1.ways, DEFAULT_L1.line, DEFAULT_L1.sets) == (32 * 1024, 8, 64, 64)
    assert DEFAULT_L2.size == 512 * 1024 and DEFAULT_L2.line == 64
    assert TargetLimits().l1 == DEFAULT_L1 and TargetLimits().l2 == DEFAULT_L2
    assert target_caches(object()) == (DEFAULT_L1, DEFAULT_L2)


@pytest.mark.parametrize("fields", [(0, 8, 64), (32768, 0, 64), (32768, 8, -64), (32768, 7, 64), (32768, True, 64)])
def test_cache_level_refuses_what_makes_no_whole_sets(fields: tuple[int, int, int]) -> None:
    with pytest.raises(CacheLevelError, match="CacheLevel"):
        CacheLevel(*fields)


def test_sizes_as_sysfs_writes_them() -> None:
    assert [parse_size(t) for t in ("32K", "1024K", "8M", "512", " 48K\n")] == [32768, 1 << 20, 8 << 20, 512, 49152]
    assert [parse_size(t) for t in ("", "K", "32KB", "-1K", "big")] == [None] * 5


def test_probe_reads_a_sysfs_tree(tmp_path: Path, no_sysconf: None) -> None:
    root = fake_sysfs(tmp_path, ZEN4)
    assert sysfs_caches(root) == {1: CacheLevel(32768, 8, 64), 2: CacheLevel(1 << 20, 8, 64),
                                  3: CacheLevel(32 << 20, 16, 64)}  # the instruction cache is not data
    assert cpu_caches(root) == CPUCaches(CacheLevel(32768, 8, 64), CacheLevel(1 << 20, 8, 64))
    intel = fake_sysfs(tmp_path / "intel", [(1, "Data", "48K", "12", "64"), (2, "Unified", "1280K", "10", "64")])
    assert cpu_caches(intel) == CPUCaches(CacheLevel(48 * 1024, 12, 64), CacheLevel(1280 * 1024, 10, 64))


@pytest.mark.parametrize("case", ["missing", "empty", "garbled size", "no ways", "ways not a number",
                                  "no whole sets", "bad level"])
def test_probe_falls_back_to_the_defaults(tmp_path: Path, no_sysconf: None, case: str) -> None:
    l1 = {"missing": None, "empty": None, "garbled size": (1, "Data", "lots", "8", "64"),
          "no ways": (1, "Data", "32K", None, "64"), "ways not a number": (1, "Data", "32K", "eight", "64"),
          "no whole sets": (1, "Data", "32K", "7", "64"), "bad level": ("one", "Data", "32K", "8", "64")}[case]
    root = tmp_path / "cache"
    if case != "missing":
        root.mkdir()
        if l1 is not None:
            fake_sysfs(root, [l1, (2, "Unified", "garbage", "8", "64")])
    assert cpu_caches(root) == CPUCaches(DEFAULT_L1, DEFAULT_L2)


def test_sysconf_where_sysfs_says_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"SC_LEVEL1_DCACHE_SIZE": 49152, "SC_LEVEL1_DCACHE_ASSOC": 12, "SC_LEVEL1_DCACHE_LINESIZE": 64,
              "SC_LEVEL2_CACHE_SIZE": 0, "SC_LEVEL2_CACHE_ASSOC": 0, "SC_LEVEL2_CACHE_LINESIZE": 0}  # 0: unknown
    monkeypatch.setattr(os, "sysconf_names", {name: i for i, name in enumerate(values)})
    monkeypatch.setattr(os, "sysconf", lambda name: values[name])
    assert cpu_caches(tmp_path / "none") == CPUCaches(CacheLevel(49152, 12, 64), DEFAULT_L2)
    # sysfs, where it answers, wins
    assert cpu_caches(fake_sysfs(tmp_path / "sysfs", ZEN4)).l1 == CacheLevel(32768, 8, 64)


def test_cpu_target_limits_are_the_probed_caches() -> None:
    told = cpu_caches()
    assert (CPUTarget.limits.l1, CPUTarget.limits.l2) == (told.l1, told.l2)
    assert target_caches(Device["CPU"]) == (told.l1, told.l2)


def test_tuning_key_changes_with_the_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuning measured where the optimizer sized loops for one cache is not looked up for another."""
    cpu = Device["CPU"]
    before = device_fingerprint(cpu)
    monkeypatch.setattr(cpu, "limits", replace(cpu.limits, l2=CacheLevel(256 * 1024, 4, 64)))
    assert device_fingerprint(cpu) != before and "262144/4/64" in device_fingerprint(cpu)


@pytest.mark.opencl
def test_opencl_l2_is_the_devices_global_memory_cache() -> None:
    from targets.opencl import global_mem_cache

    target = Device["OPENCL"]
    info = target.info
    assert target.limits.l1 == DEFAULT_L1  # OpenCL does not tell an L1
    assert target.limits.l2 == global_mem_cache(info)
    assert global_mem_cache(replace(info, global_mem_cache_size=128 * 1024, global_mem_cacheline_size=64)) == \
        CacheLevel(128 * 1024, DEFAULT_L2.ways, 64)
    assert global_mem_cache(replace(info, global_mem_cache_size=0, global_mem_cacheline_size=0)) == DEFAULT_L2
