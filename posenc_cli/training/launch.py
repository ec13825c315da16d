"""`posenc train ARGS`'s work (the command and posenc.train call it): the pre-flight, the directory
claimed, torchrun's group joined, and the jobs run, each on the composition and the config the
pre-flight made and validated; a sweep ends with one line saying where its runs are."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig

from posenc_cli.config.hydra_args import (
    composing,
    first_sweep_point,
    parse_hydra_args,
    print_sweep,
    sweep_points,
    with_layer_options,
)
from posenc_cli.config.hydra_jobs import launched, runs_jobs_here
from posenc_cli.config.train_request import TrainRequest
from posenc_cli.core import ui
from posenc_cli.rundir.claim import claim
from posenc_cli.rundir.layout import holds_run
from posenc_cli.rundir.resume import resume_args
from posenc_cli.rundir.summary import finished
from posenc_cli.training import distributed
from posenc_cli.training.job import run_here, run_hydra_train, sweep_here
from posenc_cli.training.preflight import Job, Preflight, checked_job, preflight


def train_request(args: Sequence[str]) -> TrainRequest:
    """`posenc train ARGS` read once, into what everything past it takes: the layer options every scheme
    takes made Hydra's additions, a resume's target checked and its run's directory named, a rank's
    overrides under torchrun, and Hydra's parser run on the whole."""
    args = with_layer_options(list(args))
    args, resume = resume_args(args)
    rank = distributed.launched_rank()
    args = [*args, *distributed.rank_overrides(rank)]
    return TrainRequest(tuple(args), parse_hydra_args(args), resume, rank)


def train_with(args: Sequence[str], first: DictConfig | None = None) -> Path | None:
    """`posenc train ARGS`: the run or sweep directory it trained into; None when nothing trained (--cfg,
    --info). `first`: the first job's composition where the command made it before importing torch
    (check_first_point), which is then that job's."""
    request = train_request(args)
    unchanged = list(request.args) == with_layer_options(list(args))
    checked = preflight(request, first=first if unchanged else None)
    parsed = request.parsed
    if parsed.multirun and parsed.cfg:  # Hydra refuses -m with --cfg/--info; posenc answers both
        return print_sweep(parsed)
    if parsed.multirun and parsed.info:  # --info describes the app: the first job's composition
        request = request.first_point(first_sweep_point(parsed))
    if checked.directory is None:  # --cfg, --info, --help: Hydra's main answers
        run_hydra_train(request)
        return None
    with distributed.process_group(sweep=request.multirun):
        claimed = distributed.decided_by_rank_zero(lambda: claim(request, checked.directory))
        if checked.sweep is not None and not runs_jobs_here(checked.sweep):
            run_hydra_train(request, tuple(claimed))  # joblib, submitit: each job composes in its own process
        else:
            run_jobs(parsed, checked, claimed)
    if request.multirun and request.rank is None:
        announce_sweep(checked.directory)
    return checked.directory


def run_jobs(parsed: argparse.Namespace, checked: Preflight, claimed: list[str]) -> None:
    """The run, or the sweep's jobs one after another, in this process, each on what the pre-flight
    composed and validated (a job a large sweep's pre-flight did not check is composed and validated
    when its turn comes)."""
    with composing(parsed) as compose_point:

        def job_of(point: list[str]) -> Job:
            job = checked.jobs.pop(tuple(point), None) or checked_job(compose_point, point)
            launched(job.whole, parsed, claimed)
            return job

        if checked.sweep is None:
            return run_here(job_of(parsed.overrides))
        launched(checked.sweep, parsed, claimed)
        sweep_here(checked.sweep, list(sweep_points(parsed.overrides, every=True)), job_of)


def announce_sweep(directory: Path) -> None:
    """The line a sweep ends with: how many runs, where, and the command that evaluates them."""
    runs = [p for p in sorted(directory.iterdir()) if p.is_dir() and holds_run(p)]
    done = sum(finished(run) for run in runs)
    ui.err.print(
        f"{len(runs)} runs in {directory} ({done} finished); evaluate them: posenc eval {shlex.quote(str(directory))}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
