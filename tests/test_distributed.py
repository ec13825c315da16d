"""DDP under torchrun on CPU (gloo): two ranks stay identical, and follow the single-process run with
the same global batch (train.batch_size is global; each rank trains on its half of every batch), to a
tolerance set by the precision the runs computed in. The runs see a CPU with native bf16, so a run that
stopped pinning its precision would compute in bf16 autocast and fail the check of what it recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from conftest import ROOT, SMOKE, run_cli
from posenc_cli.core.device import CPU_BF16_ENV
from posenc_cli.rundir.layout import CHECKPOINT
from posenc_cli.rundir.record import load_checkpoint

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out

STEPS = 6
ARGS = [
    *SMOKE,
    "device=cpu",
    "train.threads=1",
    f"train.max_steps={STEPS}",
    "train.batch_size=8",
    "train.log_interval=2",
    "train.eval_interval=3",
    "train.checkpoint_interval=3",
]
# float sums in another order (DDP averages two half-batch gradients): measured ~1e-6 in fp32; in bf16
# autocast every matmul rounds to 8 bits of mantissa, so the two orders part by ~1e-3 of a value
TOLERANCE = {"fp32": 1e-4, "bf16-autocast": 2e-2}

# Every rank also dumps its own weights at each checkpoint, so the test can compare ranks; the
# training itself is the real CLI, unchanged.
RANK_DUMP = """
import sys, torch
from posenc_cli.cli import main as cli
from posenc_cli.training import loop as train
real_save = train.save
def save(s, elapsed):
    real_save(s, elapsed)
    torch.save(s.model.state_dict(), f"DUMPS/rank{s.ctx.rank}_step{s.state.step}.pt")
train.save = save
cli.main()
"""


@pytest.mark.parametrize("precision, effective", [("fp32", "fp32")])  # bf16 is tested in test_precision.py
def test_two_gloo_ranks_match_each_other_and_the_single_process_run(
    tmp_path, monkeypatch, precision, effective
):
    monkeypatch.setenv(CPU_BF16_ENV, "native")  # what auto would answer on an AMX machine
    args = [*ARGS, f"train.precision={precision}"]
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    script = tmp_path / "ranks.py"
    script.write_text(RANK_DUMP.replace("DUMPS", str(dumps)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            "train",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]

    (run,) = (tmp_path / "outputs" / "runs").iterdir()  # both ranks agreed on one run directory
    assert sorted(p.name for p in run.iterdir()) == [
        ".hydra",
        ".lock",
        CHECKPOINT,
        "metrics.csv",
        "summary.json",
        "train.log",
    ]
    assert ddp.stderr.count("val loss") == 1, ddp.stderr  # only rank 0 reports
    for step in (3, STEPS):
        rank0, rank1 = (torch.load(dumps / f"rank{r}_step{step}.pt") for r in (0, 1))
        assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), f"ranks differ at step {step}"

    single = run_cli("train", *args, f"hydra.run.dir={tmp_path / 'single'}", cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    for directory in (run, tmp_path / "single"):  # the tolerance is the one of the precision they ran in
        assert json.loads((directory / "summary.json").read_text())["precision"]["effective"] == effective
    tolerance = TOLERANCE[effective]
    ours, theirs = pd.read_csv(run / "metrics.csv"), pd.read_csv(tmp_path / "single" / "metrics.csv")
    assert list(ours["step"]) == list(theirs["step"]) == [2, 3, 4, 6]  # log every 2 steps, validate every 3
    for column in ("train_loss", "val_loss", "grad_norm"):
        assert (ours[column] - theirs[column]).abs().max() < tolerance, (column, ours[column], theirs[column])
        assert ours[column].isna().equals(theirs[column].isna()), column
    weights, reference = (
        load_checkpoint(run / CHECKPOINT).model,
        load_checkpoint(tmp_path / "single" / CHECKPOINT).model,
    )
    assert max(float((weights[k] - reference[k]).abs().max()) for k in weights) < tolerance
