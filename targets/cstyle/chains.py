"""Kernels that run several kernel graphs in one launch (jit/schedule/chains.py): a chain, its members one after
another in one work-item, and a team, its members shared out by work-groups that claim chunks of them. Each member
is rendered by the walk (targets/cstyle/walk.py) as a block of the one kernel."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from jit.common.dtype import PtrDType
from jit.common.errors import CompileError
from jit.ir.uop import UOp
from targets.cstyle.language import CStyleLanguage
from targets.cstyle.walk import KernelRenderer, check_kernel_graph, group_range


def _rendered_parts(lang: CStyleLanguage, name: str, parts: Sequence[tuple[UOp, tuple[int, ...]]],
                    what: str) -> Iterator[KernelRenderer]:
    """Each kernel graph of ``parts`` rendered as a block of one kernel (a chain's or a team's, ``what``): each
    buffer parameter named for the kernel's parameter its wiring gives, variable names running on from one block
    to the next."""
    if not parts:
        raise CompileError(f"{name}: a {what} expected kernels, got none")
    counter = 0
    for i, (sink, wiring) in enumerate(parts):
        check_kernel_graph(name, sink)
        if group_range(sink) is not None:
            raise CompileError(f"{name}: part {i} expected no group reduce (its local memory), got one")
        if len(wiring) != len(sink.arg.params):
            raise CompileError(f"{name}: part {i} expected a chain parameter per buffer parameter "
                               f"({len(sink.arg.params)}), got {len(wiring)}")
        renderer = KernelRenderer(lang, name, sink, [f"data{j}" for j in wiring], counter)
        renderer.render_body()
        counter = renderer.counter
        yield renderer


def _kernel_text(lang: CStyleLanguage, name: str, params: Sequence[PtrDType], renderers: list[KernelRenderer],
                 lines: list[str]) -> str:
    helpers = {k: v for r in renderers for k, v in r.helpers.items()}
    sig = f"{lang.kernel_prefix} {name}({', '.join(renderers[0].param(i, d) for i, d in enumerate(params))}) {{"
    head = "\n".join((*lang.headers, *helpers.values()))
    return f"{head}\n{sig}\n" + "\n".join(lines) + "\n}\n"


def render_chain(lang: CStyleLanguage, name: str, parts: Sequence[tuple[UOp, tuple[int, ...]]],
                 params: Sequence[PtrDType]) -> str:
    """One kernel of ``params`` running the kernel graphs of ``parts`` in order, each in a block of its own, every
    range a loop (``lang`` launches none, ``global_dims`` 0: one work-item runs the whole chain) and each buffer
    parameter named for the chain's parameter its wiring gives. Variable names run on from one block to the next."""
    if lang.global_dims or lang.parallel_for or lang.parallel_range:
        raise CompileError(f"{name}: a chain's language expected to launch no range, got {lang.global_dims} "
                           "launched dimensions or parallel loops")
    renderers = list(_rendered_parts(lang, name, parts, "chain"))
    lines = [line for r in renderers for line in ("  {", *(f"  {ln}" for ln in r.lines), "  }")]
    return _kernel_text(lang, name, params, renderers, lines)


def render_team(lang: CStyleLanguage, name: str, parts: Sequence[tuple[UOp, tuple[int, ...]]],
                params: Sequence[PtrDType], counters: int, chunks: int) -> str:
    """One kernel of ``params`` whose work-groups run the kernel graphs of ``parts`` in order as a team (``lang``
    launches no range and splits parallel loops by range, ``dp_lo``/``dp_hi``). Consecutive members too small to
    split make one block (one group runs them back to back, as a chain); each other member is a block whose
    flattened parallel loops are cut into at most ``chunks`` chunks. A group claims a chunk of block ``b`` by
    incrementing its claim counter (``data<counters>[2 b]``), runs it, and adds its iterations to the block's done
    counter (``[2 b + 1]``); out of claims, it waits until the done counter holds all the block's iterations, so each
    member sees every earlier member's stores, as it would after the earlier dispatches. The wait is on finished
    work, never on other groups: a group that starts late finds the work done, and a single group does it all. The
    last group to leave (the count at ``[2 len(parts)]``) sets every counter back to zero for the next launch."""
    if lang.global_dims or not lang.parallel_range:
        raise CompileError(f"{name}: a team's language expected to launch no range and split loops by range, got "
                           f"{lang.global_dims} launched dimensions")
    renderers = list(_rendered_parts(lang, name, parts, "team"))
    blocks: list[tuple[int, list[str]]] = []  # per block: its iterations and body lines
    single: list[str] | None = None  # the body of the block of unsplit members being gathered
    for r in renderers:
        body = ["{", *r.lines, "}"]
        if r.parallel_loops:
            blocks.append((r.parallel_trips, body))
            single = None
        elif single is not None:
            single += body
        else:
            single = body
            blocks.append((1, single))
    c = f"data{counters}"
    lines: list[str] = []
    for b, (trips, body) in enumerate(blocks):
        n = min(trips, chunks)
        size = -(-trips // n)
        if trips == 1:  # the one iteration runs where it was claimed
            body = ["for (int dp_one = dp_lo; dp_one < dp_hi; dp_one++) {", *(f"  {line}" for line in body), "}"]
        lines += [f"  for (int dp_t = 0; dp_t < {n}; dp_t++) {{",
                  f"    int dp_c = min(max(atomic_inc({c} + {2 * b}), 0), {n});",
                  f"    int dp_lo = min(dp_c * {size}, {trips});",
                  f"    int dp_hi = min(dp_lo + {size}, {trips});",
                  *(f"    {line}" for line in body),
                  f"    atomic_add({c} + {2 * b + 1}, dp_hi - dp_lo);", "  }"]
        if b + 1 < len(blocks):
            lines.append(f"  while (atomic_add({c} + {2 * b + 1}, 0) < {trips}) {{}}")
    out = 2 * len(parts)
    lines += [f"  if (atomic_inc({c} + {out}) == (int)get_num_groups(0) - 1) {{",
              f"    for (int dp_k = 0; dp_k < {out + 1}; dp_k++) {c}[dp_k] = 0;", "  }"]
    return _kernel_text(lang, name, params, renderers, lines)
