"""`posenc train` end to end, as a user runs it: every scheme trains and leaves a complete run directory.

Bad overrides are in test_bad_inputs.py; stopping and resuming in test_resume.py."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
import yaml

from conftest import ALL_SCHEMES, BEYOND_CHAPTERS, SHARED_DATA, invoke, train
from posenc_cli.core.choices import CHAPTER_SCHEMES
from posenc_cli.core.device import effective_precision
from posenc_cli.model.positional import SCHEMES
from posenc_cli.rundir.loading import load_run

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out


@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
def test_every_scheme_trains_and_leaves_a_complete_run_directory(smoke_sweep):
    runs = sorted(p for p in smoke_sweep.iterdir() if p.is_dir())
    assert [json.loads((r / "summary.json").read_text())["scheme"] for r in runs] == ALL_SCHEMES
    for run in runs:
        for name in (
            ".hydra/config.yaml",
            ".hydra/overrides.yaml",
            "metrics.csv",
            "checkpoint.pt",
            "summary.json",
            "train.log",
        ):
            assert (run / name).is_file(), (run, name)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["train_len"] == 64 and summary["steps"] == 20
        assert summary["positional_params"] == (64 * 32 if summary["scheme"] == "learned" else 0)
        assert summary["total_params"] > summary["positional_params"]
        metrics = pd.read_csv(run / "metrics.csv")
        assert list(metrics.columns) == ["step", "train_loss", "val_loss", "lr", "tokens_per_s", "grad_norm"]
        assert metrics["step"].tolist() == [10, 20]
        assert summary["final_val_loss"] == pytest.approx(metrics["val_loss"].iloc[-1])
        # the run directory alone rebuilds the model
        loaded = load_run(run)
        assert loaded.scheme == summary["scheme"] and loaded.train_len == 64
        assert loaded.model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, len(loaded.tokenizer))
        config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
        assert config["scheme"]["name"] == summary["scheme"]


@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16-fp32-attention"])
def test_training_is_deterministic_for_a_seed(tmp_path, precision):
    for name in ("a", "b"):
        run = train(tmp_path, "scheme=rope", "seed=3", f"train.precision={precision}", run=f"out/{name}")
        recorded = json.loads((run / "summary.json").read_text())["precision"]
        assert recorded["effective"] == effective_precision(torch.device("cpu"), precision)
    a, b = (
        pd.read_csv(tmp_path / "out" / n / "metrics.csv").drop(columns="tokens_per_s") for n in ("a", "b")
    )
    pd.testing.assert_frame_equal(a, b)
    wa, wb = (load_run(tmp_path / "out" / n).model.state_dict() for n in ("a", "b"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_cfg_job_prints_the_composed_config_and_trains_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("train", "scheme=alibi", "model.n_layer=3", "--cfg", "job")
    assert result.code == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["scheme"]["name"] == "alibi" and config["model"]["n_layer"] == 3
    assert config["train"]["block_size"] == 256
    assert not (tmp_path / "outputs").exists()


def test_help_explains_the_config_groups():
    result = invoke("train", "--help")
    assert result.code == 0
    for word in ("scheme", "sinusoidal", "alibi", "model.n_layer", "train.block_size", "-m"):
        assert word in result.stdout
    listed = " | ".join([*CHAPTER_SCHEMES, *sorted(set(SCHEMES) - set(CHAPTER_SCHEMES))])
    assert (
        listed in result.stdout
    )  # the scheme group's yaml files (every scheme has one), the chapters' first


def test_text_corpus(tmp_path):
    text = tmp_path / "corpus.txt"
    # '!' and 'Z' occur only in the last 10%: the validation split, so they map to <unk>
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400 + "Zebra!", encoding="utf-8")
    train(tmp_path, "data=text", f"data.path={text}")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["corpus"] == "text"
    assert summary["corpus_val_unk_chars"] == 2
    run = load_run(tmp_path / "run")
    assert run.tokenizer.has_unk


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="../shared/data/tinyshakespeare.txt is not here")
def test_tiny_shakespeare(tmp_path):
    train(tmp_path, "data=text", f"data.path={SHARED_DATA}")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["vocab_size"] == 65
    assert summary["final_val_loss"] < summary["corpus_unigram_entropy_nats"] + 0.5


def test_the_schemes_beyond_the_chapters_train_end_to_end(beyond_chapters_sweep):
    summaries = [json.loads(p.read_text()) for p in sorted(beyond_chapters_sweep.glob("*/summary.json"))]
    assert sorted(s["scheme"] for s in summaries) == sorted(BEYOND_CHAPTERS)
    for summary in summaries:
        assert summary["status"] == "finished" and math.isfinite(summary["final_val_loss"])
