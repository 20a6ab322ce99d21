"""One way in for abi-check and abi-diff: ``load_abi(path)`` yields an Abi from any supported file.

* ``*.onnx``: inferred from the model (``abi.infer``; weights are not read);
* ``*.abi.json``: an ABI saved with ``Abi.to_dict`` (e.g. what an older package shipped);
* ``*.dpk``: read through ``PACKAGE_ABI_READERS[".dpk"]``: the package is opened and fully checked
  (packager/package.py) and its manifest's ABI returned; a package that cannot be trusted is an AbiFileError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from abi.errors import AbiError, AbiFileError
from abi.records import Abi

# Hook for the package format: suffix -> function reading the ABI embedded in a package file.
PACKAGE_ABI_READERS: dict[str, Callable[[Path], Abi]] = {}


def load_abi(path: str | Path, *, overrides: Mapping[str, Any] | None = None) -> Abi:
    """The ABI in ``path``; ``overrides`` (input -> meaning) apply to ONNX models only."""
    p = Path(path)
    name = p.name.lower()
    if not p.is_file():
        raise AbiFileError(str(p), "no such file")
    if name.endswith(".abi.json"):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise AbiFileError(str(p), f"not a readable ABI JSON file ({e})") from None
        return Abi.from_dict(data)
    if name.endswith(".onnx"):
        from abi.infer import infer_abi  # onnx is loaded for an ONNX model only, never for a package
        from jit.onnx.validate import OnnxError

        try:
            return infer_abi(p, overrides=overrides)
        except AbiError:
            raise
        except OnnxError as e:  # one line naming the file, then the node or tensor and the field
            reason = str(e).removeprefix(f"{p}: ")
            raise AbiFileError(str(p), f"not a readable ONNX model: {reason}") from None
        except Exception as e:  # onnx raises DecodeError and others for a bad file
            raise AbiFileError(str(p), f"not a readable ONNX model ({type(e).__name__}: {e})") from None
    reader = PACKAGE_ABI_READERS.get(p.suffix.lower())
    if reader is not None:
        return reader(p)
    raise AbiFileError(str(p), f"unsupported file kind {p.suffix or '(none)'!r}; expected .onnx, .abi.json or .dpk")


def _read_package_abi(path: Path) -> Abi:
    """The ABI a .dpk package carries (imported lazily: abi does not need the packager otherwise)."""
    from packager.errors import PackageError
    from packager.package import read_package_abi

    try:
        abi: Abi = read_package_abi(path)
    except PackageError as e:
        raise AbiFileError(str(path), f"not a trusted drivepack package: {e}") from None
    return abi


PACKAGE_ABI_READERS[".dpk"] = _read_package_abi


def save_abi(abi: Abi, path: str | Path) -> None:
    """Write ``abi`` as an ``.abi.json`` file (the ``Abi.to_dict`` form, sorted keys)."""
    Path(path).write_text(json.dumps(abi.to_dict(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
