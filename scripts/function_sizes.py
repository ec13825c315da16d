"""The size rules of posenc_cli's functions (issue #29): none over 60 lines, and no more than three
positional parameters (self and cls not counted; the rest keyword-only, after `*`). Prints each function
that breaks them and is not in EXCEPTIONS (-v: those too) and exits 1, or says there is none.
`make lint`, and tests/test_layout.py."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "posenc_cli"
MAX_LINES = 60
MAX_POSITIONAL = 3

# "path:qualified name" -> why it is kept.
EXCEPTIONS = {
    "posenc_cli/cli/eval_command.py:eval_command": (
        "Typer reads a command's options from its signature: eval's 14, with their --help text, are 48 "
        "lines before the body (which hands its checks and output to helpers)"
    ),
    "posenc_cli/cli/probe_command.py:probe": (
        "Typer reads a command's options from its signature: probe's 16, with their --help text, are "
        "over 60 lines before the body (which hands its work to run_probe and its output to helpers)"
    ),
    "posenc_cli/model/attention.py:MaskGradAttention.forward": (
        "torch.autograd.Function.forward: `apply` passes q, k, v, mask positionally"
    ),
    "posenc_cli/model/gpt.py:CausalSelfAttention.forward": "nn.Module.forward: torch's calling convention",
    "posenc_cli/model/gpt.py:Block.forward": "nn.Module.forward: torch's calling convention",
}
# Not converted yet: files outside the change that added this check (config/, core/, data/__init__.py,
# evaluation/{hf_models,perplexity,run_target,target}.py, report/output_sets.py, rundir/, training/).
# Drop each as its file is done.


def typer_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A command or callback of the Typer app: Typer passes its options by keyword, and its length is
    mostly their declarations (still under the line rule)."""
    return any(
        isinstance(d, ast.Call)
        and isinstance(d.func, ast.Attribute)
        and d.func.attr in ("command", "callback")
        for d in node.decorator_list
    )


def functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function, methods and nested functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def findings() -> dict[str, str]:
    """ "path:qualified name" -> what breaks the rules, for every function of posenc_cli."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for name, node in functions(ast.parse(path.read_text(encoding="utf-8"))):
            problems = []
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                problems.append(f"{lines} lines")
            positional = [
                a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")
            ]
            if len(positional) > MAX_POSITIONAL and not typer_command(node):
                problems.append(f"{len(positional)} positional parameters ({', '.join(positional)})")
            if problems:
                found[f"{where}:{name}"] = "; ".join(problems)
    return found


def unexplained(found: dict[str, str]) -> dict[str, str]:
    return {key: problem for key, problem in found.items() if key not in EXCEPTIONS}


def main() -> int:
    found = findings()
    for key, problem in unexplained(found).items():
        print(f"{key}: {problem}")
    stale = sorted(EXCEPTIONS.keys() - found.keys())
    for key in stale:
        print(f"{key}: listed in EXCEPTIONS but breaks no rule; drop it")
    if "-v" in sys.argv:
        for key in EXCEPTIONS.keys() & found.keys():
            print(f"{key}: {found[key]} (kept: {EXCEPTIONS[key]})")
    if not unexplained(found) and not stale:
        kept = len(EXCEPTIONS)
        print(
            f"every function within {MAX_LINES} lines and {MAX_POSITIONAL} positional parameters, but {kept} excepted (-v)"
        )
    return 1 if unexplained(found) or stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
