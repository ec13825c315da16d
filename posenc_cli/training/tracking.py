"""Where a run's numbers go: metrics.csv always, plus the trackers the `logger` config group picks.

The training loop talks to one `RunLogger` (config at the start, a metrics row per log interval,
the summary at the end); `open_loggers` builds it from the config. Trackers get Lightning-style tags
(`train/loss`, `val/loss`; metrics.csv keeps its columns), TensorBoard the run's HParams (its overrides,
compared on its final val/loss), and a W&B run the posenc run id as its own, so that eval and probe
(`send_results`) resume it later. TensorBoard and Weights & Biases are optional packages
(`pip install 'posenc[track]'`), imported only when chosen.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from posenc_cli.core import ui
from posenc_cli.core.atomic import write_text
from posenc_cli.core.errors import UsageError
from posenc_cli.core.install import install_hint
from posenc_cli.rundir.layout import METRICS
from posenc_cli.rundir.summary import RunSummary

COLUMNS = ("step", "train_loss", "val_loss", "lr", "tokens_per_s", "grad_norm")
TAGS = {  # metrics.csv column -> the trackers' tag, grouped Lightning-style
    "train_loss": "train/loss",
    "val_loss": "val/loss",
    "lr": "train/lr",
    "tokens_per_s": "train/tokens_per_s",
    "grad_norm": "train/grad_norm",
}
HPARAMS_METRIC = "val/loss"  # what TensorBoard's HParams view compares a sweep's runs on: its last value
HParam = bool | int | float | str
WANDB_MODES = ("online", "offline", "disabled")
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}  # logger name -> module it needs


@dataclass(frozen=True)
class TrackedResults:
    """What an eval or probe sends to one run's trackers: scalars by tag (`eval/ppl@1024`), figures by
    tag (PNG files), all at the step of the checkpoint it scored."""

    step: int
    scalars: dict[str, float]
    figures: dict[str, Path] = field(default_factory=dict)


class RunLogger:
    """What the training loop reports to. The base class ignores everything; trackers override."""

    def log_config(self, config: Mapping[str, Any]) -> None:
        pass

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        """One row: `step` plus the values measured at that step (None where not measured)."""

    def log_summary(self, summary: RunSummary) -> None:
        pass

    def log_results(self, results: TrackedResults) -> None:
        """An evaluation of the run's checkpoint (eval, probe): metrics.csv holds training only."""

    def close(self) -> None:
        pass


class CSVLogger(RunLogger):
    """metrics.csv in the run directory: one row per log or validation step, blank where not
    measured. The whole file is rewritten atomically, so a killed run never leaves half a row."""

    def __init__(self, run_dir: Path, rows: list[dict[str, Any]]):
        self.path, self.rows = run_dir / METRICS, list(rows)  # rows: those before a resume

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        self.rows.append(dict(row))
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, COLUMNS, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in self.rows)
        write_text(self.path, buffer.getvalue())


class TensorBoardLogger(RunLogger):
    """torch's SummaryWriter into the run directory: one scalar tag per metrics.csv column (TAGS), and the
    run's HParams with its summary."""

    def __init__(
        self,
        run_dir: Path,
        start_step: int,
        subdir: str = "tensorboard",
        *,
        hparams: Mapping[str, HParam] | None = None,
    ):
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops events a killed run logged after the checkpoint it resumes from (the
        # checkpoint's own step was logged before it was saved, and is kept)
        self.writer = SummaryWriter(str(run_dir / subdir), purge_step=start_step + 1 if start_step else None)
        self.hparams = dict(hparams or {})

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.writer.add_text("config", code_block(config))

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        for key, value in row.items():
            if key != "step" and value is not None:
                self.writer.add_scalar(TAGS[key], value, row["step"])
        self.writer.flush()

    def log_summary(self, summary: RunSummary) -> None:
        self.writer.add_text("summary", code_block(summary.as_json()))
        if self.hparams:  # the HParams view reads the run's own val/loss scalars: no copy of them
            from torch.utils.tensorboard.summary import hparams

            final = summary.outcome.final_val_loss if summary.outcome else None
            for event in hparams(self.hparams, {HPARAMS_METRIC: math.nan if final is None else final}):
                self.writer.file_writer.add_summary(event)

    def log_results(self, results: TrackedResults) -> None:
        import matplotlib.image

        for tag, value in results.scalars.items():
            self.writer.add_scalar(tag, value, results.step)
        for tag, png in results.figures.items():
            self.writer.add_image(tag, matplotlib.image.imread(png), results.step, dataformats="HWC")

    def close(self) -> None:
        self.writer.close()


class WandbLogger(RunLogger):
    """A Weights & Biases run. mode=offline writes the run under `dir` and never touches the network
    (`wandb sync DIR` uploads it later); wandb's console capture is off so the progress bar stays."""

    def __init__(
        self,
        run_dir: Path,
        name: str | None,  # None: a resumed run keeps the name it has
        project: str = "posenc",
        *,
        entity: str | None = None,
        mode: str = "online",
        group: str | None = None,
        tags: list[str] | None = None,
        dir: str | None = None,
        run_id: str | None = None,
    ):
        os.environ.setdefault("WANDB_SILENT", "true")
        # WANDB_MODE=offline (or dryrun, its old name) or disabled, W&B's own switch, holds over the
        # config's default online, as it does for wandb.init: with it a run never asks for a login
        asked = {"dryrun": "offline"}.get(os.environ.get("WANDB_MODE", ""), os.environ.get("WANDB_MODE"))
        if mode == "online" and asked in ("offline", "disabled"):
            mode = asked
        if mode != "online":  # no version check, no login prompt, no network
            os.environ["WANDB_MODE"] = mode
        import wandb

        try:
            self.run = wandb.init(
                project=project,
                entity=entity,
                mode=mode,
                group=group,
                tags=list(tags or []),
                name=name,
                id=run_id,  # posenc's run id: eval and probe resume this W&B run by it
                resume="allow" if run_id else None,
                dir=str(dir or run_dir),
                reinit="finish_previous",
                settings=wandb.Settings(console="off", init_timeout=60, x_disable_stats=True),
            )
        except Exception as err:  # no network, no login, a bad entity: wandb's own error types vary
            raise UsageError(
                f"logger=wandb could not start a run ({' '.join(str(err).split())[:160]}); "
                "logger.wandb.mode=offline logs without network or login"
            ) from None

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        self.run.log({TAGS[k]: v for k, v in row.items() if k != "step" and v is not None}, step=row["step"])

    def log_summary(self, summary: RunSummary) -> None:
        self.run.summary.update({k: v for k, v in summary.as_json().items() if v is not None})

    def log_results(self, results: TrackedResults) -> None:
        """Scalars and figures at the next W&B step (a resumed run's steps only go forward), the
        checkpoint's step beside them; the scalars also into the run's summary."""
        import wandb

        images = {tag: wandb.Image(str(png)) for tag, png in results.figures.items()}
        self.run.log({**results.scalars, **images, "trainer/checkpoint_step": results.step})
        self.run.summary.update(results.scalars)

    def close(self) -> None:
        offline = self.run.settings.mode == "offline"
        where = Path(self.run.settings.sync_dir).resolve()
        self.run.finish()
        if offline:
            ui.err.print(
                f"wandb: offline run written to {where}; upload it with: wandb sync {where}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


class Loggers(RunLogger):
    """Several loggers behind one: each call goes to every one, in order."""

    def __init__(self, loggers: list[RunLogger]):
        self.loggers = loggers

    def log_config(self, config):
        for logger in self.loggers:
            logger.log_config(config)

    def log_metrics(self, row):
        for logger in self.loggers:
            logger.log_metrics(row)

    def log_summary(self, summary):
        for logger in self.loggers:
            logger.log_summary(summary)

    def log_results(self, results):
        for logger in self.loggers:
            logger.log_results(results)

    def close(self):
        for logger in self.loggers:
            logger.close()


def check_loggers(chosen: Mapping[str, Any] | None) -> None:
    """Refuse unknown loggers, bad wandb modes and missing packages before any job starts."""
    import importlib.util

    for name, options in (chosen or {}).items():
        if name not in ("csv", *TRACKER_PACKAGES):
            raise UsageError(
                f"logger={name} is not known; choose csv, tensorboard, wandb or a list like "
                "logger=[csv,tensorboard]"
            )
        if name in TRACKER_PACKAGES and importlib.util.find_spec(TRACKER_PACKAGES[name]) is None:
            raise UsageError(
                f"logger={name} needs the {TRACKER_PACKAGES[name]} package: {install_hint('track')}"
            )
        if name == "wandb" and (options or {}).get("mode", "online") not in WANDB_MODES:
            raise UsageError(
                f"logger.wandb.mode={options['mode']} is not known; choose one of: {', '.join(WANDB_MODES)}"
            )


def open_loggers(
    chosen: Mapping[str, Any] | None,
    run_dir: Path,
    rows: list[dict[str, Any]],
    *,
    name: str,
    start_step: int,
    run_id: str | None = None,
    hparams: Mapping[str, HParam] | None = None,
) -> RunLogger:
    """metrics.csv plus every tracker in the `logger` config (csv alone adds nothing)."""
    check_loggers(chosen)
    return Loggers(
        [CSVLogger(run_dir, rows)]
        + trackers(chosen, run_dir, name=name, start_step=start_step, run_id=run_id, hparams=hparams)
    )


def trackers(
    chosen: Mapping[str, Any] | None, run_dir: Path, *, name: str | None, start_step: int, run_id, hparams
) -> list[RunLogger]:
    """The trackers of a `logger` config, opened for the run in `run_dir`."""
    opened: list[RunLogger] = []
    for tracker, options in (chosen or {}).items():
        if tracker == "tensorboard":
            opened.append(TensorBoardLogger(run_dir, start_step, **(options or {}), hparams=hparams))
        elif tracker == "wandb":
            opened.append(WandbLogger(run_dir, name, **(options or {}), run_id=run_id))
    return opened


def send_results(chosen: Mapping[str, Any] | None, run_dir: Path, results: TrackedResults, *, run_id) -> None:
    """An evaluation of a run into the trackers it was trained with (its recorded `logger` config): its
    own TensorBoard directory, its W&B run resumed by id. A run trained without a tracker gets nothing;
    a tracker that cannot be reached now is said in one line, and the results on disk stand."""
    try:
        check_loggers(chosen)
        for tracker in trackers(chosen, run_dir, name=None, start_step=0, run_id=run_id, hparams=None):
            tracker.log_results(results)
            tracker.close()
    except (UsageError, OSError) as err:
        ui.err.print(
            f"{run_dir}: results not sent to its tracker: {err}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def hparams_of(overrides: list[str], config: Mapping[str, Any]) -> dict[str, HParam]:
    """A run's overrides as TensorBoard HParams: key -> the config's value there (a group's option by the
    name it was chosen by: scheme=rope), but those about where, how fast or to which tracker it runs."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    values: dict[str, HParam] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key.startswith(NOT_IN_RUN_NAMES) or override.is_delete():
            continue
        value: Any = config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        values[key] = value if isinstance(value, (bool, int, float, str)) else str(override.value())
    return values


NOT_IN_RUN_NAMES = ("hydra", "logger", "train.threads", "train.resume", "device")  # how, not what, is run


def run_name(overrides: list[str], run_dir: Path, in_sweep: bool) -> str:
    """A sweep's runs are named after their overrides (`scheme=rope,seed=1`); a single run after its
    directory. Overrides about where, how fast or to which tracker a run goes are left out."""
    named = [o for o in overrides if not o.lstrip("+~").startswith(NOT_IN_RUN_NAMES)]
    return ",".join(named) if in_sweep and named else run_dir.name


def code_block(data: Mapping[str, Any]) -> str:
    """Config or summary as a markdown code block (TensorBoard renders text as markdown)."""
    return "```\n" + json.dumps(data, indent=2, default=str) + "\n```"
