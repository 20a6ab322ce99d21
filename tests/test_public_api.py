"""The public API: every name ``jit`` and ``packager`` export resolves to the object it names, before and after
every project module is imported (a submodule of the same name would replace the export on the package)."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import jit
import packager
from tests.test_import_graph import project_modules

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", [jit, packager], ids=["jit", "packager"])
def test_exports_are_the_objects_they_name(package: object) -> None:
    for module in project_modules():
        if not module.endswith("__main__"):
            importlib.import_module(module)
    exports = package.EXPORTS  # type: ignore[attr-defined]
    for name, module in exports.items():
        value = getattr(package, name)
        assert not inspect.ismodule(value), f"{package.__name__}.{name} is a module"
        assert value is getattr(importlib.import_module(module), name)
        assert name in package.__all__  # type: ignore[attr-defined]


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'jit' has no attribute 'Tensr'"):
        jit.Tensr  # noqa: B018


def test_import_jit_loads_no_stage() -> None:
    """``import jit`` (and so ``import jit.common.errors``) imports no compiler stage until a name is used."""
    code = "import sys, jit; print(sorted(m for m in sys.modules if m.startswith(('jit', 'targets', 'onnx'))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['jit']"
