"""Import cycles among posenc_cli's modules, counting imports inside function bodies (which the layers
contract of `lint-imports` sees too): prints each cycle and exits 1, or says there is none. `make lint`."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "posenc_cli"


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the posenc_cli modules it imports anywhere in its body (the nearest module of a name)."""

    def nearest(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("posenc_cli"):
                targets = [nearest(f"{node.module}.{alias.name}") for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [nearest(a.name) for a in node.names if a.name.startswith("posenc_cli")]
            else:
                continue
            edges[name] |= {t for t in targets if t and t != name}
    return edges


def cycles(edges: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def main() -> int:
    modules = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    sys.setrecursionlimit(10_000)
    found = cycles(imports(modules), list(modules))
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    if not found:
        print(f"no import cycle among {len(modules)} modules (imports inside functions counted)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
