"""The ``record_cases`` fixture: each conformance test records its cases' results as a user property, which
reports carry to the controlling process (xdist included), where tests/onnx/conformance/tally.py counts them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.onnx.conformance.conformance import CaseResult
from tests.onnx.conformance.tally import CASES_PROPERTY


@pytest.fixture
def record_cases(record_property: Callable[[str, object], None]) -> Callable[[dict[str, CaseResult]], None]:
    """Record a test's case results (case name -> result) for the summary."""
    def record(results: dict[str, CaseResult]) -> None:
        record_property(CASES_PROPERTY, [(name, r.reason, list(r.host_ops)) for name, r in results.items()])
    return record
