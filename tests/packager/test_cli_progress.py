"""Build progress on stderr (packager/progress.py): steps with their time and a heartbeat while they run; --quiet
silences progress, never warnings."""

from __future__ import annotations

import io
import threading

from packager.progress import Progress


def test_step_prints_start_heartbeat_and_end() -> None:
    stream = io.StringIO()
    prog = Progress(stream=stream, enabled=True)
    seen = threading.Event()

    def wait_for_heartbeat() -> None:
        for _ in range(3000):  # the body runs until the ticker has spoken (bounded, not timed)
            if "still running" in stream.getvalue():
                seen.set()
                return
            threading.Event().wait(0.01)

    with prog.step("capture", "vision: compile kernels", every=0.01):
        wait_for_heartbeat()
    lines = stream.getvalue().splitlines()
    assert seen.is_set()
    assert lines[0] == "[capture] vision: compile kernels ..."
    assert lines[1].startswith("[capture] vision: compile kernels: still running, ") and lines[1].endswith(" s")
    assert lines[-1].startswith("[capture] vision: compile kernels: ") and "still running" not in lines[-1]
    float(lines[-1].rsplit(": ", 1)[1].removesuffix(" s"))  # the step's seconds


def test_quiet_silences_progress_but_not_warnings() -> None:
    stream = io.StringIO()
    prog = Progress(stream=stream, enabled=False)
    with prog.stage("load", "m.onnx"), prog.step("capture", "trace", every=0.001):
        prog.note("load", "progress")
        prog.warn("load", "abi warning: no role matches")
    assert stream.getvalue() == "[load] abi warning: no role matches\n"
    assert set(prog.times) == {"load"}
