"""The project's import graph, built from the sources: no cycles, no module importing another's private names.

Every ``import`` counts, also those under ``if TYPE_CHECKING:`` and inside functions: a cycle that only a
type checker or a lazy import closes is still a cycle a reader must untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("jit", "targets", "abi", "packager")
USERS = ("tests", "benchmarks")  # they import the packages too, through public names only


def project_modules(folders: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every module under ``folders``."""
    out = {}
    for pkg in folders:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported_names(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for every import statement in ``path``."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append((sub, None) if sub in modules else (base, a.name))
    return [(m, n) for m, n in found if m.split(".")[0] in PACKAGES]


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """Edges module -> the project modules it imports, and the private-name imports found on the way (in the
    packages, the tests and the benchmarks)."""
    modules = project_modules()
    edges: dict[str, set[str]] = {}
    private = []
    for module, path in project_modules(PACKAGES + USERS).items():
        edges[module] = set()
        for target, name in imported_names(module, path, modules):
            if target in modules and target != module:
                edges[module].add(target)
            if name and name.startswith("_") and not name.startswith("__"):
                private.append(f"{module} imports {target}.{name}")
    return {m: e for m, e in edges.items() if m in modules}, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    edges, _ = import_graph()
    assert cycles(edges) == []


def test_no_private_imports() -> None:
    _, private = import_graph()
    assert private == []


def test_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_type_checking_and_function_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jit.ir.uop import UOp\n"
                   "def f():\n    from targets.cmdbuf import _private\n")
    found = imported_names("jit.x", src, {"jit.ir.uop": src, "targets.cmdbuf": src})
    assert ("jit.ir.uop", "UOp") in found and ("targets.cmdbuf", "_private") in found
