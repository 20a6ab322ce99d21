"""The conformance run's summary line: how many passing cases went through host code (jit/onnx/host_ops.py).

Each conformance test records its cases' results through the ``record_cases`` fixture, as a user property;
reports carry user properties to the controlling process (xdist included), where ``HostCodeTally`` counts
them and prints one line per target after the run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.onnx.conformance.conformance import CaseResult, host_code_summary

CASES_PROPERTY = "onnx_cases"  # a test's [(case, reason, host ops)]


@pytest.fixture
def record_cases(record_property: Callable[[str, object], None]) -> Callable[[dict[str, CaseResult]], None]:
    """Record a test's case results (case name -> result) for the summary."""
    def record(results: dict[str, CaseResult]) -> None:
        record_property(CASES_PROPERTY, [(name, r.reason, list(r.host_ops)) for name, r in results.items()])
    return record


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


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # xdist workers send their reports to the controller
        config.pluginmanager.register(HostCodeTally(), "onnx-host-code-tally")
