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

from jit.common.dtype import dtypes
from jit.common.errors import ShapeError, UnsupportedOp
from jit.frontend.tensor import Tensor
from jit.onnx.registry import OpContext, Value, onnx_op, tensor_to_numpy


# --- helpers -------------------------------------------------------------------------------------------
def _slice_value(v: Value, axis: int, i: int, device: str | None) -> Value:
    """Element ``i`` along ``axis`` (the axis removed); host data stays host data."""
    if v.host is not None:
        return Value(host=np.take(v.host, i, axis=axis), const=v.const, known=v.known)
    return Value(tensor=step_slice(v.as_tensor(device), axis, i), const=v.const, known=v.known)


def _stack(values: list[Value], axis: int, device: str | None) -> Value:
    """np.stack of per-iteration values along a new ``axis``."""
    hosts = [v.host for v in values if v.host is not None]
    if len(hosts) == len(values):
        return Value(host=np.stack(hosts, axis=axis), const=all(v.const for v in values),
                     known=all(v.known or v.const for v in values))
    ts = [v.as_tensor(device).unsqueeze(axis) for v in values]
    return Value(tensor=Tensor.cat(*ts, dim=axis) if len(ts) > 1 else ts[0])


def run_body(ctx: OpContext, body: onnx.GraphProto, bound: list[Value | None]) -> list[Value]:
    """Run ``body`` once with its formal inputs bound to ``bound`` (outer names stay visible)."""
    env = dict(ctx.env)
    for init in body.initializer:  # run_graph walks nodes only: a body's own constants are bound here
        env[init.name] = Value(host=tensor_to_numpy(init, ctx.model.base_dir), const=True)
    for inp, v in zip(body.input, bound, strict=False):
        env[inp.name] = v
    return ctx.model.run_graph(body, env)


def step_slice(t: Tensor, axis: int, i: int) -> Tensor:
    """``t[..., i, ...]`` along ``axis`` (removed), read through a one-element index buffer: every step's kernel
    then has the same source (compiled once) instead of one with the offset ``i`` baked in per step. A one-step
    axis is squeezed: no gather, so what computed ``t`` may fuse into the step's kernel (one GRU step: the input
    projection into the cell)."""
    if t.shape[axis] == 1:
        return t.squeeze(axis)
    idx = Tensor(np.array([i], dtype=np.int32), device=t.device)
    return t.take(idx, axis).squeeze(axis)


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
    n = len(ctx.inputs) - m
    states: list[Value] = [v for v in ctx.inputs[:n] if v is not None]
    scans = [v for v in ctx.inputs[n:] if v is not None]
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
        res = run_body(ctx, body, [*states, *sl])
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
        res = run_body(ctx, body, [i_val, c_val, *carried])
        cond = bool(np.asarray(ctx.host_of(res[0], "the body's condition output")).reshape(-1)[0])
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


# --- RNN / LSTM / GRU ----------------------------------------------------------------------------------
Act = Callable[[Tensor], Tensor]
# name -> (uses alpha, uses beta, default alpha, default beta)
_ACT_PARAMS: dict[str, tuple[bool, bool, float, float]] = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0), "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0), "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0), "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}


def _activation(name: str, alpha: float, beta: float) -> Act:
    n = name.lower()
    table: dict[str, Act] = {
        "relu": lambda x: x.relu(),
        "tanh": lambda x: x.tanh(),
        "sigmoid": lambda x: x.sigmoid(),
        "affine": lambda x: x * alpha + beta,
        "leakyrelu": lambda x: x.leaky_relu(alpha),
        "thresholdedrelu": lambda x: (x > alpha).where(x, 0.0),
        "scaledtanh": lambda x: (x * beta).tanh() * alpha,
        "hardsigmoid": lambda x: (x * alpha + beta).clip(0.0, 1.0),
        "elu": lambda x: x.elu(alpha),
        "softsign": lambda x: x / (x.abs() + 1.0),
        "softplus": lambda x: x.softplus(),
    }
    if n not in table:
        raise UnsupportedOp(f"recurrent activation {name!r} is not supported")
    return table[n]


def _activations(ctx: OpContext, defaults: list[str], dirs: int) -> list[list[Act]]:
    """Per direction, the cell's activation functions; alphas/betas are consumed by the functions using them."""
    names = list(ctx.attr("activations", None) or defaults * dirs)
    if len(names) == len(defaults) and dirs == 2:
        names = names * 2
    alphas = list(ctx.attr("activation_alpha", None) or [])
    betas = list(ctx.attr("activation_beta", None) or [])
    fns: list[Act] = []
    for name in names:
        uses_a, uses_b, da, db = _ACT_PARAMS.get(name.lower(), (False, False, 0.0, 0.0))
        a = float(alphas.pop(0)) if uses_a and alphas else da
        b = float(betas.pop(0)) if uses_b and betas else db
        fns.append(_activation(name, a, b))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(dirs)]


# (input projection at t, states, R, R bias, hidden size, activations, peepholes) -> new states, output first
Cell = Callable[[Tensor, list[Tensor], Tensor, Tensor | None, int, list[Act], Tensor | None], list[Tensor]]


def _recurrent(ctx: OpContext, gates: int, defaults: list[str], cell: Cell, n_states: int) -> tuple[Tensor | None, ...]:
    """The shared driver: layouts, directions, biases, initial states, sequence lengths, outputs."""
    x, w, r = ctx.t(0), ctx.t(1), ctx.t(2)
    hidden = int(ctx.attr("hidden_size", None) or r.shape[-1])
    direction = ctx.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(ctx.attr("layout", 0) or 0) if ctx.opset >= 14 else 0
    out_dtype = x.dtype
    cd = out_dtype if out_dtype.is_float and out_dtype.itemsize >= 4 else dtypes.float32
    xs = x.cast(cd)
    if layout:
        xs = xs.permute(1, 0, 2)
    steps, batch = xs.shape[0], xs.shape[1]
    b = ctx.opt(3)
    lens = ctx.opt(4)
    init = [ctx.opt(5 + i) for i in range(n_states)]
    if layout:  # initial states come (batch, directions, hidden)
        init = [s.permute(1, 0, 2) if s is not None else None for s in init]
    peep = ctx.opt(7) if n_states == 2 else None
    clip = ctx.attr("clip", None)
    acts = _activations(ctx, defaults, dirs)
    mask_all = None
    if lens is not None:
        t_idx = Tensor.arange(steps, device=xs.device).reshape(steps, 1, 1)
        mask_all = t_idx < lens.cast(dtypes.int32).reshape(1, batch, 1)
    ys: list[Tensor] = []
    finals: list[list[Tensor]] = [[] for _ in range(n_states)]
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        w_d, r_d = w[d].cast(cd), r[d].cast(cd)
        xw = xs.matmul(w_d.T)  # (T, B, G*H): every step's input projection in one matmul
        rb = None
        if b is not None:
            xw = xw + b[d, :gates * hidden].cast(cd)
            rb = b[d, gates * hidden:].cast(cd)
        if steps > 1:
            xw = xw.contiguous()
        st = [(init[i][d].cast(cd) if init[i] is not None else Tensor.zeros(batch, hidden, dtype=cd, device=xs.device))
              for i in range(n_states)]
        p_d = peep[d].cast(cd) if peep is not None else None
        acts_d = _maybe_clip(acts[d], clip)
        y: list[Tensor] = [xw] * steps
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        for t in order:
            pre = step_slice(xw, 0, t)
            new = cell(pre, st, r_d, rb, hidden, acts_d, p_d)
            if mask_all is not None:
                m = step_slice(mask_all, 0, t)
                y[t] = m.where(new[0], 0.0).cast(cd).contiguous()
                new = [m.where(n_, o_) for n_, o_ in zip(new, st, strict=True)]
            st = [s.contiguous() for s in new]
            if mask_all is None:
                y[t] = st[0]  # the stacked output reads each step's buffer, never recomputes a cell
        ys.append(Tensor.cat(*[yt.unsqueeze(0) for yt in y], dim=0))  # (T, B, H)
        for i in range(n_states):
            finals[i].append(st[i])
    y_all = Tensor.cat(*[yd.unsqueeze(1) for yd in ys], dim=1)  # (T, D, B, H)
    fin = [Tensor.cat(*[f.unsqueeze(0) for f in fs], dim=0) for fs in finals]  # (D, B, H)
    if layout:
        y_all = y_all.permute(2, 0, 1, 3)
        fin = [f.permute(1, 0, 2) for f in fin]
    outs = (y_all.cast(out_dtype), *[f.cast(out_dtype) for f in fin])
    return outs[:max(1, len(ctx.node.output))]


def _maybe_clip(acts: list[Act], clip: float | None) -> list[Act]:
    return acts if clip is None else _clipped(acts, float(clip))


def _clipped(acts: list[Act], clip: float) -> list[Act]:
    """Activations applied to inputs clipped to [-clip, clip] (the spec's cell clip)."""
    def wrap(f: Act) -> Act:
        return lambda x: f(x.clip(-clip, clip))
    return [wrap(f) for f in acts]


def _gate(pre: Tensor, k: int, hidden: int) -> Tensor:
    return pre[..., k * hidden:(k + 1) * hidden]


def _rnn_cell(pre: Tensor, st: list[Tensor], r: Tensor, rb: Tensor | None, hidden: int, acts: list[Act],
              peep: Tensor | None = None) -> list[Tensor]:
    hr = st[0].matmul(r.T)
    if rb is not None:
        hr = hr + rb
    return [acts[0](pre + hr)]


def _lstm_cell_factory(input_forget: bool) -> Cell:
    def cell(pre: Tensor, st: list[Tensor], r: Tensor, rb: Tensor | None, hidden: int, acts: list[Act],
             peep: Tensor | None = None) -> list[Tensor]:
        h, c = st
        g = pre + h.matmul(r.T)
        if rb is not None:
            g = g + rb
        f_act, g_act, h_act = acts
        gi, go, gf, gc = (_gate(g, k, hidden) for k in range(4))
        if peep is not None:
            gi = gi + peep[:hidden] * c
            gf = gf + peep[2 * hidden:] * c
        i = f_act(gi)
        f = (1.0 - i) if input_forget else f_act(gf)
        c_new = f * c + i * g_act(gc)
        if peep is not None:
            go = go + peep[hidden:2 * hidden] * c_new
        o = f_act(go)
        return [o * h_act(c_new), c_new]
    return cell


def _gru_cell_factory(linear_before_reset: bool) -> Cell:
    def cell(pre: Tensor, st: list[Tensor], r: Tensor, rb: Tensor | None, hidden: int, acts: list[Act],
             peep: Tensor | None = None) -> list[Tensor]:
        h = st[0]
        f_act, g_act = acts
        r_zr = r[:2 * hidden]
        r_h = r[2 * hidden:]
        hzr = h.matmul(r_zr.T)
        if rb is not None:
            hzr = hzr + rb[:2 * hidden]
        z = f_act(_gate(pre, 0, hidden) + _gate(hzr, 0, hidden))
        rr = f_act(_gate(pre, 1, hidden) + _gate(hzr, 1, hidden))
        rbh = rb[2 * hidden:] if rb is not None else None
        if linear_before_reset:
            hh = h.matmul(r_h.T)
            if rbh is not None:
                hh = hh + rbh
            cand = g_act(_gate(pre, 2, hidden) + rr * hh)
        else:
            hh = (rr * h).matmul(r_h.T)
            if rbh is not None:
                hh = hh + rbh
            cand = g_act(_gate(pre, 2, hidden) + hh)
        return [(1.0 - z) * cand + z * h]
    return cell


@onnx_op("RNN")
def rnn(ctx: OpContext) -> tuple[Tensor | None, ...]:
    return _recurrent(ctx, 1, ["Tanh"], _rnn_cell, 1)


@onnx_op("LSTM")
def lstm(ctx: OpContext) -> tuple[Tensor | None, ...]:
    return _recurrent(ctx, 4, ["Sigmoid", "Tanh", "Tanh"], _lstm_cell_factory(bool(ctx.attr("input_forget", 0))), 2)


@onnx_op("GRU")
def gru(ctx: OpContext) -> tuple[Tensor | None, ...]:
    return _recurrent(ctx, 3, ["Sigmoid", "Tanh"], _gru_cell_factory(bool(ctx.attr("linear_before_reset", 0))), 1)
