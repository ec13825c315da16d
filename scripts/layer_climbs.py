"""How often one parameter's calls climb back to a higher layer: how far a value travels as a message bus.

Static (AST): from FUNCTION's PARAM, every call whose argument is the parameter, an alias of it or an
attribute of it (`o.scoring`) is followed into the callee's matching parameters (module-level functions,
resolved through imports; methods and classes are not followed), depth first in the order the calls are
written, each (function, parameters) once. `x = alias` and `x = alias.attr` make aliases; what a call
returns is a new value, not an alias (a checked value is not the option it was checked from). The
functions entered are listed in the order first entered, and a climb is a function entered in a higher
layer (pyproject's import-linter layers) than the one entered just before it.

usage: layer_climbs.py MODULE:FUNCTION PARAM [MODULE:FUNCTION PARAM ...]   (prints each path and its count)
       layer_climbs.py --check   (the two bounded paths, against their targets; exits 1 past one)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
# following `options` from run_eval at most 8 climbs; `args` from train_with at most 12
TARGETS = {
    ("posenc_cli.report.run_eval:run_eval", "options"): 8,
    ("posenc_cli.training.launch:train_with", "args"): 12,
}


def layers_of(root: Path) -> list[str]:
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c["layers"] for c in contracts if c["type"] == "layers")


def parsed_modules(root: Path) -> dict[str, ast.Module]:
    modules = {}
    for package in ("posenc", "posenc_cli"):
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = ast.parse(path.read_text(encoding="utf-8"))
    return modules


class Walk:
    """One walk down the calls from a parameter, over the parsed modules under `root`."""

    def __init__(self, root: Path):
        self.layers = layers_of(root)
        self.modules = parsed_modules(root)
        self.seen: set[tuple[str, str, frozenset[str]]] = set()
        self.order: list[tuple[str, str]] = []

    def layer(self, module: str) -> int:
        for index, entry in enumerate(self.layers):
            if any(module == p.strip() or module.startswith(p.strip() + ".") for p in entry.split("|")):
                return index
        return len(self.layers)

    def functions(self, module: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
        body = self.modules[module].body
        return {n.name: n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def imported(self, module: str) -> dict[str, tuple[str, ...]]:
        names: dict[str, tuple[str, ...]] = {}
        for node in ast.walk(self.modules[module]):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found = ("module", full) if full in self.modules else ("func", node.module, alias.name)
                    names[alias.asname or alias.name] = found
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in self.modules:
                        names[alias.asname or alias.name] = ("module", alias.name)
        return names

    def resolve(self, module: str, func: ast.expr) -> tuple[str, str] | None:
        """The module-level function a call's `func` names, through this module's imports."""
        imported = self.imported(module)
        if isinstance(func, ast.Name):
            if func.id in self.functions(module):
                return module, func.id
            got = imported.get(func.id)
            if got and got[0] == "func" and got[1] in self.modules and got[2] in self.functions(got[1]):
                return got[1], got[2]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            got = imported.get(func.value.id)
            if got and got[0] == "module" and func.attr in self.functions(got[1]):
                return got[1], func.attr
        return None

    def follow(self, module: str, name: str, params: set[str]) -> None:
        key = (module, name, frozenset(params))
        if key in self.seen:
            return
        self.seen.add(key)
        if (module, name) not in self.order:
            self.order.append((module, name))
        fn = self.functions(module)[name]
        names = set().union(*(aliases_of(fn, p) for p in params))
        calls = sorted(
            (n for n in ast.walk(fn) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)
        )
        for call in calls:
            target = self.resolve(module, call.func)
            if target is None:
                continue
            args = self.functions(target[0])[target[1]].args
            positional = [a.arg for a in args.posonlyargs + args.args]
            keywords = positional + [a.arg for a in args.kwonlyargs]
            given = {
                positional[i] for i, arg in enumerate(call.args) if i < len(positional) and rooted(arg, names)
            }
            given |= {kw.arg for kw in call.keywords if kw.arg in keywords and rooted(kw.value, names)}
            if given:
                self.follow(*target, given)

    def climbs(self) -> int:
        return sum(
            self.layer(cur) < self.layer(prev) for (prev, _), (cur, _) in zip(self.order, self.order[1:])
        )


def rooted(expr: ast.expr, aliases: set[str]) -> bool:
    """Whether `expr` is one of `aliases`, or an attribute, item or star of one."""
    while isinstance(expr, (ast.Attribute, ast.Starred, ast.Subscript)):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in aliases


def aliases_of(fn: ast.FunctionDef | ast.AsyncFunctionDef, param: str) -> set[str]:
    names = {param}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
            for target, value in list(pairs):
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    pairs += list(zip(target.elts, value.elts))
            for target, value in pairs:
                if isinstance(target, ast.Name) and rooted(value, names):
                    names.add(target.id)
    return names


def walk(start: str, param: str, root: Path = ROOT) -> Walk:
    """The walk from `start` ("module:function")'s parameter `param`."""
    module, name = start.split(":")
    found = Walk(root)
    found.follow(module, name, {param})
    return found


def report(found: Walk) -> str:
    lines = []
    for (prev, _), (cur, name) in zip([(None, None), *found.order], found.order):
        up = prev is not None and found.layer(cur) < found.layer(prev)
        lines.append(f"{'CLIMB ' if up else '      '}{cur}:{name}")
    modules = len({m for m, _ in found.order})
    return "\n".join([*lines, f"{modules} modules entered, {found.climbs()} climbs back to a higher layer"])


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        over = 0
        for (start, param), most in TARGETS.items():
            count = walk(start, param).climbs()
            over += count > most
            print(f"{start} {param}: {count} climbs (at most {most})")
        return 1 if over else 0
    if not argv or len(argv) % 2:
        print(__doc__)
        return 2
    for start, param in zip(argv[::2], argv[1::2]):
        print(f"{start} {param}:\n{report(walk(start, param))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
