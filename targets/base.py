"""The interface every target answers, so that the compiler, capture and replay never branch on a name."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from jit.common.dtype import DType
from jit.common.errors import CompileError


@dataclass(frozen=True)
class TargetLimits:
    """What a target can launch and how it wants memory laid out."""

    max_local_size: int = 1
    max_local_dims: tuple[int, ...] = (1, 1, 1)
    buffer_alignment: int = 64
    images: bool = False  # capture binds conv/matmul weights as image2d_t (jit/codegen/passes/images.py)
    image2d_max: tuple[int, int] = (0, 0)  # (height, width) in texels


@dataclass
class Program:
    """A compiled kernel ready to launch."""

    name: str
    source: str
    handle: Any
    global_size: tuple[int, ...] = (1,)
    local_size: tuple[int, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Buffer:
    """Device memory of ``nbytes`` bytes owned by a target."""

    __slots__ = ("target", "nbytes", "handle", "__weakref__")

    def __init__(self, target: Target, nbytes: int, handle: Any) -> None:
        self.target = target
        self.nbytes = nbytes
        self.handle = handle

    def __repr__(self) -> str:
        return f"<Buffer {self.target.name} {self.nbytes} bytes>"


class Target(abc.ABC):
    """A place kernels run: declares dtypes and limits, renders, compiles, allocates, launches, copies."""

    name: str = "?"
    limits: TargetLimits = TargetLimits()

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

    @abc.abstractmethod
    def compile(self, name: str, source: str, meta: dict[str, Any]) -> Program:
        """Compile (or fetch from the on-disk cache) one kernel."""

    def compile_many(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Program]:
        """Compile several kernels; targets with a costly compiler start override this to batch them."""
        return [self.compile(name, source, meta) for name, source, meta in items]

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
