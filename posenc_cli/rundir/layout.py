"""The run directory's layout: the names of its files, in one place, and what makes a directory a run.

RUN/.hydra/         Hydra's record of the composed config and overrides (never read back)
RUN/checkpoint.pt   weights, optimizer, RNG streams, the run's record (rundir.record)
RUN/summary.json    what the run is and how it ended (rundir.record)
RUN/metrics.csv     a row per log interval
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
RUN_FILES = (SUMMARY, CHECKPOINT, METRICS, LOG)  # what a resume reads or appends to
RUN_MARKERS = (SUMMARY, CHECKPOINT, ".hydra")  # any of them: the directory holds a run, never started over


def holds_run(path: Path) -> bool:
    """Whether `path` holds a run (or the start of one): a directory only a resume may continue."""
    return any((path / marker).exists() for marker in RUN_MARKERS)


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds a run that can be read: a summary or a checkpoint."""
    return (path / SUMMARY).is_file() or (path / CHECKPOINT).is_file()
