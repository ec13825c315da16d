"""Resuming a run: `train.resume=RUN` continues RUN in place as it was started, rebuilt from what posenc
itself stored there (never from .hydra/); only RESUMABLE keys may change."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from posenc_cli.core.choices import MULTIRUN_FLAGS
from posenc_cli.core.errors import UsageError
from posenc_cli.core.paths import OUTPUTS
from posenc_cli.rundir.claim import is_locked, override_key, resume_value, resuming
from posenc_cli.rundir.layout import CHECKPOINT, SUMMARY, holds_run
from posenc_cli.rundir.record import check_own_checkpoint, load_checkpoint, read_json

RESUMABLE = (
    "train.max_steps",
    "train.threads",
    "train.log_interval",
    "train.eval_interval",
    "train.checkpoint_interval",
    "train.precision",
    "device",
)  # what a resume may change


def resume_args(args: list[str], outputs: Path = OUTPUTS) -> list[str]:
    """`train.resume=RUN` continues RUN in place, as it was started: only RESUMABLE keys may change.
    `train.resume=true` means the newest run under outputs/runs. The directory is checked here, before
    Hydra runs; Hydra then writes nothing into it but the log it appends to (no .hydra/)."""
    if not resuming(args):  # a fresh run: a false-like train.resume is spelt as the one null value
        given = [a for a in args if override_key(a) == "train.resume"]
        return [a for a in args if a not in given] + (["train.resume=null"] if given else [])
    if any(a in MULTIRUN_FLAGS for a in args):
        raise UsageError("train.resume continues one run; it cannot be part of a sweep (-m)")
    value = str(resume_value(args))
    if value in ("true", "True"):
        newest = sorted(p for p in (outputs / "runs").glob("*") if holds_run(p))
        if not newest:
            raise UsageError(
                f"train.resume=true found no run under {outputs / 'runs'}; give train.resume=RUN_DIR"
            )
        value = str(newest[-1])
    run = Path(value)
    if not run.is_dir() or not holds_run(run):
        raise UsageError(f"train.resume={run} is not a run directory (no summary.json or {CHECKPOINT} in it)")
    for arg in args:
        key = override_key(arg)
        if (
            ("=" in arg or arg.startswith("~"))
            and not arg.startswith("-")
            and key not in (*RESUMABLE, "train.resume")
            and not key.startswith("hydra/launcher")
        ):
            raise UsageError(
                f"train.resume={run} continues the run as it was started, so {key} cannot be "
                f"given; what may change: {', '.join(RESUMABLE)}"
            )
    stored_record(run)  # readable, consistent, and this posenc's: checked before anything runs
    if is_locked(run):
        raise UsageError(
            f"{run} is being trained by another process right now; wait for it to finish, "
            "or stop it and then resume"
        )
    kept = [a for a in args if override_key(a) != "train.resume"]
    return [*kept, f"train.resume={run}", f"hydra.run.dir={run}", "hydra.output_subdir=null"]


def stored_record(run: Path) -> tuple[dict[str, Any], str]:
    """The config and run id posenc stored in `run`: the checkpoint's once there is one (the reference),
    else summary.json's (a run stopped before its first checkpoint)."""
    summary = read_json(run / SUMMARY)
    source, config, run_id = run / SUMMARY, summary.get("config"), summary.get("run_id")
    if (run / CHECKPOINT).is_file():  # a damaged or foreign checkpoint is named, never resumed from
        checkpoint = load_checkpoint(run / CHECKPOINT)
        check_own_checkpoint(run, checkpoint, summary)
        source, config, run_id = run / CHECKPOINT, checkpoint.record.config, checkpoint.record.run_id
    if not isinstance(config, dict) or not isinstance(run_id, str):
        raise UsageError(
            f"{source} has no config record (written by an older posenc, or edited); it cannot be resumed"
        )
    return config, run_id


def resumed_config(composed: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The config a resume trains with: the stored one, plus the RESUMABLE keys given on the command line."""
    run = Path(composed["train"]["resume"])
    config = copy.deepcopy(stored_record(run)[0])
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    for key in RESUMABLE:
        if key in given:
            group, _, leaf = key.rpartition(".")
            (config[group] if group else config)[leaf] = (composed[group] if group else composed)[leaf]
    config["train"]["resume"] = str(run)
    return config
