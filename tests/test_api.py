"""`import posenc`: the calls a notebook needs, each the command's own function, refusing as the command
refuses; and docs/notebook.py runs as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from test_bad_inputs import EVAL_PROBE_REFUSALS

import posenc
from conftest import ROOT
from conftest import posenc as posenc_cli_command
from posenc_cli.cli.schemes_command import scheme_rows
from posenc_cli.core.errors import UsageError
from posenc_cli.model.positional import SCHEMES
from posenc_cli.report.run_eval import EvalOptions
from posenc_cli.report.run_probe import ProbeOptions


def refusal(*args: str) -> str:
    """The one line `posenc ARGS` prints, without its `posenc: error: ` prefix."""
    code, stderr = posenc_cli_command(*args)
    assert code == 2, stderr
    return stderr.strip().removeprefix("posenc: error: ")


@pytest.mark.parametrize(
    "call, args",
    [
        (lambda: posenc.evaluate(["no-such-run"]), ["eval", "no-such-run"]),
        (
            lambda: posenc.evaluate(["no-such-run"], max_tokens=0),
            ["eval", "no-such-run", "--max-tokens", "0"],
        ),
        (lambda: posenc.evaluate(["hf:gpt2"]), ["eval", "hf:gpt2"]),
        (lambda: posenc.probe(["no-such-run"], trials=0), ["probe", "no-such-run", "--trials", "0"]),
        (lambda: posenc.probe(["no-such-run"], depths=[2]), ["probe", "no-such-run", "--depths", "2"]),
        (
            lambda: posenc.probe(["no-such-run"], task="multikey", distractors=0),
            ["probe", "no-such-run", "--task", "multikey", "--distractors", "0"],
        ),
        (
            lambda: posenc.probe(["no-such-run"], rope_scaling="none,yarn", rope_factor=0.5),
            ["probe", "no-such-run", "--rope-scaling", "none,yarn", "--rope-factor", "0.5"],
        ),
        (lambda: posenc.inspect("rope", dim=7), ["inspect", "rope", "--dim", "7"]),
        (lambda: posenc.load_run("no-such-run"), ["export", "no-such-run"]),
    ],
)
def test_a_bad_value_raises_the_usage_error_the_command_prints(call, args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as raised:
        call()
    assert str(raised.value) == refusal(*args)
    assert list(tmp_path.iterdir()) == []  # nothing written


def api_call(args: list[str]):
    """`posenc eval|probe ARGS` as the Python call that means the same: each option as its keyword, its
    value of the keyword's type (an int for --trials 0, True for a flag), RUNS as the targets."""
    command, *rest = args
    options = ProbeOptions if command == "probe" else EvalOptions
    hints = typing.get_type_hints(options)
    targets, keywords, words = [], {}, iter(rest)
    for word in words:
        if not word.startswith("--"):
            targets.append(word)
            continue
        name = word.removeprefix("--").replace("-", "_")
        kind = next(t for t in (*typing.get_args(hints[name]), hints[name]) if t is not type(None))
        keywords[name] = True if kind is bool else kind(next(words)) if kind in (int, float) else next(words)
    call = posenc.probe if command == "probe" else posenc.evaluate
    return lambda: call(targets, **keywords)


@pytest.mark.parametrize(
    "args", [args for args, _ in EVAL_PROBE_REFUSALS.values()], ids=EVAL_PROBE_REFUSALS.keys()
)
def test_the_commands_refusal_table_raises_the_same_line_through_the_python_api(args, tmp_path, monkeypatch):
    """Every refusal of eval's and probe's options, through posenc.evaluate and posenc.probe: the same
    check (report.run_eval, report.run_probe), the same one line, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as raised:
        api_call(args)()
    assert str(raised.value) == refusal(*args)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["no-such-run", Path("no-such-run")])
def test_one_string_or_path_is_one_target_never_its_characters(target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for call, command in ((posenc.evaluate, "eval"), (posenc.probe, "probe")):
        with pytest.raises(UsageError) as raised:
            call(target)
        assert str(raised.value) == refusal(command, "no-such-run")


def test_schemes_is_the_commands_table_and_inspect_returns_its_checks(tmp_path):
    table = posenc.schemes()
    assert list(table.index) == list(SCHEMES)
    assert table.reset_index().to_dict("records") == scheme_rows()
    checks = posenc.inspect("alibi", dim=16, length=16, heads=2, out=tmp_path / "fig")
    assert len(checks) > 1 and checks["passed"].all()
    assert checks.attrs["figures"] and all(Path(f).is_file() for f in checks.attrs["figures"])


@pytest.mark.slow
def test_the_notebook_example_runs_as_written_in_a_fresh_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "notebook.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert all((tmp_path / "runs" / s / "summary.json").is_file() for s in ("rope", "alibi"))
    document = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert {"eval", "probe"} <= set(document)  # evaluate and probe wrote one output set
    assert "passkey @ 128" in (tmp_path / "eval" / "comparison.md").read_text()


HF_CONTEXT_REFUSED = "--hf-context must be an integer between 1 and 1000000000000, got "


@pytest.mark.parametrize("context", [0, -5, 1.5, True, "abc", 10**20])
def test_an_hf_context_the_command_line_refuses_is_refused_by_load_hf_evaluate_and_probe_alike(
    context, tmp_path, monkeypatch
):
    """One check (evaluation.hf_options) for --hf-context and posenc.load_hf's context: 1.5 and True were
    taken as 1, -5 became the training length, 0 fell back to the config's, 'abc' was a traceback; the
    same line before any model is loaded, whichever way it is given."""
    monkeypatch.chdir(tmp_path)
    said = f"{HF_CONTEXT_REFUSED}{context!r}"
    with pytest.raises(UsageError, match=f"^{re.escape(said)}$"):
        posenc.load_hf(str(tmp_path), context=context)
    for call in (
        lambda: posenc.evaluate(f"hf:{tmp_path}", data="text.txt", hf_context=context),
        lambda: posenc.probe(f"hf:{tmp_path}", hf_context=context),
    ):
        with pytest.raises(UsageError, match=f"^{re.escape(said)}$"):
            call()
    assert refusal("eval", "hf:m", "--data", "t.txt", "--hf-context", "99999999999999999999") == (
        f"{HF_CONTEXT_REFUSED}99999999999999999999"
    )
    assert list(tmp_path.iterdir()) == []


def test_load_hf_refuses_a_device_or_dtype_the_command_line_refuses_in_its_words(tmp_path):
    """device='cuda:abc' was a traceback from torch; the command line's own checks, its own lines."""
    with pytest.raises(UsageError, match="^device=cuda:abc is not known"):
        posenc.load_hf(str(tmp_path), device="cuda:abc")
    with pytest.raises(UsageError, match="^--dtype 'fp16' is not one of fp32, bf16$"):
        posenc.load_hf(str(tmp_path), dtype="fp16")
