"""Shared pytest setup: the ONNX node-test folder (generated once, offline, from the installed onnx)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NODE_DIR = ROOT / ".onnx_node_tests"


def _cpu_defaults(monkeypatch: pytest.MonkeyPatch, opts: object, vector_width: int | None = None) -> Iterator[None]:
    """The CPU target's optimizer defaults set to ``opts`` (and its widest vector to ``vector_width`` lanes, if
    given) for one test, on full-width units whatever this machine's are (``halved_wide_fma`` False: the frontend's
    Winograd choice reads it), compiled kernels forgotten before and after (the process keeps kernels by graph and
    target name, compiled under the defaults in force then)."""
    from dataclasses import replace

    from jit.realize import clear_compiled_kernels
    from targets.registry import Device

    monkeypatch.setattr(Device["CPU"], "default_opts", opts)
    monkeypatch.setattr(Device["CPU"], "halved_wide_fma", False)
    if vector_width is not None:
        monkeypatch.setattr(Device["CPU"], "language", replace(Device["CPU"].language, vector_width=vector_width))
    clear_compiled_kernels()
    yield
    clear_compiled_kernels()


@pytest.fixture
def eight_lane_channels(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CPU target as on a machine whose 16-lane FMAs do not pay (targets/cpu_fma.py): tiles of 8-lane vectors,
    channel vectors and weight blocks of 8, whatever this machine's probe found. For tests of those tiles' shape."""
    from jit.codegen.opt import DEFAULT_OPTS

    yield from _cpu_defaults(monkeypatch, DEFAULT_OPTS)


@pytest.fixture
def full_width_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU target as on a machine whose 16-lane FMAs run at full width (or that has none), whatever this one's
    probe found: the frontend picks a direct conv for 16-channel and 7x7 ones (jit/frontend/winograd.py), as tests
    of the direct conv's kernels expect."""
    from targets.registry import Device

    monkeypatch.setattr(Device["CPU"], "halved_wide_fma", False)


@pytest.fixture
def wide_vectors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CPU target as on a machine whose 16-lane FMAs pay: the same tiles 16 lanes wide (WIDE_VECTOR_OPTS), in
    16-lane vectors even where this machine has only 8 (GCC then runs each as two halves: the same results)."""
    from targets.cpu import WIDE_VECTOR_OPTS

    yield from _cpu_defaults(monkeypatch, WIDE_VECTOR_OPTS, vector_width=16)


@pytest.fixture
def no_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OPENCL target dispatching every kernel on its own, where a CPU device would run consecutive ones as one
    team (jit/schedule/chains.py): for tests of what happens per kernel (names, background builds, warm-up)."""
    from targets.registry import Device

    monkeypatch.setattr(Device["OPENCL"], "chain_limits", None)
    monkeypatch.setattr(Device["OPENCL"], "team_limits", None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--onnx-node-dir", default=os.environ.get("ONNX_NODE_DIR"),
                     help="folder written by tests/onnx/conformance/generate.py "
                          "(default: .onnx_node_tests, generated if absent)")


def hermetic_signing_keys(config: pytest.Config) -> None:
    """The suite's packages are signed with a user key of its own, in a directory that lives as long as the
    session: never the real one under ~/.config, and no trusted key from the caller's environment."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="drivepack-test-config-")
    os.environ["DRIVEPACK_CONFIG_DIR"] = folder
    os.environ.pop("DRIVEPACK_TRUST", None)
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def node_dir(config: pytest.Config) -> Path:
    given = config.getoption("--onnx-node-dir")
    return Path(given) if given else DEFAULT_NODE_DIR


def pytest_configure(config: pytest.Config) -> None:
    # whole captures are not cached across tests: many tests patch a pass or a planner and capture a graph an earlier
    # test captured unpatched, which the cache (keyed by the compiler's files, not its patches) would replay;
    # tests/capture/test_capture_cache.py turns it on for itself
    os.environ["DRIVEPACK_CAPTURE_CACHE"] = "0"
    if hasattr(config, "workerinput"):
        return  # xdist workers inherit the controller's environment and the folder it generated
    hermetic_signing_keys(config)  # subprocesses inherit it too
    from tests.onnx.conformance.tally import HostCodeTally
    config.pluginmanager.register(HostCodeTally(), "onnx-host-code-tally")
    folder = node_dir(config)
    if (folder / "node").is_dir():
        return
    import fcntl
    import shutil

    from tests.onnx.conformance.generate import generate
    folder.parent.mkdir(parents=True, exist_ok=True)
    # two pytest sessions may start together: one generates, the other waits for it
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "node").is_dir():
            tmp = folder.with_name(folder.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            generate(tmp)
            tmp.rename(folder)


# The Tensor op suite runs on every target the project ships: once on CPU, once on OPENCL (PoCL in CI).
# A test that checks something only one target does carries `@pytest.mark.cpu_only` and runs on CPU alone.
DEVICE_MATRIX = ("CPU", "OPENCL")
_MATRIX_MODULES = ("test_tensor_", "test_nn_ops", "test_autograd")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "on_device" not in metafunc.fixturenames:
        return
    in_matrix = metafunc.module.__name__.rsplit(".", 1)[-1].startswith(_MATRIX_MODULES)
    cpu_only = metafunc.definition.get_closest_marker("cpu_only") is not None
    if in_matrix:
        metafunc.parametrize("on_device", ("CPU",) if cpu_only else DEVICE_MATRIX, indirect=True)


# `pytest -m "not slow"` is the development subset (README): the CPU target only. A test's run on another target
# (an OPENCL or QCOM parameter, an *_opencl test, the modules of those targets) counts as slow: CI runs them all.
_OTHER_TARGETS = ("OPENCL", "QCOM")
_OTHER_TARGET_MODULES = frozenset({"test_opencl.py", "test_opencl_launch_options.py", "test_replay_opencl.py",
                                   "test_qcom.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        values = " ".join(str(v) for v in params.values())
        if any(t in values for t in _OTHER_TARGETS) or item.name.split("[", 1)[0].endswith("_opencl") or \
                item.path.name in _OTHER_TARGET_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def on_device(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """Runs the test with ``Device.DEFAULT`` set to the matrix device (tests outside the matrix: untouched)."""
    from jit import Device

    device = getattr(request, "param", None)
    if device is None:
        yield None
        return
    saved = Device._default
    Device.DEFAULT = device
    try:
        yield device
    finally:
        Device._default = saved
