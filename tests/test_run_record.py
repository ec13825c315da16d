"""The run record (rundir.record): a checkpoint reads back as the record and state it was saved with,
an old (version 1) checkpoint migrates, and every damaged field is one line naming the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.rundir.record import (
    FORMAT,
    VERSION,
    Checkpoint,
    RunRecord,
    check_own_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from posenc_cli.rundir.summary import RunStatus, RunSummary

RECORD = RunRecord(
    run_id="abc",
    model_config={"vocab_size": 3, "scheme": "rope"},
    tokenizer={"kind": "char", "chars": ["a", "b", "c"]},
    train_len=8,
    data={"name": "synthetic", "seed": 0},
    seed=1,
    corpus_sha256="f" * 64,
    precision="fp32",
    config={"seed": 1},
)


def checkpoint(**changes) -> Checkpoint:
    values = dict(
        record=RECORD,
        step=3,
        elapsed=1.5,
        metrics=[{"step": 1, "train_loss": 2.0}],
        recent_losses=torch.tensor([1.0, 2.0]),
        train_loss=2.0,
        model={"w": torch.arange(4.0)},
        optimizer={"state": {}, "param_groups": []},
        data_rng=torch.Generator().get_state(),
        torch_rng=torch.get_rng_state(),
    )
    return Checkpoint(**{**values, **changes})


def test_a_checkpoint_reads_back_as_the_record_and_state_it_was_saved_with(tmp_path):
    saved = checkpoint()
    save_checkpoint(tmp_path / "c.pt", saved)
    got = load_checkpoint(tmp_path / "c.pt")
    assert got.record == RECORD
    assert (got.step, got.elapsed, got.metrics, got.train_loss) == (3, 1.5, saved.metrics, 2.0)
    assert torch.equal(got.model["w"], saved.model["w"]) and torch.equal(
        got.recent_losses, saved.recent_losses
    )
    assert torch.equal(got.data_rng, saved.data_rng) and torch.equal(got.torch_rng, saved.torch_rng)
    assert torch.load(tmp_path / "c.pt", weights_only=True)["version"] == VERSION


def test_a_version_1_checkpoint_migrates_its_flat_fields_and_its_character_list(tmp_path):
    flat = {
        "format": FORMAT,
        "version": 1,
        "model_config": RECORD.model_config,
        "vocab": ["a", "b", "c"],  # before tokenizers: a char run's characters
        "train_len": 8,
        "data": RECORD.data,
        "seed": 1,
        "model": {"w": torch.zeros(2)},
    }
    torch.save(flat, tmp_path / "old.pt")
    got = load_checkpoint(tmp_path / "old.pt")
    assert got.record.tokenizer == {"kind": "char", "chars": ["a", "b", "c"]}
    assert got.record.run_id is None and got.record.precision is None and got.record.config is None
    assert got.step == 0 and got.optimizer is None  # readable, but a resume refuses it


@pytest.mark.parametrize(
    "field, value",
    [
        ("train_len", "8"),
        ("train_len", True),
        ("train_len", 0),
        ("seed", 1.5),
        ("tokenizer", {"chars": ["a"]}),
        ("model_config", [1]),
        ("precision", ["fp32"]),
        ("run_id", 5),
        ("data", None),
    ],
)
def test_a_damaged_record_field_is_one_line_naming_the_file(tmp_path, field, value):
    save_checkpoint(tmp_path / "c.pt", checkpoint())
    payload = torch.load(tmp_path / "c.pt", weights_only=True)
    payload["record"][field] = value
    torch.save(payload, tmp_path / "c.pt")
    with pytest.raises(UsageError, match="c.pt is damaged"):
        load_checkpoint(tmp_path / "c.pt")


@pytest.mark.parametrize("field, value", [("step", "3"), ("model", [1]), ("metrics", None), ("data_rng", 5)])
def test_a_damaged_state_field_is_one_line_naming_the_file(tmp_path, field, value):
    save_checkpoint(tmp_path / "c.pt", checkpoint())
    payload = torch.load(tmp_path / "c.pt", weights_only=True)
    payload[field] = value
    torch.save(payload, tmp_path / "c.pt")
    with pytest.raises(UsageError, match=f"c.pt is damaged: its field '{field}'"):
        load_checkpoint(tmp_path / "c.pt")


@pytest.mark.parametrize("version", [0, 3, "2", None])
def test_a_checkpoint_of_an_unknown_version_is_refused(tmp_path, version):
    save_checkpoint(tmp_path / "c.pt", checkpoint())
    payload = torch.load(tmp_path / "c.pt", weights_only=True)
    payload["version"] = version
    torch.save(payload, tmp_path / "c.pt")
    with pytest.raises(UsageError, match="checkpoint version"):
        load_checkpoint(tmp_path / "c.pt")


@pytest.mark.parametrize(
    "theirs, ours, refused",
    [
        ("abc", "abc", False),
        ("abc", "xyz", True),
        ("abc", None, True),
        (None, "abc", True),
        (None, None, False),
    ],
)
def test_a_checkpoint_is_read_only_beside_the_summary_of_its_own_run(theirs, ours, refused):
    saved = checkpoint(record=RunRecord(**{**RECORD.__dict__, "run_id": theirs}))
    summary = RunSummary(status=RunStatus.RUNNING, run_id=ours)
    if refused:
        with pytest.raises(UsageError, match="belongs to another run"):
            check_own_checkpoint(Path("RUN"), saved, summary)
    else:
        check_own_checkpoint(Path("RUN"), saved, summary)


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("run_id", "other", "belongs to another run"),
        ("corpus_sha256", "0" * 64, "another corpus"),
        ("tokenizer", {"kind": "char", "chars": ["a", "c", "b"]}, "another tokenizer"),
        ("model_config", {"vocab_size": 3, "block_size": 8, "scheme": "alibi"}, "different model"),
    ],
)
def test_a_resume_refuses_a_checkpoint_whose_record_differs_from_the_one_it_rebuilt(field, value, needle):
    from posenc_cli.model import ModelConfig
    from posenc_cli.training.checkpoints import check_resumable

    now = RunRecord(
        **{
            **RECORD.__dict__,
            "model_config": ModelConfig(vocab_size=3, block_size=8, scheme="rope").to_dict(),
        }
    )
    check_resumable(now, now, Path("c.pt"))
    saved = RunRecord(**{**now.__dict__, field: value})
    with pytest.raises(UsageError, match=needle):
        check_resumable(saved, now, Path("c.pt"))


def test_a_record_edited_since_it_was_saved_is_refused_by_the_fingerprint_its_summary_keeps():
    from posenc_cli.rundir.record import record_sha256

    summary = RunSummary(run_id="abc", record_sha256=record_sha256(RECORD))
    check_own_checkpoint(Path("RUN"), checkpoint(), summary)
    for field, value in (
        ("seed", 7),
        ("train_len", 32),
        ("model_config", {"vocab_size": 3, "scheme": "alibi"}),
    ):
        edited = checkpoint(record=RunRecord(**{**RECORD.__dict__, field: value}))
        with pytest.raises(UsageError, match="holds another record"):
            check_own_checkpoint(Path("RUN"), edited, summary)
    resumed = RunRecord(**{**RECORD.__dict__, "config": {"seed": 1, "train": {"max_steps": 99}}})
    check_own_checkpoint(Path("RUN"), checkpoint(record=resumed), summary)  # a resume may lengthen it


def test_a_summary_whose_record_fingerprint_was_removed_is_refused_unless_the_run_is_older_or_running():
    summary = RunSummary(run_id="abc", status=RunStatus.FINISHED)
    with pytest.raises(UsageError, match="keeps no fingerprint"):
        check_own_checkpoint(Path("RUN"), checkpoint(), summary)
    running = dataclasses.replace(summary, status=RunStatus.RUNNING)
    check_own_checkpoint(Path("RUN"), checkpoint(), running)  # before its next save
    check_own_checkpoint(Path("RUN"), checkpoint(version=1), summary)  # written before fingerprints
