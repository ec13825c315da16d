"""The docs hold as written: every command in a ```bash runnable block runs and exits as documented,
and scripts/docs_check.py (run by `make lint`) reports every test, path and option that does not exist."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, invoke, run_cli

DOCS = ("README.md", "docs/*.md", "data/README.md", "benchmarks/README.md")
RUNNABLE = re.compile(r"^```bash runnable\n(.*?)^```", re.S | re.M)
EXIT = re.compile(r"#.*\bexit (\d+)")


def runnable_commands() -> list[tuple[str, list[str], int]]:
    """(doc, posenc's arguments, documented exit code) for each `posenc` line of a ```bash runnable block."""
    found = []
    for doc in sorted(p for pattern in DOCS for p in ROOT.glob(pattern)):
        for block in RUNNABLE.findall(doc.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                if line.startswith("posenc "):
                    expected = EXIT.search(line)
                    found.append(
                        (doc.name, shlex.split(line, comments=True)[1:], int(expected[1]) if expected else 0)
                    )
    return found


def run_documented(args: list[str], expected: int, cwd: Path) -> tuple[int, str]:
    """(exit code, stderr): a training runs as a process of its own, as a user's does; every other
    command (help, a refusal, inspect) in this process, which is faithful there and saves the start-up."""
    if args[0] == "train" and expected == 0 and not {"--help", "-h", "--cfg"} & set(args):
        result = run_cli(*args, cwd=cwd)
        return result.returncode, result.stderr
    invocation = invoke(*args)
    return invocation.code, invocation.stderr


def test_every_runnable_command_in_the_docs_exits_as_documented(tmp_path, monkeypatch):
    commands = runnable_commands()
    assert len(commands) >= 5, commands  # the blocks are found: a renamed info string would pass nothing
    monkeypatch.chdir(tmp_path)  # whatever a command writes lands here, as in a fresh directory
    for doc, args, expected in commands:
        code, stderr = run_documented(args, expected, tmp_path)
        assert code == expected and "Traceback" not in stderr, (doc, args, code, stderr)


def test_the_docs_checker_reports_a_wrong_test_path_option_and_key(tmp_path):
    doc = tmp_path / "wrong.md"
    doc.write_text(
        "Proved by `tests/test_cli.py::test_version` and `tests/test_cli.py::test_no_such_claim[x]`.\n"
        "Written by `scripts/docs_check.py` and `scripts/no_such_script.py`.\n"
        "```bash\nposenc eval --lengths 512 \\\n    --no-such-option 3\n```\n"
        "`posenc train scheme=rope train.max_stepz=5`\n"
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs_check.py"), str(doc)], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"{doc}:1: no test tests/test_cli.py::test_no_such_claim",
        f"{doc}:2: no file scripts/no_such_script.py",
        f"{doc}:5: posenc eval has no option --no-such-option",
        f"{doc}:7: no config key train.max_stepz",
    ]
