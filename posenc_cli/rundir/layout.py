"""The run directory's layout: the names of its files, in one place, and what makes a directory a run.

RUN/.hydra/         Hydra's record of the composed config and overrides (never read back; written first,
                    so alone it marks a start that never wrote a summary, which is not a run)
RUN/checkpoint.pt   weights, optimizer, RNG streams, the run's record (rundir.record)
RUN/summary.json    what the run is and how it ended (rundir.summary: RunSummary)
RUN/metrics.csv     a row per log interval (written by training.tracking, read by rundir.summary)
RUN/train.log       the log
RUN/.lock           held by the process that trains the run (rundir.claim)
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINT = "checkpoint.pt"
SUMMARY = "summary.json"
METRICS = "metrics.csv"
LOCK = ".lock"
LOG = "train.log"
HYDRA_RECORD = ".hydra"
RUN_FILES = (SUMMARY, CHECKPOINT, METRICS, LOG)  # what a resume reads or appends to
# Either of them: the directory holds a run, only ever continued by a resume. Not .hydra/ alone: a start
# that stopped before its summary (a full disk, a kill during the pre-flight) trained nothing and
# recorded nothing a resume could rebuild it from, so a new run may take its place.
RUN_MARKERS = (SUMMARY, CHECKPOINT)


def holds_run(path: Path) -> bool:
    """Whether `path` holds a run: a directory only a resume may continue."""
    return any((path / marker).exists() for marker in RUN_MARKERS)


def never_started(path: Path) -> bool:
    """Whether `path` holds only the start of a run: Hydra's record, and no summary or checkpoint."""
    return (path / HYDRA_RECORD).exists() and not holds_run(path)


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds a run that can be read: a summary or a checkpoint."""
    return (path / SUMMARY).is_file() or (path / CHECKPOINT).is_file()
