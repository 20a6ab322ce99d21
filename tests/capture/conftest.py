"""Fixtures of the capture tests."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

import jit.capture_cache as cc
import jit.render_cache as rc
from jit.realize import clear_compiled_kernels


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh, empty kernel cache folder for the test, and this process's compiled kernels forgotten."""
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    monkeypatch.delenv(rc.ENV, raising=False)
    # stores on even while the checkout's sources are being edited (test_no_store_once_the_sources_changed tests that)
    monkeypatch.setattr(rc, "_FINGERPRINT", (rc.compiler_fingerprint(), math.inf, frozenset()))
    clear_compiled_kernels()
    yield tmp_path
    cc.wait_stored()  # a store still running would otherwise write into the next test's folder
    clear_compiled_kernels()
