"""BEAM: a timed search over one kernel's optimizer options, and the hook that applies tuned options.

``kernel_options(sink, target)`` is what the codegen pipeline asks before optimizing a kernel. With no tuning
session and ``BEAM=0`` it answers None (the heuristic default, exactly as without this module). Inside
``use_tuning(table, beam)`` (or with ``BEAM=N`` set, which opens a process-wide session) it answers the options
stored for the kernel's key, target and device; a kernel missing from the table is searched when ``beam > 0``
(and the result stored in the table) and left at the default otherwise, so packaging with a complete tuning
file is deterministic and times nothing.

The search (``beam_search``): candidates are ``OptOptions`` one knob away from a kept candidate (tiling on/off,
the contiguous-axis and reuse-axis upcast, threads, vector types, and on OpenCL the work-group size); each
round compiles every new candidate in one batch, runs it on random data of the kernel's own dtypes and buffer
sizes, and keeps the ``beam`` fastest (median of a few runs). Candidates whose rendered source and launch are
the same as one already timed are not timed again. A candidate whose output differs from the default's beyond
the kernel's tolerance (exact for integers) is dropped, so a tuned choice never changes results beyond what the
optimizer itself guarantees. The search stops when a round finds nothing faster or after ``MAX_ROUNDS``.

A winner other than the default is confirmed before it is kept: it and the default are timed in turn
``CONFIRM_ROUNDS`` times and it must beat the default's median by ``CONFIRM_MARGIN``. Candidates are timed one
after another, and on a shared machine a slow spell while the default ran made later candidates look up to 2x
faster (the vision model's first conv: "877 us vs 1652 us", 1147 vs 858 us when timed in turn).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jit.codegen.opt import finish_kernel, optimize_for_target, target_default_opts, target_local_memory
from jit.codegen.opt.options import DEFAULT_OPTS, OptOptions
from jit.codegen.opt.tuning import TuningEntry, TuningTable, device_fingerprint, kernel_key
from jit.codegen.passes.symbolic import pm_symbolic
from jit.common.dtype import DType, PtrDType, dtypes, to_numpy
from jit.common.errors import DrivepackError
from jit.common.helpers import BEAM
from jit.ir.rewrite import graph_rewrite
from jit.ir.uop import Ops, UOp
from jit.schedule.lower import KernelInfo
from targets.base import Buffer, Program, Target

MAX_ROUNDS = 3  # rounds of one-knob moves; more rarely pays for the compile time at package time
TIMED_RUNS = 5  # runs per candidate after one warm-up; the median is kept
INNER_CHOICES = (64, 32, 16, 8, 4, 2, 1)  # contiguous-axis tile widths a move may pick (1: no upcast on that axis)
REUSE_CHOICES = (8, 4, 2, 1)
GROUP_CHOICES = (0, 16, 32, 64)  # work-items sharing a reduce (opt/group.py; 0: none), on targets with local memory
LOCAL_TOTALS = (1, 8, 32, 64, 128, 256)  # work-group sizes (in items) tried on targets with local sizes
CONFIRM_ROUNDS = 5  # turns of winner-then-default timing that confirm a winner
CONFIRM_MARGIN = 0.03  # the confirmed winner must be this much faster than the default, relatively
FLOAT_TOLERANCE = (1e-3, 1e-4)  # (rtol, atol scaled by the output's magnitude): contraction to FMA may differ


_PINNED: list[Any] = []  # loaded libraries of OpenMP candidates, kept for the process (see _Bench.compile)


class SearchError(DrivepackError, RuntimeError):
    """A kernel that cannot be searched (e.g. a parameter of unknown size)."""


@dataclass(frozen=True)
class OptimizedKernelInfo(KernelInfo):
    """A SINK arg that also records the options the kernel was optimized with: what the renderer or the target
    reads for choices that are not loop structure (OpenCL work-group size)."""

    opts: OptOptions = DEFAULT_OPTS


def with_options(sink: UOp, opts: OptOptions) -> UOp:
    """``sink`` whose SINK arg records ``opts`` (same graph otherwise)."""
    return sink.replace(arg=OptimizedKernelInfo(sink.arg.params, opts))


def applied_options(sink: UOp) -> OptOptions | None:
    """The options ``with_options`` recorded on ``sink``, or None."""
    return getattr(sink.arg, "opts", None)


# --- sessions: which table answers, and whether misses are searched ------------------------------------------

_serials = itertools.count(1)


@dataclass
class TuningSession:
    """A tuning table in use. ``beam`` 0: read only (misses keep the default); N > 0: misses are searched with
    beam width N and stored. Counters say what happened (hits, misses left at the default, kernels searched)."""

    table: TuningTable
    beam: int = 0
    hits: int = 0
    misses: int = 0
    searched: int = 0
    # sessions are numbered, not told apart by id(): a freed table's id can be reused by the next one
    serial: int = field(default_factory=lambda: next(_serials))
    _devices: dict[str, str] = field(default_factory=dict)

    def device(self, target: Target) -> str:
        if target.name not in self._devices:
            self._devices[target.name] = device_fingerprint(target)
        return self._devices[target.name]


_session: TuningSession | None = None
_env_session: TuningSession | None = None  # the process-wide session that ``BEAM=N`` opens


@contextlib.contextmanager
def use_tuning(table: TuningTable, beam: int = 0) -> Iterator[TuningSession]:
    """Compile with ``table`` (and search misses when ``beam`` > 0) inside the block."""
    global _session
    if not isinstance(beam, int) or isinstance(beam, bool) or beam < 0:
        raise SearchError(f"beam: expected an int >= 0, got {beam!r}")
    old, _session = _session, TuningSession(table, beam)
    try:
        yield _session
    finally:
        _session = old


def current_session() -> TuningSession | None:
    """The session in force: ``use_tuning``'s, else the one ``BEAM=N`` implies, else None."""
    global _env_session
    if _session is not None:
        return _session
    beam = int(BEAM)
    if beam <= 0:
        return None
    if _env_session is None or _env_session.beam != beam:
        _env_session = TuningSession(TuningTable(), beam)
    return _env_session


def settings_key() -> str:
    """What compiled kernels depend on from tuning (part of the compile cache key): "" when nothing is tuned."""
    s = current_session()
    return "" if s is None else f"tuning={s.serial};beam={s.beam}"


def kernel_options(sink: UOp, target: Target) -> OptOptions | None:
    """The options to optimize ``sink`` (a kernel graph before optimisation) with on ``target``: the tuned
    entry, a fresh search's result, or None for the heuristic default (see the module docstring)."""
    s = current_session()
    if s is None:
        return None
    key, device = kernel_key(sink), s.device(target)
    entry = s.table.get(key, target.name, device)
    if entry is not None:
        s.hits += 1
        return entry.opts
    if s.beam <= 0 or not searchable(sink):
        s.misses += 1
        return None
    result = beam_search(sink, target, s.beam)
    s.searched += 1
    s.table.put(TuningEntry(key, target.name, device, result.opts, result.name, result.time_s * 1e6,
                            result.default_s * 1e6, result.candidates))
    return result.opts


# --- the search ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SearchResult:
    """The kept options, their median time, the default's, and how many distinct candidates were timed."""

    opts: OptOptions
    time_s: float
    default_s: float
    candidates: int
    name: str = ""


@dataclass
class _Timed:
    opts: OptOptions
    time_s: float
    global_size: tuple[int, ...]
    program: Program


def searchable(sink: UOp) -> bool:
    """Whether random data can stand in for the kernel's parameters (known sizes, plain buffers)."""
    # exactly PtrDType: subclasses (image parameters) are not plain buffers random bytes could fill
    return all(type(p) is PtrDType and p.size >= 0 for p in sink.arg.params)


def random_arrays(sink: UOp, seed: int = 0) -> list[np.ndarray]:
    """One host array per parameter, of its dtype and element count: floats standard normal, uint8 across
    0..255, other integers in -8..8 (0..8 unsigned), bools 0/1. Index data stays valid: loads are clamped."""
    rng = np.random.default_rng(seed)
    out = []
    for i, p in enumerate(sink.arg.params):
        if type(p) is not PtrDType or p.size < 0:
            raise SearchError(f"parameter {i}: expected a buffer of known size, got {p!r}")
        base: DType = p.base
        npd = to_numpy(base)
        if base.is_float:
            arr = rng.standard_normal(p.size).astype(npd)
        elif base is dtypes.bool:
            arr = rng.integers(0, 2, p.size).astype(npd)
        elif base is dtypes.uint8:
            arr = rng.integers(0, 256, p.size).astype(npd)
        else:
            arr = rng.integers(0 if base.is_unsigned else -8, 9, p.size).astype(npd)
        out.append(np.ascontiguousarray(arr))
    return out


def launch_key(name: str, source: str, meta: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a rendered candidate a launch of its own: its source (named alike), launch sizes and the
    work-group size its options request (a move that changes only that renders the same source)."""
    return (source.replace(name, "K"), tuple(meta.get("global_size", ())), meta.get("local_size"),
            meta.get("local_request"))


def _optimized(sink: UOp, opts: OptOptions, target: Target) -> UOp:
    # the same steps as the pipeline's optimizer stages (jit/codegen/pipeline.py)
    optimized = graph_rewrite(optimize_for_target(sink, opts, target), pm_symbolic, name="symbolic after optimizing")
    return with_options(finish_kernel(optimized, opts), opts)


def neighbours(opts: OptOptions, target: Target, global_size: tuple[int, ...]) -> list[OptOptions]:
    """Every option set one knob away from ``opts``."""
    moves: list[dict[str, Any]] = [{"tile": not opts.tile}, {"vectorize": not opts.vectorize}, {"strided_tile": ()},
                                   {"reduce_lanes": not opts.reduce_lanes}]
    moves += [{"inner_upcasts": (u,)} for u in INNER_CHOICES]
    moves += [{"reuse_upcasts": (u,)} for u in REUSE_CHOICES]
    if getattr(getattr(target, "language", None), "parallel_for", ""):
        moves.append({"threads": not opts.threads})
    if target_local_memory(target):
        moves += [{"group_reduce": g} for g in GROUP_CHOICES]
    max_group = getattr(target, "max_group", 1)
    if max_group > 1:
        moves += [{"local_size": ls} for ls in local_size_choices(global_size, max_group,
                                                                  getattr(target, "max_items", ()))]
    out = []
    for m in moves:
        with contextlib.suppress(DrivepackError):  # a move outside the knob's domain is no candidate
            cand = dataclasses.replace(opts, **m)
            if cand != opts:
                out.append(cand)
    return out


def local_size_choices(global_size: tuple[int, ...], max_group: int, max_items: tuple[int, ...]) -> list[tuple]:
    """Work-group sizes dividing ``global_size`` within the limits: for each total in LOCAL_TOTALS, filled from
    dimension 0 (the contiguous one) and, when there are several dimensions, from the last one."""
    out: list[tuple[int, ...]] = []
    for total in LOCAL_TOTALS:
        for order in (range(len(global_size)), reversed(range(len(global_size)))):
            local, budget = [1] * len(global_size), max(1, min(total, max_group))
            for dim in order:
                cap = min(budget, max_items[dim] if dim < len(max_items) else 1, global_size[dim])
                local[dim] = next(d for d in range(max(cap, 1), 0, -1) if global_size[dim] % d == 0)
                budget //= local[dim]
            if tuple(local) not in out:
                out.append(tuple(local))
    return out


class _Bench:
    """The kernel's buffers on the target, the default's output, and candidate timing."""

    def __init__(self, sink: UOp, target: Target, runs: int) -> None:
        self.sink, self.target, self.runs = sink, target, runs
        self.host = random_arrays(sink)
        self.bufs: list[Buffer] = []
        for arr in self.host:
            buf = target.allocate(arr.nbytes)
            target.copyin(buf, memoryview(arr.view(np.uint8)))
            self.bufs.append(buf)
        self.reference: np.ndarray | None = None
        self.counter = 0
        self.seen: set[tuple[Any, ...]] = set()  # (source without its name, global size, local size) timed

    def compile(self, cands: list[OptOptions]) -> list[tuple[OptOptions, Program]]:
        """Candidates rendered and compiled in one batch; ones rendering to a launch already seen are left out."""
        items, kept = [], []
        for opts in cands:
            self.counter += 1
            name = f"beam{self.counter}"
            source, meta = self.target.render(name, _optimized(self.sink, opts, self.target))
            launch = launch_key(name, source, meta)
            if launch in self.seen:
                continue
            self.seen.add(launch)
            items.append((name, source, meta))
            kept.append(opts)
        programs = self.target.compile_many(items)
        # a CPU kernel built with OpenMP is never unloaded: dlclose of the last library using libgomp unmaps
        # libgomp under its idle worker threads, which crashes the process (seen as a segfault elsewhere)
        _PINNED.extend(p.meta["lib"] for p in programs if p.meta.get("openmp"))
        return list(zip(kept, programs, strict=True))

    def output(self) -> np.ndarray:
        out = np.empty_like(self.host[0])
        self.target.copyout(self.bufs[0], memoryview(out.view(np.uint8)))
        return out

    def time(self, prog: Program) -> float | None:
        """Median seconds of ``prog``, or None when its output differs from the default's."""
        self.target.launch(prog, self.bufs, wait=True)
        out = self.output()
        if self.reference is None:
            self.reference = out
        elif not outputs_match(out, self.reference):
            return None
        times = [self.target.launch(prog, self.bufs, wait=True) or 0.0 for _ in range(self.runs)]
        return statistics.median(times)


def outputs_match(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether a candidate's output equals the default's: bit-equal integers, floats within FLOAT_TOLERANCE of
    the output's magnitude with NaNs in the same places."""
    if got.dtype.kind != "f":
        return bool(np.array_equal(got, want))
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return False
    finite = np.isfinite(w)
    if not np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]):
        return False
    scale = float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
    rtol, atol = FLOAT_TOLERANCE
    return bool(np.allclose(g[finite], w[finite], rtol=rtol, atol=atol * max(scale, 1.0)))


def beam_search(sink: UOp, target: Target, beam: int, runs: int = TIMED_RUNS,
                max_rounds: int = MAX_ROUNDS) -> SearchResult:
    """The fastest options found for ``sink`` on ``target`` by a beam search of width ``beam`` (module docstring).
    The default options are always a candidate, so the result is never slower than the default as measured."""
    if beam < 1:
        raise SearchError(f"beam: expected an int >= 1, got {beam!r}")
    bench = _Bench(sink, target, runs)
    start = target_default_opts(target)
    (_, prog), = bench.compile([start])
    assert bench.time(prog) is not None  # the first output is the reference
    # timed again: the first launches of a process run slow (thread pool start, clock ramp), which made every
    # candidate after the default look up to 2x faster than it (the stride-2 convs' "wins" that an A/B in the
    # model did not show)
    default_s = bench.time(prog)
    assert default_s is not None
    default = _Timed(start, default_s, tuple(prog.global_size), prog)
    kept = [default]
    tried = 1
    for _ in range(max_rounds):
        cands = list(dict.fromkeys(n for t in kept for n in neighbours(t.opts, target, t.global_size)))
        timed = []
        for opts, prog in bench.compile(cands):
            t = bench.time(prog)
            tried += 1
            if t is not None:
                timed.append(_Timed(opts, t, tuple(prog.global_size), prog))
        best = min(t.time_s for t in kept)
        kept = sorted(kept + timed, key=lambda t: t.time_s)[:beam]
        if kept[0].time_s >= best:
            break
    winner, default_s = (default, default_s) if kept[0] is default else _confirmed(bench, kept[0], default)
    return SearchResult(winner.opts, winner.time_s, default_s, tried, _name_hint(sink))


def _confirmed(bench: _Bench, winner: _Timed, default: _Timed) -> tuple[_Timed, float]:
    """``winner`` if, timed in turn with ``default``, it still beats it by ``CONFIRM_MARGIN``, else ``default``;
    with the re-measured time, and the default's re-measured time."""
    runs: tuple[list[float], list[float]] = ([], [])
    for _ in range(CONFIRM_ROUNDS):
        for timed, out in zip((winner, default), runs, strict=True):
            out.append(bench.time(timed.program) or math.inf)
    win_s, default_s = (statistics.median(r) for r in runs)
    chosen = winner if win_s < default_s * (1 - CONFIRM_MARGIN) else default
    return dataclasses.replace(chosen, time_s=win_s if chosen is winner else default_s), default_s


def _name_hint(sink: UOp) -> str:
    dims = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda u: u.arg[0])
    return "k_" + "_".join(str(int(r.src[0].arg)) for r in dims)
