"""The run summary (rundir.summary): summary.json reads back as the RunSummary written, a summary an
older posenc wrote reads and writes back byte for byte, a damaged field is one line naming the file,
one function writes the file and a run writes it once per change; metrics.csv reads back as logged."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import get_args, get_type_hints

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SMOKE
from posenc_cli.core.errors import UsageError
from posenc_cli.rundir import summary as summary_module
from posenc_cli.rundir.summary import (
    PrecisionFacts,
    RunDescription,
    RunOutcome,
    RunStatus,
    RunSummary,
    finished,
    read_metrics,
    read_summary,
    write_summary,
)

PACKAGE = Path(__file__).resolve().parents[1] / "posenc_cli"

# summary.json as posenc wrote it before RunSummary (a finished run; its config shortened)
FINISHED_BEFORE = {
    "scheme": "rope",
    "seed": 0,
    "train_len": 64,
    "positions": "ordinary",
    "max_position": None,
    "kind": "rotary",
    "relative": "explicit",
    "max_len": None,
    "positional_params": 0,
    "total_params": 13184,
    "corpus": "synthetic",
    "tokenizer": "char",
    "vocab_size": 22,
    "device": "cpu",
    "code_version": "git:15b5a534f236262d46e07570c0fb02ce6117e284",
    "threads": 1,
    "processes": 1,
    "corpus_fresh_entropy_nats": 0.6972074604648236,
    "corpus_sha256": "700253271d6a75c5107c0be10f9eaa93ab1cfc447d248fa3667d62cacedd7b1a",
    "corpus_chars": 50000,
    "corpus_chars_per_token": 1.0,
    "precision": {
        "requested": "auto",
        "effective": "fp32",
        "cpu_bf16": "emulated",
        "reason": "this CPU emulates bf16 (no AVX-512-BF16 or AMX)",
    },
    "run_id": "b8997c9ba87f4fc883c29208d1bc02d9",
    "config": {"model": {"n_layer": 1, "n_head": 2}, "train": {"max_steps": 20, "resume": None}, "seed": 0},
    "init_from": "/runs/base",
    "init_chain": ["/runs/base"],
    "checkpoint_step": 20,
    "record_sha256": "ba7e153cd125e0b2886a19aa2a2a36b7ceaeb8e79aa1eecd50e900a40507f0a6",
    "status": "finished",
    "message": None,
    "steps": 20,
    "wall_time_s": 0.29,
    "final_train_loss": 2.95605,
    "final_val_loss": 2.850042,
    "tokens_per_s": 17373,
}
# ... and a fresh run that failed before its model was built
FAILED_AT_START_BEFORE = {
    "status": "failed",
    "run_id": "0123abcd",
    "config": {"seed": 0},
    "message": "the run failed to start (no corpus), with no checkpoint saved; delete r, or resume it",
}
# ... and a posenc from before run ids, precision, threads, processes and code versions
OLDER = {
    "scheme": "alibi",
    "seed": 1,
    "train_len": 64,
    "kind": "bias",
    "relative": "explicit",
    "max_len": None,
    "positional_params": 0,
    "total_params": 100,
    "corpus": "synthetic",
    "vocab_size": 22,
    "device": "cpu",
    "corpus_chars": 50000,
    "status": "finished",
    "steps": 20,
    "wall_time_s": 1.5,
    "final_train_loss": 2.9,
    "final_val_loss": 2.8,
    "tokens_per_s": 1000,
}


def json_text(value: dict) -> str:
    return json.dumps(value, indent=2) + "\n"


@pytest.mark.parametrize(
    "before", [FINISHED_BEFORE, FAILED_AT_START_BEFORE], ids=["finished", "failed-at-start"]
)
def test_a_summary_the_dict_era_posenc_wrote_reads_and_writes_back_byte_for_byte(tmp_path, before):
    (tmp_path / "summary.json").write_text(json_text(before))
    write_summary(tmp_path, read_summary(tmp_path))
    assert (tmp_path / "summary.json").read_text() == json_text(before)


def test_a_summary_an_older_posenc_wrote_reads_with_what_it_did_not_record_as_none(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({**OLDER, "vocab": ["a"]}))  # a key no longer written
    summary = read_summary(tmp_path)
    assert summary.status is RunStatus.FINISHED and finished(tmp_path)
    assert summary.run_id is None and summary.config is None and summary.record_sha256 is None
    assert summary.description.scheme == "alibi" and summary.description.corpus_stats == {"chars": 50000}
    assert summary.description.precision is None and summary.description.processes is None
    assert summary.outcome == RunOutcome(
        steps=20, wall_time_s=1.5, final_train_loss=2.9, final_val_loss=2.8, tokens_per_s=1000
    )
    assert summary.code_history("git:new") == ("git:new",)


def test_a_resumed_runs_code_versions_keep_the_first_one_and_add_this_one_once():
    first = RunSummary.from_json(FINISHED_BEFORE, Path("summary.json"))
    assert first.code_history("posenc 2") == (FINISHED_BEFORE["code_version"], "posenc 2")
    resumed = RunSummary(code_versions=("posenc 1", "posenc 2"))
    assert resumed.code_history("posenc 2") == ("posenc 1", "posenc 2")


texts = st.text(max_size=12)
numbers = st.floats(allow_nan=False, allow_infinity=False) | st.integers()
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)
precisions = st.builds(
    PrecisionFacts,
    requested=st.none() | texts,
    effective=st.none() | texts,
    cpu_bf16=st.none() | texts,
    reason=st.none() | texts,
    step_ms=st.none() | st.dictionaries(texts, numbers, max_size=3),
)
descriptions = st.builds(
    RunDescription,
    corpus_stats=st.dictionaries(texts, json_values, max_size=4),
    precision=st.none() | precisions,
    **{
        name: st.none() | (texts if str in get_args(hint) else st.integers())
        for name, hint in get_type_hints(RunDescription).items()
        if name not in ("corpus_stats", "precision")
    },
)
outcomes = st.builds(
    RunOutcome,
    steps=st.none() | st.integers(),
    wall_time_s=st.none() | numbers,
    final_train_loss=st.none() | numbers,
    final_val_loss=st.none() | numbers,
    tokens_per_s=st.none() | numbers,
)
summaries = st.builds(
    RunSummary,
    status=st.none() | st.sampled_from(RunStatus),
    run_id=st.none() | texts,
    config=st.none() | json_objects,
    description=st.none() | descriptions,
    code_versions=st.none() | st.lists(texts, max_size=3).map(tuple),
    init_from=st.none() | texts,
    init_chain=st.none() | st.lists(texts, max_size=3).map(tuple),
    checkpoint_step=st.none() | st.integers(),
    record_sha256=st.none() | texts,
    message=st.none() | texts,
    outcome=st.none() | outcomes,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(summary=summaries)
def test_a_summary_reads_back_as_the_summary_that_was_written(tmp_path, summary):
    write_summary(tmp_path, summary)
    assert read_summary(tmp_path) == summary


@pytest.mark.parametrize(
    "field, value",
    [
        ("status", "done"),
        ("status", 1),
        ("status", ["finished"]),
        ("run_id", 5),
        ("config", []),
        ("checkpoint_step", "3"),
        ("checkpoint_step", True),
        ("init_chain", "xyz"),
        ("init_chain", [1]),
        ("precision", "fp32"),
        ("precision", {"effective": 16}),
        ("total_params", 1.5),
        ("steps", "20"),
        ("final_val_loss", "low"),
    ],
)
def test_a_summary_field_of_another_type_is_one_line_naming_the_file_and_the_field(tmp_path, field, value):
    (tmp_path / "summary.json").write_text(json.dumps({**FINISHED_BEFORE, field: value}))
    named = "precision.effective" if isinstance(value, dict) else field
    with pytest.raises(UsageError, match=f"summary.json is damaged: its {named} is") as refused:
        read_summary(tmp_path)
    assert "\n" not in str(refused.value)
    assert not finished(tmp_path)


def test_a_runs_status_is_spelled_only_by_its_enum_in_the_summary_module():
    """summary.json's statuses have one home (rundir.summary.RunStatus): a string literal of one anywhere
    else in the package would be a second spelling that could drift from what the file holds."""
    statuses = {s.value for s in RunStatus}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path == Path(summary_module.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in statuses:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert found == []


WRITERS = {"write_text", "write_bytes", "write_with", "open", "dump", "replace", "rename", "copy", "copyfile"}


def test_summary_json_is_written_by_one_function_the_summary_modules_write_summary():
    """Every call that writes a file named by SUMMARY (or "summary.json") anywhere in the package, by the
    function it is in: only rundir.summary.write_summary may write it."""

    def names_summary(node: ast.AST) -> bool:
        return any(
            (isinstance(n, ast.Name) and n.id == "SUMMARY")
            or (isinstance(n, ast.Constant) and n.value == "summary.json")
            for n in ast.walk(node)
        )

    writers = set()
    for path in PACKAGE.rglob("*.py"):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for call in ast.walk(function):
                if not isinstance(call, ast.Call):
                    continue
                name = (
                    call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                )
                if name in WRITERS and names_summary(call):
                    writers.add(f"{path.relative_to(PACKAGE)}:{function.name}")
    assert writers == {"rundir/summary.py:write_summary"}


def test_metrics_csv_reads_back_as_the_rows_training_logged(tmp_path):
    from posenc_cli.training.tracking import CSVLogger

    rows = [
        {"step": 2, "train_loss": 3.5, "lr": 0.001, "tokens_per_s": 1200, "grad_norm": 0.5},
        {"step": 3, "val_loss": 3.25},
        {
            "step": 4,
            "train_loss": 3.0,
            "val_loss": None,
            "lr": 0.002,
            "tokens_per_s": 1300,
            "grad_norm": 0.25,
        },
    ]
    logger = CSVLogger(tmp_path, [])
    for row in rows:
        logger.log_metrics(row)
    assert read_metrics(tmp_path) == [{k: v for k, v in row.items() if v is not None} for row in rows]


@pytest.mark.slow  # trains
def test_a_run_writes_its_summary_on_start_once_described_at_each_checkpoint_but_the_last_and_at_the_end(
    tmp_path, monkeypatch
):
    from hydra import compose, initialize_config_dir

    from posenc_cli.config.location import config_dir
    from posenc_cli.rundir import claim
    from posenc_cli.training import loop
    from posenc_cli.training.preflight import validate

    written = []
    real_write = summary_module.write_text
    monkeypatch.setattr(
        summary_module,
        "write_text",
        lambda path, text: (written.append(json.loads(text)), real_write(path, text)),
    )
    overrides = ["device=cpu", "train.threads=1", "train.max_steps=6", "train.checkpoint_interval=2"]
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = validate(compose("config", overrides=[*SMOKE, *overrides]))
    (tmp_path / "r").mkdir()  # claimed, as `posenc train` claims it
    returned = loop.train(cfg, tmp_path / "r")
    os.close(claim._held.pop((tmp_path / "r").resolve()))  # the lock a process's exit would release
    assert [(w["status"], w.get("checkpoint_step"), "scheme" in w) for w in written] == [
        ("running", None, False),  # which run the directory holds, before its corpus is read
        ("running", None, True),  # what the run is, before its first checkpoint
        ("running", 2, True),
        ("running", 4, True),
        ("finished", 6, True),  # the last checkpoint's step, with how the run ended
    ]
    assert read_summary(tmp_path / "r") == returned and returned.record_sha256 is not None
