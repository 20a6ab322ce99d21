"""The render cache (jit/render_cache.py): a hit gives what the codegen passes and renderer give, without running
them; any change the result depends on misses; a damaged file is a miss; captures stay the same across processes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jit.realize as realize
import jit.render_cache as rc
from jit import Context, Device, Tensor, capture
from jit.codegen.opt.options import OptOptions
from jit.ir.uop import Ops, toposort
from jit.realize import clear_compiled_kernels, compile_uops

ROOT = Path(__file__).resolve().parents[2]
X = np.arange(96, dtype=np.float32).reshape(8, 12) / 7
A, B = np.ones((64, 96), np.float32) / 3, np.ones((96, 128), np.float32) / 5


def _kernels(scale: float = 3.0, opts: bool = False) -> list[realize.CompiledKernel]:
    x = Tensor(X)
    y = ((x * scale).exp().sum(axis=1) + 1).relu() if not opts else (Tensor(A) @ Tensor(B)).relu()
    return compile_uops([y.uop], "CPU")


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("render-*.json"))


def _no_rewrite(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the codegen passes ran on a cache hit")
    monkeypatch.setattr(realize, "rewrite_kernel", boom)


def _same(a: list[realize.CompiledKernel], b: list[realize.CompiledKernel]) -> None:
    assert [k.name for k in a] == [k.name for k in b]
    assert [k.program.source for k in a] == [k.program.source for k in b]
    assert [k.program.meta.get("global_size") for k in a] == [k.program.meta.get("global_size") for k in b]
    assert [k.program.meta.get("parallel") for k in a] == [k.program.meta.get("parallel") for k in b]
    assert [k.stats for k in a] == [k.stats for k in b]
    assert [k.dtype_policy for k in a] == [k.dtype_policy for k in b]


def test_hit_gives_the_same_kernels_without_the_passes(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = _kernels()
    assert len(_entries(cache)) == len(cold)
    lowered = [k.lowered for k in cold]
    clear_compiled_kernels()
    with monkeypatch.context() as m:
        _no_rewrite(m)
        warm = _kernels()
    _same(cold, warm)
    # the graph is rebuilt on demand, equal to the one rendered (hash-consed: the same object)
    assert [k.lowered for k in warm] == lowered


def test_hit_result_runs(cache: Path) -> None:
    want = np.maximum(np.exp(X * 3.0).sum(axis=1) + 1, 0)
    got = ((Tensor(X) * 3.0).exp().sum(axis=1) + 1).relu().numpy()
    clear_compiled_kernels()
    again = ((Tensor(X) * 3.0).exp().sum(axis=1) + 1).relu().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(got, again)


def test_changed_graph_misses(cache: Path) -> None:
    _kernels(3.0)
    n = len(_entries(cache))
    clear_compiled_kernels()
    _kernels(4.0)
    assert len(_entries(cache)) > n


def test_changed_settings_miss(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = _kernels(opts=True)
    n = len(_entries(cache))
    clear_compiled_kernels()
    with Context(NOOPT=1):
        plain = _kernels(opts=True)
    assert len(_entries(cache)) == n + len(plain)
    assert [k.program.source for k in plain] != [k.program.source for k in cold]


def test_changed_target_defaults_miss(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = Device["CPU"]
    before = rc.target_fingerprint(target)
    ast = compile_uops([(Tensor(X) + 1).uop], "CPU")[-1].ast
    key = rc.entry_key(ast, target, "s")
    monkeypatch.setattr(target, "default_opts", OptOptions(unroll=False), raising=False)
    assert rc.target_fingerprint(target) != before
    assert rc.entry_key(ast, target, "s") != key
    monkeypatch.undo()
    assert rc.entry_key(ast, target, "s") == key
    assert rc.entry_key(ast, target, "t") != key  # settings are part of the key


def test_a_hits_lowered_graph_is_rebuilt_with_the_defaults_it_was_compiled_under(cache: Path) -> None:
    """Regression: a kernel served by the cache rebuilt ``lowered`` with the target's defaults of the moment it was
    first read, not of its compile, so a kernel compiled under changed defaults showed a graph without their
    steps (tests/codegen/test_opt_finish.py failed with a warm cache)."""
    target = Device["CPU"]
    hinted = dataclasses.replace(getattr(target, "default_opts", OptOptions()), unroll_hints=True)

    def marked(k: realize.CompiledKernel) -> bool:
        return any(u.op is Ops.RANGE and u.arg[2:] == ("unroll",) for u in toposort([k.lowered]))

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 8, 16, 16), dtype=np.float32), rng.standard_normal((8, 8, 3, 3), np.float32)

    def conv() -> list[realize.CompiledKernel]:
        return compile_uops([Tensor(x).conv2d(Tensor(w), stride=2, padding=1).relu().uop], "CPU")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(target, "default_opts", hinted, raising=False)
        want = [marked(k) for k in conv()]  # a miss: stored
        clear_compiled_kernels()
        hits = conv()  # a hit: no graph until asked
    assert any(want) and all(k.lowered_sink is None for k in hits)
    assert [marked(k) for k in hits] == want  # asked after the defaults went back


def test_a_hits_lowered_graph_that_comes_out_otherwise_is_an_error(cache: Path) -> None:
    _kernels()
    clear_compiled_kernels()
    (k, *_) = _kernels()
    k.sink_key = "0" * 64
    with pytest.raises(realize.CompileError, match="lowered graph expected"):
        _ = k.lowered


def test_corrupt_file_is_a_miss_and_replaced(cache: Path) -> None:
    cold = _kernels()
    for path in _entries(cache):
        path.write_text('{"format": 1, "source": 12')
    clear_compiled_kernels()
    warm = _kernels()
    _same(cold, warm)
    for path in _entries(cache):  # rewritten whole by the recompile
        assert rc.decode(path.read_text(), path.stem.removeprefix("render-")).source.count(rc.NAME_SLOT) == 1


@pytest.mark.parametrize("damage", [
    lambda d: d.update(format=99),
    lambda d: d.pop("key"),
    lambda d: d.pop("stats"),
    lambda d: d.update(source=d["source"].replace(rc.NAME_SLOT, "k")),
    lambda d: d["stats"].update(flops="1"),
    lambda d: d["policy"].update(native=["notadtype"]),
    lambda d: d.update(meta=[1, 2]),
])
def test_damaged_entry_is_refused(cache: Path, damage: object) -> None:
    _kernels()
    path = _entries(cache)[0]
    doc = json.loads(path.read_text())
    damage(doc)  # type: ignore[operator]
    text = json.dumps(doc)
    key = path.stem.removeprefix("render-")
    with pytest.raises(rc.RenderCacheError):
        rc.decode(text, key)
    path.write_text(text)
    assert rc.load(key) is None


def test_not_json_is_refused() -> None:
    with pytest.raises(rc.RenderCacheError, match="not JSON"):
        rc.decode("\x00garbage", "k")


def test_entry_of_another_key_is_refused(cache: Path) -> None:
    _kernels()
    _kernels(opts=True)
    a, b = _entries(cache)[:2]
    key_b = b.stem.removeprefix("render-")
    b.write_text(a.read_text())  # a file copied or renamed over another key's
    with pytest.raises(rc.RenderCacheError, match="expected"):
        rc.decode(b.read_text(), key_b)
    assert rc.load(key_b) is None


def test_disabled_writes_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rc.ENV, "0")
    _kernels()
    assert not _entries(cache)


def test_meta_reads_back_as_tuples(cache: Path) -> None:
    cold = _kernels()
    clear_compiled_kernels()
    warm = _kernels()
    for a, b in zip(cold, warm, strict=True):
        for k in ("global_size", "local_size", "parallel"):
            assert type(a.program.meta.get(k)) is type(b.program.meta.get(k))
            assert a.program.meta.get(k) == b.program.meta.get(k)


def test_store_refuses_a_name_it_cannot_put_back(cache: Path) -> None:
    ck = _kernels()[-1]
    # a compiled program's meta holds the loaded library too: no entry can hold that
    assert not rc.store("k" * 64, ck.name, ck.program.source, ck.program.meta, ck.stats, ck.dtype_policy, ck.lowered)
    meta = {k: v for k, v in ck.program.meta.items() if k in ("global_size", "local_size", "parallel")}
    args = (meta, ck.stats, ck.dtype_policy, ck.lowered)
    assert not rc.store("k" * 64, "absent_name", ck.program.source, *args)
    assert not rc.store("k" * 64, ck.name, ck.program.source + f"\n// {ck.name}(", *args)
    assert rc.store("k" * 64, ck.name, ck.program.source, *args)
    entry = rc.load("k" * 64)
    assert entry is not None and entry.source_for(ck.name) == ck.program.source
    assert dataclasses.replace(entry, source="") != entry


_CAPTURE = """
import json, sys
import numpy as np
from jit import Tensor, capture
def model(x):
    h = (x.reshape(1, 3, 8, 8).conv2d(Tensor(np.linspace(-1, 1, 108, dtype=np.float32).reshape(4, 3, 3, 3)),
         padding=1).relu() * 0.5).sum(axis=(2, 3))
    return {"y": (h.exp() + 1).log()}
x = np.linspace(0, 1, 192, dtype=np.float32).reshape(1, 192)
run = capture(model, {"x": x}, target="CPU")
print(json.dumps({"kernels": [[k.name, k.source] for k in run.cmdbuf.kernels],
                  "dispatches": [repr(d) for d in run.cmdbuf.dispatches],
                  "y": run({"x": x})["y"].tobytes().hex()}))
"""


def test_capture_is_identical_across_processes_cold_and_warm(tmp_path: Path) -> None:
    env = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop(rc.ENV, None)
    runs = [subprocess.run([sys.executable, "-c", _CAPTURE], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    cold, warm = (json.loads(r.stdout) for r in runs)
    assert _entries(tmp_path)
    assert cold == warm
    off = subprocess.run([sys.executable, "-c", _CAPTURE], env={**env, rc.ENV: "0"}, capture_output=True,
                         text=True, check=True)
    assert json.loads(off.stdout) == cold


_CAPTURE_AFTER = """
import json, sys
import numpy as np
from jit import Tensor, capture
def model(x, scale=1.0):
    w = Tensor(np.linspace(-1, 1, 108, dtype=np.float32).reshape(4, 3, 3, 3))
    return {"y": (x.reshape(1, 3, 8, 8).conv2d(w, padding=1).relu() * scale).sum(axis=(2, 3))}
x = np.linspace(0, 1, 192, dtype=np.float32).reshape(1, 192)
for what in sys.argv[1:]:  # TARGET, or TARGET:other for the same model with its conv's epilogue scaled
    target, _, other = what.partition(":")
    run = capture(lambda x: model(x, 2.0 if other else 1.0), {"x": x}, target=target)
print(json.dumps([k.source for k in run.cmdbuf.kernels]))
"""


@pytest.mark.parametrize("before", [["CPU"], ["OPENCL:other"], ["CPU:other", "OPENCL:other"]])
def test_a_capture_names_its_kernels_as_a_fresh_process_does(tmp_path: Path, before: list[str]) -> None:
    """A process that captured other models (or for another target) first names an OPENCL capture's kernels as a
    fresh process does: names are in the source, which the OpenCL driver's cache and drivepack's are keyed by."""
    env = {**os.environ, "DRIVEPACK_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    alone, after = (json.loads(subprocess.run([sys.executable, "-c", _CAPTURE_AFTER, *captures], env=env,
                                              capture_output=True, text=True, check=True).stdout)
                    for captures in (["OPENCL"], [*before, "OPENCL"]))
    assert alone == after


def test_capture_in_process_hits(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def model(x: Tensor) -> dict[str, Tensor]:
        return {"y": (x * 2).exp().sum(axis=1)}
    x = X.copy()
    first = capture(model, {"x": x}, target="CPU")
    clear_compiled_kernels()
    with monkeypatch.context() as m:
        _no_rewrite(m)
        second = capture(model, {"x": x}, target="CPU")
    assert [k.source for k in first.cmdbuf.kernels] == [k.source for k in second.cmdbuf.kernels]
    np.testing.assert_array_equal(first({"x": x})["y"], second({"x": x})["y"])


def test_no_store_once_the_sources_changed(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert rc.sources_unchanged()  # the fixture's: taken at infinity
    # as if every compiler module had been imported after the fingerprint, from files edited since
    monkeypatch.setattr(rc, "_FINGERPRINT", (rc.compiler_fingerprint(), 0.0, frozenset()))
    assert not rc.sources_unchanged()
    # modules loaded before the fingerprint run the bytes it describes, whatever their files say now
    monkeypatch.setattr(rc, "_FINGERPRINT", (rc.compiler_fingerprint(), 0.0, frozenset(sys.modules)))
    assert rc.sources_unchanged()
    monkeypatch.setattr(rc, "_FINGERPRINT", (rc.compiler_fingerprint(), 0.0, frozenset()))
    first = _kernels()
    assert not _entries(cache)
    clear_compiled_kernels()
    _same(first, _kernels())


def test_opencl_hit(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = Device["OPENCL"]  # CI installs PoCL: an OpenCL test runs, never skips
    key = rc.target_fingerprint(target)
    cold = compile_uops([(Tensor(X, device="OPENCL") * 2).exp().uop], "OPENCL")
    assert rc.target_fingerprint(target) == key  # live buffers and builds are no part of it
    clear_compiled_kernels()
    with monkeypatch.context() as m:
        _no_rewrite(m)
        warm = compile_uops([(Tensor(X, device="OPENCL") * 2).exp().uop], "OPENCL")
    _same(cold, warm)
    assert [k.program.meta.get("local_size") for k in cold] == [k.program.meta.get("local_size") for k in warm]


# --- planning answers (``cached_answer``) -------------------------------------------------------------------------

def _answers(folder: Path) -> list[Path]:
    return sorted(folder.glob("answer-*.json"))


def _conv_graph() -> object:
    """A 1x1 conv over 14-wide rows (tiled across its 64 output channels) and the value it feeds."""
    rng = np.random.default_rng(5)
    x, w1 = rng.standard_normal((1, 32, 14, 14), np.float32), rng.standard_normal((64, 32, 1, 1), np.float32)
    w2 = rng.standard_normal((32, 64, 1, 1), np.float32)
    return Tensor(x).conv2d(Tensor(w1)).relu().conv2d(Tensor(w2))


def _layouts(out: Tensor) -> list:
    """The (N, H, W, C) shapes of the channels-last views a schedule of ``out`` stores values through."""
    from jit.schedule.kernels import create_schedule
    _, becomes = create_schedule([out.uop], "CPU")
    return [v.src[0].src[0].shape for v in becomes.values() if v.op is Ops.RESHAPE and v.src[0].op is Ops.PERMUTE]


def test_a_planning_answer_is_read_back_without_planning(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jit.schedule.channels_last as channels_last
    out = _conv_graph()
    cold = _layouts(out)
    assert cold == [(14, 14, 64)] and _answers(cache), "the scheduler's planning answers were not stored"

    def boom(*args: object) -> bool:
        raise AssertionError("planned again on a cache hit")
    monkeypatch.setattr(channels_last, "_plans_channel_tiles", boom)
    assert _layouts(out) == cold


def test_an_answer_is_keyed_by_question_and_graph(cache: Path) -> None:
    a, b = (_kernels(scale=s)[0].ast for s in (2.0, 3.0))
    target = Device["CPU"]
    assert rc.cached_answer("q1", a, target, lambda: True) is True
    assert rc.cached_answer("q1", a, target, lambda: False) is True  # read back
    assert rc.cached_answer("q2", a, target, lambda: False) is False  # another question
    assert rc.cached_answer("q1", b, target, lambda: False) is False  # another graph
    assert len(_answers(cache)) == 3


@pytest.mark.parametrize("text", ['{"format": 1, "answer": tru', '{"format": 1, "key": "x", "answer": true}',
                                  '{"format": 99, "key": "@", "answer": true}',
                                  '{"format": 1, "key": "@", "answer": 1}', "\udcff"])
def test_a_damaged_answer_is_a_miss_and_replaced(cache: Path, text: str) -> None:
    ast = _kernels()[0].ast
    target = Device["CPU"]
    assert rc.cached_answer("q", ast, target, lambda: False) is False
    (path,) = _answers(cache)
    key = path.stem.removeprefix("answer-")
    path.write_text(text.replace("@", key), errors="surrogateescape")
    assert rc.cached_answer("q", ast, target, lambda: False) is False
    assert json.loads(path.read_text()) == {"format": rc.FORMAT, "key": key, "answer": False}


def test_answers_are_not_kept_when_the_cache_is_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rc.ENV, "0")
    ast = _kernels()[0].ast
    asked = []
    for _ in range(2):
        rc.cached_answer("q", ast, Device["CPU"], lambda: asked.append(1) or True)
    assert len(asked) == 2 and not _answers(cache)
