"""A state's new value computed straight into the state's own buffer, where that is provably the same as
computing it into a temporary and copying it back.

A capture's state update (jit/trace.py) is by default two kernels: the producer writes the new value into an arena
temporary, and a copy kernel then writes it over the state, so that no kernel reads a state it is overwriting. For a
queue push (``cat(queue[1:], item)``: every slot moved one place towards the front) the copy costs as many bytes
as the push itself. ``in_place_kernel`` rewrites the producer to store into the buffer it reads the old value
from (one parameter, read and written: no ``restrict`` aliasing), and ``in_place_problem`` decides, on the kernel
graph as it is rendered (after the codegen passes and the optimizer), whether every read still sees the old value.

The proof (``in_place_problem`` returns None only when all of it holds):

1. The kernel is a plain elementwise kernel: a SINK of STOREs with no REDUCE, no gated or image access, and no
   access to the shared parameter but ungated ``LOAD(INDEX)`` and ``STORE(INDEX)``.
2. Every access to the shared parameter is at ``W + c``: one index expression ``W`` common to all of them and a
   constant ``c`` each. ``W`` is a sum of ``RANGE * stride`` terms over every RANGE of the kernel (launch
   dimensions, loops and vector lanes alike), and its strides form a mixed radix (each stride exceeds the span of
   the terms below it): distinct iterations, lanes included, get distinct ``W``.
3. The distinct constants lie further apart than ``W`` spans, so an address ``W + c`` names one iteration and one
   constant. Together with 2: iterations touch disjoint addresses, so work-items, threads and loop iterations can
   run in any order.
4. Within one iteration the renderer emits the STOREs in SINK order, each after the loads of its value
   (targets/cstyle/walk.py). A load at constant ``c`` therefore reads the old value when it feeds a STORE no later
   in SINK order than the first STORE at ``c``.
"""

from __future__ import annotations

from jit.common.dtype import ImageDType
from jit.ir.uop import Ops, UOp, add_terms, toposort
from jit.schedule.kernels import ScheduledKernel
from jit.schedule.lower import KernelInfo


def is_plain_copy(sink: UOp) -> bool:
    """Whether the rendered kernel ``sink`` copies parameter 1 into parameter 0 element for element (every STORE
    writes at the index it loads from, and the two have one size): a state's write-back, or a copy of a value
    that a kernel already stores (a concat the fusion cost model keeps)."""
    params = [u for u in toposort([sink]) if u.op is Ops.DEFINE_GLOBAL]
    if len(params) != 2 or params[0].dtype != params[1].dtype:
        return False
    for store in sink.src:
        if store.op is not Ops.STORE or store.src[1].op is not Ops.LOAD:
            return False
        out, src = store.src[0], store.src[1].src[0]
        if out.src[0].arg != 0 or src.src[0].arg != 1 or len(out.src) != 2 or len(src.src) != 2 or \
                out.src[1] is not src.src[1]:
            return False
    return True


def in_place_kernel(k: ScheduledKernel, state: UOp) -> ScheduledKernel | None:
    """``k`` storing into ``state`` (a buffer it reads, of its output's dtype and size) instead of its own output
    buffer: one parameter (0) for both, the others renumbered. None when ``k`` does not read ``state`` or the two
    buffers differ in type or size."""
    if state not in k.buffers[1:] or state.dtype != k.out_buffer.dtype or state.arg[2] != k.out_buffer.arg[2]:
        return None
    old = k.buffers.index(state)
    info = k.ast.arg
    assert isinstance(info, KernelInfo)
    params = info.params[:old] + info.params[old + 1:]
    mapping: dict[UOp, UOp] = {}
    for g in toposort([k.ast]):
        if g.op is Ops.DEFINE_GLOBAL:
            i = g.arg
            new = 0 if i == old else i - (i > old)
            mapping[g] = UOp(Ops.DEFINE_GLOBAL, params[new], (), new)
    sink = k.ast.substitute(mapping).replace(arg=KernelInfo(params))
    buffers = [state, *(b for b in k.buffers[1:] if b is not state)]
    return ScheduledKernel(k.name, sink, state, buffers, k.device, k.onnx_nodes)


def _split_constant(index: UOp) -> tuple[UOp | None, int]:
    """``index`` as ``W + c`` with ``c`` the constant term at its top (0 when it has none; ``W`` None when the
    index is a constant: a fully unrolled kernel)."""
    if index.op is Ops.CONST:
        return None, int(index.arg)
    if index.op is Ops.ADD:
        a, b = index.src
        if b.op is Ops.CONST:
            return a, int(b.arg)
        if a.op is Ops.CONST:
            return b, int(a.arg)
    return index, 0


def _mixed_radix(w: UOp | None, ranges: set[UOp]) -> str | None:
    """Why ``w`` is not a sum of ``RANGE * stride`` over exactly ``ranges`` with mixed-radix strides (or None, the
    sum of nothing, in a kernel without ranges), or None."""
    terms: list[tuple[int, int]] = []  # (stride, trip count)
    seen: set[UOp] = set()
    for t in add_terms(w) if w is not None else []:
        rng, stride = t, 1
        if t.op is Ops.MUL:
            a, b = t.src
            rng, c = (a, b) if b.op is Ops.CONST else (b, a)
            if c.op is not Ops.CONST:
                return f"index term {t.op.name} of two variables"
            stride = int(c.arg)
        if rng.op is not Ops.RANGE or rng in seen or stride <= 0:
            return f"index term {rng.op.name} is no RANGE times a positive constant"
        seen.add(rng)
        terms.append((stride, int(rng.src[0].arg)))
    if seen != ranges:
        return f"index depends on {len(seen)} of the kernel's {len(ranges)} ranges"
    span = 0
    for stride, trips in sorted(terms):
        if stride <= span:
            return f"index strides overlap (stride {stride} within a span of {span + 1})"
        span += stride * (trips - 1)
    return None


def in_place_problem(sink: UOp, param: int = 0) -> str | None:
    """Why the rendered kernel ``sink`` may not read and write parameter ``param`` in place (see the module
    docstring), or None when every load of it sees the value from before the kernel ran."""
    nodes = toposort([sink])
    if sink.op is not Ops.SINK or any(u.op is Ops.REDUCE for u in nodes):
        return "not a plain elementwise kernel"
    users: dict[UOp, list[UOp]] = {}
    for v in nodes:
        for s in v.src:
            users.setdefault(s, []).append(v)
    accesses: list[tuple[UOp, UOp]] = []  # (LOAD or STORE, its INDEX) on the shared parameter
    for g in nodes:
        if g.op is not Ops.DEFINE_GLOBAL or g.arg != param:
            continue
        if isinstance(g.dtype, ImageDType):
            return "an image parameter"
        for u in users.get(g, []):
            if u.op is not Ops.INDEX or u.src[0] is not g or len(u.src) != 2:
                return f"the parameter reaches a {u.op.name} other than an ungated INDEX"
            for v in users.get(u, []):
                if v.op not in (Ops.LOAD, Ops.STORE) or (v.op is Ops.STORE and v.src[0] is not u):
                    return f"the parameter's address reaches a {v.op.name}"
                accesses.append((v, u))
    if not accesses:
        return "the parameter is not accessed"
    ranges = {u for u in nodes if u.op is Ops.RANGE}
    split = [_split_constant(index.src[1]) for _, index in accesses]
    common = split[0][0]
    if any(w is not common for w, _ in split):
        return "accesses at different index expressions"
    offsets = {c for _, c in split}
    problem = _mixed_radix(common, ranges)
    if problem:
        return problem
    span = 1 if common is None else int(common.vmax) - int(common.vmin) + 1
    ordered = sorted(offsets)
    if any(b - a < span for a, b in zip(ordered, ordered[1:], strict=False)):
        return f"slots {ordered} closer than the index spans ({span})"
    offset = {index: c for (_, index), (_, c) in zip(accesses, split, strict=True)}
    first_store: dict[int, int] = {}
    for pos, store in enumerate(sink.src):
        if store.op is not Ops.STORE:
            return f"SINK source {store.op.name}"
        if store.src[0] in offset:
            first_store.setdefault(offset[store.src[0]], pos)
    trees = [set(toposort([store])) for store in sink.src]
    for load, index in accesses:
        if load.op is Ops.LOAD and min(p for p, tree in enumerate(trees) if load in tree) > \
                first_store.get(offset[index], len(sink.src)):
            return f"a load at offset {offset[index]} comes after the store over it"
    return None
