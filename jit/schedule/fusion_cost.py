"""The fusion cost model: which elementwise producers a reduce kernel would recompute at a price above storing them.

A kernel with a reduce evaluates the nodes under the reduce once per point of the reduce's iteration space (those
that do not move with the reduce loop once per output: the renderer computes them before the loop), so an
elementwise producer that the reduce reads through an EXPAND, a WINDOW or a matmul's broadcast (a 1x1 conv's
input, read once per output channel) is recomputed for every output that reads it. The register tiling
(jit/codegen/opt/tiling.py) shares one evaluation between the outputs of a tile, so what remains is once per
block of outputs. For the top of each such recomputed chain this compares, per element of the producer:

* recompute: (blocks - 1) x the chain's cost (its ALU ops weighted by ``OP_COST``, plus ``BYTE_COST`` per input
  byte it loads beyond one element, which each block reads again: a residual add's second operand), blocks =
  ceil(evaluations per element / ``TILE_REUSE``);
* store + reload: ``BYTE_COST`` per byte of one write and one read of the element;

and makes the producer a kernel output when recomputing is dearer. A chain holding a transcendental, a division or
a square root (``HEAVY``: scalar library calls or long-latency units on every target) is made one whenever a
block recomputes it, whatever the weights say: the exact GELU ``x * (erf(x / sqrt 2) + 1) / 2`` in front of a
256-channel 1x1 conv ran 16 ``erff`` per reduce step, once for every block of 4 output channels (94 ms, 5.4 ms
as two kernels; benchmarks/bench_fusion.py).

``FUSION_COST=0`` (jit/common/helpers.py) turns the model off: every producer stays fused, as before.
"""

from __future__ import annotations

from jit.common.dtype import DType
from jit.common.helpers import FUSION_COST, prod
from jit.ir.uop import GroupOp, Ops, UOp, toposort

# outputs of one register tile sharing a producer's evaluation: the tiling's reuse height (a block of 4 output
# channels of a conv, 4 rows of a matmul); a smaller tile only recomputes more
TILE_REUSE = 4
# one cheap ALU op on one element is the unit; these run as scalar library calls or on long-latency units
HEAVY = frozenset({Ops.EXP, Ops.LOG, Ops.SIN, Ops.COS, Ops.TAN, Ops.TANH, Ops.ERF, Ops.POW, Ops.FDIV,
                   Ops.RECIPROCAL, Ops.SQRT})
OP_COST = {**dict.fromkeys(HEAVY, 32), Ops.FDIV: 8, Ops.RECIPROCAL: 8, Ops.SQRT: 8, Ops.IDIV: 4, Ops.MOD: 4}
# a byte written by one kernel and read back by the next (or read again by every block), in cheap-op units. 16
# keeps a single-input activation fused up to 64 blocks (a 256-channel 1x1 conv), as the scheduler's rule for
# bare epilogues does (kernels.py ``_EpilogueReads.costs_loads``); it errs on fusing: measured on the CPU target, a
# ReLU fused into that conv already cost ~15% more than a kernel of its own, a second input ~20% more
BYTE_COST = 16
# a concat a reduce evaluates fewer times than this stays fused: the extra kernel would cost more than the selects
# (a ceil-mode max pool of the ONNX conformance tests, padded by a concat, evaluates a few hundred; the zoo's
# shufflenet and squeezenet concats tens of thousands and more)
CONCAT_MIN_EVALUATIONS = 1 << 14


def _walk(root: UOp, boundaries: set[UOp]) -> tuple[list[UOp], dict[UOp, list[UOp]]]:
    """The nodes the kernel computing ``root`` evaluates (not its inputs), parents before children, and each
    node's parents among them."""

    def inside(node: UOp) -> tuple[UOp, ...]:
        return tuple(s for s in node.src if s not in boundaries and s.op not in (Ops.BUFFER, Ops.CONST))

    order = toposort([root], inside)
    parents: dict[UOp, list[UOp]] = {root: []}
    for node in order:
        for s in inside(node):
            parents.setdefault(s, []).append(node)
    return order[::-1], parents


def _reshape_flags(parent: tuple[int, ...], flags: tuple[bool, ...], child: tuple[int, ...]) -> tuple[bool, ...]:
    """``flags`` of a reshape's axes carried to its source's: axes grouped by equal running products, each source
    axis flagged when any axis of its group is."""
    out = [False] * len(child)
    i = j = 0
    while i < len(parent) or j < len(child):
        group_p, group_c, pp, pc = [], [], 1, 1
        while True:
            if pp <= pc and i < len(parent):
                group_p.append(i)
                pp *= parent[i]
                i += 1
            elif j < len(child):
                group_c.append(j)
                pc *= child[j]
                j += 1
            else:
                break
            if pp == pc and (i == len(parent) or parent[i] != 1) and (j == len(child) or child[j] != 1):
                break
        hit = any(flags[a] for a in group_p)
        for b in group_c:
            out[b] = hit and child[b] > 1
    return tuple(out)


def _source_flags(node: UOp, flags: tuple[bool, ...], src: UOp) -> tuple[bool, ...]:
    """Which axes of ``src`` vary along the reduce loop, given which of ``node``'s do."""
    shape, sshape = node.shape or (), src.shape or ()
    if node.op is Ops.PERMUTE:
        out = [False] * len(sshape)
        for i, a in enumerate(node.arg):
            out[a] = flags[i]
        return tuple(out)
    if node.op is Ops.RESHAPE:
        return _reshape_flags(shape, flags, sshape)
    if node.op is Ops.WINDOW:
        nd = len(node.arg[0])
        lead = len(sshape) - nd
        return tuple(flags[a] or (a >= lead and flags[a + nd]) for a in range(len(sshape)))
    if len(sshape) != len(shape) or (node.op is Ops.GATHER and src is node.src[0]):
        # no axis-to-axis map (a gather's table is read at data-dependent rows): moved if anything moves
        return tuple(any(flags) and n > 1 for n in sshape)
    return tuple(f and n > 1 for f, n in zip(flags, sshape, strict=True))


def evaluations(root: UOp, boundaries: set[UOp]) -> dict[UOp, int]:
    """How many times the kernel computing ``root`` evaluates each node under one of its reduces, untiled: a
    reduce's sources once per point of its iteration space when they vary along the reduced axes, else once per
    output of the reduce (code that does not move with the reduce loop is computed before it); any other node
    once per evaluation of its parent (a movement op maps indices, it does not change the count). A node read on
    several paths counts its largest (paths at one index are one evaluation after common subexpressions)."""
    return _evaluations(root, boundaries, _walk(root, boundaries)[0])


def _evaluations(root: UOp, boundaries: set[UOp], order: list[UOp]) -> dict[UOp, int]:
    """``evaluations`` over the kernel's nodes in ``order`` (``_walk``'s)."""
    evals: dict[UOp, int] = {root: prod(root.shape or ())}
    outer: dict[UOp, int] = {}  # node under a reduce -> evaluations of that reduce (a hoisted node's count)
    moving: dict[UOp, tuple[bool, ...]] = {}  # node under a reduce -> which of its axes the reduce loop moves
    for node in order:
        if node.op is Ops.REDUCE_AXIS:
            axes, src = node.arg[1], node.src[0]
            flags = tuple(a in axes and n > 1 for a, n in enumerate(src.shape or ()))
            pairs = [(src, evals[node] * prod(src.shape or ()) // max(1, prod(node.shape or ())), flags)]
            reduce_evals = evals[node]
        else:
            pairs = [(s, evals[node], _source_flags(node, moving[node], s) if node in moving else None)
                     for s in node.src]
            reduce_evals = outer.get(node, 0)
        for s, per, flags in pairs:
            if s in boundaries or s.op in (Ops.BUFFER, Ops.CONST):
                continue
            if flags is not None:
                moving[s] = tuple(a or b for a, b in zip(moving.get(s, flags), flags, strict=True))
                outer[s] = max(outer.get(s, 0), reduce_evals)
            evals[s] = max(evals.get(s, 0), per)
    return {n: e if any(moving[n]) else outer[n] for n, e in evals.items() if n in moving}


def blocks(node: UOp, evals: int) -> int:
    """Times the register-tiled kernel computes each element of ``node`` (each output block that reads it)."""
    return -(-evals // (max(1, prod(node.shape or ())) * TILE_REUSE))


def _chain(node: UOp, boundaries: set[UOp]) -> tuple[set[UOp], dict[UOp, float]]:
    """The elementwise and movement nodes a fused ``node`` recomputes with it (itself included), and the inputs
    they read (buffers, kernel outputs, reduces, gathers; constants and iotas are free), each with the elements
    of it loaded per element of ``node``: a PAD's source fills only part of it (each half of a concat one half),
    an EXPAND's source is fewer distinct elements (a broadcast bias next to none)."""
    share: dict[UOp, float] = {node: 1.0}
    inputs: dict[UOp, float] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        f = share[n]
        if n.op in (Ops.PAD, Ops.EXPAND):
            f *= max(1, prod(n.src[0].shape or ())) / max(1, prod(n.shape or ()))
        for s in n.src:
            if s.op in (Ops.CONST, Ops.IOTA):  # computed from the index, nothing loaded
                continue
            if s in boundaries or not (s.op in GroupOp.Elementwise or s.op in GroupOp.Movement):
                inputs[s] = max(inputs.get(s, 0.0), f)
            elif f > share.get(s, 0.0):  # the same node on several paths is one load: its largest share
                share[s] = f
                stack.append(s)
    return set(share), inputs


def _itemsize(node: UOp) -> int:
    return node.dtype.itemsize if isinstance(node.dtype, DType) else 4


def recompute_cost(node: UOp, boundaries: set[UOp]) -> tuple[float, bool]:
    """Cost units of computing one element of fused ``node`` once more, and whether its chain holds a ``HEAVY``
    op: its ALU ops, and the input bytes it loads beyond one element of its own size (read again by each block;
    that much is read either way, as the chain's inputs or as the stored producer), by each input's share
    (``_chain``)."""
    chain, inputs = _chain(node, boundaries)
    ops = [n.op for n in chain if n.op in GroupOp.ALU]
    extra = max(0.0, sum(_itemsize(i) * f for i, f in inputs.items()) - _itemsize(node))
    return sum(OP_COST.get(op, 1) for op in ops) + BYTE_COST * extra, any(op in HEAVY for op in ops)


def store_reload_cost(node: UOp) -> int:
    """Cost units of writing one element of ``node`` to a buffer of its own and reading it back once."""
    return 2 * _itemsize(node) * BYTE_COST


def is_concat(node: UOp) -> bool:
    """Whether ``node`` is a piece of a concat as ``Tensor.cat`` builds it: a select between a padded piece and
    the pieces before it (jit/frontend/movement.py ``cat``)."""
    return node.op is Ops.WHERE and node.src[0].op is Ops.PAD and node.src[1].op is Ops.PAD


def concat_tops(evals: dict[UOp, int]) -> set[UOp]:
    """The concats (their last piece) among the nodes a reduce evaluates at least ``CONCAT_MIN_EVALUATIONS``
    times. Each evaluation of one loads every piece (the renderer selects between loads at clamped indices, it does
    not branch) and, through a channel shuffle into the next concat, every piece of that one too: shufflenet's
    depthwise convs read five buffers per tap, and squeezenet's max pools two."""
    inner = {n.src[2] for n in evals if is_concat(n)}
    return {n for n, e in evals.items() if is_concat(n) and n not in inner and e >= CONCAT_MIN_EVALUATIONS}


def dear_producers(boundaries: set[UOp], memo: dict[tuple[UOp, ...], set[UOp]] | None = None) -> set[UOp]:
    """The fusion cost pass. Before: ``boundaries``, the kernel outputs found so far (every reduce a kernel
    reads at another index than its own is one). After: every elementwise producer, no kernel output yet, that
    tops a chain some reduce kernel computes more than once per element (once per output block) and that costs
    more to recompute there than to store and reload (or that holds a ``HEAVY`` op), and every concat a reduce
    reads (``concat_tops``: a stored concat is one plain load per tap); the caller makes them kernel outputs,
    each then computed once. Empty under ``FUSION_COST=0``. ``memo``: each kernel's answer by the nodes it
    computes (``_walk``'s order, its output first), kept by a caller asking again as the boundaries grow: a kernel
    computing the same nodes reads the same boundaries, so its answer holds."""
    if not FUSION_COST:
        return set()
    out: set[UOp] = set()
    memo = {} if memo is None else memo
    for k in boundaries:
        order, parents = _walk(k, boundaries)
        if (known := memo.get(key := tuple(order))) is not None:
            out |= known
            continue
        found: set[UOp] = set()
        evals = _evaluations(k, boundaries, order)
        found |= concat_tops(evals)
        again = {n for n, e in evals.items() if n.op in GroupOp.Elementwise and n.shape and blocks(n, e) > 1}
        # inside a recomputed chain (every parent in it, through movement ops): the chain's top decides for it
        inside: set[UOp] = set()
        for n in order:
            if n is not k and all(p in again or (p.op in GroupOp.Movement and p in inside) for p in parents[n]):
                inside.add(n)
        for n in again - inside:
            cost, heavy = recompute_cost(n, boundaries)
            if heavy or (blocks(n, evals[n]) - 1) * cost > store_reload_cost(n):
                found.add(n)
        memo[key] = found
        out |= found
    return out
