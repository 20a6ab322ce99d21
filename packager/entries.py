"""Entry names and the section names of each entry: the part of the format a multi-model package adds.

A package holds one or more entries (one captured model each, later one captured modeld step per camera
resolution: ``run@1928x1208``, ``prepare@1928x1208``). An entry's name is 1 to MAX_ENTRY_NAME characters of
``[A-Za-z0-9_.@x-]``: no ``/`` (it prefixes its sections' names: ``NAME/cmdbuf``, ``NAME/kernel/<i>``,
``NAME/weight/<id>``, ``NAME/golden/<k>/<kind>/<output>``), no space or quote (it is printed and typed as a
command-line argument). Runtime side: no compiler import.
"""

from __future__ import annotations

import re

from packager.errors import PackageError

MAX_ENTRY_NAME = 64
MAX_ENTRIES = 64  # bounds the manifest's entry list before any entry is interpreted
ENTRY_NAME = re.compile(r"^[A-Za-z0-9_.@x-]{1,64}$")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.@x-]")


def check_entry_name(name: object, where: str) -> str:
    """``name`` when it is a valid entry name, else a PackageError naming ``where``."""
    if not isinstance(name, str) or not ENTRY_NAME.match(name):
        raise PackageError(f"{where}: expected an entry name of 1..{MAX_ENTRY_NAME} characters from "
                           f"[A-Za-z0-9_.@x-], got {name!r:.80}")
    return name


def entry_name_for(role: str | None, model_name: str) -> str:
    """The entry name of a model: its role, else its file name without ``.onnx``, characters outside the
    allowed set replaced by ``_`` and cut to MAX_ENTRY_NAME."""
    if role is not None:
        return check_entry_name(role, "role")
    stem = model_name.removesuffix(".onnx") or "model"
    return _NOT_NAME.sub("_", stem)[:MAX_ENTRY_NAME]


def cmdbuf_section(entry: str) -> str:
    return f"{entry}/cmdbuf"


def kernel_section(entry: str, index: int) -> str:
    return f"{entry}/kernel/{index}"


def weight_section(entry: str, wid: int) -> str:
    return f"{entry}/weight/{wid}"


def golden_section(entry: str, index: int, kind: str, name: str) -> str:
    return f"{entry}/golden/{index}/{kind}/{name}"
