"""ONNX classic-ML ops (ai.onnx.ml): Binarizer, ArrayFeatureExtractor and TreeEnsemble.

TreeEnsemble evaluates every tree node's comparison at once and reaches leaves through tables built at load
from the attributes; every data value computes through Tensor ops.
"""

from __future__ import annotations

import math

import numpy as np

from jit.common.dtype import dtypes
from jit.frontend.tensor import Tensor
from jit.onnx.ops.nn_helpers import compute_dtype, host_const
from jit.onnx.registry import OpContext, onnx_op


@onnx_op("ai.onnx.ml.Binarizer")
def binarizer(ctx: OpContext) -> Tensor:
    x = ctx.t(0)
    return (x > float(ctx.attr("threshold", 0.0))).where(1.0, 0.0).cast(x.dtype)


@onnx_op("ai.onnx.ml.ArrayFeatureExtractor")
def array_feature_extractor(ctx: OpContext) -> Tensor:
    """``x[..., indices]`` with the indices flattened; a 1-D input gives one row (onnxruntime)."""
    x, idx = ctx.t(0), ctx.t(1)
    flat = idx.reshape(-1).cast(dtypes.int32)
    out = x.take(flat, x.ndim - 1)
    return out.reshape(1, flat.shape[0]) if x.ndim == 1 else out


_TREE_MODES = ("leq", "lt", "gte", "gt", "eq", "neq", "member")


@onnx_op("ai.onnx.ml.TreeEnsemble")
def tree_ensemble(ctx: OpContext) -> Tensor:
    """Every node's comparison for every sample at once; each leaf is reached when all decisions on its path
    agree (a product of the path's decisions, gathered through load-time tables); leaves aggregate per target."""
    x = ctx.t(0)
    a = ctx.attrs
    splits = np.asarray(a["nodes_splits"]).reshape(-1)
    feats = list(a["nodes_featureids"])
    modes = [int(m) for m in np.asarray(a["nodes_modes"]).reshape(-1)]
    t_ids, f_ids = list(a["nodes_truenodeids"]), list(a["nodes_falsenodeids"])
    t_leaf, f_leaf = list(a["nodes_trueleafs"]), list(a["nodes_falseleafs"])
    leaf_t, leaf_w = list(a["leaf_targetids"]), np.asarray(a["leaf_weights"]).reshape(-1)
    roots = list(a["tree_roots"])
    n_targets = int(a.get("n_targets", max(leaf_t) + 1))
    agg = int(a.get("aggregate_function", 1))
    post = int(a.get("post_transform", 0))
    tracks = list(a.get("nodes_missing_value_tracks_true", []) or [])
    members = iter(np.asarray(a["membership_values"]).reshape(-1).tolist()) if "membership_values" in a else None
    # walk the trees as the reference builds them: membership lists are consumed in that (DFS) order
    visits: list[tuple[int, list[float]]] = []  # (node, members) per visited decision
    paths: list[tuple[list[tuple[int, bool]], int]] = []  # ([(visit, branch)], leaf)

    def walk(node: int, is_leaf: bool, path: list[tuple[int, bool]]) -> None:
        if is_leaf:
            paths.append((path, node))
            return
        mem: list[float] = []
        if modes[node] == 6:
            assert members is not None
            while not math.isnan(v := next(members)):
                mem.append(v)
        visits.append((node, mem))
        vi = len(visits) - 1
        walk(t_ids[node], bool(t_leaf[node]), [*path, (vi, True)])
        walk(f_ids[node], bool(f_leaf[node]), [*path, (vi, False)])

    for root in roots:
        degenerate = t_leaf[root] and f_leaf[root] and t_ids[root] == f_ids[root]
        walk(t_ids[root] if degenerate else root, bool(degenerate), [])
    if any(m > 6 for m in modes):
        raise ctx.unsupported(nodes_modes=sorted(set(modes)))
    cd = compute_dtype(x.dtype)
    n = x.shape[0]
    nv, nl = len(visits), len(paths)
    if nv:
        vf = np.array([feats[v] for v, _ in visits], dtype=np.int32)
        xs = x.take(host_const(vf, x), 1)  # (N, V)
        thr = host_const(np.array([splits[v] for v, _ in visits]), x, x.dtype).reshape(1, nv)
        cmp = {0: xs <= thr, 1: xs < thr, 2: xs >= thr, 3: xs > thr, 4: xs == thr, 5: xs != thr}
        cond: Tensor | None = None
        for mode, c in cmp.items():
            sel = np.array([modes[v] == mode for v, _ in visits])
            if sel.any():
                part = c.logical_and(host_const(sel, x).reshape(1, nv))
                cond = part if cond is None else cond.logical_or(part)
        mem_vals = [(vi, m) for vi, (_, ms) in enumerate(visits) for m in ms]
        if mem_vals:
            owner = np.zeros((len(mem_vals), nv), dtype=np.float32)
            for j, (vi, _) in enumerate(mem_vals):
                owner[j, vi] = 1.0
            mv = host_const(np.array([m for _, m in mem_vals]), x, x.dtype)
            xm = x.take(host_const(np.array([feats[visits[vi][0]] for vi, _ in mem_vals], dtype=np.int32), x), 1)
            hit = (xm == mv.reshape(1, -1)).cast(dtypes.float32).matmul(host_const(owner, x)) > 0.0
            cond = hit if cond is None else cond.logical_or(hit)
        assert cond is not None
        if tracks:
            tr = host_const(np.array([bool(tracks[v]) for v, _ in visits]), x).reshape(1, nv)
            cond = cond.logical_or(xs.isnan().logical_and(tr))
        dec = Tensor.cat(cond.cast(cd), (cond.logical_not()).cast(cd), Tensor.ones(n, 1, dtype=cd,
                                                                                     device=x.device), dim=1)
        depth = max(len(p) for p, _ in paths) or 1
        steps = np.full((nl, depth), 2 * nv, dtype=np.int32)  # the ones column pads short paths
        for li, (path, _) in enumerate(paths):
            for j, (vi, br) in enumerate(path):
                steps[li, j] = vi if br else nv + vi
        reached = dec.take(host_const(steps.reshape(-1), x), 1).reshape(n, nl, depth).prod(2)  # (N, L)
    else:
        reached = Tensor.ones(n, nl, dtype=cd, device=x.device)
    weights = np.array([leaf_w[leaf] for _, leaf in paths], dtype=np.float64)
    targets = np.array([leaf_t[leaf] for _, leaf in paths])
    onehot = (targets.reshape(-1, 1) == np.arange(n_targets).reshape(1, -1))
    if agg in (0, 1):
        wmat = onehot * weights.reshape(-1, 1) / (len(roots) if agg == 0 else 1)
        out = reached.matmul(host_const(wmat, x, cd))
    elif agg in (2, 3):
        big = float(np.finfo(np.float32 if cd == dtypes.float32 else np.float64).max)
        fill = big if agg == 2 else -big
        hitm = (reached.unsqueeze(-1) > 0.0).logical_and(host_const(onehot, x).reshape(1, nl, n_targets))
        vals = hitm.where(host_const(weights, x, cd).reshape(1, nl, 1), fill)
        out = vals.min(1) if agg == 2 else vals.max(1)
    else:
        raise ctx.unsupported(aggregate_function=agg)
    if post == 1:
        out = out.softmax(-1)
    elif post == 2:
        out = out.sigmoid()
    elif post != 0:
        raise ctx.unsupported(post_transform=post)
    return out.cast(x.dtype)
