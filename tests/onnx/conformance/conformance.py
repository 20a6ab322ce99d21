"""Run the official ONNX node test cases through drivepack and compare with their expected outputs.

    python3 tests/onnx/conformance/conformance.py DIR [--only SUBSTRING] [--show-failures]

DIR is the output of ../shared/tools/gen_onnx_node_tests.py (DIR/node/<case>/...). Pass criteria are
onnx's own runner's: rtol 1e-3, atol 1e-7, exact for integral outputs. The last line also counts the passing
cases that went through host code (the ops of jit/onnx/host_ops.py, whose output shape depends on data).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def load_case(case_dir: Path) -> tuple[onnx.ModelProto, list[tuple[dict[str, np.ndarray], list[np.ndarray]]]]:
    model = onnx.load(str(case_dir / "model.onnx"))
    init_names = {t.name for t in model.graph.initializer}
    input_names = [i.name for i in model.graph.input if i.name not in init_names]
    sets = []
    for ds in sorted(case_dir.glob("test_data_set_*")):
        ins = {}
        for j, name in enumerate(input_names):
            p = ds / f"input_{j}.pb"
            if p.exists():
                t = onnx.TensorProto()
                t.ParseFromString(p.read_bytes())
                ins[name] = numpy_helper.to_array(t)
        outs = []
        for p in sorted(ds.glob("output_*.pb"), key=lambda q: int(q.stem.split("_")[1])):
            t = onnx.TensorProto()
            t.ParseFromString(p.read_bytes())
            outs.append(numpy_helper.to_array(t))
        sets.append((ins, outs))
    return model, sets


def compare(got: np.ndarray, want: np.ndarray, rtol: float = 1e-3, atol: float = 1e-7) -> str | None:
    """None when equal under onnx's runner rules, else a one-line reason."""
    if got.shape != want.shape:
        return f"shape expected {want.shape}, got {got.shape}"
    if want.dtype.kind in "iub" or want.dtype == object:
        if got.dtype != want.dtype:
            return f"dtype expected {want.dtype}, got {got.dtype}"
        return None if np.array_equal(got, want) else "integral values differ"
    if got.dtype != want.dtype:
        return f"dtype expected {want.dtype}, got {got.dtype}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        return None
    err = np.nanmax(np.abs(g - w)) if g.size else 0
    return f"values differ (max abs err {err:.3g})"


@dataclass(frozen=True)
class CaseResult:
    """How one case went: ``reason`` is None when it passes; ``host_ops`` names the op of each node that
    computed on the host (jit/onnx/host_ops.py) while its graphs were built."""

    reason: str | None
    host_ops: tuple[str, ...] = ()


def host_code_summary(results: Iterable[CaseResult]) -> str:
    """One line: how many passing cases went through host code, and through which ops."""
    passing = [r for r in results if r.reason is None]
    hosted = [r for r in passing if r.host_ops]
    by_op = Counter(op for r in hosted for op in set(r.host_ops))
    ops = ", ".join(f"{op} {n}" for op, n in sorted(by_op.items()))
    return f"{len(hosted)} of {len(passing)} passing cases ran host code" + (f" ({ops})" if ops else "")


def run_case(case_dir: Path) -> CaseResult:
    """The case's result: None as the reason if it passes, else the reason it fails (one line)."""
    from jit.onnx.loader import load_onnx
    host_ops: list[str] = []
    try:
        model, sets = load_case(case_dir)
        runner = load_onnx(model)
        for ins, outs in sets:
            result = runner(ins)
            host_ops += [h.op for h in runner.host_nodes]
            got = [result[n].numpy() for n in runner.output_names]
            for i, (g, w) in enumerate(zip(got, outs, strict=True)):
                reason = compare(g, w)
                if reason:
                    return CaseResult(f"output {i}: {reason}", tuple(host_ops))
        return CaseResult(None, tuple(host_ops))
    except Exception as e:  # noqa: BLE001 - every failure is a reason to report, not a crash
        return CaseResult(_reason(e), tuple(host_ops))


def _reason(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def run_cases(case_dirs: list[Path], device: str | None = None) -> dict[str, CaseResult]:
    """``run_case`` over many cases with every case's graph built first and all outputs realized together,
    so a target with a costly per-build overhead (PoCL: ~0.3 s per clBuildProgram) builds once per chunk.
    A case whose graph fails to build fails alone; if the joint realize fails, each case is realized alone
    to find the ones at fault."""
    from jit.frontend.tensor import Tensor
    from jit.onnx.loader import load_onnx

    reasons: dict[str, str | None] = {}
    host_ops: dict[str, list[str]] = {}
    pending: dict[str, list[tuple[list[Tensor], list[np.ndarray]]]] = {}
    for case_dir in case_dirs:
        hosted = host_ops.setdefault(case_dir.name, [])
        try:
            model, sets = load_case(case_dir)
            runner = load_onnx(model, device=device)
            runs = []
            for ins, outs in sets:
                result = runner(ins)
                hosted += [h.op for h in runner.host_nodes]
                runs.append(([result[n] for n in runner.output_names], outs))
            pending[case_dir.name] = runs
        except Exception as e:  # noqa: BLE001 - every failure is a reason to report, not a crash
            reasons[case_dir.name] = _reason(e)
    try:
        Tensor.realize_all(*(t for runs in pending.values() for got, _ in runs for t in got))
    except Exception:  # noqa: BLE001 - attributed per case below
        pass
    for name, runs in pending.items():
        reasons[name] = None
        try:
            for got, outs in runs:
                for i, (g, w) in enumerate(zip(got, outs, strict=True)):
                    if reason := compare(g.numpy(), w):
                        raise _CaseFailed(f"output {i}: {reason}")
        except _CaseFailed as e:
            reasons[name] = str(e)
        except Exception as e:  # noqa: BLE001
            reasons[name] = _reason(e)
    return {name: CaseResult(reason, tuple(host_ops[name])) for name, reason in reasons.items()}


class _CaseFailed(Exception):
    pass


def short_reason(reason: str) -> str:
    """One readable line: the list of every supported dtype is noise in a failure list."""
    return re.sub(r"expected one of \[[^\]]*\], got", "not a drivepack dtype:", reason)[:160]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--only", default=None)
    ap.add_argument("--show-failures", action="store_true")
    ap.add_argument("--write-expected", metavar="FILE", help="write the failing cases and reasons to FILE")
    args = ap.parse_args()
    cases = sorted(glob.glob(os.path.join(args.dir, "node", "*")))
    if args.only:
        cases = [c for c in cases if args.only in os.path.basename(c)]
    passed, failed, results = 0, {}, []
    start = time.time()
    for c in cases:
        results.append(run_case(Path(c)))
        reason = results[-1].reason
        if reason is None:
            passed += 1
        else:
            failed[os.path.basename(c)] = reason
    if args.show_failures:
        for name, reason in failed.items():
            print(f"{name}: {reason}")
    if args.write_expected:
        header = "# ONNX node cases expected to fail on the CPU target: '<case> # <one-line reason>'\n"
        Path(args.write_expected).write_text(header + "".join(f"{n} # {short_reason(r)}\n"
                                                              for n, r in sorted(failed.items())))
    print(f"{passed} passed, {len(failed)} failed ({time.time() - start:.0f} s); {host_code_summary(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
