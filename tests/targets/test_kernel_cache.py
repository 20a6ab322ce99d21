"""targets/kernel_cache.py: atomic publishing, of whole data or of chunks streamed from an iterable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jit.common.helpers import Context, settings_key
from targets.kernel_cache import publish


def test_publish_writes_bytes_text_or_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    publish(tmp_path / "a", b"bytes")
    publish(tmp_path / "b", "text")
    publish(tmp_path / "c", (memoryview(part) for part in (b"one ", bytearray(b"two "), b"three")))
    assert [(tmp_path / n).read_bytes() for n in "abc"] == [b"bytes", b"text", b"one two three"]


def test_a_failed_stream_leaves_neither_the_file_nor_its_staging_copy(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRIVEPACK_CACHE", str(tmp_path))
    publish(tmp_path / "kept", b"old")

    def failing() -> Iterator[bytes]:
        yield b"half"
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        publish(tmp_path / "kept", failing())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and (tmp_path / "kept").read_bytes() == b"old"


def test_settings_key_names_every_setting_and_follows_context() -> None:
    before = settings_key()
    assert "NOOPT=0" in before and "WINO=" in before and "STORE_VIEWS=" in before
    with Context(NOOPT=1):
        assert settings_key() != before and "NOOPT=1" in settings_key()
    assert settings_key() == before
