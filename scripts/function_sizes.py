"""The size rules of posenc_cli: no function over 60 lines, no function with more than three positional
parameters (self and cls not counted; the rest keyword-only, after `*`), and no module over 350 lines,
so that a module stays one idea a reader holds at once. Prints each function that breaks them and is not
in EXCEPTIONS, and each module that does and is not in LONG_MODULES (-v: those too), and exits 1, or
says there is none. `make lint`, and tests/test_layout.py."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "posenc_cli"
MAX_LINES = 60
MAX_POSITIONAL = 3
MAX_MODULE_LINES = 350

# "path:qualified name" -> why it is kept.
EXCEPTIONS = {
    "posenc_cli/hf/extended_attention.py:extended_attention": (
        "transformers' AttentionInterface calls it with module, query, key, value, attention_mask positionally"
    ),
    "posenc_cli/model/attention.py:MaskGradAttention.forward": (
        "torch.autograd.Function.forward: `apply` passes q, k, v, mask positionally"
    ),
    "posenc_cli/model/gpt.py:CausalSelfAttention.forward": "nn.Module.forward: torch's calling convention",
    "posenc_cli/model/gpt.py:Block.forward": "nn.Module.forward: torch's calling convention",
    "posenc_cli/model/flex.py:flex_attend.mask_mod": "FlexAttention calls a mask_mod with b, h, q_idx, kv_idx positionally",
    "posenc_cli/model/flex.py:flex_attend.score_mod": "FlexAttention calls a score_mod with score, b, h, q_idx, kv_idx positionally",
}
# "path" of a module over MAX_MODULE_LINES -> why it is kept.
LONG_MODULES: dict[str, str] = {}


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
    """ "path:qualified name" -> what breaks the rules, for every function of posenc_cli, and "path" ->
    its length, for every module over MAX_MODULE_LINES."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found[where] = f"module of {len(text.splitlines())} lines, over {MAX_MODULE_LINES}"
        for name, node in functions(ast.parse(text)):
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
    return {key: problem for key, problem in found.items() if key not in EXCEPTIONS | LONG_MODULES}


def stale(found: dict[str, str]) -> list[str]:
    """The exceptions that name nothing that breaks a rule (any more)."""
    return sorted((EXCEPTIONS | LONG_MODULES).keys() - found.keys())


def main() -> int:
    found = findings()
    for key, problem in unexplained(found).items():
        print(f"{key}: {problem}")
    for key in stale(found):
        print(f"{key}: listed in EXCEPTIONS or LONG_MODULES but breaks no rule; drop it")
    if "-v" in sys.argv:
        kept = EXCEPTIONS | LONG_MODULES
        for key in kept.keys() & found.keys():
            print(f"{key}: {found[key]} (kept: {kept[key]})")
    if not unexplained(found) and not stale(found):
        print(
            f"every function within {MAX_LINES} lines and {MAX_POSITIONAL} positional parameters, every module "
            f"within {MAX_MODULE_LINES} lines, but {len(EXCEPTIONS)} functions and {len(LONG_MODULES)} "
            "modules excepted (-v)"
        )
    return 1 if unexplained(found) or stale(found) else 0


if __name__ == "__main__":
    raise SystemExit(main())
