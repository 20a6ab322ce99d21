"""The fusion cost model (jit/schedule/fusion_cost.py): an elementwise producer that a reduce kernel would
recompute once per output block becomes a kernel of its own when that costs more than storing and reloading it,
and always when it holds a transcendental; cheap producers stay fused.

Checked on the scheduled kernels (counts, which kernel computes erf / ``expf``), against the same model
under ``FUSION_COST=0`` (the old schedule), and against onnxruntime / numpy.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

from jit import capture, load_onnx
from jit.codegen.passes.vector_erf import NUMERATOR
from jit.common.helpers import Context
from jit.frontend.tensor import Tensor
from jit.ir.uop import Ops, toposort
from jit.schedule import fusion_cost
from jit.schedule.kernels import create_schedule, find_boundaries
from jit.trace import Captured, capture_onnx
from targets.registry import Device

RNG_SEED = 0


def gelu_conv_model(c: int, cout: int, hw: int) -> ModelProto:
    """The exact GELU ``Div -> Erf -> Add -> Mul -> Mul`` (as exported by torch) feeding a 1x1 conv."""
    rng = np.random.default_rng(RNG_SEED)
    inits = {"w": (rng.standard_normal((cout, c, 1, 1)) * (2 / c) ** 0.5).astype(np.float32),
             "b": (0.1 * rng.standard_normal(cout)).astype(np.float32),
             "sqrt2": np.array(2 ** 0.5, np.float32), "one": np.array(1, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]),
             helper.make_node("Conv", ["g", "w", "b"], ["y"], kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "gelu_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, hw, hw])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def onnxruntime_output(model: ModelProto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def reduce_sources(run: Captured) -> list[str]:
    """The C sources of the captured kernels that reduce (``r_`` kernels, jit/schedule/lower.py kernel_name)."""
    return [k.source for k in run.cmdbuf.kernels if k.name.startswith("r_")]


# --- GELU -> 1x1 conv -------------------------------------------------------------------------------------
def computes_erf(source: str) -> bool:
    """Whether a kernel computes erf: a libm call, or on vector lanes the rational polynomial of
    jit/codegen/passes/vector_erf.py (recognized by a coefficient)."""
    return "erff" in source or repr(float(np.float32(NUMERATOR[0]))) in source


def test_gelu_feeding_a_1x1_conv_becomes_a_kernel_of_its_own() -> None:
    model = gelu_conv_model(32, 64, 16)
    x = np.random.default_rng(1).standard_normal((1, 32, 16, 16), dtype=np.float32)
    run = capture_onnx(load_onnx(model), {"x": x})
    assert run.n_dispatches == 2
    (conv,) = reduce_sources(run)
    assert not computes_erf(conv)
    assert sum(computes_erf(k.source) for k in run.cmdbuf.kernels) == 1  # computed once, in the GELU's kernel
    np.testing.assert_allclose(run({"x": x})["y"], onnxruntime_output(model, x), rtol=1e-5, atol=1e-5)


def test_without_the_cost_model_the_conv_recomputes_erf() -> None:
    model = gelu_conv_model(32, 64, 16)
    x = np.random.default_rng(1).standard_normal((1, 32, 16, 16), dtype=np.float32)
    with Context(FUSION_COST=0):
        run = capture_onnx(load_onnx(model), {"x": x})
    assert run.n_dispatches == 1
    (conv,) = reduce_sources(run)
    assert computes_erf(conv)
    np.testing.assert_allclose(run({"x": x})["y"], onnxruntime_output(model, x), rtol=1e-5, atol=1e-5)


# --- cheap producers still fuse -----------------------------------------------------------------------------
def conv1x1(c: int, cout: int) -> tuple[Tensor, Tensor]:
    rng = np.random.default_rng(RNG_SEED)
    return (Tensor((rng.standard_normal((cout, c, 1, 1)) * 0.1).astype(np.float32)),
            Tensor(rng.standard_normal(cout).astype(np.float32)))


@pytest.mark.parametrize("producer", ["relu", "scale_shift"])
def test_a_cheap_producer_stays_fused_into_the_conv(producer: str) -> None:
    w, b = conv1x1(32, 64)
    x = np.random.default_rng(2).standard_normal((1, 32, 16, 16), dtype=np.float32)
    act = {"relu": lambda t: t.relu(), "scale_shift": lambda t: t * 2.0 + 1.0}[producer]
    run = capture(lambda x: {"y": act(x).conv2d(w, b)}, {"x": x})
    assert run.n_dispatches == 1
    pre = {"relu": np.maximum(x, 0), "scale_shift": x * 2 + 1}[producer]
    want = np.einsum("oc,nchw->nohw", w.numpy()[:, :, 0, 0], pre) + b.numpy()[None, :, None, None]
    np.testing.assert_allclose(run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_a_second_input_reread_per_block_is_stored_once_instead() -> None:
    # x + y fused into a 64-channel 1x1 conv reads both inputs once per block of 4 channels (16 times): the
    # second input's bytes then cost more than writing the sum once and reading it back
    w, b = conv1x1(32, 64)
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal((1, 32, 16, 16), dtype=np.float32) for _ in range(2))
    run = capture(lambda x, y: {"o": (x + y).conv2d(w, b)}, {"x": x, "y": y})
    assert run.n_dispatches == 2
    want = np.einsum("oc,nchw->nohw", w.numpy()[:, :, 0, 0], x + y) + b.numpy()[None, :, None, None]
    np.testing.assert_allclose(run({"x": x, "y": y})["o"], want, rtol=1e-4, atol=1e-4)


def test_a_producer_read_once_per_element_is_never_split_off() -> None:
    # a 4-channel conv: one register tile covers every output channel, so the GELU is computed once anyway
    model = gelu_conv_model(8, 4, 8)
    x = np.random.default_rng(4).standard_normal((1, 8, 8, 8), dtype=np.float32)
    run = capture_onnx(load_onnx(model), {"x": x})
    assert run.n_dispatches == 1
    np.testing.assert_allclose(run({"x": x})["y"], onnxruntime_output(model, x), rtol=1e-5, atol=1e-5)


# --- softmax ------------------------------------------------------------------------------------------------
def softmax_ref(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("fusion_cost", [1, 0])
def test_softmax_exp_is_not_recomputed_per_output_block(fusion_cost: int) -> None:
    rng = np.random.default_rng(5)
    s = rng.standard_normal((4, 25, 25), dtype=np.float32)
    v = Tensor(rng.standard_normal((4, 25, 64), dtype=np.float32))
    with Context(FUSION_COST=fusion_cost):
        run = capture(lambda s: {"y": s.softmax(-1).matmul(v)}, {"s": s})
    pv = [src for src in reduce_sources(run) if "r_4_25_64_25" in src]
    assert len(pv) == 1
    # the model on: softmax's probabilities are a kernel output, the P.V matmul only loads them; off: the matmul
    # recomputes exp for each block of output columns
    assert ("expf" in pv[0]) is (not fusion_cost)
    np.testing.assert_allclose(run({"s": s})["y"], softmax_ref(s) @ v.numpy(), rtol=1e-5, atol=1e-5)


def attention_model(tokens: int, d: int, heads: int) -> ModelProto:
    rng = np.random.default_rng(RNG_SEED)
    hd = d // heads
    inits = {k: (rng.standard_normal((d, d)) / d ** 0.5).astype(np.float32) for k in ("wq", "wk", "wv")}
    inits |= {"split": np.array([1, tokens, heads, hd], np.int64), "merge": np.array([1, tokens, d], np.int64)}
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wq"], ["q0"]), n("MatMul", ["x", "wk"], ["k0"]), n("MatMul", ["x", "wv"], ["v0"]),
             n("Reshape", ["q0", "split"], ["q1"]), n("Reshape", ["k0", "split"], ["k1"]),
             n("Reshape", ["v0", "split"], ["v1"]), n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
             n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]), n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
             n("MatMul", ["q", "kt"], ["s"]), n("Softmax", ["s"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o0"]),
             n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "merge"], ["y"])]
    graph = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, tokens, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, d])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_attention_matches_onnxruntime_and_exp_runs_once_per_score_in_softmax_kernels() -> None:
    """The row sum and the normalization each compute exp once per score (jit/schedule/kernels.py
    ``_row_normalization``: no kernel of its own for exp); no matmul recomputes it."""
    model = attention_model(25, 64, 4)
    x = np.random.default_rng(6).standard_normal((1, 25, 64), dtype=np.float32)
    run = capture_onnx(load_onnx(model), {"x": x})
    # expf, or on vector lanes its polynomial (jit/codegen/passes/vector_exp.py), whose first step scales by log2(e)
    with_exp = sorted(k.name for k in run.cmdbuf.kernels if "expf" in k.source or "1.44269502" in k.source)
    assert [n.split("_")[0] for n in with_exp] == ["E", "r"] and all("_25_25" in n for n in with_exp)
    assert run.n_dispatches == 8  # q, k, v, scores, max, sum, probabilities, P.V (9 with exp stored)
    np.testing.assert_allclose(run({"x": x})["y"], onnxruntime_output(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
def test_a_row_normalization_is_computed_by_its_row_reduce_not_stored(op: str) -> None:
    """Softmax's ``exp(x - max)`` under its sum, a layer norm's ``x - mean`` under its variance: each element is
    evaluated once in the reduce's kernel and once more in the normalization, with no kernel storing it between
    (softmax: max, sum, normalize; layer norm: mean, variance, normalize; after the matmul feeding them)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 16), dtype=np.float32)
    w = rng.standard_normal((16, 32), dtype=np.float32)

    def fn(x: Tensor) -> dict[str, Tensor]:
        h = x.matmul(Tensor(w))
        return {"y": h.softmax(-1) if op == "softmax" else h.layer_norm(32)}

    run = capture(fn, {"x": x})
    assert [k.name[0] for k in run.cmdbuf.kernels] == ["r", "r", "r", "E"], [k.name for k in run.cmdbuf.kernels]
    h = x @ w
    mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    want = softmax_ref(h) if op == "softmax" else (h - mean) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


# --- the model's arithmetic ---------------------------------------------------------------------------------
def test_evaluations_count_a_1x1_conv_input_once_per_output_channel() -> None:
    w, b = conv1x1(32, 64)
    x = Tensor(np.random.default_rng(7).standard_normal((1, 32, 16, 16), dtype=np.float32))
    g = x.relu()
    y = g.conv2d(w, b)
    boundaries = set(find_boundaries([y.uop]))
    (root,) = boundaries
    evals = fusion_cost.evaluations(root, boundaries)
    assert evals[g.uop] == 64 * 32 * 16 * 16
    assert fusion_cost.blocks(g.uop, evals[g.uop]) == 64 // fusion_cost.TILE_REUSE
    cost, heavy = fusion_cost.recompute_cost(g.uop, boundaries)
    assert (cost, heavy) == (2, False)  # relu is a compare and a select
    assert fusion_cost.store_reload_cost(g.uop) == 2 * 4 * fusion_cost.BYTE_COST


def gelu_into_conv(seed: int) -> tuple[Tensor, Tensor, set]:
    """An exact GELU feeding a 1x1 conv: the GELU, the conv and the conv's kernel outputs with the GELU fused."""
    x = Tensor(np.random.default_rng(seed).standard_normal((1, 32, 16, 16), dtype=np.float32))
    g = x * ((x / 2 ** 0.5).erf() + 1) * 0.5
    w, b = conv1x1(32, 64)
    y = g.conv2d(w, b)
    with Context(FUSION_COST=0):
        return g, y, set(find_boundaries([y.uop]))


def test_the_gelu_chain_is_heavy_and_dear() -> None:
    g, y, fused = gelu_into_conv(8)
    assert fusion_cost.recompute_cost(g.uop, fused)[1] is True
    assert fusion_cost.dear_producers(fused) == {g.uop}
    with Context(FUSION_COST=0):
        assert fusion_cost.dear_producers(fused) == set()
    kernels, _ = create_schedule([y.uop], Device.DEFAULT)
    assert len(kernels) == 2
    gelu, conv = kernels
    assert any(n.op is Ops.ERF for n in toposort([gelu.ast]))
    assert not any(n.op is Ops.ERF for n in toposort([conv.ast]))


def test_a_kernel_computing_the_same_nodes_is_answered_from_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    g, _, fused = gelu_into_conv(9)
    memo: dict = {}
    assert fusion_cost.dear_producers(fused, memo) == {g.uop} and len(memo) == len(fused)
    costed: list[object] = []
    real = fusion_cost.recompute_cost
    monkeypatch.setattr(fusion_cost, "recompute_cost", lambda n, bs: (costed.append(n), real(n, bs))[1])
    assert fusion_cost.dear_producers(fused, memo) == {g.uop} and costed == []  # nothing asked again
    assert fusion_cost.dear_producers(fused | {g.uop}, memo) == set()  # the conv computes other nodes now
    assert fusion_cost.dear_producers(fused) == {g.uop} and costed  # no memo: asked again


# --- concats under a reduce -----------------------------------------------------------------------------------
def depthwise(c: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(RNG_SEED + c)
    return rng.standard_normal((c, 1, 3, 3)).astype(np.float32), np.zeros(c, np.float32)


def depthwise_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 depthwise conv, padding 1, in numpy."""
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, wd = x.shape[2:]
    return sum(pad[:, :, i:i + h, j:j + wd] * w[None, :, 0, i, j, None, None] for i in range(3) for j in range(3))


def shuffle_block(x, conv):  # noqa: ANN001, ANN201 (Tensor or numpy: the same code for both)
    """shufflenet's block tail: concat the untouched half and a branch, shuffle the channels in 2 groups."""
    n, c, h, wd = x.shape
    half, branch = x[:, : c // 2], conv(x[:, c // 2:])
    if isinstance(x, Tensor):
        return Tensor.cat(half, branch, dim=1).reshape(n, 2, c // 2, h, wd).permute(0, 2, 1, 3, 4).reshape(n, c, h, wd)
    return np.concatenate([half, branch], 1).reshape(n, 2, c // 2, h, wd).transpose(0, 2, 1, 3, 4).reshape(x.shape)


def tensor_reads(run: Captured) -> list[int]:
    """Per reduce dispatch, the input and intermediate buffers it reads (weights left out)."""
    return [sum(b.startswith(("input:", "arena:")) for b in d.bindings[1:]) for d in run.cmdbuf.dispatches
            if run.cmdbuf.kernels[d.kernel].name.startswith("r_")]


def test_a_concat_read_by_a_depthwise_conv_is_stored_not_selected_per_tap() -> None:
    """Regression (shufflenet_v2, 2.4x onnxruntime): three blocks of concat + channel shuffle stayed fused into
    the next depthwise conv, which then loaded every piece of every nested concat for each of its 9 taps and
    selected one. Each concat is now stored once, and every conv reads one buffer besides its weights."""
    c = 16
    (wb, bb), (wl, bl) = depthwise(c // 2), depthwise(c)
    x = np.random.default_rng(5).standard_normal((1, c, 12, 12), dtype=np.float32)

    def model(x: Tensor) -> dict[str, Tensor]:
        for _ in range(3):
            x = shuffle_block(x, lambda t: t.conv2d(Tensor(wb), Tensor(bb), padding=1, groups=c // 2).relu())
        return {"y": x.conv2d(Tensor(wl), Tensor(bl), padding=1, groups=c)}

    want = x
    for _ in range(3):
        want = shuffle_block(want, lambda t: np.maximum(depthwise_ref(t, wb), 0))
    want = depthwise_ref(want, wl)
    run = capture(model, {"x": x})
    assert max(tensor_reads(run)) == 1
    np.testing.assert_allclose(run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
    with Context(FUSION_COST=0):
        assert max(tensor_reads(capture(model, {"x": x}))) > 2  # what the regression was


def test_concat_tops_are_the_last_piece_of_each_concat() -> None:
    a, b, c = (Tensor(np.ones((1, 2, 4, 4), np.float32)) for _ in range(3))
    cat = Tensor.cat(a, b, c, dim=1)
    inner = cat.uop.src[2]
    assert fusion_cost.is_concat(cat.uop) and fusion_cost.is_concat(inner)
    many = fusion_cost.CONCAT_MIN_EVALUATIONS
    assert fusion_cost.concat_tops({cat.uop: many, inner: many}) == {cat.uop}
    assert fusion_cost.concat_tops({cat.uop: many - 1, inner: many}) == set()  # too small to be worth a kernel
