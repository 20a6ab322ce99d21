"""The fusion cost model (jit/schedule/fusion_cost.py) on and off, against onnxruntime, in one run.

    python3 benchmarks/bench_fusion.py [--repeat N] [--kernels]

Models (built with onnx.helper, seeded weights):

* ``gelu_conv``: the exact GELU ``Div -> Erf -> Add -> Mul -> Mul`` feeding a 1x1 conv, 1x256x32x32 -> 256
  channels (with the model off the conv recomputes 16 ``erff`` per reduce step, once per block of 4 channels);
* ``attention``: one self-attention block at 25 tokens, d 256, 4 heads (Q, K, V projections, Q.K^T,
  Softmax, P.V);
* ``softmax_pv``: softmax over given scores feeding the P.V matmul (4 heads, 25 tokens, head dim 64): the shape
  where the model off recomputes exp inside the matmul.

Each is captured (jit/trace.py) with ``FUSION_COST=1`` and ``FUSION_COST=0``, both outputs checked against
onnxruntime, and the three (drivepack on, drivepack off, onnxruntime with 2 intra-op threads) timed in
alternating blocks of calls in one process (``interleaved_medians``: median of ``--repeat`` calls each after 3
warm-up calls, numpy in, numpy out). Printed per model: kernels, milliseconds, on / off and on / onnxruntime
(lower is better), and GFLOP/s of the model's multiply-adds (2 per MAC; GELU and softmax not counted).
``--kernels``: each variant's dispatches, the fastest of 5 one-at-a-time profiles.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from jit.common.helpers import Context
from jit.onnx.loader import load_onnx
from jit.trace import Captured, capture_onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import interleaved_medians  # noqa: E402

ORT_THREADS = 2


def _model(name: str, nodes: list, inputs: dict[str, list[int]], output: list[int],
           inits: dict[str, np.ndarray]) -> ModelProto:
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def gelu_conv(c: int = 256, cout: int = 256, hw: int = 32) -> tuple[ModelProto, dict[str, list[int]], float]:
    rng = np.random.default_rng(0)
    inits = {"w": (rng.standard_normal((cout, c, 1, 1)) * (2 / c) ** 0.5).astype(np.float32),
             "b": (0.1 * rng.standard_normal(cout)).astype(np.float32),
             "sqrt2": np.array(2 ** 0.5, np.float32), "one": np.array(1, np.float32),
             "half": np.array(0.5, np.float32)}
    n = helper.make_node
    nodes = [n("Div", ["x", "sqrt2"], ["d"]), n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["a"]),
             n("Mul", ["x", "a"], ["m"]), n("Mul", ["m", "half"], ["g"]),
             n("Conv", ["g", "w", "b"], ["y"], kernel_shape=[1, 1])]
    inputs = {"x": [1, c, hw, hw]}
    return _model("gelu_conv", nodes, inputs, [1, cout, hw, hw], inits), inputs, 2 * c * cout * hw * hw / 1e9


def attention(tokens: int = 25, d: int = 256, heads: int = 4) -> tuple[ModelProto, dict[str, list[int]], float]:
    rng = np.random.default_rng(0)
    hd = d // heads
    inits = {k: (rng.standard_normal((d, d)) / d ** 0.5).astype(np.float32) for k in ("wq", "wk", "wv")}
    inits |= {"split": np.array([1, tokens, heads, hd], np.int64), "merge": np.array([1, tokens, d], np.int64),
              "scale": np.array(1 / hd ** 0.5, np.float32)}
    n = helper.make_node
    nodes = [n("MatMul", ["x", "wq"], ["q0"]), n("MatMul", ["x", "wk"], ["k0"]), n("MatMul", ["x", "wv"], ["v0"]),
             n("Reshape", ["q0", "split"], ["q1"]), n("Reshape", ["k0", "split"], ["k1"]),
             n("Reshape", ["v0", "split"], ["v1"]), n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
             n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]), n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
             n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s"]),
             n("Softmax", ["s"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o0"]),
             n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "merge"], ["y"])]
    inputs = {"x": [1, tokens, d]}
    gflop = 2 * (3 * tokens * d * d + 2 * heads * tokens * tokens * hd) / 1e9
    return _model("attention", nodes, inputs, [1, tokens, d], inits), inputs, gflop


def softmax_pv(tokens: int = 25, hd: int = 64, heads: int = 4) -> tuple[ModelProto, dict[str, list[int]], float]:
    rng = np.random.default_rng(0)
    inits = {"v": rng.standard_normal((heads, tokens, hd)).astype(np.float32)}
    nodes = [helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = {"s": [heads, tokens, tokens]}
    return (_model("softmax_pv", nodes, inputs, [heads, tokens, hd], inits), inputs,
            2 * heads * tokens * tokens * hd / 1e9)


MODELS: dict[str, Callable[[], tuple[ModelProto, dict[str, list[int]], float]]] = {
    "gelu_conv": gelu_conv, "attention": attention, "softmax_pv": softmax_pv}


def ort_session(model: ModelProto) -> object:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ORT_THREADS
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def dispatch_times(run: Captured, feed: dict[str, np.ndarray], profiles: int = 5) -> list[tuple[str, float]]:
    profs = [run.profile(feed) for _ in range(profiles)]
    return [(d.kernel, min(p[i].seconds for p in profs)) for i, d in enumerate(profs[0])]


def bench(name: str, repeat: int, kernels: bool) -> list[str]:
    """The printed row (and with ``kernels`` the dispatch rows) of one model."""
    model, inputs, gflop = MODELS[name]()
    rng = np.random.default_rng(1)
    feed = {k: rng.standard_normal(s, dtype=np.float32) for k, s in inputs.items()}
    runs = {}
    for mode in (1, 0):
        with Context(FUSION_COST=mode):
            runs[mode] = capture_onnx(load_onnx(model), feed)
    sess = ort_session(model)
    want = sess.run(None, feed)[0]  # type: ignore[attr-defined]
    for mode, run in runs.items():
        err = float(np.abs(run(feed)["y"] - want).max() / max(1e-30, float(np.abs(want).max())))
        if err > 1e-5:
            raise SystemExit(f"{name}: FUSION_COST={mode}: max error {err:.2e} of the output's range, expected "
                             "<= 1e-5")
    t = interleaved_medians({"on": lambda: runs[1](feed), "off": lambda: runs[0](feed),
                             "ort": lambda: sess.run(None, feed)},  # type: ignore[attr-defined]
                            repeat, warmup=3)
    rows = [f"{name:<11} {f'{runs[1].n_dispatches}/{runs[0].n_dispatches}':>14} {t['on'] * 1e3:>8.3f} "
            f"{t['off'] * 1e3:>8.3f} {t['ort'] * 1e3:>8.3f} {t['on'] / t['off']:>7.2f} {t['on'] / t['ort']:>7.2f} "
            f"{gflop / t['on']:>8.1f} {gflop / t['off']:>9.1f} {gflop / t['ort']:>9.1f}"]
    if kernels:
        for mode, label in ((1, "on "), (0, "off")):
            cells = [f"{k} {s * 1e3:.3f} ms" for k, s in dispatch_times(runs[mode], feed)]
            rows.append(f"    {label}: " + ", ".join(cells))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--kernels", action="store_true", help="print each variant's dispatches, timed alone")
    args = parser.parse_args()
    print(f"{'model':<11} {'kernels on/off':>14} {'on ms':>8} {'off ms':>8} {'ort ms':>8} {'on/off':>7} "
          f"{'on/ort':>7} {'on GF/s':>8} {'off GF/s':>9} {'ort GF/s':>9}")
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"--models: expected names from {', '.join(MODELS)}, got {name!r}")
        for row in bench(name, args.repeat, args.kernels):
            print(row, flush=True)


if __name__ == "__main__":
    main()
