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
from types import SimpleNamespace

import pandas as pd
import pytest
from test_bad_inputs import EVAL_PROBE_REFUSALS

import posenc
from conftest import ROOT
from conftest import posenc as posenc_cli_command
from posenc_cli.cli.schemes_command import scheme_rows
from posenc_cli.core.errors import UsageError
from posenc_cli.core.option_groups import EvalOptions, ProbeOptions
from posenc_cli.core.options import given, options_of
from posenc_cli.model.positional import SCHEMES


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
    hints = {item.name: item.type for item in options_of(options)}
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
    """One check (hf.loading_options) for --hf-context and posenc.load_hf's context: 1.5 and True were
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


WRONG_TYPES = {  # a call the annotations do not allow: the argument it names (as keyword or option)
    "force a word": (lambda: posenc.evaluate("runA", lengths=[64], out="E2", force="no"), "--force='no'"),
    "add_context a word": (lambda: posenc.evaluate("runA", add_context="no"), "--add-context='no'"),
    "documents a number": (lambda: posenc.evaluate("runA", documents=1), "--documents=1"),
    "probe's force a word": (lambda: posenc.probe("runP", out="E2", force="yes"), "--force='yes'"),
    "probe's add_context a number": (lambda: posenc.probe("runP", add_context=0), "--add-context=0"),
    "targets as bytes": (lambda: posenc.evaluate(b"runA", lengths=[64]), "targets=b'runA'"),
    "targets None": (lambda: posenc.evaluate(None), "targets=None"),
    "no targets": (lambda: posenc.probe([]), "targets=[]"),
    "a target a number": (lambda: posenc.evaluate(["runA", 5]), "targets=['runA', 5]"),
    "lengths None": (lambda: posenc.evaluate("runA", lengths=None), "lengths=None"),
    "rope_scaling None": (lambda: posenc.evaluate("runA", rope_scaling=None), "rope_scaling=None"),
    "depths None": (lambda: posenc.probe("runP", depths=None), "depths=None"),
    "out a number": (lambda: posenc.evaluate("runA", out=5), "out=5"),
    "inspect's unknown keyword": (lambda: posenc.inspect("rope", bogus=1), "inspect has no option 'bogus'"),
    "load_hf a number": (lambda: posenc.load_hf(5), "id_or_path=5"),
    "load_run a number": (lambda: posenc.load_run(5), "run_dir=5"),
    "train None": (lambda: posenc.train(None), "overrides=None"),
    "train bytes": (lambda: posenc.train(b"scheme=rope"), "overrides=b'scheme=rope'"),
}


@pytest.mark.parametrize("call, named", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_a_wrong_type_is_refused_in_one_line_naming_the_argument_and_changes_nothing(
    call, named, tmp_path, monkeypatch
):
    """A truthy word for a flag was taken as yes (force='no' replaced another output set), bytes were
    read byte by byte, None or a number was a traceback: one line naming the argument, before any work."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "E2").mkdir()
    (tmp_path / "E2" / "notes.txt").write_text("another set")
    with pytest.raises(UsageError) as raised:
        call()
    said = str(raised.value)
    assert said.startswith(named) and "\n" not in said, said
    assert [p.name for p in tmp_path.rglob("*")] == ["E2", "notes.txt"]  # nothing written or replaced


def test_inspect_names_the_known_options_for_an_unknown_keyword():
    with pytest.raises(UsageError, match=r"^inspect has no option 'dims'; known: dim, heads, layout"):
        posenc.inspect("alibi", dims=16)


@pytest.mark.parametrize(
    "call, field, built",
    [
        (lambda: posenc.evaluate("runA", lengths=64), "lengths", "64"),
        (lambda: posenc.evaluate(Path("runA"), lengths=(64, 128)), "runs", ["runA"]),
        (lambda: posenc.evaluate("runA", rope_scaling=["none", "yarn"]), "rope_scaling", "none,yarn"),
        (lambda: posenc.probe("runP", depths=0.5), "depths", "0.5"),
        (lambda: posenc.probe("runP", lengths=256), "lengths", "256"),
        (lambda: posenc.probe(["runP", "hf:gpt2"], force=True), "runs", ["runP", "hf:gpt2"]),
    ],
)
def test_a_single_length_depth_or_target_is_taken_as_a_list_of_one(call, field, built, monkeypatch):
    """lengths=64 and depths=0.5 (which the annotations allow) were tracebacks: the command's options
    they build, as the command line would spell them."""
    seen = []
    evaluation = posenc.Evaluation(ppl=pd.DataFrame(), loss_by_position=pd.DataFrame(), info={}, out=None)
    monkeypatch.setattr(posenc, "run_eval", lambda options, write: seen.append(options) or evaluation)
    probing = SimpleNamespace(rows=pd.DataFrame())
    monkeypatch.setattr(posenc, "probe_options", lambda options, write: seen.append(options) or probing)
    call()
    assert given(seen[0])[field] == built


def test_one_override_string_is_one_override_never_its_characters(monkeypatch):
    """train("experiment=smoke") was read as the overrides 'e', 'x', ...: one string is one override."""
    given = []
    monkeypatch.setattr(posenc, "train_with", lambda args: given.append(args))
    posenc.train("experiment=smoke")
    posenc.train(["experiment=smoke", "scheme=rope"])
    assert given == [["experiment=smoke"], ["experiment=smoke", "scheme=rope"]]


@pytest.mark.slow
def test_evaluates_and_probes_tables_name_each_column_by_the_text_its_csv_shows(smoke_sweep):
    """Inside posenc a column is a Label of fields; a notebook selects rows by the text ppl.csv and
    probe.csv show (`df[df.scheme == "rope"]`), so the API's tables carry that text."""
    runs = [smoke_sweep / "3_rope_seed0", smoke_sweep / "4_alibi_seed0"]
    result = posenc.evaluate(runs, lengths=[64], max_tokens=256)
    assert sorted(result.ppl["scheme"]) == ["alibi", "rope"]
    assert len(result.ppl[result.ppl.scheme == "rope"]) == 1
    assert set(result.loss_by_position["scheme"]) == {"alibi", "rope"}
    assert {str(label) for label in result.info} == {"alibi", "rope"}
