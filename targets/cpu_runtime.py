"""The CPU target's device side: C source compiled by the system C compiler, loaded with cffi, host buffers.

This is all a CPU replay needs; it imports no renderer (the compiler-facing CPUTarget in targets/cpu.py adds
rendering on top). Compiled shared objects are cached on disk (targets/kernel_cache.py) by a hash of (source,
compiler, flags), so a second process compiles nothing. A parallel kernel (its loop range as its last two
parameters) is launched over the process's thread pool (targets/cpu_pool.py, ``thread_pool``) with this runtime's
thread count; kernels with the OpenMP pragma (an earlier renderer's, still loadable) are built with -fopenmp.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import cffi
import numpy as np

from jit.common.errors import CompileError
from jit.common.helpers import usable_cores
from targets import cpu_pool
from targets.base import Buffer, Program, Runtime, TargetLimits
from targets.kernel_cache import cache_dir, cached_artifact, publish

OMP_THREADS_SYMBOL = "dp_omp_threads"
# the team size is a variable the target writes after loading (a forked child must drop to 1: libgomp's thread
# pool does not survive fork, and a team of more than 1 thread in the child hangs); defined once per object
OMP_THREADS_SETUP = f"#ifndef DP_OMP_THREADS\n#define DP_OMP_THREADS\nint {OMP_THREADS_SYMBOL} = 1;\n#endif"
# OpenMP: the outermost output loops are split over a team of threads (static schedule: equal chunks, no
# work-stealing bookkeeping); kernels with the pragma are built with OPENMP_FLAGS, the rest without
OPENMP_FLAGS: tuple[str, ...] = ("-fopenmp",)
THREADS_ENV = "DRIVEPACK_CPU_THREADS"
# a parallel kernel's range parameters (targets/cstyle/walk.py): the last two, ``int dp_lo, int dp_hi``; its
# eager launches go through a wrapper ``<name>_dp_job(void **args, int lo, int hi)`` compiled beside it
RANGE_PARAMS = ("int dp_lo", "int dp_hi")
JOB_SUFFIX = "_dp_job"


def job_wrapper(name: str, source: str) -> str:
    """The pool's entry into parallel kernel ``name``: its buffer arguments from a table, then the range."""
    n_params = source.split(f" {name}(", 1)[1].split(")", 1)[0].count(",") + 1
    args = "".join(f"a[{i}], " for i in range(n_params - 2))
    return f"\nvoid {name}{JOB_SUFFIX}(void *ctx, int lo, int hi) {{ void **a = ctx; {name}({args}lo, hi); }}\n"

CFLAGS: tuple[str, ...] = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-fno-math-errno",
                           "-fno-strict-aliasing")
BUFFER_ALIGNMENT = 64  # bytes: a cache line, and what the widest (AVX-512) vector loads like

# number of times this process ran the C compiler (a warm on-disk cache keeps it at 0)
cc_invocations = 0


@cache
def compiler_identity(cc: str) -> str:
    """The compiler's version banner: part of the cache key, so a compiler upgrade recompiles."""
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"C compiler: expected a working `{cc}`, got {e}") from None


@cache
def host_isa() -> str:
    """The instruction sets of this machine's CPU (cpuinfo's first ``flags`` line): part of the cache key, since
    ``-march=native`` code from a cache a machine with AVX-512 filled dies of SIGILL on one without."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    flags = next((line.split(":", 1)[1] for line in lines if line.startswith(("flags", "Features"))), "")
    return f"{platform.machine()}:{' '.join(sorted(flags.split()))}"


# GCC 12 vectorizes an if-converted loop over AVX-512VL lanes into wrong code: a select between a row value and a
# quotient (``m == -inf ? 0 : e / s``, an attention's masked softmax) divided by another row's sum. Our own vector
# kernels do not rely on GCC's if-conversion, so it is off wherever that combination occurs.
GCC_AVX512VL_WORKAROUND = ("-fno-tree-loop-if-convert",)


# On a host with AVX512-FP16 (Intel Sapphire Rapids and later), -march=native makes _Float16 arithmetic native:
# GCC 12 then drops a float -> _Float16 -> float round trip (the rounding a float16 model's casts stand for) and
# emits masked `vmovsh` that binutils 2.40 refuses to assemble. Without it _Float16 is computed in float and rounded
# back, as DESIGN's dtype policy states and as on every other x86 host, so a package's outputs do not depend on it.
NATIVE_FP16_WORKAROUND = ("-mno-avx512fp16",)


def compiler_workarounds(cc: str, flags: tuple[str, ...]) -> tuple[str, ...]:
    """Flags added to ``flags`` for compiler ``cc`` on this host, against its known wrong-code bugs."""
    if "-march=native" not in flags:
        return ()
    isa = f" {host_isa()} "
    gcc = "clang" not in compiler_identity(cc).lower()
    return (*(GCC_AVX512VL_WORKAROUND if " avx512vl " in isa and gcc else ()),
            *(NATIVE_FP16_WORKAROUND if " avx512_fp16 " in isa else ()))


def _cache_key(source: str, cc: str, flags: tuple[str, ...]) -> str:
    native = host_isa() if "-march=native" in flags else ""
    return hashlib.sha256("\0".join((source, cc, compiler_identity(cc), native, *flags)).encode()).hexdigest()


def compile_shared_many(sources: list[str], cc: str | None = None, flags: tuple[str, ...] = CFLAGS) -> list[Path]:
    """Shared objects for ``sources``; every source not in the cache is compiled in one compiler run (the one
    ``compile_shared_ahead`` started, if it did)."""
    cc, flags = _toolchain(cc, flags)
    keys = [_cache_key(src, cc, flags) for src in sources]
    found = {k: cached_artifact(k, ".so") for k in keys}
    missing = list(dict.fromkeys(src for src, k in zip(sources, keys, strict=True) if found[k] is None))
    if missing:
        batch_key = _cache_key("\n".join(missing), cc, flags)
        with _ahead_lock:
            job = _ahead.pop(batch_key, None)
        out = _finish_job(job or _start_job("\n".join(missing), cc, flags, shared=True), batch_key, "")
        for src in missing:
            key = _cache_key(src, cc, flags)
            publish(cache_dir() / f"{key}.ref", out.name)
            found[key] = out
    return [found[k] for k in keys]  # type: ignore[misc]


def compile_shared_ahead(sources: list[str], cc: str | None = None, flags: tuple[str, ...] = CFLAGS) -> int:
    """Start in the background the compiler run a later ``compile_shared_many`` of the same ``sources`` and
    ``flags`` makes, so it runs while the caller goes on; that call then waits for it. Returns the compilers
    started: none where every source is cached or the run already started. Only for text this process rendered."""
    cc, flags = _toolchain(cc, flags)
    missing = list(dict.fromkeys(src for src in sources if cached_artifact(_cache_key(src, cc, flags), ".so") is None))
    if not missing:
        return 0
    batch_key = _cache_key("\n".join(missing), cc, flags)
    with _ahead_lock:
        if batch_key in _ahead:
            return 0
        _ahead[batch_key] = _start_job("\n".join(missing), cc, flags, shared=True, ahead=True)
    return 1


@dataclass
class _CompilerJob:
    """One compiler run (a translation unit to an object file or a shared object), in its own temporary
    directory."""

    text: str
    proc: subprocess.Popen
    out: Path
    tmp: tempfile.TemporaryDirectory


# compilers started ahead run below the caller's priority: the caller renders and checks the kernels the
# compilers get next, and several compilers at its own priority would take most of its core
AHEAD_NICENESS = 10
# compiler runs started by ``compile_ahead`` and ``compile_shared_ahead`` and not yet waited for, by output key
_ahead: dict[str, _CompilerJob] = {}
_ahead_lock = threading.Lock()


def _toolchain(cc: str | None, flags: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    cc = cc or os.environ.get("CC") or shutil.which("cc") or "cc"
    return cc, (*flags, *compiler_workarounds(cc, flags))


def _object_key(part: str, cc: str, flags: tuple[str, ...]) -> str:
    return _cache_key("\0".join(("object", part)), cc, flags)


def _start_job(text: str, cc: str, flags: tuple[str, ...], shared: bool, ahead: bool = False) -> _CompilerJob:
    """The compiler started on ``text``: to a shared object (``flags`` as they are) or to an object file; one
    started ``ahead`` of its caller's wait runs at ``AHEAD_NICENESS``."""
    global cc_invocations
    tmp = tempfile.TemporaryDirectory()
    src, out = Path(tmp.name) / "unit.c", Path(tmp.name) / ("unit.so" if shared else "unit.o")
    src.write_text(text)
    cc_invocations += 1
    args = [*flags, str(src), "-o", str(out), "-lm"] if shared else \
        [*(f for f in flags if f != "-shared"), "-c", str(src), "-o", str(out)]
    # its own process group, so that stopping it stops the compiler proper and assembler the driver started (killing
    # the driver alone left them running, orphaned), and its own TMPDIR, so that their intermediate files go with
    # the directory (a killed driver left its assembly files in /tmp)
    proc = subprocess.Popen([cc, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": tmp.name}, process_group=0)
    if ahead:
        with contextlib.suppress(OSError):  # best effort: the compile is the same at any priority
            os.setpriority(os.PRIO_PGRP, proc.pid, AHEAD_NICENESS)  # the group: children forked before this too
    return _CompilerJob(text, proc, out, tmp)


def _finish_job(job: _CompilerJob, key: str, what: str) -> Path:
    """The cached output of ``job`` (``key`` + its suffix) once its compiler has exited; CompileError with its
    messages if it failed."""
    try:
        err = job.proc.communicate()[1]
        if job.proc.returncode != 0:
            raise CompileError(f"C compile failed ({' '.join(job.proc.args)}){what}:\n{err}\n--- source ---\n"
                               f"{job.text}")
        out = cache_dir() / f"{key}{job.out.suffix}"
        publish(out, job.out.read_bytes())
        return out
    finally:
        job.tmp.cleanup()


def abandon_ahead(parts: list[str] | None = None, cc: str | None = None, flags: tuple[str, ...] = CFLAGS) -> None:
    """Stop the compilers ``compile_ahead`` started for ``parts`` (with ``flags``) and not yet linked: a link that
    will never come. Every such compiler when ``parts`` is None (at exit: a capture that failed after starting
    them)."""
    with _ahead_lock:
        if parts is None:
            keys = list(_ahead)
        else:
            cc, flags = _toolchain(cc, flags)
            keys = [k for k in (_object_key(part, cc, flags) for part in parts) if k in _ahead]
        jobs = [_ahead.pop(k) for k in keys]
    for job in jobs:
        with contextlib.suppress(ProcessLookupError):  # the whole group may have exited already
            os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait()
        job.tmp.cleanup()


atexit.register(abandon_ahead)


def compile_ahead(parts: list[str], cc: str | None = None, flags: tuple[str, ...] = CFLAGS) -> int:
    """Start compiling each of ``parts`` to an object file in the background, for a later ``compile_shared_parts``
    with the same flags to link, so the compiler runs while the caller goes on (a capture validating its command
    buffer). Returns how many compilers it started: none for a part whose object is cached or already started.
    Only for text this process rendered itself: a package's kernels are checked (targets/source_check.py) before
    anything compiles them, and go through ``compile_shared_parts`` alone."""
    cc, flags = _toolchain(cc, flags)
    started = 0
    with _ahead_lock:
        for part in parts:
            key = _object_key(part, cc, flags)
            if key not in _ahead and cached_artifact(key, ".o") is None:
                _ahead[key] = _start_job(part, cc, flags, shared=False, ahead=True)
                started += 1
    return started


def compile_shared_parts(parts: list[str], cc: str | None = None, flags: tuple[str, ...] = CFLAGS) -> Path:
    """One shared object of the translation units ``parts``, each compiled to an object file by its own compiler
    run, all at once (one per core), then linked; cached by the parts' text like ``compile_shared`` (a hit starts
    no compiler), and each object by its part's text. A part ``compile_ahead`` started is waited for, not redone."""
    global cc_invocations
    if len(parts) == 1:
        return compile_shared(parts[0], cc, flags)
    cc, flags = _toolchain(cc, flags)
    key = _cache_key("\0".join(("parts", *parts)), cc, flags)
    found = cached_artifact(key, ".so")
    if found is not None:
        return found
    keys = [_object_key(part, cc, flags) for part in parts]
    objects: list[Path | None] = [cached_artifact(k, ".o") for k in keys]
    with _ahead_lock:
        jobs = {i: _ahead.pop(k, None) for i, k in enumerate(keys) if objects[i] is None}
    jobs = {i: job or _start_job(parts[i], cc, flags, shared=False) for i, job in jobs.items()}
    failure: CompileError | None = None
    for i, job in jobs.items():  # every compiler waited for (and its directory removed), the first failure raised
        try:
            objects[i] = _finish_job(job, keys[i], f", part {i}")
        except CompileError as e:
            failure = failure or e
    if failure is not None:
        raise failure
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kernels.so"
        cc_invocations += 1
        proc = subprocess.run([cc, *flags, *map(str, objects), "-o", str(out), "-lm"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"C link failed ({cc} {' '.join(flags)}):\n{proc.stderr}")
        publish(cache_dir() / f"{key}.so", out.read_bytes())
    found = cached_artifact(key, ".so")
    assert found is not None
    return found


def compile_shared(source: str, cc: str | None = None, flags: tuple[str, ...] = CFLAGS) -> Path:
    """Compile ``source`` to a shared object, or return the cached one for the same source and flags."""
    return compile_shared_many([source], cc, flags)[0]


def cpu_threads() -> int:
    """Threads a CPU kernel may use: ``$DRIVEPACK_CPU_THREADS``, else the cores this process may run on."""
    raw = os.environ.get(THREADS_ENV)
    if raw is None:
        return usable_cores()
    if not raw.strip().isdigit() or int(raw) < 1:
        raise CompileError(f"{THREADS_ENV}: expected a positive integer, got {raw!r}")
    return int(raw)


def compile_jobs() -> int:
    """Compiler runs to start side by side: the cores this process may run on."""
    return usable_cores()


_pool: list[cpu_pool.Pool] = []
_pool_lock = threading.Lock()


def thread_pool() -> cpu_pool.Pool:
    """The process's thread pool (targets/cpu_pool.py), compiled (or found in the cache) and loaded on first use."""
    if not _pool:
        with _pool_lock:
            if not _pool:
                path = compile_shared(cpu_pool.POOL_SOURCE, flags=(*CFLAGS, *cpu_pool.POOL_FLAGS))
                _pool.append(cpu_pool.Pool(str(path)))
    return _pool[0]


_openmp_runtime: list[ctypes.CDLL] = []


def pin_openmp_runtime() -> None:
    """Load libgomp once, never to be unloaded: when the last kernel library using it is garbage-collected,
    dlclose would otherwise unmap libgomp under its idle pool threads and the process crashes."""
    if not _openmp_runtime:
        name = ctypes.util.find_library("gomp") or "libgomp.so.1"
        _openmp_runtime.append(ctypes.CDLL(name, mode=os.RTLD_GLOBAL | os.RTLD_NODELETE))


def call_if_alive(method: weakref.WeakMethod) -> Any:
    """A callable that runs ``method`` if its object still exists (fork hooks cannot be unregistered)."""
    def hook() -> None:
        bound = method()
        if bound is not None:
            bound()
    return hook


class CPURuntime(Runtime):
    """Single-process CPU execution; buffers are 64-byte aligned host arrays."""

    name = "CPU"
    limits = TargetLimits(max_local_size=1, buffer_alignment=BUFFER_ALIGNMENT)
    replay_builds_kernels = True  # targets/replay_cpu.py compiles the kernels into its driver

    def __init__(self, threads: int | None = None) -> None:
        self._ffi = cffi.FFI()
        self.compile_count = 0
        n = cpu_threads() if threads is None else threads
        if n < 1:
            raise CompileError(f"CPUTarget.threads: expected a positive integer, got {n}")
        self.threads = n
        self._loaded_parallel = False  # whether this process loaded a kernel using the thread pragma
        os.register_at_fork(after_in_child=call_if_alive(weakref.WeakMethod(self._single_threaded_after_fork)))

    def set_threads(self, n: int) -> None:
        """Threads every parallel kernel uses when this target launches it from now on."""
        if n < 1:
            raise CompileError(f"CPUTarget.threads: expected a positive integer, got {n}")
        self.threads = n

    @property
    def lanes(self) -> int:
        return self.threads

    def _single_threaded_after_fork(self) -> None:
        # libgomp keeps its thread pool across fork only in the parent: a child that starts a team of more than
        # one thread waits forever for threads that were not copied, so a forked child runs single-threaded
        if self._loaded_parallel:
            self.set_threads(1)

    def compile(self, name: str, source: str, meta: dict[str, Any]) -> Program:
        return self.compile_many([(name, source, meta)])[0]

    @staticmethod
    def _batches(items: list[tuple[str, str, dict[str, Any]]]) -> Iterator[tuple[list[int], list[str],
                                                                                  tuple[str, ...]]]:
        """One compiler run per flag set: (the items' indices, their sources, the flags). Single-threaded kernels
        keep their flags (and cache entries); a parallel kernel (its range as its last two parameters) is compiled
        with the job wrapper the pool calls. A capture's weight folds, which run once, get the same flags as the
        kernels that run often: the compiler's choice of which multiplies and adds to fuse into FMAs differs between
        -O2 and -O3, and a fold's bits must be those of the same kernel run eagerly."""
        for openmp in (False, True):
            picked = [i for i, (_, _, meta) in enumerate(items) if bool(meta.get("openmp")) == openmp]
            if picked:
                yield picked, [items[i][1] + job_wrapper(items[i][0], items[i][1]) if items[i][2].get("parallel")
                               else items[i][1] for i in picked], CFLAGS + OPENMP_FLAGS if openmp else CFLAGS

    def compile_many(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Program]:
        paths: list[Path | None] = [None] * len(items)
        for picked, sources, flags in self._batches(items):
            for i, path in zip(picked, compile_shared_many(sources, flags=flags), strict=True):
                paths[i] = path
        return [self._load(name, source, meta, path) for (name, source, meta), path in zip(items, paths, strict=True)]

    def compile_ahead(self, items: list[tuple[str, str, dict[str, Any]]]) -> int:
        # the thread pool too, which the first parallel kernel's launch loads
        started = 0
        if not _pool and any(meta.get("parallel") for _, _, meta in items):
            started += compile_shared_ahead([cpu_pool.POOL_SOURCE], flags=(*CFLAGS, *cpu_pool.POOL_FLAGS))
        return started + sum(compile_shared_ahead(sources, flags=flags) for _, sources, flags in self._batches(items))

    def _load(self, name: str, source: str, meta: dict[str, Any], path: Path) -> Program:
        ffi = cffi.FFI()
        n_params = source.split(f" {name}(", 1)[1].split(")", 1)[0].count(",") + 1
        if meta.get("parallel"):
            ffi.cdef(f"void {name}({', '.join(['void*'] * (n_params - 2) + ['int', 'int'])});")
            ffi.cdef(f"void {name}{JOB_SUFFIX}(void *ctx, int lo, int hi);")
        else:
            ffi.cdef(f"void {name}({', '.join(['void*'] * n_params)});")
        if meta.get("openmp"):
            ffi.cdef(f"extern int {OMP_THREADS_SYMBOL};")
        if meta.get("openmp"):
            pin_openmp_runtime()
        lib = ffi.dlopen(str(path))
        if meta.get("openmp"):
            # a caller that runs the kernel without launch() (a C driver) gets this target's count too
            setattr(lib, OMP_THREADS_SYMBOL, self.threads)
            self._loaded_parallel = True
        self.compile_count += 1
        extra: dict[str, Any] = {"lib": lib, "ffi": ffi}
        if meta.get("parallel"):
            extra["job"] = ffi.cast("uintptr_t", getattr(lib, name + JOB_SUFFIX))
        return Program(name, source, getattr(lib, name), tuple(meta.get("global_size", (1,))),
                       meta=meta | extra)

    def allocate(self, nbytes: int) -> Buffer:
        # over-allocate and slice so the data pointer is aligned
        align = self.limits.buffer_alignment
        raw = np.empty(max(nbytes, 1) + align, dtype=np.uint8)
        offset = (-raw.ctypes.data) % align
        return Buffer(self, nbytes, raw[offset:offset + max(nbytes, 1)])

    def copyin(self, buf: Buffer, data: memoryview) -> None:
        buf.handle[:buf.nbytes] = np.frombuffer(data, dtype=np.uint8)

    def copyout(self, buf: Buffer, out: memoryview) -> None:
        np.frombuffer(out, dtype=np.uint8)[:] = buf.handle[:buf.nbytes]

    def host_view(self, buf: Buffer) -> np.ndarray:
        """The buffer's bytes, without a copy (host memory on this target)."""
        return buf.handle[:buf.nbytes]

    def launch(self, prog: Program, bufs: list[Buffer], wait: bool = False) -> float | None:
        ffi = self._ffi
        args = [ffi.cast("void*", b.handle.ctypes.data) for b in bufs]
        if prog.meta.get("openmp"):
            # the team size lives in the shared object, which other targets may share: set it per launch
            setattr(prog.meta["lib"], OMP_THREADS_SYMBOL, self.threads)
        start = time.perf_counter()
        if prog.meta.get("parallel"):
            # the kernel's range [0, n) split over the pool (targets/cpu_pool.py); the caller works too
            p = thread_pool()
            table = p.ffi.new("void*[]", [p.ffi.cast("void*", b.handle.ctypes.data) for b in bufs] or 1)
            p.lib.dp_parallel_for(self.threads, prog.global_size[0], 0, p.ffi.cast("dp_fn", int(prog.meta["job"])),
                                  table)
        else:
            prog.handle(*args)
        return time.perf_counter() - start if wait else None
