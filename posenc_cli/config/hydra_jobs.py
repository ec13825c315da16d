"""A job of `posenc train` as Hydra's run composes it, for the pre-flight and for running it in this
process: its own config, the directory it names, the overrides the claim adds, and whether Hydra's
launcher would run it here."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from posenc_cli.config.hydra_args import output_key, override_errors
from posenc_cli.core.errors import UsageError


def task_config(whole: DictConfig) -> dict[str, Any]:
    """A job's own config without Hydra's (as Hydra's run_job hands it to the task), resolved as in
    Hydra's run: ${hydra:...} included."""
    HydraConfig.instance().set_config(whole)
    task = copy.deepcopy(whole)
    with open_dict(task):
        del task["hydra"]
    with override_errors():
        return OmegaConf.to_container(task, resolve=True)  # type: ignore[return-value]


def launched(whole: DictConfig, parsed, claimed: list[str]) -> None:
    """A job's (or a sweep's) composition as Hydra's main composes it once the directory is claimed: the
    claim's override and the run mode applied, and recorded in hydra.overrides.hydra, as Hydra's
    composition applies and records them (its node is read-only once HydraConfig holds it)."""
    overrides = [*claimed, f"hydra.mode={(RunMode.MULTIRUN if parsed.multirun else RunMode.RUN).name}"]
    with read_write(whole.hydra):
        ConfigLoaderImpl._apply_overrides_to_config(
            OverridesParser.create().parse_overrides(overrides), whole
        )
        whole.hydra.overrides.hydra.extend(overrides)


BASIC = tuple(f"{cls.__module__}.{cls.__qualname__}" for cls in (BasicLauncher, BasicSweeper))


def runs_jobs_here(sweep: DictConfig) -> bool:
    """Whether Hydra's basic sweeper and launcher would run the sweep's jobs one after another in this
    process: posenc then runs the jobs it composed and checked itself (other launchers start them
    elsewhere, through Hydra's main)."""
    ours = (sweep.hydra.launcher.get("_target_"), sweep.hydra.sweeper.get("_target_"))
    return ours == BASIC and not sweep.hydra.sweeper.get("params")


def output_directory(whole: DictConfig, parsed) -> Path:
    """The directory the run's (or the sweep's) composition names; ${hydra:...} in a run's directory
    resolves as in Hydra's run."""
    if not parsed.multirun:
        HydraConfig.instance().set_config(whole)
    with override_errors():
        directory = Path(str(OmegaConf.select(whole, output_key(parsed))))
    if "${" in str(directory):  # an escaped \${...}: Hydra would resolve it again later
        raise UsageError(
            f"{output_key(parsed)}={directory} holds '${{', which Hydra reads as an "
            "interpolation when it writes there; give a directory name without it"
        )
    return directory


PER_JOB = {
    "${hydra:": "${hydra:...}",
    **{f"hydra.job.{k}": f"${{hydra.job.{k}}}" for k in ("override_dirname", "num", "id")},
}


def refuse_per_job_sweep_dir(whole: DictConfig) -> None:
    """A sweep's directory holds all its jobs, so it cannot be named by one job's values (Hydra refuses
    ${hydra:...} there; the first job's override_dirname would file every job under its name)."""
    raw = str(OmegaConf.to_container(whole.hydra.sweep, resolve=False)["dir"])
    named = next((shown for token, shown in PER_JOB.items() if token in raw), None)
    if named:
        raise UsageError(
            f"hydra.sweep.dir={raw} names one job's value ({named}), but a sweep's directory holds "
            "all its jobs; put per-job names in hydra.sweep.subdir"
        )
