"""Two threads calling one replay (a captured model, a package replay; CPU and OpenCL): every output equals the
single-threaded output for the same inputs (Replay serialises its calls with one lock)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from jit import Tensor
from jit.trace import capture
from packager.build import BuildOptions, build_package
from packager.package import load_package
from packager.synthetic import gemm_model
from targets.cpu_runtime import thread_pool
from targets.cpu_split import PROBE_ENV

THREADS, CALLS = 2, 300
RNG = np.random.default_rng(11)
W = RNG.standard_normal((64, 48)).astype(np.float32)
B = RNG.standard_normal(48).astype(np.float32)
VEHICLES = {"CPU": "pc-cpu", "OPENCL": "pc-opencl"}
WIDTH = 256  # two Gemm layers: long enough a call that an unserialised second thread lands inside it

Inputs = dict[str, np.ndarray]


def layer(x: Tensor) -> dict[str, Tensor]:
    y = x @ Tensor(W) + Tensor(B)
    return {"y": y.relu(), "total": y.sum(axis=1)}


def layer_inputs(seed: int) -> Inputs:
    return {"x": np.random.default_rng(seed).standard_normal((16, 64)).astype(np.float32)}


def gemm_inputs(seed: int) -> Inputs:
    return {"x": np.random.default_rng(seed).standard_normal((1, WIDTH)).astype(np.float32)}


def wrong_calls(call: Callable[[Inputs], dict[str, np.ndarray]], make: Callable[[int], Inputs],
                own: Callable[[Inputs], dict[str, np.ndarray]] | None = None) -> list[str]:
    """Each thread's calls (thread t, call i) with inputs of their own, every thread on ``call`` (thread 1 on
    ``own`` when given); the ones whose outputs differ from a single-threaded call of ``call`` on the same
    inputs, and any error a thread raised."""
    inputs = [[make(1000 * t + i) for i in range(CALLS)] for t in range(THREADS)]
    want = [[call(x) for x in per_thread] for per_thread in inputs]
    callers = [call] + [own or call] * (THREADS - 1)
    first = [next(iter(w.values())).tobytes() for w in want[0]]
    assert len(set(first)) == CALLS  # every call's inputs give outputs of their own: a mix-up shows
    wrong: list[str] = []
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        start.wait()
        try:
            for i, x in enumerate(inputs[t]):
                got = callers[t](x)
                if any(got[k].tobytes() != v.tobytes() for k, v in want[t][i].items()):
                    wrong.append(f"thread {t} call {i}")
        except Exception as e:  # an OpenCL error from a racing enqueue counts as a wrong call
            wrong.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return wrong


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_two_threads_on_one_captured_model(device: str) -> None:
    cap = capture(layer, layer_inputs(0), target=device)
    wrong = wrong_calls(cap, layer_inputs)
    assert not wrong, f"{len(wrong)} of {THREADS * CALLS} calls wrong: {wrong[:5]}"


@pytest.fixture(scope="module", params=["CPU", "OPENCL"])
def package(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    d = tmp_path_factory.mktemp("threads")
    onnx.save(gemm_model(2, WIDTH), str(d / "gemm.onnx"))
    build_package(d / "gemm.onnx", VEHICLES[request.param], d / "gemm.dpk", BuildOptions(golden_sets=1))
    return request.param, d / "gemm.dpk"


def test_two_threads_on_one_package_replay(package: tuple[str, Path]) -> None:
    device, path = package
    pkg = load_package(path)
    assert pkg.manifest.target_device == device
    replay: Any = pkg.make_replay()
    wrong = wrong_calls(replay, gemm_inputs)
    assert not wrong, f"{len(wrong)} of {THREADS * CALLS} calls wrong: {wrong[:5]}"


def test_two_threads_each_with_its_own_replay_of_one_package(package: tuple[str, Path]) -> None:
    pkg = load_package(package[1])
    wrong = wrong_calls(pkg.make_replay(), gemm_inputs, own=pkg.make_replay())
    assert not wrong, f"{len(wrong)} of {THREADS * CALLS} calls wrong: {wrong[:5]}"


def test_a_child_forked_while_another_thread_holds_the_lock_still_replays() -> None:
    cap = capture(layer, layer_inputs(0), target="CPU")
    want = cap(layer_inputs(5))["y"].tobytes()
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with cap.replay.lock:
            held.set()
            release.wait()

    th = threading.Thread(target=holder)
    th.start()
    held.wait()
    pid = os.fork()
    if pid == 0:  # the child: the holder thread is not here; a call must not wait for it
        code = 1
        try:
            code = 0 if cap(layer_inputs(5))["y"].tobytes() == want else 2
        finally:
            os._exit(code)
    release.set()
    th.join()
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's replay call waited for a lock no thread there holds")
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_two_replays_of_one_command_buffer_keep_their_own_thread_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the thread count lived in the driver library, which every replay of the same command buffer
    shares (one compiled file, loaded once): ``set_threads`` on one replay changed the other's. Observed through
    a recording pool: the driver hands it a split with the calling replay's count, and runs inline on one."""
    monkeypatch.setenv(PROBE_ENV, "0")  # every parallel dispatch split on two threads: none chosen to run inline
    first = capture(layer, layer_inputs(0), target="CPU").replay
    second = capture(layer, layer_inputs(0), target="CPU").replay
    ffi, lib = first._ffi, first._lib  # noqa: SLF001 - the loaded driver
    run = [r._ffi.cast("uintptr_t", r._ffi.addressof(r._lib, "drivepack_run")) for r in (first, second)]  # noqa: SLF001
    assert run[0] == run[1]  # one library in memory for both
    seen: list[int] = []

    @ffi.callback("void(int, int, int, void(*)(void*, int, int), void*)")
    def recording_pool(threads: int, n: int, chunks: int, fn: Any, ctx: Any) -> None:
        seen.append(threads)
        fn(ctx, 0, n)

    lib.drivepack_set_pool(recording_pool)
    try:
        first.set_threads(1)
        second.set_threads(2)
        want = first(layer_inputs(3))
        assert not seen  # one thread: every split ran inline, on the caller
        got = second(layer_inputs(3))
        assert seen and set(seen) == {2}
        assert all(got[k].tobytes() == v.tobytes() for k, v in want.items())
    finally:
        lib.drivepack_set_pool(ffi.cast("void*", thread_pool().parallel_for_address))
