"""The docs hold as written: every command in a ```bash runnable block runs and exits as documented,
the README's everyday commands and Python example run, and scripts/docs_check.py (run by `make lint`)
reports every test, path and option that does not exist, process talk, and a copy of a changing figure."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, SMOKE, invoke, run_cli
from posenc_cli.bench.main_job import main_job
from posenc_cli.core.cores import sweep_launcher


def load_docs_check():
    spec = importlib.util.spec_from_file_location("docs_check", ROOT / "scripts" / "docs_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs_check = load_docs_check()
RUNNABLE = re.compile(r"^```bash runnable\n(.*?)^```", re.S | re.M)
# a block whose trainings run at experiment=smoke in the tests (the README's everyday commands)
RUNNABLE_SMOKE = re.compile(r"^```bash runnable smoke\n(.*?)^```", re.S | re.M)
PYTHON = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EXIT = re.compile(r"#.*\bexit (\d+)")


def runnable_commands() -> list[tuple[str, list[str], int]]:
    """(doc, posenc's arguments, documented exit code) for each `posenc` line of a ```bash runnable block."""
    found = []
    for doc in docs_check.doc_files():
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


def test_the_docs_checker_reports_a_wrong_test_path_option_config_key_and_link(tmp_path, capsys):
    doc = tmp_path / "wrong.md"
    doc.write_text(
        "Proved by `tests/test_cli.py::test_version` and `tests/test_cli.py::test_no_such_claim[x]`.\n"
        "Written by `scripts/docs_check.py` and `scripts/no_such_script.py`.\n"
        "```bash\nposenc eval --lengths 512 \\\n    --no-such-option 3\n```\n"
        "`posenc train scheme=rope train.max_stepz=5`\n"
        "`posenc train scheme=rope scheme.layout=half` but `posenc train scheme=alibi scheme.layout=half`\n"
        "## Measured: `--task` (05:38–06:33 UTC)\n"
        "[here](#measured---task-05380633-utc), [not here](#measured---task-0538-0633-utc), "
        "[gone](gone.md#measured)\n"
    )
    assert docs_check.main([str(doc)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{doc}:1: no test tests/test_cli.py::test_no_such_claim",
        f"{doc}:2: no file scripts/no_such_script.py",
        f"{doc}:5: posenc eval has no option --no-such-option",
        f"{doc}:7: no config key train.max_stepz",
        f"{doc}:8: no config key scheme.layout",  # checked against the scheme its span names
        f"{doc}:10: no heading #measured---task-0538-0633-utc in wrong.md",  # an en dash is dropped
        f"{doc}:10: no file gone.md",
    ]


def test_a_heading_link_is_checked_against_the_anchors_github_gives_the_headings(tmp_path):
    """Anchors as GitHub renders them (words of links, no images, tags, emphasis; setext headings;
    repeats numbered; HTML ids), links found as GitHub finds them (titles, references, <>, ?query,
    %-escapes, repo-absolute paths), and none inside code or pointing at another site."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "README.md").write_text("# Folder\n")
    target = tmp_path / "target.md"
    target.write_text(
        "# Intro\n## Intro\n   ## _Emphasis_ and [a link](x.md) ![logo](l.png) <sup>2</sup> &amp; done\n"
        'Setext Title\n====\n<a name="custom"></a>\n## Café déjà\n'
        "````\n```\n## Not a heading\n````\n~~~\n## Nor this\n~~~\n## After\n"
    )
    good = [
        "target.md#intro-1",
        "target.md#emphasis-and-a-link--2--done",
        "target.md#setext-title",
        "target.md#custom",
        "target.md#caf%C3%A9-d%C3%A9j%C3%A0",
        "/target.md#after",
        "<target.md#intro>",
        "target.md?plain=1#intro",
        "sub/#folder",
        "https://example.com/x.md#nowhere",
    ]
    doc = tmp_path / "doc.md"
    doc.write_text(
        "".join(f"[ok]({link})\n" for link in good)
        + '[titled](target.md#not-a-heading "t")\n'
        + "[ref][r] and `[in a span](#nope)`, \\[escaped\\](#nope)\n"
        + "```markdown\n[in code](#nope)\n```\n"
        + "[r]: target.md#nor-this\n"
    )
    found = docs_check.broken_links(doc.read_text(), doc, tmp_path)
    assert found == [
        (11, "no heading #not-a-heading in target.md"),
        (16, "no heading #nor-this in target.md"),
    ]


def test_the_benchmarks_main_job_is_make_demos_commands():
    """`posenc bench` times the README's main job: the commands `make demo` runs, variables expanded,
    its launcher overrides (`$side`: scripts/demo_launcher.py) those of the machine's cores."""
    makefile = (ROOT / "Makefile").read_text()
    values = dict(re.findall(r"^(\w+) \?= (.*)$", makefile, re.M))
    commands = re.findall(r'echo "\$\(BIN\)/posenc ([^"]+)"', makefile)
    launcher = re.search(r"side=\$\$\(\$\(BIN\)/python (scripts/\w+\.py) \$\(SCHEMES\)\)", makefile)
    assert launcher and launcher.group(1) == "scripts/demo_launcher.py"
    for cores in (2, 16):
        side = " ".join(sweep_launcher(len(values["SCHEMES"].split(",")), cores))
        expanded = [
            re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], c).replace("$$side", side).split()
            for c in commands
        ]
        assert expanded == main_job(cores)


def test_the_docs_checker_refuses_process_talk_in_prose_but_not_a_module_named_in_code(tmp_path, capsys):
    doc = tmp_path / "talk.md"
    doc.write_text(
        "Measured for issue #33 in session 8, beside another engineer's jobs.\n"
        "This branch does not do that; commit 880f0c3 of branch `hf`, and branch `main`.\n"
        "On the 2-core Intel Xeon this project runs on, and on this project's AVX2 machine.\n"
        "The loop calls `training/session.py`; see [chapter 1](#1-sinusoidal).\n## 1. Sinusoidal\n"
        "```\nthe session and its step\n```\n"
    )
    assert docs_check.main([str(doc)]) == 1
    found = [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert found == [
        "process talk (an issue number): 'issue #33'",
        "process talk (a work session): 'session'",
        "process talk (whose jobs): 'another engineer'",
        "process talk (a branch): 'This branch'",
        "process talk (a branch): 'of branch'",
        "process talk (a branch): 'branch `'",
        "process talk (this project's machine): 'this project runs on'",
        "process talk (this project's machine): \"this project's\"",
    ]


def test_a_changing_figure_is_refused_anywhere_but_its_one_home(tmp_path):
    text = (
        "make demo   # train all five: 2 min 14 s on a 2-core EPYC\n"
        "`make test` runs 846 tests in 1 min 26 s.\n"
        "An AVX2-only CPU is projected at 5½–7½ minutes for the demo.\n"
        "`make demo`'s rope run, evaluated in 1 min 38 s, and 3 seeds.\n"
    )
    found = sorted(docs_check.figures_off_home(text))
    assert [(line, what.split(":")[0]) for line, what in found] == [
        (1, "states make demo's wall time"),
        (2, "states the suite's size"),
        (2, "states the suite's time"),
        (3, "states the AVX2 demo's projection"),
    ]
    home = ROOT / docs_check.FIGURE_HOME
    assert home.is_file() and docs_check.FIGURE_HOME in found[0][1]
    assert docs_check.figures_may_live_in(home, ROOT) and docs_check.figures_may_live_in(
        ROOT / "benchmarks/README.md", ROOT
    )
    assert not docs_check.figures_may_live_in(ROOT / "README.md", ROOT)


def smoke_commands(doc: Path) -> list[list[str]]:
    """posenc's arguments for each line of doc's ```bash runnable smoke blocks; a training gets
    experiment=smoke last, in place of the experiment the line names (a group Hydra composes first: the
    keys the line sets still win)."""
    found = []
    for block in RUNNABLE_SMOKE.findall(doc.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            args = shlex.split(line, comments=True)[1:]
            trains = args[:1] == ["train"] and "--cfg" not in args
            found.append([*(a for a in args if not a.startswith("experiment=")), *SMOKE] if trains else args)
    return found


@pytest.mark.slow  # trains a run, a smaller one, a sweep of 15 and a tracked run, at the smoke budget
def test_the_readmes_everyday_commands_run_as_written_at_the_smoke_budget(tmp_path):
    commands = smoke_commands(ROOT / "README.md")
    assert len(commands) >= 10 and ["train", "scheme=rope", *SMOKE] in commands, commands
    for args in commands:
        done = run_cli(*args, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr)
    assert (tmp_path / "my_model" / "modeling_posenc.py").is_file()


@pytest.mark.slow  # trains four 4-layer runs at the smoke budget, then evaluates them
def test_the_tutorials_commands_run_as_written_at_the_smoke_budget_at_equal_depth(tmp_path):
    tutorial = ROOT / "docs" / "tutorial.md"
    assert "docs/tutorial.md" in (ROOT / "README.md").read_text()
    commands = smoke_commands(tutorial)
    trainings = [args for args in commands if args[:1] == ["train"]]
    assert any({"scheme=rope,alibi,irope,rnope_swa", "model.n_layer=4"} <= set(args) for args in trainings)
    assert any(args[:1] == ["eval"] for args in commands), commands
    for args in commands:
        done = run_cli(*args, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr)
    (table,) = (tmp_path / "outputs" / "eval").glob("*/comparison.md")
    header = table.read_text().split("\n|")[1]
    assert all(scheme in header for scheme in ("rope", "alibi", "irope", "rnope_swa")), header


@pytest.mark.slow  # trains a smoke run
def test_the_readmes_python_example_runs_as_written_and_its_frame_is_ppl_csvs_rows(tmp_path):
    (block,) = PYTHON.findall((ROOT / "README.md").read_text())
    columns = "import json\njson.dump(list(result.ppl.columns), open('columns.json', 'w'))\n"
    (tmp_path / "example.py").write_text(block + columns)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    written = pd.read_csv(tmp_path / "eval" / "ppl.csv")
    assert json.loads((tmp_path / "columns.json").read_text()) == list(written.columns)
    assert "effective_len_ppl" in written.columns and (tmp_path / "eval" / "probe.csv").is_file()


def test_a_changing_figure_restated_in_words_or_away_from_its_own_home_is_refused(tmp_path):
    text = (
        "An AVX2-only CPU computes the demo in fp32 and took about twice\nthree minutes for it.\n"
        "`make demo` on that machine gives the same verdicts within the three minutes.\n"
        "The needle runs are at length 512, several times the 33 CPU-minutes of a 128-token run.\n"
        "The eval took 30 min of wall time (19 CPU-minutes, 62 % of one core).\n"
    )
    found = sorted(docs_check.figures_off_home(text))
    assert [(line, what.split(":")[0]) for line, what in found] == [
        (1, "states the demo's time in words"),
        (3, "states the demo's time in words"),
        (4, "states a probe-preset run's CPU cost"),
    ]
    assert "docs/probe.md#training-models-that-can-be-probed" in found[2][1]
    home = tmp_path / "docs" / "probe.md"
    home.parent.mkdir()
    home.write_text(text)
    assert [what for _, what in docs_check.figures_off_home(text, home, tmp_path)] == [
        what for _, what in found if "probe-preset" not in what
    ]


def test_a_stated_count_of_all_schemes_must_be_the_registrys():
    from posenc_cli.model.positional import SCHEMES

    n = len(SCHEMES)
    text = (
        "The scheme group lists 9 schemes; posenc has 16 registered schemes.\n"
        f"posenc has {n} registered schemes, and make demo trains all five schemes of the chapters.\n"
        "The five chapter schemes, 11 schemes × 3 tasks, and seventeen built-in schemes.\n"
    )
    found = docs_check.scheme_counts(text, n)
    assert [(line, what.split(",")[0]) for line, what in found] == [
        (1, "states 9 schemes"),
        (1, "states 16 schemes"),
        *([(3, "states 17 schemes")] if n != 17 else []),
    ]


def test_the_scripts_comments_and_docstrings_are_checked_but_their_code_is_not(tmp_path, capsys):
    shell = tmp_path / "run.sh"
    shell.write_text(
        "#!/usr/bin/env bash\n# From issue #50: trains, then docs/no_such_page.md\n"
        'echo "${#ARRAY[@]}" "#7"   # see docs/index.md\n'
    )
    python = tmp_path / "tool.py"
    python.write_text(
        '"""Measured for #51; it calls session.train_step."""\n\nPATTERN = "issue 12"  # fixed in session 4\n'
    )
    assert docs_check.main([str(shell), str(python)]) == 1
    found = [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert found == [
        "no file docs/no_such_page.md",
        "process talk (an issue number): 'issue #50'",
        "process talk (an issue number): '#51'",
        "process talk (a work session): 'session'",
    ]
    assert {p.name for p in docs_check.script_files()} >= {"gpu_evidence.sh", "docs_check.py"}
