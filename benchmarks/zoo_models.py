"""The model zoo benchmarks/bench_zoo.py times: torchvision, timm and torch.nn models exported to ONNX, offline.

    python3 benchmarks/zoo_models.py [--models a,b] [--list]    # export what is not cached yet, print the paths

Every model is built with ``torch.manual_seed(0)`` (random init, no pretrained weights: nothing is downloaded),
put in eval mode and exported with ``torch.onnx.export`` at opset 17 and fixed input shapes, the TorchScript
exporter first (``dynamo=False``) and the dynamo one only if that fails. The files go to ``$DRIVEPACK_ZOO_DIR``
or ``~/.cache/drivepack/zoo`` (never the repository), named by model and the torch / torchvision / timm versions
and ``RECIPE``, so a new torch or a changed recipe exports again and an unchanged one reuses the file.

Needs ``pip install -e '.[bench]'`` (torch, torchvision, timm, onnxscript). Only the export process imports torch:
the benchmark reads the cached ONNX files, so torch's thread pools never share its process with the timed peers.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# bump when a model's definition or the export settings change: the cached files then no longer match
RECIPE = 1
OPSET = 17
# openpilot's vision input: two YUV 4:2:0 frames of 128x256, 6 channels each, stacked
OPENPILOT_SHAPE = (1, 12, 128, 256)
IMAGENET_SHAPE = (1, 3, 224, 224)


@dataclass(frozen=True)
class ZooModel:
    """A zoo entry: ``build`` returns the torch module (called after seeding), ``inputs`` its named shapes."""

    name: str
    build: Callable[[], Any]
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    note: str


def _torchvision(name: str) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision
        return getattr(torchvision.models, name)(weights=None)
    return build


def _timm(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        import timm
        return timm.create_model(name, pretrained=False, **kwargs)
    return build


def _transformer_encoder() -> Any:
    import torch
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True)
    # the nested-tensor fast path is an eval-time kernel the exporter cannot trace; the math is the same
    return torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def _gru() -> Any:
    import torch

    class OneStepGRU(torch.nn.Module):
        """One step of a 1024 -> 512 GRU with its hidden state as an input, as a policy model carries it."""

        def __init__(self) -> None:
            super().__init__()
            self.gru = torch.nn.GRU(1024, 512, batch_first=True)

        def forward(self, x: Any, h: Any) -> tuple[Any, Any]:
            return self.gru(x, h)

    return OneStepGRU()


IMG = (("x", IMAGENET_SHAPE),)
OP = (("x", OPENPILOT_SHAPE),)
ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("efficientnet_b2_op", _timm("efficientnet_b2", in_chans=12), OP, "timm, openpilot frame shape"),
    ZooModel("mobilenet_v3_small", _torchvision("mobilenet_v3_small"), IMG, "torchvision"),
    ZooModel("squeezenet1_1", _torchvision("squeezenet1_1"), IMG, "torchvision"),
    ZooModel("shufflenet_v2_x0_5", _torchvision("shufflenet_v2_x0_5"), IMG, "torchvision"),
    ZooModel("resnet18", _torchvision("resnet18"), IMG, "torchvision"),
    ZooModel("transformer", _transformer_encoder, (("x", (1, 25, 256)),),
             "nn.TransformerEncoder, 2 layers, d 256, 4 heads, ffn 2048, 25 tokens"),
    ZooModel("gru", _gru, (("x", (1, 1, 1024)), ("h", (1, 1, 512))), "nn.GRU 1024 -> 512, one step"),
    ZooModel("efficientnet_b0", _torchvision("efficientnet_b0"), IMG, "torchvision"),
    ZooModel("convnext_atto", _timm("convnext_atto"), IMG, "timm; LayerNorm-heavy (LayerNorm in every block)"),
    ZooModel("deit_tiny_128", _timm("deit_tiny_patch16_224", img_size=128), (("x", (1, 3, 128, 128)),),
             "timm; attention-heavy: 12 blocks, 3 heads, 65 tokens"),
    ZooModel("deit_tiny", _timm("deit_tiny_patch16_224"), IMG, "timm; ViT's own 224 input: 197 tokens, a prime"),
    ZooModel("resnet18_op", _timm("resnet18", in_chans=12), OP, "timm, openpilot frame shape"),
    ZooModel("efficientnet_b0_op", _timm("efficientnet_b0", in_chans=12), OP, "timm, openpilot frame shape"),
    ZooModel("mobilenetv3_large_op", _timm("mobilenetv3_large_100", in_chans=12), OP,
             "timm, openpilot frame shape"),
)}
QUICK = ("squeezenet1_1", "shufflenet_v2_x0_5", "transformer", "gru")


def zoo_dir() -> Path:
    return Path(os.environ.get("DRIVEPACK_ZOO_DIR") or Path.home() / ".cache" / "drivepack" / "zoo")


def versions() -> str:
    """The exporting packages' versions, read without importing torch (seconds, and its thread pools)."""
    parts = []
    for pkg in ("torch", "torchvision", "timm"):
        try:
            parts.append(f"{pkg}{importlib.metadata.version(pkg)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{pkg}-none")
    return "-".join(parts) + f"-r{RECIPE}"


def model_path(name: str) -> Path:
    return zoo_dir() / f"{name}-{versions()}.onnx"


def export(model: ZooModel, path: Path) -> str:
    """Export ``model`` to ``path`` (written whole or not at all); the exporter that worked."""
    import torch
    torch.manual_seed(0)
    module = model.build().eval()
    args = tuple(torch.randn(shape) for _, shape in model.inputs)
    names = [n for n, _ in model.inputs]
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(".tmp")
    errors = []
    for dynamo in (False, True):
        try:
            with torch.no_grad():
                torch.onnx.export(module, args, str(staged), opset_version=OPSET, input_names=names,
                                  dynamo=dynamo, do_constant_folding=True)
        except Exception as e:  # noqa: BLE001  # either exporter may fail on some module; try the other
            errors.append(f"{'dynamo' if dynamo else 'torchscript'}: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        staged.replace(path)
        return "dynamo" if dynamo else "torchscript"
    raise RuntimeError("; ".join(errors))


def export_missing(names: list[str]) -> dict[str, str]:
    """name -> cached path, or "error: ..." for a model no exporter could export; exports the missing ones."""
    out = {}
    for name in names:
        path = model_path(name)
        if not path.exists():
            try:
                how = export(ZOO[name], path)
                print(f"exported {name} ({how}) -> {path}", file=sys.stderr)
            except Exception as e:  # noqa: BLE001  # one model's failure is its row's error, not the run's
                out[name] = f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                continue
        out[name] = str(path)
    return out


def ensure(names: list[str]) -> dict[str, str]:
    """Like ``export_missing`` but from this process without importing torch: a child process exports whatever
    the cache lacks. A missing torch (no ``.[bench]`` extra) is an error for each uncached model."""
    missing = [n for n in names if not model_path(n).exists()]
    found = {n: str(model_path(n)) for n in names if n not in missing}
    if missing:
        proc = subprocess.run([sys.executable, __file__, "--models", ",".join(missing), "--json"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            found.update({n: f"error: export process failed: {last}" for n in missing})
        else:
            sys.stderr.write("".join(line + "\n" for line in proc.stderr.splitlines() if line.startswith("exported")))
            found.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {n: found[n] for n in names}


def zoo_listing() -> list[str]:
    """One line per zoo model: name, inputs and shapes, what it is."""
    return [f"{m.name:22s} {' '.join(f'{n}{list(s)}' for n, s in m.inputs):32s} {m.note}" for m in ZOO.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO), help="comma list (default: all)")
    parser.add_argument("--list", action="store_true", help="list the zoo and exit")
    parser.add_argument("--json", action="store_true", help="print name -> path as one JSON line")
    args = parser.parse_args()
    if args.list:
        print("\n".join(zoo_listing()))
        return
    names = args.models.split(",")
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(ZOO)}")
    paths = export_missing(names)
    if args.json:
        print(json.dumps(paths))
    else:
        for name, path in paths.items():
            print(f"{name:22s} {path}")


if __name__ == "__main__":
    main()
