"""The official ONNX node test cases on the CPU and OPENCL targets, against committed lists of expected failures.

A case passes when every output matches within onnx's own runner tolerances (rtol 1e-3, atol 1e-7; exact for
integral outputs). The suite fails when an unlisted case fails, or a listed case passes (shrink the list).
On CPU each case is its own test. On OPENCL the cases run in chunks whose kernels build in one program
(PoCL spends ~0.3 s per clBuildProgram whatever its size); a failing chunk names every case at fault.
OPENCL's expected failures are CPU's with the differences listed in expected_failures_opencl.txt, each reasoned.
Each test records its cases' results (``record_cases``); the summary at the end of the run counts the passing cases
that went through host code (tests/onnx/conformance/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_NODE_DIR
from tests.onnx.conformance.conformance import CaseResult, run_case, run_cases

EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.txt")
OPENCL_DIFFERENCES_FILE = Path(__file__).with_name("expected_failures_opencl.txt")
OPENCL_CHUNK = 40
RecordCases = Callable[[dict[str, CaseResult]], None]  # the record_cases fixture (conftest.py)


def expected_failures(path: Path = EXPECTED_FAILURES_FILE) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip(" #")
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    given = metafunc.config.getoption("--onnx-node-dir")
    root = (Path(given) if given else DEFAULT_NODE_DIR) / "node"
    cases = sorted(root.iterdir()) if root.is_dir() else []
    if "case_dir" in metafunc.fixturenames:
        metafunc.parametrize("case_dir", cases, ids=[c.name for c in cases])
    if "case_chunk" in metafunc.fixturenames:
        chunks = [cases[i:i + OPENCL_CHUNK] for i in range(0, len(cases), OPENCL_CHUNK)]
        metafunc.parametrize("case_chunk", chunks, ids=[f"{c[0].name}..{c[-1].name}" for c in chunks])


def opencl_expected_failures() -> dict[str, str]:
    """CPU's list, plus the '+case' lines of the OPENCL file, minus its '-case' lines."""
    changes = expected_failures(OPENCL_DIFFERENCES_FILE)
    out = {**EXPECTED, **{name[1:]: why for name, why in changes.items() if name.startswith("+")}}
    for name in changes:
        assert name[:1] in "+-" and (name[0] == "+") != (name[1:] in EXPECTED), f"{name}: bad line in OPENCL list"
        if name.startswith("-"):
            del out[name[1:]]
    return out


EXPECTED = expected_failures()
EXPECTED_OPENCL = opencl_expected_failures()


def test_case_count(pytestconfig: pytest.Config) -> None:
    given = pytestconfig.getoption("--onnx-node-dir")
    root = (Path(given) if given else DEFAULT_NODE_DIR) / "node"
    assert len(list(root.iterdir())) == 1858
    assert all((root / name).is_dir() for name in EXPECTED_OPENCL), "expected failure lists name unknown cases"


@pytest.mark.slow
def test_node_case(case_dir: Path, record_cases: RecordCases) -> None:
    result = run_case(case_dir)
    record_cases({case_dir.name: result})
    reason = result.reason
    listed = EXPECTED.get(case_dir.name)
    if listed is None:
        assert reason is None, reason
    else:
        assert reason is not None, f"{case_dir.name} now passes: remove it from expected_failures.txt"


@pytest.mark.slow
@pytest.mark.opencl
def test_node_cases_opencl(case_chunk: list[Path], record_cases: RecordCases) -> None:
    results = run_cases(case_chunk, device="OPENCL")
    record_cases(results)
    reasons = {name: r.reason for name, r in results.items()}
    wrong = [f"{name}: {reason}" for name, reason in reasons.items()
             if reason is not None and name not in EXPECTED_OPENCL]
    wrong += [f"{name} now passes on OPENCL: remove it from the expected failure lists"
              for name, reason in reasons.items() if reason is None and name in EXPECTED_OPENCL]
    assert not wrong, "\n".join(wrong)
