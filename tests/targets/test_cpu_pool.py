"""The CPU thread pool (targets/cpu_pool.py, loaded by targets/cpu_runtime.py) and the kernels split over it:
every index of a region runs once, a worker that is not scheduled does not hold a region up, results are bit-identical
at any thread count, the count is per replay, and the range parameters are checked like any other index
(targets/kernel_params.py, targets/index_ranges.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import cffi
import numpy as np
import pytest

import targets.cpu_runtime as cpu
from jit.common.errors import CompileError
from jit.onnx.loader import load_onnx
from jit.trace import capture_onnx
from packager import samples
from targets import cpu_pool
from targets.index_ranges import IndexRangeError, check_extents
from targets.kernel_params import KernelParamsError, check_kernel, range_kernel
from targets.replay import make_replay

ROOT = Path(__file__).resolve().parents[2]

WORK = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static int64_t now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }
/* ctx: int32 counts per index, then (at index n) the busy time per index in microseconds */
void work(void *ctx, int lo, int hi) {
  int32_t *c = ctx;
  for (int i = lo; i < hi; i++) {
    __atomic_fetch_add(&c[i + 1], 1, __ATOMIC_RELAXED);
    int64_t end = now_ns() + (int64_t)c[0] * 1000;
    while (now_ns() < end) {}
  }
}
/* ctx: the busy time per index in microseconds, a sequence counter, then per index the thread that ran it and
   the sequence number it began with */
void who(void *ctx, int lo, int hi) {
  int32_t *c = ctx;
  for (int i = lo; i < hi; i++) {
    c[2 + 2 * i] = (int32_t)syscall(SYS_gettid);
    c[3 + 2 * i] = __atomic_fetch_add(&c[1], 1, __ATOMIC_RELAXED);
    int64_t end = now_ns() + (int64_t)c[0] * 1000;
    while (now_ns() < end) {}
  }
}
/* ctx: the caller's thread id, how long a chunk sleeps when another thread runs it (microseconds), and how long
   each index keeps the caller busy: a worker descheduled in the middle of its first chunk */
void nap(void *ctx, int lo, int hi) {
  int32_t *c = ctx;
  if ((int32_t)syscall(SYS_gettid) != c[0]) {
    struct timespec ts = {c[1] / 1000000, (long)(c[1] % 1000000) * 1000};
    nanosleep(&ts, NULL);
    return;
  }
  for (int i = lo; i < hi; i++) {
    int64_t end = now_ns() + (int64_t)c[2] * 1000;
    while (now_ns() < end) {}
  }
}
/* the thread's sched_attr.sched_runtime (its EEVDF slice on Linux 6.12 and later, 0 for a fair thread before);
   -1 where sched_getattr fails */
long long slice_of(int tid) {
  struct { uint32_t size, policy; uint64_t flags; int32_t nice; uint32_t priority;
           uint64_t runtime, deadline, period; } a = {0};
  return syscall(SYS_sched_getattr, tid, &a, sizeof a, 0) == 0 ? (long long)a.runtime : -1;
}
"""


@pytest.fixture(scope="module")
def work() -> tuple[cffi.FFI, object, object]:
    ffi = cffi.FFI()
    ffi.cdef("void work(void *ctx, int lo, int hi); void who(void *ctx, int lo, int hi); "
             "void nap(void *ctx, int lo, int hi); long long slice_of(int tid);")
    lib = ffi.dlopen(str(cpu.compile_shared(WORK)))
    p = cpu.thread_pool()
    fn = p.ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.work)))
    return ffi, lib, fn


def region(fn: object, threads: int, n: int, busy_us: int = 0, chunks: int = 0) -> tuple[np.ndarray, float]:
    """Run ``work`` over [0, n) on ``threads``: how often each index ran, and the seconds the region took."""
    counts = np.zeros(n + 1, dtype=np.int32)
    counts[0] = busy_us
    p = cpu.thread_pool()
    start = time.perf_counter()
    p.lib.dp_parallel_for(threads, n, chunks, fn, p.ffi.cast("void*", counts.ctypes.data))
    return counts[1:], time.perf_counter() - start


def held_who_region(fn: object, busy_us: int) -> np.ndarray:
    """``who`` over 8 chunks on 2 threads while the pool is held (its worker polls, so it takes part): the context,
    with the thread and the order each chunk ran in."""
    p = cpu.thread_pool()
    ctx = np.zeros(2 + 2 * 8, dtype=np.int32)
    ctx[0] = busy_us
    p.lib.dp_pool_hold(1)
    try:
        p.lib.dp_parallel_for(2, 8, 8, fn, p.ffi.cast("void*", ctx.ctypes.data))
    finally:
        p.lib.dp_pool_hold(-1)
    return ctx


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [1, 2, 7, 100, 4097])
def test_every_index_runs_exactly_once(work: tuple, threads: int, n: int) -> None:
    counts, _ = region(work[2], threads, n)
    assert (counts == 1).all()


def test_a_worker_that_is_not_scheduled_does_not_hold_the_region_up(work: tuple) -> None:
    """Worker 0 sleeps 400 ms after it wakes for a job, before it claims a chunk (as a descheduled thread would):
    the caller claims every chunk itself and the region ends after its own work (~16 ms), not the sleeper's."""
    p = cpu.thread_pool()
    region(work[2], 2, 8)  # the worker exists and is idle
    p.lib.dp_pool_stall_worker(0, 400_000_000)
    try:
        counts, took = region(work[2], 2, 16, busy_us=1000)
    finally:
        p.lib.dp_pool_stall_worker(-1, 0)
    assert (counts == 1).all()
    assert took < 0.2, f"the region waited for the stalled worker: {took * 1e3:.0f} ms"
    time.sleep(0.45)  # the sleeper wakes to a finished job: it claims nothing
    counts, _ = region(work[2], 2, 16)
    assert (counts == 1).all()


def _napping_region(work: tuple, nap_us: int) -> None:
    """8 chunks on 2 threads while the pool is held (its worker polls, so it takes part): a chunk the worker runs
    sleeps ``nap_us``, the caller's are busy 300 us an index."""
    ffi, lib, _ = work
    p = cpu.thread_pool()
    ctx = np.array([threading.get_native_id(), nap_us, 300], dtype=np.int32)
    p.lib.dp_pool_hold(1)
    try:
        p.lib.dp_parallel_for(2, 8, 8, p.ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.nap))),
                              p.ffi.cast("void*", ctx.ctypes.data))
    finally:
        p.lib.dp_pool_hold(-1)


def test_a_worker_stalled_in_a_chunk_leaves_the_next_regions_to_the_caller(work: tuple) -> None:
    """A worker that sleeps 60 ms in its first chunk (as one descheduled there by a busy process would) holds that
    region up; the regions after it run on the caller alone, every index once, until the solo spell ends. With the
    spell's factor 0 a stall changes nothing."""
    ffi, lib, _ = work
    p = cpu.thread_pool()
    region(work[2], 2, 8)  # the worker exists
    p.lib.dp_pool_end_solo()
    p.lib.dp_pool_set_solo_factor(cpu_pool.SOLO_FACTOR)
    try:
        for _ in range(5):  # on a loaded machine the caller may claim every chunk before the worker comes
            _napping_region(work, 60_000)
            if p.lib.dp_pool_solo():
                break
        assert p.lib.dp_pool_solo()
        ctx = held_who_region(cpu.thread_pool().ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.who))), 100)
        assert set(ctx[2::2].tolist()) == {threading.get_native_id()}
        counts, _ = region(work[2], 2, 16)
        assert (counts == 1).all()
        p.lib.dp_pool_end_solo()
        assert not p.lib.dp_pool_solo()
        p.lib.dp_pool_set_solo_factor(0)
        _napping_region(work, 60_000)
        assert not p.lib.dp_pool_solo()
    finally:
        p.lib.dp_pool_set_solo_factor(p.solo_factor)
        p.lib.dp_pool_end_solo()


def test_a_region_inside_a_region_runs_on_its_thread(work: tuple) -> None:
    """A call while the pool is busy (a kernel inside a lane, a second caller) runs inline, never deadlocks."""
    ffi = cffi.FFI()
    ffi.cdef("void outer(void *ctx, int lo, int hi); void set(void *pf, void *inner);")
    lib = ffi.dlopen(str(cpu.compile_shared(r"""
typedef void (*job)(void *, int, int);
typedef void (*pf_t)(int, int, int, job, void *);
static pf_t pf; static job inner;
void set(void *p, void *i) { pf = (pf_t)p; inner = (job)i; }
void outer(void *ctx, int lo, int hi) { for (int i = lo; i < hi; i++) pf(2, 64, 0, inner, (int *)ctx + 65 * i); }
""")))
    p = cpu.thread_pool()
    lib.set(ffi.cast("void*", p.parallel_for_address), ffi.cast("void*", int(p.ffi.cast("uintptr_t", work[2]))))
    counts = np.zeros(65 * 4, dtype=np.int32)
    p.lib.dp_parallel_for(2, 4, 4, p.ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.outer))),
                          p.ffi.cast("void*", counts.ctypes.data))
    assert (counts.reshape(4, 65)[:, 1:] == 1).all()


def test_each_thread_claims_its_own_run_of_chunks_first(work: tuple) -> None:
    """The caller owns the first half of a 2-thread region's chunks and the worker the second: each begins with its
    own (a kernel reads what the kernel before it wrote on the same core). The worker takes one of the caller's only
    once its own are all claimed, and the caller takes the worker's only once its own are: whenever the worker
    starts, its first chunk is one of its own."""
    ffi, lib, _ = work
    fn = cpu.thread_pool().ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.who)))
    region(work[2], 2, 8)  # the worker exists
    ctx = held_who_region(fn, 3000)
    tids, order = ctx[2::2], ctx[3::2]
    caller = threading.get_native_id()
    assert tids[0] == caller  # claimed right after the job is published
    worker_chunks = [i for i in np.argsort(order) if tids[i] != caller]
    assert not worker_chunks or worker_chunks[0] >= 4, (tids.tolist(), order.tolist())


def test_the_words_threads_share_lie_on_cache_lines_of_their_own() -> None:
    """Each word the caller and the workers both write during a region (a slot's chunk counter, the job's generation,
    the finished count, the sleeper count, the caller's own words) starts a 128-byte block of its own: packed
    together, each chunk's claim and count moved a line between the cores (benchmarks/bench_replay.py prints the
    cost per region)."""
    p = cpu.thread_pool()
    out = p.ffi.new("uintptr_t[16]")
    words = [out[i] for i in range(p.lib.dp_pool_shared_words(out))]
    assert len(words) >= 8
    assert all(w % 128 == 0 for w in words), [hex(w) for w in words]
    assert len({w // 128 for w in words}) == len(words), [hex(w) for w in words]


def _all_asleep(p: cpu_pool.Pool) -> bool:
    """Whether every worker sleeps within a second (the count may run ahead: a worker counts itself before it
    checks for a new job one last time)."""
    deadline = time.monotonic() + 1.0
    while p.lib.dp_pool_sleeping() < p.workers():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_holding_the_pool_wakes_its_sleeping_workers(work: tuple) -> None:
    """A replay's hold wakes every sleeping worker at once (they come up while the caller starts its call, not at
    its first region); regions under the hold run every index once; let go, idle workers sleep again."""
    p = cpu.thread_pool()
    region(work[2], 2, 8)
    p.lib.dp_pool_set_spin_ns(0)
    try:
        assert _all_asleep(p)
        p.lib.dp_pool_set_spin_ns(cpu_pool.SPIN_NS)
        p.lib.dp_pool_end_solo()  # a stall in an earlier test leaves the workers asleep for a while
        woken = p.lib.dp_pool_hold(1)
        try:
            assert woken >= p.workers()
            counts, _ = region(work[2], 2, 16)
            assert (counts == 1).all()
        finally:
            p.lib.dp_pool_hold(-1)
        p.lib.dp_pool_set_spin_ns(0)
        assert _all_asleep(p)
    finally:
        p.lib.dp_pool_set_spin_ns(cpu_pool.SPIN_NS)
    counts, _ = region(work[2], 2, 16)
    assert (counts == 1).all()


def test_idle_workers_linger_after_a_region_then_sleep(work: tuple) -> None:
    """After a region (and after a replay's hold) idle workers keep polling for LINGER_NS, so the next call finds
    them awake; once it has passed they sleep."""
    p = cpu.thread_pool()
    assert cpu_pool.LINGER_NS > cpu_pool.SPIN_NS
    p.lib.dp_pool_set_linger_ns(10 * 10**9)
    try:
        region(work[2], 2, 8)
        assert p.lib.dp_pool_lingering()
        p.lib.dp_pool_set_linger_ns(0)
        assert not p.lib.dp_pool_lingering()
        assert _all_asleep(p)
        p.lib.dp_pool_set_linger_ns(10 * 10**9)
        p.lib.dp_pool_hold(1)
        p.lib.dp_pool_hold(-1)
        assert p.lib.dp_pool_lingering()  # a call's end lingers too
    finally:
        p.lib.dp_pool_set_linger_ns(cpu_pool.LINGER_NS)


def test_lingering_workers_sleep_when_their_core_is_wanted(work: tuple) -> None:
    """A lingering worker polls only while its yields come straight back: with every core busy it sleeps, however
    long the linger."""
    p = cpu.thread_pool()
    region(work[2], 2, 8)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    p.lib.dp_pool_set_linger_ns(10 * 10**9)
    try:
        time.sleep(0.2)  # the busy processes are running
        region(work[2], 2, 8)
        assert p.lib.dp_pool_lingering()
        assert _all_asleep(p)
    finally:
        p.lib.dp_pool_set_linger_ns(cpu_pool.LINGER_NS)
        for b in busy:
            b.kill()
            b.wait()


class _HoldRecorder:
    """The pool's library with its holds recorded (what a replay's call asks of the pool)."""

    def __init__(self, lib: object) -> None:
        self.lib, self.holds = lib, []

    def dp_pool_hold(self, delta: int) -> int:
        self.holds.append(delta)
        return int(self.lib.dp_pool_hold(delta))


def test_a_replay_holds_the_pool_for_each_call_on_several_threads() -> None:
    m = samples.vision_model()
    feeds = samples.sample_inputs(m)
    replay = capture_onnx(load_onnx(m, device="CPU"), feeds, target="CPU").replay
    replay.set_threads(2)
    replay(feeds)  # the first call at a thread count also measures which dispatches run inline: a hold of its own
    recorder = _HoldRecorder(cpu.thread_pool().lib)
    replay._pool = recorder
    want = replay(feeds)
    assert recorder.holds == [1, -1]
    replay.profile(feeds)
    assert recorder.holds == [1, -1] * 2
    got = replay.run(feeds, threads=1)  # one thread: nothing to wake
    assert recorder.holds == [1, -1] * 2
    assert all(np.array_equal(want[k], got[k]) for k in want)


SAMPLES = {"vision": samples.vision_model, "policy": samples.policy_model}


@pytest.mark.parametrize("model", list(SAMPLES))
def test_sample_models_give_the_same_bits_at_any_thread_count(model: str) -> None:
    m = SAMPLES[model]()
    feeds = samples.sample_inputs(m)
    run = capture_onnx(load_onnx(m, device="CPU"), feeds, target="CPU")
    assert any(range_kernel(k.source, k.entry) for k in run.cmdbuf.kernels)  # something is split
    assert not any("omp" in k.source for k in run.cmdbuf.kernels) and "-fopenmp" not in run.replay.flags
    replay = run.replay
    got = {}
    for threads in (1, 2, 3, 1):
        replay.set_threads(threads)
        assert replay.threads == threads
        got[threads] = {k: v.tobytes() for k, v in replay(feeds).items()}
    assert got[1] == got[2] == got[3]


def test_the_thread_count_is_per_replay() -> None:
    m = samples.policy_model()
    feeds = samples.sample_inputs(m)
    run = capture_onnx(load_onnx(m, device="CPU"), feeds, target="CPU")
    other = make_replay(run.cmdbuf, run.weights, "CPU")
    run.replay.set_threads(1)
    other.set_threads(2)
    assert (run.replay.threads, other.threads) == (1, 2)
    a, b = run.replay(feeds), other(feeds)
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
    with pytest.raises(Exception, match="positive"):
        other.set_threads(0)


def _worker_masks(fn: object, caller_core: int) -> list[set[int]]:
    """The affinity of each worker that ran a chunk of a 2-thread region the caller published from ``caller_core``
    (the caller pinned there for the region, then let go)."""
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {caller_core})
    try:
        ctx = held_who_region(fn, 2000)
    finally:
        os.sched_setaffinity(0, mask)
    return [os.sched_getaffinity(int(t)) for t in set(ctx[2::2].tolist()) - {threading.get_native_id()}]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a worker can only keep off the caller's core with two")
def test_woken_workers_keep_off_the_callers_core(work: tuple) -> None:
    """A worker runs on every core the process may use but the one its caller published the region from, and
    follows the caller when it moves (left to the OS, a woken worker shared the caller's core for several calls)."""
    ffi, lib, _ = work
    p = cpu.thread_pool()
    assert p.avoids_caller
    fn = p.ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.who)))
    region(work[2], 2, 8)  # the worker exists
    cores = sorted(os.sched_getaffinity(0))
    for core in (cores[0], cores[-1]):
        masks = _worker_masks(fn, core)
        assert masks and all(m == set(cores) - {core} for m in masks), (core, masks)


def _slice_ns(lib: object, tid: int) -> int:
    ns = int(lib.slice_of(tid))
    assert ns >= 0, f"sched_getattr failed for thread {tid}"
    return ns


def test_workers_ask_for_a_short_time_slice(work: tuple) -> None:
    """Workers take the slice request when woken (the shortest EEVDF takes by default, then whatever is set, 0 back
    to the kernel's), and the caller's thread keeps its own."""
    ffi, lib, _ = work
    p = cpu.thread_pool()
    fn = p.ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.who)))
    kernel_default = _slice_ns(lib, threading.get_native_id())  # 0 where the kernel has no custom slices

    def worker_slices() -> set[int]:
        ctx = held_who_region(fn, 2000)
        workers = set(ctx[2::2].tolist()) - {threading.get_native_id()}
        assert workers, "no worker took a chunk"
        return {_slice_ns(lib, t) for t in workers}

    try:
        assert worker_slices() == {cpu_pool.SLICE_NS if kernel_default else 0}
        p.lib.dp_pool_set_slice_ns(300_000)
        assert worker_slices() == {300_000 if kernel_default else 0}
        p.lib.dp_pool_set_slice_ns(0)
        assert worker_slices() == {kernel_default}
        assert _slice_ns(lib, threading.get_native_id()) == kernel_default
    finally:
        p.lib.dp_pool_set_slice_ns(cpu_pool.slice_ns())


def test_a_new_worker_takes_part_in_the_region_that_started_it() -> None:
    """The first region of a process starts its worker and the worker takes chunks of that region (regression: a
    worker read the current generation when its thread began, after the region was published, and sat it out)."""
    script = textwrap.dedent("""
        import sys, threading
        import cffi, numpy as np
        import targets.cpu_runtime as cpu
        ffi = cffi.FFI()
        ffi.cdef("void who(void *ctx, int lo, int hi);")
        lib = ffi.dlopen(sys.argv[1])
        p = cpu.thread_pool()
        assert p.workers() == 0
        ctx = np.zeros(2 + 2 * 8, dtype=np.int32)
        ctx[0] = 5000
        p.lib.dp_parallel_for(2, 8, 8, p.ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.who))),
                              p.ffi.cast("void*", ctx.ctypes.data))
        print(len(set(ctx[2::2].tolist()) - {threading.get_native_id()}))
    """)
    path = cpu.compile_shared(WORK)
    proc = subprocess.run([sys.executable, "-c", script, str(path)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1"]


def _on_realtime_thread(call: object, priority: int = 3) -> object:
    """``call()`` on a new thread running ``SCHED_FIFO`` at ``priority``; skips where the OS refuses the policy."""
    result: dict = {}

    def run() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except PermissionError as e:
            result["refused"] = e
            return
        try:
            result["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            result["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "refused" in result:
        pytest.skip(f"the OS refuses SCHED_FIFO to this process: {result['refused']}")
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_workers_follow_a_realtime_caller(work: tuple) -> None:
    """Workers woken by a SCHED_FIFO caller run SCHED_FIFO at its priority (a fair worker was preempted by every
    busy process while the real-time caller waited for its chunk), never poll (a real-time poller kept the workers
    not yet woken off its core: the first region ran on the caller alone), and take a fair policy with their slice
    request again once a fair caller wakes them."""
    ffi, lib, _ = work
    p = cpu.thread_pool()
    fn = p.ffi.cast("dp_fn", int(ffi.cast("uintptr_t", lib.who)))
    caller = threading.get_native_id()
    kernel_default = _slice_ns(lib, caller)

    def chunk_takers() -> set[int]:
        ctx = held_who_region(fn, 2000)
        workers = set(ctx[2::2].tolist()) - {threading.get_native_id()}
        assert workers, "no worker took a chunk"
        return workers

    def realtime_part() -> tuple[set[int], bool]:
        workers = chunk_takers()
        p.lib.dp_pool_set_linger_ns(10 * 10**9)
        try:
            region(work[2], 2, 8)
            return workers, _all_asleep(p)  # the linger is on, but real-time workers never poll
        finally:
            p.lib.dp_pool_set_linger_ns(cpu_pool.LINGER_NS)

    try:
        workers, slept = _on_realtime_thread(realtime_part, priority=3)
        assert {os.sched_getscheduler(t) for t in workers} == {os.SCHED_FIFO}
        assert {os.sched_getparam(t).sched_priority for t in workers} == {3}
        assert slept
        assert os.sched_getscheduler(caller) == os.SCHED_OTHER  # this thread was never touched
    finally:
        workers = chunk_takers()  # from this fair thread
    assert {os.sched_getscheduler(t) for t in workers} == {os.SCHED_OTHER}
    assert {_slice_ns(lib, t) for t in workers} == {cpu_pool.SLICE_NS if kernel_default else 0}


@pytest.mark.parametrize("setting", ["100", "0"])
def test_no_solo_spells_where_workers_have_short_slices(work: tuple, setting: str) -> None:
    """The pool's default solo factor: 0 where the kernel takes the workers' slice request, else SOLO_FACTOR."""
    script = "import targets.cpu_runtime as cpu; p = cpu.thread_pool(); print(p.solo_factor, p.lib.dp_pool_slices())"
    env = {**os.environ, cpu_pool.SLICE_ENV: setting, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    factor, slices = map(int, proc.stdout.split())
    assert bool(slices) == (_slice_ns(work[1], threading.get_native_id()) != 0)
    assert factor == (0 if slices and setting != "0" else cpu_pool.SOLO_FACTOR)


@pytest.mark.parametrize(("value", "expected"), [("250", 250_000), ("0", 0), (None, cpu_pool.SLICE_NS)])
def test_the_slice_setting(monkeypatch: pytest.MonkeyPatch, value: str | None, expected: int) -> None:
    if value is None:
        monkeypatch.delenv(cpu_pool.SLICE_ENV, raising=False)
    else:
        monkeypatch.setenv(cpu_pool.SLICE_ENV, value)
    assert cpu_pool.slice_ns() == expected


def test_a_bad_slice_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_pool.SLICE_ENV, "fast")
    with pytest.raises(CompileError, match=r"DRIVEPACK_CPU_SLICE_US: expected a whole number of microseconds, "
                                           r"got 'fast'"):
        cpu_pool.slice_ns()


@pytest.mark.parametrize(("setting", "cores"), [("0", "all"), ("1", "one")],
                         ids=["DRIVEPACK_CPU_PIN=0: left alone", "a process kept to one core: left there"])
def test_workers_left_where_the_os_puts_them(setting: str, cores: str) -> None:
    script = textwrap.dedent("""
        import os, sys
        import numpy as np
        if sys.argv[1] == "one":
            os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        allowed = os.sched_getaffinity(0)
        import targets.cpu_runtime as cpu
        from jit import Tensor
        before = set(os.listdir("/proc/self/task"))
        x = Tensor(np.ones((512, 512), np.float32))
        (x @ x).numpy()
        p = cpu.thread_pool()
        workers = set(os.listdir("/proc/self/task")) - before
        print(p.avoids_caller, len(workers), all(os.sched_getaffinity(int(t)) == allowed for t in workers))
    """)
    env = {**os.environ, "DRIVEPACK_CPU_PIN": setting, "DRIVEPACK_CPU_THREADS": "2", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script, cores], env=env, capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    avoids, workers, unchanged = proc.stdout.split()
    assert avoids == "False" and int(workers) >= 1 and unchanged == "True", proc.stdout


def test_a_forked_child_starts_its_own_workers(work: tuple) -> None:
    region(work[2], 2, 8)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            counts, _ = region(work[2], 2, 1000)
            os._exit(0 if (counts == 1).all() and cpu.thread_pool().workers() >= 1 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


RANGED = """#include <math.h>
#include <stdint.h>
void k(float* restrict data0, float* restrict data1, int dp_lo, int dp_hi) {
  for (int dp_i = dp_lo; dp_i < dp_hi; dp_i++) {
    int ridx0 = (dp_i / 4);
    int ridx1 = dp_i % 4;
    *(data0+((ridx0*4)+ridx1)) = *(data1+((ridx0*4)+ridx1));
  }
}
"""


def test_the_range_parameters_lie_within_the_dispatchs_n() -> None:
    bindings = [("arena:0+64", 64, None), ("input:x", 64, None)]
    assert range_kernel(RANGED, "k")
    check_kernel(RANGED, "k", [("arena:0+64", False), ("input:x", False)], 0, "k")
    check_extents(RANGED, "k", (16,), None, bindings, [], "k")  # n = 16: 64 bytes
    with pytest.raises(IndexRangeError, match="bytes the kernel accesses"):
        check_extents(RANGED, "k", (17,), None, bindings, [], "k")  # a package that says n = 17 is refused
    with pytest.raises(IndexRangeError):
        check_extents(RANGED, "k", (4, 4), None, bindings, [], "k")  # only a 1-d launch bounds the range
    with pytest.raises(KernelParamsError, match="parameters expected"):
        check_kernel(RANGED, "k", [("arena:0+64", False)], 0, "k")
    swapped = RANGED.replace("int dp_lo, int dp_hi", "int dp_hi, int dp_lo")
    assert not range_kernel(swapped, "k")
    with pytest.raises(KernelParamsError):
        check_kernel(swapped, "k", [("arena:0+64", False), ("input:x", False)], 0, "k")


def test_a_range_parameter_spelled_otherwise_is_a_scalar_with_its_recorded_value() -> None:
    """``int32_t dp_hi`` is no range parameter to the launcher: the index check reads it as the dispatch's scalar
    too (the same test decides both), so a recorded value past the buffer is refused."""
    src = RANGED.replace("int dp_lo, int dp_hi", "int dp_lo, int32_t dp_hi")
    assert not range_kernel(src, "k")
    bindings = [("arena:0+64", 64, None), ("input:x", 64, None)]
    check_kernel(src, "k", [("arena:0+64", False), ("input:x", False)], 2, "k")
    check_extents(src, "k", (1,), None, bindings, [("int32", 0), ("int32", 16)], "k")
    with pytest.raises(IndexRangeError):
        check_extents(src, "k", (1,), None, bindings, [("int32", 0), ("int32", 17)], "k")
