"""The official ONNX node test cases on the CPU target, against a committed list of expected failures.

A case passes when every output matches within onnx's own runner tolerances (rtol 1e-3, atol 1e-7; exact for
integral outputs). The suite fails when an unlisted case fails, or a listed case passes (shrink the list).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DEFAULT_NODE_DIR
from tests.onnx_conformance.conformance import run_case

EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.txt")


def expected_failures() -> dict[str, str]:
    out = {}
    for line in EXPECTED_FAILURES_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip(" #")
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_dir" in metafunc.fixturenames:
        given = metafunc.config.getoption("--onnx-node-dir")
        root = (Path(given) if given else DEFAULT_NODE_DIR) / "node"
        cases = sorted(root.iterdir()) if root.is_dir() else []
        metafunc.parametrize("case_dir", cases, ids=[c.name for c in cases])


EXPECTED = expected_failures()


def test_case_count(pytestconfig: pytest.Config) -> None:
    given = pytestconfig.getoption("--onnx-node-dir")
    root = (Path(given) if given else DEFAULT_NODE_DIR) / "node"
    assert len(list(root.iterdir())) == 1858
    assert all((root / name).is_dir() for name in EXPECTED), "expected_failures.txt names unknown cases"


@pytest.mark.slow
def test_node_case(case_dir: Path) -> None:
    reason = run_case(case_dir)
    listed = EXPECTED.get(case_dir.name)
    if listed is None:
        assert reason is None, reason
    else:
        assert reason is not None, f"{case_dir.name} now passes: remove it from expected_failures.txt"
