"""Resuming a run: `train.resume=RUN` continues RUN in place as it was started, rebuilt from what posenc
itself stored there (never from .hydra/); only RESUMABLE keys may change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc_cli.config.hydra_args import hydra_quoted, override_key
from posenc_cli.core.choices import MULTIRUN_FLAGS
from posenc_cli.core.errors import UsageError
from posenc_cli.core.paths import OUTPUTS
from posenc_cli.rundir.claim import is_locked, new_run_option, resume_value, resuming
from posenc_cli.rundir.layout import CHECKPOINT, HYDRA_RECORD, RUN_FILES, SUMMARY, holds_run, never_started
from posenc_cli.rundir.record import check_own_checkpoint, load_checkpoint
from posenc_cli.rundir.summary import RunStatus, RunSummary, read_summary


def resume_args(args: list[str], outputs: Path = OUTPUTS) -> tuple[list[str], Path | None]:
    """`train.resume=RUN` continues RUN in place, as it was started: only RESUMABLE keys may change.
    `train.resume=true` means the newest run under outputs/runs. The directory is checked here, before
    Hydra runs; Hydra then writes nothing into it but the log it appends to (no .hydra/). Returns the
    arguments as Hydra takes them, and the run continued (None: a fresh run)."""
    if not resuming(args):  # a fresh run: a false-like train.resume is spelt as the one null value
        given = [a for a in args if override_key(a) == "train.resume"]
        return [a for a in args if a not in given] + (["train.resume=null"] if given else []), None
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
    if never_started(run):
        raise UsageError(
            f"train.resume={run} is not a run: it holds only the start of one ({HYDRA_RECORD}/, no {SUMMARY} "
            f"or {CHECKPOINT}), which trained nothing; train a new run there with your overrides and "
            f"{new_run_option(run)}"
        )
    if not run.is_dir() or not holds_run(run):
        raise UsageError(f"train.resume={run} is not a run directory (no summary.json or {CHECKPOINT} in it)")
    for arg in args:  # posenc keys may restate the run's values (checked once composed: restated_values)
        key = override_key(arg)
        if key.startswith("hydra.") and ("=" in arg or arg.startswith("~")) and not arg.startswith("-"):
            raise UsageError(
                f"train.resume={run} continues the run in its own directory, so {key} cannot be given"
            )
    for name in RUN_FILES:
        if (run / name).is_symlink() or ((run / name).exists() and not (run / name).is_file()):
            raise UsageError(
                f"{run / name} is not a plain file; a run's {name} must be one for it to resume (a "
                "symbolic link would be written through)"
            )
    stored_record(run)  # readable, consistent, and this posenc's: checked before anything runs
    if is_locked(run):
        raise UsageError(
            f"{run} is being trained by another process right now; wait for it to finish, "
            "or stop it and then resume"
        )
    kept = [a for a in args if override_key(a) != "train.resume"]
    where = hydra_quoted(str(run))
    return [*kept, f"train.resume={where}", f"hydra.run.dir={where}", "hydra.output_subdir=null"], run


def stored_record(run: Path) -> tuple[dict[str, Any], str]:
    """The config and run id posenc stored in `run`: the checkpoint's once there is one (the reference),
    else summary.json's (a run stopped before its first checkpoint)."""
    summary = read_summary(run)
    source, config, run_id = run / SUMMARY, summary.config, summary.run_id
    if not (run / CHECKPOINT).is_file() and saved_a_checkpoint(summary):
        steps = summary.outcome.steps if summary.outcome and summary.outcome.steps is not None else "some"
        raise UsageError(
            f"{run} has trained {steps} steps but its {CHECKPOINT} is missing; a run "
            f"that saved a checkpoint is never retrained from step 0: restore {CHECKPOINT}, or train a new run"
        )
    if (run / CHECKPOINT).is_file():  # a damaged or foreign checkpoint is named, never resumed from
        checkpoint = load_checkpoint(run / CHECKPOINT)
        check_own_checkpoint(run, checkpoint, summary)
        source, config, run_id = run / CHECKPOINT, checkpoint.record.config, checkpoint.record.run_id
    if not isinstance(config, dict) or not isinstance(run_id, str):
        raise UsageError(
            f"{source} has no config record (written by an older posenc, or edited); it cannot be resumed"
        )
    return config, run_id


def saved_a_checkpoint(summary: RunSummary) -> bool:
    """Whether the run's summary says it saved a checkpoint (a finished run always has: its last step
    saves); only a run stopped before its first checkpoint may start again from step 0."""
    return summary.checkpoint_step is not None or summary.status is RunStatus.FINISHED
