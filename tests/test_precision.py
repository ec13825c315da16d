"""Precision: `train.precision=auto` answers by the machine (bf16 autocast where the CPU or GPU computes
bf16 natively, fp32 elsewhere), and a run records what it computed in, never the word `auto`. Each test
here runs under both answers of the CPU's bf16 detection (the `cpu_bf16` fixture), so both outcomes are
tested on either machine kind; a resume keeps the run's own precision, whatever this machine answers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from conftest import SMOKE, assert_one_line_error, assert_refused, evaluate, posenc, run_cli, train
from posenc_cli.core.device import AUTOCAST_PRECISIONS, effective_precision, native_bf16
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.record import load_checkpoint

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out

CPU = torch.device("cpu")
AUTO_ANSWERS = {"native": "bf16-autocast", "emulated": "fp32"}  # the static rule (no measurement)
ASKED_FOR = {"fp32": "fp32", **{effective: asked for asked, effective in AUTOCAST_PRECISIONS.items()}}


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_auto_computes_in_bf16_only_where_the_cpu_has_native_bf16(cpu_bf16):
    assert native_bf16(CPU) == (cpu_bf16 == "native")
    assert effective_precision(CPU, "auto") == AUTO_ANSWERS[cpu_bf16]
    assert effective_precision(CPU, "fp32") == "fp32"  # asked for: the same on every machine kind
    assert effective_precision(CPU, "bf16") == "bf16-autocast"
    assert effective_precision(CPU, "bf16-fp32-attention") == "bf16-autocast-fp32-attention"
    assert effective_precision(torch.device("mps"), "bf16") == "fp32"  # no autocast there


def test_a_run_records_its_precision_and_a_resume_on_the_other_machine_kind_keeps_it(cpu_bf16, tmp_path):
    """The summary and checkpoint name what the run computed in, why, and the CPU's bf16. Trained where
    auto may mean bf16 autocast, resumed where it means fp32 (or the other way round), the resumed run
    equals the run never stopped, bit for bit."""
    other = {"native": "emulated", "emulated": "native"}[cpu_bf16]
    steps = ["device=cpu", "train.eval_interval=2", "train.checkpoint_interval=2"]
    stopped = train(tmp_path, *steps, "train.precision=auto", "train.max_steps=4", run="stopped")
    recorded = summary(stopped)["precision"]
    assert {k: recorded[k] for k in ("requested", "cpu_bf16")} == {"requested": "auto", "cpu_bf16": cpu_bf16}
    # native: the precision that measured fastest at these shapes (precision_choice); emulated: fp32, unmeasured
    assert recorded["effective"] in ASKED_FOR and summary(stopped)["device"] == "cpu"
    why = {"native": ("measured: ", "busy"), "emulated": ("emulates bf16",)}[cpu_bf16]  # busy: not measured
    assert any(words in recorded["reason"] for words in why), recorded["reason"]
    asked = ASKED_FOR[recorded["effective"]]  # the same arithmetic, asked for
    reference = train(tmp_path, *steps, f"train.precision={asked}", "train.max_steps=6", run="reference")
    resumed = run_cli(
        "train", f"train.resume={stopped}", "train.max_steps=6", cwd=tmp_path, env={"POSENC_CPU_BF16": other}
    )
    assert resumed.returncode == 0, resumed.stderr
    after = summary(stopped)["precision"]
    assert after["effective"] == recorded["effective"]  # not what `other` says
    # how the precision was first chosen stays on the record
    assert after["reason"] == f"a resume keeps its run's precision; first chosen: {recorded['reason']}"
    assert after.get("step_ms") == recorded.get("step_ms")
    want, got = load_checkpoint(reference / CHECKPOINT), load_checkpoint(stopped / CHECKPOINT)
    assert got.step == 6 and got.record.precision == want.record.precision
    assert all(torch.equal(want.model[k], got.model[k]) for k in want.model)


def test_a_resume_that_asks_for_another_precision_is_refused_and_changes_nothing(tmp_path, monkeypatch):
    run = train(tmp_path, "device=cpu", "train.max_steps=2", "train.precision=bf16")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    monkeypatch.chdir(tmp_path)
    code, stderr = posenc("train", f"train.resume={run}", "train.precision=fp32")
    assert_refused(code, stderr, "train.precision=fp32", "computes in bf16-autocast", "drop train.precision")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_eval_footnotes_a_table_whose_runs_computed_in_different_precisions(tmp_path):
    for scheme, precision in (("alibi", "fp32"), ("rope", "bf16")):
        train(tmp_path, f"scheme={scheme}", f"train.precision={precision}", run=f"runs/{precision}")
    df = evaluate(tmp_path, "runs/fp32", "runs/bf16", "--lengths", "128")
    assert sorted(df["precision"].unique()) == ["bf16-autocast", "fp32"]
    notes = (tmp_path / "eval" / "comparison.md").read_text()
    assert "trained in different precisions: bf16-autocast (rope); fp32 (alibi)" in notes
    same = evaluate(tmp_path, "runs/fp32", "--lengths", "128", out="eval-one")
    assert list(same["precision"].unique()) == ["fp32"]
    assert "different precisions" not in (tmp_path / "eval-one" / "comparison.md").read_text()
    assert isinstance(pd.read_csv(tmp_path / "eval" / "ppl.csv")["precision"][0], str)


@pytest.mark.parametrize("precision", ["auto", "fp32"])
def test_an_unknown_cpu_bf16_answer_is_one_line_whatever_precision_is_asked_for(tmp_path, precision):
    result = run_cli(
        "train", *SMOKE, f"train.precision={precision}", cwd=tmp_path, env={"POSENC_CPU_BF16": "maybe"}
    )
    assert_one_line_error(result, "POSENC_CPU_BF16=maybe", "native, emulated")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    "recorded, read",
    [
        ("fp32", "fp32"),
        ("bf16-autocast", "bf16-autocast"),
        ("bf16-autocast-fp32-attention", "bf16-autocast-fp32-attention"),
        (None, "unrecorded"),
        ("fp16", "unrecorded"),
        (["fp32"], "unrecorded"),
    ],
)
def test_a_runs_training_precision_is_read_only_from_what_posenc_writes(recorded, read):
    from posenc_cli.rundir.loading import LoadedRun

    checkpoint = SimpleNamespace(record=SimpleNamespace(precision=recorded))
    assert LoadedRun(Path("run"), None, None, 1, {}, checkpoint).training_precision == read
