"""The conformance run's summary line: how many passing cases went through host code (jit/onnx/host_ops.py).

``HostCodeTally`` is a plugin of the controlling pytest process (registered by tests/conftest.py, which that
process loads at start; with xdist it collects no test module, so a conftest next to the tests would never
register there). It counts the case results each conformance test records and prints one line per target.
"""

from __future__ import annotations

import pytest

from tests.onnx.conformance.conformance import CaseResult, host_code_summary

CASES_PROPERTY = "onnx_cases"  # a test's [(case, reason, host ops)]


class HostCodeTally:
    """Collects the recorded case results of every conformance test, keyed by target and case."""

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], CaseResult] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        target = "OPENCL" if "opencl" in report.keywords else "CPU"
        for key, value in report.user_properties:
            if key == CASES_PROPERTY:
                for name, reason, host_ops in value:  # type: ignore[attr-defined]
                    self.results[(target, name)] = CaseResult(reason, tuple(host_ops))

    def summary(self) -> list[str]:
        """One line per target that ran cases."""
        targets = sorted({t for t, _ in self.results})
        return [f"onnx conformance ({t}): {host_code_summary(r for (u, _), r in self.results.items() if u == t)}"
                for t in targets]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for line in self.summary():
            terminalreporter.write_line(line)
