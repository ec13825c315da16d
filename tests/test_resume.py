"""Stopping and resuming training: a killed (SIGKILL) or interrupted (Ctrl-C) run resumes to exactly the
run that was never stopped; a diverging run stops as failed with its last good checkpoint, which eval
skips; a checkpoint cannot run code when it is loaded. Real processes: the signals are the subject.
Ownership of run directories and refused resumes are in test_runs.py."""

from __future__ import annotations

import copy
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import ROOT, SMOKE, assert_refused, invoke, posenc, run_cli
from posenc_cli.core.errors import UsageError
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.record import load_checkpoint

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out

# Misaligned intervals on purpose: checkpoints land between log lines and between evals.
FAULT = [
    *SMOKE,
    "device=cpu",
    "train.threads=1",
    "train.max_steps=60",
    "train.log_interval=2",
    "train.eval_interval=5",
    "train.checkpoint_interval=3",
]
DETERMINISTIC = ["step", "train_loss", "val_loss", "lr", "grad_norm"]  # tokens_per_s is wall-clock


def start_cli(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "posenc_cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def checkpoint_mtime(run: Path) -> int | None:
    try:
        return (run / CHECKPOINT).stat().st_mtime_ns
    except FileNotFoundError:
        return None


def wait_for_new_checkpoint(
    run: Path, before: int | None, proc: subprocess.Popen, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while checkpoint_mtime(run) == before and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)


def tensors(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in a nested state dict, by its path."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    items = (
        tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, (list, tuple)) else []
    )
    return {k: v for key, value in items for k, v in tensors(value, f"{prefix}/{key}").items()}


def assert_same_training(reference: Path, run: Path) -> None:
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    ref, got = load_checkpoint(reference / CHECKPOINT), load_checkpoint(run / CHECKPOINT)
    assert got.step == ref.step
    for part in ("model", "optimizer"):
        ref_t, got_t = tensors(getattr(ref, part)), tensors(getattr(got, part))
        assert ref_t.keys() == got_t.keys()
        different = [k for k in ref_t if not torch.equal(ref_t[k], got_t[k])]
        assert not different, f"{part} differs at {different[:5]}"
    pd.testing.assert_frame_equal(
        pd.read_csv(reference / "metrics.csv")[DETERMINISTIC],
        pd.read_csv(run / "metrics.csv")[DETERMINISTIC],
        check_exact=True,
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The same run, never stopped."""
    cwd = tmp_path_factory.mktemp("reference")
    result = run_cli("train", *FAULT, f"hydra.run.dir={cwd / 'run'}", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert list(cwd.iterdir()) == [cwd / "run"]  # nothing written outside the run directory
    return cwd / "run"


def test_sigkill_at_random_points_then_resume_gives_identical_weights_and_metrics(reference, tmp_path):
    rng, run = random.Random(0), tmp_path / "run"
    proc = start_cli("train", *FAULT, f"hydra.run.dir={run}", cwd=tmp_path)
    killed_at = []
    for _ in range(3):
        wait_for_new_checkpoint(run, checkpoint_mtime(run) if killed_at else None, proc)
        time.sleep(rng.uniform(0.0, 0.15))  # anywhere: mid-step, mid-eval, mid-checkpoint-write
        proc.kill()
        proc.communicate()
        killed_at.append(load_checkpoint(run / CHECKPOINT).step)
        proc = start_cli("train", f"train.resume={run}", cwd=tmp_path)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert "resumed from" in (run / "train.log").read_text()
    assert killed_at[0] < 60, f"the first kill should land mid-run, checkpoints were at steps {killed_at}"
    print(f"SIGKILLed with the last checkpoint at steps {killed_at}")
    assert_same_training(reference, run)
    assert not list(run.glob(".*.tmp"))  # half-written temporaries of killed writes are cleaned up


@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
def test_ctrl_c_saves_says_how_to_resume_and_resume_matches(reference, tmp_path):
    run = tmp_path / "run"
    proc = start_cli("train", *FAULT, f"hydra.run.dir={run}", cwd=tmp_path)
    wait_for_new_checkpoint(run, None, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert f"checkpoint saved. Resume with: posenc train train.resume={run}" in stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert load_checkpoint(run / CHECKPOINT).step == summary["steps"] < 60  # saved where it stopped

    result = run_cli("train", f"train.resume={run}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_same_training(reference, run)


def test_non_finite_loss_fails_the_run_keeps_the_last_good_checkpoint_and_eval_names_it_unscored(
    reference, tmp_path, monkeypatch
):
    run = tmp_path / "diverged"
    result = run_cli(
        "train", *FAULT, "train.lr=1e6", "train.checkpoint_interval=1", f"hydra.run.dir={run}", cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed"
    bad_step = int(summary["message"].split(" at step ")[1].split(";")[0])
    assert f"at step {bad_step}" in result.stderr
    kept = load_checkpoint(run / CHECKPOINT)
    assert kept.step == bad_step - 1
    assert all(torch.isfinite(t).all() for t in tensors(kept.model).values())

    monkeypatch.chdir(tmp_path)
    options = [
        "--lengths",
        "64,128",
        "--max-tokens",
        "256",
        "--out",
        str(tmp_path / "eval"),
        "--device",
        "cpu",
    ]
    evaluated = invoke("eval", str(run), str(reference), *options)
    assert evaluated.code == 0, evaluated.stderr
    assert f"skipping {run}: its status is failed" in " ".join(evaluated.stderr.split())
    assert set(pd.read_csv(tmp_path / "eval" / "ppl.csv")["run"]) == {str(reference)}
    for table in ("comparison.md", "ppl.md"):  # the run named is in the output set, and why it is not scored
        text = " ".join((tmp_path / "eval" / table).read_text().split())
        assert f"not scored: {run}, its status is failed: training stopped: the loss became" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "diverged",
        "eval",
    ]  # nothing outside --out and the run


class RunsCode:
    """Pickles to a call that writes a file: what a hostile checkpoint would carry."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def test_a_checkpoint_crafted_to_run_code_is_refused_and_the_code_never_runs(reference, tmp_path):
    marker = tmp_path / "payload-ran"
    run = tmp_path / "hostile"
    run.mkdir()
    (run / "summary.json").write_text((reference / "summary.json").read_text())
    payload = {**torch.load(reference / CHECKPOINT, weights_only=True), "optimizer": RunsCode(marker)}
    torch.save(payload, run / CHECKPOINT)

    with pytest.raises(UsageError, match="refused"):
        load_checkpoint(run / CHECKPOINT)
    assert_refused(
        *posenc("eval", str(run), "--lengths", "64", "--out", str(tmp_path / "eval")),
        str(run / CHECKPOINT),
        "refused",
    )
    assert not marker.exists(), "loading the checkpoint ran its code"
    assert not (tmp_path / "eval").exists()

    torch.load(run / CHECKPOINT, weights_only=False)  # the control: an unsafe load does run it
    assert marker.read_text() == "ran"


def test_a_checkpoint_from_before_fused_adamw_resumes_exactly_on_the_path_it_was_trained_on():
    """Training uses fused AdamW where torch has it (faster, equal to ~1e-7 but not bitwise). A checkpoint
    saved by the for-loop AdamW carries that choice in its param groups, so resuming it stays exact."""
    from posenc_cli.config.schema import TrainConfig
    from posenc_cli.model import GPT, ModelConfig, token_nll
    from posenc_cli.training.session import make_optimizer

    tc = TrainConfig(lr=1e-2, weight_decay=0.1)
    torch.manual_seed(0)
    old = GPT(ModelConfig(vocab_size=11, block_size=8))
    x = torch.randint(0, 11, (4, 8))

    def step(model, optimizer):
        optimizer.zero_grad()
        token_nll(model(x), x).mean().backward()
        optimizer.step()

    assert make_optimizer(old, tc).param_groups[0]["fused"]  # torch >= 2.4 has it on CPU
    groups = [  # make_optimizer's groups, as before it asked for fused=True
        {"params": [p for p in old.parameters() if p.dim() >= 2], "weight_decay": tc.weight_decay},
        {"params": [p for p in old.parameters() if p.dim() < 2], "weight_decay": 0.0},
    ]
    old_optimizer = torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95))
    for _ in range(2):
        step(old, old_optimizer)
    resumed = GPT(ModelConfig(vocab_size=11, block_size=8))
    resumed.load_state_dict(old.state_dict())
    optimizer = make_optimizer(resumed, tc)
    optimizer.load_state_dict(copy.deepcopy(old_optimizer.state_dict()))  # as a checkpoint holds it
    step(old, old_optimizer)
    step(resumed, optimizer)
    assert all(torch.equal(a, b) for a, b in zip(old.parameters(), resumed.parameters()))
