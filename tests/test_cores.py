"""How `make demo`'s trainings share a machine's cores: one after another on 2 cores (side by side was
measured 6 % slower there), side by side through Hydra's joblib launcher from 4, each job with its share."""

from __future__ import annotations

import os

import pytest

from posenc_cli.core.cores import sweep_launcher, usable_cores
from posenc_cli.training.distributed import threads_per_job

JOBLIB = "hydra/launcher=joblib"


@pytest.mark.parametrize(
    ("cores", "jobs", "threads"),
    [(1, 1, None), (2, 1, None), (3, 1, None), (4, 2, 2), (8, 4, 2), (16, 5, 3)],
)
def test_the_demos_five_trainings_run_side_by_side_only_from_four_cores_each_with_its_share(
    cores, jobs, threads, monkeypatch
):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    overrides = sweep_launcher(5, usable_cores())
    if jobs == 1:
        assert overrides == [] and threads_per_job({}) is None  # the basic launcher: torch's default
    else:
        assert overrides == [JOBLIB, f"hydra.launcher.n_jobs={jobs}"]
        assert threads_per_job({"n_jobs": jobs}) == threads  # what each job's torch then uses


def test_a_sweep_never_runs_more_jobs_at_once_than_it_has_trainings():
    assert sweep_launcher(2, 16) == [JOBLIB, "hydra.launcher.n_jobs=2"]
    assert sweep_launcher(1, 16) == []


def test_without_joblibs_plugin_the_trainings_run_one_after_another(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert sweep_launcher(5, 16) == []
