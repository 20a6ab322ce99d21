"""Capture: a model function of named input tensors is traced once into a command buffer and replayed.

``capture(fn, example_inputs)`` calls ``fn`` exactly once, with placeholder tensors (BUFFER nodes that are never
filled) named like ``example_inputs``; ``fn`` returns a dict of output name to Tensor. Then:

1. weight-only work is folded ("pruned"): every subexpression that reads weights but no input (BN folding,
   casts, weight transposes computed with ALU ops) is computed during the capture and becomes a weight, and so
   is every scheduled kernel that reads no input (their compiler runs while the kept kernels are rendered, and the
   kept kernels' units compile as soon as each is rendered: targets/replay.py ``AheadBuild``). Movement ops
   above such a value stay lazy (an index map costs the consuming kernel nothing), and a value larger than the
   weights it reads (a broadcast) stays inline;
2. the remaining kernels are compiled, and their buffers bound by name: ``input:``, ``output:``, ``state:``,
   ``weight:<id>`` (only weights a dispatch reads are kept), and intermediates in one arena planned by
   liveness (jit/schedule/memory_plan.py). On a target that runs lanes (the CPU with two or more threads), runs of
   independent, equally costly kernel groups (a vision model's two towers) become segments whose lanes run
   side by side, one thread each (jit/schedule/streams.py), and the plan keeps concurrent lanes' buffers apart;
3. the command buffer (targets/cmdbuf.py) is handed to the target's replay engine (targets/replay.py).

The result is a ``Captured``: call it with numpy arrays by name, get a dict of fresh numpy arrays.

State: ``state={"history": initial}`` declares buffers the model updates in place. ``fn`` receives them as
tensors next to the inputs and returns their new values under the same names; a replay reads the current value
and, after every other dispatch, writes the new one back (a copy kernel from an arena temporary, so no kernel
reads a state it is overwriting). Where jit/schedule/in_place.py proves that every read still sees the old value
(a queue push: each slot moved one place), the producer stores into the state itself and the copy is dropped.
Callers do not pass states; ``read_state`` / ``reset_state`` reach them.

Kept kernels are the eager run's own (same sources, same launches), so a replay is bit-identical to the eager
run whenever the folded weights are: folding runs the same float32 operations in a kernel of their own, which can
only differ where the C compiler would have contracted a folded product into a multiply-add of the consumer
(checked bit-identical on both sample models); ``fold_weights=False`` keeps that work inline, exactly as eager.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from jit import capture_cache, capture_hints
from jit.codegen.passes.images import weights_to_images
from jit.common.dtype import DType, commit_weak, dtypes, from_numpy, image_shape
from jit.common.errors import DrivepackError, DTypeError
from jit.common.helpers import STREAMS
from jit.frontend.tensor import Tensor
from jit.ir.uop import Ops, UOp, toposort
from jit.realize import CompiledKernel, KernelNames, compile_kernels, host_bytes, read_into, run_schedule
from jit.schedule.chains import chain_kernels, team_counters, team_kernels
from jit.schedule.in_place import in_place_kernel, in_place_problem, is_plain_copy
from jit.schedule.kernels import ScheduledKernel, buffer_view, create_schedule, new_buffer, realized
from jit.schedule.memory_plan import plan_alignment, plan_memory
from jit.schedule.streams import BYTE_COST, dependencies, find_segments, segment_lifetime
from jit.weight_folding import folded, run_or_defer, weight_frontier
from targets.base import Target
from targets.cmdbuf import Alias, BufferSpec, CommandBuffer, Dispatch, KernelSpec, Segment, arena_binding
from targets.host_memory import huge_page_slices
from targets.registry import Device
from targets.replay import DispatchTime, Replay, ahead_build, kernel_flags, make_replay

ModelFn = Callable[..., Mapping[str, Tensor]]


class CaptureError(DrivepackError, ValueError):
    """A function or example input that cannot be captured (names the input or output and the field)."""


@dataclass(frozen=True)
class CaptureReport:
    """What capture did: kernels traced vs kept, weights kept, arena vs the naive sum of intermediates."""

    kernels_traced: int
    kernels_kept: int
    weights: int
    weight_bytes: int
    arena_bytes: int
    naive_bytes: int
    segments: tuple[Segment, ...] = ()
    # per kernel of the command buffer (by index): the ONNX nodes its dispatches compute (jit/ir/provenance.py)
    kernel_nodes: tuple[tuple[str, ...], ...] = ()

    @property
    def kernels_pruned(self) -> int:
        return self.kernels_traced - self.kernels_kept

    def summary(self) -> str:
        ratio = self.arena_bytes / self.naive_bytes if self.naive_bytes else 1.0
        return (f"pruned {self.kernels_traced} -> {self.kernels_kept} kernels; {self.weights} weights "
                f"({self.weight_bytes} bytes); arena {self.arena_bytes} bytes vs naive {self.naive_bytes} "
                f"({ratio:.1%})" + (f"; {sum(len(s.lanes) for s in self.segments)} dispatches in "
                                    f"{len(self.segments)} segment(s) of concurrent lanes" if self.segments else ""))


class Captured:
    """A captured model: call it with numpy arrays by name; returns a dict of fresh numpy arrays. Safe to call
    from several threads: every call goes through its Replay, which runs one call at a time (targets/replay.py)."""

    def __init__(self, cmdbuf: CommandBuffer, weights: dict[int, np.ndarray], replay: Replay,
                 report: CaptureReport | None = None, cache_key: str | None = None, cache_hit: bool = False) -> None:
        self.cmdbuf, self.weights, self.replay, self.report = cmdbuf, weights, replay, report
        self.cache_key = cache_key  # the capture cache entry it was stored under or replayed from
        self.cache_hit = cache_hit  # replayed from that entry (``from_capture_cache``), not captured now

    @staticmethod
    def from_capture_cache(cmdbuf: CommandBuffer, weights: dict[int, np.ndarray], report: dict[str, Any],
                           target: Target, cache_key: str) -> Captured:
        """The replay of a capture cache entry (``jit.capture_cache.load``'s command buffer, weights and report)."""
        return Captured(cmdbuf, weights, make_replay(cmdbuf, weights, target),
                        CaptureReport(**report, segments=cmdbuf.segments), cache_key, cache_hit=True)

    @staticmethod
    def from_cmdbuf(cmdbuf: CommandBuffer, weights: Mapping[int, Any], target: Target | str,
                    share_states_with: Replay | None = None) -> Captured:
        """A replay from a command buffer and weight bytes alone (no model, no tracing); states of the same name
        as ``share_states_with``'s are its buffers."""
        return Captured(cmdbuf, dict(weights), make_replay(cmdbuf, weights, target, share_states_with))

    def __call__(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
        return self.replay(inputs, **kwargs)

    @property
    def n_dispatches(self) -> int:
        return self.replay.n_dispatches

    def profile(self, inputs: Mapping[str, Any] | None = None, **kwargs: Any) -> list[DispatchTime]:
        return self.replay.profile(inputs, **kwargs)

    def read_state(self, name: str) -> np.ndarray:
        return self.replay.read_state(name)

    def reset_state(self) -> None:
        self.replay.reset_state()


# --- tracing -------------------------------------------------------------------------------------------------
def _placeholder(name: str, arr: Any, device: str, what: str) -> tuple[Tensor, UOp]:
    """A tensor over a BUFFER that is never filled, shaped and typed like ``arr``."""
    if not isinstance(arr, np.ndarray):
        raise CaptureError(f"{name}: {what} expected a numpy.ndarray, got {type(arr).__name__}")
    try:
        dtype = from_numpy(arr.dtype)
    except DTypeError as e:
        raise CaptureError(f"{name}: {e}") from None
    buf = new_buffer(device, dtype, arr.size)
    return Tensor(buffer_view(buf, arr.shape), device=device), buf


def _committed(name: str, t: Any, device: str) -> UOp:
    if not isinstance(t, Tensor):
        raise CaptureError(f"output {name}: type expected Tensor, got {type(t).__name__}")
    if t.device != device:
        raise CaptureError(f"output {name}: device expected {device}, got {t.device}")
    return t.uop if not t.dtype.weak else t.cast(commit_weak(t.dtype)).uop


def _contiguous(u: UOp) -> UOp:
    return UOp(Ops.CONTIGUOUS, u.dtype, (u,))


def _output_targets(outs: dict[str, UOp]) -> tuple[dict[str, UOp], dict[str, str]]:
    """(each computed output as a node that a kernel writes into a buffer of its own, a copy where it would not be;
    each other output's source). An output that only views a value made contiguous (a recurrent cell's state,
    reshaped per output) in its element order is that value's own node: its kernel writes the output. An output
    listing another output's elements in their order (a recurrent op's last state and its one-step sequence, or one
    value returned twice) is an alias of that output (CommandBuffer.aliases): no kernel copies it."""
    chosen: dict[UOp, str] = {}
    result: dict[str, UOp] = {}
    aliases: dict[str, str] = {}
    for name, u in outs.items():
        value = _in_element_order(u)
        same = [chosen[n] for n in (value, _contiguous(value)) if n in chosen]
        if same:
            aliases[name] = same[0]
            continue
        node = value if value.op is Ops.CONTIGUOUS and value not in realized else \
            u if u.op is Ops.CONTIGUOUS else _contiguous(u)
        chosen[node] = name
        result[name] = node
    return result, aliases


def _in_element_order(u: UOp) -> UOp:
    """The node under ``u``'s reshapes and permutes of size-1 axes: views listing its elements in its own order."""
    while u.op is Ops.RESHAPE or (u.op is Ops.PERMUTE and [a for a in u.arg if u.src[0].shape[a] != 1] ==
                                  sorted(a for a in u.arg if u.src[0].shape[a] != 1)):
        u = u.src[0]
    return u


# --- binding and planning ------------------------------------------------------------------------------------
@dataclass
class _Bindings:
    """BUFFER node -> binding string, plus the weights and the buffer table built along the way."""

    role: dict[UOp, str]
    table: dict[str, BufferSpec]
    sources: dict[int, UOp]  # weight id -> the realized buffer its bytes come from
    alignment: int = 1  # of each weight's copy: the command buffer's, so that its replay binds the copy as it is

    def weight(self, buf: UOp, image: tuple[int, int] | None = None) -> str:
        if buf not in self.role:
            wid = len(self.sources)
            self.sources[wid] = buf
            self.role[buf] = f"weight:{wid}"
            self.table[self.role[buf]] = dataclasses.replace(_flat_spec(self.role[buf], buf), image=image)
        return self.role[buf]

    def weights(self) -> dict[int, np.ndarray]:
        """Every weight's bytes, copied into one block of huge pages (targets/host_memory.py) at the command
        buffer's alignment: a replay binds them as they are, and reading them all on every call costs a TLB entry
        per 2 MiB instead of one per 4 KiB page."""
        bufs = list(self.sources.values())
        copies = huge_page_slices([self.table[self.role[b]].nbytes for b in bufs], self.alignment)
        for buf, copy in zip(bufs, copies, strict=True):
            data = host_bytes(buf)
            if data is None:
                read_into(buf, copy)
            else:
                copy[:] = data
            copy.flags.writeable = False
        return dict(zip(self.sources, copies, strict=True))


def _image_weights(kernels: list[ScheduledKernel], role: dict[UOp, str], limits: Any) -> dict[UOp, tuple[int, int]]:
    """Weights to bind as images (target limits say ``images``): float32 weights read only inside reduce loops
    at indices that move with the loop (a conv's or matmul's weights, not a bias or a scalar) and that fit the
    target's largest image, each with its (height, width) in texels."""
    read_by_reduce: dict[UOp, bool] = {}
    for k in kernels:
        in_loop = {u.src[0].src[0].arg for r in toposort([k.ast]) if r.op is Ops.REDUCE
                   for u in toposort([r.src[0]])
                   if u.op is Ops.LOAD and set(r.src[1:]) & set(toposort([u]))}
        for i, b in enumerate(k.buffers):
            if i and b not in role:
                read_by_reduce[b] = read_by_reduce.get(b, True) and i in in_loop
    out = {}
    for b, only_reduce in read_by_reduce.items():
        if only_reduce and b.dtype == dtypes.float32 and (hw := image_shape(b.arg[2], limits.image2d_max)):
            out[b] = hw
    return out


def _read_as_images(k: ScheduledKernel, images: dict[UOp, tuple[int, int]]) -> ScheduledKernel:
    params = {i: images[b] for i, b in enumerate(k.buffers) if i and b in images}
    return dataclasses.replace(k, ast=weights_to_images(k.ast, params)) if params else k


def _flat_spec(binding: str, buf: UOp, shape: tuple[int, ...] | None = None) -> BufferSpec:
    assert isinstance(buf.dtype, DType)
    shape = shape if shape is not None else (buf.arg[2],)
    return BufferSpec(binding, buf.dtype.name, shape, buf.arg[2] * buf.dtype.itemsize)


def _arena_buffers(kernels: list[ScheduledKernel], role: dict[UOp, str]) -> dict[UOp, list[int]]:
    """Every buffer a kept kernel writes that has no role yet, with the kernels using it (in order)."""
    users: dict[UOp, list[int]] = {}
    for i, k in enumerate(kernels):
        for j, b in enumerate(k.buffers):
            if (j < k.writes and b not in role) or b in users:
                users.setdefault(b, []).append(i)
    return users


def _lane_segments(kernels: list[ScheduledKernel], compiled: list[CompiledKernel], lanes: int,
                   role: dict[UOp, str]) -> list[Segment]:
    """Segments of independent kernel groups for a target running ``lanes`` at once (``STREAMS=0``: none).
    Buffers are compared by binding: a state's placeholder and its write-back target are one buffer."""
    if not STREAMS or lanes < 2:
        return []
    preds = dependencies([[role.get(b, b) for b in k.buffers[k.writes:]] for k in kernels],
                         [[role.get(b, b) for b in k.written] for k in kernels])
    return find_segments(preds, [ck.stats.flops + BYTE_COST * ck.stats.bytes for ck in compiled], lanes)


def _plan_arena(users: dict[UOp, list[int]], segments: list[Segment], alignment: int) -> tuple[dict[UOp, str], Any]:
    """Arena bindings for ``users``' buffers, planned by liveness (lanes of a segment run concurrently)."""
    lifetimes = [segment_lifetime(i, _flat_spec("arena:0+0", b).nbytes, u, segments)
                 for i, (b, u) in enumerate(users.items())]
    plan = plan_memory(lifetimes, alignment)
    return {b: arena_binding(plan.offsets[lt.key], lt.nbytes) for b, lt in zip(users, lifetimes, strict=True)}, plan


def _states_in_place(kept: list[ScheduledKernel], compiled: list[CompiledKernel], written_back: dict[UOp, UOp],
                     tgt: Target, names: KernelNames) -> tuple[list[ScheduledKernel], list[CompiledKernel]]:
    """The schedule with each state's producer storing into the state itself where jit/schedule/in_place.py proves
    that safe, its write-back copy (and any plain copies between) dropped and the temporaries' readers reading the
    state. ``written_back``: the copy's output buffer -> the state's buffer. A producer stays as it is when any
    later kernel reads the old state (it would see the new one), and when its rewritten kernel fails the proof."""
    def producer_of(buf: UOp) -> int | None:
        return next((i for i, k in enumerate(kept) if k.out_buffer is buf), None)

    for target, state in written_back.items():
        copy = producer_of(target)
        if copy is None or len(kept[copy].buffers) != 2:
            continue
        copies, temps = [copy], [kept[copy].buffers[1]]
        producer = producer_of(temps[-1])
        while producer is not None and len(kept[producer].buffers) == 2 and is_plain_copy(compiled[producer].lowered):
            copies.append(producer)
            temps.append(kept[producer].buffers[1])
            producer = producer_of(temps[-1])
        if producer is None or any(state in k.buffers[1:] for i, k in enumerate(kept)
                                   if i > producer and i not in copies):
            continue
        rewritten = in_place_kernel(kept[producer], state)
        if rewritten is None:
            continue
        ck = compile_kernels([rewritten], tgt, build=not tgt.replay_builds_kernels, names=names)[0]
        if in_place_problem(ck.lowered) is not None:
            continue
        kept[producer], compiled[producer] = rewritten, ck
        kept = [dataclasses.replace(k, buffers=[state if b in temps else b for b in k.buffers])
                if any(b in temps for b in k.buffers) else k for i, k in enumerate(kept) if i not in copies]
        compiled = [ck for i, ck in enumerate(compiled) if i not in copies]
    return kept, compiled


def _state_write_back_buffers(kept: list[ScheduledKernel], copies: list[ScheduledKernel]) -> set[UOp]:
    """The buffers on each state's write-back path, whose kernels ``_states_in_place`` may rewrite or drop: the
    states the write-back ``copies`` store, the temporaries they copy, and back from those through kernels of one
    input (plain copies) to the producer. Those kernels stay dispatches of their own (jit/schedule/chains.py
    ``keep_apart``)."""
    producer = {k.out_buffer: k for k in kept}
    out = {c.out_buffer for c in copies}
    for c in copies:
        buf = c.buffers[1] if len(c.buffers) == 2 else None
        while buf is not None and buf not in out:
            out.add(buf)
            k = producer.get(buf)
            buf = k.buffers[1] if k is not None and len(k.buffers) == 2 else None
    return out


def _zeroed_once(kept: list[ScheduledKernel], compiled: list[CompiledKernel], role: dict[UOp, str],
                 budget: int) -> tuple[list[ScheduledKernel], list[CompiledKernel], dict[UOp, tuple[object, ...]]]:
    """The schedule without the kernels writing padded copies' zeros (jit/schedule/padded_stores.py), and those
    copies' arena buffers with their layouts. The zeros are the same on every call and the producer writes only the
    interior, so the replay zeroes each copy once when it is made (CommandBuffer.zeroed) instead of a dispatch per
    call, and the memory plan keeps the copy's bytes for it alone. Bytes kept so cost cache: layouts are taken
    smallest first (the short kernels of a network's late stages, where a dispatch's fixed cost weighs most) while
    their bytes stay within ``budget`` (the arena's size without them)."""
    produced = {b for k in kept if k.zero_layout is None for b in k.written}
    eligible = {i: k.zero_layout for i, k in enumerate(kept)
                if k.zero_layout is not None and k.out_buffer in produced and k.out_buffer not in role}
    sizes = {layout: kept[i].out_buffer.arg[2] * kept[i].out_buffer.dtype.itemsize for i, layout in eligible.items()}
    taken: set[tuple[object, ...]] = set()
    for layout in sorted(sizes, key=sizes.__getitem__):
        if sizes[layout] > budget:
            break
        taken.add(layout)
        budget -= sizes[layout]
    drop = {i: layout for i, layout in eligible.items() if layout in taken}
    return ([k for i, k in enumerate(kept) if i not in drop], [ck for i, ck in enumerate(compiled) if i not in drop],
            {kept[i].out_buffer: layout for i, layout in drop.items()})


def _zeroed_sharing(zeroed: dict[UOp, tuple[object, ...]], users: dict[UOp, list[int]],
                    segments: list[Segment]) -> dict[UOp, UOp]:
    """For each zeroed copy, the copy whose bytes it takes (itself for the first of each such bytes): copies of one
    layout have their zeros at the same bytes, so one whose uses all come after another's last can reuse them (a
    network's repeated blocks); a copy used in a lane of a concurrent segment counts as used over the whole segment."""
    def span(buf: UOp) -> tuple[int, int]:
        lt = segment_lifetime(0, 0, users[buf], segments)
        if lt.lane is None:
            return lt.first, lt.last
        seg = segments[lt.lane[0]]
        return seg.start, seg.end - 1

    sharing: dict[UOp, UOp] = {}
    free_after: dict[tuple[object, ...], list[tuple[UOp, int]]] = {}  # layout -> (first copy, last use) per bytes
    for buf in sorted(zeroed, key=lambda b: users[b][0]):
        first, last = span(buf)
        places = free_after.setdefault(zeroed[buf], [])
        slot = next((j for j, (_, end) in enumerate(places) if end < first), None)
        if slot is None:
            places.append((buf, last))
            sharing[buf] = buf
        else:
            sharing[buf] = places[slot][0]
            places[slot] = (places[slot][0], last)
    return sharing


# --- the entry points ----------------------------------------------------------------------------------------
def capture(fn: ModelFn, example_inputs: Mapping[str, Any], target: str | None = None,
            state: Mapping[str, Any] | None = None, fold_weights: bool = True) -> Captured:
    """Trace ``fn`` once over placeholders named like ``example_inputs`` and return its replay on ``target``
    (a device name; ``Device.DEFAULT`` when None). See the module docstring."""
    device = Device.canonical(target) if target else Device.DEFAULT
    tgt = Device[device]
    state = dict(state or {})
    clash = sorted(set(state) & set(example_inputs))
    if clash:
        raise CaptureError(f"state: names expected distinct from the inputs, got {clash} in both")
    placeholders: dict[str, Tensor] = {}
    sources: dict[UOp, str] = {}
    for kind, group in (("input", example_inputs), ("state", state)):
        for name, arr in group.items():
            placeholders[name], buf = _placeholder(name, arr, device, f"{kind} value")
            sources[buf] = f"{kind}:{name}"
    result = fn(**placeholders)
    if not isinstance(result, Mapping):
        raise CaptureError(f"fn: return expected a dict of output name -> Tensor, got {type(result).__name__}")
    missing = sorted(set(state) - set(result))
    if missing:
        raise CaptureError(f"state: expected fn to return the new value of each state, got none for {missing}")
    outs = {name: _committed(name, t, device) for name, t in result.items() if name not in state}
    new_states: dict[str, UOp] = {}
    for name in state:
        u = _committed(name, result[name], device)
        ph = placeholders[name]
        if u.shape != ph.shape or u.dtype != ph.dtype:
            raise CaptureError(f"state {name}: new value expected {ph.dtype.name} {ph.shape}, got "
                               f"{u.dtype.name} {u.shape}")
        if u is not ph.uop:  # computed into an arena temporary first (unless it already is one), copied last
            new_states[name] = _contiguous(u if u.op is Ops.CONTIGUOUS else _contiguous(u))
    out_targets, aliases = _output_targets(outs)
    roots = [*out_targets.values(), *new_states.values()]
    hint = capture_hints.graph_key(roots, tgt)  # the programs the last capture of this graph used, loaded meanwhile
    hinted = capture_hints.start_prefetch(hint, tgt)
    cache_key = capture_cache.capture_key(roots, sources, tgt, fold_weights, state)
    if (hit := capture_cache.load(cache_key, tgt.name)) is not None:
        return Captured.from_capture_cache(*hit, tgt, cache_key)

    frontier = weight_frontier(roots, set(sources)) if fold_weights else []
    weight_only: list[list[ScheduledKernel]] = []  # kernel groups whose compile runs while the kept are rendered
    with folded(frontier) as folds:
        run_or_defer(folds, weight_only)
        kernels, becomes = create_schedule(roots, device)
        dependent: set[UOp] = set(sources)
        produced = {becomes[u].base: f"output:{n}" for n, u in out_targets.items()}
        produced |= {becomes[u].base: f"state:{n}" for n, u in new_states.items()}
        kept, copies, pruned = [], [], []
        for k in kernels:
            # a kernel writing where a kept one wrote (a padded copy's border, jit/schedule/padded_stores.py) reads
            # no input itself but must run with it
            if k.out_buffer in produced or k.out_buffer in dependent or any(b in dependent for b in k.buffers[1:]):
                dependent.add(k.out_buffer)
                (copies if produced.get(k.out_buffer, "").startswith("state:") else kept).append(k)
            else:
                pruned.append(k)
        # a kernel writing where a later kept one writes (a padded copy's zero fill, before its producer) runs with it
        rewritten = {k.out_buffer for k in kept}
        if late := {id(k) for k in pruned if k.out_buffer in rewritten}:
            late |= {id(k) for k in kept}
            kept = [k for k in kernels if id(k) in late]
            pruned = [k for k in pruned if id(k) not in late]
        kept += copies  # state write-backs last: every read of the old state comes before them
        run_or_defer(pruned, weight_only)

        role = {**sources, **produced}
        bindings = _Bindings(role, {}, {}, plan_alignment(tgt.limits.buffer_alignment))
        for name, arr in example_inputs.items():
            bindings.table[f"input:{name}"] = BufferSpec(f"input:{name}", from_numpy(arr.dtype).name, arr.shape,
                                                         arr.nbytes)
        for name, out in outs.items():  # in the model's order
            if name in aliases:
                assert isinstance(out.dtype, DType) and isinstance(out.shape, tuple)
                bindings.table[f"output:{name}"] = BufferSpec(f"output:{name}", out.dtype.name, out.shape,
                                                              out.size * out.dtype.itemsize)
                continue
            buf = becomes[out_targets[name]].base
            assert buf.op is Ops.BUFFER
            bindings.table[f"output:{name}"] = _flat_spec(f"output:{name}", buf, out.shape)
        for name, arr in state.items():
            init = bindings.weight(_constant_buffer(arr, device))
            bindings.table[f"state:{name}"] = BufferSpec(f"state:{name}", from_numpy(arr.dtype).name, arr.shape,
                                                         arr.nbytes, init=int(init.split(":")[1]))
        users = _arena_buffers(kept, role)
        images = _image_weights(kept, role | dict.fromkeys(users, "arena"), tgt.limits) if tgt.limits.images else {}
        kept = [_read_as_images(k, images) for k in kept]
        if tgt.team_limits is not None:
            kept = team_kernels(kept, tgt.team_limits, _state_write_back_buffers(kept, copies))
        elif tgt.chain_limits is not None:
            kept = chain_kernels(kept, tgt.chain_limits, _state_write_back_buffers(kept, copies))
        ahead = ahead_build(tgt)  # the compiler works while the rest is rendered and the command buffer checked
        names = KernelNames()  # the command buffer's own: named alike in every process (jit/realize.py)
        compiled = compile_kernels(kept, tgt, build=not tgt.replay_builds_kernels, rendered=ahead.add, names=names)
        ahead.rendered()
        for group in weight_only:  # in order: the scheduled kernels may read the folds
            run_schedule(group)
    written_back = {becomes[u].base: placeholders[n].uop.base for n, u in new_states.items()}
    kept, compiled = _states_in_place(kept, compiled, written_back, tgt, names)
    alignment = plan_alignment(tgt.limits.buffer_alignment)
    base = _plan_arena(_arena_buffers(kept, role), _lane_segments(kept, compiled, tgt.lanes, role), alignment)[1]
    kept, compiled, zeroed = _zeroed_once(kept, compiled, role, base.arena_bytes)
    # a team's counters are zero before its first launch and each launch leaves them so: bytes of their own
    zeroed |= {buf: ("team counters", buf.arg[0]) for buf in team_counters(kept)}
    users = _arena_buffers(kept, role)
    segments = _lane_segments(kept, compiled, tgt.lanes, role)
    sharing = _zeroed_sharing(zeroed, users, segments)
    for buf, first in sharing.items():
        if buf is first:  # live for the whole call: no other value ever takes its bytes and overwrites the zeros
            users[buf] = [0, *users[buf], len(kept) - 1]
        else:
            del users[buf]
    arena, plan = _plan_arena(users, segments, alignment)
    arena |= {buf: arena[first] for buf, first in sharing.items()}
    role.update(arena)
    for binding in arena.values():
        bindings.table[binding] = BufferSpec(binding, "uint8", (int(binding.split("+")[1]),),
                                             int(binding.split("+")[1]))
    specs: dict[str, int] = {}
    kernel_specs: list[KernelSpec] = []
    nodes: list[set[str]] = []  # per kernel spec: a kernel run by several dispatches computes for each one's nodes
    dispatches: list[Dispatch] = []
    for k, ck in zip(kept, compiled, strict=True):
        if ck.name in specs and kernel_specs[specs[ck.name]].source != ck.program.source:
            # one spec per name: a second kernel of the same name would silently run the first one's code
            raise CaptureError(f"kernel names: expected one source per name, got two kernels named {ck.name}")
        if ck.name not in specs:
            specs[ck.name] = len(kernel_specs)
            kernel_specs.append(KernelSpec(ck.name, ck.program.source, ck.program.name, tgt.name,
                                                  kernel_flags(tgt, ck.program)))
            nodes.append(set())
        nodes[specs[ck.name]].update(k.onnx_nodes)
        binds = tuple(role[b] if b in role else bindings.weight(b, images.get(b)) for b in k.buffers)
        local = tuple(ck.program.local_size) if ck.program.local_size else None
        dispatches.append(Dispatch(specs[ck.name], tuple(ck.program.global_size), local, binds, writes=k.writes))

    ahead.finish(kernel_specs)
    order = ("input", "output", "state", "weight", "arena")
    table = sorted(bindings.table.values(), key=lambda b: order.index(b.kind))
    weight_specs = [b for b in table if b.kind == "weight"]
    report = CaptureReport(len(kernels) + len(folds), len(kept), len(weight_specs),
                           sum(b.nbytes for b in weight_specs), plan.arena_bytes, plan.naive_bytes,
                           tuple(segments), tuple(tuple(sorted(n)) for n in nodes))
    # the weights' copy waits on memory (fresh pages, a device's reads) and the command buffer's checks on Python:
    # one on a thread of its own while the other runs
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="drivepack-weights") as pool:
        copied = pool.submit(bindings.weights)
        cmdbuf = CommandBuffer(tgt.name, tuple(kernel_specs), tuple(dispatches), tuple(table), plan.arena_bytes,
                               plan.alignment, {"kernels_traced": report.kernels_traced,
                                                "kernels_kept": report.kernels_kept}, tuple(segments),
                               tuple(sorted({arena[b] for b in zeroed})),
                               tuple(Alias(f"output:{n}", f"output:{source}") for n, source in aliases.items()))
        weights = copied.result()
    replay = make_replay(cmdbuf, weights, tgt)
    capture_hints.remember(hint, tgt, [k.source for k in kernel_specs], hinted)
    capture_cache.store(cache_key, cmdbuf, weights, report)
    return Captured(cmdbuf, weights, replay, report, cache_key)


def _constant_buffer(arr: np.ndarray, device: str) -> UOp:
    """A realized BUFFER holding ``arr`` (a state's initial value, stored with the weights)."""
    return Tensor(np.ascontiguousarray(arr), device=device).uop.base


def capture_onnx(model: Any, example_inputs: Mapping[str, Any], target: str | None = None,
                 fold_weights: bool = True) -> Captured:
    """Capture an OnnxModel (jit/onnx/loader.py) called with its named inputs.

    The inputs are placeholders, known only at replay time: a host op (jit/onnx/host_ops.py) that reads one,
    or a value computed from one, raises ``HostOpError`` naming the node; host ops on the model's constants run
    now, and their results are constants of the capture.

    A model loaded from a file or bytes is first looked up in the capture cache by its bytes, its settings and
    the inputs' names, dtypes and shapes (``jit.capture_cache.model_key``): a capture of it made before is
    replayed without tracing, and ``model.host_nodes`` are the ones that capture ran."""
    tgt = Device[Device.canonical(target) if target else Device.DEFAULT]
    key = capture_cache.model_key(getattr(model, "content_digest", None),
                                  f"float16={getattr(model, 'float16', None)};device={getattr(model, 'device', None)}",
                                  example_inputs, tgt, fold_weights)
    if (hit := capture_cache.load_model_capture(key, tgt)) is not None:
        graph_key, entry, host_nodes = hit
        model.restore_host_nodes(host_nodes)
        return Captured.from_capture_cache(*entry, tgt, graph_key)
    captured = capture(lambda **kw: model(kw), example_inputs, target=target, fold_weights=fold_weights)
    if key is not None:
        capture_cache.store_model_capture(key, tgt, captured.cache_key, [k.source for k in captured.cmdbuf.kernels],
                                          [(h.node, h.op) for h in model.host_nodes])
    return captured


def jit(fn: ModelFn | None = None, *, target: str | None = None, state: Mapping[str, Any] | None = None,
        fold_weights: bool = True) -> Any:
    """Decorator form: the first call captures with that call's arrays as the example inputs, every call
    (the first included) replays. ``wrapper.captured`` is the Captured once it exists."""

    def wrap(f: ModelFn) -> Callable[..., dict[str, np.ndarray]]:
        @functools.wraps(f)
        def wrapper(**inputs: Any) -> dict[str, np.ndarray]:
            if wrapper.captured is None:  # type: ignore[attr-defined]
                wrapper.captured = capture(f, inputs, target=target, state=state,  # type: ignore[attr-defined]
                                           fold_weights=fold_weights)
            return wrapper.captured(inputs)  # type: ignore[attr-defined]

        wrapper.captured = None  # type: ignore[attr-defined]
        return wrapper

    return wrap(fn) if fn is not None else wrap
