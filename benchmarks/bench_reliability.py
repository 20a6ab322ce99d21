"""Reliability table: crafted packages, ONNX files and vehicle profiles, each loaded (and replayed) in a child process.

    python3 benchmarks/bench_reliability.py [--seed N] [--quick] [--json]

Builds ``packager.synthetic.tiny_model`` for pc-cpu in a temporary directory whose ``DRIVEPACK_CONFIG_DIR`` holds a
signing key made for this run, then writes probes: bit flips per section kind, truncations, appended bytes,
structural edits written back with valid checksums and re-signed by that (trusted) key, crafted kernel flags,
entry names and kernel sources (also re-signed: what refuses them is the check under test, not the signature),
unsigned packages and packages signed by a key not trusted here, bad ONNX files and bad vehicle profiles.

Every probe runs in a child process, so a signal or a hang is counted, never kills this script. One child loads a
batch of probes in turn (a child that dies is replaced and the probe it was on counted as crashed); each probe
that loads is then replayed in a child of its own on the original package's golden inputs. Outcomes:

* refused: a DrivepackError (typed, one line) from the load or the replay build;
* accepted: loaded and replayed with outputs bit-equal to the untouched package's (for ONNX files and vehicle
  profiles, which have no replay: loaded without an error);
* accepted, wrong: replayed with other outputs, or a probe whose planted shell command ran;
* crashed: a signal, a timeout, or any exception that is not a DrivepackError.

Seeded: the same ``--seed`` tries the same probes. ``--quick`` tries fewer of each random class.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUTCOMES = ("refused", "accepted", "accepted, wrong", "crashed")
LOAD_TIMEOUT_S, REPLAY_TIMEOUT_S = 2.0, 60.0  # per probe; a load is Python checks only
EDGE_VALUES: list[Any] = [-1, 0, 1, 3, 63, 64, 65, 128, 1 << 31, 1 << 40, 1 << 64, "", "weight:0", "input:frame",
                          "input:x", "output:outputs", "arena:0+128", "arena:64+128", "arena:0+64", "float16", None,
                          [], {}, 1.5, True]


@dataclass
class Probe:
    """One crafted file and how to open it: ``kind`` is package, onnx or vehicle."""

    cls: str
    name: str
    kind: str
    path: str
    trust: list[str] = field(default_factory=list)
    allow_unsigned: bool = False
    sentinel: str | None = None  # a file the probe's planted shell command would create


@dataclass
class Result:
    outcome: str
    detail: str = ""


# --- the child side -------------------------------------------------------------------------------------------

def _load_one(p: Probe) -> Result:
    """Load ``p`` in this process: "loaded" (a package, still to replay), or a final outcome."""
    from jit.common.errors import DrivepackError
    try:
        if p.kind == "package":
            from packager.package import load_package
            load_package(p.path, trust=p.trust, allow_unsigned=p.allow_unsigned)
            return Result("loaded")
        if p.kind == "onnx":
            from jit.onnx.loader import load_onnx
            from jit.onnx.validate import checked_model
            load_onnx(p.path)
            checked_model(Path(p.path).read_bytes(), p.path)  # what packaging reads the model with
        else:
            from abi.vehicle import load_vehicle
            load_vehicle(p.path)
        return Result("accepted")
    except DrivepackError as e:
        return _refused(e)
    except Exception as e:  # noqa: BLE001 - any other exception is exactly what is counted here
        return Result("crashed", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")


def _refused(e: Exception) -> Result:
    msg = str(e)
    return Result("refused", ("MULTI-LINE " if "\n" in msg else "") + f"{type(e).__name__}: {msg[:200]}")


def _replay_one(p: Probe, original: str) -> Result:
    """Replay ``p`` on the original package's golden inputs and compare with the original's replay, bit for bit."""
    import numpy as np

    from jit.common.errors import DrivepackError
    from packager.package import load_package
    orig = load_package(original)
    inputs = {k: np.array(v) for k, v in orig.golden(0).inputs.items()}
    want = orig.make_replay()(inputs)
    try:
        pkg = load_package(p.path, trust=p.trust, allow_unsigned=p.allow_unsigned)
        got = pkg.make_replay()(inputs)
    except DrivepackError as e:
        return _refused(e)
    except Exception as e:  # noqa: BLE001
        return Result("crashed", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
    same = set(got) == set(want) and all(
        np.asarray(got[k]).dtype == want[k].dtype and np.asarray(got[k]).shape == want[k].shape
        and np.asarray(got[k]).tobytes() == want[k].tobytes() for k in want)
    return Result("accepted") if same else Result("accepted, wrong", "outputs differ from the original's")


def child_main(stage: str, original: str) -> None:
    """Read probes (JSON) on stdin, print one JSON result line per probe, flushed, in order."""
    for i, d in enumerate(json.load(sys.stdin)):
        p = Probe(**d)
        r = _load_one(p) if stage == "load" else _replay_one(p, original)
        print(json.dumps({"i": i, **asdict(r)}), flush=True)


# --- the parent side ------------------------------------------------------------------------------------------

def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def run_in_children(stage: str, probes: list[Probe], original: str = "", batch: int = 1000,
                    per_probe_s: float = LOAD_TIMEOUT_S, base_s: float = 10.0) -> list[Result]:
    """Each probe's result from child processes of ``batch`` probes each; a child that dies or hangs is replaced
    and the probe it was on counted as crashed. A child that exits 0 short of a result (not a signal, nothing on
    stderr: seen once on a loaded machine) gets its probe tried once more, in a new child, before it counts (a
    note on stderr says so)."""
    results: list[Result | None] = [None] * len(probes)
    todo, retried = list(range(len(probes))), set()
    while todo:
        chunk, todo = todo[:batch], todo[batch:]
        while chunk:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, "--original", original]
            why = ""
            try:
                proc = subprocess.run(cmd, input=json.dumps([asdict(probes[i]) for i in chunk]), cwd=ROOT,
                                      capture_output=True, text=True, timeout=base_s + per_probe_s * len(chunk))
                out, rc = proc.stdout, proc.returncode
                why = f"signal {-rc}" if rc < 0 else f"exit {rc}: {proc.stderr.strip()[-200:]}"
            except subprocess.TimeoutExpired as e:
                out, rc, why = _text(e.stdout), None, "timeout"
            done = 0
            for line in out.splitlines():
                d = json.loads(line)
                results[chunk[d["i"]]] = Result(d["outcome"], d["detail"])
                done = d["i"] + 1
            if done < len(chunk) and rc == 0 and chunk[done] not in retried:
                retried.add(chunk[done])
                print(f"note: {probes[chunk[done]].name!r}: child exited 0 without its result; tried again",
                      file=sys.stderr)
                todo, chunk = [chunk[done], *chunk[done + 1:], *todo], []
            elif done < len(chunk):
                results[chunk[done]] = Result("crashed", f"{why} (stdout: {out.strip()[-100:]!r})")
                chunk = chunk[done + 1:]
            else:
                chunk = []
    return [r if r is not None else Result("crashed", "no result") for r in results]


# --- building probes --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def workspace(folder: Path) -> Iterator[None]:
    """This run's own config directory (its signing key), kernel cache and no trusted-key list from outside."""
    saved = {k: os.environ.get(k) for k in ("DRIVEPACK_CONFIG_DIR", "DRIVEPACK_CACHE", "DRIVEPACK_TRUST")}
    os.environ["DRIVEPACK_CONFIG_DIR"] = str(folder / "config")
    os.environ["DRIVEPACK_CACHE"] = str(folder / "cache")
    os.environ.pop("DRIVEPACK_TRUST", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build_tiny(folder: Path) -> Path:
    """The untouched package, signed by this run's user key (made now; its one-time note is not printed)."""
    import onnx

    from packager.build import BuildOptions, build_package
    from packager.signing import user_signing_key
    from packager.synthetic import tiny_model
    with contextlib.redirect_stderr(open(os.devnull, "w")):  # noqa: SIM115 - closed with the process
        user_signing_key()
    onnx.save(tiny_model(), str(folder / "tiny.onnx"))
    build_package(folder / "tiny.onnx", "pc-cpu", folder / "tiny.dpk", BuildOptions(golden_sets=1))
    return folder / "tiny.dpk"


def _sections(src: Path) -> tuple[dict[str, Any], list[Any], int]:
    from packager.container import Section, open_container
    c = open_container(src)
    manifest = copy.deepcopy(c.manifest)
    entries, align = manifest.pop("sections"), manifest.pop("section_alignment")
    keys = ("name", "kind", "offset", "size", "sha256")
    return manifest, [Section(e["name"], e["kind"], bytes(c.view(e["name"])),
                              {k: v for k, v in e.items() if k not in keys}) for e in entries], align


def rewrite(src: Path, dst: Path, manifest: Callable[[dict[str, Any]], Any] | None = None,
            cmdbuf: Callable[[dict[str, Any]], Any] | None = None, kernel0: Callable[[str], str] | None = None,
            sign: Callable[[bytes], tuple[bytes, bytes]] | None | str = "user") -> Path:
    """``src`` edited and written back through the real writer: checksums valid, signed by the user's key
    (``sign="user"``), another signer, or unsigned (None)."""
    from packager.container import Section, canonical_json, write_container
    from packager.signing import user_signing_key
    doc, secs, align = _sections(src)
    if manifest is not None:
        manifest(doc)
    out = []
    for s in secs:
        data = s.data
        if s.kind == "cmdbuf" and cmdbuf is not None:
            cb = json.loads(data)
            cmdbuf(cb)
            data = canonical_json(cb)
        if s.name.endswith("/kernel/0") and kernel0 is not None:  # the first entry's first kernel
            data = kernel0(data.decode()).encode()
        out.append(Section(s.name, s.kind, data, s.attrs))
    write_container(dst, doc, out, align, sign=user_signing_key().sign if sign == "user" else sign)
    return dst


def set_field(path: tuple[Any, ...], value: Any) -> Callable[[Any], None]:
    """An edit setting the field at ``path`` of a plain-data document to ``value``."""
    def edit(doc: Any) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value
    return edit


def _leaves(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*prefix, k))]
    if isinstance(doc, list) and doc:
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*prefix, i))]
    return [prefix]


FLIP_ROWS = {"header": "header", "manifest": "manifest", "cmdbuf": "command buffer", "kernel_source": "kernel source",
             "weight": "weights", "golden_input": "golden", "golden_reference": "golden", "golden_target": "golden",
             "signature": "signature trailer"}

NAMED_EDITS: list[tuple[str, tuple[Any, ...], Any]] = [
    ("manifest", ("format_version",), 2), ("manifest", ("format_version",), 4),
    ("manifest", ("entries", 0, "arena_bytes"), 1 << 40),
    ("manifest", ("entries", 0, "kernels", "list", 0, "section"), "tiny/kernel/1"),
    ("manifest", ("entries", 0, "golden", "sets"), 2),
    ("manifest", ("entries", 0, "abi", "inputs", 1, "dtype"), "float16"),
    ("manifest", ("entries", 0, "abi", "outputs", 0, "shape"), [1, 32]),
    ("cmdbuf", ("version",), 2), ("cmdbuf", ("arena_bytes",), 1 << 40), ("cmdbuf", ("arena_bytes",), 192),
    ("cmdbuf", ("alignment",), 48), ("cmdbuf", ("dispatches", 0, "kernel"), 2),
    ("cmdbuf", ("dispatches", 0, "bindings", 0), "weight:0"), ("cmdbuf", ("dispatches", 0, "bindings", 0), "input:x"),
    ("cmdbuf", ("dispatches", 0, "bindings", 1), "weight:9"), ("cmdbuf", ("dispatches", 0, "global_size"), [1 << 40]),
    ("cmdbuf", ("dispatches", 0, "bindings", 2), "input:x"),  # 64 bytes where the kernel reads 16 KB
    ("cmdbuf", ("buffers", 3, "nbytes"), 16380), ("cmdbuf", ("buffers", 3, "shape"), [1 << 40]),
    ("cmdbuf", ("buffers", 7, "binding"), "arena:64+128"), ("cmdbuf", ("buffers", 2, "dtype"), "float16"),
]


def package_probes(src: Path, out: Path, rng: random.Random, quick: bool) -> list[Probe]:
    """Every package probe, written under ``out``."""
    from packager.container import HEADER_SIZE, SIGNATURE_SIZE, open_container
    from packager.signing import generate_key, public_path, user_signing_key
    raw, probes = src.read_bytes(), []
    n_flips, n_random = (8, 20) if quick else (60, 200)

    def add(cls: str, name: str, path: Path, **kw: Any) -> None:
        probes.append(Probe(cls, name, "package", str(path), **kw))

    add("untouched package (control)", "original", src)
    add("untouched package (control)", "rewritten", rewrite(src, out / "same.dpk"))
    c = open_container(src)
    m_end = HEADER_SIZE + int.from_bytes(raw[24:32], "little")
    regions = [("header", 0, HEADER_SIZE), ("manifest", HEADER_SIZE, m_end),
               ("signature", len(raw) - SIGNATURE_SIZE, len(raw))]
    regions += [(e["kind"], e["offset"], e["offset"] + e["size"]) for e in c.manifest["sections"] if e["size"]]
    for row in dict.fromkeys(FLIP_ROWS.values()):
        mine = [r for r in regions if FLIP_ROWS[r[0]] == row]
        for k in range(n_flips):
            _, lo, hi = rng.choice(mine)
            pos, bit = rng.randrange(lo, hi), rng.randrange(8)
            data = bytearray(raw)
            data[pos] ^= 1 << bit
            path = out / f"flip_{row.replace(' ', '_')}_{k}.dpk"
            path.write_bytes(bytes(data))
            add(f"bit flip: {row}", f"byte {pos} bit {bit}", path)
    cuts = sorted({rng.randrange(len(raw)) for _ in range(n_flips)} | {0, 63, 64, len(raw) - 1, len(raw) - 128}
                  | {lo for _, lo, _ in regions})
    for n in cuts:
        (out / f"cut_{n}.dpk").write_bytes(raw[:n])
        add("truncation", f"first {n} bytes", out / f"cut_{n}.dpk")
    for k, tail in enumerate((b"\0", b"\1", b"\0" * 64, b"\0" * SIGNATURE_SIZE, raw[-SIGNATURE_SIZE:], raw[:4096])):
        (out / f"tail_{k}.dpk").write_bytes(raw + tail)
        add("appended bytes", f"+{len(tail)} bytes", out / f"tail_{k}.dpk")
    edits = [(w, p, v) for w, p, v in NAMED_EDITS]
    cb_doc = json.loads(bytes(c.view(next(e["name"] for e in c.manifest["sections"] if e["kind"] == "cmdbuf"))))
    cb_leaves = [p for p in _leaves(cb_doc) if p[0] in ("arena_bytes", "alignment", "dispatches", "buffers",
                                                        "version")]
    m_leaves = [p for p in _leaves(_sections(src)[0]) if p[0] == "format_version" or
                (p[0] == "entries" and p[2] in ("arena_bytes", "kernels", "golden", "abi"))]
    for k in range(n_random):
        where = "cmdbuf" if k % 3 else "manifest"
        edits.append((where, rng.choice(cb_leaves if where == "cmdbuf" else m_leaves), rng.choice(EDGE_VALUES)))
    for k, (where, path, value) in enumerate(edits):
        add("re-checksummed structural edit", f"{where}.{'.'.join(map(str, path))}={value!r}"[:80],
            rewrite(src, out / f"edit_{k}.dpk", **{where: set_field(path, value)}))
    flags = cb_doc["kernels"][0]["flags"]
    shell = f"-wrapper /bin/sh,-c,touch${{IFS}}{{s}} {flags}"  # {s}: the sentinel; sh splits at ${IFS}
    for k, (text, unsigned) in enumerate([(shell, False), (f"{flags} -DNDEBUG", False), ("-O0", False),
                                          (f"{flags} -fplugin=x.so", False), (f"-B{out} {flags}", False),
                                          (f"{flags} -include /etc/hostname", False), (shell, True)]):
        sentinel = out / f"flags_{k}.ran"
        text = text.replace("{s}", str(sentinel))
        add("crafted kernel flags", text[:60] + (" (unsigned, allowed)" if unsigned else ""),
            rewrite(src, out / f"flags_{k}.dpk", cmdbuf=set_field(("kernels", 0, "flags"), text),
                    sign=None if unsigned else "user"), allow_unsigned=unsigned, sentinel=str(sentinel))
    entry0 = cb_doc["kernels"][0]["entry"]
    for k, (entry, rename) in enumerate([("main", True), ("system", True), ("1abc", False), ("", False),
                                         ("a b", False), (f"{entry0}(void){{}}void x", False),
                                         (cb_doc["kernels"][1]["entry"], False), ("k" * 5000, True)]):
        def both(doc: dict[str, Any], e: str = entry, where: str = "cmdbuf") -> None:
            (doc["kernels"] if where == "cmdbuf" else doc["entries"][0]["kernels"]["list"])[0]["entry"] = e
        add("crafted entry names", repr(entry)[:60],
            rewrite(src, out / f"entry_{k}.dpk", cmdbuf=both, manifest=lambda d, e=entry: both(d, e, "manifest"),
                    kernel0=(lambda s, e=entry: s.replace(entry0, e)) if rename else None))
    head, body = "#include <math.h>\n#include <stdint.h>\n", f"void {entry0}("
    for k, (name, edit) in enumerate([
            ("constructor", lambda s, t: s.replace(body, "extern int system(const char *);\n__attribute__("
                                                   f"(constructor)) void dp_init(void) {{ system(\"touch {t}\"); }}\n"
                                                   + body)),
            ("asm", lambda s, t: s.replace("    float acc1", "    __asm__ volatile (\"nop\");\n    float acc1")),
            ("extra include", lambda s, t: s.replace(head, head + "#include <stdlib.h>\n")),
            ("include of a file", lambda s, t: s.replace(head, head + "#include \"/etc/hostname\"\n")),
            ("#define", lambda s, t: s.replace(head, head + "#define float double\n")),
            ("#pragma", lambda s, t: s.replace(head, head + "#pragma GCC optimize(\"O0\")\n")),
            ("extra function", lambda s, t: s + "void extra(void) { }\n"),
            ("global variable", lambda s, t: s.replace(body, "static int dp_state = 1;\n" + body)),
            ("destructor attribute", lambda s, t: s.replace("    float acc1", "    __attribute__((destructor)) int q;"
                                                             "\n    float acc1"))]):
        sentinel = out / f"source_{k}.ran"
        path = rewrite(src, out / f"source_{k}.dpk", kernel0=lambda s, e=edit, t=sentinel: e(s, t))
        add("crafted kernel sources", name, path, sentinel=str(sentinel))
    other = generate_key(out / "other.pem")
    decoy = generate_key(out / "decoy.pem")
    add("unsigned / untrusted signer", "unsigned", rewrite(src, out / "unsigned.dpk", sign=None))
    add("unsigned / untrusted signer", "signed by an untrusted key", rewrite(src, out / "other.dpk", sign=other.sign))
    add("unsigned / untrusted signer", "untrusted key, another key trusted", out / "other.dpk",
        trust=[str(public_path(decoy.path))])
    own = user_signing_key().public_raw
    swapped = bytearray((out / "other.dpk").read_bytes())
    swapped[-SIGNATURE_SIZE + 16:-SIGNATURE_SIZE + 48] = own  # the trusted key's name on another key's signature
    (out / "swapped.dpk").write_bytes(bytes(swapped))
    add("unsigned / untrusted signer", "trailer names the trusted key", out / "swapped.dpk")
    stripped = bytearray(raw[:-SIGNATURE_SIZE])
    stripped[12] &= ~2  # FLAG_SIGNED cleared, trailer cut: an unsigned file with an intact body
    (out / "stripped.dpk").write_bytes(bytes(stripped))
    add("unsigned / untrusted signer", "signature stripped, header flag cleared", out / "stripped.dpk")
    return probes


def onnx_probes(out: Path) -> list[Probe]:
    """The bad ONNX corpus (as in tests/onnx/test_bad_models.py), each in a directory of its own."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from packager.synthetic import tiny_model

    def model(nodes: list[Any], inits: list[Any] | None = None, opset: int = 13, shape: list[int] | None = None
              ) -> bytes:
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape or [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits or [])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()

    def external(location: str, offset: int = 0, length: int = 16) -> bytes:
        w = numpy_helper.from_array(np.ones(4, np.float32), "w")
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
            e = w.external_data.add()
            e.key, e.value = k, v
        return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [w], shape=[4])

    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    big = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**20, 2**20], raw_data=b"\0" * 16)
    ones = np.ones(4, np.float32).tobytes()
    tiny = tiny_model().SerializeToString()
    cases: dict[str, tuple[bytes, dict[str, bytes]]] = {
        "0-byte file": (b"", {}), "truncated": (tiny[:len(tiny) // 2], {}),
        "opset 99999": (model(relu, opset=99999), {}),
        "wrong arity (Add of 3)": (model([helper.make_node("Add", ["x", "x", "x"], ["y"], name="a")]), {}),
        "duplicate outputs": (model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                                     helper.make_node("Neg", ["x"], ["y"], name="b")]), {}),
        "cycle": (model([helper.make_node("Add", ["x", "b"], ["a"], name="n_a"),
                         helper.make_node("Relu", ["a"], ["b"], name="n_b"),
                         helper.make_node("Identity", ["b"], ["y"], name="out")]), {}),
        "absurd input dims": (model(relu, shape=[1, 2**40]), {}),
        "absurd initializer dims": (model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [big]), {}),
        "external data ../": (external("../outside.bin"), {"../outside.bin": ones}),
        "external data absolute": (external(str(out / "abs" / "w.bin")), {"w.bin": ones}),
        "external data missing": (external("nowhere.bin"), {}),
        "external data out of range": (external("w.bin", offset=8), {"w.bin": ones}),
    }
    probes = []
    for k, (name, (data, files)) in enumerate(cases.items()):
        d = out / ("abs" if "absolute" in name else f"onnx_{k}") / "model"
        d.mkdir(parents=True)
        for rel, content in files.items():
            (d / rel).write_bytes(content)
        (d / "m.onnx").write_bytes(data)
        probes.append(Probe("bad ONNX files", name, "onnx", str(d / "m.onnx")))
    return probes


def vehicle_probes(out: Path) -> list[Probe]:
    """The bad vehicle corpus (as in tests/abi/test_bad_vehicles.py)."""
    from abi.vehicle import VEHICLES_DIR
    base = (VEHICLES_DIR / "comma3x.yaml").read_text()
    top = "schema: drivepack.vehicle/1\nname: x\nextra: "
    cases = {"10,000-deep flow list": top + "[" * 10_000 + "]" * 10_000 + "\n",
             "10,000-deep block list": top + "\n  " + "- " * 10_000 + "1\n",
             "200-deep mapping": "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 200)),
             "alias": "schema: drivepack.vehicle/1\nname: &n x\nother: *n\n",
             "5,000-digit integer": base.replace("frame_rate_hz: 20", "frame_rate_hz: " + "9" * 5000, 1),
             "frame_rate_hz: .nan": base.replace("frame_rate_hz: 20", "frame_rate_hz: .nan", 1),
             "frame_rate_hz: .inf": base.replace("frame_rate_hz: 20", "frame_rate_hz: .inf", 1),
             "budget mean .nan": base.replace("budget_ms: {mean: 20,", "budget_ms: {mean: .nan,", 1),
             "intrinsic -.inf": base.replace("fx: 567.0", "fx: -.inf", 1),
             "value_range [0, .nan]": base.replace("value_range: [0, 255]", "value_range: [0, .nan]", 1)}
    probes = []
    for k, (name, text) in enumerate(cases.items()):
        assert text != base, name
        (out / f"vehicle_{k}.yaml").write_text(text)
        probes.append(Probe("bad vehicle YAML", name, "vehicle", str(out / f"vehicle_{k}.yaml")))
    return probes


def classify(probes: list[Probe], original: Path) -> list[Result]:
    """Load every probe in batch children, replay the packages that loaded one child each; a planted command
    that ran makes its probe wrong whatever the loader said."""
    results = run_in_children("load", probes)
    loaded = [i for i, r in enumerate(results) if r.outcome == "loaded"]
    for i, r in zip(loaded, run_in_children("replay", [probes[i] for i in loaded], str(original), batch=1,
                                            per_probe_s=REPLAY_TIMEOUT_S), strict=True):
        results[i] = r
    for p, r in zip(probes, results, strict=True):
        if p.sentinel and Path(p.sentinel).exists():
            r.outcome, r.detail = "accepted, wrong", f"its planted shell command ran ({r.outcome}: {r.detail})"
    return results


def table(probes: list[Probe], results: list[Result]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for p, r in zip(probes, results, strict=True):
        row = rows.setdefault(p.cls, {"probe class": p.cls, "tried": 0, **dict.fromkeys(OUTCOMES, 0)})
        row["tried"] += 1
        row[r.outcome] += 1
    total = {"probe class": "total", "tried": sum(r["tried"] for r in rows.values())}
    total |= {o: sum(r[o] for r in rows.values()) for o in OUTCOMES}
    return [*rows.values(), total]


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = ["probe class", "tried", *OUTCOMES]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    for r in rows:
        bold = r["probe class"] == "total"
        lines.append("| " + " | ".join(f"**{r[c]}**" if bold else str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def run(seed: int, quick: bool, folder: Path) -> tuple[list[Probe], list[Result]]:
    """Build the package and every probe in ``folder`` and classify them."""
    with workspace(folder):
        src = build_tiny(folder)
        out = folder / "probes"
        out.mkdir()
        probes = package_probes(src, out, random.Random(seed), quick) + onnx_probes(out) + vehicle_probes(out)
        return probes, classify(probes, src)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=22, help="seed of the random probes (default 22)")
    ap.add_argument("--quick", action="store_true", help="fewer random probes per class")
    ap.add_argument("--json", action="store_true", help="print the rows and every non-refused probe as JSON")
    ap.add_argument("--child", choices=("load", "replay"), help=argparse.SUPPRESS)
    ap.add_argument("--original", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child_main(args.child, args.original)
        return 0
    with tempfile.TemporaryDirectory(prefix="dp-reliability-") as tmp:
        probes, results = run(args.seed, args.quick, Path(tmp))
    rows = table(probes, results)
    odd = [{"class": p.cls, "probe": p.name, **asdict(r)} for p, r in zip(probes, results, strict=True)
           if r.outcome not in ("refused", "accepted") or (r.outcome == "accepted" and "control" not in p.cls)
           or r.detail.startswith("MULTI-LINE")]
    if args.json:
        print(json.dumps({"seed": args.seed, "quick": args.quick, "rows": rows, "not_refused": odd}, indent=1))
        return 0
    print(f"python3 benchmarks/bench_reliability.py --seed {args.seed}{' --quick' if args.quick else ''}\n")
    print(markdown(rows))
    if odd:
        print("\nNot refused (besides the controls):")
        for o in odd:
            print(f"  {o['class']}: {o['probe']}: {o['outcome']} {o['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
