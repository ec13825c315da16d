"""The Hydra job: what `posenc train` runs for each run of a sweep (or the one run), under hydra.main."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import hydra
from hydra.core import utils as hydra_utils
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from posenc_cli.config.location import config_dir
from posenc_cli.config.schema import anchored_paths
from posenc_cli.core.atomic import write_text
from posenc_cli.core.errors import UsageError
from posenc_cli.core.ui import fail
from posenc_cli.rundir.resume import resumed_config
from posenc_cli.rundir.summary import RunStatus
from posenc_cli.training.distributed import threads_per_job
from posenc_cli.training.loop import train as train_run
from posenc_cli.training.preflight import validate
from posenc_cli.training.tracking import hparams_of, run_name


def run_hydra_train() -> None:
    """Hydra's main over sys.argv (set by `posenc train`): each job trains one run directory."""

    def job(cfg: DictConfig) -> float | None:
        hydra_cfg = HydraConfig.get()
        config = anchored_paths(OmegaConf.to_container(cfg, resolve=True))
        if config["train"]["resume"]:
            config = resumed_config(config, list(hydra_cfg.overrides.task))
        config["train"]["threads"] = config["train"]["threads"] or threads_per_job(hydra_cfg.launcher)
        output_dir = Path(hydra_cfg.runtime.output_dir)
        name = run_name(list(hydra_cfg.overrides.task), output_dir, hydra_cfg.mode == RunMode.MULTIRUN)
        try:
            typed = validate(config)  # a large sweep's pre-flight checked every value, not every combination
            summary = train_run(
                typed, output_dir, name, hparams=hparams_of(list(hydra_cfg.overrides.task), config)
            )
        except UsageError as err:
            fail(err)
        if summary.status is RunStatus.FAILED and hydra_cfg.mode == RunMode.RUN:
            raise SystemExit(1)  # in a sweep the other jobs go on; eval skips this one
        return summary.outcome.final_val_loss if summary.outcome else None

    with hydra_record_written_atomically():
        hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(job)()


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
