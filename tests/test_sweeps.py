"""Sweeps through real Hydra launchers: parallel jobs split the cores, a sweep directory is an eval
input whose seeds are aggregated, and a crashed job is reported while the others are evaluated."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from conftest import SMOKE, evaluate, invoke, run_cli
from posenc_cli.training.distributed import threads_per_job

pytestmark = pytest.mark.slow  # trains or starts real processes: `make test-fast` leaves it out

TINY = [*SMOKE, "device=cpu", "train.max_steps=4", "train.eval_interval=2", "train.log_interval=2"]
CORES = len(os.sched_getaffinity(0))


def test_parallel_jobs_split_the_cores_between_them(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert threads_per_job({"n_jobs": 2}) == 4
    assert threads_per_job({"n_jobs": 3}) == 2
    assert threads_per_job({"n_jobs": -1}) == 1  # joblib: one job per core
    assert threads_per_job({"n_jobs": -2}) == 1  # all cores but one: 7 jobs
    assert threads_per_job({"n_jobs": 16}) == 1  # never zero
    assert (
        threads_per_job({"cpus_per_task": 3, "tasks_per_node": 1}) == 3
    )  # submitit: what the scheduler gave
    assert threads_per_job({}) is None  # the basic launcher runs one job at a time: torch's default
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert threads_per_job({}) == 4  # two torchrun ranks on this machine


def test_joblib_sweep_runs_in_parallel_and_evaluates_as_one_input(tmp_path, monkeypatch):
    result = run_cli(
        "train",
        "-m",
        *TINY,
        "scheme=rope",
        "seed=0,1",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (sweep,) = (tmp_path / "outputs" / "sweeps").iterdir()
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in runs] == ["0_rope_seed0", "1_rope_seed1"]
    summaries = [json.loads((run / "summary.json").read_text()) for run in runs]
    assert [s["status"] for s in summaries] == ["finished", "finished"]
    assert {s["threads"] for s in summaries} == {max(1, CORES // 2)}
    assert summaries[0]["final_val_loss"] != summaries[1]["final_val_loss"]  # the seeds differ
    last = result.stderr.strip().splitlines()[-1]  # the sweep's last word: how many, where, what next
    assert (
        last.startswith("2 runs in ")
        and "(2 finished)" in last
        and last.endswith(f"posenc eval {sweep.relative_to(tmp_path)}")
    )

    ppl = evaluate(tmp_path, str(sweep), "--lengths", "64,128", "--max-tokens", "256", "--device", "cpu")
    assert sorted(ppl["seed"].unique()) == [0, 1]
    table = (tmp_path / "eval" / "ppl.md").read_text()
    assert "| rope | 2 |" in table and "±" in table  # one row, two seeds, mean ± std

    # a job killed mid-run leaves status "running": the others are evaluated, it is named and skipped
    crashed = runs[1] / "summary.json"
    crashed.write_text(json.dumps({**summaries[1], "status": "running"}))
    monkeypatch.chdir(tmp_path)
    options = ["--lengths", "64", "--max-tokens", "128", "--device", "cpu", "--out", str(tmp_path / "eval2")]
    evaluated = invoke("eval", str(sweep), *options)
    assert evaluated.code == 0, evaluated.stderr
    assert f"skipping {runs[1]}: its status is running" in " ".join(evaluated.stderr.split())
    assert set(pd.read_csv(tmp_path / "eval2" / "ppl.csv")["seed"]) == {0}


def test_submitit_local_sweep(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    result = run_cli(
        "train",
        "-m",
        *TINY,
        "scheme=alibi,none",
        "hydra/launcher=submitit_local",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.timeout_min=5",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (sweep,) = (tmp_path / "outputs" / "sweeps").iterdir()
    summaries = [
        json.loads((sweep / name / "summary.json").read_text()) for name in ("0_alibi_seed0", "1_none_seed0")
    ]
    assert [(s["scheme"], s["status"], s["threads"]) for s in summaries] == [
        ("alibi", "finished", 1),
        ("none", "finished", 1),
    ]
