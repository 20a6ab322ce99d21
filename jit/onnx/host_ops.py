"""The registry of ONNX ops that compute on the host, because their output's shape depends on input values.

NonZero, Unique, Compress, NonMaxSuppression, MelWeightMatrix and RoiAlign with an adaptive sampling grid read
the values of some inputs with numpy while the graph is walked; everything else computes as kernels. Those
values must be known at load: constants of the model, or host data the caller passed. A capture passes
placeholders, whose values exist only at replay time, so a host op reading one is refused with a
``HostOpError`` naming the node; a host op on constants runs once at load, and its result is a constant of
the captured graph (folded into the package).

Such a handler registers with ``host_op`` instead of ``onnx_op``, which makes this module the one list of them.
The loader checks the inputs a host op reads before calling it, and records each node that ran host code in
``OnnxModel.host_nodes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jit.common.errors import UnsupportedOp
from jit.onnx.registry import Handler, OpContext, onnx_op


class HostOpError(UnsupportedOp):
    """A host op whose data is only known at run time (a capture's placeholder, or computed from one)."""


@dataclass(frozen=True)
class HostOp:
    """One op that computes on the host: why, which inputs it reads there, and on which nodes."""

    op: str
    reason: str  # why the output's shape depends on the data
    inputs: tuple[int, ...]  # the inputs whose values the handler reads with numpy
    when: Callable[[OpContext], bool] | None = None  # the nodes that compute on the host; all of them when None

    def applies(self, ctx: OpContext) -> bool:
        return self.when is None or self.when(ctx)

    def check(self, ctx: OpContext) -> None:
        """Raise ``HostOpError`` when an input it reads cannot be known at load."""
        for i in self.inputs:
            v = ctx.inputs[i] if i < len(ctx.inputs) else None
            if v is not None and v.host is None and not (v.const or v.known):
                raise HostOpError(f"{ctx.where()}: computes on the host ({self.reason}), but input {i} "
                                  f"{ctx.node.input[i]!r} is only known at run time; it must be a constant "
                                  f"of the model")


@dataclass(frozen=True)
class HostNode:
    """A node that ran host code during one call of a model."""

    node: str
    op: str


HOST_OPS: dict[str, HostOp] = {}


def host_op(op: str, *, reason: str, inputs: tuple[int, ...],
            when: Callable[[OpContext], bool] | None = None) -> Callable[[Handler], Handler]:
    """Register the handler of ``op`` (as ``onnx_op`` does) and list it as a host op reading ``inputs``."""
    def register(fn: Handler) -> Handler:
        HOST_OPS[op] = HostOp(op, reason, inputs, when)
        return onnx_op(op)(fn)
    return register
