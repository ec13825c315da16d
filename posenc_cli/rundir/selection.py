"""Which runs a command works on: run directories, sweeps and globs as given, or the latest runs; and
which of them have finished training."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError
from posenc_cli.core.paths import OUTPUTS
from posenc_cli.rundir.layout import CHECKPOINT, SUMMARY, is_run_dir
from posenc_cli.rundir.summary import RunStatus, finished, read_summary


def find_runs(path: Path) -> list[Path]:
    """A run directory itself, or every run directory below `path` (a sweep, or outputs/)."""
    if is_run_dir(path):
        return [path]
    return sorted({p.parent for p in path.rglob(SUMMARY)} | {p.parent for p in path.rglob(CHECKPOINT)})


def latest_runs(outputs: Path) -> tuple[list[Path], str]:
    """The default selection, and a sentence saying why: the newest sweep with a finished run if it is
    newer than every single run, otherwise each scheme's newest finished single run (names start with
    a sortable time)."""
    sweeps = sorted(
        p for p in (outputs / "sweeps").glob("*") if p.is_dir() and any(map(finished, find_runs(p)))
    )
    singles = sorted(p for p in (outputs / "runs").glob("*") if is_run_dir(p))
    if not sweeps and not singles:
        raise UsageError(
            f"no runs found under {outputs}/; train some first (posenc train ...) or name run directories"
        )
    if sweeps and (not singles or sweeps[-1].name >= singles[-1].name[: len(sweeps[-1].name)]):
        return find_runs(sweeps[-1]), f"the latest sweep, {sweeps[-1]}"
    newest: dict[str, Path] = {}
    for run in singles:  # a scheme's newest run that finished: a newer failed one never hides the scheme
        try:
            summary = read_summary(run)
        except UsageError:  # an unreadable summary: finished_runs names it and skips it
            newest[run.name] = run
            continue
        scheme = summary.description.scheme if summary.description else None
        scheme = run.name if scheme is None else scheme
        if summary.status is RunStatus.FINISHED or scheme not in newest:
            newest[scheme] = run
    return sorted(newest.values()), f"the latest finished run of each scheme under {outputs / 'runs'}"


def select_runs(paths: list[str], outputs: Path = OUTPUTS) -> tuple[list[Path], str]:
    """Run directories from paths, sweep directories or globs; the latest runs when none are given."""
    if not paths:
        return latest_runs(outputs)
    selected: list[Path] = []
    for given in paths:
        matches = [Path(p) for p in sorted(glob.glob(given))] or [Path(given)]
        for match in matches:
            if not match.exists():
                raise UsageError(f"{given} does not exist; give run directories, sweep directories or a glob")
            found = find_runs(match) if match.is_dir() else []
            if not found:
                raise UsageError(
                    f"{match} is not a run or a sweep: no summary.json or {CHECKPOINT} in or below it"
                )
            selected += [r for r in found if r.resolve() not in {s.resolve() for s in selected}]
    return selected, "the runs you named"


@dataclass(frozen=True)
class Skipped:
    """A run that was selected but not worked on, and why: the output set names it, so a run the user
    named is never only a line on stderr."""

    path: Path
    why: str


def finished_runs(paths: list[str], verb: str) -> tuple[list[Path], str, list[Skipped]]:
    """select_runs split into the runs that finished training and the others (each skipped one is
    named on stderr too); `verb` (evaluate, probe) words the error when none is left."""

    selected, why = select_runs(paths)
    finished, skipped = [], []
    for path in selected:
        try:
            summary = read_summary(path)
        except UsageError as err:
            if len(selected) == 1:
                raise
            skipped.append(Skipped(path, str(err)))
            continue
        if summary.status is not RunStatus.FINISHED:
            message = f": {summary.message}" if summary.message else ""
            skipped.append(Skipped(path, f"its status is {summary.status}{message}"))
        else:
            finished.append(path)
    for skip in skipped:
        ui.err.print(f"skipping {skip.path}: {skip.why}", highlight=False, soft_wrap=True)
    if not finished:
        raise UsageError(f"none of the selected runs has finished training; nothing to {verb}")
    return finished, why, skipped
