"""The Hydra job: what `posenc train` runs for each run of a sweep (or the one run). In this process (a
run, a sweep through Hydra's basic launcher) through Hydra's own run_job, with the composition and the
config the pre-flight made and validated; under other launchers through hydra.main, each job validating
its own composition."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Callable, Iterator

import hydra
from hydra._internal.callbacks import Callbacks
from hydra._internal.utils import run_and_report
from hydra.core import utils as hydra_utils
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from posenc_cli.config.location import config_dir
from posenc_cli.config.schema import PosencConfig, anchored_paths
from posenc_cli.config.train_request import TrainRequest
from posenc_cli.core.atomic import write_text
from posenc_cli.core.errors import UsageError
from posenc_cli.core.ui import fail
from posenc_cli.rundir.summary import RunStatus
from posenc_cli.training.distributed import threads_per_job
from posenc_cli.training.loop import train as train_run
from posenc_cli.training.preflight import Job, validate
from posenc_cli.training.tracking import hparams_of, run_name

log = logging.getLogger(__name__)


def train_job(config: PosencConfig) -> float | None:
    """One job, under Hydra's run_job: `config` trained into the job's directory."""
    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    # torch threads: a share of the cores where the launcher runs jobs side by side
    config.train.threads = config.train.threads or threads_per_job(hydra_cfg.launcher)
    output_dir = Path(hydra_cfg.runtime.output_dir)
    name = run_name(overrides, output_dir, hydra_cfg.mode == RunMode.MULTIRUN)
    try:
        summary = train_run(
            config, output_dir, name, hparams=hparams_of(overrides, dataclasses.asdict(config))
        )
    except UsageError as err:
        fail(err)
    if summary.status is RunStatus.FAILED and hydra_cfg.mode == RunMode.RUN:
        raise SystemExit(1)  # in a sweep the other jobs go on; eval skips this one
    return summary.outcome.final_val_loss if summary.outcome else None


def run_here(job: Job) -> None:
    """Hydra's run (Hydra.run) of a composition already made: Hydra's logging, callbacks, directory and
    .hydra/ files, the job trained on the config the pre-flight validated."""
    whole = job.whole
    configure_log(whole.hydra.hydra_logging, whole.hydra.verbose)
    callbacks = Callbacks(whole)
    callbacks.on_run_start(config=whole, config_name=whole.hydra.job.config_name)
    ret = run_hydra_job(job, callbacks, sweep=False)
    callbacks.on_run_end(config=whole, config_name=whole.hydra.job.config_name, job_return=ret)
    reported(ret)


def sweep_here(sweep: DictConfig, points: list[list[str]], job_of: Callable[[list[str]], Job]) -> None:
    """Hydra's basic sweeper and launcher over jobs composed already (`job_of` a point): the sweep's
    multirun.yaml, then each job in turn in its own subdirectory; a job's exception is raised once all
    have run."""
    configure_log(sweep.hydra.hydra_logging, sweep.hydra.verbose)
    callbacks = Callbacks(sweep)
    callbacks.on_multirun_start(config=sweep, config_name=sweep.hydra.job.config_name)
    save_hydra_file(sweep, "multirun.yaml", Path(sweep.hydra.sweep.dir))
    log.info(f"Launching {len(points)} jobs locally")
    returns = []
    for n, point in enumerate(points):
        job = job_of(point)
        log.info(f"\t#{n} : {' '.join(filter_overrides(list(job.whole.hydra.overrides.task)))}")
        OmegaConf.copy_cache(from_config=sweep, to_config=job.whole)  # ${now:...} as in the sweep's
        with read_write(job.whole.hydra), open_dict(job.whole):
            job.whole.hydra.job.id = job.whole.hydra.job.num = n
        returns.append(run_hydra_job(job, callbacks, sweep=True))
        configure_log(sweep.hydra.hydra_logging, sweep.hydra.verbose)  # the launcher's, not the job's
    for ret in returns:
        reported(ret)
    callbacks.on_multirun_end(config=sweep, config_name=sweep.hydra.job.config_name)


def reported(ret: JobReturn) -> None:
    """A job's exception as Hydra's main reports it: its traceback from the job down, exit 1."""
    run_and_report(lambda: ret.return_value)


def run_hydra_job(job: Job, callbacks: Callbacks, *, sweep: bool) -> JobReturn:
    """Hydra's run_job over the job's composition, its .hydra/ files written atomically."""
    context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=callbacks)
    with hydra_record_written_atomically():
        return run_job(
            task_function=lambda _: train_job(job.config),
            config=job.whole,
            job_dir_key="hydra.sweep.dir" if sweep else "hydra.run.dir",
            job_subdir_key="hydra.sweep.subdir" if sweep else None,
            hydra_context=context,
        )


def run_hydra_train(request: TrainRequest, claimed: tuple[str, ...] = ()) -> None:
    """Hydra's main over the request's arguments (and the claim's override), for --cfg, --info and --help,
    and for launchers that run each job elsewhere (joblib, submitit): each job composes and validates its
    own config, then trains it."""

    def job(cfg: DictConfig) -> float | None:
        try:
            config = validate(anchored_paths(OmegaConf.to_container(cfg, resolve=True)))
        except UsageError as err:
            fail(err)
        return train_job(config)

    argv = sys.argv
    sys.argv = ["posenc train", *request.args, *claimed]
    try:
        with hydra_record_written_atomically():
            hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(job)()
    finally:
        sys.argv = argv  # the caller's own argv again (a notebook's, after posenc.train)


@contextlib.contextmanager
def hydra_record_written_atomically() -> Iterator[None]:
    """Hydra writes a job's .hydra/ files (config, hydra, overrides) with a plain open(): on a full disk
    it left an empty config.yaml and its own traceback. Hydra's writer (hydra.core.utils._save_config,
    the one function run_job calls for them) is posenc's atomic write while Hydra runs here: each file
    whole or absent, and a disk that refuses one is one line naming it (exit 2)."""
    hydra_save = hydra_utils._save_config
    hydra_utils._save_config = save_hydra_file
    try:
        yield
    finally:
        hydra_utils._save_config = hydra_save


def save_hydra_file(cfg: DictConfig, filename: str, output_dir: Path) -> None:
    """One .hydra/ file as Hydra writes it (its YAML), through core.atomic."""
    try:
        write_text(Path(output_dir) / filename, OmegaConf.to_yaml(cfg))
    except UsageError as err:  # raised inside Hydra, which would print any Exception as a traceback
        fail(err)
