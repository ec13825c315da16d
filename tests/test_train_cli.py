"""`posenc train` end to end, as a user runs it."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
import yaml

from conftest import ALL_SCHEMES, SHARED_DATA, SMOKE, assert_one_line_error, run_cli
from posenc_cli.model.positional import SCHEMES
from posenc_cli.runs import load_run


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


def test_training_is_deterministic_for_a_seed(tmp_path):
    for name in ("a", "b"):
        result = run_cli("train", "scheme=rope", "seed=3", *SMOKE, f"hydra.run.dir=out/{name}", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    a, b = (
        pd.read_csv(tmp_path / "out" / n / "metrics.csv").drop(columns="tokens_per_s") for n in ("a", "b")
    )
    pd.testing.assert_frame_equal(a, b)
    wa, wb = (load_run(tmp_path / "out" / n).model.state_dict() for n in ("a", "b"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_cfg_job_prints_the_composed_config_and_trains_nothing(tmp_path):
    result = run_cli("train", "scheme=alibi", "model.n_layer=3", "--cfg", "job", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["scheme"]["name"] == "alibi" and config["model"]["n_layer"] == 3
    assert config["train"]["block_size"] == 256
    assert not (tmp_path / "outputs").exists()


def test_help_explains_the_config_groups(tmp_path):
    result = run_cli("train", "--help", cwd=tmp_path)
    assert result.returncode == 0
    for word in ("scheme", "sinusoidal", "alibi", "model.n_layer", "train.block_size", "-m"):
        assert word in result.stdout
    assert " | ".join(SCHEMES) in result.stdout  # listed from the scheme classes, in their order


@pytest.mark.parametrize(
    "overrides, needles",
    [
        (["scheme=fourier"], ["scheme/fourier", "alibi", "rope"]),
        (["scheme=rope", "model.n_embd=12", "model.n_head=4"], ["even head_dim", "12/4"]),
        (["model.n_embd=30", "model.n_head=4"], ["model.n_embd=30", "not divisible"]),
        (["data=text", "data.path=no/such/file.txt"], ["data.path=no/such/file.txt", "does not exist"]),
        (["train.max_steps=0"], ["train.max_steps", "positive integer"]),
        (["model.no_such_key=1"], ["no_such_key"]),
        (["train.block_size=300000"], ["train.block_size=300000", "validation split"]),
    ],
)
def test_bad_overrides_get_one_clear_line_and_exit_2(tmp_path, overrides, needles):
    result = run_cli("train", *overrides, cwd=tmp_path)
    assert_one_line_error(result, *needles)
    assert not (tmp_path / "outputs").exists()


def test_a_bad_point_in_a_sweep_is_caught_before_any_job_runs(tmp_path):
    result = run_cli(
        "train", "-m", "scheme=rope,alibi", "model.n_embd=12", "model.n_head=4", *SMOKE, cwd=tmp_path
    )
    assert_one_line_error(result, "even head_dim")
    assert not (tmp_path / "outputs").exists()


def test_text_corpus(tmp_path):
    text = tmp_path / "corpus.txt"
    # '!' and 'Z' occur only in the last 10%: the validation split, so they map to <unk>
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400 + "Zebra!", encoding="utf-8")
    result = run_cli("train", "data=text", f"data.path={text}", *SMOKE, "hydra.run.dir=run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["corpus"] == "text"
    assert summary["corpus_val_unk_chars"] == 2
    run = load_run(tmp_path / "run")
    assert run.tokenizer.has_unk


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="../shared/data/tinyshakespeare.txt is not here")
def test_tiny_shakespeare(tmp_path):
    result = run_cli(
        "train", "data=text", f"data.path={SHARED_DATA}", *SMOKE, "hydra.run.dir=run", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["vocab_size"] == 65
    assert summary["final_val_loss"] < summary["corpus_unigram_entropy_nats"] + 0.5


@pytest.mark.parametrize(
    "content, needle", [(b"", "empty"), (b"\x00\x01\x02abc", "binary"), (b"caf\xe9 au lait", "UTF-8")]
)
def test_unusable_text_files(tmp_path, content, needle):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    assert_one_line_error(run_cli("train", "data=text", f"data.path={bad}", cwd=tmp_path), needle)
