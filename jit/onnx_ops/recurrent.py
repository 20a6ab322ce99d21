"""ONNX recurrent and control-flow ops: Scan, Loop, RNN, LSTM, GRU.

Every loop is unrolled while the graph is walked: Scan's sequence length is a static dimension, Loop's trip
count and condition must be known at load, and RNN/LSTM/GRU step over the (static) sequence axis. Each step
builds Tensor ops; carried states are made contiguous per step so one step's kernels do not inline the whole
history before it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from jit.dtype import dtypes
from jit.errors import ShapeError, UnsupportedOp
from jit.onnx import OpContext, Value, onnx_op
from jit.tensor import Tensor


# --- helpers -------------------------------------------------------------------------------------------
def _value_static(ctx: OpContext, v: Value, what: str) -> np.ndarray:
    """Host data of a value computed inside a body; it must be known at load (as ``OpContext.static``)."""
    if v.host is None and (v.const or v.known):
        v.host = v.as_tensor(ctx.model.device).numpy()
    if v.host is None:
        raise UnsupportedOp(f"{ctx.describe()} at node {ctx.node.name!r} (opset {ctx.opset}): {what} must be "
                            f"known at load, got a computed tensor")
    return v.host


def _slice_value(v: Value, axis: int, i: int, device: str | None) -> Value:
    """Element ``i`` along ``axis`` (the axis removed); host data stays host data."""
    if v.host is not None:
        return Value(host=np.take(v.host, i, axis=axis), const=v.const, known=v.known)
    t = v.as_tensor(device)
    return Value(tensor=t._slice_axis(axis, i, i + 1).squeeze(axis), const=v.const, known=v.known)


def _stack(values: list[Value], axis: int, device: str | None) -> Value:
    """np.stack of per-iteration values along a new ``axis``."""
    if all(v.host is not None for v in values):
        return Value(host=np.stack([v.host for v in values], axis=axis),  # type: ignore[misc]
                     const=all(v.const for v in values), known=all(v.known or v.const for v in values))
    ts = [v.as_tensor(device).unsqueeze(axis) for v in values]
    return Value(tensor=Tensor.cat(*ts, dim=axis) if len(ts) > 1 else ts[0])


def _run_body(ctx: OpContext, body: onnx.GraphProto, bound: list[Value | None]) -> list[Value]:
    """Run ``body`` once with its formal inputs bound to ``bound`` (outer names stay visible)."""
    env = dict(ctx.env)
    for inp, v in zip(body.input, bound, strict=False):
        env[inp.name] = v
    return ctx.model.run_graph(body, env)


def _step(v: Value) -> Value:
    """A carried value with a kernel boundary, so the next iteration reads a buffer."""
    if v.tensor is not None and v.host is None:
        return Value(tensor=v.tensor.contiguous(), const=v.const, known=v.known)
    return v


# --- Scan ----------------------------------------------------------------------------------------------
@onnx_op("Scan")
def scan(ctx: OpContext) -> list[Value]:
    """Scan-8 (batched, optional sequence_lens) and Scan-9+ (axes and directions per input and output)."""
    body = ctx.attr("body")
    m = int(ctx.attr("num_scan_inputs"))
    if ctx.opset < 9:
        return _scan8(ctx, body, m)
    ins = [v for v in ctx.inputs]
    n = len(ins) - m
    states: list[Value] = [v for v in ins[:n] if v is not None]
    scans = [v for v in ins[n:] if v is not None]
    in_axes = list(ctx.attr("scan_input_axes", None) or [0] * m)
    in_dirs = list(ctx.attr("scan_input_directions", None) or [0] * m)
    n_out = len(body.output) - n
    out_axes = list(ctx.attr("scan_output_axes", None) or [0] * n_out)
    out_dirs = list(ctx.attr("scan_output_directions", None) or [0] * n_out)
    ranks = [len(v.shape) for v in scans]
    in_axes = [a % r for a, r in zip(in_axes, ranks, strict=True)]
    lengths = {v.shape[a] for v, a in zip(scans, in_axes, strict=True)}
    if len(lengths) != 1:
        raise ShapeError(f"{ctx.where()}: scan inputs expected one sequence length, got {sorted(lengths)}")
    steps = lengths.pop()
    states, outs = _scan_loop(ctx, body, states, scans, in_axes, in_dirs, steps)
    result = list(states)
    for j in range(n_out):
        seq = outs[j][::-1] if out_dirs[j] else outs[j]
        if not seq:
            raise UnsupportedOp(f"{ctx.describe(sequence_length=0)} at node {ctx.node.name!r}: a zero-length "
                                f"scan output has no known element shape")
        rank = len(seq[0].shape) + 1
        result.append(_stack(seq, out_axes[j] % rank, ctx.model.device))
    return result


def _scan_loop(ctx: OpContext, body: onnx.GraphProto, states: list[Value], scans: list[Value], axes: list[int],
               dirs: list[int], steps: int) -> tuple[list[Value], list[list[Value]]]:
    n = len(states)
    outs: list[list[Value]] = [[] for _ in range(len(body.output) - n)]
    for it in range(steps):
        sl = [_slice_value(v, a, steps - 1 - it if d else it, ctx.model.device)
              for v, a, d in zip(scans, axes, dirs, strict=True)]
        res = _run_body(ctx, body, [*states, *sl])
        states = [_step(v) for v in res[:n]]
        for j, v in enumerate(res[n:]):
            outs[j].append(v)
    return states, outs


def _scan8(ctx: OpContext, body: onnx.GraphProto, m: int) -> list[Value]:
    """Scan-8: input 0 is sequence_lens, axis 0 is the batch and axis 1 the sequence."""
    if ctx.has(0):
        lens = ctx.static(0, "sequence_lens")
        ins = [v for v in ctx.inputs[1:] if v is not None]
        seq = ins[-1].shape[1]
        if np.any(np.asarray(lens) != seq):
            raise ctx.unsupported(sequence_lens=lens.tolist())
    ins = [v for v in ctx.inputs[1:] if v is not None]
    n = len(ins) - m
    dirs = list(ctx.attr("directions", None) or [0] * m)
    batch = ins[0].shape[0]
    dev = ctx.model.device
    per_batch_states: list[list[Value]] = []
    per_batch_outs: list[list[Value]] = []
    for b in range(batch):
        st = [_slice_value(v, 0, b, dev) for v in ins[:n]]
        sc = [_slice_value(v, 0, b, dev) for v in ins[n:]]
        steps = sc[0].shape[0]
        st, outs = _scan_loop(ctx, body, st, sc, [0] * m, dirs, steps)
        per_batch_states.append(st)
        per_batch_outs.append([_stack(o, 0, dev) for o in outs])
    result = [_stack([s[i] for s in per_batch_states], 0, dev) for i in range(n)]
    result += [_stack([o[j] for o in per_batch_outs], 0, dev) for j in range(len(per_batch_outs[0]))]
    return result


# --- Loop ----------------------------------------------------------------------------------------------
@onnx_op("Loop")
def loop(ctx: OpContext) -> list[Value]:
    """Loop with a trip count and condition known at load: the body is unrolled."""
    body = ctx.attr("body")
    trip = int(np.asarray(ctx.static(0, "M")).reshape(-1)[0]) if ctx.has(0) else None
    cond = bool(np.asarray(ctx.static(1, "cond")).reshape(-1)[0]) if ctx.has(1) else True
    if trip is None and not ctx.has(1):
        raise ctx.unsupported(M=None, cond=None)
    carried: list[Value] = [v for v in ctx.inputs[2:] if v is not None]
    n = len(carried)
    n_scan = len(body.output) - 1 - n
    scans: list[list[Value]] = [[] for _ in range(n_scan)]
    it = 0
    limit = 1 << 16
    while cond and (trip is None or it < trip):
        if it >= limit:
            raise ctx.unsupported(iterations=f">{limit}")
        i_val = Value(host=np.asarray(it, dtype=np.int64), const=True)
        c_val = Value(host=np.asarray(cond), const=True)
        res = _run_body(ctx, body, [i_val, c_val, *carried])
        cond = bool(np.asarray(_value_static(ctx, res[0], "the body's condition output")).reshape(-1)[0])
        carried = [_step(v) for v in res[1:1 + n]]
        for j, v in enumerate(res[1 + n:]):
            scans[j].append(v)
        it += 1
    out: list[Value] = list(carried)
    for seq in scans:
        if not seq:
            raise UnsupportedOp(f"{ctx.describe(iterations=0)} at node {ctx.node.name!r}: a zero-trip loop's scan "
                                f"output has no known element shape")
        out.append(_stack(seq, 0, ctx.model.device))
    return out
