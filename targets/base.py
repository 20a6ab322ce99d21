"""The interfaces every target answers, so that the compiler, capture and replay never branch on a name.

``Runtime`` is the device side (compile a given source with the target's own compiler, allocate, copy, launch):
what a replay needs, importing no renderer. ``Target`` adds the compiler side (declared dtypes, rendering).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jit.common.dtype import DType
from jit.common.errors import CompileError, DrivepackError


class CacheLevelError(DrivepackError, ValueError):
    """A cache description whose size, associativity and line size do not make whole sets."""


@dataclass(frozen=True)
class CacheLevel:
    """One data cache as the optimizer models it: ``size`` bytes in sets of ``ways`` lines of ``line`` bytes
    (an address's set is ``address // line % sets``)."""

    size: int
    ways: int
    line: int

    def __post_init__(self) -> None:
        for name in ("size", "ways", "line"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CacheLevelError(f"CacheLevel.{name}: expected an int >= 1, got {value!r}")
        if self.size % (self.ways * self.line):
            raise CacheLevelError(f"CacheLevel: expected size a multiple of ways * line = {self.ways * self.line}, "
                                  f"got size {self.size}")

    @property
    def sets(self) -> int:
        return self.size // (self.ways * self.line)


# what the optimizer assumes where a target says nothing: the caches of the machines its heuristics were measured
# on. L1: 32 KB, 8 ways of 64-byte lines (x86 since Skylake and Zen; jit/frontend/winograd.py's spare tiles).
# L2: one core's 512 KB, 8 ways (AMD EPYC, Zen 2; jit/codegen/opt/order.py's re-read threshold).
DEFAULT_L1 = CacheLevel(32 * 1024, 8, 64)
DEFAULT_L2 = CacheLevel(512 * 1024, 8, 64)


@dataclass(frozen=True)
class TargetLimits:
    """What a target can launch, how it wants memory laid out, and the caches its kernels read through.

    ``l1``: the data cache nearest the code (a CPU core's L1d): its sets decide which strides of a kernel's
    loads collide (Winograd's spare tiles), its line how far a load must move to reach a new line (the
    optimizer's line-reuse split). ``l2``: the cache behind it (a CPU core's L2; on OpenCL the device's global
    memory cache): an operand larger than it that a tiled kernel sweeps once per block comes from further away
    each time (the optimizer's loop order). Both ``DEFAULT_L1`` / ``DEFAULT_L2`` where the target cannot tell.
    """

    max_local_size: int = 1
    max_local_dims: tuple[int, ...] = (1, 1, 1)
    buffer_alignment: int = 64
    images: bool = False  # capture binds conv/matmul weights as image2d_t (jit/codegen/passes/images.py)
    image2d_max: tuple[int, int] = (0, 0)  # (height, width) in texels
    l1: CacheLevel = DEFAULT_L1
    l2: CacheLevel = DEFAULT_L2


@dataclass
class Program:
    """A compiled kernel ready to launch."""

    name: str
    source: str
    handle: Any
    global_size: tuple[int, ...] = (1,)
    local_size: tuple[int, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RenderedKernel:
    """A kernel a capture rendered, before anything compiled it: its name and source, the launch facts its renderer
    chose (``meta``: the global size and the requested local size), and each buffer parameter's bytes in order (None
    where a parameter is no plain buffer: an image)."""

    name: str
    source: str
    meta: dict[str, Any]
    buffer_bytes: tuple[int, ...] | None


class Buffer:
    """Device memory of ``nbytes`` bytes owned by a target."""

    __slots__ = ("target", "nbytes", "handle", "__weakref__")

    def __init__(self, target: Runtime, nbytes: int, handle: Any) -> None:
        self.target = target
        self.nbytes = nbytes
        self.handle = handle

    def __repr__(self) -> str:
        return f"<Buffer {self.target.name} {self.nbytes} bytes>"


class Runtime(abc.ABC):
    """A place kernels run: compiles a given source, allocates, copies and launches (no renderer, no compiler
    IR: a replay runs on this alone)."""

    name: str = "?"
    limits: TargetLimits = TargetLimits()
    # whether this target's replay compiles the kernels' sources itself (the CPU driver: one object of all of
    # them), so that a capture renders its kernels without building each one first
    replay_builds_kernels: bool = False

    @abc.abstractmethod
    def compile(self, name: str, source: str, meta: dict[str, Any]) -> Program:
        """Compile (or fetch from the on-disk cache) one kernel."""

    def compile_many(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Program]:
        """Compile several kernels; targets with a costly compiler start override this to batch them."""
        return [self.compile(name, source, meta) for name, source, meta in items]

    def compile_ahead(self, items: list[tuple[str, str, dict[str, Any]]]) -> int:
        """Start compiling what a later ``compile_many(items)`` compiles, in the background where the target can;
        that call then waits for it. Returns the compilers started: none by default (and none where all is
        cached). Only for kernels this process rendered."""
        return 0

    # whether loading a cached program costs a build (jit/capture_hints.py): then ``program_keys`` and ``prefetch``
    prefetches_programs: bool = False

    def program_keys(self, sources: Sequence[str]) -> list[str]:
        """The keys of the cached programs holding the kernels of ``sources``, for a later ``prefetch``."""
        return []

    def prefetch(self, keys: Sequence[str], awaited: bool = False) -> None:  # noqa: B027 - nothing to load by default
        """Start loading the cached programs of ``keys`` (``program_keys`` of an earlier capture of the same graph)
        in the background, kept for a later ``compile_many``, which does not wait for them unless ``awaited`` (keys
        known to be the programs it needs: it would otherwise build the one being loaded again, side by side)."""

    def forget_compiled(self) -> None:
        """Drop what this runtime keeps in memory of programs it built, so the next compile goes to the disk cache
        or the compiler (nothing to drop by default)."""
        return None

    @abc.abstractmethod
    def allocate(self, nbytes: int) -> Buffer: ...

    @abc.abstractmethod
    def copyin(self, buf: Buffer, data: memoryview) -> None: ...

    @abc.abstractmethod
    def copyout(self, buf: Buffer, out: memoryview) -> None: ...

    @abc.abstractmethod
    def launch(self, prog: Program, bufs: list[Buffer], wait: bool = False) -> float | None:
        """Run ``prog`` over ``bufs``; with ``wait`` return its run time in seconds."""

    @property
    def lanes(self) -> int:
        """How many lanes of a command buffer segment this target's replay runs at once (one thread each);
        1 means every dispatch runs in order."""
        return 1

    def synchronize(self) -> None:  # noqa: B027 - synchronous targets have nothing to wait for
        """Wait for every launched kernel to finish."""


@dataclass(frozen=True)
class ChainLimits:
    """Which kernels a capture runs as one chain (jit/schedule/chains.py), for a target whose dispatch costs more
    than a small kernel's work: a kernel of at most ``kernel_flops`` (as its graph counts them before the codegen
    passes, jit/codegen/stats.py) whose buffers hold at most ``kernel_bytes`` joins the chain of the kernels before
    it, up to ``chain_flops`` in all (one work-item runs a chain: its kernels' work is no longer shared out, and a
    copy that transposes much data runs slower on one thread than its dispatch costs)."""

    kernel_flops: int
    kernel_bytes: int
    chain_flops: int


@dataclass(frozen=True)
class TeamLimits:
    """Which kernels a capture runs as one team (jit/schedule/chains.py ``team_kernels``), for a target whose
    work-groups run concurrently on a host's cores and whose dispatch costs more than the wait of a spin barrier:
    up to ``members`` consecutive kernels (at least ``min_members``) of at most ``kernel_flops`` each (as the
    graph counts them before the codegen passes, jit/codegen/stats.py) that read no image and share no work-group
    memory, each member's parallel loops split into at most ``chunks`` claims per work-group."""

    members: int
    min_members: int
    chunks: int
    kernel_flops: int


class Target(Runtime):
    """A runtime the compiler renders for: declares its dtypes and renders lowered kernel graphs to source."""

    # 16-lane vectors run on halved units (targets/cpu_fma.py): the multiply-add rate a core is that of 8-lane units,
    # so work that trades multiply-adds for memory traffic pays sooner than on full-width ones
    halved_wide_fma: bool = False
    # where set, a capture runs consecutive small kernels as one (``render_chain``)
    chain_limits: ChainLimits | None = None
    # where set, a capture runs consecutive kernels as one persistent team of work-groups (``render_team``)
    team_limits: TeamLimits | None = None

    @abc.abstractmethod
    def supported_dtypes(self) -> frozenset[DType]:
        """The dtypes kernels may use natively; every other dtype is emulated or refused.

        The contract: the codegen pipeline (jit/codegen/pipeline.py) decomposes int64/uint64 into 32-bit words
        and float16/bfloat16/fp8 into float32 compute over integer storage whenever they are missing here, so
        a target lists only what its language and hardware really do; it must list bool, int32, uint32 and
        float32 (the emulations compute in them) and uint8/uint16 for emulated narrow-float storage. Any other
        missing dtype is a CompileError at compile time. ``render`` may assume the graph holds nothing else.
        """

    def check_dtypes(self, name: str, sink: Any) -> None:
        """CompileError if kernel ``name`` uses a dtype outside ``supported_dtypes()`` (a pipeline bug guard)."""
        from jit.codegen.passes.dtype_policy import used_dtypes  # the target layer does not import the compiler at load

        extra = sorted(d.name for d in used_dtypes(sink) - self.supported_dtypes())
        if extra:
            raise CompileError(f"{name}: dtypes {extra} reached the {self.name} renderer, which supports "
                               f"{sorted(d.name for d in self.supported_dtypes())}")

    @abc.abstractmethod
    def render(self, name: str, sink: Any) -> tuple[str, dict[str, Any]]:
        """Kernel source for a lowered kernel graph, plus launch metadata (global/local size)."""

    def render_chain(self, name: str, parts: Sequence[tuple[Any, tuple[int, ...]]],
                     params: Sequence[Any]) -> tuple[str, dict[str, Any]]:
        """One kernel running lowered kernel graphs in order, plus launch metadata: ``parts`` holds each graph
        with, per buffer parameter of it, the chain's parameter it reads (``params``: the chain's pointer types).
        Only targets that set ``chain_limits`` render chains."""
        raise CompileError(f"{name}: a chain of {len(parts)} kernels, which the {self.name} target does not run")

    def render_team(self, name: str, parts: Sequence[tuple[Any, tuple[int, ...]]], params: Sequence[Any],
                    counters: int) -> tuple[str, dict[str, Any]]:
        """One kernel whose work-groups run lowered kernel graphs in order as a team (``render_chain``'s ``parts``
        and ``params``; ``counters``: the parameter holding the team's claim and done counters, zero between
        launches), plus launch metadata. Only targets that set ``team_limits`` render teams."""
        raise CompileError(f"{name}: a team of {len(parts)} kernels, which the {self.name} target does not run")
